"""What re-running supervised cells traces: the snapshot's write and the finiteness check are
traced once per model structure in a kernel (``snapshot._TracedPool``, ``finite._EagerChecks``),
never per supervisor, so TensorFlow's retracing warning never reaches a run's output; the
reuse keeps no model alive; and a run whose only checkpoint is its final one traces nothing.
The cells here save at every step (``EVERY_STEP``) unless they say otherwise."""
import gc
import json
import weakref

import numpy as np
import pytest
import tensorflow as tf
import keras

from jupyter_supervisor import finite
from jupyter_supervisor.config import RunConfig
from jupyter_supervisor.eager import EagerSupervisor, snapshot

from helpers import Kernel

pytestmark = pytest.mark.internals

CELLS = 10
EVERY_STEP = 1e-9  # save_model_secs that makes every step boundary save

MODELS = r'''
import numpy as np, keras
from jupyter_supervisor.eager import snapshot
from jupyter_supervisor import finite
def mlp(*widths):
    model = keras.Sequential([keras.Input((4,))] + [keras.layers.Dense(w) for w in widths])
    model.compile(keras.optimizers.Adam(1e-3), "mse")
    return model
models = [mlp(8, 1), mlp(16, 8, 1)]
x = np.random.default_rng(0).random((64, 4), dtype=np.float32)
y = x.sum(axis=1, keepdims=True)
'''


@pytest.fixture
def kernel(tmp_path):
    """A kernel of this test's own, not the module's (conftest.py): what these tests count is
    the process's own (the traced pool, Keras' model names, TensorFlow's count of the traces of
    one function's code, whose warning an earlier test's fits would bring nearer)."""
    k = Kernel(tmp_path)
    yield k
    k.shutdown()


@pytest.mark.kernel
def test_ten_cells_in_a_kernel_trace_the_copy_once_per_model_and_never_warn(kernel):
    """Ten %%supervise cells, alternating two models (as a notebook re-runs its cells), each
    with a fresh logdir (so each saves a final checkpoint and takes its check's verdict): two
    traced copy functions, each traced once, and one trace of each check; no message the kernel sent
    mentions retracing or any warning."""
    kernel.ok(MODELS)
    start = len(kernel.iopub)
    for cell in range(CELLS):
        kernel.ok(f"%%supervise --logdir runs/cell{cell} --save-model-secs {EVERY_STEP} "
                  "--wait\n"
                  f"models[{cell % 2}].fit(x, y, batch_size=16, epochs=1, verbose=0, "
                  "callbacks=[sv.callback])")
    assert kernel.value("[len(os.listdir(f'runs/cell{i}')) > 0 for i in range(10)]") \
        == [True] * CELLS
    writes = kernel.value("sorted(t.traces for t in snapshot._POOL._free.values())")
    assert writes == [1, 1]
    checks = kernel.value("sorted(c.traces for c in (e[1] for e in "
                          "finite._EAGER_CHECKS._checks.values()))")
    assert checks and max(checks) <= 1
    sent = kernel.iopub[start:]
    text = json.dumps([m["content"] for m in sent]).lower()  # streams, panels, run outputs
    assert "retracing" not in text
    assert "warning:tensorflow" not in text
    assert [m for m in sent if m["msg_type"] == "stream"
            and m["content"]["name"] == "stderr"] == []


@pytest.mark.kernel
def test_cells_that_build_their_model_again_trace_the_copy_once_and_free_it(kernel):
    """Five times: a cell builds the model (in the kernel's main thread, where Keras numbers
    each new model: sequential_2, sequential_3, ...), and a %%supervise cell fits it. The
    model before is freed once the name is bound again (an ended run keeps no model alive),
    and the new one takes the copy function traced for it: traced once. Keras traces
    a new train function for each new model, and TensorFlow may warn of that; no warning
    names a function of ours."""
    kernel.ok(MODELS + "import gc, weakref\nbuilt = []\n")
    start = len(kernel.iopub)
    entry_of_model = ("[t for t in snapshot._POOL._free.values() "
                      "if any(r() is model for r in t.owners)]")
    for cell in range(5):
        kernel.ok("model = mlp(12, 1)\nbuilt.append(weakref.ref(model))")
        kernel.ok(f"%%supervise --logdir runs/built{cell} --save-model-secs {EVERY_STEP} "
                  "--wait\n"
                  "model.fit(x, y, batch_size=16, epochs=1, verbose=0, callbacks=[sv.callback])")
        if cell == 0:
            kernel.ok(f"first, = {entry_of_model}")
    assert kernel.value("model.name") == "sequential_6"  # each model has names of its own
    assert kernel.value(f"{entry_of_model} == [first] and first.traces") == 1
    kernel.ok("gc.collect()")
    assert kernel.value("[m() is not None for m in built]") == [False] * 4 + [True]
    text = json.dumps([m["content"] for m in kernel.iopub[start:]])
    warned = [line for line in text.split("\\n") if "retracing" in line]
    assert all("TensorFlowTrainer" in line for line in warned), warned
    for ours in ("VariableCheck", "Snapshot", "guard", "jupyter_supervisor"):
        assert not any(ours in line for line in warned), warned


def _cell(model, x, y, logdir, save_model_secs=EVERY_STEP):
    sv = EagerSupervisor(RunConfig(logdir=str(logdir), save_model_secs=save_model_secs))
    try:
        with sv.session():
            model.fit(x, y, batch_size=16, epochs=1, verbose=0, callbacks=[sv.callback])
    finally:
        sv.close()


def _mlp(*widths):
    model = keras.Sequential([keras.Input((4,))] + [keras.layers.Dense(w) for w in widths])
    model.compile(keras.optimizers.Adam(1e-3), "mse")
    return model


