"""How the views of a panel or a comparison are kept up to date: ``LiveView``, the base of
``panel.Panel`` and ``panel.Comparison``.

Delivery is push and pull. While a run it shows is live, one refresher thread pushes: the state
when it changed, the new points at most every ``plot_interval`` seconds, and a heartbeat every
``beat_interval`` seconds; the refresher ends with the run (a resume starts another). Every
``pull_interval`` seconds each view asks ({"type": "pull"}), saying which state and points it
holds; the answer, sent on the thread that handles comm messages, carries what it lacks. So a
view that opens gets every point once, a frontend that drops what background threads send
(Colab) still updates, the views say "kernel gone" only when their own requests go unanswered,
and a panel whose run ended costs nothing until a view asks. Before and after each cell the
kernel tells the views that asked lately ({"type": "busy"}, {"type": "idle"}): where comm
messages wait for the running cell (a frontend without kernel subshells), a view says "kernel
busy" instead of "kernel gone". A chart's download asks for every point of its tag
({"type": "export"}), answered from the event files (``export``).
"""
import logging
import math
import secrets
import threading
from typing import Dict, Optional

from .. import names
from . import export
from .text import PALETTE, VALUE_DIGITS
from .widget import SeriesFeed

logger = logging.getLogger("jupyter_supervisor")

# A view says "kernel gone" when neither an answer nor anything else came for this many pull
# (or beat) intervals, whichever is longer.
DEAD_AFTER_INTERVALS = 4
# How long a run's end waits for the refresher to show it (record, state, points) before the
# run reports it anyway.
END_SHOWN_TIMEOUT = 10.0


def check_seconds(**values) -> None:
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise ValueError(
                f"Invalid value for argument `{name}`. Received: {name}={value!r}. "
                "Expected a number of seconds > 0.")



class LiveView:
    """A view widget kept up to date: pushed by one refresher thread while a run it shows is
    live (throttled ticks, series deltas, the heartbeat), answered when a view asks (on the
    comm thread), and closed. Subclasses build the widget and say what a view shows
    (``_body_of``, ``_runs``, ``_live``) and what else a tick does (``_extra``)."""

    def __init__(self, clock, interval, plot_interval, beat_interval, pull_interval):
        check_seconds(interval=interval, plot_interval=plot_interval,
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

    def _sources(self) -> Dict[str, tuple]:
        """{run name: (its logdir or None, its RunHistory)} of every run shown."""
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
        if kind == "export":
            self._answer_export(content)
            return
        if kind == "button":
            self._on_button(str(content.get("name")))
        elif kind != "pull":
            return
        self._answer(content)

    def _answer_export(self, request: dict) -> None:
        """Sends a view every point of the tag its chart downloads (``export``)."""
        tag = str(request.get("tag"))
        reply = {"type": "export", "id": request.get("id"), "tag": tag}
        try:
            reply["parts"], buffer = export.answer(self._sources(), tag)
        except Exception as error:  # pylint: disable=broad-except
            logger.info("Reading the points of %r failed.", tag, exc_info=True)
            reply.update(parts=[], failure=f"{type(error).__name__}: {error}")
            buffer = b""
        self._view.send(reply, [buffer])

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

