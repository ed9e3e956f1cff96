"""--keep-best METRIC: the checkpoint at which METRIC was best is kept beside the newest ones,
as a full training state, listed in TensorFlow's state file and readable with plain TensorFlow;
it survives retention, crashes during the write of a new best, resumes and a stop mid-epoch;
``restore_best`` hands it over. The models (eager_models.overfitting, drifting_classifier) have
their best epoch in the middle of the run, by construction, so that the newest checkpoint is
never the best one."""
import inspect
import json
import os
import re
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf
from IPython.core.error import UsageError

from eager_models import drifting_classifier, overfitting
from helpers import Kernel, child_env, killed_where_it_paused, wait_for
from jupyter_supervisor import events, names
from jupyter_supervisor.config import RunConfig
from jupyter_supervisor.eager.reporting import BEST_TAG
from jupyter_supervisor.graph.graph_backend import GraphBackend

pytestmark = pytest.mark.internals

HERE = os.path.dirname(os.path.abspath(__file__))
EVERY_STEP = 1e-9
BATCHES = 8                      # batches an epoch in both models
TRAINING_STATE = "jupyter_supervisor/training/.ATTRIBUTES/VARIABLE_VALUE"
OBJECT_GRAPH = "_CHECKPOINTABLE_OBJECT_GRAPH"


class EpochWeights(keras.callbacks.Callback):
    """The model's weights at the end of each epoch."""

    def __init__(self):
        super().__init__()
        self.weights = []

    def on_epoch_end(self, epoch, logs=None):
        self.weights.append([w.numpy() for w in self.model.weights])


def listed(logdir):
    """The checkpoints the state file lists, oldest first (what TensorFlow reads)."""
    return list(tf.train.get_checkpoint_state(str(logdir)).all_model_checkpoint_paths)


def on_disk(logdir):
    """The checkpoints whose index file is in ``logdir``, as paths."""
    return sorted(os.path.join(str(logdir), name[:-len(".index")])
                  for name in os.listdir(logdir) if name.endswith(".index"))


def at_step(logdir, step):
    return os.path.join(str(logdir), f"model.ckpt-{step}")


def plain_weights(path, make):
    """The model weights of checkpoint ``path``, read with TensorFlow alone into a fresh model
    and optimizer of ``make`` (every saved object must match)."""
    model, _ = make()
    model.optimizer.build(model.trainable_variables)
    tf.train.Checkpoint(model=model, optimizer=model.optimizer).read(path) \
        .assert_existing_objects_matched()
    return [w.numpy() for w in model.weights]


def recorded_best(path):
    """What the checkpoint ``path`` records as the best (its run state's JSON), or None."""
    state = tf.train.load_checkpoint(path).get_tensor(TRAINING_STATE)
    return json.loads(state.decode("utf-8")).get("best")


def assert_same(a, b):
    assert len(a) == len(b) and all(np.array_equal(u, v) for u, v in zip(a, b)), (a, b)


def fit(backends, logdir, make, epochs, callbacks=(), **options):
    """One session of a fit of a fresh model of ``make``; returns (model, History, records)."""
    model, arguments = make()
    options.setdefault("save_model_secs", EVERY_STEP)
    sv = backends(logdir, **options)
    records = Recorder(sv)
    with sv.session():
        history = model.fit(**arguments, epochs=epochs, verbose=0,
                            callbacks=[sv.callback, *callbacks])
    sv.close()
    return model, history, records


class Recorder:
    """The records of one backend (``of`` waits for those emitted so far)."""

    def __init__(self, sv):
        self.records = []
        sv.add_listener(self.records.append)
        self.sv = sv

    def of(self, kind):
        self.sv.flush_events(10)
        return [r for r in self.records if isinstance(r, kind)]


# -- fit ------------------------------------------------------------------------------------

