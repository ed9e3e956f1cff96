"""What the panel says, as text and plain data, derived from a run (``PanelRun``) and a
snapshot of its history: the header, the progress, the checkpoint line, the timeline, the best
values, what deserves a notification (``panel_state``, the widget's ``state`` trait), the run as
text where no widget renders (``text_status``, ``text_summary``) and the record a saved notebook
keeps (``record_html``). What the browser must format as Python does (``VALUE_DIGITS``,
``PALETTE``) is decided here and travels in the state. No widget, no TensorFlow, no matplotlib.
"""
import base64
import html
import math
import os
import re
import time
import unicodedata
from typing import Callable, List, Optional, Protocol, Sequence, Tuple

import numpy as np

from .. import events, names, preemption
from ..finite import NonFiniteError
from .history import SessionStarted, shown_in_timeline
from .stall import StallEnded, Stalled

ERROR_MAX_CHARS = 20_000
KEPT_SHOWN = 8
TIMELINE_SHOWN = 12
# Significant digits of a scalar value wherever it is shown (Python's "g" format; scales.js
# formats the same way with the digits the state gives it).
VALUE_DIGITS = 5
# The curves' colours, run after run: matplotlib's tab10, so the panel looks like the user's
# other plots. The saved notebook's image (plots.py) and the browser (through the state) use it.
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
           "#7f7f7f", "#bcbd22", "#17becf")

# The tone of each status, which the browser turns into the theme's colour of that name.
_TONES = {names.STARTING: "muted", names.RUNNING: "success", names.STOPPING: "warn",
          names.STOPPED: "brand", names.FINISHED: "success", names.FAILED: "error"}


class _RunConfig(Protocol):
    init_fn: Optional[Callable]   # --init-fn, or None


class PanelRun(Protocol):
    """What the panel reads of a run and calls on it (``notebook.run.TrainingRun`` is one; the
    view imports no run). ``history`` is its ``RunHistory``; the ``can_*`` flags say which
    buttons work; ``stop``, ``resume`` and ``save_now`` are what they call."""

    name: str
    logdir: Optional[str]          # None: nothing is saved (or a worker: the chief saves)
    max_steps: Optional[int]
    role: str                      # 'local', 'chief' or 'worker'
    role_text: str                 # "chief on grpc://...", "worker 1 of 2"; '' when local
    config: _RunConfig
    history: object
    can_stop: bool
    can_resume: bool
    can_save: bool

    def stop(self, wait: bool = True) -> bool:
        """Asks the run to stop (``wait=False``: returns at once)."""

    def resume(self) -> None:
        """Starts the run again from its newest checkpoint."""

    def save_now(self) -> Optional[str]:
        """Writes a checkpoint now."""
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")


def format_step(step: float, _position=None) -> str:
    """A compact step label: 950, 12k, 1.5M."""
    step = float(step)
    for limit, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(step) >= limit:
            text = f"{step / limit:.1f}".rstrip("0").rstrip(".")
            return text + suffix
    return f"{step:.0f}"


def format_value(value: float) -> str:
    """A scalar value in ``VALUE_DIGITS`` significant digits: 0.012346, 123.46, 1.2346e+05."""
    if value != value:
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return f"{value:.{VALUE_DIGITS}g}"


def format_duration(seconds: Optional[float]) -> str:
    """'42 s', '3 min 05 s', '2 h 03 min', '1 d 04 h'."""
    if seconds is None or seconds != seconds or math.isinf(seconds):
        return "-"
    seconds = int(max(0.0, seconds))
    if seconds < 60:
        return f"{seconds} s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min {seconds:02d} s"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours} h {minutes:02d} min"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours:02d} h"


