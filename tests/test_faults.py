"""Fault injection at the Supervisor level (issue 7): crashes, a full disk, corrupted checkpoints.

* 50 SIGKILLs of real training processes (tests/fault_scripts/trainer.py: a small TensorFlow
  graph under jupyter_supervisor.Supervisor) at random moments, many of them inside a checkpoint
  write, with a restart after each kill. A Saver subclass in the training script reports every
  stage of a save and can hold one save at a stage (data written / state file not yet, or state
  file written / old checkpoint not yet deleted) so that the kill lands exactly there.
* A real tmpfs that is full when a checkpoint is written (full beforehand, or with room for half
  a checkpoint): the run stops with the error, nothing saved is touched, resuming on the full
  disk fails the same way, and resuming once space is freed restores the newest checkpoint.
  The error itself must say what failed (the disk) rather than TensorFlow's "Graph execution
  error" with an out-of-memory hint.
* Newest checkpoints corrupted between kills (a torn write on a file system that does not keep
  the write order): the restart falls back to the next older one. A `checkpoint` state file left
  empty or garbled must not make a restart silently start over from step 0.

Checkpoints are read back with TensorFlow's checkpoint reader, event files with TensorBoard's.
The training processes talk to the test through stdout lines (read on one thread per process,
waited for with deadlines); nothing waits a fixed time. The kill moments come from one seeded
RNG: the seed is printed, and FAULTS_SEED=<seed> replays a run.

A restart costs a fork, not a TensorFlow import: the training script's `serve` mode imports
TensorFlow once and forks one training process per restart. Each forked process builds its graph,
its Supervisor and its session from nothing; what it shares with the killed one is the logdir and
nothing else, as after a real crash. Two of the 50 restarts are cold processes (`once` mode, a
fresh interpreter) to show that the forked ones behave the same.
"""
import collections
import contextlib
import glob
import hashlib
import importlib.util
import json
import os
import queue
import random
import re
import signal
import subprocess
import sys
import threading
import time
from typing import NamedTuple, Optional

import numpy as np
import pytest
import tensorflow as tf
from tensorboard.backend.event_processing import event_file_loader
from tensorflow.python.eager import context

from jupyter_supervisor import events
from jupyter_supervisor.graph.supervisor import Supervisor

from helpers import Recorder, child_env, corrupt_checkpoint

v1 = tf.compat.v1
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRAINER = os.path.join(ROOT, "tests", "fault_scripts", "trainer.py")
DEADLINE = 60.0          # seconds; generous for a loaded 2-core machine, never reached when passing
IMPORT_DEADLINE = 180.0  # a TensorFlow import while other processes import it too
ENV = child_env()