def test_fit_keeps_the_best_epoch_beside_the_newest(tmp_path, backends):
    """val_loss is best at the end of epoch 3 and worse after: with --keep 1, the logdir holds
    the newest checkpoint and that epoch's, both listed, both read by plain TensorFlow; the
    event file names the best for TensorBoard."""
    from tensorboard.backend.event_processing import event_accumulator  # pylint: disable=C0415
    record = EpochWeights()
    _, history, records = fit(backends, tmp_path, overfitting, 6, [record], keep=1,
                              keep_best="val_loss")
    val = history.history["val_loss"]
    k = int(np.argmin(val))
    assert k == 2 and all(v > val[k] for v in val[k + 1:])
    best, newest = at_step(tmp_path, (k + 1) * BATCHES), at_step(tmp_path, 6 * BATCHES)
    assert listed(tmp_path) == [best, newest] and on_disk(tmp_path) == [best, newest]
    assert tf.train.latest_checkpoint(str(tmp_path)) == newest
    assert_same(plain_weights(best, overfitting), record.weights[k])
    assert_same(plain_weights(newest, overfitting), record.weights[-1])
    # Each new best replaced the one before once it was listed; none after epoch 3.
    kept = records.of(events.BestKept)
    assert [(b.step, b.epoch) for b in kept] == [(8, 0), (16, 1), (24, 2)]
    assert (kept[-1].metric, kept[-1].mode, kept[-1].path) == ("val_loss", "min", best)
    assert kept[-1].value == pytest.approx(val[k])
    assert recorded_best(newest) == recorded_best(best) == {
        "metric": "val_loss", "mode": "min", "value": kept[-1].value, "step": 24, "epoch": 2}
    assert records.of(events.CheckpointSaved)[-1].kept == (newest, best)

    files = tf.io.gfile.glob(os.path.join(str(tmp_path), "events.out.tfevents.*"))
    accumulator = event_accumulator.EventAccumulator(files[0])
    accumulator.Reload()
    texts = [(e.step, tf.make_ndarray(e.tensor_proto).item().decode())
             for e in accumulator.Tensors(BEST_TAG)]
    assert texts[-1] == (24, f"best {kept[-1].text()}: {best}")
    assert kept[-1].text() == f"val_loss {val[k]:.5g} (min) at step 24, the end of epoch 3"


def training_state(path):
    """The run state's JSON of the checkpoint ``path``."""
    return json.loads(tf.train.load_checkpoint(path).get_tensor(TRAINING_STATE).decode("utf-8"))


def test_the_best_is_the_epoch_end_every_callback_made(tmp_path, backends):
    """The best is written at the boundary after every callback's on_epoch_end, so the
    callbacks after sv.callback (EarlyStopping, ReduceLROnPlateau) have decided on its epoch in
    it: it is the checkpoint a run without --keep-best writes at that epoch's end, variable for
    variable, with the same training state but for the best's record."""
    def deciding():
        return [keras.callbacks.EarlyStopping("val_loss", patience=10),
                keras.callbacks.ReduceLROnPlateau("val_loss", patience=10)]
    _, history, _ = fit(backends, tmp_path / "kept", overfitting, 4, deciding(), keep=1,
                        keep_best="val_loss", save_model_secs=0)   # no save but the best's
    fit(backends, tmp_path / "every", overfitting, 4, deciding(), keep=100)
    best, reference = at_step(tmp_path / "kept", 24), at_step(tmp_path / "every", 24)
    assert best in listed(tmp_path / "kept")
    kept, written = tf.train.load_checkpoint(best), tf.train.load_checkpoint(reference)
    variables = set(kept.get_variable_to_shape_map()) - {TRAINING_STATE, OBJECT_GRAPH}
    assert variables == set(written.get_variable_to_shape_map()) - {TRAINING_STATE,
                                                                      OBJECT_GRAPH}
    for name in variables:
        assert np.array_equal(kept.get_tensor(name), written.get_tensor(name)), name
    state, expected = training_state(best), training_state(reference)
    assert state.pop("best")["step"] == 24 and "best" not in expected
    assert state == expected
    decided = {entry["type"].rsplit(".", 1)[-1]: entry["state"]
               for entry in state["fit"]["callbacks"]}
    # Both saw epoch 3's val_loss (their best so far), not only epoch 2's.
    for name in ("EarlyStopping", "ReduceLROnPlateau"):
        assert decided[name]["best"] == history.history["val_loss"][2], name


