"""Saving at equal intervals: ours against Keras' callbacks, TensorFlow's
``tf.train.CheckpointManager`` (synchronous and asynchronous) and TensorFlow's own graph
Supervisor, for models of a few sizes, each against bare training of the same steps in the
same run: wall clock, process CPU per save, and what a save costs the step it is made in and
the step after it.

For each model size (weights + Adam's two slots, float32: ``--sizes`` in MB) and save interval
(``--intervals`` in seconds), the number of steps N that bare training does in one interval is
measured first (eager and graph code apart: a graph step is faster); then every mode trains the
same ``--saves`` x N steps (batch 32, a two-layer MLP sized to the target), modes alternating,
the order rotating each round (``--rounds``; medians over rounds are printed):
  fit        model.fit bare (no callback)
  fit-ours   model.fit(callbacks=[sv.callback]) under an EagerSupervisor, save_model_secs=interval
  fit-keras  model.fit with BackupAndRestore(save_freq=N) + ModelCheckpoint(save_freq=N,
             weights only): what a Keras user sets for resume + keep; both write in the
             training thread
  fit-mc     model.fit with ModelCheckpoint(save_freq=N, save_weights_only=True) alone: one h5
             write per save (Keras 3's weights file holds the optimizer's variables too)
  loop       a tf.function step in a Python loop, bare
  loop-ours  the same loop under sv.track(model=..., optimizer=...) + sv.step(), same interval
  loop-mgr   the same loop with tf.train.CheckpointManager(...).save() every N steps
  loop-async the same with CheckpointManager.save(options=tf.train.CheckpointOptions(
             enable_async=True)): TensorFlow's own asynchronous checkpoint, of the model's and
             optimizer's tf.Variables, since it refuses the Keras 3 objects themselves (their
             copy creates a tf.Variable inside a tf.function: "tf.function only supports
             singleton tf.Variables created on the first call", from the second save on); its
             run ends with Checkpoint.sync(), the wait for the last write. Both peers keep
             one tf.train.Checkpoint across their runs, as a long run has one (TF's async
             saver traces its copy once per Checkpoint); each run has a new manager and logdir
  graph      graph code (TF 1): the same MLP built in a tf.Graph of its own (tf.compat.v1
             variables, AdamOptimizer, random batches made in the graph), a plain
             tf.compat.v1.Session and a loop of sess.run(train_op), bare
  graph-tf   the same loop under tf.compat.v1.train.Supervisor(logdir=..., save_model_secs=
             interval, save_summaries_secs=0).managed_session()
  graph-ours the same under jupyter_supervisor.Supervisor, same keywords
Both Supervisors save in their own background thread (a LooperThread), each with its default
Saver (TF's plain, ours sharded with its finiteness guard), timed from managed_session()'s
start to its end (the Supervisor is built before); each graph run has a fresh graph, session
and logdir. The script runs in an eager process, so the Supervisors' threads are made to run
inside the graph, as in a program that disabled eager execution (``threads_in_graph``).

Printed per size x interval, each mode's medians over rounds:
  seconds       wall clock of the run
  vs bare       steps/s against bare (fit, loop or graph) in the same round: 1.00 = free
  steady        the same, from the start of the first step to the start of the last (eager
                modes): the saves made while training runs, without the run's last save
                (the peers' at the last step, ours' final one) and its end: the pace of a
                long run, whose last save is made once
  in            the saves made inside that span (ours saves on a clock, and a write longer
                than the interval is followed by an interval without a save: it can make
                fewer there than the peers)
  steady/save   (that span's seconds - bare's) / the saves inside it: what one save made
                while training runs cost it, the figure to compare by when "in" differs
  saves         checkpoints written
  CPU/save      (the run's process CPU time - bare's) / saves: everything a save costs the
                machine, in every thread (the write, the copy, the check, a step slowed by
                them); on cores that training keeps busy, this is training time
  wall/save     (the run's seconds - bare's) / saves: the training time one checkpoint cost,
                the figure to compare savers by when they made different numbers of saves
                (ours saves on a clock: where saving slows training, its run holds more
                intervals, and more saves, than the peers' N-step schedule)
  write CPU     the CPU time of the writes themselves per save, in the thread that made them
                (ours: the writer thread, beside training; the others: the training thread,
                training paused; ``Writes``): the same files for every saver
  blocked/save  (the run's overhead - bare's) / saves, where a run's overhead is its seconds
                less its steps at its own median step time (robust to a load that changes
                between runs; it includes what a background write takes from training by
                sharing the cores)
  in its step   the time the step that saved took over the median step, per save (eager
                modes: the steps are known; graph modes: the longest steps, which are the
                saving ones on a machine quiet enough)
  step after    the time the step after each save took over the median step (eager modes)
  vs peer       (graph-ours only) graph-tf's seconds / ours', per round (above 1: ours faster)
and, under the eager modes, ours against the peer with the lowest wall/save (fit-ours against
fit-keras and fit-mc, loop-ours against loop-mgr and loop-async): the peer's wall/save and
CPU/save over ours' (above 1: a save of ours costs less); ours' bound per save from its own
runs (its copy, "in its step", plus its write's CPU spread over the busy cores, up to the whole
write's CPU: a background write on cores that training keeps busy takes that CPU from training)
against what a save cost it while training ran (steady/save); and ours' steps/s against each
peer's, per round (above 1: ours faster), over the whole run and over the steady span.
and the floor: one host copy of the variables (a memcpy into buffers allocated before) and one
synchronous tf.train.Checkpoint.write of the model and optimizer, wall and CPU, to new files
(as a run writes them) and to the pages of files just deleted (``floor``: on a virtual machine
that hands free memory back to its host, the two differ by the host's faults); and the bound
that the cores allow: a saver that writes in the background costs training at least its CPU
(copy + write) spread over the cores, so at best interval / (interval + that / cores) of bare
(when training keeps every core busy; with ``--train-threads``, whose free cores take the
write, interval / (interval + copy)); one that writes in the training thread costs the write's
wall clock: interval / (interval + write).
Saves counted: the checkpoints written; for the graph Supervisors, their Saver.save calls
(``count_saves``), including each one's first save at the session's start (step 0). Ours,
eager and graph, also makes a final save when its session ends; TF's graph Supervisor saves
at a stop only when asked, so graph-tf ends with ``sv.saver.save(...)``, what its user adds to
lose nothing at a clean stop (the eager peers save at the last step already: it is a multiple
of N). The final saves are counted, and their time is in seconds and CPU, but not in "in its
step" and "step after". Each mode runs once untimed first (tracing; what the first cell of a
kernel pays is bench_cell_cost.py's). Ours saves on a clock, the peers every N steps.

``--train-threads K`` gives TensorFlow's op pools K threads (``tf.config.threading``), so
that training keeps K cores busy and leaves the others free: the case of a model trained on a
GPU, whose host thread mostly waits for the device while the cores are idle (the bound is then
the copy alone for a background writer while its write fits the free cores; the training
thread's write stays the synchronous savers' cost).

The machine may be shared: each block prints the load average when it starts. Wall clock is
noisy there (read medians, repeat); CPU per save is steadier. Nothing is asserted.

    .venv/bin/python bench/bench_save_interval.py                      # ~6 min: 1 and 50 MB, 1 s
    .venv/bin/python bench/bench_save_interval.py --sizes 1,50,150,400 --intervals 1,10 --rounds 5
    .venv/bin/python bench/bench_save_interval.py --sizes 150 --modes loop,loop-ours,loop-mgr,loop-async
    .venv/bin/python bench/bench_save_interval.py --modes graph,graph-tf,graph-ours
    .venv/bin/python bench/bench_save_interval.py --sizes 150 --train-threads 1 \
        --modes loop,loop-ours,loop-mgr,loop-async                # a core left free
    .venv/bin/python bench/bench_save_interval.py --sizes 150 --intervals 100000 --steps 300 \
        --modes loop,loop-ours          # a session's own cost: ours' final checkpoint alone
"""
import argparse
import glob
import math
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from typing import NamedTuple, Optional

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import keras  # noqa: E402
from tensorflow.python.util import deprecation  # noqa: E402

