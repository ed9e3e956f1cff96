"""A chart's download is the run's data: every point of its event files at full resolution
(``view/export.py``, answered to a view's {"type": "export"}), then what the kernel holds past
them, while the points kept for drawing are merged in pairs (and carry their min/max band to
the browser). Compared with TensorBoard's own reader."""
import random
import struct

import numpy as np

from jupyter_supervisor import events
from jupyter_supervisor.view import export, series as series_module
from jupyter_supervisor.view.history import RunHistory
from jupyter_supervisor.view.panel import Panel
from jupyter_supervisor.view.widget import SeriesFeed

from helpers import FakeClock
from panel_helpers import FakeRun, customs, decode

WALL0 = 1_700_000_000.0


def _float32(value):
    return struct.unpack("f", struct.pack("f", value))[0]


def _write_session(logdir, suffix, start, points):
    """An event file as a session writes it: START at ``start``, then ``points``
    [(step, {tag: value}, wall)]."""
    # pylint: disable=import-outside-toplevel
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.summary.writer.event_file_writer import EventFileWriter
    writer = EventFileWriter(str(logdir), filename_suffix=suffix)
    log = event_pb2.SessionLog
    writer.add_event(event_pb2.Event(step=start, wall_time=WALL0,
                                     session_log=log(status=log.START)))
    for step, scalars, wall in points:
        writer.add_event(event_pb2.Event(step=step, wall_time=wall, summary=summary_pb2.Summary(
            value=[summary_pb2.Summary.Value(tag=tag, simple_value=value)
                   for tag, value in scalars.items()])))
    writer.close()


def _tensorboard(logdir, tag):
    """(step, wall time, value) of every point TensorBoard shows of ``tag``."""
    from tensorboard.backend.event_processing import event_accumulator  # pylint: disable=C0415
    accumulator = event_accumulator.EventAccumulator(
        str(logdir), size_guidance={event_accumulator.SCALARS: 0})
    accumulator.Reload()
    return [(e.step, e.wall_time, e.value) for e in accumulator.Scalars(tag)]


def _loss(step):
    return _float32(1.0 / (1 + step) + random.Random(step).random() * 1e-3)


def test_the_download_is_every_point_of_the_event_files_and_the_kernels_newer_ones(
        comm_log, tmp_path):
    """3,000 points on disk, a crashed session's purged by the next START, and live points
    that no file holds yet: the drawn series is merged (2 points a bucket and more), the
    download is TensorBoard's points, then the live ones, each as logged."""
    logdir = tmp_path / "run"
    _write_session(logdir, ".1", 0, [(s, {"loss": _loss(s)}, WALL0 + s) for s in range(1, 3200)])
    _write_session(logdir, ".2", 3001, [(s, {"loss": _loss(s)}, WALL0 + s)
                                        for s in range(3001, 3101)])
    on_disk = _tensorboard(logdir, "loss")
    assert len(on_disk) == 3100 and on_disk[2999][0] == 3000 and on_disk[3000][0] == 3001
    clock = FakeClock(100.0)
    history = RunHistory(max_points=200, clock=clock)
    history.load_event_files(str(logdir), upto_step=None)
    live = [(s, _loss(s), WALL0 + s) for s in range(3101, 3400)]
    for step, value, wall in live:   # a live session's newest points, not flushed yet
        history.on_event(events.SummaryWritten(step, {"loss": value}, wall))
    drawn = history.snapshot().scalars["loss"]
    assert drawn.merged and len(drawn.steps) <= 200 and drawn.counts.max() >= 16

    run = FakeRun(history, logdir=str(logdir))
    panel = Panel(run, clock=clock, wall_clock=lambda: WALL0)
    try:
        panel._on_view_message(None, {"type": "export", "id": "a:1", "tag": "loss"}, [])
        [(reply, buffers)] = customs(comm_log, "export")
    finally:
        panel.close()
    assert reply["id"] == "a:1" and reply["tag"] == "loss"
    assert [(p["run"], p["n"], p["merged"]) for p in reply["parts"]] == [("mnist", 3399, 0)]
    _, _, steps, values, walls = decode(
        [dict(p, gen=0, **{"from": 0}) for p in reply["parts"]], buffers[0])[("mnist", "loss")]
    expected = on_disk + [(s, w, v) for s, v, w in live]
    assert steps.tolist() == [s for s, _, _ in expected]
    assert walls.tolist() == [w for _, w, _ in expected]
    assert values.tolist() == [v for _, _, v in expected]   # every digit, as logged
    # Of step 50 the download has the value logged, the chart the mean of its bucket.
    assert values[49] == _loss(50) and _loss(50) not in drawn.values.tolist()


def test_without_event_files_the_download_is_what_the_kernel_holds(tmp_path):
    """No logdir: the newest RAW_TAIL points as they came, the older ones as their buckets
    (counted as merged)."""
    history = RunHistory(max_points=100, clock=FakeClock())
    total = series_module.RAW_TAIL + 500
    for step in range(total):
        history.on_event(events.SummaryWritten(step, {"acc": step / total}, WALL0 + step))
    points = export.full_points(None, history, "acc")
    tail = points.steps >= total - series_module.RAW_TAIL
    assert points.steps[tail].tolist() == list(range(total - series_module.RAW_TAIL, total))
    assert points.values[tail].tolist() == [s / total for s in points.steps[tail].tolist()]
    assert 0 < points.merged == int(np.count_nonzero(~tail)) < 100
    assert export.full_points(None, history, "other") is None
    assert export.full_points(str(tmp_path / "missing"), history, "acc").merged == points.merged


def test_a_merged_series_travels_with_its_band():
    history = RunHistory(max_points=4, clock=FakeClock())
    for step, value in enumerate([1.0, 3.0, 2.0, 8.0, 5.0, 4.0, 7.0]):
        history.on_event(events.SummaryWritten(step, {"loss": value}, WALL0 + step))
    parts, buffer = SeriesFeed.answer({"r": history.snapshot().scalars}, {})
    band = {}
    _, _, steps, values, _ = decode(parts, buffer, band)[("r", "loss")]
    assert parts[0]["merged"] is True
    assert steps.tolist() == [1, 3, 5, 6] and values.tolist() == [2.0, 5.0, 4.5, 7.0]
    mins, maxs, counts = band[("r", "loss")]
    assert (mins.tolist(), maxs.tolist(), counts.tolist()) == (
        [1.0, 2.0, 4.0, 7.0], [3.0, 8.0, 5.0, 7.0], [2, 2, 2, 1])
