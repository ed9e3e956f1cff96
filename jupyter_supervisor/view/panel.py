"""The notebook view of a training run, and the text shown where no widget can be.

A ``Panel`` shows one run (duck-typed: ``name``, ``logdir``, ``max_steps``, ``role``, ``master``,
``history``, ``can_stop``, ``can_resume``, ``can_save``, ``stop(wait=False)``, ``resume()``,
``save_now()``, and optionally ``config.init_fn``; this module imports no run) from its
``RunHistory``. The training thread never touches a widget: it writes the history, and one
refresher thread per displayed panel reads it.

What the panel says is one state (``panel_state``) derived from the history each time it
changed: the header, the progress and its ETA, fit's epoch and batch, the checkpoint line, the
timeline of what happened and the best value of each metric. It travels to the browser as one
trait; the series travel as deltas (``widget.SeriesFeed``), at most every ``plot_interval``
seconds, and the browser draws them (``panel.js``: hover readout, zoom, log scale, smoothing,
step / relative / wall-time axis). A heartbeat every ``beat_interval`` seconds lets the browser
say "kernel gone" when it stops. What the run prints goes to an ``ipywidgets.Output`` beside
the view (Jupyter's own renderer: ANSI colours, carriage returns), its tail bounded.

When a run ends, each display of the panel is updated (``update_display``) with a fallback
that a saved notebook keeps: the final status text and a PNG of the final curves (matplotlib
``Figure`` + Agg, never pyplot). So the traffic depends on the intervals, never on how fast
the run trains.

Where no widget frontend is there (terminal IPython, plain Python) ``show`` prints a status
line, and ``text_summary`` gives the run as text, with its timeline and best values.
ipywidgets and anywidget are imported only when a widget is really made.
"""
import functools
import logging
import math
import os
import re
import sys
import threading
import time
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from .. import events
from . import plots
from .widget import INSTALL_HINT, SeriesFeed, ipywidgets, view_class

logger = logging.getLogger("jupyter_supervisor")

# What the output area keeps of the run's output: its newest lines, at most so many characters,
# so that a body printing at every step costs at most this much per output refresh.
OUTPUT_KEEP_LINES = 30
OUTPUT_KEEP_CHARS = 6000
ERROR_MAX_CHARS = 20_000
KEPT_SHOWN = 8
TIMELINE_SHOWN = 12
# The most tags drawn in the saved notebook's image.
IMAGE_TAGS = 8

_TONES = {"starting": "#757575", "running": "#2e7d32", "stopping": "#ef6c00",
          "stopped": "#1565c0", "finished": "#2e7d32", "failed": "#c62828"}
# Metrics where more is better (as Keras decides a monitor's mode from its name); the others
# are best at their minimum. Rates (".../sec") have no best.
_HIGHER_IS_BETTER = ("acc", "auc", "precision", "recall", "f1", "iou", "score", "reward")
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")


# -- where widgets can be shown ------------------------------------------------------------


def _in_kernel() -> bool:
    # As tqdm and ipywidgets decide: widgets need a Jupyter kernel (its comms) behind IPython.
    ipython = sys.modules.get("IPython")
    if ipython is None:
        return False
    shell = ipython.get_ipython()
    return shell is not None and getattr(shell, "kernel", None) is not None


def widget_frontend_available() -> bool:
    """True inside a Jupyter kernel with ipywidgets and anywidget installed."""
    if not _in_kernel():
        return False
    try:
        view_class()
    except ImportError:
        return False
    return True


# -- text ----------------------------------------------------------------------------------


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


def _step_text(step: Optional[int]) -> str:
    return "-" if step is None else f"{step:,}"


def _label(snap) -> str:
    """The status as the header says it: before the session is ready, what it waits for."""
    if snap.active and not snap.ready:
        if snap.waiting_for_chief:
            return "waiting for chief"
        if snap.restoring:
            return f"restoring {os.path.basename(snap.restoring)}"
    return snap.status