import jupyter_supervisor  # noqa: E402
from jupyter_supervisor import events  # noqa: E402
from jupyter_supervisor.config import RunConfig  # noqa: E402
from jupyter_supervisor.eager import EagerSupervisor  # noqa: E402
from jupyter_supervisor.eager.writer import CheckpointWriter  # noqa: E402

FEATURES = 256
BATCH = 32
MODES = ("fit", "fit-ours", "fit-keras", "fit-mc", "loop", "loop-ours", "loop-mgr",
         "loop-async", "graph", "graph-tf", "graph-ours")
GRAPH_MODES = ("graph", "graph-tf", "graph-ours")


def width_for(megabytes: float) -> int:
    """Hidden units of the MLP whose weights and Adam slots (12 bytes a parameter) take
    ``megabytes``: W*W + (FEATURES + 3) * W + 1 parameters."""
    params = megabytes * 1e6 / 12
    b = FEATURES + 3
    return max(8, int((-b + math.sqrt(b * b + 4 * params)) / 2))


def build(width: int):
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(width, "relu"),
                              keras.layers.Dense(width, "relu"), keras.layers.Dense(1)])
    model.compile(keras.optimizers.Adam(1e-4), "mse")
    return model


def dataset():
    """(x, y, the dataset of their batches, repeated). Its autotuning is off: with it, the end
    of a fit's iterator waits for tf.data's autotuner to wake (here 5.11 s after the fit
    started), so that a bare fit of 3.7 s and a saving one of 5 s both took 5.11 s, hiding what
    saving cost (the loops keep one iterator: they never waited)."""
    rng = np.random.default_rng(0)
    x = rng.random((1024, FEATURES), dtype=np.float32)
    y = x.mean(axis=1, keepdims=True)
    options = tf.data.Options()
    options.autotune.enabled = False
    data = tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH).repeat()
    return x, y, data.with_options(options)


class Counter:
    """Listener: the steps of the checkpoints written."""

    def __init__(self):
        self.steps = []

    def __call__(self, record):
        if isinstance(record, events.CheckpointSaved):
            self.steps.append(record.step)


