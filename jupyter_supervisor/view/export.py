"""Every point of one tag at full resolution, for a chart's download: the run's data, not the
points kept for drawing (those are merged in pairs past ``RunHistory.max_points``).

The points are what the run's event files hold, read with TensorBoard's reader
(``eventfiles.read_points``: START purges applied, nothing merged), then what the kernel holds
past them: a live run's writer flushes its file every two minutes, and the points since come
from the series' raw tail (``Series.raw_tail``), or, older than that tail, from its buckets
(``Exported.merged`` counts those that hold several points). A run without a logdir has no
event files: its points are the kernel's. Read on request only, never kept.
"""
import os
from typing import Mapping, NamedTuple, Optional, Tuple

import numpy as np

from . import eventfiles


class Exported(NamedTuple):
    """One run's points of a tag, oldest first; ``merged``: how many are the mean of several
    points (0: every point as the run logged it)."""
    steps: np.ndarray
    values: np.ndarray
    walls: np.ndarray
    merged: int


def full_points(logdir: Optional[str], history, tag: str) -> Optional[Exported]:
    """``tag``'s points of the run writing ``logdir`` (None: none) with ``history`` (its
    ``RunHistory``), or None when it has none."""
    steps, values, walls = [], [], []
    if logdir and os.path.isdir(logdir):
        found = eventfiles.read_points(logdir, [tag]).get(tag)
        if found is not None:
            steps, values, walls = found
    merged = 0
    held = history.series_of(tag)
    if held is not None:
        series, tail = held
        floor = steps[-1] if steps else -np.inf   # what the files hold ends there
        if tail.after is not None and tail.after > floor:
            # Between the files' end and the raw tail's start: only buckets are left.
            keep = (series.steps > floor) & (series.steps <= tail.after)
            steps += series.steps[keep].tolist()
            values += series.values[keep].tolist()
            walls += series.walls[keep].tolist()
            if series.counts is not None:
                merged += int(np.count_nonzero(series.counts[keep] > 1))
            floor = tail.after
        newer = [i for i, step in enumerate(tail.steps) if step > floor]
        steps += [tail.steps[i] for i in newer]
        values += [tail.values[i] for i in newer]
        walls += [tail.walls[i] for i in newer]
    if not steps:
        return None
    return Exported(np.asarray(steps, dtype=np.float64), np.asarray(values, dtype=np.float64),
                    np.asarray(walls, dtype=np.float64), merged)


def answer(runs: Mapping[str, Tuple[Optional[str], object]], tag: str) -> Tuple[list, bytes]:
    """(parts, buffer) of ``tag``'s points of each run ({name: (logdir, history)}): a part
    ``{run, tag, n, merged}`` per run that has points, and one buffer holding, part after part,
    n steps, n values and n wall times (float64), as a series message does."""
    parts, arrays = [], []
    for name, (logdir, history) in runs.items():
        points = full_points(logdir, history, tag)
        if points is None:
            continue
        parts.append({"run": name, "tag": tag, "n": len(points.steps),
                      "merged": points.merged})
        arrays += [points.steps, points.values, points.walls]
    buffer = np.concatenate([a.astype("<f8") for a in arrays]).tobytes() if arrays else b""
    return parts, buffer
