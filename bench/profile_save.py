"""Where one eager save of ours goes: the training thread, the writer thread, TensorFlow's own
threads, and the step after the save, for the model of ``bench_save_interval.py`` at one size.

Runs ``--steps`` steps bare, then the same steps under an ``EagerSupervisor`` that saves every
``--every`` steps (its timer is given a clock that this script moves, so that the saves fall on
known steps: every ``--every``-th, or the first after it where the write before has ended, so
that no save waits for the one before, as one due twice over would), in a custom loop (``--mode
loop``) or in ``model.fit`` (``--mode fit``), each ``--rounds`` times, alternating; and then,
apart, one synchronous ``tf.train.Checkpoint.write`` of the same objects and one host copy of
their variables (the floor of ``bench_save_interval.py``). Every thread's CPU time is read from
Linux's ``/proc/self/task/*/schedstat`` (nanoseconds) before and after each run, so that the
CPU of a save is split by thread: the training thread, the writer thread(s), and the rest
(TensorFlow's inter- and intra-op pools, which run the ops of a ``tf.function`` and the
parallel kernels; the event dispatcher). Printed per save, as medians over rounds: wall and CPU
of a periodic save call in the training thread (what the step that saves pays; the median
of the calls but the first, whose copy meets new memory, and the final one, both printed
apart), the step after it
against the median step (wall, and the training thread's CPU), the writer thread's wall and CPU
(split into the write of the files and the rest: state file, retention, report), the other
threads' CPU beyond bare's, and the process's CPU beyond bare's. Linux only.

``--leave-out check`` profiles saves without their NaN check (``on_nan="ignore"``),
``--leave-out write`` saves whose writer thread checks the copies and writes no file: what the
copy and the check cost apart from the write. ``--train-threads`` as in
``bench_save_interval.py``.

``--end``: instead, the end of a loop whose last periodic write is in flight (that write
ends, then the final checkpoint is copied and written);
``--memory``: the resident memory between periodic saves and after a save's copy;
``--many LAYERS``: the training thread's part of a save (``Snapshot.copy``) of a model of that
many small Dense layers (4 variables each with Adam's slots): its cost per variable.

``--formats``: instead, what writing the same variables costs in each format, alone (no
training beside it), medians of ``--rounds``: their raw bytes written to a file (the floor of
any format), TensorFlow's SaveV2 of the same tensors (its bundle format: an index of CRC32C
checksums, the bytes copied through its write buffer), ``tf.train.Checkpoint.write`` of the
model and optimizer (SaveV2 beside the object graph, into a temporary directory, then merged
under the checkpoint's name), ours (the snapshot's copy, then the NaN check of the copies and
their write with TensorFlow's ops, as the writer thread makes it), and Keras'
``model.save_weights`` (an h5 file; Keras 3 puts the optimizer's variables in it too); each
written over the files of the one before (deleted first) and to new files beside those of the
earlier writes (on a virtual machine that hands free memory back to its host, only the second
pays the host's faults on the page cache's fresh pages).
Where SaveV2's CPU goes inside it is Linux perf's to say::

    perf record -g -p <pid of a process saving in a loop> -- sleep 5; perf report --no-children

    .venv/bin/python bench/profile_save.py --size 150 --mode loop
    .venv/bin/python bench/profile_save.py --size 400 --mode fit --every 8
    .venv/bin/python bench/profile_save.py --size 150 --formats
    .venv/bin/python bench/profile_save.py --size 400 --mode fit --steps 24 --every 4 \
        --train-threads 1                            # a core left free, as a GPU's training
    .venv/bin/python bench/profile_save.py --size 150 --leave-out write   # copy and check alone
    .venv/bin/python bench/profile_save.py --size 150 --end --rounds 7  # the end of a run
    .venv/bin/python bench/profile_save.py --size 150 --memory          # one copy held, not two
    .venv/bin/python bench/profile_save.py --many 400                   # 2,400 small variables
"""
import argparse
import glob
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from bench_save_interval import (  # noqa: E402
    Bench, add_train_threads, floor, train_on, training)