class BatchClock(keras.callbacks.Callback):
    """The time at the start of each batch of a fit."""

    def __init__(self, marks: list):
        super().__init__()
        self.marks = marks

    def on_train_batch_begin(self, batch, logs=None):
        self.marks.append(time.perf_counter())


def overhead(seconds: float, marks: list, steps: int) -> float:
    """Seconds of a run not spent stepping at its own median step time (``marks``: the time
    at each step's start): what saving and the session's start and end took from the training
    thread. Measured against the run's own pace, it holds up when the load changes between
    runs."""
    step = statistics.median(b - a for a, b in zip(marks, marks[1:]))
    return seconds - steps * step


def around(marks: list, at: list) -> tuple:
    """(in its step, step after): the seconds per save that the step of each save and the step
    after it took over the median step; ``marks``: the time at each step's start, ``at``: the
    index of the step (into the steps between marks) that made each save."""
    intervals = [b - a for a, b in zip(marks, marks[1:])]
    median = statistics.median(intervals)
    inside = [intervals[i] - median for i in at if i < len(intervals)]
    after = [intervals[i + 1] - median for i in at if i + 1 < len(intervals)]
    return (statistics.mean(inside) if inside else 0.0,
            statistics.mean(after) if after else 0.0)


def peak(marks: list, saves: int) -> float:
    """Seconds per save that the ``saves`` longest steps took over the median step (``marks``:
    the time at each step's start): the training thread's wait in the steps that saved, on a
    machine quiet enough that they are the longest."""
    intervals = sorted(b - a for a, b in zip(marks, marks[1:]))
    if saves <= 0:
        return 0.0
    median = statistics.median(intervals)
    return sum(i - median for i in intervals[-saves:]) / saves


class GraphModel:
    """The same MLP in a graph of its own (tf.compat.v1 variables and matmuls, Adam, random
    batches made in the graph): ``graph``, ``train_op`` (which also increments the global
    step, as a Supervisor wants) and ``megabytes`` (weights + Adam's two slots)."""

    def __init__(self, width: int):
        v1 = tf.compat.v1
        self.graph = tf.Graph()
        with self.graph.as_default():
            v1.set_random_seed(0)
            step = v1.train.get_or_create_global_step()
            # Made in the graph: no feed, and no constant of data in the graph that the
            # Supervisors would write out with it.
            x = tf.random.uniform([BATCH, FEATURES], seed=1)
            y = tf.reduce_mean(x, axis=1, keepdims=True)
            h, params = x, 0
            for i, (n_in, n_out) in enumerate(((FEATURES, width), (width, width), (width, 1))):
                w = v1.get_variable(f"w{i}", [n_in, n_out],
                                    initializer=v1.glorot_uniform_initializer())
                b = v1.get_variable(f"b{i}", [n_out], initializer=v1.zeros_initializer())
                h = tf.matmul(h, w) + b
                h = tf.nn.relu(h) if i < 2 else h
                params += n_in * n_out + n_out
            loss = tf.reduce_mean(tf.square(h - y))
            self.train_op = v1.train.AdamOptimizer(1e-4).minimize(loss, global_step=step)
        self.megabytes = params * 12 / 1e6


def count_saves(saver) -> list:
    """Wraps ``saver.save`` (this instance only) to count the checkpoints written: a list whose
    one item is the count. Both Supervisors save through their Saver, also at a stop."""
    count = [0]
    save = saver.save

    def counted(*args, **kwargs):
        path = save(*args, **kwargs)
        count[0] += 1
        return path

    saver.save = counted
    return count


def threads_in_graph(coord, graph) -> None:
    """Makes every thread registered with ``coord`` (a Supervisor's services) run inside
    ``graph``, as in a program that disabled eager execution: eager mode is per thread, and
    in this eager process TF's checkpoint thread would read the global step and save eagerly,
    which fails on graph tensors (ours enters the graph itself; entering it again costs
    nothing, and both get the same)."""
    register = coord.register_thread

    def register_in_graph(thread):
        run = thread.run

        def run_in_graph():
            with graph.as_default():
                run()

        thread.run = run_in_graph
        register(thread)

    coord.register_thread = register_in_graph