def _load_trainer():
    spec = importlib.util.spec_from_file_location("fault_trainer", TRAINER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


trainer = _load_trainer()


@pytest.fixture(autouse=True)
def graph_mode():
    """What a user's tf.compat.v1.disable_eager_execution() does, for this test's thread."""
    with context.graph_mode():
        yield


# ------------------------------------------------------------------------------ checkpoints

class Checkpoint(NamedTuple):
    path: str
    step: int
    listed: tuple   # every path the state file lists, oldest first


def _reads_completely(path) -> Optional[int]:
    """The global step of checkpoint ``path`` if every tensor in it reads back; else None."""
    try:
        reader = tf.train.load_checkpoint(path)
        values = {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}
    except (tf.errors.OpError, ValueError, IndexError):  # IndexError: a data file cut short
        return None
    return int(np.asarray(values["global_step"]).reshape(()))


def newest_readable(logdir) -> Optional[Checkpoint]:
    """The newest checkpoint the ``checkpoint`` state file lists whose tensors all read back.

    This is what a restart must resume from; None when the state file lists nothing.
    """
    state = tf.train.get_checkpoint_state(logdir)
    if state is None or not state.model_checkpoint_path:
        return None
    listed = list(state.all_model_checkpoint_paths)
    if state.model_checkpoint_path not in listed:
        listed.append(state.model_checkpoint_path)
    for path in reversed(listed):
        step = _reads_completely(path)
        if step is not None:
            return Checkpoint(path, step, tuple(listed))
    return Checkpoint(None, None, tuple(listed))


def _readable_listed(logdir):
    state = tf.train.get_checkpoint_state(logdir)
    paths = list(state.all_model_checkpoint_paths) if state else []
    return [p for p in paths if _reads_completely(p) is not None]


def _leftovers(logdir, listed):
    """What the logdir holds besides its listed checkpoints: by kind, file names sorted."""
    listed_names = {os.path.basename(p) for p in listed}
    found = collections.defaultdict(list)
    for name in sorted(os.listdir(logdir)):
        prefix = re.sub(r"\.(index|meta|data-\d+-of-\d+)$", "", name)
        if "tempstate" in name or name.endswith("_temp"):
            found["partial writes"].append(name)
        elif name.startswith("supervisor.lock."):
            found["lock temp files"].append(name)
        elif name.startswith("model.ckpt-") and prefix not in listed_names:
            found["unlisted checkpoint files"].append(name)
        elif name.startswith("events.out.tfevents."):
            found["event files"].append(name)
    return found


def _read_event_files(logdir):
    """Every event of every event file in ``logdir``, read with TensorBoard's loader."""
    loaded = {}
    for path in sorted(glob.glob(os.path.join(logdir, "events.out.tfevents.*"))):
        loaded[os.path.basename(path)] = list(event_file_loader.LegacyEventFileLoader(path).Load())
    return loaded


# ------------------------------------------------------------------------ training processes

class Line(NamedTuple):
    pid: int
    kind: str
    data: dict


class Trainers:
    """The training processes of one test and the lines they print, in one queue.

    Each process is started in a process group of its own (its forked children stay in it), so
    that close() can kill everything it started, whatever state a failing test left it in.
    """

    def __init__(self, tmp_path):
        self._processes = []
        self._lines: "queue.Queue[Line]" = queue.Queue()
        self.seen = collections.defaultdict(list)   # pid -> [Line], in the order printed
        self._cursor = collections.defaultdict(int)  # pid -> lines of seen[pid] wait_for passed
        self.stderr_path = tmp_path / "trainers.stderr"
        self._stderr = open(self.stderr_path, "wb")

    def spawn(self, mode):
        proc = subprocess.Popen([sys.executable, TRAINER, mode], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=self._stderr, env=ENV, cwd=ROOT,
                                start_new_session=True)
        self._processes.append(proc)
        threading.Thread(target=self._read, args=(proc,), daemon=True,
                         name=f"trainer-{proc.pid}-stdout").start()
        return proc

    def _read(self, proc):
        for raw in proc.stdout:
            text = raw.decode(errors="replace").rstrip("\n")
            try:
                pid, kind, payload = text.split(" ", 2)
                line = Line(int(pid), kind, json.loads(payload))
            except ValueError:
                line = Line(proc.pid, "UNPARSED", {"text": text})
            self._lines.put(line)
        self._lines.put(Line(proc.pid, "EOF", {}))

    def _take(self, timeout):
        line = self._lines.get(timeout=timeout)
        self.seen[line.pid].append(line)
        if line.kind == "ERROR":
            raise AssertionError(f"training process {line.pid} failed:\n{line.data['text']}")
        return line

    def wait_for(self, pid, kinds, what, timeout=DEADLINE, match=lambda data: True):
        """The data of the next line of ``pid`` of a kind in ``kinds`` that ``match``es.

        "Next" is after the line the previous wait_for on ``pid`` returned: lines taken while
        waiting for another process are not missed.
        """
        deadline = time.monotonic() + timeout
        while True:
            lines = self.seen[pid]
            while self._cursor[pid] < len(lines):
                line = lines[self._cursor[pid]]
                self._cursor[pid] += 1
                if line.kind in kinds and match(line.data):
                    return line.data
                if line.kind == "EOF":
                    raise AssertionError(f"process {pid} ended while waiting for {what}\n"
                                         + self.describe(pid))
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"timed out after {timeout:g}s waiting for {what}\n"
                                     + self.describe(pid))
            with contextlib.suppress(queue.Empty):
                self._take(remaining)

    def take_until(self, moment):
        """Takes lines until time.monotonic() reaches ``moment``, a moment chosen for a kill."""
        while True:
            remaining = moment - time.monotonic()
            if remaining <= 0:
                return
            try:
                self._take(remaining)
            except queue.Empty:
                return

    def describe(self, pid):
        lines = self.seen.get(pid, [])
        steps = [line for line in lines if line.kind == "STEP"]
        shown = [line for line in lines if line.kind != "STEP"][-30:] + steps[-3:]
        self._stderr.flush()
        stderr = self.stderr_path.read_text(errors="replace")[-4000:]
        return ("lines of process %d:\n  %s\nstderr of the training processes (tail):\n%s"
                % (pid, "\n  ".join(f"{line.kind} {line.data}" for line in shown), stderr))

    def close(self):
        for proc in self._processes:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            for stream in (proc.stdin, proc.stdout):
                with contextlib.suppress(OSError):
                    stream.close()
        self._stderr.close()