def _running(run, snap) -> bool:
    # Stepping and not asked to stop: only then a rate and an ETA mean something.
    return snap.active and snap.ready and bool(getattr(run, "can_stop", False))


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
    """One line: name, status, step (of max), rate, elapsed time and, for a task of a
    cluster, its role and master."""
    snap = snap or run.history.snapshot()
    text = f"{run.name}: {_label(snap)}"
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
    role = _role_text(run)
    if role:
        parts.append(role)
    return f"{text} ({', '.join(parts)})"


def _role_text(run) -> str:
    """ "chief on grpc://...", "worker 1 of 2", or '' for a local run."""
    text = getattr(run, "role_text", None)
    if text is not None:
        return text
    role = getattr(run, "role", "local")
    return "" if role == "local" else f"{role} on {run.master}"


def _no_logdir_text(run) -> str:
    if getattr(run, "role", "local") == "worker":
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


_CHECKPOINT_STEP = re.compile(r"-(\d+)$")


def _checkpoint_label(name: str) -> str:
    match = _CHECKPOINT_STEP.search(name)
    return f"{int(match.group(1)):,}" if match else name


def checkpoint_lines(run, snap, wall_now: float) -> List[str]:
    """The checkpoint line (newest, how many, where the session started), what retention keeps,
    and the rollbacks."""
    if run.logdir is None:
        return []
    if snap.checkpoints:
        newest = snap.checkpoints[0]
        count = ("" if snap.checkpoint_count <= 1
                 else f" ({snap.checkpoint_count} written by this run)")
        line = (f"Checkpoint: step {_step_text(newest.step)} at {_clock_time(newest.wall_time)} "
                f"({format_ago(wall_now - newest.wall_time)}), written in {newest.seconds:.2f} s, "
                f"{os.path.basename(newest.path)}{count}")
    else:
        line = "No new checkpoint yet" if snap.ready else "No checkpoint yet"
    if snap.restored_from:
        line += f" | restored from {os.path.basename(snap.restored_from)}"
    elif snap.ready:
        init = getattr(getattr(run, "config", None), "init_fn", None) is not None
        line += " | initialized by --init-fn" if init else " | initialized"
    lines = [line]
    kept = [os.path.basename(path) for path in reversed(snap.kept)]
    if not kept and snap.checkpoints:
        kept = [os.path.basename(info.path) for info in reversed(snap.checkpoints)]
    if kept:
        labels = [_checkpoint_label(name) for name in kept[-KEPT_SHOWN:]]
        more = f"{len(kept) - KEPT_SHOWN} older, " if len(kept) > KEPT_SHOWN else ""
        lines.append(f"kept ({len(kept)}): {more}{', '.join(reversed(labels))}")
    if snap.rollbacks:
        lines.append(rollbacks_text(snap.rollbacks))
    return lines


def _error_line(error: str) -> str:
    lines = [line for line in _ANSI.sub("", error).splitlines() if line.strip()]
    return lines[-1].strip() if lines else ""


def timeline(run, snap, *, with_error: bool = True) -> List[Tuple[float, str]]:
    """What happened, oldest first, as (wall time, text): sessions started or resumed, stops
    asked, rollbacks, the input running out, how each session ended (``with_error``: a
    failure with its error's last line)."""
    out = []
    for record in snap.timeline:
        when = record.wall_time
        if isinstance(record, events.SessionReady):
            if record.restored_from:
                text = (f"resumed from {os.path.basename(record.restored_from)} "
                        f"(step {_step_text(record.step)})")
            else:
                text = f"started at step {_step_text(record.step)} (initialized)"
        elif isinstance(record, events.RolledBack):
            text = (f"rolled back: not finite at step {_step_text(record.step)} "
                    f"({record.problem}), restored {os.path.basename(record.path)}")
        elif isinstance(record, events.Stopped):
            if record.reason != events.OUT_OF_RANGE:
                continue
            text = f"input ran out at step {_step_text(record.step)}"
        elif record.status == "stopping":
            text = f"stop requested at step {_step_text(record.step)}"
        elif record.status == "finished":
            reached = (run.max_steps is not None and record.step is not None
                       and record.step >= run.max_steps)
            text = f"finished at step {_step_text(record.step)}" + (
                " (--max-steps reached)" if reached else "")
        elif record.status == "failed":
            text = f"failed at step {_step_text(record.step)}"
            line = _error_line(snap.error) if with_error else ""
            if line:
                text += f": {line}"
        elif record.status == "stopped":
            text = f"stopped at step {_step_text(record.step)}"
        else:  # starting, running: the SessionReady says more
            continue
        out.append((when, text))
    return out[-TIMELINE_SHOWN:]