from jupyter_supervisor import events  # noqa: E402
from jupyter_supervisor.config import RunConfig  # noqa: E402
from jupyter_supervisor.eager import EagerSupervisor  # noqa: E402
from jupyter_supervisor.eager import writer as writing  # noqa: E402
from jupyter_supervisor.eager.snapshot import Snapshot, _object_graph  # noqa: E402
from jupyter_supervisor.eager.variables import base_variable  # noqa: E402

SECS = 1000.0  # the supervisor's interval, on the clock this script moves


def thread_cpu() -> dict:
    """{native thread id: CPU seconds} of every thread of this process."""
    found = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/schedstat", encoding="ascii") as f:
                found[int(tid)] = int(f.read().split()[0]) / 1e9
        except (FileNotFoundError, ProcessLookupError):
            pass  # ended meanwhile
    return found


class Clock:
    """The supervisor timer's clock: moved by ``SECS`` when a save is wanted (``want``), once
    the write before has ended (the writer of ``checkpointer``, the supervisor's), so that a
    save never waits for the one before: a save due twice over would (by design), and the
    profile would count that wait as the save's cost."""

    def __init__(self, checkpointer=None):
        self.now = 0.0
        self.checkpointer = checkpointer
        self._wanted = False

    def __call__(self):
        return self.now

    def want(self, step: int, every: int) -> None:
        """At a step boundary: a save is wanted every ``every`` steps; it falls due at the
        first boundary where no write runs."""
        self._wanted = self._wanted or (step and step % every == 0)
        writer = getattr(self.checkpointer, "writer", None)
        if self._wanted and not (writer is not None and writer.writing):
            self.now += SECS
            self._wanted = False


class WriterProbe:
    """Wraps ``CheckpointWriter._write`` (the writer thread's work) and the write of the files
    it calls, to record their native thread ids, wall and CPU seconds."""

    def __init__(self):
        self.records = []   # (tid, wall, cpu, files wall, files cpu)
        self._original = writing.CheckpointWriter._write

    def __enter__(self):
        probe, original = self, self._original

        def _write(writer, write, *args, **kwargs):
            timed = {}

            def files(path):
                wall, cpu = time.perf_counter(), time.thread_time()
                try:
                    return write(path)
                finally:
                    timed["wall"] = time.perf_counter() - wall
                    timed["cpu"] = time.thread_time() - cpu

            wall, cpu = time.perf_counter(), time.thread_time()
            try:
                return original(writer, files, *args, **kwargs)
            finally:
                probe.records.append((threading.get_native_id(), time.perf_counter() - wall,
                                      time.thread_time() - cpu, timed.get("wall", 0.0),
                                      timed.get("cpu", 0.0)))

        writing.CheckpointWriter._write = _write
        return self

    def __exit__(self, *exc):
        writing.CheckpointWriter._write = self._original


class Marks(keras.callbacks.Callback):
    """fit: the time and training-thread CPU at each batch's start; moves ``clock`` so that a
    save falls due at the boundary before batch ``b`` when ``b`` is a multiple of ``every``
    (or at the first after it where no write runs: ``Clock.want``)."""

    def __init__(self, marks, clock=None, every=0):
        super().__init__()
        self.marks, self.clock, self.every = marks, clock, every

    def on_train_batch_begin(self, batch, logs=None):
        if self.clock is not None:
            self.clock.want(batch, self.every)
        self.marks.append((time.perf_counter(), time.thread_time()))


