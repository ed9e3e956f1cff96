"""The notebook view of a training run: the widgets, how they are kept up to date, and the
record a saved notebook keeps.

A ``Panel`` shows one run (``text.PanelRun``; this module imports no run) from its
``RunHistory``. The training thread never touches a widget: it writes the history. What the
panel says is one state (``text.panel_state``), the points travel as deltas
(``widget.SeriesFeed``), and the browser draws them (``panel.js``, ``chart.js``: the files of
``widget._ESM_FILES``).

Delivery is push and pull. While a run it shows is live, one refresher thread pushes: the state
when it changed, the new points at most every ``plot_interval`` seconds, the run's output, and a
heartbeat every ``beat_interval`` seconds; the refresher ends with the run (a resume starts
another). Every ``pull_interval`` seconds each view asks ({"type": "pull"}), saying which state
and points it holds; the answer, sent on the thread that handles comm messages, carries what it
lacks. So a view that opens gets every point once, a frontend that drops what background
threads send (Colab) still updates, the views say "kernel gone" only when their own requests go
unanswered, and a panel whose run ended costs nothing until a view asks. Before and after each
cell the kernel tells the views that asked lately ({"type": "busy"}, {"type": "idle"}): where
comm messages wait for the running cell (a frontend without kernel subshells), a view says
"kernel busy" instead of "kernel gone". What the run prints and displays goes to an
``ipywidgets.Output`` beside the view (``output_area.OutputArea``: Jupyter's own renderer), its
newest outputs only.

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
import math
import secrets
import sys
import threading
import time
from typing import Callable, Dict, List, Optional, Sequence

from .. import compat, names
from . import plots
from .output_area import OutputArea
from .text import (PALETTE, VALUE_DIGITS, best_values, image_tags, panel_state, record_heading,
                   record_html, status_label, text_status, text_summary)
from .widget import INSTALL_HINT, SeriesFeed, ipywidgets, view_class

logger = logging.getLogger("jupyter_supervisor")

# The most tags drawn in the saved notebook's image.
IMAGE_TAGS = 8
# A view says "kernel gone" when neither an answer nor anything else came for this many pull
# (or beat) intervals, whichever is longer.
DEAD_AFTER_INTERVALS = 4
# How long a run's end waits for the refresher to show it (record, state, points) before the
# run reports it anyway.
END_SHOWN_TIMEOUT = 10.0


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


def _check_seconds(**values) -> None:
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise ValueError(
                f"Invalid value for argument `{name}`. Received: {name}={value!r}. "
                "Expected a number of seconds > 0.")


class _LiveView:
    """A view widget kept up to date: pushed by one refresher thread while a run it shows is
    live (throttled ticks, series deltas, the heartbeat), answered when a view asks (on the
    comm thread), and closed. Subclasses build the widget and say what a view shows
    (``_body_of``, ``_runs``, ``_live``) and what else a tick does (``_extra``)."""

    def __init__(self, clock, interval, plot_interval, beat_interval, pull_interval):
        _check_seconds(interval=interval, plot_interval=plot_interval,
                       beat_interval=beat_interval, pull_interval=pull_interval)
        self._clock = clock
        self._interval = float(interval)
        self._plot_interval = float(plot_interval)
        self._beat_interval = float(beat_interval)
        self._pull_interval = float(pull_interval)
        # Shared between the comm thread (clicks, requests), the refresher and a run's end.
        self._lock = threading.Lock()
        self._force = True
        self._message = ""
        self._thread: Optional[threading.Thread] = None
        self._displayed = False              # shown once: a live run gets a refresher
        self._asked_at = -math.inf           # when a view last asked (the clock)
        # _tick_lock keeps a tick, an answer and a record update apart; the fields below are
        # used under it.
        self._tick_lock = threading.Lock()
        self._last_tick: Optional[float] = None
        self._next_plot = -math.inf
        self._next_beat = -math.inf
        self._last_failure = ""
        self._ticked_live = True              # the last tick showed a live run
        self._body: Optional[dict] = None     # the state without its seq, as last sent
        self._seq = 0
        self._feed = SeriesFeed()
        self._wake = threading.Event()
        self._closed = threading.Event()
        self._view = None
        # Ties the view to the records of its displays (text.record_html).
        self._key = secrets.token_hex(8)

    # -- what a subclass says -----------------------------------------------------------------

    def _body_of(self, now: float) -> dict:
        """The state the views show now (without seq and the common fields)."""
        raise NotImplementedError

    def _runs(self) -> Dict[str, object]:
        """{run name: its scalars} of every run shown."""
        raise NotImplementedError

    def _live(self) -> bool:
        """True while a run shown is live (starting, running or stopping)."""
        raise NotImplementedError

    def _extra(self, now: float, ended: bool) -> bool:  # pylint: disable=unused-argument
        """What else a tick brings up to date (the output); True if it sent anything."""
        return False

    # -- the state ------------------------------------------------------------------------------

    def _timing(self) -> dict:
        slowest = max(self._pull_interval, self._beat_interval)
        return {"pull_ms": round(self._pull_interval * 1000),
                "beat_ms": round(self._beat_interval * 1000),
                "dead_after_ms": round(DEAD_AFTER_INTERVALS * slowest * 1000)}

    def _state(self, now: float) -> dict:
        """The state now, numbered (``seq`` grows when it changed), also set as the trait.
        Under _tick_lock."""
        body = self._body_of(now)
        if body != self._body:
            self._body = body
            self._seq += 1
        state = dict(body, seq=self._seq, key=self._key, timing=self._timing(),
                     format={"digits": VALUE_DIGITS}, palette=list(PALETTE))
        if state != self._view.state:
            self._view.state = state
        return state

    # -- pushes: the refresher ------------------------------------------------------------------

    def tick(self, now: Optional[float] = None, *, force: bool = False) -> bool:
        """Brings the views up to date; returns True if anything was sent. A call sooner than
        ``interval`` after the previous one does nothing unless forced (or a run ended)."""
        now = self._clock() if now is None else now
        with self._tick_lock:
            with self._lock:
                force = force or self._force
                self._force = False
            if (not force and self._last_tick is not None
                    and now - self._last_tick < 0.9 * self._interval):
                return False
            self._last_tick = now
            # Read before the state: a run that ends after this is shown by the next tick.
            ended = not self._live()
            self._ticked_live = not ended
            seq = self._seq
            state = self._state(now)
            sent = self._extra(now, ended)
            sent |= self._push_series(now, ended)
            if not ended:
                sent |= self._beat(now)
            return sent or state["seq"] != seq

    def _push_series(self, now: float, ended: bool) -> bool:
        if now < self._next_plot and not ended:
            return False
        pushed = self._feed.push(self._runs())
        if pushed is None:
            return False
        parts, buffer = pushed
        self._view.send({"type": "series", "parts": parts}, [buffer])
        self._next_plot = now + self._plot_interval
        self._next_beat = now + self._beat_interval
        return True

    def _beat(self, now: float) -> bool:
        if now < self._next_beat:
            return False
        self._view.send({"type": "beat"})
        self._next_beat = now + self._beat_interval
        return True

    def _refresh(self) -> bool:
        """A tick that shows its failure instead of raising it; False once a tick showed every
        run ended."""
        self._ticked_live = True
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
                return self._live()
        return self._ticked_live

    def _start_refresher(self) -> None:
        """Starts the refresher of a displayed view while a run it shows is live."""
        with self._lock:
            self._displayed = True
            if self._thread is not None or self._closed.is_set() or not self._live():
                return
            self._thread = threading.Thread(target=self._refresh_loop, daemon=True,
                                            name=f"jupyter_supervisor-panel-{self._name()}")
            self._thread.start()

    def _name(self) -> str:
        return "compare"

    def _refresh_loop(self) -> None:
        while True:
            # Cleared before the check: a close() or click from now on ends the wait below.
            self._wake.clear()
            if self._closed.is_set() or not self._refresh():
                with self._lock:
                    if self._closed.is_set() or not self._live():  # else a resume came
                        self._thread = None
                        return
            self._wake.wait(min(self._beat_interval, self._interval))

    def _on_status(self, status: str) -> None:
        """A run shown changed status (a history watcher, on the thread that changed it): a
        live run gets a refresher; a run's end is shown by the refresher's last tick, waited
        for here, so that the run reports its end after the views show it."""
        with self._lock:
            self._force = True
        if status in names.ACTIVE_STATUSES:
            if self._displayed:
                self._start_refresher()
            self._wake.set()
            return
        with self._lock:
            thread = self._thread
        self._wake.set()
        if thread is None:
            if self._view is not None and not self._closed.is_set():
                self.tick(force=True)
        elif thread is not threading.current_thread():
            thread.join(END_SHOWN_TIMEOUT)

    # -- pulls: a view's request, on the comm thread ----------------------------------------------

    def _on_view_message(self, _widget, content, _buffers) -> None:
        kind = content.get("type") if isinstance(content, dict) else None
        if kind == "button":
            self._on_button(str(content.get("name")))
        elif kind != "pull":
            return
        self._answer(content)

    def _answer(self, request: dict) -> None:
        """Sends a view what it lacks: the state when its seq is not the newest, and the points
        it does not hold (``request["have"]``)."""
        with self._lock:
            self._asked_at = self._clock()
        try:
            with self._tick_lock:
                state = self._state(self._clock())
                self._answered()
                parts, buffer = self._feed.answer(self._runs(), request.get("have"))
        except Exception as error:  # pylint: disable=broad-except
            logger.info("Answering a view failed.", exc_info=True)
            self._view.send({"type": "answer", "id": request.get("id"), "parts": [],
                             "failure": f"{type(error).__name__}: {error}"}, [b""])
            return
        reply = {"type": "answer", "id": request.get("id"), "parts": parts}
        if request.get("seq") != state["seq"]:
            reply["state"] = state
        self._view.send(reply, [buffer])

    def _answered(self) -> None:
        """What else an answer brings up to date, on the comm thread (the records)."""

    def _on_button(self, name: str) -> None:  # pylint: disable=unused-argument
        return

    def notify_cell(self, kind: str) -> None:
        """Tells views that asked lately that a cell started ("busy") or ended ("idle")."""
        with self._lock:
            asked = self._clock() - self._asked_at
        if self._view is not None and not self._closed.is_set() and \
                asked < self._timing()["dead_after_ms"] / 1000:
            self._view.send({"type": kind})

    @property
    def closed(self) -> bool:
        """True once ``close`` was called."""
        return self._closed.is_set()

    def close(self) -> None:
        """Stops the refresher (the widgets keep their last values). Idempotent."""
        self._closed.set()
        self._wake.set()
        with self._lock:
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=10)


class Panel(_LiveView):
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
        _check_seconds(output_interval=output_interval)
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
        """Brings the record up to date at a change of status (the end: with its image) and
        updates every display's. Under _tick_lock."""
        heading, error = record_heading(self._run, snap)
        if snap.active:
            key = (snap.status, status_label(snap), error)
        else:
            key = (snap.status, heading, error, snap.checkpoint_count, snap.scalars_version)
        if self._record is not None and self._record[0] == key:
            return
        bundle = {"text/plain": text_status(self._run, snap)}
        image, tags = None, []
        if not snap.active:
            bundle["text/plain"] = text_summary(self._run, snap, with_error=False)
            tags = image_tags(snap, IMAGE_TAGS)
            if self._renderer is None:
                self._renderer = plots.PlotRenderer()
            image = self._renderer.render(snap.scalars, tags, heading=heading, error=error)
            bundle["image/png"] = image
        bundle["text/html"] = record_html(self._run, snap, key=self._key, image=image,
                                          image_tags=tags)
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


class Comparison(_LiveView):
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