def best_values(snap) -> List[str]:
    """The best value of each metric with its step: 'loss: 0.0123 (min) at step 1,200'."""
    out = []
    for tag, series in snap.scalars.items():
        if tag.endswith("/sec") or not len(series.steps):
            continue
        higher = any(word in tag.lower() for word in _HIGHER_IS_BETTER)
        envelope = series.maxs if higher else series.mins
        finite = np.flatnonzero(np.isfinite(envelope))
        if not len(finite):
            continue
        pick = finite[(np.argmax if higher else np.argmin)(envelope[finite])]
        out.append(f"{tag}: {plots.format_value(float(envelope[pick]))} "
                   f"({'max' if higher else 'min'}) at step {int(series.steps[pick]):,}")
    return out


def text_summary(run, *, with_error: bool = True) -> str:
    """The run as text (``%supervise show`` where no widget renders, the end of a run): status
    line, checkpoint lines, timeline, best and last values, and (``with_error``) the error with
    its traceback."""
    snap = run.history.snapshot()
    lines = [text_status(run, snap)]
    if run.logdir is None:
        lines.append("  " + _no_logdir_text(run))
    else:
        lines.extend("  " + line for line in checkpoint_lines(run, snap, time.time()))
    for when, text in timeline(run, snap, with_error=with_error):
        lines.append(f"  {_clock_time(when)}  {text}")
    best = best_values(snap)
    if best:
        lines.append("  best: " + "; ".join(best))
    if snap.scalars:
        values = ", ".join(
            f"{tag} {plots.format_value(float(series.values[-1]))} "
            f"(step {int(series.steps[-1]):,})" for tag, series in snap.scalars.items())
        lines.append(f"  last values: {values}")
    if snap.error and with_error:
        lines.append("  error:")
        lines.extend("    " + line for line in snap.error.rstrip("\n").splitlines())
    return "\n".join(lines)


def panel_state(run, snap, *, elapsed: float, wall_now: float, message: str = "") -> dict:
    """What the panel's header, progress, checkpoint line, timeline and buttons say, as plain
    JSON data (the widget's ``state`` trait)."""
    running = _running(run, snap)
    state = {
        "name": str(run.name), "status": snap.status, "label": _label(snap),
        "tone": _TONES.get(snap.status, "#757575"), "active": snap.active,
        "step": snap.step, "step_text": "" if snap.step is None else f"{snap.step:,}",
        "rate": "", "position": _fit_text(snap.progress), "elapsed": format_duration(elapsed),
        "role": "", "progress": None, "eta": "",
        "warning": _no_logdir_text(run) if run.logdir is None else "",
        "checkpoint": checkpoint_lines(run, snap, wall_now),
        "timeline": [[_clock_time(when), text] for when, text in timeline(run, snap)],
        "best": best_values(snap),
        "error": "",
        "message": message,
        "buttons": {"stop": bool(run.can_stop), "resume": bool(run.can_resume),
                    "save": bool(run.can_save)},
    }
    if running:
        state["rate"] = ("measuring…" if snap.steps_per_sec is None
                         else format_rate(snap.steps_per_sec))
    state["role"] = _role_text(run)
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


# -- the live views --------------------------------------------------------------------------


@functools.lru_cache(maxsize=None)
def _panel_box_class():
    widgets = ipywidgets()

    class PanelBox(widgets.VBox):
        """The panel's root box. Its text form, what a frontend without widgets shows (nbconvert,
        nbval, papermill), is the run's status line instead of the children's repr."""

        describe: Optional[Callable[[], str]] = None

        def __repr__(self):
            if self.describe is not None:
                try:
                    return self.describe()
                except Exception:  # pylint: disable=broad-except
                    logger.debug("Could not describe the run.", exc_info=True)
            return "jupyter_supervisor panel"

    return PanelBox