def run(bench: Bench, mode: str, steps: int, every: int, logdir, probe,
        on_nan: str = "stop") -> dict:
    """One run of ``steps`` steps; ``logdir`` None: bare. Returns its figures."""
    marks, saved = [], []
    before, process = thread_cpu(), time.process_time()
    start = time.perf_counter()
    training = threading.get_native_id()
    save_calls = []
    if logdir is None:
        if mode == "fit":
            bench.model.fit(bench.data, steps_per_epoch=steps, epochs=1, verbose=0,
                            shuffle=False, callbacks=[Marks(marks)])
        else:
            for _ in range(steps):
                marks.append((time.perf_counter(), time.thread_time()))
                bench.step_once()
            bench.step_once().numpy()
    else:
        sv = EagerSupervisor(RunConfig(logdir=logdir, save_model_secs=SECS,
                                       save_summaries_secs=0, on_nan=on_nan))
        clock = Clock(sv._checkpointer)  # pylint: disable=protected-access
        sv._checkpointer.timer._clock = clock  # pylint: disable=protected-access
        sv.add_listener(lambda r: saved.append(r.step)
                        if isinstance(r, events.CheckpointSaved) else None)
        checkpointer = sv._checkpointer  # pylint: disable=protected-access
        save = checkpointer._save  # pylint: disable=protected-access

        def timed_save(*args, **kwargs):
            wall, cpu = time.perf_counter(), time.thread_time()
            try:
                return save(*args, **kwargs)
            finally:
                if threading.get_native_id() == training:
                    save_calls.append((time.perf_counter() - wall, time.thread_time() - cpu))

        checkpointer._save = timed_save  # pylint: disable=protected-access
        try:
            with sv.session():
                if mode == "fit":
                    bench.model.fit(bench.data, steps_per_epoch=steps, epochs=1, verbose=0,
                                    shuffle=False,
                                    callbacks=[Marks(marks, clock, every), sv.callback])
                else:
                    sv.track(model=bench.model, optimizer=bench.model.optimizer)
                    for step in range(1, steps + 1):
                        marks.append((time.perf_counter(), time.thread_time()))
                        loss = bench.step_once()
                        clock.want(step, every)
                        sv.step(loss=loss)
        finally:
            sv.close()
        sv.flush_events(30)
    took = time.perf_counter() - start
    cpu = time.process_time() - process
    after = thread_cpu()
    marks.append((time.perf_counter(), time.thread_time()))
    spent = {tid: after[tid] - before.get(tid, 0.0) for tid in after}
    return {"seconds": took, "cpu": cpu, "marks": marks, "spent": spent, "training": training,
            "saved": [s for s in saved if s < steps], "saves": len(saved),
            "save_calls": save_calls}


def per_save(bare: dict, ours: dict, writers: set, mode: str) -> dict:
    """Figures per save of one run of ours against one bare run."""
    saves = max(1, ours["saves"])
    walls = [b[0] - a[0] for a, b in zip(ours["marks"], ours["marks"][1:])]
    cpus = [b[1] - a[1] for a, b in zip(ours["marks"], ours["marks"][1:])]
    median_wall, median_cpu = statistics.median(walls), statistics.median(cpus)
    offset = 0 if mode == "fit" else -1  # see bench_save_interval.Bench._run
    after = [s + offset + 1 for s in ours["saved"] if s + offset + 1 < len(walls)]

    def others(run):
        return sum(cpu for tid, cpu in run["spent"].items()
                   if tid != run["training"] and tid not in writers)

    training = ours["spent"].get(ours["training"], 0.0) - bare["spent"].get(bare["training"], 0)
    calls = ours["save_calls"]
    periodic = calls[1:-1] or calls   # the first copies into new memory; the last is the final
    return {
        "save call wall": statistics.median(c[0] for c in periodic) if calls else 0.0,
        "save call CPU": statistics.median(c[1] for c in periodic) if calls else 0.0,
        "first save call wall": calls[0][0] if calls else 0.0,
        "final save call wall": calls[-1][0] if calls else 0.0,
        "step after, wall over median": (statistics.mean(walls[i] - median_wall for i in after)
                                         if after else 0.0),
        "step after, training CPU over median": (
            statistics.mean(cpus[i] - median_cpu for i in after) if after else 0.0),
        "training thread CPU over bare": training / saves,
        "writer thread CPU": sum(ours["spent"].get(t, 0.0) for t in writers) / saves,
        "other threads CPU over bare": (others(ours) - others(bare)) / saves,
        "process CPU over bare": (ours["cpu"] - bare["cpu"]) / saves,
    }


WRITES_IN_A_ROW = 4


