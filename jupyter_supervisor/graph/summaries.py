"""The graph Supervisor's summaries: the summary op computed for the summary service, written
to the event file (one point per step with ``complete_curves``), a last one when a session
ends, and each reported to the listeners, its scalars kept for the finiteness check
(``ScalarWatch``).

``Summaries`` gets only what it needs: the summary op and the global step, the event hub and
the ``ScalarWatch`` the check reads; the summary writer (which the Supervisor replaces
when a session starts after a close) and a step reader come with each call. It holds nothing of
the Supervisor, so that an abandoned Supervisor is freed at once (and its logdir's lock with
it).
"""
import logging
import math
import threading
import time
from typing import Callable, List, Mapping, Optional

import tensorflow as tf

from .. import compat, events
from ..checkpoints import describe_error
from ..finite import NonFiniteScalar
from . import services

logger = logging.getLogger("jupyter_supervisor")


class Summaries:
    """The summaries of one Supervisor: ``compute`` and ``write`` for its summary service,
    ``write_last`` when it stops, ``report`` for every summary that went to the event file.

    ``checks``: the scalars are kept in ``scalars`` (on_nan is not "ignore");
    ``complete_curves``: see the Supervisor.
    """

    def __init__(self, summary_op, global_step, hub: events.EventHub, scalars, *,
                 checks: bool, complete_curves: bool):
        self._summary_op, self._global_step = summary_op, global_step
        self._hub, self._scalars = hub, scalars
        self._checks = checks
        self._complete_curves = complete_curves
        self._generation = None     # of the summary service's last summary
        # The summary service's session (None: it does not run) and the step of its newest
        # summary (or the restored step's): one summary a step, and the last one in stop().
        self._summarized = None
        self._step: Optional[int] = None

    def session_ready(self, restored_step: Optional[int]) -> None:
        """A session is ready, restored at ``restored_step`` (None: initialized): the restored
        step's summary is the one the session before wrote at its end."""
        self._step = restored_step

    def service_started(self, sess) -> None:
        """The summary service computes its summaries in ``sess`` from now on."""
        self._summarized = sess

    def compute(self, sess):
        """``(serialized summary, global step or None)``, computed in ``sess``."""
        # A summary computed while a rollback restores is of the discarded timeline.
        self._generation = self._scalars.generation
        try:
            if self._global_step is None:
                return sess.run(self._summary_op), None
            summary, step = sess.run([self._summary_op, self._global_step])
        except tf.errors.OpError as e:
            # The same error type (code catching it still does), saying what to do.
            raise type(e)(e.node_def, None, _summary_failure(self._summary_op, e)) from e
        return summary, services.step_value(step)

    def write(self, writer, summary, step):
        """Writes to ``writer`` the summary service's summary, unless the step has one
        (training paused, or the restored step): one point per step, as the eager backend
        writes them."""
        if self._complete_curves and step is not None and step == self._step:
            return
        writer.add_summary(summary, step)
        self._step = step
        self.report(summary, step, self._generation)

    def write_last(self, writer, read_step: Callable[[], Optional[int]], failed: bool) -> None:
        """The summary service stopped: a summary of the session's last step (``read_step()``:
        the global step or None, never raising) to ``writer`` (or None: none), unless its newest
        one is of that step. A summary op that reads the input cannot run once the input ended
        (or, after a failure, in a broken session): then the session ends without it."""
        sess, self._summarized = self._summarized, None
        if not self._complete_curves or sess is None or compat.session_closed(sess) or \
                not writer:
            return
        try:
            step = read_step()
            if step is not None and step == self._step:
                return  # without computing it
            summary, step = self.compute(sess)
        except (tf.errors.OutOfRangeError, tf.errors.CancelledError):
            logger.debug("No last summary: the summary op reads the input, which ended.",
                         exc_info=True)
            return
        except tf.errors.OpError:
            if not failed:
                raise
            logger.debug("No last summary: the session failed.", exc_info=True)
            return
        self.write(writer, summary, step)

    def report(self, summary, step, generation=None):
        """Emits SummaryWritten; when checking finiteness, the scalars are parsed here (once)
        and their newest values kept for the check before the next checkpoint."""
        if not self._checks:
            self._hub.emit(_summary_event, summary, step, time.time())
            return
        scalars = events.scalars_from_summary(summary)
        self._scalars.observe(step, scalars, generation)
        self._hub.emit(events.SummaryWritten, step, scalars, time.time())


class ScalarWatch:
    """The newest value of every scalar summary a run reported, from any thread.

    ``observe`` costs a dict update per tag; ``non_finite`` lists the tags whose newest value
    is NaN or infinite, the one that went bad first first. ``clear`` forgets everything (after
    a rollback: those values belong to a discarded timeline) and starts a new ``generation``:
    a summary computed before it (read ``generation`` first) is then ignored.
    """

    def __init__(self):
        self._lock = threading.Lock()
        self._bad: dict = {}   # tag -> NonFiniteScalar, guarded by _lock
        self._generation = 0   # guarded by _lock

    @property
    def generation(self) -> int:
        """Bumps at every ``clear``."""
        return self._generation

    def observe(self, step: Optional[int], scalars: Mapping[str, float],
                generation: Optional[int] = None) -> None:
        """Records the values of one summary (``{tag: value}``) written at ``step``; one
        computed before the last ``clear`` (``generation`` read before computing it) is
        ignored."""
        with self._lock:
            if generation is not None and generation != self._generation:
                return
            for tag, value in scalars.items():
                if math.isfinite(value):
                    self._bad.pop(tag, None)
                elif tag not in self._bad:
                    self._bad[tag] = NonFiniteScalar(tag, float(value), step)
                else:
                    self._bad[tag] = self._bad[tag]._replace(value=float(value))

    def non_finite(self) -> List[NonFiniteScalar]:
        """The tags whose newest value is not finite, earliest first."""
        with self._lock:
            bad = list(self._bad.values())
        return sorted(bad, key=lambda s: (s.since is None, s.since or 0, s.tag))

    def clear(self) -> None:
        with self._lock:
            self._bad.clear()
            self._generation += 1


def _summary_event(summary, step, wall_time):
    return events.SummaryWritten(step, events.scalars_from_summary(summary), wall_time)


def _summary_failure(summary_op, error) -> str:
    """Which summaries of ``summary_op`` depend on the op that failed, and what to do."""
    failed = getattr(error, "op", None)
    summaries = list(summary_op.op.inputs) if summary_op.op.type == "MergeSummary" \
        else [summary_op]
    culprits = [s.op.name for s in summaries if failed is not None and _depends_on(s.op, failed)]
    named = ", ".join(repr(name) for name in (culprits or [s.op.name for s in summaries]))
    return (f"The summary op failed in the summary service ({describe_error(error)}): "
            f"{'the summary' if len(culprits) == 1 else 'summaries'} {named}. A summary that "
            "needs a feed (a placeholder) or a value only the training loop has cannot run on "
            "its own: run with --save-summaries-secs 0 (Supervisor(summary_op=None)) and write "
            "it from the loop with sv.summary_computed(sess, sess.run(summary, feed_dict=...)).")


def _depends_on(op, target, limit: int = 100_000) -> bool:
    """True when ``target`` is ``op`` or among its inputs, transitively."""
    seen, stack = set(), [op]
    while stack and len(seen) < limit:
        current = stack.pop()
        if current is target:
            return True
        if current in seen:
            continue
        seen.add(current)
        stack.extend(t.op for t in current.inputs)
        stack.extend(current.control_inputs)
    return False
