"""The ipywidgets view of one training run, and the text shown where no widget can be.

A ``Panel`` shows a run (duck-typed: ``name``, ``logdir``, ``max_steps``, ``role``, ``master``,
``history``, ``can_stop``, ``can_resume``, ``can_save``, ``stop(wait=False)``, ``resume()``,
``save_now()``, and optionally ``config.init_fn``; this module imports no run) from its
``RunHistory``. The training thread never touches a widget: it writes the history, and one
refresher thread per displayed panel reads it. The refresher wakes every ``interval`` seconds
(half a second; once a second after the run ended), takes a snapshot only when the
history's version moved, changes only the widget values
that differ (each widget's changes batched into one message with ``hold_sync``), and re-renders
the plots at most every ``plot_interval`` seconds and only when new points arrived. So the
traffic to the browser depends on these intervals, never on how fast the run trains.

The plots are SVG (plots.SvgRenderer): the kernel writes the downsampled points as paths and
the browser draws them, about 1.5 ms of the kernel's CPU for six plots where a matplotlib
render took 20-150 ms. Rendering also has a CPU budget (``render_budget``, 1 % of a core): a
render that cost c seconds puts the next one c / budget seconds later at the earliest, so a
costlier renderer (``plots.PlotRenderer``, PNG, still available) slows the plots, not training.

Buttons only call the run's ``stop`` / ``resume`` / ``save_now``; a failing call is shown in the
panel, never raised into the kernel. Every part carries a stable CSS class (``jsv-panel``,
``jsv-status``, ``jsv-step``, ``jsv-stop``...) for tests and user styles.

Where no widget frontend is there (terminal IPython, plain Python) ``show`` prints a status
line instead, and ``text_summary`` gives the end-of-run text. Under nbconvert, nbval or papermill
the kernel is there but nobody renders widgets: the panel's text form (``text/plain``) is then
its status line, never an ``HBox(children=...)`` repr. ipywidgets is imported only when a widget
is really needed; without it, that step says what to install.
"""
import functools
import html
import logging
import math
import os
import re
import sys
import threading
import time
from typing import Callable, Dict, Optional, Sequence, Tuple

from . import plots
from .history import FINAL_STATUSES

logger = logging.getLogger("jupyter_supervisor")

# Tags drawn as small multiples; with more, a selector picks which (at most MAX_SELECTED).
MAX_PLOTS = 6
MAX_SELECTED = 12
# What the output area shows of the run's output: its tail, bounded so that a body printing at
# every step costs a few KB per refresh, not the history's whole 200 KB.
OUTPUT_TAIL_LINES = 40
OUTPUT_TAIL_CHARS = 4000
ERROR_MAX_CHARS = 20_000
KEPT_SHOWN = 8
# The most of a core the plot renders may take: after a render that cost c CPU seconds, the next
# waits c / RENDER_BUDGET seconds (if that is longer than plot_interval). An SVG render of six
# plots costs about 1.5 ms, so this never slows it; a matplotlib one (20-150 ms) it does.
RENDER_BUDGET = 0.01

_INSTALL_HINT = ("The jupyter_supervisor panel needs ipywidgets: pip install 'ipywidgets>=8' "
                 "(and JupyterLab 4 or Notebook 7 to see it).")

_STATUS_COLOURS = {
    "starting": "#757575", "running": "#2e7d32", "stopping": "#ef6c00",
    "stopped": "#1565c0", "finished": "#2e7d32", "failed": "#c62828",
}

_BUTTONS = (  # part name, label, icon, tooltip, the run's flag that enables it
    ("stop", "Stop", "stop", "Stop gracefully: write a final checkpoint, then stop", "can_stop"),
    ("resume", "Resume", "play", "Continue from the newest checkpoint", "can_resume"),
    ("save", "Save", "save", "Write a checkpoint now", "can_save"),
)


# -- where widgets can be shown ------------------------------------------------------------


def _ipywidgets():
    try:
        import ipywidgets  # pylint: disable=import-outside-toplevel
    except ImportError as error:
        raise ImportError(_INSTALL_HINT) from error
    return ipywidgets