class GraphBench:
    """Graph code (TF 1) of one size: a fresh graph and session per run, so that nothing of
    one run (a finalized graph, a Supervisor's ops, 150 MB of variables) outlives it."""

    def __init__(self, megabytes: float):
        self.width = width_for(megabytes)
        self.megabytes = GraphModel(self.width).megabytes

    def steps_per_second(self, seconds: float = 2.0) -> float:
        """Bare graph steps per second, after a first step (the session's set-up)."""
        model = GraphModel(self.width)
        with model.graph.as_default():
            init = tf.compat.v1.global_variables_initializer()
        with tf.compat.v1.Session(graph=model.graph) as sess:
            sess.run(init)
            sess.run(model.train_op)
            steps, start = 0, time.perf_counter()
            while time.perf_counter() - start < seconds:
                sess.run(model.train_op)
                steps += 1
            return steps / (time.perf_counter() - start)

    def run(self, mode: str, steps: int, interval: float, logdir: str) -> "Result":
        """The ``Result`` of ``steps`` steps in ``mode``, as ``Bench.run``'s."""
        marks = []
        cpu = time.process_time()
        took, saves = self._run(mode, steps, interval, logdir, marks)
        cpu = time.process_time() - cpu
        if mode != "graph-tf":  # graph-tf's mark before its final save is in marks already
            marks.append(time.perf_counter())  # after the last step (before a final save)
        inside = saves - 1 if mode != "graph" else saves  # the final save: after the steps
        return Result(took, cpu, saves, overhead(took, marks[:-1], steps),
                      peak(marks, inside), None)

    def _run(self, mode, steps, interval, logdir, marks):
        model = GraphModel(self.width)
        op = model.train_op
        with model.graph.as_default():
            if mode == "graph":
                init = tf.compat.v1.global_variables_initializer()
                start = time.perf_counter()
                with tf.compat.v1.Session(graph=model.graph) as sess:
                    sess.run(init)
                    for _ in range(steps):
                        marks.append(time.perf_counter())
                        sess.run(op)
                return time.perf_counter() - start, 0
            kind = (tf.compat.v1.train.Supervisor if mode == "graph-tf"
                    else jupyter_supervisor.Supervisor)
            # Each with its default Saver (TF's: plain; ours: sharded, with its finiteness
            # guard beside the write), as a user gets them.
            # TF's notices that its Supervisor and its Saver's retention are deprecated are
            # not the bench's output (the switch is global: it covers the services too).
            with deprecation.silence():
                sv = kind(graph=model.graph, logdir=logdir, save_model_secs=interval,
                          save_summaries_secs=0)
                count = count_saves(sv.saver)
                threads_in_graph(sv.coord, model.graph)
                start = time.perf_counter()
                with sv.managed_session() as sess:
                    for _ in range(steps):
                        marks.append(time.perf_counter())
                        sess.run(op)
                    if mode == "graph-tf":
                        # What a user of TF's Supervisor adds so that a clean stop loses
                        # nothing: ours saves at the stop itself.
                        marks.append(time.perf_counter())
                        sv.saver.save(sess, sv.save_path, global_step=sv.global_step)
            # managed_session's end: the services stopped, ours' final save, the session closed.
            return time.perf_counter() - start, count[0]


class Bench:
    """Eager modes of one size: one Keras model, its fit and a traced loop step."""

    def __init__(self, megabytes: float):
        self.model = build(width_for(megabytes))
        self.megabytes = sum(int(np.prod(v.shape)) * 4 for v in self.model.variables) * 3 / 1e6
        self.x, self.y, self.data = dataset()
        # Traced before timing.
        self.model.fit(self.data, steps_per_epoch=2, epochs=1, verbose=0, shuffle=False)
        model, optimizer = self.model, self.model.optimizer
        self.iterator = iter(self.data)

        @tf.function
        def train_step(x, y):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean((model(x, training=True) - y) ** 2)
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            return loss

        self.train_step = train_step
        self.step_once()
        self._checkpoints = {}

    def step_once(self):
        return self.train_step(*next(self.iterator))

    def steps_per_second(self, seconds: float = 2.0) -> float:
        steps, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            self.step_once()
            steps += 1
        self.step_once().numpy()
        return steps / (time.perf_counter() - start)

    def checkpoint(self, mode: str) -> tf.train.Checkpoint:
        """The ``tf.train.Checkpoint`` of ``loop-mgr`` or ``loop-async``, made once and kept for
        every run of the mode (each run gives it a new ``CheckpointManager`` and logdir): a
        long run makes one, and TensorFlow's async saver traces its copy once per Checkpoint
        (a new one per run would retrace it in every run's first save)."""
        if mode not in self._checkpoints:
            model = self.model
            if mode == "loop-mgr":
                found = tf.train.Checkpoint(model=model, optimizer=model.optimizer)
            else:
                # The tf.Variables of the Keras variables: the Keras objects fail (see above).
                found = tf.train.Checkpoint(**{
                    f"v{i}": v.value for i, v in enumerate(model.variables
                                                           + model.optimizer.variables)})
            self._checkpoints[mode] = found
        return self._checkpoints[mode]

    def run(self, mode: str, steps: int, every: int, interval: float, logdir: str) -> "Result":
        """The ``Result`` of ``steps`` steps in ``mode``."""
        marks = []
        if WRITES is not None:
            WRITES.clear()
        cpu = time.process_time()
        took, at = self._run(mode, steps, every, interval, logdir, marks)
        cpu = time.process_time() - cpu
        marks.append(time.perf_counter())  # after the last step (before a final save)
        saves = len(at)
        inside, after = around(marks, [i for i in at if i is not None])
        write_cpu = (WRITES.cpu / saves if WRITES is not None and saves and WRITES.count
                     and mode != "loop-async" else None)  # TF's async: its write unseen
        return Result(took, cpu, saves, overhead(took, marks[:-1], steps), inside, after,
                      write_cpu, marks[steps - 1] - marks[0],
                      sum(1 for i in at if i is not None and i < steps - 1))

    def _run(self, mode, steps, every, interval, logdir, marks):
        """(wall seconds, the step index of each save: None for one made after the steps)."""
        model = self.model
        clock = [BatchClock(marks)]
        if mode.endswith("-ours"):
            sv = EagerSupervisor(RunConfig(logdir=logdir, save_model_secs=interval,
                                           save_summaries_secs=0))
            counter = Counter()
            sv.add_listener(counter)
            start = time.perf_counter()
            try:
                with sv.session():
                    if mode == "fit-ours":
                        model.fit(self.data, steps_per_epoch=steps, epochs=1, verbose=0,
                                  shuffle=False, callbacks=clock + [sv.callback])
                    else:
                        sv.track(model=model, optimizer=model.optimizer)
                        for _ in range(steps):
                            marks.append(time.perf_counter())
                            sv.step(loss=self.step_once())
            finally:
                sv.close()
            took = time.perf_counter() - start
            sv.flush_events(30)
            # The save of step s is made at the boundary that ends it: in a loop, in the
            # step's own sv.step() (step s - 1 of marks); in fit, before batch s trains.
            offset = 0 if mode == "fit-ours" else -1
            return took, [s + offset if s < steps else None for s in counter.steps]
        start = time.perf_counter()
        if mode == "fit":
            model.fit(self.data, steps_per_epoch=steps, epochs=1, verbose=0, shuffle=False,
                      callbacks=clock)
            return time.perf_counter() - start, []
        if mode in ("fit-keras", "fit-mc"):
            callbacks = [keras.callbacks.ModelCheckpoint(
                os.path.join(logdir, "m.weights.h5"), save_weights_only=True, save_freq=every)]
            if mode == "fit-keras":
                callbacks.insert(0, keras.callbacks.BackupAndRestore(
                    os.path.join(logdir, "backup"), save_freq=every))
            model.fit(self.data, steps_per_epoch=steps, epochs=1, verbose=0, shuffle=False,
                      callbacks=clock + callbacks)
            # Each saves at the end of batch s - 1 (0-based) for s = every, 2 every, ...
            return time.perf_counter() - start, list(range(every - 1, steps, every))
        manager = checkpoint = options = None
        if mode in ("loop-mgr", "loop-async"):
            checkpoint = self.checkpoint(mode)
            if mode == "loop-async":
                options = tf.train.CheckpointOptions(enable_async=True)
        if checkpoint is not None:
            manager = tf.train.CheckpointManager(checkpoint, logdir, max_to_keep=5)
        at, loss = [], None
        for step in range(1, steps + 1):
            marks.append(time.perf_counter())
            loss = self.step_once()
            if manager is not None and step % every == 0:
                manager.save(checkpoint_number=step, options=options)
                at.append(step - 1)
        loss.numpy()
        if options is not None:
            checkpoint.sync()  # the last write
        return time.perf_counter() - start, at