def format_ago(seconds: float) -> str:
    """How long ago, coarse enough to change rarely: 'just now', '30 s ago', '5 min ago'."""
    seconds = max(0.0, seconds)
    if seconds < 10:
        return "just now"
    if seconds < 60:
        return f"{int(seconds) // 10 * 10} s ago"
    if seconds < 3600:
        return f"{int(seconds // 60)} min ago"
    hours, minutes = divmod(int(seconds // 60), 60)
    return f"{hours} h {minutes:02d} min ago"


def format_rate(steps_per_sec: Optional[float]) -> str:
    """'1,234 steps/s', '12.3 steps/s', '0.052 steps/s'."""
    if steps_per_sec is None or steps_per_sec != steps_per_sec:
        return "- steps/s"
    if steps_per_sec >= 100:
        return f"{steps_per_sec:,.0f} steps/s"
    if steps_per_sec >= 1:
        return f"{steps_per_sec:.1f} steps/s"
    return f"{steps_per_sec:.2g} steps/s"


def _clock_time(wall_time: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(wall_time))


def stalled_text(stalled) -> str:
    """'stalled since 03:12' (hours and minutes, as a person says it)."""
    return "stalled since " + time.strftime("%H:%M", time.localtime(stalled.since))


def stall_line(run, snap, wall_now: float) -> str:
    """Where no widget renders: one line on the run's stall now ('' without one), e.g.
    "Run 'fit' is stalled since 03:12: no step since step 1,234 (12 min)."; a terminal rings
    its bell for it (``bell``)."""
    stalled = snap.stalled
    if stalled is None:
        return ""
    return (f"Run {run.name!r} is {stalled_text(stalled)}: no step since step "
            f"{_step_text(stalled.step)} ({format_duration(wall_now - stalled.since)}).")


def bell(stream) -> str:
    """The terminal bell (BEL) where ``stream`` is a terminal, else '' (a notebook's output
    would show it as a stray character)."""
    isatty = getattr(stream, "isatty", None)
    try:
        return "\a" if isatty is not None and isatty() else ""
    except ValueError:  # a closed stream
        return ""


def _step_text(step: Optional[int]) -> str:
    return "-" if step is None else f"{step:,}"


def status_label(snap) -> str:
    """The status as the header says it: before the session is ready, what it waits for; a
    stall."""
    if snap.active and not snap.ready:
        if snap.waiting_for_chief:
            return "waiting for chief"
        if snap.restoring:
            return f"restoring {os.path.basename(snap.restoring)}"
    if snap.stalled is not None:
        return stalled_text(snap.stalled)
    return snap.status


def _running(run, snap) -> bool:
    # Stepping and not asked to stop: only then a rate and an ETA mean something. A stall
    # replaces both (the rate measured before it is not the rate now); they come back with
    # the steps.
    return snap.active and snap.ready and bool(run.can_stop) and snap.stalled is None


def _done_of_total(snap, max_steps: Optional[int]) -> Tuple[int, Optional[int]]:
    """(steps done, steps in all) for the progress bar: of --max-steps, or else of a Keras fit's
    own epochs and batches."""
    if max_steps:
        return min(snap.step or 0, max_steps), max_steps
    fit = snap.progress
    if fit is not None and None not in (fit.epoch, fit.epochs, fit.batch, fit.batches):
        return fit.epoch * fit.batches + fit.batch, fit.epochs * fit.batches
    return 0, None


def _fit_text(fit) -> str:
    """'epoch 3/50, batch 120/469' of a Keras fit (1-based, as Keras prints it), or ''."""
    if fit is None or fit.epoch is None:
        return ""
    epoch = f"epoch {fit.epoch + 1}" + (f"/{fit.epochs}" if fit.epochs else "")
    if fit.batch is None:
        return epoch
    return f"{epoch}, batch {fit.batch}" + (f"/{fit.batches}" if fit.batches else "")


def text_status(run, snap=None, elapsed: Optional[float] = None) -> str:
    """One line: name, status (or its stall), step (of max), fit's position at that step,
    rate, elapsed time and, for a task of a cluster, its role and master."""
    snap = snap or run.history.snapshot()
    text = f"{run.name}: {status_label(snap)}"
    if snap.step is not None:
        text += f" at step {snap.step:,}"
        if run.max_steps is not None:
            text += f" of {run.max_steps:,}"
    parts = [format_duration(snap.elapsed if elapsed is None else elapsed)]
    if _running(run, snap) and snap.steps_per_sec is not None:
        parts.insert(0, format_rate(snap.steps_per_sec))
    fit = _fit_text(snap.progress)
    if fit:
        parts.insert(0, fit)
    if run.role_text:
        parts.append(run.role_text)
    return f"{text} ({', '.join(parts)})"


def _no_logdir_text(run) -> str:
    if run.role == "worker":
        return ("This task saves nothing: the checkpoints and summaries are the chief's, "
                "and it restores the chief's.")
    return ("No logdir: nothing is saved. No checkpoint and no event file is written; a stop "
            "or a crash loses this run's training. Give --logdir to make it resumable.")


def rollbacks_text(rollbacks) -> str:
    """One line on a session's rollbacks (``on_nan="rollback"``): how many, and the last."""
    last = rollbacks[-1]
    times = "once" if len(rollbacks) == 1 else f"{len(rollbacks)} times"
    return (f"Rolled back {times} (at most {last.limit}); last: not finite at step "
            f"{_step_text(last.step)} ({last.problem}), restored "
            f"{os.path.basename(last.path)} (step {_step_text(last.restored_step)}).")


def _checkpoint_label(name: str) -> str:
    step = names.checkpoint_step(name)
    return name if step is None else f"{step:,}"


def checkpoint_lines(run, snap, wall_now: float, ago: bool = True) -> List[str]:
    """The checkpoint line (newest, how many, where the session started; ``ago``: how long ago
    while the run is live), the best checkpoint kept (``--keep-best``), what retention keeps,
    and the rollbacks."""
    if run.logdir is None:
        return []
    if snap.checkpoints:
        newest = snap.checkpoints[0]
        count = ("" if snap.checkpoint_count <= 1
                 else f" ({snap.checkpoint_count} written by this run)")
        # How long ago only while the run is active: a run that ended is shown (and saved in
        # the notebook) as it ended, and "just now" would stay there for good.
        since = f" ({format_ago(wall_now - newest.wall_time)})" if snap.active and ago else ""
        line = (f"Checkpoint: step {_step_text(newest.step)} at {_clock_time(newest.wall_time)}"
                f"{since}, written in {newest.seconds:.2f} s, "
                f"{os.path.basename(newest.path)}{count}")
    else:
        line = "No new checkpoint yet" if snap.ready else "No checkpoint yet"
    if snap.restored_from:
        line += f" | restored from {os.path.basename(snap.restored_from)}"
    elif snap.ready:
        line += " | initialized by --init-fn" if run.config.init_fn else " | initialized"
    lines = [line]
    if snap.best is not None:
        lines.append(best_text(snap.best))
    kept = [os.path.basename(path) for path in reversed(snap.kept)]
    if not kept and snap.checkpoints:
        kept = [os.path.basename(info.path) for info in reversed(snap.checkpoints)]
    if kept:
        labels = [_checkpoint_label(name) for name in kept[-KEPT_SHOWN:]]
        more = f"{len(kept) - KEPT_SHOWN} older, " if len(kept) > KEPT_SHOWN else ""
        lines.append(f"kept ({len(kept)}): {more}{', '.join(reversed(labels))}")
    if snap.rollbacks:
        lines.append(rollbacks_text(snap.rollbacks))
    if snap.write_stalled is not None and snap.active:
        lines.append(write_stalled_text(snap.write_stalled, wall_now))
    return lines


def write_stalled_text(stalled: events.WriteStalled, wall_now: float) -> str:
    """'checkpoint write to /runs/fit/model.ckpt-1200 stalled for 3 min (step 1,200);
    training goes on'."""
    secs = max(0.0, wall_now - stalled.since)
    took = f"{int(secs // 60)} min" if secs >= 60 else f"{int(secs)} s"
    return (f"checkpoint write to {stalled.path} stalled for {took} (step "
            f"{_step_text(stalled.step)}); training goes on")


def best_text(best: events.BestKept) -> str:
    """'best val_loss 0.2311 (min) at step 300, the end of epoch 3: model.ckpt-300'."""
    return f"best {best.text()}: {os.path.basename(best.path)}"


def _error_line(error: str) -> str:
    lines = [line for line in _ANSI.sub("", error).splitlines() if line.strip()]
    return lines[-1].strip() if lines else ""


def _happenings(run, snap, with_error: bool) -> List[Tuple[str, float, str]]:
    """(alert kind or '', wall time, text) of every event the history holds, oldest first."""
    out = []
    non_finite = False  # the session's Stopped record says a model that is not finite ended it
    for record in snap.timeline:
        if isinstance(record, SessionStarted):
            non_finite = False
        elif isinstance(record, events.Stopped):
            non_finite = isinstance(record.exception, NonFiniteError)
        if not shown_in_timeline(record):
            continue
        when, kind = record.wall_time, ""
        if isinstance(record, SessionStarted):
            if record.restored_from:
                lost = "" if not record.lost else f"; {record.lost:,} steps since lost"
                text = (f"resumed from {os.path.basename(record.restored_from)} "
                        f"(step {_step_text(record.step)}{lost})")
            else:
                text = f"started at step {_step_text(record.step)} (initialized)"
        elif isinstance(record, Stalled):
            kind = names.ALERT_STALLED
            text = f"{stalled_text(record)}, at step {_step_text(record.step)}"
        elif isinstance(record, StallEnded):
            kind = names.ALERT_STALL_ENDED
            text = (f"steps again at step {_step_text(record.step)}, after "
                    f"{format_duration(record.secs)} without one")
        elif isinstance(record, events.RolledBack):
            text = (f"rolled back: not finite at step {_step_text(record.step)} "
                    f"({record.problem}), restored {os.path.basename(record.path)}")
        elif isinstance(record, events.Stopped):
            if preemption.is_notice(record.why):
                text = _notice_text(run, snap, record)
            else:
                text = f"input ran out at step {_step_text(record.step)}"
        elif record.status == names.STOPPING:
            text = f"stop requested at step {_step_text(record.step)}"
        elif record.status == names.FINISHED:
            kind = names.FINISHED
            reached = (run.max_steps is not None and record.step is not None
                       and record.step >= run.max_steps)
            text = f"finished at step {_step_text(record.step)}" + (
                " (--max-steps reached)" if reached else "")
        elif record.status == names.FAILED:
            kind = names.ALERT_NAN if non_finite else names.FAILED
            text = f"failed at step {_step_text(record.step)}"
            line = _error_line(snap.error) if with_error else ""
            if line:
                text += f": {line}"
        else:
            kind = names.STOPPED
            text = f"stopped at step {_step_text(record.step)}"
        out.append((kind, when, text))
    return out


def _notice_text(run, snap, stopped: events.Stopped) -> str:
    """A stop on a preemption notice, with the checkpoint it wrote (or the newest one)."""
    newest = snap.checkpoints[0] if snap.checkpoints else None
    saved = newest.step if newest is not None and newest.step == stopped.step else None
    line = preemption.outcome(stopped.why, saved, None if newest is None else newest.step,
                              saves=run.logdir is not None)
    return line[:1].lower() + line[1:].rstrip(".")   # as the timeline's other entries


def timeline(run, snap, *, with_error: bool = True) -> List[Tuple[float, str]]:
    """What happened, oldest first, as (wall time, text): sessions started or resumed (and
    the steps a resume lost), stops asked, stalls, rollbacks, the input running out, how each
    session ended (``with_error``: a failure with its error's last line). Every event the
    history holds: its first, and its newest (``snap.events_dropped`` were let go of)."""
    return [(when, text) for _, when, text in _happenings(run, snap, with_error)]


def folded(events_shown: Sequence, dropped: int,
           shown: int = TIMELINE_SHOWN) -> Tuple[list, int]:
    """(the first of ``events_shown`` and its newest, ``shown`` in all; how many earlier
    events that leaves out, the ``dropped`` ones included): a timeline as the panel shows it
    folded."""
    hidden = max(0, len(events_shown) - shown)
    if not hidden and not dropped:
        return list(events_shown), 0
    return [events_shown[0], *events_shown[1 + hidden:]], hidden + dropped


def folded_text(count: int) -> str:
    """'… 14 earlier events'."""
    return f"… {count:,} earlier event{'s' if count != 1 else ''}"


def alerts(run, snap) -> List[dict]:
    """What a view may notify the user of, oldest first (the newest ``TIMELINE_SHOWN`` events):
    each the timeline's entry with its ``kind`` (``names.ALERT_KINDS``), an ``id`` that stays
    the same for the same happening (notify each id once), its ``wall_time`` (epoch seconds) and
    a ``title`` and ``text``."""
    out = []
    for kind, when, text in _happenings(run, snap, with_error=True)[-TIMELINE_SHOWN:]:
        if kind:
            out.append({"id": f"{kind}@{when:.3f}", "kind": kind, "wall_time": when,
                        "title": f"{run.name}: {kind.replace('-', ' ')}", "text": text})
    return out


def best_entries(snap) -> List[Tuple[str, str]]:
    """The best value of each metric with its step, as (tag, '0.0123 (min) at step 1,200')."""
    out = []
    for tag, series in snap.scalars.items():
        if names.is_rate(tag) or not len(series.steps):
            continue
        # Best at its maximum when the name says so (names.direction_of), else its minimum.
        higher = names.direction_of(tag) == names.MAX
        envelope = series.maxs if higher else series.mins
        finite = np.flatnonzero(np.isfinite(envelope))
        if not len(finite):
            continue
        pick = finite[(np.argmax if higher else np.argmin)(envelope[finite])]
        out.append((tag, f"{format_value(float(envelope[pick]))} "
                         f"({'max' if higher else 'min'}) at step {int(series.steps[pick]):,}"))
    return out


def best_values(snap) -> List[str]:
    """The best value of each metric with its step: 'loss: 0.0123 (min) at step 1,200'."""
    return [f"{tag}: {text}" for tag, text in best_entries(snap)]


def text_summary(run, snap=None, *, with_error: bool = True, ago: bool = True) -> str:
    """The run as text (``%supervise show`` where no widget renders, the end of a run): status
    line, checkpoint lines, timeline, best and last values, and (``with_error``) the error with
    its traceback; of ``snap`` (default: the history now). ``ago``: a live run's checkpoint
    line says how long ago it was written (not in a record, read later)."""
    snap = snap or run.history.snapshot()
    lines = [text_status(run, snap)]
    if run.logdir is None:
        lines.append("  " + _no_logdir_text(run))
    else:
        lines.extend("  " + line for line in checkpoint_lines(run, snap, time.time(), ago=ago))
    events_shown, count = folded(timeline(run, snap, with_error=with_error),
                                 snap.events_dropped)
    for i, (when, text) in enumerate(events_shown):
        lines.append(f"  {_clock_time(when)}  {text}")
        if i == 0 and count:
            lines.append(f"  {folded_text(count)}")
    best = best_values(snap)
    if best:
        lines.append("  best: " + "; ".join(best))
    if snap.scalars:
        values = ", ".join(
            f"{tag} {format_value(float(series.values[-1]))} "
            f"(step {int(series.steps[-1]):,})" for tag, series in snap.scalars.items())
        lines.append(f"  last values: {values}")
    if snap.error and with_error:
        lines.append("  error:")
        lines.extend("    " + line for line in snap.error.rstrip("\n").splitlines())
    return "\n".join(lines)


def panel_state(run, snap, *, elapsed: float, wall_now: float, message: str = "") -> dict:
    """What the panel's header, progress, checkpoint line, timeline and buttons say, as plain
    JSON data (the widget's ``state`` trait). Besides what it shows: ``stalled`` (None, or
    ``since`` in epoch seconds, ``step`` and ``text`` of a stall now) and ``alerts`` (see
    ``alerts``: what a view may notify of)."""
    running = _running(run, snap)
    state = {
        "name": str(run.name), "status": snap.status, "label": status_label(snap),
        "tone": _TONES[names.STOPPING] if snap.stalled else _TONES.get(snap.status, "muted"),
        "active": snap.active,
        "step": snap.step, "step_text": "" if snap.step is None else f"{snap.step:,}",
        "rate": "", "position": _fit_text(snap.progress), "elapsed": format_duration(elapsed),
        "role": "", "progress": None, "eta": "",
        "warning": _no_logdir_text(run) if run.logdir is None else "",
        "checkpoint": checkpoint_lines(run, snap, wall_now),
        "timeline": [[_clock_time(when), text] for when, text in timeline(run, snap)],
        "timeline_shown": TIMELINE_SHOWN, "timeline_dropped": snap.events_dropped,
        "stalled": None if snap.stalled is None else {
            "since": snap.stalled.since, "step": snap.stalled.step,
            "text": stalled_text(snap.stalled)},
        "alerts": alerts(run, snap),
        "best": [[tag, text] for tag, text in best_entries(snap)],
        "error": "",
        "message": message,
        "buttons": {"stop": bool(run.can_stop), "resume": bool(run.can_resume),
                    "save": bool(run.can_save)},
    }
    if running:
        state["rate"] = ("measuring…" if snap.steps_per_sec is None
                         else format_rate(snap.steps_per_sec))
    state["role"] = run.role_text
    done, total = _done_of_total(snap, run.max_steps)
    if total:
        permille = int(min(1.0, max(0.0, done / total)) * 1000)  # at most 1000 widths a run
        state["progress"] = {"fraction": permille / 1000,
                             "text": f"{permille / 10:.1f}% of {total:,}"}
        if running and snap.steps_per_sec:
            state["eta"] = f"ETA {format_duration(max(0, total - done) / snap.steps_per_sec)}"
    if snap.error:
        error = _ANSI.sub("", snap.error)
        state["error"] = ("...\n" + error[-ERROR_MAX_CHARS:] if len(error) > ERROR_MAX_CHARS
                          else error)
    return state


# -- the record a saved notebook keeps -------------------------------------------------------


def record_heading(run, snap, as_of: Optional[float] = None) -> Tuple[str, str]:
    """(the run's name, status, step, fit's position and time, one line; the error's last line
    or ''): what the record and its image say first. A live run's record made at ``as_of``
    (epoch seconds) says that it was true then ("saved while running, at step 300 of 1,500
    (2026-12-06 14:05)"): the notebook keeps it after the run went on."""
    parts = [str(run.name)]
    step = None if snap.step is None else (
        f"step {snap.step:,}" + (f" of {run.max_steps:,}" if run.max_steps else ""))
    if snap.active and as_of is not None:
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(as_of))
        parts.append(f"saved while {status_label(snap)}" + (f", at {step}" if step else "")
                     + f" ({when})")
    else:
        parts += [text for text in (status_label(snap), step) if text]
    parts += [text for text in (_fit_text(snap.progress), format_duration(snap.elapsed),
                                run.role_text) if text]
    return " | ".join(parts), _error_line(snap.error) if snap.error else ""


# In JupyterLab and Notebook 7, a record hides itself while its panel's live view sits right
# above it (the view is marked data-jsv-offline when no kernel ever answered it), and hides the
# output above it where no view rendered there ("Error displaying widget: model not found" in a
# notebook reopened without its kernel). nbconvert's HTML, GitHub and other viewers show it.
_RECORD_STYLE = (
    '.jp-OutputArea-child:has(.jsv-view[data-jsv-key="{key}"]:not([data-jsv-offline])) + '
    '.jp-OutputArea-child:has(.jsv-record[data-jsv-key="{key}"]), '
    '.jp-OutputArea-child:not(:has(.jsv-view)):has(+ .jp-OutputArea-child '
    '.jsv-record[data-jsv-key="{key}"]) {{ display: none; }}')


def record_html(run, snap, *, key: str, image: Optional[bytes] = None,
                image_tags: Sequence[str] = (), as_of: Optional[float] = None) -> str:
    """The record of the run as HTML: its heading (``record_heading``, made at ``as_of``) and
    error line as text, the image of its curves (PNG bytes, of ``image_tags``) and the rest of
    its summary; ``key`` ties it to its panel's view."""
    heading, error = record_heading(run, snap, as_of)
    name = str(run.name)
    key = html.escape(key, quote=True)
    parts = [f'<div class="jsv-record" data-jsv-key="{key}">',
             f"<style>{_RECORD_STYLE.format(key=key)}</style>",
             f"<p><strong>{_isolated_html(name)}{html.escape(heading[len(name):])}</strong></p>"]
    if error:
        parts.append(f'<p class="jsv-record-error" dir="auto">{html.escape(error)}</p>')
    if image:
        data = base64.b64encode(image).decode("ascii")
        parts.append(f'<img src="data:image/png;base64,{data}" '
                     f'alt="{html.escape(image_text(image_tags), quote=True)}">')
    details = text_summary(run, snap, with_error=False, ago=False).split("\n")[1:]
    if details:
        parts.append("<pre>" + html.escape("\n".join(line[2:] for line in details)) + "</pre>")
    parts.append("</div>")
    return "\n".join(parts)


# Bidirectional classes that reorder the text around them: right-to-left letters and the
# explicit embeddings, overrides and isolates.
_REORDERING = {"R", "AL", "RLE", "RLO", "LRE", "LRO", "PDF", "RLI", "LRI", "FSI", "PDI"}


def _isolated_html(text: str) -> str:
    """``text`` escaped, in a ``<bdi>`` where it could reorder what follows it (a right-to-left
    name, an override); as it is otherwise."""
    escaped = html.escape(text)
    if any(unicodedata.bidirectional(ch) in _REORDERING for ch in text):
        return f"<bdi>{escaped}</bdi>"
    return escaped


def image_tags(snap, most: int) -> List[str]:
    """The tags the record's image shows: the first ``most`` that are not step rates."""
    return [tag for tag in snap.scalars if not names.is_rate(tag)][:most]


def image_text(tags: Sequence[str]) -> str:
    """The image's text alternative."""
    return ("Curves of " + ", ".join(tags) + " (x: step)") if tags else "No curves yet"