def _in_kernel() -> bool:
    # As tqdm and ipywidgets decide: widgets need a Jupyter kernel (its comms) behind IPython.
    ipython = sys.modules.get("IPython")
    if ipython is None:
        return False
    shell = ipython.get_ipython()
    return shell is not None and getattr(shell, "kernel", None) is not None


def widget_frontend_available() -> bool:
    """True inside a Jupyter kernel with ipywidgets installed (widgets can be displayed)."""
    if not _in_kernel():
        return False
    try:
        _ipywidgets()
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


def _step_text(step: Optional[int]) -> str:
    return "-" if step is None else f"{step:,}"


def _status_label(snap) -> str:
    if snap.waiting_for_chief and snap.status in ("starting", "running"):
        return "waiting for chief"
    return snap.status


def _done_of_total(snap, max_steps: Optional[int]) -> Tuple[int, Optional[int]]:
    """(steps done, steps in all) for the progress bar: of --max-steps, or else of a Keras fit's
    own epochs and batches."""
    if max_steps:
        return snap.step or 0, max_steps
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


def _eta(snap, max_steps: Optional[int]) -> Optional[float]:
    done, total = _done_of_total(snap, max_steps)
    if (total is None or snap.status != "running"
            or not snap.steps_per_sec or snap.steps_per_sec <= 0):
        return None
    return max(0, total - done) / snap.steps_per_sec


def text_status(run) -> str:
    """One line: name, status, step (of max), rate, elapsed time and, for a task of a
    cluster, its role and master."""
    snap = run.history.snapshot()
    max_steps = run.max_steps
    step = _step_text(snap.step)
    if max_steps is not None:
        step = f"{step} of {max_steps:,}"
    parts = [format_duration(snap.elapsed)]
    if snap.status == "running" and snap.steps_per_sec is not None:
        parts.insert(0, format_rate(snap.steps_per_sec))
    role = getattr(run, "role", "local")
    if role != "local":
        parts.append(f"{role} on {run.master}")
    return f"{run.name}: {_status_label(snap)} at step {step} ({', '.join(parts)})"


def text_summary(run, *, with_error: bool = True) -> str:
    """The run as text (for the end of a run where no widget shows it): status line, newest
    checkpoint, the last value of every scalar, and (``with_error``) the error with its
    traceback if any."""
    snap = run.history.snapshot()
    lines = [text_status(run)]
    if run.logdir is None:
        lines.append("  " + _no_logdir_text(run))
    elif snap.checkpoints:
        newest = snap.checkpoints[0]
        lines.append(
            f"  checkpoint: step {_step_text(newest.step)} written "
            f"{time.strftime('%H:%M:%S', time.localtime(newest.wall_time))} "
            f"in {newest.seconds:.2f} s: {newest.path}")
    elif snap.restored_from:
        lines.append(f"  no new checkpoint; restored from {snap.restored_from}")
    else:
        lines.append("  no checkpoint yet")
    if snap.rollbacks:
        lines.append("  " + rollbacks_text(snap.rollbacks))
    if snap.scalars:
        values = ", ".join(
            f"{tag} {plots.format_value(float(series.values[-1]))} "
            f"(step {int(series.steps[-1]):,})" for tag, series in snap.scalars.items())
        lines.append(f"  last values: {values}")
    if snap.error and with_error:
        lines.append("  error:")
        lines.extend("    " + line for line in snap.error.rstrip("\n").splitlines())
    return "\n".join(lines)


def rollbacks_text(rollbacks) -> str:
    """One line on a session's rollbacks (``on_nan="rollback"``): how many, and the last."""
    last = rollbacks[-1]
    times = "once" if len(rollbacks) == 1 else f"{len(rollbacks)} times"
    return (f"Rolled back {times} (at most {last.limit}); last: not finite at step "
            f"{_step_text(last.step)} ({last.problem}), restored "
            f"{os.path.basename(last.path)} (step {_step_text(last.restored_step)}).")


def _no_logdir_text(run) -> str:
    if getattr(run, "role", "local") == "worker":
        return ("This task saves nothing: the chief writes the checkpoints and summaries.")
    return ("No logdir: nothing is saved. No checkpoint and no event file is written; a stop "
            "or a crash loses this run's training. Give --logdir to make it resumable.")


