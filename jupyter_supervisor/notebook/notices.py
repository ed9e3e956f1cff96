"""A preemption notice stops every live run that listens, each with a checkpoint, before the
machine stops.

One thread per kernel (``jupyter_supervisor-preemption``) watches while a run listens: one
with ``--preemption-notice auto`` (the default), or one given a function of its own
(``RunConfig(preemption_notice=fn)``, a function of no arguments that returns True on a notice,
as TensorFlow's ``termination_watcher_fn``). ``shutdown.py`` starts it with each run, as it
hooks the kernel's other ways to end. For ``auto`` the thread asks ``preemption.detect()``
once per kernel (and metadata address); where no provider answers and no run gave a function
of its own, the thread ends at once: nothing is polled there. Else it reads the notice every
``poll_secs`` of the provider (``POLL_SECS`` replaces them all: tests) and calls the users'
functions every ``USER_POLL_SECS``, and ends once no run listens.

A notice is the machine's: every listening run is asked to stop (``TrainingRun.stop``, with the
notice as its ``why``), so that each writes the checkpoint of its step in flight at its next
step boundary and stops; the event file's SessionLog.STOP and the run's ``stop_reason`` say
the notice, the panel's timeline and the run's output say which checkpoint was written. The
thread waits for the runs until ``MARGIN_SECS`` before the announced time (without one, the
kernel's ``STOP_SECS``). The kernel's own hooks are put back once no run is live, so the
SIGTERM that follows finds nothing left to save. A run resumed after the notice is stopped
again: the provider's notice stays.
"""
import logging
import threading
import time
from typing import Callable, Dict, List, Optional, Tuple

from .. import preemption

logger = logging.getLogger("jupyter_supervisor")

# Seconds between two reads of every watcher when set (tests); None: each provider's own.
POLL_SECS: Optional[float] = None
# Seconds between two calls of a user's function: as TensorFlow's PreemptionCheckpointHandler
# calls its termination_watcher_fn.
USER_POLL_SECS = 1.0
# The runs' stops must end this long before the announced time, which the kernel's own end
# (SIGTERM, the process's exit) needs.
MARGIN_SECS = 5.0

THREAD_NAME = "jupyter_supervisor-preemption"


def _listening() -> list:
    """The runs a notice would stop now: live, not stopping yet, and not ``off``."""
    from . import run  # pylint: disable=import-outside-toplevel  (run.py imports shutdown.py)
    return [r for r in run.runs() if r.can_stop
            and not _same(r.config.preemption_notice, preemption.OFF)]


def _same(value, text: str) -> bool:
    return isinstance(value, str) and value == text


class NoticeHook:
    """The kernel's notice watcher, installed and uninstalled as ``shutdown.py``'s hooks are.
    ``stop_secs()``: how long the runs get without an announced time. ``_lock`` guards
    ``_thread``, ``_wake`` and ``_failed``."""

    def __init__(self, stop_secs: Callable[[], float]):
        self._stop_secs = stop_secs
        self._lock = threading.Lock()
        self._thread: Optional[threading.Thread] = None
        self._wake = threading.Event()      # set: look at the runs again now
        self._failed: set = set()           # ids of user functions whose failure was logged
        # Once per kernel and metadata address: the provider's watcher, or None.
        self._detected: Dict[str, Optional[preemption.MetadataWatcher]] = {}

    @property
    def thread(self) -> Optional[threading.Thread]:
        """The watching thread while it runs, else None."""
        return self._thread

    def install(self) -> None:
        """A run started: the thread starts, or looks at the runs again at once."""
        with self._lock:
            if self._thread is not None:
                self._wake.set()
                return
            self._wake = threading.Event()
            self._thread = threading.Thread(target=self._loop, args=(self._wake,),
                                            name=THREAD_NAME, daemon=True)
            self._thread.start()

    def uninstall(self) -> None:
        """No run is live: the thread ends at its next look."""
        with self._lock:
            self._wake.set()

    def _loop(self, wake: threading.Event) -> None:
        due: Dict[object, float] = {}   # watcher -> time.monotonic() of its next read
        while True:
            wake.clear()
            runs = _listening()
            watchers = self._watchers(runs) if runs else []
            notice = None
            for key, ask, interval in watchers:
                now = time.monotonic()
                if due.get(key, now) <= now:
                    due[key] = now + interval
                    notice = ask()
                    if notice is not None:
                        break
            if notice is not None:
                self._act(notice, runs)
                continue
            if watchers:
                wake.wait(max(min(due[key] for key, _, _ in watchers) - time.monotonic(), 0))
                continue
            with self._lock:
                if wake.is_set():
                    continue   # a run started meanwhile
                self._thread = None
                return

    def _watchers(self, runs: list) -> List[Tuple[object, Callable[[], Optional[object]],
                                                  float]]:
        """(key, read: () -> Notice or None, seconds between reads) of what to watch."""
        found, seen = [], set()
        for run in runs:
            given = run.config.preemption_notice
            if callable(given) and id(given) not in seen:
                seen.add(id(given))
                found.append((id(given), lambda fn=given: self._ask_user(fn),
                              POLL_SECS or USER_POLL_SECS))
        if any(_same(run.config.preemption_notice, preemption.AUTO) for run in runs):
            watcher = self._provider()
            if watcher is not None:
                found.append((watcher, watcher.poll, POLL_SECS or watcher.poll_secs))
        return found

    def _provider(self) -> Optional[preemption.MetadataWatcher]:
        url = preemption.metadata_url()
        if url not in self._detected:
            self._detected[url] = preemption.detect(url)
        return self._detected[url]

    def _ask_user(self, fn: Callable[[], object]) -> Optional[preemption.Notice]:
        try:
            noticed = fn()
        except Exception:  # pylint: disable=broad-except
            with self._lock:
                first = id(fn) not in self._failed
                self._failed.add(id(fn))
            if first:
                logger.warning("The preemption watcher %r failed; it counts as no notice.",
                               fn, exc_info=True)
            return None
        if not noticed:
            return None
        name = getattr(fn, "__qualname__", None) or repr(fn)
        return preemption.Notice(f"the watcher {name}", time.time())

    def _act(self, notice: preemption.Notice, runs: list) -> None:
        """Stops ``runs`` on ``notice`` and waits for them until shortly before the machine
        stops; then each run's output says what was written."""
        why = notice.text()
        logger.warning("%s%s: every live run writes a checkpoint and stops.",
                       why[:1].upper(), why[1:])
        for run in runs:
            try:
                run.stop(wait=False, why=why)
            except RuntimeError:  # RunStateError: it ended meanwhile
                pass
        secs = (self._stop_secs() if notice.stops_at is None
                else notice.stops_at - time.time() - MARGIN_SECS)
        end = time.monotonic() + max(secs, 1.0)
        for run in runs:
            run.wait(max(end - time.monotonic(), 0.0))
        for run in runs:
            run.history.append_output(_outcome(run, why, notice.seen_at) + "\n")


def _outcome(run, why: str, seen_at: float) -> str:
    """What ``run`` did on the notice ``why`` read at ``seen_at`` (``preemption.outcome``)."""
    snap = run.history.snapshot()
    newest = snap.checkpoints[0] if snap.checkpoints else None
    saved = None
    if newest is not None and (newest.wall_time >= seen_at or newest.step == run.global_step):
        saved = newest.step
    return preemption.outcome(why, saved, None if newest is None else newest.step,
                              saves=run.logdir is not None)