class Life(NamedTuple):
    """One training process: its pid, and the process that runs it (the forking server, or a
    cold process of its own)."""
    pid: int
    host: subprocess.Popen
    cold: bool


def _start(trainers, host, cold, params) -> Life:
    host.stdin.write(f"START {json.dumps(params)}\n".encode())
    host.stdin.flush()
    if cold:
        return Life(host.pid, host, True)
    forked = trainers.wait_for(host.pid, {"FORKED"}, "the fork of a training process")
    return Life(forked["child"], host, False)


def _kill(trainers, life):
    """SIGKILLs ``life`` and waits until it is reaped and every line it printed was taken."""
    os.kill(life.pid, signal.SIGKILL)
    if life.cold:
        life.host.wait(DEADLINE)
        assert life.host.returncode == -signal.SIGKILL
        trainers.wait_for(life.pid, {"EOF"}, "the end of the killed process's output")
    else:
        # The child's lines precede its EXITED line: both go through the server's stdout.
        exited = trainers.wait_for(life.host.pid, {"EXITED"}, "the killed process to be reaped",
                                   match=lambda data: data["child"] == life.pid)
        assert exited["signal"] == signal.SIGKILL, exited


# -------------------------------------------------------------------------------- 50 kills

KILLS = 50
SAVE_MODEL_SECS = 0.3
SAVE_SUMMARIES_SECS = 0.25
# Where each kill lands. "random": a uniform moment in RANDOM_WINDOW_SECS after the restart came
# up (a save is in progress ~5% of the time). "startup": a uniform moment in STARTUP_WINDOW_SECS
# after the restart was asked for (building the graph, taking over the lock, restoring, the first
# save). "save_begin": as Saver.save starts (the kill lands in the save op's data write, or just
# before it). "data_written": a save holds after the data and index files were written, before
# the state file lists them. "state_written": a save holds after the state file was written,
# before the checkpoint that fell out of retention is deleted and before the .meta file.
KILL_KINDS = {"random": 20, "startup": 6, "save_begin": 8, "data_written": 10,
              "state_written": 6}
RANDOM_WINDOW_SECS = (0.05, 1.0)
STARTUP_WINDOW_SECS = 0.5
COLD_LIVES = (0, 25)     # restarts that are fresh interpreters instead of forks
CORRUPTIONS = 4          # restarts preceded by corrupting the newest checkpoint
# The work a kill may lose, in seconds of training. The checkpoint service starts a save every
# SAVE_MODEL_SECS = I (TF's LooperThread schedule: t0, t0 + I, t0 + 2I, ...; after a save that
# overran, the next one starts at once), and a checkpoint holds the values its save op read just
# after the save began. At a kill, the newest complete checkpoint is the last save that finished,
# so what is lost is the time since that save began: at most one interval, plus the duration of
# that save (if it overran), plus the part of the save in progress (a kill inside a save, which
# runs until the kill when the test holds it there) -- so I + (longest save of that process) +
# max(longest, the save in progress) -- plus how late the checkpoint thread wakes on a loaded
# 2-core machine and the report granularity (trainer.REPORT_SECS). The slack covers those last
# two with a wide margin (observed: under 0.1 s). The loss is measured in time (the killed
# process's own STEP reports map steps to times) and printed in steps as well, with the step rate
# the process reported. A checkpoint service that stalled would lose up to the whole life of a
# process (up to 1 s after READY) and fail this (almost surely, over 20 random kills).
LOST_WORK_SLACK_SECS = 0.5


def _lost_work(lines, ready, saved_step):
    """(steps, seconds) of training the killed process did past ``saved_step``, by its reports."""
    reports = [(ready["step"], ready["t"])] + [
        (line.data["step"], line.data["t"]) for line in lines if line.kind == "STEP"]
    last_step, last_t = reports[-1]
    if saved_step >= last_step:
        return 0, 0.0, reports
    t_saved = next(t for step, t in reports if step >= saved_step)
    return last_step - saved_step, last_t - t_saved, reports


def _save_durations(lines):
    """(the longest save that ended, how long the save in progress at the kill had run): a
    save the test held for the kill (``pause``) runs until the kill, however long that is."""
    begun, longest = {}, 0.0
    for line in lines:
        if line.kind == "SAVE_BEGIN":
            begun[line.data["n"]] = line.data["t"]
        elif line.kind == "SAVE_END" and line.data["n"] in begun:
            longest = max(longest, line.data["t"] - begun.pop(line.data["n"]))
    last_t = max((line.data["t"] for line in lines if "t" in line.data), default=None)
    in_progress = max((last_t - t for t in begun.values()), default=0.0) if begun else 0.0
    return longest, in_progress


