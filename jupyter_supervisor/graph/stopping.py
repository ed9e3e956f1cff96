"""Stopping the graph Supervisor: its Coordinator, which remembers why the first stop was
requested and tells the callbacks of ``when_stopped``; the clean end of a non-chief stopped
while it waited for the chief; and the close of a session that cannot hang the stop.
"""
import logging
import threading
import weakref
from typing import Optional

import tensorflow as tf

from .. import events

logger = logging.getLogger("jupyter_supervisor")


class WaitCancelledError(tf.errors.CancelledError):
    """A stop was requested while a non-chief waited for the chief: a clean end."""

    def __init__(self, message: str):
        super().__init__(None, None, message)


class StopCoordinator(tf.compat.v1.train.Coordinator):
    """TensorFlow's Coordinator, remembering why the first stop was requested, and telling
    the callbacks of ``when_stopped``."""

    def __init__(self):
        super().__init__(clean_stop_exception_types=(tf.errors.OutOfRangeError,
                                                     WaitCancelledError))
        self._reason_lock = threading.Lock()
        self.stop_reason: Optional[str] = None       # guarded by _reason_lock
        self.stop_exception: Optional[BaseException] = None
        self._on_stop: list = []                     # weak methods; guarded by _reason_lock

    def when_stopped(self, method) -> None:
        """Calls ``method()`` (a bound method, held weakly) in the thread that requests a stop,
        at every request; at once when a stop is requested already."""
        with self._reason_lock:
            self._on_stop = [m for m in self._on_stop if m() is not None]
            self._on_stop.append(weakref.WeakMethod(method))
        if self.should_stop():
            method()

    def request_stop(self, ex=None):
        value = ex[1] if isinstance(ex, tuple) else ex
        with self._reason_lock:
            if self.stop_reason is None:
                if value is None:
                    self.stop_reason = events.REQUESTED
                elif isinstance(value, self._clean_stop_exception_types):
                    self.stop_reason = events.OUT_OF_RANGE
                else:
                    self.stop_reason = events.ERROR
                    self.stop_exception = value
            told = [m() for m in self._on_stop]
        try:
            super().request_stop(ex)
        finally:
            for method in told:
                if method is not None:
                    method()

    def clear_stop(self):
        with self._reason_lock:
            self.stop_reason, self.stop_exception = None, None
        super().clear_stop()


def close_session(sess, grace_secs: float) -> None:
    """Closes ``sess`` within ``grace_secs`` (the Supervisor's ``stop_grace_secs``).

    Closing a session on a cluster waits for every task it used; with a task gone for good
    (a dead parameter server) that wait never ends, and the error would never reach the
    caller. So the close runs on a daemon thread and is left to finish on its own.
    """
    def close():
        try:
            sess.close()
        except Exception:  # pylint: disable=broad-except
            logger.debug("Closing the session failed.", exc_info=True)

    closer = threading.Thread(target=close, name="jupyter_supervisor-close", daemon=True)
    closer.start()
    closer.join(grace_secs)
    if closer.is_alive():
        logger.warning("The session did not close within %s s (a task of the cluster is "
                       "gone?); it will close when the task answers.", grace_secs)
