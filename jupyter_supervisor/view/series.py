"""One scalar tag's points, bounded however long the run: ``Series``, and its read-only view
``ScalarSeries``.

A series keeps at most ``max_points`` buckets. A bucket holds the last step it covers, the sum
and count of its values (so its mean) and their min and max. While a series fits, every point
is its own bucket; when it is full, neighbouring buckets are merged in pairs and each bucket from
then on takes twice as many points. So every bucket covers about the same number of points, and
the min/max envelope of the raw values is exact at any zoom level.

A point whose step is lower than the last one drops the points at and after that step
(TensorBoard's out-of-order rule).

Besides its buckets, a series keeps its newest ``RAW_TAIL`` points as they came (``raw_tail``):
what an event file may not hold yet (a writer flushes every two minutes), so that a chart's
download is every point at full resolution while a run is live (``view/export.py``).
"""
import array
import bisect
import collections
import itertools
import math
from typing import NamedTuple, Optional

import numpy as np

# Unique across every series, so that a series replaced by another (event files read at a
# resume) never looks like the one a reader saw.
_GENERATIONS = itertools.count(1)
# The newest points a series keeps as they came, besides its buckets.
RAW_TAIL = 1024


class ScalarSeries(NamedTuple):
    """One tag's points, oldest first; read-only arrays of equal length.

    ``steps`` is the last global step of each bucket, ``values`` the mean of its values, ``mins``
    and ``maxs`` their envelope (equal to ``values`` where a bucket holds a single point),
    ``walls`` the wall time (epoch seconds) of each bucket's last point, ``counts`` how many
    points each bucket holds (None: one each). ``generation`` changes whenever buckets were
    merged or dropped, so that a reader who saw the first n buckets of the same generation
    knows that only the buckets from n - 1 on (the last one may have grown) are new; ``merged``
    (buckets take more than one point) is the same throughout a generation.
    """
    steps: np.ndarray
    values: np.ndarray
    mins: np.ndarray
    maxs: np.ndarray
    walls: np.ndarray
    generation: int = 0
    counts: Optional[np.ndarray] = None
    merged: bool = False


class RawTail(NamedTuple):
    """A series' newest points as they came (lists, oldest first); it holds every point of the
    series whose step is above ``after`` (None: every point since the first)."""
    steps: list
    values: list
    walls: list
    after: Optional[int]


