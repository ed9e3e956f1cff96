"""The notebook view of a training run: the widgets, how they are kept up to date, and the
record a saved notebook keeps.

A ``Panel`` shows one run (``text.PanelRun``; this module imports no run) from its
``RunHistory``. The training thread never touches a widget: it writes the history. What the
panel says is one state (``text.panel_state``), the points travel as deltas
(``widget.SeriesFeed``), and the browser draws them (``panel.js``, ``chart.js``: the files of
``widget._ESM_FILES``).

How the views are kept up to date (pushes from a refresher thread while a run is live, the
views' requests answered) is ``live.LiveView``'s, the base of both widgets here. What the run
prints and displays goes to an ``ipywidgets.Output`` beside the view
(``output_area.OutputArea``: Jupyter's own renderer), its newest outputs only.

Each display of the panel is the widget and, right below it, a record of the run (HTML and
text: its name, status, step and error, and at its end the image of its curves, ``plots``),
updated at each change of status and never the widget itself, so the view is never re-rendered.
A saved notebook keeps the record; JupyterLab and Notebook 7 hide it while the live view is
above it. The record of a change is sent before any state that shows the change, and a run's
end is shown in full (record, state, points) before the run's ``wait()`` returns.

Where no widget frontend is there (terminal IPython, plain Python) ``show`` prints a status
line (``text.text_status``; ``text.text_summary`` gives the run as text, with its timeline and
best values).
ipywidgets and anywidget are imported only when a widget is really made.
"""
import functools
import logging
import sys
import threading
import time
from typing import Callable, Dict, List, Optional, Sequence

from .. import compat
from . import plots
from .live import LiveView, check_seconds
from .output_area import OutputArea
from .text import (best_values, image_tags, panel_state, record_heading, record_html,
                   status_label, text_status, text_summary)
from .widget import INSTALL_HINT, ipywidgets, view_class

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
    """The widget's display data with ``text`` as its text form."""
    data = compat.widget_display_data(widget)
    data["text/plain"] = text
    return data



