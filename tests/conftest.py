"""Fixtures shared by the whole test suite."""
import os
import time

# TensorFlow reads this when it is first imported; conftest.py is imported before any test module.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import pytest  # noqa: E402


def _wait_for(predicate, timeout=10.0, interval=0.02, what=None):
    """Poll ``predicate`` until it returns something truthy, and return that value.

    Raises AssertionError naming ``what`` (or the predicate) if ``timeout`` seconds pass first.
    Tests use this instead of sleeping a fixed time: they go on as soon as the condition holds.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            what = what or getattr(predicate, "__name__", repr(predicate))
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(interval)


@pytest.fixture
def wait_for():
    """``wait_for(predicate, timeout=10.0, interval=0.02, what=None)``: poll a condition."""
    return _wait_for