def _run_and_kill(trainers, host, cold, kind, rng, params, where):
    """Starts a training process and SIGKILLs it at a moment of ``kind``; returns (the process,
    the PAUSED report of a save held for the kill, or None)."""
    save_no = rng.randrange(3)
    if kind in ("data_written", "state_written"):
        params = dict(params, pause={"at": kind.upper(), "save": save_no})
    t_start = time.monotonic()
    life = _start(trainers, host, cold, params)
    paused = None
    if kind == "startup":
        trainers.take_until(t_start + rng.uniform(0, STARTUP_WINDOW_SECS))
    else:
        ready = trainers.wait_for(life.pid, {"READY"}, f"{where}: the restart to come up")
        if kind == "random":
            trainers.take_until(ready["t"] + rng.uniform(*RANDOM_WINDOW_SECS))
        elif kind == "save_begin":
            trainers.wait_for(life.pid, {"SAVE_BEGIN"}, f"{where}: save {save_no} to begin",
                              match=lambda data: data["n"] == save_no)
        else:
            paused = trainers.wait_for(life.pid, {"PAUSED"},
                                       f"{where}: save {save_no} held at {kind}")
    _kill(trainers, life)
    return life, paused


def _train_to_a_clean_stop(trainers, server, params):
    """Forks a training process that stops cleanly at ``params["stop_at"]``; returns its READY
    report once it ended with a final checkpoint there."""
    life = _start(trainers, server, False, params)
    ready = trainers.wait_for(life.pid, {"READY"}, "the restart to come up")
    done = trainers.wait_for(life.pid, {"DONE"}, "the run to stop cleanly")
    exited = trainers.wait_for(server.pid, {"EXITED"}, "the run to exit",
                               match=lambda data: data["child"] == life.pid)
    assert done["step"] == params["stop_at"] and exited["code"] == 0, (done, exited)
    return ready


