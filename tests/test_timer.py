"""timer.Timer: when to save or write summaries, for both backends (no TensorFlow)."""
import pytest

from jupyter_supervisor.timer import Timer


class Clock:
    """A clock the test moves by hand."""

    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_a_seconds_timer_is_due_once_its_interval_since_the_restart_passed():
    clock = Clock()
    timer = Timer(secs=10, clock=clock)
    assert timer.enabled and timer.due()  # never restarted: due at once
    timer.restart()
    clock.now += 9.5
    assert not timer.due()
    clock.now += 0.5
    assert timer.due()
    timer.restart()
    assert not timer.due()


def test_a_steps_timer_counts_steps_from_the_restart():
    timer = Timer(steps=5, clock=Clock())
    assert timer.due(0)
    timer.restart(3)
    assert not timer.due(7) and timer.due(8)


def test_a_timer_is_overdue_once_it_was_due_for_one_interval_more():
    """A save put off while the write before it runs waits no longer than that."""
    clock = Clock()
    timer = Timer(secs=10, clock=clock)
    assert timer.overdue()  # never restarted
    timer.restart()
    clock.now += 19.5
    assert timer.due() and not timer.overdue()
    clock.now += 0.5
    assert timer.overdue()
    steps = Timer(steps=5, clock=clock)
    steps.restart(3)
    assert steps.due(8) and not steps.overdue(12) and steps.overdue(13)
    assert not Timer(clock=clock).overdue(10**9)


def test_work_that_outlasts_the_interval_starts_the_next_one_when_it_ends():
    """A checkpoint's write longer than the interval: the next save is due one interval
    after the write ended, not at once (the writes would follow one another all the time);
    a write within the interval leaves the interval as it was."""
    clock = Clock()
    timer = Timer(secs=10, clock=clock)
    assert timer.ended() is None  # never restarted
    timer.restart()
    clock.now += 4
    assert timer.ended() is None and not timer.due()
    clock.now += 6
    assert timer.due()
    timer.restart()   # at 10
    clock.now += 15   # the write ends at 25
    assert timer.ended() == 15 and not timer.due()
    clock.now += 9.5
    assert not timer.due()
    clock.now += 0.5  # 35: one interval after the write's end
    assert timer.due() and not timer.overdue()
    steps = Timer(steps=5, clock=clock)
    steps.restart(3)
    clock.now += 100
    assert steps.ended() is None and steps.due(8)


@pytest.mark.parametrize("off", [dict(), dict(secs=0), dict(secs=None, steps=0)])
def test_a_timer_of_zero_is_never_due(off):
    timer = Timer(**off, clock=Clock())
    assert not timer.enabled and not timer.due(10**9)


def test_contradictory_or_bad_arguments_are_refused_at_once():
    with pytest.raises(ValueError, match=r"Invalid value for argument `steps`. Received: "
                                         r"steps=5. Expected None when secs is given"):
        Timer(secs=1, steps=5)
    with pytest.raises(ValueError, match="`secs`"):
        Timer(secs=-1)
    with pytest.raises(ValueError, match="`steps`"):
        Timer(steps=1.5)


def test_moved_is_false_only_for_the_step_the_newest_checkpoint_holds():
    timer = Timer(secs=1)
    assert timer.moved(0) and timer.moved(None)
    timer.last_step = 7
    assert not timer.moved(7) and timer.moved(8) and timer.moved(None)