def _widget_bundle(widget, text: str) -> dict:
    """The widget's display data with ``text`` as its text form (ipywidgets returns the data,
    anywidget a (data, metadata) pair)."""
    bundle = widget._repr_mimebundle_()  # pylint: disable=protected-access
    data = dict(bundle[0] if isinstance(bundle, tuple) else bundle)
    data["text/plain"] = text
    return data


def _check_seconds(**values) -> None:
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise ValueError(
                f"Invalid value for argument `{name}`. Received: {name}={value!r}. "
                "Expected a number of seconds > 0.")


class _LiveView:
    """A view widget kept up to date by one refresher thread: throttled ticks, series deltas,
    the heartbeat, a view's request for every series, and closing. Subclasses build the
    widgets and say what a tick changes (``_update``)."""

    def __init__(self, clock, interval, idle_interval, plot_interval, beat_interval):
        _check_seconds(interval=interval, idle_interval=idle_interval,
                       plot_interval=plot_interval, beat_interval=beat_interval)
        self._clock = clock
        self._interval = float(interval)
        self._idle_interval = float(idle_interval)
        self._plot_interval = float(plot_interval)
        self._beat_interval = float(beat_interval)
        # Shared between the comm thread (clicks, a view's hello) and the refresher.
        self._lock = threading.Lock()
        self._force = True
        self._want_full = False
        self._message = ""
        # The refresher's own (and a test's tick); _tick_lock keeps two ticks apart.
        self._tick_lock = threading.Lock()
        self._last_tick: Optional[float] = None
        self._next_plot = -math.inf
        self._next_beat = -math.inf
        self._last_failure = ""
        self._wake = threading.Event()
        self._closed = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._view = None

    def _on_view_message(self, _widget, content, _buffers) -> None:
        kind = content.get("type") if isinstance(content, dict) else None
        if kind == "hello":
            with self._lock:
                self._want_full = True
                self._force = True
            self._wake.set()
        elif kind == "button":
            self._on_button(str(content.get("name")))

    def _on_button(self, name: str) -> None:  # pylint: disable=unused-argument
        return

    def _send_series(self, feeds_and_scalars, now: float) -> int:
        """Sends each run's new points (every point after a view's hello); returns bytes."""
        with self._lock:
            full, self._want_full = self._want_full, False
        if not full and now < self._next_plot:
            return 0
        sent = 0
        for feed, scalars in feeds_and_scalars:
            message = feed.message(scalars, full=full)
            if message is not None:
                content, buffers = message
                self._view.send(content, buffers)
                sent += len(buffers[0])
                self._next_beat = now + self._beat_interval
        if sent or full:
            self._next_plot = now + self._plot_interval
        return sent

    def _beat(self, now: float) -> bool:
        if now < self._next_beat:
            return False
        self._view.send({"type": "beat"})
        self._next_beat = now + self._beat_interval
        return True

    def tick(self, now: Optional[float] = None, *, force: bool = False) -> bool:
        """Brings the view up to date; returns True if anything was sent. A call sooner than
        ``interval`` after the previous one does nothing unless forced."""
        now = self._clock() if now is None else now
        with self._tick_lock:
            with self._lock:
                force = force or self._force
                self._force = False
            if (not force and self._last_tick is not None
                    and now - self._last_tick < 0.9 * self._interval):
                return False
            self._last_tick = now
            return self._update(now)

    def _update(self, now: float) -> bool:
        raise NotImplementedError

    def _idle(self) -> bool:
        return False

    def _refresh(self) -> None:
        """A tick that shows its failure instead of raising it."""
        try:
            self.tick()
            self._last_failure = ""
        except Exception as error:  # pylint: disable=broad-except
            text = f"The panel could not refresh: {type(error).__name__}: {error}"
            if text != self._last_failure:  # logged once, shown until a refresh succeeds
                self._last_failure = text
                logger.info("Panel refresh failed.", exc_info=True)
                with self._lock:
                    self._force = True

    def _start_refresher(self, name: str) -> None:
        if self._thread is not None or self._closed.is_set():
            return
        self._thread = threading.Thread(target=self._refresh_loop, daemon=True,
                                        name=f"jupyter_supervisor-panel-{name}")
        self._thread.start()

    def _refresh_loop(self) -> None:
        while True:
            # Cleared before the check: a close() or click from now on ends the wait below.
            self._wake.clear()
            if self._closed.is_set():
                return
            self._refresh()
            self._wake.wait(min(self._beat_interval,
                                self._idle_interval if self._idle() else self._interval))

    @property
    def closed(self) -> bool:
        """True once ``close`` was called."""
        return self._closed.is_set()

    def close(self) -> None:
        """Stops the refresher (the widgets keep their last values). Idempotent."""
        self._closed.set()
        self._wake.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=10)