@pytest.mark.slow
def test_fifty_sigkills_resume_at_newest_checkpoint_and_lose_at_most_an_interval(tmp_path):
    seed = int(os.environ.get("FAULTS_SEED") or random.SystemRandom().randrange(2 ** 32))
    print(f"\nfault-injection seed: {seed} (replay with FAULTS_SEED={seed})")
    rng = random.Random(seed)
    schedule = [kind for kind, count in KILL_KINDS.items() for _ in range(count)]
    assert len(schedule) == KILLS
    rng.shuffle(schedule)
    corrupt_before = set(rng.sample(range(5, KILLS), CORRUPTIONS))
    logdir = str(tmp_path / "run")
    base = dict(logdir=logdir, save_model_secs=SAVE_MODEL_SECS,
                save_summaries_secs=SAVE_SUMMARIES_SECS, stop_at=None, pause=None)

    trainers = Trainers(tmp_path)
    try:
        server = trainers.spawn("serve")
        colds = {i: trainers.spawn("once") for i in COLD_LIVES}
        for proc in [server, *colds.values()]:
            trainers.wait_for(proc.pid, {"STANDBY"}, "a training process to import TensorFlow",
                              timeout=IMPORT_DEADLINE)

        records = []
        newest = None          # what the next restart must resume from
        ever_saved = False
        corruptions_due, corrupted = 0, []
        for i, kind in enumerate(schedule):
            where = f"kill {i + 1}/{KILLS} ({kind}; FAULTS_SEED={seed})"
            corruptions_due += i in corrupt_before
            if corruptions_due and len(_readable_listed(logdir)) >= 2:
                how = rng.choice(["truncated_data", "garbled_index"])
                corrupt_checkpoint(newest.path, how)
                older = newest_readable(logdir)
                assert older.path not in (None, newest.path) and older.step <= newest.step
                corrupted.append((i, how, newest.path, older.path))
                corruptions_due -= 1
                newest = older

            life, paused = _run_and_kill(trainers, colds.get(i, server), i in colds, kind, rng,
                                         base, where)
            lines = trainers.seen[life.pid]
            first = {}
            for line in lines:
                first.setdefault(line.kind, line.data)
            ready, session_ready = first.get("READY"), first.get("SESSION_READY")
            assert kind == "startup" or ready is not None
            # The restart resumed exactly at the newest readable checkpoint.
            expected_step = newest.step if newest else 0
            if ready is not None:
                assert ready["step"] == expected_step, (where, ready, newest)
            if session_ready is not None:
                assert session_ready["restored_from"] == (newest.path if newest else None), (
                    where, session_ready, newest)
                assert session_ready["step"] == expected_step, (where, session_ready, newest)

            # The logdir stays recoverable, nothing saved before is lost, and the newest
            # checkpoint the state file names is a complete one (unless we corrupted it).
            after = newest_readable(logdir)
            # Without a checkpoint, a restart starts from step 0.
            after_step, after_listed = (after.step, after.listed) if after else (0, ())
            ever_saved = ever_saved or any(line.kind in ("STATE_WRITTEN", "SAVE_END")
                                           for line in lines)
            if ever_saved:
                assert after is not None and after.path is not None, (
                    f"{where}: no readable checkpoint left; state lists "
                    f"{after and after.listed}")
                latest = tf.train.latest_checkpoint(logdir)
                assert latest == after.path or latest in {c[2] for c in corrupted}, (
                    where, latest, after)
            if newest is not None:
                assert after_step >= newest.step, (where, newest, after)
            if kind == "data_written":
                # The kill landed between the data files and the state file: the complete new
                # checkpoint is on disk but not listed, the older one is what resumes.
                assert os.path.exists(paused["path"] + ".index"), (where, paused)
                # (Unless it has the name of a corrupted checkpoint still listed, and so fixed it.)
                assert (paused["path"] not in after_listed
                        or paused["path"] in {c[2] for c in corrupted}), (where, paused, after)
            elif kind == "state_written":
                assert after is not None and after.path == paused["path"], (where, paused, after)

            record = dict(kind=kind, cold=life.cold, restored=expected_step,
                          resumable=after_step, lost_steps=0, lost_secs=0.0, bound=None,
                          rate=None)
            if ready is not None:
                lost_steps, lost_secs, reports = _lost_work(lines, ready, after_step)
                longest, in_progress = _save_durations(lines)
                bound = (SAVE_MODEL_SECS + longest + max(longest, in_progress)
                         + LOST_WORK_SLACK_SECS)
                elapsed = reports[-1][1] - reports[0][1]
                rate = (reports[-1][0] - reports[0][0]) / elapsed if elapsed > 0 else None
                record.update(lost_steps=lost_steps, lost_secs=lost_secs, bound=bound,
                              rate=rate)
                assert lost_secs <= bound, (
                    f"{where}: lost {lost_steps} steps = {lost_secs:.3f}s of training "
                    f"(at {rate and round(rate)} steps/s); at most {bound:.3f}s allowed "
                    f"(save_model_secs={SAVE_MODEL_SECS}). Resumable: {after}\n"
                    + trainers.describe(life.pid))
            records.append(record)
            newest = after

        # After 50 kills the logdir still trains and stops cleanly, with a final checkpoint.
        stop_at = newest.step + 300
        ready = _train_to_a_clean_stop(trainers, server, dict(base, stop_at=stop_at))
        assert ready["step"] == newest.step
    finally:
        trainers.close()

    final = newest_readable(logdir)
    assert (final.path, final.step) == (f"{logdir}/model.ckpt-{stop_at}", stop_at)
    assert len(final.listed) == trainer.MAX_TO_KEEP
    assert not os.path.exists(os.path.join(logdir, "supervisor.lock"))
    # One event file per process that got as far as its Supervisor; TensorBoard's reader reads
    # every one of them, those cut short by a kill too.
    event_files = _read_event_files(logdir)
    assert len(event_files) >= KILLS + 1 - KILL_KINDS["startup"]

    assert [r["kind"] for r in records] == schedule
    assert len(corrupted) == CORRUPTIONS, corrupted
    timed = [r for r in records if r["bound"] is not None]
    worst = max(timed, key=lambda r: r["lost_secs"] / r["bound"])
    leftovers = _leftovers(logdir, final.listed)
    # The saves killed before the state file listed them were swept by the next start.
    assert not leftovers["unlisted checkpoint files"], leftovers
    print(f"{KILLS} kills ({', '.join(f'{k}: {n}' for k, n in KILL_KINDS.items())}); "
          f"{len(COLD_LIVES)} cold restarts; {len(corrupted)} newest checkpoints corrupted "
          f"before a restart: {corrupted}")
    print(f"work lost per kill (s): max {max(r['lost_secs'] for r in timed):.3f}, mean "
          f"{sum(r['lost_secs'] for r in timed) / len(timed):.3f}; worst against its bound: "
          f"{worst}")
    print("steps/s reported: " + ", ".join(str(round(r["rate"])) for r in timed if r["rate"]))
    for what, names in sorted(leftovers.items()):
        print(f"left in the logdir: {len(names)} {what}: {names[:12]}")