# -- the panel -----------------------------------------------------------------------------


@functools.lru_cache(maxsize=None)
def _panel_box_class():
    widgets = _ipywidgets()

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


_CHECKPOINT_STEP = re.compile(r"-(\d+)$")


def _checkpoint_label(name: str) -> str:
    match = _CHECKPOINT_STEP.search(name)
    return f"{int(match.group(1)):,}" if match else name


def _output_tail(text: str, truncated: bool) -> str:
    """The last lines of ``text`` as a terminal would show them (a carriage return rewrites
    its line, as progress bars do)."""
    if len(text) > OUTPUT_TAIL_CHARS:
        text = text[-OUTPUT_TAIL_CHARS:]
        truncated = True
    lines = text.replace("\r\n", "\n").split("\n")
    if len(lines) > OUTPUT_TAIL_LINES:
        lines = lines[-OUTPUT_TAIL_LINES:]
        truncated = True
    lines = [line.rsplit("\r", 1)[-1] if "\r" in line.rstrip("\r") else line.rstrip("\r")
             for line in lines]
    if truncated:
        lines.insert(0, "...")
    return "\n".join(lines)


class Panel:
    """The live view of one run: header, checkpoints, plots, output, error and buttons.

    ``run`` is duck-typed (name, logdir, max_steps, role, master, history, stop, resume,
    save_now, can_stop, can_resume, can_save); this module imports neither run.py nor
    TensorFlow. ``clock`` (monotonic seconds) drives the throttling and ``wall_clock`` (epoch
    seconds) the "how long ago" of checkpoints; tests inject both and call ``tick`` directly.
    ``interval`` is the shortest time between two refreshes (``idle_interval`` once the run has
    ended), ``plot_interval`` between two plot renders. ``renderer`` draws the plots
    (``plots.SvgRenderer()`` by default; a ``plots.PlotRenderer`` gives PNG images);
    ``render_budget`` is the most of a core its renders may take, as ``cpu_clock`` (CPU
    seconds of the calling thread) measures them. Build and ``display`` it on the main
    thread; raises ImportError saying what to install when ipywidgets is missing.
    """

    def __init__(self, run, clock: Callable[[], float] = time.monotonic, *,
                 wall_clock: Callable[[], float] = time.time, interval: float = 0.5,
                 idle_interval: float = 1.0, plot_interval: float = 1.0,
                 renderer=None, render_budget: float = RENDER_BUDGET,
                 cpu_clock: Callable[[], float] = time.thread_time):
        for name, value in (("interval", interval), ("idle_interval", idle_interval),
                            ("plot_interval", plot_interval), ("render_budget", render_budget)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise ValueError(
                    f"Invalid value for argument `{name}`. Received: {name}={value!r}. "
                    "Expected a number of seconds > 0.")
        widgets = _ipywidgets()
        self._run = run
        self._history = run.history
        self._clock = clock
        self._wall_clock = wall_clock
        self._interval = float(interval)
        self._idle_interval = float(idle_interval)
        self._plot_interval = float(plot_interval)
        self._renderer = renderer or plots.SvgRenderer()
        self._render_budget = float(render_budget)
        self._cpu_clock = cpu_clock

        # Shared between the main thread (button and selector callbacks, close) and the
        # refresher: the pending message, the tag selection and the forced-refresh flag.
        self._lock = threading.Lock()
        self._message = ""
        self._selected: Tuple[str, ...] = ()
        self._force = True
        # Only the refresher (or a test calling tick) uses the rest; _tick_lock keeps a
        # display() tick and the refresher from interleaving.
        self._tick_lock = threading.Lock()
        self._snap = None
        self._snap_clock = 0.0           # the panel clock when _snap was taken
        self._last_tick: Optional[float] = None
        self._plotted_key = None
        self._next_render_at = -math.inf
        self._renders = 0
        self._render_cpu = 0.0
        self._shown_output = None
        self._last_failure = ""

        self._wake = threading.Event()
        self._closed = threading.Event()
        self._thread: Optional[threading.Thread] = None

        self._widgets = self._build(widgets)
        # The first values, on the caller's (main) thread; plots are left to the refresher,
        # so that building and displaying a panel never waits for a render.
        self._refresh(force=True, with_plot=False)

    # -- widgets ---------------------------------------------------------------------------

    def _build(self, widgets) -> Dict[str, object]:
        def html_widget(css_class, **kwargs):
            widget = widgets.HTML(value="", **kwargs)
            widget.add_class(css_class)
            return widget

        parts: Dict[str, object] = {
            "header": html_widget("jsv-header"),
            "warning": html_widget("jsv-warning"),
            "checkpoint": html_widget("jsv-checkpoint"),
            "output": html_widget("jsv-output"),
            "error": html_widget("jsv-error"),
            "message": html_widget("jsv-message"),
        }
        if self._run.logdir is None:
            parts["warning"].value = (
                '<div style="background:#fff3e0;border-left:4px solid #ef6c00;'
                f'padding:4px 8px">&#9888; {html.escape(_no_logdir_text(self._run))}</div>')
        else:
            parts["warning"].layout.display = "none"
        tags = widgets.SelectMultiple(options=(), value=(), rows=6, description="plots",
                                      layout=widgets.Layout(display="none", width="auto"))
        tags.add_class("jsv-tags")
        tags.observe(self._on_tags_selected, names="value")
        parts["tags"] = tags
        if self._renderer.format == "svg":  # drawn by the browser
            plot = widgets.HTML(value="", layout=widgets.Layout(display="none",
                                                               max_width="100%"))
        else:
            plot = widgets.Image(format=self._renderer.format, value=b"",
                                 layout=widgets.Layout(display="none", max_width="100%"))
        plot.add_class("jsv-plot")
        parts["plot"] = plot
        buttons = []
        for name, label, icon, tooltip, _flag in _BUTTONS:
            button = widgets.Button(description=label, icon=icon, tooltip=tooltip,
                                    disabled=True,
                                    # Never shrink: a long message beside them would squeeze
                                    # the labels to "...".
                                    layout=widgets.Layout(width="auto", flex="0 0 auto"))
            button.add_class(f"jsv-{name}")
            button.on_click(functools.partial(self._on_button, name))
            parts[name] = button
            buttons.append(button)
        controls = widgets.HBox(buttons + [parts["message"]])
        controls.add_class("jsv-controls")
        root = _panel_box_class()([
            parts["header"], parts["warning"], parts["checkpoint"], tags, plot,
            parts["output"], parts["error"], controls])
        root.add_class("jsv-panel")
        root.describe = lambda: text_status(self._run)
        parts["root"] = root
        return parts

    @property
    def widgets(self) -> Dict[str, object]:
        """The panel's widgets by part: root, header, warning, checkpoint, tags, plot, output,
        error, message, stop, resume, save (a copy of the mapping)."""
        return dict(self._widgets)

    @property
    def renders(self) -> int:
        """How many times the plots were rendered."""
        return self._renders

    @property
    def render_cpu(self) -> float:
        """CPU seconds the plot renders took, sending included (measured with ``cpu_clock``)."""
        return self._render_cpu

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
        self._refresh(force=True, with_plot=False)
        display(self._widgets["root"])
        self._start_refresher()

    @property
    def run(self):
        """The run this panel shows."""
        return self._run

    @property
    def closed(self) -> bool:
        """True once ``close`` was called."""
        return self._closed.is_set()

    def close(self) -> None:
        """Stops the refresher (the widgets keep their last values). Idempotent."""
        self._closed.set()
        self._wake.set()
        with _shown_lock:
            if _shown.get(self._run.name) is self:
                del _shown[self._run.name]
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=10)

    # -- callbacks (main thread) -----------------------------------------------------------

    def _on_button(self, name: str, _button=None) -> None:
        # Called by ipywidgets on the thread that handles comm messages (the kernel's main
        # thread, or a subshell thread in JupyterLab 4.6 with ipykernel 7). Only the run's method is called
        # here; what it changes reaches the widgets through the refresher.
        action = {"stop": lambda: self._run.stop(wait=False), "resume": self._run.resume,
                  "save": self._run.save_now}[name]
        try:
            action()
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

    def _on_tags_selected(self, change) -> None:
        with self._lock:
            self._selected = tuple(change["new"])
            self._force = True
        self._wake.set()

    # -- the refresher -----------------------------------------------------------------------

    def _start_refresher(self) -> None:
        if self._thread is not None or self._closed.is_set():
            return
        self._thread = threading.Thread(target=self._refresh_loop, daemon=True,
                                        name=f"jupyter_supervisor-panel-{self._run.name}")
        self._thread.start()

    def _refresh(self, force: bool = False, with_plot: bool = True) -> None:
        """A tick that shows its failure in the panel instead of raising it."""
        try:
            self._tick(self._clock(), force, with_plot)
            self._last_failure = ""
        except Exception as error:  # pylint: disable=broad-except
            self._show_refresh_failure(error)

    def _refresh_loop(self) -> None:
        while True:
            # Cleared before the check: a close() or click from now on ends the wait below.
            self._wake.clear()
            if self._closed.is_set():
                return
            self._refresh()
            snap = self._snap
            idle = snap is not None and snap.status in FINAL_STATUSES
            self._wake.wait(self._idle_interval if idle else self._interval)

    def _show_refresh_failure(self, error: Exception) -> None:
        text = f"The panel could not refresh: {type(error).__name__}: {error}"
        if text != self._last_failure:  # logged once, shown until a refresh succeeds
            self._last_failure = text
            logger.info("Panel of run %r: refresh failed.", self._run.name, exc_info=True)
        try:
            self._set(self._widgets["message"], value=self._message_html(text))
        except Exception:  # pylint: disable=broad-except
            logger.debug("Could not show the refresh failure.", exc_info=True)

    def tick(self, now: Optional[float] = None, *, force: bool = False) -> bool:
        """Brings the widgets up to date; returns True if any widget changed.

        The refresher calls it about ``1 / interval`` times a second; a call sooner than
        ``interval`` after the previous one does nothing unless forced (a button click forces
        the next one). Plots are re-rendered only when new points arrived (or the selection
        changed), at most every ``plot_interval`` seconds, and within ``render_budget``.
        """
        return self._tick(self._clock() if now is None else now, force, True)

    def _tick(self, now: float, force: bool, with_plot: bool) -> bool:
        with self._tick_lock:
            with self._lock:
                force = force or self._force
                self._force = False
                message = self._message
                selected = self._selected
            # A little slack: the refresher's wait may end a hair before the interval is over.
            if (not force and self._last_tick is not None
                    and now - self._last_tick < 0.9 * self._interval):
                return False
            self._last_tick = now
            history = self._history
            if self._snap is None or history.version != self._snap.version:
                self._snap = history.snapshot()
                self._snap_clock = now
            snap = self._snap
            w = self._widgets
            changed = self._set(w["header"], value=self._header_html(snap, now))
            changed |= self._set(w["checkpoint"], value=self._checkpoint_html(snap))
            if self._shown_output != (snap.output_total, len(snap.output)):
                self._shown_output = (snap.output_total, len(snap.output))
                changed |= self._set(w["output"], value=self._output_html(snap))
            changed |= self._set(w["error"], value=self._error_html(snap.error))
            changed |= self._set(w["message"],
                                 value=self._message_html(message or self._last_failure))
            run = self._run
            for name, _label, _icon, _tooltip, flag in _BUTTONS:
                changed |= self._set(w[name], disabled=not bool(getattr(run, flag)))
            if with_plot:
                changed |= self._update_plot(snap, now, selected)
            return changed

    @staticmethod
    def _set(widget, **values) -> bool:
        """Sets the traits that differ, as one message; True if any did."""
        differing = {name: value for name, value in values.items()
                     if getattr(widget, name) != value}
        if not differing:
            return False
        with widget.hold_sync():
            for name, value in differing.items():
                setattr(widget, name, value)
        return True

    # -- parts -------------------------------------------------------------------------------

    def _header_html(self, snap, now: float) -> str:
        run = self._run
        status = snap.status
        colour = _STATUS_COLOURS.get(status, "#757575")
        elapsed = snap.elapsed
        if snap.active_since is not None:
            elapsed += max(0.0, now - self._snap_clock)
        pieces = [
            f'<b class="jsv-name">{html.escape(str(run.name))}</b>',
            f'<span class="jsv-status jsv-status-{status}" style="color:{colour};'
            f'font-weight:bold">{html.escape(_status_label(snap))}</span>',
            f'step <span class="jsv-step" data-step="{"" if snap.step is None else snap.step}">'
            f'{_step_text(snap.step)}</span>',
        ]
        if status == "running":  # no rate field at all when not running; no made-up zero
            rate = ("measuring…" if snap.steps_per_sec is None
                    else format_rate(snap.steps_per_sec))
            pieces.append(f'<span class="jsv-rate">{rate}</span>')
        fit = _fit_text(snap.progress)
        if fit:
            pieces.append(f'<span class="jsv-fit">{fit}</span>')
        pieces.append(f'<span class="jsv-elapsed">{format_duration(elapsed)}</span>')
        role = getattr(run, "role", "local")
        if role != "local":
            pieces.append(f'<span class="jsv-role">{html.escape(str(role))} on '
                          f'{html.escape(str(run.master))}</span>')
        line = ' <span style="color:#9e9e9e">|</span> '.join(pieces)
        done, max_steps = _done_of_total(snap, run.max_steps)
        if not max_steps:
            return f'<div class="jsv-header-line">{line}</div>'
        fraction = min(1.0, max(0.0, done / max_steps))
        permille = int(fraction * 1000)  # a new width at most 1000 times per run
        eta = _eta(snap, max_steps)
        eta_text = f"ETA {format_duration(eta)}" if eta is not None else ""
        bar = (f'<div class="jsv-progress" data-fraction="{permille / 1000:.3f}" '
               'style="display:inline-block;width:50%;height:8px;background:#e0e0e0;'
               'border-radius:4px;overflow:hidden;vertical-align:middle">'
               f'<div class="jsv-progress-bar" style="width:{permille / 10:.1f}%;height:100%;'
               f'background:{colour}"></div></div>'
               f' <span class="jsv-progress-text">{permille / 10:.1f}% of {max_steps:,}</span>'
               f' <span class="jsv-eta">{eta_text}</span>')
        return f'<div class="jsv-header-line">{line}</div><div>{bar}</div>'

    def _checkpoint_html(self, snap) -> str:
        if self._run.logdir is None:
            return ""
        if snap.checkpoints:
            newest = snap.checkpoints[0]
            when = time.strftime("%H:%M:%S", time.localtime(newest.wall_time))
            ago = format_ago(self._wall_clock() - newest.wall_time)
            text = (f'Checkpoint: step <span class="jsv-checkpoint-step">'
                    f'{_step_text(newest.step)}</span> at {when} ({ago}), written in '
                    f'{newest.seconds:.2f} s <span style="color:#757575">'
                    f'{html.escape(os.path.basename(newest.path))}</span>')
        else:
            text = "No new checkpoint yet" if snap.ready else "No checkpoint yet"
        start = self._start_text(snap)
        if start:
            text += f' <span style="color:#9e9e9e">|</span> {start}'
        # What retention keeps, as the last checkpoint record says (oldest first).
        kept = [os.path.basename(path) for path in reversed(snap.kept)]
        if not kept and snap.checkpoints:
            kept = [os.path.basename(info.path) for info in reversed(snap.checkpoints)]
        if kept:
            labels = [_checkpoint_label(name) for name in kept[-KEPT_SHOWN:]]
            more = f"{len(kept) - KEPT_SHOWN} older, " if len(kept) > KEPT_SHOWN else ""
            text += (f'<br><span class="jsv-kept">kept ({len(kept)}): {more}'
                     f'{html.escape(", ".join(reversed(labels)))}</span>')
        if snap.rollbacks:
            text += ('<br><span class="jsv-rollback" style="color:#e65100">'
                     f'{html.escape(rollbacks_text(snap.rollbacks))}</span>')
        return text

    def _start_text(self, snap) -> str:
        """Where the current session started: a checkpoint, or initialized (by --init-fn)."""
        if snap.restored_from:
            return (f'restored from <span class="jsv-restored">'
                    f'{html.escape(os.path.basename(snap.restored_from))}</span>')
        if not snap.ready:
            return ""
        config = getattr(self._run, "config", None)
        if getattr(config, "init_fn", None) is not None:
            return '<span class="jsv-restored">initialized by --init-fn</span>'
        return '<span class="jsv-restored">initialized</span>'

    @staticmethod
    def _output_html(snap) -> str:
        if not snap.output:
            return ""
        truncated = snap.output_total > len(snap.output)
        tail = html.escape(_output_tail(snap.output, truncated))
        # column-reverse keeps the box scrolled to its end each time its content is replaced.
        return ('<div style="max-height:16em;overflow:auto;display:flex;'
                'flex-direction:column-reverse;border:1px solid #e0e0e0;padding:2px 6px">'
                f'<pre style="margin:0;white-space:pre-wrap">{tail}</pre></div>')

    @staticmethod
    def _error_html(error: str) -> str:
        if not error:
            return ""
        if len(error) > ERROR_MAX_CHARS:
            error = "...\n" + error[-ERROR_MAX_CHARS:]
        return ('<div style="border-left:4px solid #c62828;background:#ffebee;padding:4px 8px">'
                '<b style="color:#c62828">Error</b>'
                f'<pre style="margin:0;white-space:pre-wrap">{html.escape(error)}</pre></div>')

    @staticmethod
    def _message_html(message: str) -> str:
        if not message:
            return ""
        return f'<span style="color:#c62828">{html.escape(message)}</span>'

    def _plot_tags(self, tags: Sequence[str], selected: Tuple[str, ...]) -> Tuple[str, ...]:
        """Which tags to draw; keeps the selector in step with the tags there are."""
        selector = self._widgets["tags"]
        if len(tags) <= MAX_PLOTS:
            self._set(selector.layout, display="none")
            return tuple(tags)
        options = tuple(tags)
        chosen = tuple(tag for tag in selected if tag in options) or options[:MAX_PLOTS]
        chosen = chosen[:MAX_SELECTED]
        if tuple(selector.options) != options:
            with selector.hold_sync():
                selector.options = options
                selector.value = chosen
        elif tuple(selector.value) != chosen:
            selector.value = chosen
        self._set(selector.layout, display="")
        return chosen

    def _render_pause(self, cost: float) -> float:
        """Seconds until the next render may start, after one that took ``cost`` CPU seconds:
        ``plot_interval``, or longer so that rendering takes at most ``render_budget`` of a
        core (the training thread needs the GIL and the cores more than the plots do)."""
        return max(self._plot_interval, cost / self._render_budget)

    def _update_plot(self, snap, now: float, selected: Tuple[str, ...]) -> bool:
        tags = self._plot_tags(tuple(snap.scalars), selected)
        if not tags:
            return False
        key = (snap.scalars_version, tags)
        if key == self._plotted_key or now < self._next_render_at:
            return False
        started = self._cpu_clock()
        plot = self._widgets["plot"]
        self._set(plot, value=self._renderer.render(snap.scalars, tags))
        # The cost counts the render and the message that takes it to the frontend.
        cost = max(0.0, self._cpu_clock() - started)
        self._render_cpu += cost
        self._next_render_at = now + self._render_pause(cost)
        self._plotted_key = key
        self._renders += 1
        self._set(plot.layout, display="")
        return True


# The panel `show` made for each run name: showing a run again displays its panel again instead
# of adding one more refresher, and a new run of that name (a re-run cell) closes the panel of
# the run it replaces, so a notebook keeps one refresher per run name however often it re-runs.
_shown: Dict[str, Panel] = {}
_shown_lock = threading.Lock()


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
    if _in_kernel():  # a kernel without ipywidgets: say how to get the panel
        line += f"\n{_INSTALL_HINT}"
    print(line)
    return None


def close_all() -> None:
    """Closes every panel ``show`` made (their refreshers stop; for ``%unload_ext`` and the
    kernel's shutdown)."""
    with _shown_lock:
        panels = list(_shown.values())
    for panel in panels:
        panel.close()
