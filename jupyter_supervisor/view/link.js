// The link between the kernel (panel.py's side) and the views of one model, which share it: it
// holds the newest state and the points the views draw, asks the kernel for what they lack,
// sends their buttons, and says how the kernel is. A view attaches to it (linkOf(model).attach)
// and hears of it through view.onLink(what): "state", "series" (the tags whose points changed)
// or "health". What the views read of it: state, runs (run -> Map(tag -> series)), health,
// answered (null until the kernel first answered); what they keep on it, for all the views of
// the model: noKernel, notified, goneNotified.
//
// What travels:
// - the `state` trait: what the panel says (header, progress, checkpoint line, timeline, best
//   values, which buttons work), numbered by `seq`, with what both sides must agree on: the
//   number format, the palette and the timing of the link;
// - custom messages from the kernel: {type: "series", parts} pushed while a run is live, with
//   one buffer holding, for each part {run, tag, gen, from, n}, n steps, n values and n wall
//   times (float64), which replace that series' points from index `from` on (for each part
//   marked `merged`, whose points are means of several, the buffer ends with n minimums,
//   maximums and counts as float32: the min/max band); {type: "beat"}
//   while a run is live; {type: "busy"} / {type: "idle"} around each cell; and
//   {type: "answer", id, state?, parts} to a view's request; {type: "export", id, tag, parts}
//   to a chart's download, every point of the tag ({run, n} parts: steps, values, walls);
// - custom messages from a view: {type: "pull", id, seq, have} every timing.pull_ms, saying
//   which state and points it holds (have: {run: {tag: [gen, n, last step, last wall]}}), and
//   {type: "button", name, ...the same} for Stop, Resume and Save, and {type: "export", id,
//   tag} for a download.
// A part that does not fit what a view holds (a push it missed) is skipped and the link asks at
// once. The health is "gone" when the requests went unanswered and nothing came for
// timing.dead_after_ms, and "busy" when they wait while the kernel said a cell runs (comm
// messages wait for the running cell where the frontend has no kernel subshells); a kernel
// heard from whose answer is late is "alive".

const DEFAULT_TIMING = {pull_ms: 2000, beat_ms: 1000, dead_after_ms: 8000};
let seriesVersions = 0;

const links = new Map();

// `count` numbers (null: all there are) of a message's one buffer (a DataView) from byte
// `offset`, copied out: its offset need not be a multiple of 8.
function floats(buffers, offset = 0, count = null, Type = Float64Array) {
  const view = buffers && buffers.length ? buffers[0] : null;
  if (!view) return new Type(0);
  const start = view.byteOffset + Math.min(offset, view.byteLength);
  const end = count === null ? view.byteOffset + view.byteLength
    : Math.min(start + count * Type.BYTES_PER_ELEMENT, view.byteOffset + view.byteLength);
  return new Type(view.buffer.slice(start, end));
}

// The link of the panel or comparison `model` shows: made for its first view, dropped when its
// last one detaches. anywidget hands each view a model of its own (a proxy of one widget
// model): the views of one panel are told apart from others by the key of its state.
export function linkOf(model) {
  const key = (model.get("state") || {}).key;
  let link = key === undefined ? undefined : links.get(key);
  if (!link) {
    link = new Link(model, key);
    if (key !== undefined) links.set(key, link);
  }
  return link;
}

class Link {
  constructor(model, key) {
    this.key = key;
    this.views = new Set();
    this.runs = new Map();         // run -> Map(tag -> {gen, version, steps, values, walls})
    this.state = model.get("state") || {};
    this.heard = null;             // Date.now() when anything last came from the kernel
    this.answered = null;          // ... when the last answer came
    this.asked = null;             // ... when the request in flight went out (null: none)
    this.lastAsk = -Infinity;
    this.requests = 0;
    this.cellRunning = false;      // a "busy" came without its "idle"
    this.missed = false;           // a part did not fit: ask at once
    this.noKernel = false;         // a notebook's saved widget state: nothing to ask
    this.health = "waiting";       // alive | busy | gone | waiting (never answered yet)
    this.notified = null;          // the alert ids seen (null: none looked at yet)
    this.goneNotified = false;     // "kernel gone" was notified (until it answers again)
    this.exports = new Map();      // export request id -> its promise's resolve
    this.nonce = Math.random().toString(36).slice(2);
    this.onState = () => this.take(this.model.get("state"));
    this.onMsg = (msg, buffers) => this.receive(msg, buffers);
    this.bind(model);
    this.timer = setInterval(() => this.check(), 250);
  }

  // Listens through `model`, one view's: anywidget drops a view's listeners with the view.
  bind(model) {
    if (this.model) {
      this.model.off("change:state", this.onState);
      this.model.off("msg:custom", this.onMsg);
    }
    this.model = model;
    model.on("change:state", this.onState);
    model.on("msg:custom", this.onMsg);
  }

  attach(view) {
    this.views.add(view);
    if (this.views.size === 1) this.ask();
  }

  detach(view) {
    this.views.delete(view);
    if (this.views.size) {
      if (view.model === this.model) this.bind(this.views.values().next().value.model);
      return;
    }
    clearInterval(this.timer);
    this.model.off("change:state", this.onState);
    this.model.off("msg:custom", this.onMsg);
    if (links.get(this.key) === this) links.delete(this.key);
  }

  timing() {
    return {...DEFAULT_TIMING, ...(this.state.timing || {})};
  }

  notify(what, detail) {
    for (const view of this.views) view.onLink(what, detail);
  }

  take(state) {
    if (!state || !Object.keys(state).length) return;
    const seq = this.state.seq;
    if (seq !== undefined && state.seq !== undefined && state.seq < seq) return;  // older
    this.state = state;
    this.notify("state");
  }