@pytest.mark.parametrize("mode", ["auto", "max"])
def test_max_mode_keeps_the_highest_accuracy(tmp_path, backends, mode):
    record = EpochWeights()
    _, history, records = fit(backends, tmp_path, drifting_classifier, 5, [record], keep=1,
                              keep_best="val_accuracy", keep_best_mode=mode,
                              save_model_secs=0)
    accuracy = history.history["val_accuracy"]
    k = int(np.argmax(accuracy))   # the first of the highest: a tie is no improvement
    assert k == 1 and max(accuracy[k + 1:]) < accuracy[k]
    best, newest = at_step(tmp_path, (k + 1) * BATCHES), at_step(tmp_path, 5 * BATCHES)
    assert listed(tmp_path) == [best, newest] and on_disk(tmp_path) == [best, newest]
    assert_same(plain_weights(best, drifting_classifier), record.weights[k])
    assert records.of(events.BestKept)[-1].mode == "max"


class StopInEpoch(keras.callbacks.Callback):
    """Asks the run to stop at batch ``batch`` (0-based) of epoch ``epoch``."""

    def __init__(self, sv, epoch, batch):
        super().__init__()
        self.sv, self.epoch, self.batch, self.at = sv, epoch, batch, None

    def on_epoch_begin(self, epoch, logs=None):
        self.at = epoch

    def on_train_batch_end(self, batch, logs=None):
        if (self.at, batch) == (self.epoch, self.batch):
            self.sv.request_stop()


@pytest.mark.parametrize("metric", ["val_loss", "loss"])
def test_an_epoch_cut_by_a_stop_is_no_best(tmp_path, backends, metric):
    """Both losses improve at every epoch here until epoch 3: a stop in the middle of epoch 2
    ends fit with that half epoch's training values (the mean loss of its batches, better than
    epoch 1's; fit's on_train_end gets them), and skips its validation. They are not an
    epoch's: the best stays epoch 1's end."""
    model, arguments = overfitting()
    sv = backends(tmp_path, keep=1, keep_best=metric, save_model_secs=0)
    records = Recorder(sv)
    record = EpochWeights()
    with sv.session():
        model.fit(**arguments, epochs=6, verbose=0,
                  callbacks=[sv.callback, StopInEpoch(sv, 1, 3), record])
    sv.close()
    assert [b.step for b in records.of(events.BestKept)] == [8]
    best, final = at_step(tmp_path, 8), at_step(tmp_path, 12)
    assert listed(tmp_path) == [best, final]
    assert recorded_best(final)["step"] == 8
    assert_same(plain_weights(best, overfitting), record.weights[0])