def formats(bench: Bench, rounds: int) -> None:
    """Prints the wall and CPU milliseconds of writing the model's and optimizer's variables
    in each format (see the module docstring), medians of ``rounds`` x ``WRITES_IN_A_ROW``
    writes a second apart, two ways: each write's files deleted before the next (which takes
    their pages again, as a saver writing over one file does), and each to new files, the
    earlier ones of the row kept (as a run keeps its newest checkpoints: the page cache takes
    memory that was free for longer)."""
    model, optimizer = bench.model, bench.model.optimizer
    variables = [base_variable(v) for v in model.variables + optimizer.variables]
    values = [v.value() for v in variables]
    arrays = [np.asarray(v) for v in values]  # views of the variables' memory
    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer)
    snapshot = Snapshot({"model": model, "optimizer": optimizer})
    logdir = tempfile.mkdtemp(prefix="profile_save_")

    def raw(path):
        with open(path, "wb") as f:
            for array in arrays:
                f.write(memoryview(np.ascontiguousarray(array)).cast("B"))

    def save_v2(path):
        tf.raw_ops.SaveV2(prefix=path, tensor_names=[f"t{i}" for i in range(len(values))],
                          shape_and_slices=[""] * len(values), tensors=values)

    def ours(path):
        snapshot.copy()
        write, _ = snapshot.write_function([base_variable(v)
                                            for v in model.trainable_variables])
        write(path)

    def remove():
        for leftover in glob.glob(os.path.join(logdir, "*")):
            if os.path.isdir(leftover):
                shutil.rmtree(leftover)
            else:
                os.remove(leftover)

    actions = (("raw bytes to a file", raw), ("SaveV2 of the same tensors", save_v2),
               ("tf.train.Checkpoint.write", checkpoint.write),
               ("ours: copy, check and write", ours),
               ("Keras save_weights (h5)", lambda path: model.save_weights(path + ".weights.h5")))
    try:
        found = {(name, kept): [] for name, _ in actions for kept in (False, True)}
        for number in range(rounds):
            for name, action in actions:
                for kept in (False, True):
                    # The first of a row is not counted: it traces, or takes the pages
                    # that the row before freed.
                    for write in range(WRITES_IN_A_ROW + 1):
                        # A second apart, as a run saving every second: pages freed a
                        # second before are taken again (this machine's host takes back
                        # memory free for about 2 s).
                        time.sleep(1.0)
                        wall, cpu = time.perf_counter(), time.process_time()
                        action(os.path.join(logdir, f"ckpt-{write}" if kept else "ckpt"))
                        if write:
                            found[name, kept].append((time.perf_counter() - wall,
                                                      time.process_time() - cpu))
                        if not kept:
                            remove()
                    remove()
    finally:
        snapshot.release()
        shutil.rmtree(logdir, ignore_errors=True)
    print(f"writing {bench.megabytes:.0f} MB, alone (ms; load {os.getloadavg()[0]:.1f} at the "
          "end):")
    print(f"  {'':38s} {'files deleted before':>26s}   {'new files, earlier kept':>26s}")
    median = lambda timed, i: statistics.median(t[i] for t in timed) * 1000  # noqa: E731
    for name, _ in actions:
        print(f"  {name:38s} "
              + "   ".join(f"wall {median(found[name, kept], 0):7.1f} CPU "
                          f"{median(found[name, kept], 1):7.1f}" for kept in (False, True)))


def leave_out_the_write() -> None:
    """From now on a snapshot's write checks its copies and writes nothing."""
    write_function = Snapshot.write_function

    def check_only(snapshot, checked):
        _, check = write_function(snapshot, checked)

        def write(path):  # pylint: disable=unused-argument
            check.run()
        return write, check

    Snapshot.write_function = check_only


def end_of_run(bench: Bench, rounds: int) -> None:
    """``--end``: a loop whose last periodic save is one step before its end, so that its
    write runs when training ends: the seconds from the last step's end to the session's end
    (that write, then the final checkpoint's copy and write), after one untimed run."""

    def once() -> float:
        logdir = tempfile.mkdtemp(prefix="profile_save_")
        try:
            sv = EagerSupervisor(RunConfig(logdir=logdir, save_model_secs=SECS,
                                           save_summaries_secs=0))
            clock = Clock()
            with sv.session():
                sv._checkpointer.timer._clock = clock  # pylint: disable=protected-access
                sv.track(model=bench.model, optimizer=bench.model.optimizer)
                for step in range(6):
                    if step == 4:
                        clock.now += SECS
                    loss = bench.step_once()
                    sv.step(loss=loss)
                loss.numpy()
                ended = time.perf_counter()
                sv.request_stop()
            return time.perf_counter() - ended
        finally:
            shutil.rmtree(logdir, ignore_errors=True)

    once()
    values = [once() * 1000 for _ in range(rounds)]
    print("the end of a loop whose last periodic write runs when training ends, from the last "
          f"step to the session's end: {statistics.median(values):.0f} ms, median "
          f"[{min(values):.0f}, {max(values):.0f}]")