class Panel(_LiveView):
    """The live view of one run: header, progress, checkpoint line, what happened, best values,
    curves, output, error and buttons.

    ``clock`` (monotonic seconds) drives the throttling and ``wall_clock`` (epoch seconds) the
    "how long ago" of checkpoints; tests inject both and call ``tick`` directly. ``interval`` is
    the shortest time between two refreshes (``idle_interval`` once the run ended),
    ``plot_interval`` between two series messages, ``beat_interval`` between heartbeats, and
    ``output_interval`` between two output updates. Build and ``display`` it on the main
    thread; raises ImportError saying what to install when ipywidgets or anywidget is missing.
    """

    def __init__(self, run, clock: Callable[[], float] = time.monotonic, *,
                 wall_clock: Callable[[], float] = time.time, interval: float = 0.5,
                 idle_interval: float = 1.0, plot_interval: float = 1.0,
                 beat_interval: float = 1.0, output_interval: float = 1.0):
        super().__init__(clock, interval, idle_interval, plot_interval, beat_interval)
        _check_seconds(output_interval=output_interval)
        widgets = ipywidgets()
        self._run = run
        self._history = run.history
        self._wall_clock = wall_clock
        self._output_interval = float(output_interval)
        self._feed = SeriesFeed(str(run.name))
        self._snap = None
        self._snap_clock = 0.0
        self._output_seen = 0          # characters of the run's output shown (its total)
        self._output_chars = 0         # characters in the Output widget now
        self._output_lines = 0         # and lines
        self._next_output = -math.inf
        self._handles: list = []       # the DisplayHandle of each display
        self._published = None         # what the displays' fallback shows (a key)
        self._error_in_cell: Optional[str] = None   # an error whose traceback a cell shows

        self._view = view_class()(compare=False, runs=[str(run.name)])
        self._view.add_class("jsv-panel-view")
        self._view.on_msg(self._on_view_message)
        self._output = widgets.Output()
        self._output.add_class("jsv-output")
        self._root = _panel_box_class()([self._view, self._output])
        self._root.add_class("jsv-panel")
        self._root.describe = lambda: text_status(self._run)
        self.tick(force=True)

    @property
    def run(self):
        """The run this panel shows."""
        return self._run

    @property
    def widgets(self) -> Dict[str, object]:
        """The panel's widgets: root (a VBox), view (the anywidget), output."""
        return {"root": self._root, "view": self._view, "output": self._output}

    def _ipython_display_(self):
        self.display()

    def display(self) -> None:
        """Shows the panel in the output of the executing cell and starts its refresher.

        Call it from the main thread (where the kernel executes cells); calling it again shows
        one more view of the same widgets (all views stay live).
        """
        if threading.current_thread() is not threading.main_thread():
            raise RuntimeError(
                "Panel.display() must be called from the main thread: a widget displayed from "
                "a background thread lands in whichever cell happens to execute.")
        from IPython.display import display  # pylint: disable=import-outside-toplevel
        self.tick(force=True)
        if _in_kernel():
            self._handles.append(display(self._bundle(), raw=True, display_id=True))
        else:  # a terminal shows text only
            print(text_status(self._run))
        self._published = None
        self._start_refresher(str(self._run.name))

    def finish(self, *, error_in_cell: bool = False) -> None:
        """Brings every display up to date now, its saved-notebook fallback included (the
        magics call it when a run they waited for ended, while its cell still executes).
        ``error_in_cell``: the cell shows the failure's traceback; the panel does not repeat it."""
        with self._lock:
            self._error_in_cell = self._history.error if error_in_cell else None
        self.tick(force=True)

    def close(self) -> None:
        super().close()
        with _shown_lock:
            if _shown.get(self._run.name) is self:
                del _shown[self._run.name]

    # -- a tick ------------------------------------------------------------------------------

    def _idle(self) -> bool:
        snap = self._snap
        return snap is not None and not snap.active

    def _update(self, now: float) -> bool:
        history = self._history
        if self._snap is None or history.version != self._snap.version:
            self._snap = history.snapshot()
            self._snap_clock = now
        snap = self._snap
        elapsed = snap.elapsed + (max(0.0, now - self._snap_clock) if snap.active else 0.0)
        with self._lock:
            message = self._message
            in_cell = self._error_in_cell
        state = panel_state(self._run, snap, elapsed=elapsed, wall_now=self._wall_clock(),
                            message=message or self._last_failure)
        if in_cell and in_cell == snap.error:  # once: the cell's own traceback shows it
            state["error"] = ""
        changed = False
        if state != self._view.state:
            self._view.state = state
            changed = True
        changed |= self._update_output(snap, now)
        changed |= bool(self._send_series([(self._feed, snap.scalars)], now))
        changed |= self._beat(now)
        if not snap.active:
            self._publish(snap)
        return changed

    def _update_output(self, snap, now: float) -> bool:
        new = snap.output_total - self._output_seen
        if new <= 0 or now < self._next_output:
            return False
        self._next_output = now + self._output_interval
        self._output_seen = snap.output_total
        text = snap.output[-new:] if new <= len(snap.output) else snap.output
        lines = self._output_lines + text.count("\n")
        if self._output_chars + len(text) > OUTPUT_KEEP_CHARS or lines > 2 * OUTPUT_KEEP_LINES:
            # Bounded: the newest lines only, as one stream output (Jupyter's renderer then
            # collapses carriage returns and colours ANSI codes as in any output).
            tail = "\n".join(snap.output[-OUTPUT_KEEP_CHARS:].split("\n")[-OUTPUT_KEEP_LINES - 1:])
            self._output.outputs = ({"output_type": "stream", "name": "stdout",
                                     "text": "...\n" + tail},)
            self._output_chars, self._output_lines = len(tail), tail.count("\n")
        else:
            self._output.append_stdout(text)
            self._output_chars, self._output_lines = self._output_chars + len(text), lines
        return True

    def _bundle(self, image: Optional[bytes] = None, text: Optional[str] = None) -> dict:
        data = _widget_bundle(self._root, text if text is not None else text_status(self._run))
        if image:
            data["image/png"] = image
        return data

    def _publish(self, snap) -> None:
        """Updates every display's fallback with the run's end (once per end)."""
        key = (snap.status, snap.step, snap.checkpoint_count, snap.scalars_version, snap.error)
        if not self._handles or key == self._published:
            return
        self._published = key
        image = None
        tags = [tag for tag in snap.scalars if not tag.endswith("/sec")][:IMAGE_TAGS]
        if tags:
            image = plots.PlotRenderer().render(snap.scalars, tags)
        bundle = self._bundle(image, text_summary(self._run, with_error=False))
        for handle in self._handles:
            handle.update(bundle, raw=True)

    # -- buttons (the comm thread) -----------------------------------------------------------

    def _on_button(self, name: str) -> None:
        # Called by ipywidgets on the thread that handles comm messages (the kernel's main
        # thread, or a subshell thread in JupyterLab 4.6 with ipykernel 7). Only the run's
        # method is called here; what it changes reaches the view through the refresher.
        actions = {"stop": lambda: self._run.stop(wait=False), "resume": self._run.resume,
                   "save": self._run.save_now}
        if name not in actions:
            return
        try:
            actions[name]()
        except Exception as error:  # pylint: disable=broad-except
            logger.info("%s of run %r failed.", name.capitalize(), self._run.name,
                        exc_info=True)
            message = f"{name.capitalize()} failed: {type(error).__name__}: {error}"
        else:
            message = ""
        with self._lock:
            self._message = message
            self._force = True
        self._wake.set()


