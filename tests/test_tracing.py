"""What re-running supervised cells traces: the snapshot's write and the finiteness check are
traced once per model structure in a kernel (``saving._TracedPool``, ``finite._EagerChecks``),
never per supervisor, so TensorFlow's retracing warning never reaches a run's output; and the
reuse keeps no model alive."""
import gc
import json
import weakref

import numpy as np
import pytest
import tensorflow as tf
import keras

from jupyter_supervisor import finite
from jupyter_supervisor.backend import RunConfig
from jupyter_supervisor.eager import EagerSupervisor, saving

from helpers import Kernel

CELLS = 10

MODELS = r'''
import numpy as np, keras
from jupyter_supervisor.eager import saving
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
    k = Kernel(tmp_path)
    yield k
    k.shutdown()


def test_ten_cells_in_a_kernel_trace_the_write_once_per_model_and_never_warn(kernel):
    """Ten %%supervise cells, alternating two models (as a notebook re-runs its cells), each
    with a fresh logdir (so each saves a final checkpoint and takes its check's verdict): two
    traced writes, each traced once, and one trace of each check; no message the kernel sent
    mentions retracing or any warning."""
    kernel.ok(MODELS)
    start = len(kernel.iopub)
    for cell in range(CELLS):
        kernel.ok(f"%%supervise --logdir runs/cell{cell} --wait\n"
                  f"models[{cell % 2}].fit(x, y, batch_size=16, epochs=1, verbose=0, "
                  "callbacks=[sv.callback])")
    assert kernel.value("[len(os.listdir(f'runs/cell{i}')) > 0 for i in range(10)]") \
        == [True] * CELLS
    writes = kernel.value("sorted(t.traces for t in saving._POOL._free.values())")
    assert writes == [1, 1]
    checks = kernel.value("sorted(c.traces for c in (e[1] for e in "
                          "finite._EAGER_CHECKS._checks.values()))")
    assert checks and max(checks) == 1
    sent = kernel.iopub[start:]
    text = json.dumps([m["content"] for m in sent]).lower()  # streams, panels, run outputs
    assert "retracing" not in text
    assert "warning:tensorflow" not in text
    assert [m for m in sent if m["msg_type"] == "stream"
            and m["content"]["name"] == "stderr"] == []


def _cell(model, x, y, logdir):
    sv = EagerSupervisor(RunConfig(logdir=str(logdir)))
    try:
        with sv.session():
            model.fit(x, y, batch_size=16, epochs=1, verbose=0, callbacks=[sv.callback])
    finally:
        sv.close()


def test_the_reuse_keeps_no_model_alive(tmp_path):
    """Once the model is freed, its copies and traced writes are dropped, and so are its
    checks: the pool holds weak references to what it serves."""
    x = np.ones((32, 4), np.float32)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3), keras.layers.Dense(1)])
    model.compile(keras.optimizers.Adam(1e-3), "mse")
    for run in range(2):
        _cell(model, x, x[:, :1], tmp_path / f"run{run}")
    traced = [t for t in saving._POOL._free.values()  # pylint: disable=protected-access
              if any(ref() is model for ref in t.owners)]
    assert [t.traces for t in traced] == [1]
    alive, entry = weakref.ref(model), weakref.ref(traced[0])
    del model, traced
    gc.collect()
    assert alive() is None
    gc.collect()  # the entry is freed by the model's weak reference's callback, then collected
    assert entry() is None


def test_two_runs_of_one_structure_at_once_do_not_share_copies(tmp_path):
    """A snapshot takes its copies out of the pool: a second writer of the same objects while
    the first still holds them makes its own, so neither writes the other's state."""
    with tf.init_scope():
        variable = tf.Variable([1.0, 2.0], name="shared")
    first = saving.Snapshot({"v": variable})
    second = saving.Snapshot({"v": variable})
    assert first.copy() and second.copy()
    assert first.copies_of([variable])[0] is not second.copies_of([variable])[0]
    first.release()
    third = saving.Snapshot({"v": variable})
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