class Result(NamedTuple):
    """One timed run: wall seconds, process CPU seconds, saves, overhead seconds (``overhead``),
    seconds per save in the step that saved and in the step after, CPU seconds per save of the
    writes themselves (``Writes``) (None: not measured)."""
    seconds: float
    cpu: float
    saves: int
    overhead: float
    in_step: float
    after: Optional[float]
    write_cpu: Optional[float] = None
    to_last: Optional[float] = None   # from the first step's start to the last step's
    inside: int = 0   # the saves made between those two starts


class Writes:
    """The CPU time of every checkpoint write, in the thread that makes it, while the bench
    runs (installed by ``main``): ours' (``CheckpointWriter._write``: the NaN check, the
    files, the state file, the retention, the report of the save; in the writer thread),
    ``CheckpointManager.save``'s and Keras' callbacks' (``_save_model``; in the training
    thread). TensorFlow's async saver writes in a thread of its own, which this does not see.
    ``cpu`` is the sum since the last ``clear``."""

    def __init__(self):
        self.cpu = 0.0
        self.count = 0
        self._lock = threading.Lock()
        targets = [(CheckpointWriter, "_write"), (tf.train.CheckpointManager, "save"),
                   (keras.callbacks.ModelCheckpoint, "_save_model"),
                   (keras.callbacks.BackupAndRestore, "_save_model")]
        for owner, name in targets:
            setattr(owner, name, self._timed(getattr(owner, name)))

    def _timed(self, method):
        writes = self

        def timed(*args, **kwargs):
            start = time.thread_time()
            try:
                return method(*args, **kwargs)
            finally:
                with writes._lock:  # pylint: disable=protected-access
                    writes.cpu += time.thread_time() - start
                    writes.count += 1
        return timed

    def clear(self) -> None:
        with self._lock:
            self.cpu, self.count = 0.0, 0


WRITES: Optional[Writes] = None   # main() installs it