def test_a_resume_keeps_the_best_and_goes_on_from_its_value(tmp_path, backends):
    """A crash after the best epoch, then a resume on a fresh model: the restored state names
    the best, retention keeps it, and the resumed epochs (worse) do not replace it."""
    class Crash(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            if epoch == 3:
                raise RuntimeError("crash after epoch 4")

    with pytest.raises(RuntimeError, match="crash after epoch 4"):
        fit(backends, tmp_path, overfitting, 6, [Crash()], keep=1, keep_best="val_loss")
    best = at_step(tmp_path, 24)
    assert best in listed(tmp_path)
    _, _, records = fit(backends, tmp_path, overfitting, 6, keep=1, keep_best="val_loss")
    kept = records.of(events.BestKept)
    assert [(b.step, b.path) for b in kept] == [(24, best)]   # said at the start, not again
    assert listed(tmp_path) == [best, at_step(tmp_path, 48)]


def test_a_resume_says_what_becomes_of_the_best_it_finds(tmp_path, backends, caplog):
    """A resume on a logdir that kept a best: without --keep-best it says that retention will
    delete it (while it is there), with another metric that it is no longer kept, and once it
    is gone that the best is kept anew."""
    def session(logdir, reports=(), **options):
        w = tf.Variable(0.0)
        sv = backends(logdir, keep=1, save_model_secs=0, **options)
        caplog.clear()
        with sv.session():
            sv.track(w=w)
            sv.step()
            for value in reports:
                sv.report(**value)
            sv.step()
        sv.close()
        return [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]

    caplog.set_level("WARNING", logger="jupyter_supervisor")
    best = "val_loss 0.5 (min) at step 1"
    session(tmp_path / "a", [{"val_loss": 0.5}], keep_best="val_loss")
    assert session(tmp_path / "a", keep_best="val_accuracy") == [
        "The checkpoints of this logdir kept the best val_loss (min); this run keeps the best "
        "val_accuracy (max) from now on, and retention no longer keeps the checkpoint of step 1 "
        "for it."]
    assert listed(tmp_path / "a") == [at_step(tmp_path / "a", 4)]

    session(tmp_path / "b", [{"val_loss": 0.5}], keep_best="val_loss")
    assert listed(tmp_path / "b") == [at_step(tmp_path / "b", 1), at_step(tmp_path / "b", 2)]
    assert session(tmp_path / "b") == [
        f"The checkpoints of this logdir kept the best {best}; this run has no --keep-best, so "
        "retention deletes that checkpoint (step 1) as any other, once it is not among the "
        "newest 1. Add --keep-best val_loss to keep it."]
    assert listed(tmp_path / "b") == [at_step(tmp_path / "b", 4)]
    assert session(tmp_path / "b") == []          # it is gone: nothing left to say about it
    assert session(tmp_path / "b", keep_best="val_loss") == [
        f"The best checkpoint recorded ({best}) is no longer in the logdir; the best val_loss "
        "is kept anew from this session's values."]


# -- a crash while a new best is written -------------------------------------------------------

@pytest.mark.slow
def test_a_kill_while_a_new_best_is_written_leaves_the_previous_best(tmp_path, backends):
    """The process dies after the files of the new best (epoch 3's) are written and before the
    state file lists them: the previous best (epoch 2's) is listed, intact and read by plain
    TensorFlow; the next session sweeps the unlisted files, resumes from it and keeps the
    best anew."""
    logdir = str(tmp_path / "run")
    line, stderr = killed_where_it_paused(
        [sys.executable, os.path.join(HERE, "eager_scripts", "kill_writing_best.py"), logdir,
         "24"], child_env())
    previous, cut = at_step(logdir, 16), at_step(logdir, 24)
    assert line.split() == ["PAUSED", cut], (line, stderr)
    assert listed(logdir) == [previous] and on_disk(logdir) == [previous, cut]
    assert recorded_best(previous)["step"] == 16
    reference = EpochWeights()
    fit(backends, tmp_path / "reference", overfitting, 2, [reference], save_model_secs=0)
    assert_same(plain_weights(previous, overfitting), reference.weights[1])

    _, _, records = fit(backends, logdir, overfitting, 6, keep=1, keep_best="val_loss")
    assert [b.step for b in records.of(events.BestKept)] == [16, 24]
    assert listed(logdir) == [cut, at_step(logdir, 48)] == on_disk(logdir)


# -- custom loops ------------------------------------------------------------------------------

def test_a_loop_reports_its_own_metric(tmp_path, backends):
    """sv.report(val_loss=...) between steps: a better value makes a checkpoint of that state
    at once, kept as the best; a worse one makes none."""
    w = tf.Variable(0.0)
    sv = backends(tmp_path, keep=1, keep_best="val_loss", save_model_secs=0)
    records = Recorder(sv)
    reported = {}
    with sv.session():
        sv.track(w=w)
        for step in range(1, 21):
            w.assign_add(0.1)                  # the validation's optimum is w = 1.2
            sv.step(loss=(w - 2.0) ** 2)
            if step % 3 == 0:
                reported[step] = sv.report(val_loss=(w - 1.2) ** 2)
    sv.close()
    assert [step for step, path in reported.items() if path] == [3, 6, 9, 12]
    assert reported[12] == at_step(tmp_path, 12)
    assert listed(tmp_path) == [at_step(tmp_path, 12), at_step(tmp_path, 20)]
    restored = tf.Variable(0.0)
    tf.train.Checkpoint(w=restored).read(at_step(tmp_path, 12)).expect_partial()
    assert float(restored.numpy()) == pytest.approx(1.2)
    reports = [r.step for r in records.of(events.SummaryWritten) if "val_loss" in r.scalars]
    assert reports == [3, 6, 9, 12, 15, 18]   # every report reached the event file


def test_step_values_count_at_the_checkpoints_a_loop_writes(tmp_path, backends):
    """sv.step(loss=...): the kept metric's value at each checkpoint the loop writes (not at
    every step) decides; the best is the written checkpoint with the lowest loss."""
    w = tf.Variable(0.0)
    sv = backends(tmp_path, keep=1, keep_best="loss", save_model_secs=0)
    with sv.session():
        sv.track(w=w)
        for step in range(1, 21):
            w.assign_add(0.1)
            sv.step(loss=abs(float(w.numpy()) - 1.1))   # lowest at step 11: no save there
            if step % 4 == 0:
                sv.save_now()
    sv.close()
    # Saved: 4, 8, 12, 16, 20 (the final one is 20 too); |w - 1.1| is lowest at 12.
    assert listed(tmp_path) == [at_step(tmp_path, 12), at_step(tmp_path, 20)]
    assert recorded_best(at_step(tmp_path, 20))["step"] == 12


def test_a_best_refused_as_not_finite_is_no_best(tmp_path, backends):
    """A better value reported on weights that are not finite: its checkpoint is refused, the
    run rolls back (--on-nan rollback) and the best stays the one on disk."""
    w = tf.Variable(1.0)
    sv = backends(tmp_path, keep=1, keep_best="val_loss", save_model_secs=0,
                  on_nan="rollback")
    records = Recorder(sv)
    with sv.session():
        sv.track(w=w)
        sv.step()
        assert sv.report(val_loss=0.5) == at_step(tmp_path, 1)
        sv.step()
        w.assign(float("nan"))
        sv.report(val_loss=0.1)      # refused: the writer's check finds w not finite
        assert sv.save_now() is None  # the save after it takes that verdict: a rollback
        assert sv.read_step() == 1 and float(w.numpy()) == 1.0
        sv.step()
        assert sv.report(val_loss=0.3) == at_step(tmp_path, 2)
    sv.close()
    assert [(b.step, b.value) for b in records.of(events.BestKept)] == [(1, 0.5), (2, 0.3)]
    assert listed(tmp_path) == [at_step(tmp_path, 2)]


def test_report_is_refused_where_it_cannot_keep_its_promise(tmp_path, backends):
    model, arguments = overfitting()
    sv = backends(tmp_path, keep_best="val_loss")

    class ReportInFit(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            sv.report(val_loss=1.0)

    with pytest.raises(RuntimeError, match="sv.report\\(\\) is for custom loops"):
        with sv.session():
            model.fit(**arguments, epochs=1, verbose=0, callbacks=[sv.callback, ReportInFit()])
    sv2 = backends(tmp_path / "loop")
    with pytest.raises(RuntimeError, match="call sv.track"):
        with sv2.session():
            sv2.report(val_loss=1.0)
    sv3 = backends(tmp_path / "empty")
    with pytest.raises(ValueError, match="at least one metric"):
        with sv3.session():
            sv3.track(w=tf.Variable(0.0))
            sv3.report()


def test_a_metric_that_never_came_is_said(tmp_path, backends):
    model, arguments = overfitting()
    del arguments["validation_data"]
    sv = backends(tmp_path, keep_best="val_loss")
    with sv.session():
        model.fit(**arguments, epochs=1, verbose=0, callbacks=[sv.callback])
    assert sv.notes() == [
        "--keep-best val_loss: no value of val_loss came in this session (the metrics were: "
        "loss), so no checkpoint was kept as its best. It comes from fit's epoch-end logs "
        "(validation_data gives val_loss...), from sv.report(...) in a loop, or from "
        "sv.step(...)'s scalars."]


def test_a_metric_missing_from_the_first_epoch_end_is_said_at_once(tmp_path, backends, caplog):
    """Keras 3 logs val_accuracy: --keep-best val_acc is said at the first epoch end, once,
    with the closest name, not only when the session ends."""
    caplog.set_level("WARNING", logger="jupyter_supervisor")
    model, arguments = overfitting()
    model.compile(model.optimizer, "mse", metrics=["accuracy"])
    said = []

    class Watch(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            said.append([r.getMessage() for r in caplog.records if "--keep-best" in r.getMessage()])

    sv = backends(tmp_path, keep_best="val_acc", keep_best_mode="max")
    with sv.session():
        model.fit(**arguments, epochs=3, verbose=0, callbacks=[sv.callback, Watch()])
    expected = ("--keep-best val_acc: the metrics that came (accuracy, loss, val_accuracy, "
                "val_loss) have no val_acc: did you mean val_accuracy?; no checkpoint is kept "
                "as its best until a value of val_acc comes.")
    # Said at the first epoch's end (the boundary after every callback's on_epoch_end),
    # before the second epoch begins, and only once.
    assert said == [[], [expected], [expected]]
    assert sv.notes()[-1].startswith("--keep-best val_acc: no value of val_acc came")


# -- the option ---------------------------------------------------------------------------------

@pytest.mark.parametrize("options, message", [
    (dict(keep_best="my_metric"), "Received: keep_best_mode='auto'. Expected 'min' or 'max': "
                                  "the name 'my_metric' does not say"),
    (dict(keep_best_mode="max"), "Expected 'auto' without a metric to keep"),
    (dict(keep_best="val_loss", logdir=None), "Expected a logdir too"),
    (dict(keep_best=" val_loss"), "Expected the name of a metric"),
    (dict(keep_best="val_loss", keep_best_mode="best"), "Expected 'auto' or 'min' or 'max'"),
])
def test_bad_options_are_refused_early(options, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        RunConfig(**{"logdir": "runs/x", **options})


# What the Keras metrics that need arguments are built with.
ARGUMENTS = {"num_classes": 2, "target_class_ids": [0], "recall": 0.5, "precision": 0.5,
             "specificity": 0.5, "sensitivity": 0.5}


def test_auto_mode_decides_as_keras_metrics_say():
    """The name rule (names.direction_of) agrees with the direction Keras gives each of its
    metrics (a metric's ``_direction``), under its default name and with "val_"."""
    found = 0
    for name in dir(keras.metrics):
        cls = getattr(keras.metrics, name)
        if not (isinstance(cls, type) and issubclass(cls, keras.metrics.Metric)):
            continue
        required = [p.name for p in inspect.signature(cls).parameters.values()
                    if p.default is inspect.Parameter.empty and p.kind == p.POSITIONAL_OR_KEYWORD]
        if not set(required) <= set(ARGUMENTS):
            continue   # Metric, MeanMetricWrapper: no metric of their own
        metric = cls(**{name: ARGUMENTS[name] for name in required})
        direction = getattr(metric, "_direction", None)
        if direction is None:
            continue
        found += 1
        expected = names.MAX if direction == "up" else names.MIN
        assert names.direction_of(metric.name) == expected, metric.name
        assert names.direction_of("val_" + metric.name) == expected, metric.name
    assert found > 20
    assert names.direction_of("val_loss") == names.MIN
    assert names.direction_of("reward") == names.MAX
    assert names.direction_of("my_metric") is None


def test_graph_runs_refuse_keep_best():
    graph = tf.Graph()
    with graph.as_default():
        tf.compat.v1.train.get_or_create_global_step()
    with pytest.raises(ValueError, match="Expected an eager run"):
        GraphBackend(RunConfig(logdir="runs/g", keep_best="val_loss"), graph)


def test_the_magic_names_the_options(ip):
    with pytest.raises(UsageError, match=re.escape(
            "Invalid value for argument `--keep-best-mode`. Received: --keep-best-mode='auto'. "
            "Expected 'min' or 'max': the name 'my_metric' does not say")):
        ip.run_cell_magic("supervise", "--logdir runs/x --keep-best my_metric", "pass")
    with pytest.raises(UsageError, match="invalid choice: 'best'"):
        ip.run_cell_magic("supervise", "--keep-best-mode best", "pass")


# -- a real kernel: SIGKILL, a fresh kernel, get_run().restore_best() -------------------------

FIT = """
import json, keras, numpy as np, eager_models
model, arguments = eager_models.overfitting()

class Epochs(keras.callbacks.Callback):
    # Each epoch's end weights into epochs.json; blocks at the end of epoch `hold` (1-based)
    # until the kernel dies.
    def __init__(self, hold=None):
        super().__init__()
        self.hold = hold
    def on_epoch_end(self, epoch, logs=None):
        with open("epochs.json", "a") as f:
            f.write(json.dumps([epoch, float(self.model.weights[0].numpy().ravel()[0])]) + "\\n")
        if epoch + 1 == self.hold:
            threading.Event().wait()
"""
CELL = ("%%supervise --logdir {logdir} --keep 1 --keep-best val_loss --save-model-secs 1e-9 "
        "{wait}\nmodel.fit(**arguments, epochs=6, verbose=0, callbacks=[sv.callback, {epochs}])")


@pytest.mark.kernel
def test_a_killed_kernel_keeps_its_best_and_hands_it_over(tmp_path):
    """The kernel dies (SIGKILL) at the end of epoch 5, after the best (epoch 3); a fresh
    kernel re-runs the cell: it resumes, the logdir keeps the newest and the best, %supervise
    names the best, and restore_best() puts epoch 3's weights into the model."""
    kernel = Kernel(tmp_path)
    try:
        kernel.ok(FIT)
        kernel.ok(CELL.format(logdir="runs/fit", wait="", epochs="Epochs(hold=5)"))
        logdir = tmp_path / "runs" / "fit"
        wait_for(lambda: (tmp_path / "epochs.json").exists()
                 and len((tmp_path / "epochs.json").read_text().splitlines()) == 5
                 and tf.train.latest_checkpoint(str(logdir)) == at_step(logdir, 40),
                 timeout=120, what="the end of epoch 5, and its checkpoint")
        kernel.kill()
        best = at_step(logdir, 24)
        assert best in listed(logdir) and recorded_best(listed(logdir)[-1])["step"] == 24
        kernel.ok(FIT)
        kernel.ok(CELL.format(logdir="runs/fit", wait="--wait", epochs="Epochs()"))
        assert listed(logdir) == [best, at_step(logdir, 48)] == on_disk(logdir)
        epochs = [json.loads(line) for line in (tmp_path / "epochs.json").read_text().splitlines()]
        weight_at_3 = [w for epoch, w in epochs if epoch == 2][0]
        # Step 40's checkpoint was written before epoch 5's end ran (at its validation): the
        # resume runs that end (validation, callbacks), then trains epoch 6.
        assert [e for e, _ in epochs] == [0, 1, 2, 3, 4, 4, 5]
        assert epochs[4][1] == epochs[5][1]
        table = kernel.ok("%supervise").stream()
        assert "fit keeps the best val_loss " in table
        assert table.rstrip().endswith("at step 24, the end of epoch 3: runs/fit/model.ckpt-24")
        assert kernel.value("get_run('fit').restore_best()") == "runs/fit/model.ckpt-24"
        assert kernel.value("float(model.weights[0].numpy().ravel()[0])") == weight_at_3
        for path, weight in ((best, weight_at_3), (at_step(logdir, 48), epochs[-1][1])):
            assert_same(plain_weights(path, overfitting), [np.array([[weight]], np.float32)])
    finally:
        kernel.shutdown()


# -- restore_best ------------------------------------------------------------------------------

LOOP = """sv.track(w=w)
while not sv.should_stop():
    w.assign_add(1.0)
    sv.step()
    sv.report(val_loss=abs(float(w.numpy()) - 3.0))
looped.set()
go.wait(60)
"""


@pytest.mark.slow
def test_restore_best_loads_what_the_run_tracked_or_what_it_is_given(ip, tmp_path, wait_for):
    import gc  # pylint: disable=import-outside-toplevel
    import threading  # pylint: disable=import-outside-toplevel
    from jupyter_supervisor.notebook.run import RunStateError, get_run  # pylint: disable=C0415
    go, looped = threading.Event(), threading.Event()
    ip.user_ns.update(w=tf.Variable(0.0), go=go, looped=looped)
    ip.run_cell_magic("supervise", f"--logdir {tmp_path / 'kept'} --keep-best val_loss "
                                   "--max-steps 6", LOOP)
    run = get_run("kept")
    wait_for(looped.is_set, timeout=60, what="the loop's end at step 6, the body still running")
    with pytest.raises(RunStateError, match="Run 'kept' is running: it would train on over "
                                            "what its best checkpoint restores. Stop it first"):
        run.restore_best()
    go.set()
    run.wait(60)
    assert (run.best_checkpoint.step, run.best_checkpoint.value) == (3, 0.0)
    assert float(ip.user_ns["w"].numpy()) == 6.0
    assert run.restore_best() == str(tmp_path / "kept" / "model.ckpt-3")
    assert float(ip.user_ns["w"].numpy()) == 3.0
    other = tf.Variable(0.0)
    run.restore_best(w=other)
    assert float(other.numpy()) == 3.0
    del ip.user_ns["w"]
    gc.collect()
    with pytest.raises(ValueError, match=re.escape("what this session tracked (w) no longer "
                                                   "exists")):
        run.restore_best()

    go.clear()
    ip.user_ns.update(w=tf.Variable(0.0), looped=threading.Event())
    ip.run_cell_magic("supervise", f"--logdir {tmp_path / 'plain'} --max-steps 2", LOOP)
    go.set()
    get_run("plain").wait(60)
    with pytest.raises(RunStateError, match="Run 'plain' has no best checkpoint: it does not "
                                            "keep one: start it with --keep-best METRIC"):
        get_run("plain").restore_best()
