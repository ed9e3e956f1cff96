"""StallDetector alone: the limit, one alert per stall, its end, restarts; on a fake clock.

Through a run's history (status, sessions, the panel's text) the stall is tested in
tests/test_curves.py.
"""
import pytest

from jupyter_supervisor.view.stall import (FIRST_STEP_STALL, STALL_FACTOR, StallDetector,
                                           StallEnded, Stalled)

from helpers import FakeClock

WALL = 1_000_000.0   # the wall clock: the fake clock plus this


def detector(clock, stall_secs=30.0, step=0):
    stall = StallDetector(stall_secs, clock, lambda: WALL + clock.now)
    stall.restart(step)
    return stall


def steps_every(stall, clock, seconds, first, last):
    for step in range(first, last + 1):
        clock.now += seconds
        assert stall.observe(step, clock.now) is None


def test_the_limit_is_ten_first_steps_then_ten_median_step_times_or_the_floor():
    clock = FakeClock()
    stall = detector(clock)
    assert stall.limit() == FIRST_STEP_STALL * 30.0
    clock.now += 100.0
    stall.observe(1, clock.now)          # the first step (tracing) is no step time
    assert stall.limit() == FIRST_STEP_STALL * 30.0
    steps_every(stall, clock, 5.0, 2, 10)
    assert stall.limit() == STALL_FACTOR * 5.0
    steps_every(stall, clock, 0.5, 11, 40)
    assert stall.limit() == 30.0          # 10 x 0.5 s is under the floor
    assert StallDetector(0, clock).limit() is None


def test_a_stall_is_raised_once_and_ended_by_a_higher_step():
    clock = FakeClock()
    stall = detector(clock)
    steps_every(stall, clock, 5.0, 1, 20)
    clock.now += 49.0
    assert stall.check() is None and stall.stalled is None
    clock.now += 1.0
    raised = stall.check()
    assert raised == Stalled(20, WALL + clock.now - 50.0, WALL + clock.now)
    assert stall.stalled is raised
    clock.now += 600.0
    assert stall.check() is None          # raised once
    assert stall.observe(20, clock.now) is None and stall.stalled is raised
    clock.now += 1.0
    assert stall.observe(21, clock.now) == StallEnded(21, 651.0, WALL + clock.now)
    assert stall.stalled is None


def test_a_restart_or_a_clear_drops_the_stall_without_an_end_and_forgets_the_step_times():
    clock = FakeClock()
    stall = detector(clock)
    steps_every(stall, clock, 1.0, 1, 5)
    clock.now += 30.0
    assert stall.check() is not None
    stall.clear()
    assert stall.stalled is None
    assert stall.check() is not None      # no step came: raised again
    stall.restart(3)
    assert stall.stalled is None
    assert stall.limit() == FIRST_STEP_STALL * 30.0
    clock.now += 299.0
    assert stall.check() is None          # the clock started again at the restart
    stall.observe(4, clock.now)
    clock.now += 1.0
    stall.observe(5, clock.now)
    assert stall.limit() == 30.0          # one step time of 1 s: the floor
    clock.now += 100.0
    stall.resume()                        # paused 100 s, then running again at step 5
    assert stall.limit() == FIRST_STEP_STALL * 30.0 and stall.check() is None
    assert stall.observe(5, clock.now) is None
    clock.now += 1.0
    assert stall.observe(6, clock.now) is None


def test_steps_at_or_below_the_last_one_are_no_step():
    clock = FakeClock()
    stall = detector(clock, step=10)
    clock.now += 299.0
    assert stall.observe(10, clock.now) is None and stall.observe(9, clock.now) is None
    clock.now += 1.0
    assert stall.check() == Stalled(10, WALL, WALL + 300.0)


def test_stall_secs_0_looks_for_none_and_bad_arguments_say_what_is_expected():
    clock = FakeClock()
    stall = detector(clock, stall_secs=0)
    clock.now += 1e6
    assert stall.check() is None
    with pytest.raises(ValueError, match="Received: stall_secs=-1"):
        StallDetector(-1)
    with pytest.raises(TypeError, match="Received: clock=3"):
        StallDetector(30.0, 3)