  // What this model's views hold: {run: {tag: [gen, n, last step, last wall]}}.
  have() {
    const have = {};
    for (const [run, tags] of this.runs) {
      have[run] = {};
      for (const [tag, s] of tags) {
        const last = s.steps.length - 1;
        have[run][tag] = [s.gen, s.steps.length, s.steps[last], s.walls[last]];
      }
    }
    return have;
  }

  send(content) {
    try {
      this.model.send(content);
      return true;
    } catch (error) {  // no comm: a notebook's saved widget state, or a closed kernel
      this.noKernel = true;
      return false;
    }
  }

  request(extra) {
    this.requests += 1;
    this.lastAsk = Date.now();
    if (this.asked === null) this.asked = this.lastAsk;
    this.send({...extra, id: this.requests, seq: this.state.seq ?? null, have: this.have()});
  }

  ask() {
    this.missed = false;
    this.request({type: "pull"});
  }

  press(name) {
    this.request({type: "button", name});
  }

  // Every point of `tag`, of each run, as the kernel reads them from the event files: a
  // promise of Map(run -> {steps, values, walls, merged}), or null when the kernel did not
  // answer within dead_after_ms (or failed to read them).
  exportPoints(tag) {
    this.requests += 1;
    // The answer goes to every page that shows the model: the id names this link's request.
    const id = `${this.nonce}:${this.requests}`;
    return new Promise((resolve) => {
      const timer = setTimeout(() => this.exports.delete(id) && resolve(null),
                               this.timing().dead_after_ms);
      this.exports.set(id, (points) => { clearTimeout(timer); resolve(points); });
      if (!this.send({type: "export", id, tag})) this.exports.get(id)(null);
    });
  }

  exported(msg, buffers) {
    const resolve = this.exports.get(msg.id);
    if (!resolve) return;
    this.exports.delete(msg.id);
    if (msg.failure) { resolve(null); return; }
    const all = floats(buffers);
    const points = new Map();
    let at = 0;
    for (const part of msg.parts) {
      const [steps, values, walls] = [0, 1, 2].map(() => all.subarray(at, (at += part.n)));
      points.set(part.run, {steps, values, walls, merged: part.merged});
    }
    resolve(points);
  }

  receive(msg, buffers) {
    const now = Date.now();
    this.heard = now;
    if (msg.type === "busy") this.cellRunning = true;
    else if (msg.type === "idle") this.cellRunning = false;
    else if (msg.type === "answer") {
      this.answered = now;
      this.asked = null;
      this.cellRunning = false;   // answered: no cell holds the comm messages
      if (msg.state) this.take(msg.state);
    }
    if (msg.type === "export") this.exported(msg, buffers);
    else if (msg.parts) this.apply(msg.parts, buffers);
    this.check();
  }

  // Applies the parts of a push or an answer: a part replaces a series' points from `from` on
  // when it fits what is held (from 0, or the same generation and no gap); one that does not
  // is skipped, and the link asks for what it lacks.
  apply(parts, buffers) {
    const wide = parts.reduce((n, part) => n + 3 * part.n, 0);
    const all = floats(buffers, 0, wide), band = floats(buffers, 8 * wide, null, Float32Array);
    const changed = new Set();
    const read = [[all, 0], [band, 0]];   // each array and how far it was read
    for (const part of parts) {
      const take = (which) => {
        const [source, at] = read[which];
        read[which][1] += part.n;
        return Array.from(source.subarray(at, at + part.n));
      };
      const got = {steps: take(0), values: take(0), walls: take(0)};
      // A merged part's band; a series of one generation is merged throughout.
      if (part.merged) Object.assign(got, {mins: take(1), maxs: take(1), counts: take(1)});
      if (!this.runs.has(part.run)) this.runs.set(part.run, new Map());
      const tags = this.runs.get(part.run);
      const old = tags.get(part.tag);
      let series;
      if (part.from === 0) {
        series = got;
      } else if (old && old.gen === part.gen && old.steps.length >= part.from &&
                 !old.mins === !got.mins) {
        series = Object.fromEntries(Object.keys(got).map(
          (key) => [key, old[key].slice(0, part.from).concat(got[key])]));
      } else {
        this.missed = true;
        continue;
      }
      seriesVersions += 1;
      Object.assign(series, {gen: part.gen, version: seriesVersions});
      if (series.steps.length) tags.set(part.tag, series); else tags.delete(part.tag);
      changed.add(part.tag);
    }
    if (changed.size) this.notify("series", changed);
  }

  // Asks when due, and says how the kernel is: alive (it answers, or is heard from), busy (it
  // said a cell runs, and does not answer), gone (nothing for dead_after_ms).
  check() {
    const t = this.timing(), now = Date.now();
    if (!document.hidden && !this.noKernel) {
      const due = this.asked === null ? now - this.lastAsk >= t.pull_ms || this.missed
        : now - this.lastAsk >= t.dead_after_ms;  // the request may have been lost: again
      if (due) this.ask();
    }
    const waiting = this.asked === null ? 0 : now - this.asked;
    const quiet = this.heard === null ? Infinity : now - this.heard;
    let health = this.health;
    if (waiting <= t.dead_after_ms / 2) {
      health = this.answered === null ? "waiting" : "alive";
    } else if (this.cellRunning) {
      health = "busy";   // only the kernel's own word says that a cell holds it
    } else if (quiet <= t.dead_after_ms) {
      health = this.answered === null ? "waiting" : "alive";   // heard from: a late answer
    } else if (waiting > t.dead_after_ms) {
      health = "gone";
    }
    if (this.noKernel) health = "gone";
    if (health !== this.health) {
      this.health = health;
      this.notify("health");
    }
  }
}