class Panel(LiveView):
    """The live view of one run: header, progress, checkpoint line, what happened, best values,
    curves, output, error and buttons; and, below each display, the run's record.

    ``clock`` (monotonic seconds) drives the throttling and ``wall_clock`` (epoch seconds) the
    "how long ago" of checkpoints; tests inject both and call ``tick`` directly. ``interval`` is
    the shortest time between two refreshes, ``plot_interval`` between two series messages,
    ``beat_interval`` between heartbeats, ``pull_interval`` between two requests of a view, and
    ``output_interval`` between two output updates. Build and ``display`` it on the main
    thread; raises ImportError saying what to install when ipywidgets or anywidget is missing.
    """

    def __init__(self, run, clock: Callable[[], float] = time.monotonic, *,
                 wall_clock: Callable[[], float] = time.time, interval: float = 0.5,
                 plot_interval: float = 1.0, beat_interval: float = 1.0,
                 pull_interval: float = 2.0, output_interval: float = 1.0):
        super().__init__(clock, interval, plot_interval, beat_interval, pull_interval)
        check_seconds(output_interval=output_interval)
        widgets = ipywidgets()
        self._run = run
        self._history = run.history
        self._wall_clock = wall_clock
        self._snap = None
        self._snap_clock = 0.0
        self._records: list = []       # the DisplayHandle of each display's record
        self._record = None            # (key, bundle) the records show
        self._record_answered = None   # the key of the record last sent with an answer
        self._renderer = None          # the record's image, once a run ended
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
        self._history.watch(self._on_status)
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
        """Shows the panel in the output of the executing cell, with the run's record below it,
        and starts its refresher while the run is live.

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
            # The widget's text form is empty: the record below it says what a frontend
            # without the widget shows.
            display(_widget_bundle(self._root, ""), raw=True)
            with self._tick_lock:
                _, bundle = self._record
                self._records.append(display(bundle, raw=True, display_id=True))
        else:  # a terminal shows text only
            print(text_status(self._run))
        self._start_refresher()

    def finish(self, *, error_in_cell: bool = False) -> None:
        """Brings every view and record up to date now (the magics call it when a run they
        waited for ended, while its cell still executes). ``error_in_cell``: the cell shows the
        failure's traceback; the panel does not repeat it."""
        with self._lock:
            self._error_in_cell = self._history.error if error_in_cell else None
        self.tick(force=True)

    def close(self) -> None:
        self._history.unwatch(self._on_status)
        super().close()
        with _shown_lock:
            if _shown.get(self._run.name) is self:
                del _shown[self._run.name]

    # -- what the views show ----------------------------------------------------------------------

    def _name(self) -> str:
        return str(self._run.name)

    def _live(self) -> bool:
        return self._history.active

    def _runs(self) -> Dict[str, object]:
        return {str(self._run.name): self._snapshot(self._clock()).scalars}

    def _sources(self) -> Dict[str, tuple]:
        return {str(self._run.name): (self._run.logdir, self._history)}

    def _snapshot(self, now: float):
        history = self._history
        if self._snap is None or history.version != self._snap.version:
            self._snap = history.snapshot()
            self._snap_clock = now
        return self._snap

    def _body_of(self, now: float) -> dict:
        snap = self._snapshot(now)
        elapsed = snap.elapsed + (max(0.0, now - self._snap_clock) if snap.active else 0.0)
        with self._lock:
            message = self._message
            in_cell = self._error_in_cell
        state = panel_state(self._run, snap, elapsed=elapsed, wall_now=self._wall_clock(),
                            message=message or self._last_failure)
        if in_cell and in_cell == snap.error:  # once: the cell's own traceback shows it
            state["error"] = ""
        # The record first: no view shows a change that a save right then would miss.
        self._update_record(snap)
        return state

    def _extra(self, now: float, ended: bool) -> bool:
        return self._output.update(now, force=ended)   # a run's end: its last output too

    # -- the record a saved notebook keeps ------------------------------------------------------

    def _update_record(self, snap) -> None:
        """Brings the record up to date at a change of status and at each checkpoint (the end:
        with its image) and updates every display's; a live run's says when it was made. Under
        _tick_lock."""
        as_of = self._wall_clock()
        heading, error = record_heading(self._run, snap, as_of)
        if snap.active:
            key = (snap.status, status_label(snap), error, snap.checkpoint_count)
        else:
            key = (snap.status, heading, error, snap.checkpoint_count, snap.scalars_version)
        if self._record is not None and self._record[0] == key:
            return
        bundle = {"text/plain": heading}
        image, tags = None, []
        if not snap.active:
            bundle["text/plain"] = text_summary(self._run, snap, with_error=False)
            tags = image_tags(snap, IMAGE_TAGS)
            if self._renderer is None:
                self._renderer = plots.PlotRenderer()
            image = self._renderer.render(snap.scalars, tags, heading=heading, error=error)
            bundle["image/png"] = image
        bundle["text/html"] = record_html(self._run, snap, key=self._key, image=image,
                                          image_tags=tags, as_of=as_of)
        self._record = (key, bundle)
        self._send_record()

    def _send_record(self) -> None:
        _, bundle = self._record
        for handle in self._records:
            handle.update(bundle, raw=True)

    def _answered(self) -> None:
        # The refresher's updates of the records may be dropped where a frontend drops what
        # background threads send (Colab): each record also goes out once from the comm thread.
        if self._record is not None and self._record[0] != self._record_answered:
            self._record_answered = self._record[0]
            self._send_record()

    # -- buttons (the comm thread) ----------------------------------------------------------------

    def _on_button(self, name: str) -> None:
        # Called by ipywidgets on the thread that handles comm messages (the kernel's main
        # thread, or a subshell thread in JupyterLab 4.6 with ipykernel 7). Only the run's
        # method is called here; the answer that follows shows what it changed.
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


