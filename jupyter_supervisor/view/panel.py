"""The notebook view of a training run: the widgets, their refresher, and the fallback a saved
notebook keeps.

A ``Panel`` shows one run (duck-typed: ``name``, ``logdir``, ``max_steps``, ``role``, ``master``,
``history``, ``can_stop``, ``can_resume``, ``can_save``, ``stop(wait=False)``, ``resume()``,
``save_now()``, and optionally ``config.init_fn``; this module imports no run) from its
``RunHistory``. The training thread never touches a widget: it writes the history, and one
refresher thread per displayed panel reads it.

What the panel says is one state (``text.panel_state``) derived from the history each time it
changed: the header, the progress and its ETA, fit's epoch and batch, the checkpoint line, the
timeline of what happened and the best value of each metric. It travels to the browser as one
trait; the series travel as deltas (``widget.SeriesFeed``), at most every ``plot_interval``
seconds, and the browser draws them (``panel.js``: hover readout, zoom, log scale, smoothing,
step / relative / wall-time axis). A heartbeat every ``beat_interval`` seconds lets the browser
say "kernel gone" when it stops. What the run prints and displays goes to an
``ipywidgets.Output`` beside the view (``output_area.OutputArea``: Jupyter's own renderer), its
newest outputs only.

When a run ends, each display of the panel is updated (``update_display``) with a fallback
that a saved notebook keeps: the final status text and a PNG of the final curves (matplotlib
``Figure`` + Agg, never pyplot). So the traffic depends on the intervals, never on how fast
the run trains.

Where no widget frontend is there (terminal IPython, plain Python) ``show`` prints a status
line (``text.text_status``; ``text.text_summary`` gives the run as text, with its timeline and
best values).
ipywidgets and anywidget are imported only when a widget is really made.
"""
import functools
import logging
import math
import sys
import threading
import time
from typing import Callable, Dict, List, Optional, Sequence

from .. import names
from . import plots
from .output_area import OutputArea
from .text import best_values, panel_state, text_status, text_summary
from .widget import INSTALL_HINT, SeriesFeed, ipywidgets, view_class

logger = logging.getLogger("jupyter_supervisor")

# The most tags drawn in the saved notebook's image.
IMAGE_TAGS = 8


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
        self._feed = SeriesFeed(str(run.name))
        self._snap = None
        self._snap_clock = 0.0
        self._handles: list = []       # the DisplayHandle of each display
        self._published = None         # what the displays' fallback shows (a key)
        self._error_in_cell: Optional[str] = None   # an error whose traceback a cell shows

        self._view = view_class()(compare=False, runs=[str(run.name)])
        self._view.add_class("jsv-panel-view")
        self._view.on_msg(self._on_view_message)
        self._output = OutputArea(widgets.Output(), self._history.outputs,
                                  float(output_interval))
        self._output.widget.add_class("jsv-output")
        self._root = _panel_box_class()([self._view, self._output.widget])
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
        return {"root": self._root, "view": self._view, "output": self._output.widget}

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
        changed |= self._output.update(now)
        changed |= bool(self._send_series([(self._feed, snap.scalars)], now))
        changed |= self._beat(now)
        if not snap.active:
            self._publish(snap)
        return changed

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
        tags = [tag for tag in snap.scalars if not names.is_rate(tag)][:IMAGE_TAGS]
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
