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
//   times (float64), which replace that series' points from index `from` on; {type: "beat"}
//   while a run is live; {type: "busy"} / {type: "idle"} around each cell; and
//   {type: "answer", id, state?, parts} to a view's request;
// - custom messages from a view: {type: "pull", id, seq, have} every timing.pull_ms, saying
//   which state and points it holds (have: {run: {tag: [gen, n, last step, last wall]}}), and
//   {type: "button", name, ...the same} for Stop, Resume and Save.
// A part that does not fit what a view holds (a push it missed) is skipped and the link asks at
// once. The health is "gone" when the requests went unanswered and nothing came for
// timing.dead_after_ms, and "busy" when they wait while the kernel is heard from or runs a cell
// (comm messages wait for the running cell where the frontend has no kernel subshells).

const DEFAULT_TIMING = {pull_ms: 2000, beat_ms: 1000, dead_after_ms: 8000};
let seriesVersions = 0;

const links = new WeakMap();

// The link of `model`: made for its first view, dropped when its last one detaches.
export function linkOf(model) {
  let link = links.get(model);
  if (!link) {
    link = new Link(model);
    links.set(model, link);
  }
  return link;
}

class Link {
  constructor(model) {
    this.model = model;
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
    this.onState = () => this.take(model.get("state"));
    this.onMsg = (msg, buffers) => this.receive(msg, buffers);
    model.on("change:state", this.onState);
    model.on("msg:custom", this.onMsg);
    this.timer = setInterval(() => this.check(), 250);
  }

  attach(view) {
    this.views.add(view);
    if (this.views.size === 1) this.ask();
  }

  detach(view) {
    this.views.delete(view);
    if (this.views.size) return;
    clearInterval(this.timer);
    this.model.off("change:state", this.onState);
    this.model.off("msg:custom", this.onMsg);
    links.delete(this.model);
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
    if (msg.parts) this.apply(msg.parts, buffers);
    this.check();
  }

  // Applies the parts of a push or an answer: a part replaces a series' points from `from` on
  // when it fits what is held (from 0, or the same generation and no gap); one that does not
  // is skipped, and the link asks for what it lacks.
  apply(parts, buffers) {
    const view = buffers && buffers.length ? buffers[0] : null;
    // Copied out: a DataView's offset need not be a multiple of 8.
    const all = view ? new Float64Array(view.buffer.slice(view.byteOffset,
                                                          view.byteOffset + view.byteLength))
                     : new Float64Array(0);
    const changed = new Set();
    let at = 0;
    for (const part of parts) {
      const take = () => {
        const out = Array.from(all.subarray(at, at + part.n));
        at += part.n;
        return out;
      };
      const steps = take(), values = take(), walls = take();
      if (!this.runs.has(part.run)) this.runs.set(part.run, new Map());
      const tags = this.runs.get(part.run);
      const old = tags.get(part.tag);
      let series;
      if (part.from === 0) {
        series = {steps, values, walls};
      } else if (old && old.gen === part.gen && old.steps.length >= part.from) {
        series = {steps: old.steps.slice(0, part.from).concat(steps),
                  values: old.values.slice(0, part.from).concat(values),
                  walls: old.walls.slice(0, part.from).concat(walls)};
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

  // Asks when due, and says how the kernel is: alive (it answers), busy (it is heard from or
  // runs a cell, but does not answer), gone (nothing for dead_after_ms).
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
    } else if (this.cellRunning || quiet <= t.dead_after_ms) {
      health = this.answered === null && !this.cellRunning ? "waiting" : "busy";
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