def resident_memory(bench: Bench, rounds: int) -> None:
    """``--memory``: the process's resident memory (``VmRSS``) between periodic saves of a
    loop and at the end of each save's copy (the copy before it freed or not), ``rounds``
    saves after the first, each written before the next."""
    def rss() -> float:
        with open("/proc/self/status", encoding="ascii") as f:
            line = next(line for line in f if line.startswith("VmRSS"))
        return int(line.split()[1]) / 1024

    logdir = tempfile.mkdtemp(prefix="profile_save_")
    try:
        sv = EagerSupervisor(RunConfig(logdir=logdir, save_model_secs=SECS,
                                       save_summaries_secs=0))
        clock, found = Clock(), []
        with sv.session():
            checkpointer = sv._checkpointer  # pylint: disable=protected-access
            checkpointer.timer._clock = clock  # pylint: disable=protected-access
            sv.track(model=bench.model, optimizer=bench.model.optimizer)
            for number in range(rounds + 1):
                clock.now += SECS
                sv.step(loss=bench.step_once())
                checkpointer.writer.wait()
                sv.step(loss=bench.step_once())
                if number == 0:   # the first save made the copy's memory: watch the next ones
                    snapshot = checkpointer.writer._snapshot  # pylint: disable=W0212
                    copy = snapshot.copy

                    def watched(_copy=copy):
                        before = rss()
                        try:
                            return _copy()
                        finally:
                            found.append((before, rss()))
                    snapshot.copy = watched
            sv.request_stop()
    finally:
        shutil.rmtree(logdir, ignore_errors=True)
    print(f"resident memory (MB) of a {bench.megabytes:.0f} MB model's loop, medians of "
          f"{rounds} periodic saves:")
    print(f"  before the save's copy (between saves) {statistics.median(b for b, _ in found):8.0f}")
    print(f"  after its copy                         {statistics.median(a for _, a in found):8.0f}")