@pytest.mark.slow
def test_a_save_killed_before_it_was_listed_is_swept_by_the_next_run(tmp_path):
    """A SIGKILL between a save's data and index files and the state file update leaves a
    complete checkpoint that no restore uses and the Saver's retention never deletes: the next
    run removes it, so the logdir holds at most max_to_keep checkpoints, all listed."""
    logdir = str(tmp_path / "run")
    params = dict(logdir=logdir, save_model_secs=SAVE_MODEL_SECS, save_summaries_secs=0,
                  stop_at=None, pause={"at": "DATA_WRITTEN", "save": trainer.MAX_TO_KEEP})
    trainers = Trainers(tmp_path)
    try:
        server = trainers.spawn("serve")
        trainers.wait_for(server.pid, {"STANDBY"}, "a training process to import TensorFlow",
                          timeout=IMPORT_DEADLINE)
        life = _start(trainers, server, False, params)
        paused = trainers.wait_for(life.pid, {"PAUSED"}, "a save held before its listing")
        _kill(trainers, life)
        orphan, before = paused["path"], newest_readable(logdir)
        assert os.path.exists(orphan + ".index") and orphan not in before.listed
        assert len(before.listed) == trainer.MAX_TO_KEEP
        # A clean run that stops before the orphan's step: it never saves under that name.
        stop_at = before.step + 1
        assert int(orphan.rsplit("-", 1)[1]) > stop_at
        _train_to_a_clean_stop(trainers, server, dict(params, stop_at=stop_at, pause=None))
    finally:
        trainers.close()
    after = newest_readable(logdir)
    assert after.step == stop_at and len(after.listed) == trainer.MAX_TO_KEEP
    assert not _leftovers(logdir, after.listed)["unlisted checkpoint files"]
    assert not glob.glob(glob.escape(orphan) + "*")


# ------------------------------------------------------------------------------- disk full

DISK_BYTES = 4 * 1024 * 1024   # room for the run: 3 kept checkpoints of ~0.5 MiB, graph, events
CHECKPOINT_BYTES = 2 * 4 * trainer.WIDTH ** 2   # w and its momentum slot, float32


@contextlib.contextmanager
def _small_disk(path, size):
    """A tmpfs of ``size`` bytes mounted at ``path`` (root only) for the block."""
    os.makedirs(path)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "jupyter-supervisor-test",
                    path], check=True, capture_output=True)
    try:
        yield path
    finally:
        if subprocess.run(["umount", path], capture_output=True).returncode != 0:
            subprocess.run(["umount", "--lazy", path], check=True)