class Series:
    """The buckets of one tag (see the module docstring); not thread-safe on its own.

    Kept in ``array.array``s: compact like numpy arrays, but appending and updating one item
    from Python is several times faster, and this runs for every summary of a long run.
    """

    def __init__(self, max_points: int):
        self._max_points = max_points
        self._last = array.array("q")    # last step of each bucket, non-decreasing
        self._sum = array.array("d")     # sum of its values
        self._min = array.array("d")     # envelope (NaNs take no part: +inf/-inf if only NaNs)
        self._max = array.array("d")
        self._count = array.array("q")   # how many points it holds
        self._wall = array.array("d")    # wall time of its last point
        self._width = 1                  # points a bucket takes before the next one opens
        self._generation = next(_GENERATIONS)  # a new one when buckets are merged or dropped
        self._frozen: Optional[ScalarSeries] = None  # read-only copy of the current state
        # The newest points as they came: (step, value, wall); and the step of the newest one
        # it let go (None: none yet).
        self._tail: "collections.deque[tuple]" = collections.deque(maxlen=RAW_TAIL)
        self._tail_dropped: Optional[int] = None

    def __len__(self) -> int:
        return len(self._last)

    @property
    def first_step(self) -> Optional[int]:
        return self._last[0] if self._last else None

    @property
    def last_step(self) -> Optional[int]:
        return self._last[-1] if self._last else None

    @property
    def last_value(self) -> Optional[float]:
        return self._sum[-1] / self._count[-1] if self._last else None

    def drop_last(self) -> None:
        """Drops the newest bucket."""
        self._truncate(len(self._last) - 1)

    def add(self, step: int, value: float, wall: float) -> None:
        """Adds one point; a step lower than the last one first drops the points from it on."""
        self._keep_raw((step, value, wall))
        if value != value:  # NaN: it counts, but takes no part in the envelope
            self._add_bucket(step, value, math.inf, -math.inf, 1, wall)
        else:
            self._add_bucket(step, value, value, value, 1, wall)

    def _keep_raw(self, point: tuple) -> None:
        if len(self._tail) == RAW_TAIL:
            self._tail_dropped = self._tail[0][0]
        self._tail.append(point)

    def _add_bucket(self, step: int, total: float, lo: float, hi: float, count: int,
                    wall: float) -> None:
        last = self._last
        if last and step < last[-1]:
            self.drop_from(step)
        self._frozen = None
        if last and self._count[-1] < self._width:
            last[-1] = step
            self._sum[-1] += total
            if lo < self._min[-1]:
                self._min[-1] = lo
            if hi > self._max[-1]:
                self._max[-1] = hi
            self._count[-1] += count
            self._wall[-1] = wall
            return
        if len(last) >= self._max_points:
            self._merge_pairs()
            last = self._last
        last.append(step)
        self._sum.append(total)
        self._min.append(lo)
        self._max.append(hi)
        self._count.append(count)
        self._wall.append(wall)

    def _merge_pairs(self) -> None:
        # Called when full: max_points is even, so every bucket has a partner.
        def merged(column, combine, typecode):
            values = np.array(column)
            out = array.array(typecode)
            out.frombytes(combine(values[0::2], values[1::2]).astype(values.dtype).tobytes())
            return out

        self._last = merged(self._last, lambda a, b: b, "q")
        self._sum = merged(self._sum, np.add, "d")
        self._min = merged(self._min, np.minimum, "d")
        self._max = merged(self._max, np.maximum, "d")
        self._count = merged(self._count, np.add, "q")
        self._wall = merged(self._wall, lambda a, b: b, "d")
        self._width *= 2
        self._generation = next(_GENERATIONS)

    def drop_from(self, step: int) -> bool:
        """Drops every bucket that reaches ``step`` or beyond; True if any was dropped.

        A merged bucket that straddles ``step`` goes too: a point recorded after a restart's
        step is never shown, at the cost of at most one bucket of older points.
        """
        return self._truncate(bisect.bisect_left(self._last, step))

    def _truncate(self, keep: int) -> bool:
        if keep >= len(self._last):
            return False
        # The raw points of the buckets dropped go too (a bucket kept ends before them).
        end = self._last[keep - 1] if keep else None
        while self._tail and (end is None or self._tail[-1][0] > end):
            self._tail.pop()
        for column in (self._last, self._sum, self._min, self._max, self._count, self._wall):
            del column[keep:]
        self._frozen = None
        self._generation = next(_GENERATIONS)
        return True

    def extend(self, other: "Series") -> None:
        """Appends ``other``'s buckets (all later than this series' last step)."""
        # pylint: disable=protected-access
        for bucket in zip(other._last, other._sum, other._min, other._max, other._count,
                          other._wall):
            self._add_bucket(*bucket)
        if other._tail_dropped is not None:
            self._tail_dropped = other._tail_dropped
        for point in other._tail:
            self._keep_raw(point)

    def raw_tail(self) -> RawTail:
        """The newest points as they came (see the module docstring)."""
        steps, values, walls = ([list(column) for column in zip(*self._tail)] if self._tail
                                 else ([], [], []))
        return RawTail(steps, values, walls, self._tail_dropped)

    def frozen(self) -> ScalarSeries:
        """The series as read-only numpy arrays (computed once per change)."""
        if self._frozen is None:
            values = np.array(self._sum) / np.array(self._count)
            mins = np.array(self._min)
            maxs = np.array(self._max)
            # A bucket of NaNs only has no envelope: show its (NaN) mean, a gap in the plot.
            empty = mins > maxs
            mins[empty] = values[empty]
            maxs[empty] = values[empty]
            counts = np.array(self._count, dtype=np.int64)
            arrays = [np.array(self._last, dtype=np.int64), values, mins, maxs,
                      np.array(self._wall, dtype=np.float64), counts]
            for column in arrays:
                column.setflags(write=False)
            self._frozen = ScalarSeries(*arrays[:5], generation=self._generation,
                                        counts=counts, merged=self._width > 1)
        return self._frozen