def many_variables(layers: int, rounds: int) -> None:
    """Prints the training thread's part of a save (``Snapshot.copy``) of a model of
    ``layers`` Dense layers of 16 units and its Adam optimizer, a few bytes a variable, so
    that what costs is the work per variable: the whole call, the walk of the object graph
    in it (``tf.train.Checkpoint.write`` walks it too), and the call of the traced copy
    function; medians of ``rounds`` x 10 calls, after a first (tracing)."""
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((16,))]
                             + [keras.layers.Dense(16, "relu") for _ in range(layers)])
    optimizer = keras.optimizers.Adam(1e-4)
    optimizer.build(model.trainable_variables)
    snapshot = Snapshot({"model": model, "optimizer": optimizer})
    try:
        snapshot.copy()
        handles = snapshot._handles  # pylint: disable=protected-access
        traced = snapshot._traced  # pylint: disable=protected-access
        parts = (("Snapshot.copy()", snapshot.copy),
                 ("  the walk of the object graph", lambda: _object_graph(snapshot.writer)),
                 ("  the call of the traced copy function",
                  lambda: traced.copy_function(*handles)))
        found = {name: [] for name, _ in parts}
        for _ in range(rounds):
            for name, action in parts:
                for _ in range(10):
                    wall = time.perf_counter()
                    action()
                    found[name].append(time.perf_counter() - wall)
    finally:
        snapshot.release()
    print(f"{len(model.variables) + len(optimizer.variables)} variables (ms, load "
          f"{os.getloadavg()[0]:.1f} at the end):")
    for name, walls in found.items():
        print(f"  {name:42s} {statistics.median(walls) * 1000:8.1f}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=float, default=150, help="model size in MB")
    parser.add_argument("--mode", choices=("loop", "fit"), default="loop")
    parser.add_argument("--steps", type=int, default=48, help="steps per run")
    parser.add_argument("--every", type=int, default=6, help="a save every this many steps")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--formats", action="store_true",
                        help="what writing the variables costs in each format, alone")
    parser.add_argument("--leave-out", choices=("check", "write"),
                        help="a save without its NaN check (on_nan='ignore'), or without its "
                             "write (the writer thread checks the copies and writes no file)")
    parser.add_argument("--end", action="store_true",
                        help="the end of a loop whose last periodic write is in flight: the "
                             "final checkpoint written beside it and after it")
    parser.add_argument("--memory", action="store_true",
                        help="resident memory between periodic saves and after a save's copy")
    parser.add_argument("--many", type=int, default=0, metavar="LAYERS",
                        help="instead, the training thread's part of a save of a model of "
                             "LAYERS small Dense layers: the cost per variable")
    add_train_threads(parser)
    args = parser.parse_args()
    busy = train_on(parser, args.train_threads)
    if args.many:
        print(f"TF {tf.__version__}, Keras {keras.__version__}, {os.cpu_count()} cores, load "
              f"{os.getloadavg()[0]:.1f}; {args.many} layers, medians of {args.rounds} rounds")
        many_variables(args.many, args.rounds)
        return
    if args.leave_out == "write":
        leave_out_the_write()
    bench = Bench(args.size)
    if args.end or args.memory:
        print(f"TF {tf.__version__}, Keras {keras.__version__}, {os.cpu_count()} cores"
              f"{training(busy)}, {bench.megabytes:.0f} MB model, load "
              f"{os.getloadavg()[0]:.1f}; {args.rounds} rounds")
        (end_of_run if args.end else resident_memory)(bench, args.rounds)
        return
    if args.formats:
        print(f"TF {tf.__version__}, Keras {keras.__version__}, {os.cpu_count()} cores, load "
              f"{os.getloadavg()[0]:.1f}; medians of {args.rounds} rounds")
        formats(bench, args.rounds)
        return
    print(f"TF {tf.__version__}, Keras {keras.__version__}, {os.cpu_count()} cores"
          f"{training(busy)}, {bench.megabytes:.0f} MB model, {args.mode}, {args.steps} "
          f"steps, a save every {args.every}"
          + (f" without its {args.leave_out}" if args.leave_out else "")
          + f", medians of {args.rounds} rounds; load {os.getloadavg()[0]:.1f}")
    rows, writer_rows = [], []
    with WriterProbe() as probe:
        for number in range(args.rounds + 1):  # the first: warm-up (tracing), not counted
            logdir = tempfile.mkdtemp(prefix="profile_save_")
            try:
                bare = run(bench, args.mode, args.steps, args.every, None, probe)
                first = len(probe.records)
                ours = run(bench, args.mode, args.steps, args.every, logdir, probe,
                           "ignore" if args.leave_out == "check" else "stop")
            finally:
                shutil.rmtree(logdir, ignore_errors=True)
            records = probe.records[first:]
            if number:
                rows.append(per_save(bare, ours, {r[0] for r in records}, args.mode))
                writer_rows.append(records)
        logdir = tempfile.mkdtemp(prefix="profile_save_")
        found = floor(bench, logdir)
        shutil.rmtree(logdir, ignore_errors=True)
    print(f"load {os.getloadavg()[0]:.1f} at the end; per save (ms):")
    for key in rows[0]:
        print(f"  {key:42s} {statistics.median(r[key] for r in rows) * 1000:8.1f}")
    writes = [r for records in writer_rows for r in records]
    for label, index in (("writer thread: wall", 1), ("writer thread: CPU", 2),
                         ("  of which the files: wall", 3), ("  of which the files: CPU", 4)):
        print(f"  {label:42s} {statistics.median(r[index] for r in writes) * 1000:8.1f}")
    (copy_wall, copy_cpu), (write_wall, write_cpu) = found["copy"], found["write"]
    rewrite_wall, rewrite_cpu = found["rewrite"]
    print(f"floor: one host copy {copy_wall * 1000:.1f} ms wall, {copy_cpu * 1000:.1f} ms CPU; "
          f"one synchronous write {write_wall * 1000:.1f} ms wall, {write_cpu * 1000:.1f} ms "
          f"CPU to new files, {rewrite_wall * 1000:.1f} ms wall, {rewrite_cpu * 1000:.1f} ms "
          "CPU to the pages of files just deleted (bench_save_interval.floor)")


if __name__ == "__main__":
    main()