def floor(bench: "Bench", logdir: str, repeats: int = 3) -> dict:
    """What one save cannot cost less than, medians of ``repeats`` of (wall, CPU) seconds:
    ``copy``, one host copy of every variable (a memcpy into buffers allocated before);
    ``write``, one synchronous ``tf.train.Checkpoint.write`` of the model and its optimizer to
    new files, the earlier ones kept (as a run keeps its checkpoints): the page cache takes
    pages the kernel holds free; ``rewrite``, the same write, each one's files deleted before
    the next, which reuses their pages at once. On a virtual machine that hands free memory
    back to its host (Linux's free page reporting, as here), the first touch of pages free
    for a while costs a fault to the host: ``write`` pays it, ``rewrite`` mostly not."""
    values = [v.numpy() for v in bench.model.variables + bench.model.optimizer.variables]
    buffers = [np.empty_like(v) for v in values]
    checkpoint = tf.train.Checkpoint(model=bench.model, optimizer=bench.model.optimizer)
    path = os.path.join(logdir, "floor")
    count = [0]

    def copy():
        for value, buffer in zip(values, buffers):
            np.copyto(buffer, value)

    def write():
        count[0] += 1
        checkpoint.write(f"{path}-{count[0]}")

    def rewrite():
        checkpoint.write(path)

    def remove():
        for name in glob.glob(path + "*"):  # the checkpoints, and a leftover _temp directory
            if os.path.isdir(name):
                shutil.rmtree(name)
            else:
                os.remove(name)

    found = {}
    for name, action, after in (("copy", copy, None), ("write", write, None),
                                ("rewrite", rewrite, remove)):
        action()  # first touch of the buffers, first write traced
        if after is not None:
            after()
        walls, cpus = [], []
        for _ in range(repeats):
            wall, cpu = time.perf_counter(), time.process_time()
            action()
            walls.append(time.perf_counter() - wall)
            cpus.append(time.process_time() - cpu)
            if after is not None:
                after()
        found[name] = (statistics.median(walls), statistics.median(cpus))
    remove()
    return found


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="1,50", help="model sizes in MB (e.g. 1,50,150)")
    parser.add_argument("--intervals", default="1", help="save intervals in s (e.g. 1,10)")
    parser.add_argument("--saves", type=int, default=4, help="intervals per run")
    parser.add_argument("--steps", type=int, default=0,
                        help="steps per run instead (0: --saves intervals of bare steps); "
                             "with an interval longer than the run, ours makes its final "
                             "checkpoint alone and the peers none: what a session costs")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--modes", default=",".join(MODES))
    add_train_threads(parser)
    args = parser.parse_args()
    cores = os.cpu_count()
    busy = train_on(parser, args.train_threads)
    global WRITES  # pylint: disable=global-statement
    WRITES = Writes()
    modes = args.modes.split(",")
    unknown = sorted(set(modes) - set(MODES))
    if unknown:
        parser.error(f"unknown modes {unknown}; known: {','.join(MODES)}")
    eager_modes = [m for m in modes if m not in GRAPH_MODES]
    graph_modes = [m for m in modes if m in GRAPH_MODES]
    print(f"TF {tf.__version__}, Keras {keras.__version__}, {cores} cores{training(busy)}, "
          f"load {os.getloadavg()[0]:.1f}; medians of {args.rounds} rounds")
    floors = {}
    for size in (float(s) for s in args.sizes.split(",")):
        # Only what the modes asked for is built: a 150 MB eager model is not freed.
        bench = Bench(size) if eager_modes else None
        graph = GraphBench(size) if graph_modes else None
        rate = bench.steps_per_second() if bench else None
        graph_rate = graph.steps_per_second() if graph else None
        if bench is not None:
            logdir = tempfile.mkdtemp(prefix="bench_interval_")
            floors[size] = floor(bench, logdir)
            shutil.rmtree(logdir, ignore_errors=True)
        for interval in (float(i) for i in args.intervals.split(",")):
            # Each kind runs N x saves steps, N: its own bare steps in one interval.
            every = {m: max(1, round((graph_rate if m in GRAPH_MODES else rate) * interval))
                     for m in modes}
            steps = {m: args.steps or every[m] * args.saves for m in modes}

            def run(mode, count):
                logdir = tempfile.mkdtemp(prefix="bench_interval_")
                try:
                    if mode in GRAPH_MODES:
                        return graph.run(mode, count, interval, logdir)
                    return bench.run(mode, count, every[mode], interval, logdir)
                finally:
                    shutil.rmtree(logdir, ignore_errors=True)

            for mode in modes:  # warm-up, not timed: each mode's first tracing and calls
                run(mode, min(steps[mode], 2 * every[mode]))
            results = {m: [] for m in modes}
            load = os.getloadavg()[0]
            for r in range(args.rounds):
                for mode in modes[r % len(modes):] + modes[:r % len(modes)]:
                    results[mode].append(run(mode, steps[mode]))
            megabytes = bench.megabytes if bench else graph.megabytes
            print(f"\n{megabytes:.1f} MB model, save every {interval:g} s (load {load:.1f} "
                  f"at the start, {os.getloadavg()[0]:.1f} at the end)")
            if eager_modes:
                m = eager_modes[0]
                print(f"  eager: {every[m]} steps (bare: {rate:.1f} steps/s), {steps[m]} steps "
                      f"per run")
            if graph_modes:
                m = graph_modes[0]
                print(f"  graph: {every[m]} steps (bare: {graph_rate:.1f} steps/s), {steps[m]} "
                      f"steps per run")
            if bench is not None:
                print_floor(floors[size], interval, cores - busy)
            print(f"  {'mode':10s} {'seconds':>8s} {'vs bare':>8s} {'steady':>7s} {'in':>3s} "
                  f"{'steady/save':>12s} {'saves':>6s} {'wall/save':>10s} {'CPU/save':>10s} {'write CPU':>10s} "
                  f"{'blocked/save':>13s} {'in its step':>12s} {'step after':>11s} "
                  f"{'vs peer':>8s}")
            for mode in modes:
                print(row(mode, results))
            for ours, peers in (("fit-ours", ("fit-keras", "fit-mc")),
                                ("loop-ours", ("loop-mgr", "loop-async"))):
                for line in (per_save_line(ours, peers, results),
                             bound_line(ours, results, busy, cores - busy),
                             pace_line(ours, peers, results)):
                    if line:
                        print(line)