class Comparison(LiveView):
    """Several runs' curves in one chart per tag, with a legend (``%supervise compare``)."""

    def __init__(self, runs: Sequence, clock: Callable[[], float] = time.monotonic, *,
                 interval: float = 0.5, plot_interval: float = 1.0, beat_interval: float = 1.0,
                 pull_interval: float = 2.0):
        super().__init__(clock, interval, plot_interval, beat_interval, pull_interval)
        if not runs:
            raise ValueError("Invalid value for argument `runs`. Received: runs=[]. "
                             "Expected at least one run.")
        self._runs_shown = list(runs)
        self._view = view_class()(compare=True, runs=[str(run.name) for run in runs])
        self._view.add_class("jsv-compare")
        self._view.on_msg(self._on_view_message)
        for run in self._runs_shown:
            run.history.watch(self._on_status)

    @property
    def widgets(self) -> Dict[str, object]:
        """The comparison's widget: view (the anywidget)."""
        return {"view": self._view}

    def _live(self) -> bool:
        return any(run.history.active for run in self._runs_shown)

    def _runs(self) -> Dict[str, object]:
        return {str(run.name): run.history.snapshot().scalars for run in self._runs_shown}

    def _sources(self) -> Dict[str, tuple]:
        return {str(run.name): (run.logdir, run.history) for run in self._runs_shown}

    def _body_of(self, now: float) -> dict:
        return {"runs": [str(run.name) for run in self._runs_shown]}

    def display(self) -> None:
        """Shows the chart in the executing cell (main thread) and starts its refresher while a
        run it shows is live."""
        from IPython.display import display  # pylint: disable=import-outside-toplevel
        display(_widget_bundle(self._view, "\n".join(text_status(run)
                                                     for run in self._runs_shown)), raw=True)
        self._start_refresher()

    def close(self) -> None:
        for run in self._runs_shown:
            run.history.unwatch(self._on_status)
        super().close()


# The panel `show` made for each run name: showing a run again displays its panel again instead
# of adding one more refresher, and a new run of that name (a re-run cell) closes the panel of
# the run it replaces, so a notebook keeps one refresher per run name however often it re-runs.
_shown: Dict[str, Panel] = {}
_shown_lock = threading.Lock()
_comparisons: List[Comparison] = []
_cell_hooks: list = []   # (shell, event, callback) registered with IPython's events


def _on_cell(kind: str) -> None:
    with _shown_lock:
        views = list(_shown.values()) + list(_comparisons)
    for view in views:
        try:
            view.notify_cell(kind)
        except Exception:  # pylint: disable=broad-except  (a view's note; the cell goes on)
            logger.debug("Telling a view that a cell is %s failed.", kind, exc_info=True)


def _watch_cells() -> None:
    """Registers the hooks that tell the views when a cell runs (once; main thread)."""
    if _cell_hooks or not _in_kernel():
        return
    shell = sys.modules["IPython"].get_ipython()
    for event, kind in (("pre_run_cell", "busy"), ("post_run_cell", "idle")):
        callback = functools.partial(lambda kind, _info: _on_cell(kind), kind)
        shell.events.register(event, callback)
        _cell_hooks.append((shell, event, callback))


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
        _watch_cells()
        panel.display()
        return panel
    line = text_status(run)
    if _in_kernel():  # a kernel without the widget packages: say how to get the panel
        line += f"\n{INSTALL_HINT}"
    print(line)
    return None


def finish(run, *, error_in_cell: bool = False) -> None:
    """Brings the panel shown for ``run`` (if any) up to date now, its records included.
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
        _watch_cells()
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
    """Closes every panel and comparison (their refreshers stop) and unregisters the cell
    hooks (for ``%unload_ext`` and the kernel's shutdown)."""
    with _shown_lock:
        panels = list(_shown.values())
    for view in panels + _comparisons:
        view.close()
    _comparisons.clear()
    while _cell_hooks:
        shell, event, callback = _cell_hooks.pop()
        try:
            shell.events.unregister(event, callback)
        except ValueError:  # already gone with its shell
            pass