class Comparison(_LiveView):
    """Several runs' curves in one chart per tag, with a legend (``%supervise compare``)."""

    def __init__(self, runs: Sequence, clock: Callable[[], float] = time.monotonic, *,
                 interval: float = 0.5, idle_interval: float = 1.0, plot_interval: float = 1.0,
                 beat_interval: float = 1.0):
        super().__init__(clock, interval, idle_interval, plot_interval, beat_interval)
        if not runs:
            raise ValueError("Invalid value for argument `runs`. Received: runs=[]. "
                             "Expected at least one run.")
        self._runs = list(runs)
        self._feeds = [SeriesFeed(str(run.name)) for run in self._runs]
        self._view = view_class()(compare=True, runs=[str(run.name) for run in self._runs])
        self._view.add_class("jsv-compare")
        self._view.on_msg(self._on_view_message)
        self._active = True

    @property
    def widgets(self) -> Dict[str, object]:
        """The comparison's widget: view (the anywidget)."""
        return {"view": self._view}

    def _idle(self) -> bool:
        return not self._active

    def _update(self, now: float) -> bool:
        snaps = [run.history.snapshot() for run in self._runs]
        self._active = any(snap.active for snap in snaps)
        sent = self._send_series(
            [(feed, snap.scalars) for feed, snap in zip(self._feeds, snaps)], now)
        return bool(sent) | self._beat(now)

    def display(self) -> None:
        """Shows the chart in the executing cell (main thread) and starts its refresher."""
        from IPython.display import display  # pylint: disable=import-outside-toplevel
        display(_widget_bundle(self._view, "\n".join(text_status(run) for run in self._runs)),
                raw=True)
        self._start_refresher("compare")