def add_train_threads(parser: argparse.ArgumentParser) -> None:
    """The ``--train-threads`` option (``train_on``)."""
    parser.add_argument("--train-threads", type=int, default=0,
                        help="threads of TensorFlow's op pools (0: TensorFlow's default, "
                             "every core); fewer leave cores free, as a GPU's training does")


def train_on(parser: argparse.ArgumentParser, threads: int) -> int:
    """Gives TensorFlow's op pools ``threads`` threads (0: its default, every core), before
    anything runs; returns the cores that training keeps busy."""
    cores = os.cpu_count()
    if not 0 <= threads <= cores:
        parser.error(f"--train-threads must be 0 (every core) to {cores}, not {threads}")
    if threads:
        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(threads)
    return threads or cores


def training(busy: int) -> str:
    """The header's words for training on ``busy`` cores ("" for every core)."""
    free = os.cpu_count() - busy
    return (f", training on {busy} thread{'s' if busy > 1 else ''} ({free} "
            f"core{'s' if free > 1 else ''} free)" if free else "")


def print_floor(found: dict, interval: float, free: int = 0) -> None:
    """The floor lines: one copy, one synchronous write (to new files, and to the pages of
    files just deleted), the bounds at ``interval`` (with the write to new files, as a run
    makes them), with ``free`` cores that training leaves idle: a write there costs training
    nothing, so a background saver's bound is its copy (when the write outlasts the interval,
    at the saves it can make)."""
    (copy_wall, copy_cpu), (write_wall, write_cpu) = found["copy"], found["write"]
    rewrite_wall, rewrite_cpu = found["rewrite"]
    cores = os.cpu_count()
    if free:
        background = interval / (interval + copy_wall)
        where = f"{free} free core{'s' if free > 1 else ''}" + (
            " (the write outlasts the interval: saves come less often)"
            if write_wall > interval else "")
    else:
        background = interval / (interval + (copy_cpu + write_cpu) / cores)
        where = f"{cores} busy cores"
    synchronous = interval / (interval + write_wall)
    print(f"  floor: one host copy {copy_wall * 1000:.0f} ms ({copy_cpu * 1000:.0f} ms CPU), "
          f"one synchronous write {write_wall * 1000:.0f} ms ({write_cpu * 1000:.0f} ms CPU) "
          f"to new files, {rewrite_wall * 1000:.0f} ms ({rewrite_cpu * 1000:.0f} ms CPU) to "
          f"the pages of files just deleted;\n  bound vs bare: {background:.2f} writing in the "
          f"background on {where}, {synchronous:.2f} writing in the training thread")


def bare_of(mode: str) -> str:
    """The bare mode that ``mode`` is measured against."""
    return "fit" if mode.startswith("fit") else ("graph" if mode in GRAPH_MODES else "loop")


def per_save(mode: str, results: dict) -> Optional[tuple]:
    """(wall/save, CPU/save) of ``mode``: medians over rounds of its seconds and process CPU
    beyond bare's in the same round, per save; None without a bare run or a save."""
    bare = bare_of(mode)
    if bare not in results or mode == bare:
        return None
    saved = [(b, r) for b, r in zip(results[bare], results[mode]) if r.saves]
    if not saved:
        return None
    return (statistics.median([(r.seconds - b.seconds) / r.saves for b, r in saved]),
            statistics.median([(r.cpu - b.cpu) / r.saves for b, r in saved]))


def per_save_line(ours: str, peers: tuple, results: dict) -> str:
    """Ours against the peer whose save cost the least wall clock, per save ("" when one of
    them did not run)."""
    mine = per_save(ours, results) if ours in results else None
    theirs = {p: per_save(p, results) for p in peers if p in results}
    theirs = {p: cost for p, cost in theirs.items() if cost is not None}
    if mine is None or not theirs:
        return ""
    peer = min(theirs, key=lambda p: theirs[p][0])
    (wall, cpu), (peer_wall, peer_cpu) = mine, theirs[peer]
    ratio = lambda a, b: f"{a / b:.2f}" if b > 0 else "-"  # noqa: E731
    return (f"  per save, {ours} against {peer}: wall {peer_wall * 1000:.0f} / "
            f"{wall * 1000:.0f} ms = {ratio(peer_wall, wall)}, CPU {peer_cpu * 1000:.0f} / "
            f"{cpu * 1000:.0f} ms = {ratio(peer_cpu, cpu)} (above 1: ours costs less)")