def _rerun_as_namespace_root(request):
    """Runs this test again as root of a new user and mount namespace, where it may mount.

    For machines where the tests do not run as root: `unshare -Urm` needs no privilege.
    """
    result = subprocess.run(
        ["unshare", "-Urm", sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         request.node.nodeid], cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0 and re.search(r"\b1 passed\b", result.stdout), (
        result.stdout[-6000:] + result.stderr[-3000:])


def _fill(directory, leave):
    """Fills the file system of ``directory`` with one file, leaving ``leave`` bytes (0: none)."""
    path = os.path.join(directory, "filler")
    stat = os.statvfs(directory)
    todo = stat.f_bavail * stat.f_frsize - leave
    chunk = b"\0" * (1 << 16)
    with open(path, "wb", buffering=0) as f:
        while todo > 0:
            todo -= f.write(chunk[:todo])
        if leave == 0:
            # Whatever the accounting missed, down to the last byte.
            size = len(chunk)
            while size:
                try:
                    f.write(chunk[:size])
                except OSError:
                    size //= 2
    return path


class _Snapshot(NamedTuple):
    """The state file and the files of the checkpoints it lists, byte for byte."""
    state: bytes
    files: dict          # name -> sha256
    listed: tuple
    newest: Checkpoint

    @classmethod
    def take(cls, logdir):
        newest = newest_readable(logdir)
        files = {}
        for prefix in newest.listed:
            for path in glob.glob(glob.escape(prefix) + ".*"):
                with open(path, "rb") as f:
                    files[os.path.basename(path)] = hashlib.sha256(f.read()).hexdigest()
        with open(os.path.join(logdir, "checkpoint"), "rb") as f:
            state = f.read()
        return cls(state, files, newest.listed, newest)

    def assert_intact(self, logdir):
        now = _Snapshot.take(logdir)
        assert now.state == self.state, "the checkpoint state file changed"
        assert now.files == self.files, "the listed checkpoints' files changed"
        assert all(_reads_completely(p) is not None for p in self.listed), self.listed
        assert now.newest == self.newest


class _GatedSaver(v1.train.Saver):
    """A Saver whose saves wait while the test holds ``gate``: none is half-way when the test
    fills the disk and takes its snapshot, so the snapshot is exact."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.gate = threading.Lock()

    def save(self, *args, **kwargs):  # pylint: disable=arguments-differ
        with self.gate:
            return super().save(*args, **kwargs)


def _supervised(logdir, make_saver=None, save_model_secs=0.2):
    graph, _, train_op, saver = trainer.build_model(make_saver)
    with graph.as_default():
        sv = Supervisor(graph=graph, logdir=logdir, saver=saver, save_model_secs=save_model_secs,
                        save_summaries_secs=0.1)
    recorder = Recorder()
    sv.add_listener(recorder)
    return sv, train_op, saver, recorder


def _train_until_the_disk_is_full(logdir, leave):
    """Trains until 4 checkpoints were saved, fills the disk (leaving ``leave`` bytes), trains on.

    Returns (the exception managed_session raised or None, the events, the snapshot taken
    right after filling, the filler's path).
    """
    sv, train_op, saver, recorder = _supervised(logdir, lambda: _GatedSaver(max_to_keep=3))
    error = snapshot = filler = None
    deadline = time.monotonic() + DEADLINE
    try:
        with sv.managed_session() as sess:
            while not sv.should_stop() and time.monotonic() < deadline:
                sess.run(train_op)
                if filler is None and len(recorder.of(events.CheckpointSaved)) >= 4:
                    with saver.gate:
                        filler = _fill(os.path.dirname(logdir), leave)
                        snapshot = _Snapshot.take(logdir)
                    deadline = time.monotonic() + DEADLINE
    except Exception as e:  # pylint: disable=broad-except  (what the caller gets, checked below)
        error = e
    assert sv.flush_events(DEADLINE)
    return error, recorder, snapshot, filler


def _resume_on_the_full_disk(logdir):
    """Resumes and trains on the still-full disk; the exception that stops it, or None."""
    deadline = time.monotonic() + DEADLINE
    try:
        sv, train_op, _, _ = _supervised(logdir)
        with sv.managed_session() as sess:
            while not sv.should_stop() and time.monotonic() < deadline:
                sess.run(train_op)
    except Exception as e:  # pylint: disable=broad-except  (checked by the caller)
        return e
    return None


@pytest.mark.parametrize("leave", [0, CHECKPOINT_BYTES // 2], ids=["full", "half_a_checkpoint"])
def test_disk_full_during_checkpoint_stops_the_run_and_loses_nothing(tmp_path, request, leave):
    if os.geteuid() != 0:
        _rerun_as_namespace_root(request)
        return
    with _small_disk(str(tmp_path / "disk"), DISK_BYTES) as disk:
        logdir = os.path.join(disk, "run")
        error, recorder, snapshot, filler = _train_until_the_disk_is_full(logdir, leave)

        # The run stopped, and its caller got the error: what and where.
        assert snapshot is not None, "4 checkpoints were never saved"
        assert error is not None, f"training went on for {DEADLINE:g}s on a full disk"
        message = str(error)
        assert "No space left on device" in message and logdir in message, message
        (stopped,) = recorder.of(events.Stopped)
        assert stopped.reason == events.ERROR and stopped.exception is error, stopped
        # Nothing saved before is touched: the state file, every listed checkpoint, byte for
        # byte; the failed checkpoint is not listed.
        snapshot.assert_intact(logdir)
        saved = recorder.of(events.CheckpointSaved)
        assert saved[-1].path == snapshot.newest.path
        assert not os.path.exists(os.path.join(logdir, "supervisor.lock"))
        left_after_failure = _leftovers(logdir, snapshot.listed)

        # Resuming while the disk is still full fails too, and touches nothing either.
        retry = _resume_on_the_full_disk(logdir)
        assert retry is not None, f"training went on for {DEADLINE:g}s on a full disk"
        assert "No space left on device" in str(retry), retry
        snapshot.assert_intact(logdir)
        assert not os.path.exists(os.path.join(logdir, "supervisor.lock"))
        left_after_retry = _leftovers(logdir, snapshot.listed)

        # Space freed: resuming restores the newest checkpoint and trains on, with new
        # checkpoints and a final one at the last step.
        os.remove(filler)
        sv, train_op, _, resumed = _supervised(logdir)
        deadline = time.monotonic() + DEADLINE
        with sv.managed_session() as sess:
            start = sv.read_global_step(sess)
            while not (sv.read_global_step(sess) >= start + 200
                       and any(e.step > start for e in resumed.of(events.CheckpointSaved))):
                assert time.monotonic() < deadline, "no new checkpoint after the resume"
                sess.run(train_op)
            last = sv.read_global_step(sess)
        assert sv.flush_events(DEADLINE)
        (ready,) = resumed.of(events.SessionReady)
        assert (ready.restored_from, ready.step) == (snapshot.newest.path, snapshot.newest.step)
        assert start == snapshot.newest.step
        assert newest_readable(logdir)[:2] == (os.path.join(logdir, f"model.ckpt-{last}"), last)
        assert all(_reads_completely(p) is not None for p in newest_readable(logdir).listed)
        # TensorBoard reads every event file, those written while the disk was full too.
        event_files = _read_event_files(logdir)
        assert len(event_files) == 3, sorted(event_files)
        left_at_end = _leftovers(logdir, newest_readable(logdir).listed)

    print(f"\n[leave={leave}] the error: {type(error).__name__}: {message}")
    print(f"[leave={leave}] resuming on a full disk: {type(retry).__name__}: "
          f"{str(retry).splitlines()[0] if str(retry) else ''}")
    for when, left in [("after the failure", left_after_failure),
                       ("after a resume on the full disk", left_after_retry),
                       ("at the end", left_at_end)]:
        print(f"[leave={leave}] left in the logdir {when}: "
              + ("; ".join(f"{k}: {v}" for k, v in sorted(left.items()) if k != "event files")
                 or "nothing but listed checkpoints and event files"))


def test_disk_full_error_says_what_failed_and_what_is_safe(tmp_path, request):
    """The error a full disk gives the user is about the disk, not TensorFlow's graph.

    TensorFlow's own error is a ResourceExhaustedError whose first line is "Graph execution
    error:", followed by where the save op was defined, the disk error with the path of a
    temporary file, and a hint about running out of memory (report_tensor_allocations_upon_oom).
    """
    if os.geteuid() != 0:
        _rerun_as_namespace_root(request)
        return
    with _small_disk(str(tmp_path / "disk"), DISK_BYTES) as disk:
        logdir = os.path.join(disk, "run")
        error, _, snapshot, _ = _train_until_the_disk_is_full(logdir, 0)
    assert error is not None and snapshot is not None
    message = str(error)
    shown = f"{type(error).__name__}: " + "\n".join(
        line for line in message.splitlines() if not line.startswith("  "))  # no stack lines
    first_line = message.strip().splitlines()[0]
    assert "No space left on device" in first_line and logdir in first_line, shown
    assert snapshot.newest.path in message, (
        f"the error should name the newest intact checkpoint, {snapshot.newest.path}: {shown}")
    assert "report_tensor_allocations_upon_oom" not in message, shown


# --------------------------------------------------------------------- the state file broken

def _two_checkpoints(logdir):
    """A logdir whose state file lists checkpoints at steps 5 and 10 (the newest). No periodic
    save: on a loaded machine one fell between them (at step 9)."""
    sv, train_op, _, _ = _supervised(logdir, save_model_secs=0)
    with sv.managed_session() as sess:
        for _ in range(5):
            sess.run(train_op)
        sv.save_checkpoint(sess)
        for _ in range(5):
            sess.run(train_op)
    assert [_reads_completely(p) for p in newest_readable(logdir).listed][-2:] == [5, 10]
    return os.path.join(logdir, "model.ckpt-10")


@pytest.mark.parametrize("how", ["empty", "garbled", "missing"])
def test_unreadable_state_file_never_silently_starts_over(tmp_path, how):
    """A `checkpoint` state file left empty (ext4 after a power cut: renamed but never synced),
    garbled or missing (deleted, or not copied with the checkpoints) must not make a restart
    initialize the model from scratch while complete checkpoints sit next to it: resume from
    the newest of them, or refuse with an error that names the state file."""
    logdir = str(tmp_path / "run")
    newest = _two_checkpoints(logdir)
    state = os.path.join(logdir, "checkpoint")
    if how == "missing":
        os.remove(state)
    else:
        with open(state, "w") as f:
            f.write("" if how == "empty" else "model_checkpoint_path: \"model.ckpt-10\"\n\x00\x17{{")

    sv, train_op, _, recorder = _supervised(logdir)
    error, step = None, None
    try:
        with sv.managed_session() as sess:
            step = sv.read_global_step(sess)
            sess.run(train_op)
    except Exception as e:  # pylint: disable=broad-except  (checked below)
        error = e
    assert sv.flush_events(DEADLINE)
    ready = recorder.of(events.SessionReady)
    outcome = (f"error: {type(error).__name__}: {error}" if error is not None
               else f"started at step {step}, restored from {ready[0].restored_from}")
    if error is None:
        assert (ready[0].restored_from, step) == (newest, 10), outcome
    else:
        assert state in str(error), outcome
    assert _reads_completely(newest) == 10, "the newest checkpoint was lost"