# The panel `show` made for each run name: showing a run again displays its panel again instead
# of adding one more refresher, and a new run of that name (a re-run cell) closes the panel of
# the run it replaces, so a notebook keeps one refresher per run name however often it re-runs.
_shown: Dict[str, Panel] = {}
_shown_lock = threading.Lock()
_comparisons: List[Comparison] = []


def show(run, clock: Callable[[], float] = time.monotonic) -> Optional[Panel]:
    """Shows ``run``: its live Panel where a widget frontend is there (returned; the same panel
    each time for the same run, one more view of it), else a status line printed as text
    (returns None; print ``text_summary(run)`` at the end of the run)."""
    if widget_frontend_available():
        with _shown_lock:
            panel = _shown.get(run.name)
        if panel is not None and panel.run is not run:
            panel.close()  # the run this one replaces (its cell was re-run)
        with _shown_lock:
            panel = _shown.get(run.name)
            if panel is None or panel.closed:
                panel = _shown[run.name] = Panel(run, clock=clock)
        panel.display()
        return panel
    line = text_status(run)
    if _in_kernel():  # a kernel without the widget packages: say how to get the panel
        line += f"\n{INSTALL_HINT}"
    print(line)
    return None


def finish(run, *, error_in_cell: bool = False) -> None:
    """Brings the panel shown for ``run`` (if any) up to date now, fallback included.
    ``error_in_cell``: the failure is raised into the executing cell, which shows its
    traceback; the panel then names the error without repeating the traceback."""
    with _shown_lock:
        panel = _shown.get(run.name)
    if panel is not None and panel.run is run and not panel.closed:
        panel.finish(error_in_cell=error_in_cell)


def compare(runs: Sequence) -> Optional[Comparison]:
    """Shows the curves of ``runs`` in one chart per tag; where no widget renders, each run's
    best and last values as text (returns None)."""
    if widget_frontend_available():
        comparison = Comparison(runs)
        comparison.tick(force=True)
        comparison.display()
        _comparisons.append(comparison)
        return comparison
    for run in runs:
        snap = run.history.snapshot()
        print(text_status(run, snap))
        best = best_values(snap)
        if best:
            print("  best: " + "; ".join(best))
    return None


def close_all() -> None:
    """Closes every panel and comparison (their refreshers stop; for ``%unload_ext`` and the
    kernel's shutdown)."""
    with _shown_lock:
        panels = list(_shown.values())
    for view in panels + _comparisons:
        view.close()
    _comparisons.clear()