def _entry_of(model):
    """The pool's entry given back for ``model``."""
    found = [t for t in snapshot._POOL._free.values()  # pylint: disable=protected-access
             if any(ref() is model for ref in t.owners)]
    assert len(found) == 1
    return found[0]


def _refused(model, layer, value, logdir, save_now):
    """Fills the kernel of ``model.layers[layer]`` with ``value`` (NaN, an infinity) and runs a
    session of one step (and, with ``save_now``, a save in it): returns the kernel and the
    NonFiniteError that refused the save."""
    kernel = model.layers[layer].kernel
    kernel.assign(tf.fill(kernel.shape, value))
    sv = EagerSupervisor(RunConfig(logdir=str(logdir)))
    try:
        with pytest.raises(finite.NonFiniteError) as raised:
            with sv.session():
                sv.track(model=model, optimizer=model.optimizer)
                sv.step()
                if save_now:
                    sv.save_now()
    finally:
        sv.close()
    return kernel, raised.value


def test_the_reuse_keeps_no_model_alive(tmp_path):
    """Once the model is freed, its traced copy function is kept for a model of the same
    structure (the cell builds it again) until a run of another structure, which frees it;
    nothing of it keeps the model alive. Its checks are freed with it."""
    x = np.ones((32, 4), np.float32)
    model = _mlp(3, 1)
    for run in range(2):
        _cell(model, x, x[:, :1], tmp_path / f"run{run}")
    assert _entry_of(model).traces == 1
    alive, entry = weakref.ref(model), weakref.ref(_entry_of(model))
    del model
    gc.collect()
    assert alive() is None
    assert entry() is not None and entry().orphaned
    _cell(_mlp(5, 2, 1), x, x[:, :1], tmp_path / "other")
    gc.collect()
    assert entry() is None


def test_a_model_built_again_reuses_the_write_and_names_its_own_variables(tmp_path):
    """A cell that builds its model and fits it: each run's model is new (Keras names it
    sequential_N), the one before freed. It takes the write traced for that one (one trace in
    all), and a refused save names the new model's variables, not the copies' first names."""
    x = np.ones((32, 4), np.float32)
    first = _mlp(6, 1)
    _cell(first, x, x[:, :1], tmp_path / "run0")
    entry = weakref.ref(_entry_of(first))
    del first
    gc.collect()
    for run in range(1, 3):
        model = _mlp(6, 1)
        _cell(model, x, x[:, :1], tmp_path / f"run{run}")
        assert _entry_of(model) is entry() and entry().traces == 1
    kernel, error = _refused(model, 0, np.nan, tmp_path / "diverged", save_now=True)
    assert f"variable {kernel.path!r} holds NaN" in str(error)
    assert entry().traces == 1


def test_two_runs_of_one_structure_at_once_do_not_share_copies(tmp_path):
    """A snapshot takes its copies out of the pool: a second writer of the same objects while
    the first still holds them makes its own, so neither writes the other's state."""
    with tf.init_scope():
        variable = tf.Variable([1.0, 2.0], name="shared")
    first = snapshot.Snapshot({"v": variable})
    second = snapshot.Snapshot({"v": variable})
    assert first.copy() and second.copy()
    assert first.copies_of([variable])[0] is not second.copies_of([variable])[0]
    first.release()
    third = snapshot.Snapshot({"v": variable})
    assert third.copy()
    assert third.copies_of([variable])[0] is not second.copies_of([variable])[0]
    assert finite.VariableCheck.eager([variable]) is finite.VariableCheck.eager([variable])


def test_a_check_is_traced_once_and_keeps_no_variable_alive():
    """VariableCheck.eager gives the same check for the same variables, traced at its first
    run only; once they are freed, so is the check (its function holds weak references)."""
    variable = tf.Variable([1.0, float("nan")], name="w")
    check = finite.VariableCheck.eager([variable])
    assert check.run() == ["w"]
    assert finite.VariableCheck.eager([variable]).run() == ["w"]
    assert check.traces == 1
    alive = weakref.ref(variable)
    del variable, check
    gc.collect()
    assert alive() is None
    checks = finite._EAGER_CHECKS._checks  # pylint: disable=protected-access
    assert all(all(ref() is not None for ref in refs) for refs, _ in checks.values())


def test_a_run_whose_only_checkpoint_is_the_final_one_traces_nothing(tmp_path):
    """A short cell (no periodic save before its end): the final checkpoint is written from
    the variables themselves, checked before op by op; nothing is traced, and the checkpoint
    restores with plain TensorFlow. A model that is not finite gets no final checkpoint: the
    check names its variable."""
    x = np.ones((32, 4), np.float32)
    model = _mlp(7, 3, 1)  # a structure no other test saves
    before = len(finite._EAGER_CHECKS._checks)  # pylint: disable=protected-access
    _cell(model, x, x[:, :1], tmp_path / "short", save_model_secs=60)
    assert not [t for t in snapshot._POOL._free.values()  # pylint: disable=protected-access
                if any(ref() is model for ref in t.owners)]
    assert len(finite._EAGER_CHECKS._checks) == before  # pylint: disable=protected-access
    fresh = _mlp(7, 3, 1)
    fresh.optimizer.build(fresh.trainable_variables)
    tf.train.Checkpoint(model=fresh, optimizer=fresh.optimizer).read(
        tf.train.latest_checkpoint(str(tmp_path / "short"))).expect_partial()
    for a, b in zip(model.weights, fresh.weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy())

    kernel, error = _refused(model, 1, np.inf, tmp_path / "diverged", save_now=False)
    assert f"variable {kernel.path!r} holds NaN" in str(error)
    assert "The final checkpoint was not written" in str(error)
    assert not tf.io.gfile.glob(str(tmp_path / "diverged" / "model.ckpt*"))