def bound_line(ours: str, results: dict, busy: int, free: int) -> str:
    """Ours' bound per save from its own runs (medians over rounds; "" when it did not run or
    saved nothing inside the steady span): what a save made while training runs cannot cost
    training less than, against what it cost (steady/save). Its copy is the step that saved
    over the median step ("in its step"); its write runs beside training, and where training
    keeps every core busy its CPU ("write CPU") comes out of training's: at least spread over
    the busy cores, and up to all of it where a step's parallel kernels wait for the one slowed
    (the cost of the same write in the training thread). Where training leaves part of the
    cores idle (bare's process CPU per second, printed, below the cores), the write takes that
    part first and can cost less. With ``free`` cores the write's CPU fits there, and the bound
    is the copy alone."""
    runs = results.get(ours)
    bare = results.get(bare_of(ours))
    if not runs or not bare:
        return ""
    spans = [(b, r) for b, r in zip(bare, runs) if b.to_last and r.to_last and r.inside]
    writes = [r.write_cpu for r in runs if r.write_cpu is not None]
    if not spans or not writes:
        return ""
    cost = statistics.median([(r.to_last - b.to_last) / r.inside for b, r in spans])
    copy, write = statistics.median([r.in_step for r in runs]), statistics.median(writes)
    used = statistics.median([b.cpu / b.seconds for b in bare])
    if free:
        return (f"  {ours} per save while training runs: {cost * 1000:.0f} ms; its bound with "
                f"{free} free core{'s' if free > 1 else ''}: its copy {copy * 1000:.0f} ms")
    low, high = copy + write / busy, copy + write
    return (f"  {ours} per save while training runs: {cost * 1000:.0f} ms; its bound where "
            f"training keeps its {busy} cores busy (bare: {used:.2f} cores' CPU a second; "
            f"the write takes what it leaves first): its copy {copy * 1000:.0f} ms + its "
            f"write's CPU {write * 1000:.0f} ms / {busy} = {low * 1000:.0f} ms, up to the "
            f"whole write {high * 1000:.0f} ms (training's kernels waiting for the core it "
            f"takes)")


def pace_line(ours: str, peers: tuple, results: dict) -> str:
    """Ours' steps/s against each peer's, medians over rounds of the per-round ratios (above
    1: ours trains faster): the whole run, and the steady span (the run's last save and end
    left out: ours' final checkpoint, the peers' save at the last step)."""
    runs = results.get(ours)
    parts = []
    for peer in peers:
        theirs = results.get(peer)
        if not runs or not theirs:
            continue
        whole = statistics.median([t.seconds / r.seconds for t, r in zip(theirs, runs)])
        steady = [t.to_last / r.to_last for t, r in zip(theirs, runs) if t.to_last and r.to_last]
        parts.append(f"{peer} {whole:.2f}"
                     + (f" (steady {statistics.median(steady):.2f})" if steady else ""))
    return f"  {ours} against {', '.join(parts)} (above 1: ours faster)" if parts else ""


def row(mode: str, results: dict) -> str:
    """One mode's line of medians (see the module docstring)."""
    runs = results[mode]
    median = lambda values: statistics.median(values)  # noqa: E731
    line = f"  {mode:10s} {median([r.seconds for r in runs]):8.2f}"
    bare = bare_of(mode)
    if bare not in results or mode == bare:
        return line
    pairs = list(zip(results[bare], runs))
    ratio = median([b.seconds / r.seconds for b, r in pairs])
    spans = [(b, r) for b, r in pairs if b.to_last and r.to_last]
    steady = [b.to_last / r.to_last for b, r in spans]
    inside = [(r.to_last - b.to_last) / r.inside for b, r in spans if r.inside]
    saved = [(b, r) for b, r in pairs if r.saves]
    wall, cpu = per_save(mode, results) or (0.0, 0.0)
    blocked = median([(r.overhead - b.overhead) / r.saves for b, r in saved]) if saved else 0.0
    after = [r.after for r in runs if r.after is not None]
    writes = [r.write_cpu for r in runs if r.write_cpu is not None]
    line += (f" {ratio:8.2f} "
             + (f"{median(steady):7.2f} {median([r.inside for _, r in spans]):3g} "
                if steady else f"{'-':>7s} {'-':>3s} ")
             + (f"{median(inside) * 1000:9.0f} ms" if inside else f"{'-':>12s}")
             + f" {median([r.saves for r in runs]):6g} {wall * 1000:7.0f} ms "
             f"{cpu * 1000:7.0f} ms "
             + (f"{median(writes) * 1000:7.0f} ms " if writes else f"{'-':>10s} ")
             + f"{blocked * 1000:10.0f} ms {median([r.in_step for r in runs]) * 1000:9.0f} ms "
             + (f"{median(after) * 1000:8.0f} ms" if after else f"{'-':>11s}"))
    if mode == "graph-ours" and "graph-tf" in results:
        # Steps/s of ours against TF's Supervisor, per round, as vs bare.
        peer = median([t.seconds / r.seconds for t, r in zip(results["graph-tf"], runs)])
        line += f" {peer:8.2f}"
    return line


if __name__ == "__main__":
    main()
