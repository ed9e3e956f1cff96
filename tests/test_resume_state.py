"""The whole training state resumes, in real kernels: a run crashed (SIGKILL) inside an epoch or
inside its validation, or stopped inside an epoch, then re-run in a fresh kernel, ends bit for
bit where an uninterrupted run of the same seeds ends: weights, every optimizer variable (the
learning rate included) and the callbacks' decisions (the epoch EarlyStopping stops at, the
rates ReduceLROnPlateau sets, the files ModelCheckpoint(save_best_only=True) writes, a user's
callback with get_state/set_state), with EMA, a subclassed model built at its first step and a
custom loop with a learning-rate schedule. (A SIGTERM during a validation that outlasts the
kernel's stop deadline: test_preemption.py.)

To keep kernels few, every crashed run starts in one kernel (each held at its crash point in its
own training thread, its model built in the main thread beforehand: Keras' seeding is global),
one SIGKILL ends them all, and the fresh kernel resumes each, then runs each uninterrupted.
Every run saves at every step (``--save-model-secs 1e-6``): where a crash lands is known by
steps, never by time.
"""
import pytest

from helpers import Kernel, wait_for

pytestmark = [pytest.mark.kernel, pytest.mark.internals]

DEADLINE = 90.0   # seconds; generous for a loaded 2-core machine, never reached when passing

SETUP = r'''
import keras, numpy as np
import jupyter_supervisor.notebook.run
tf.config.experimental.enable_op_determinism()
rng = np.random.default_rng(0)
x = rng.random((64, 4), dtype=np.float32)
y = (x.sum(axis=1, keepdims=True) + rng.normal(size=(64, 1))).astype("float32")
val = (x[:16], y[:16] + 0.5)          # 8 training batches an epoch, 4 validation batches of 4

def dense(lr=0.05, ema=False, metrics=()):
    keras.utils.set_random_seed(0)
    m = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="relu"),
                          keras.layers.Dropout(0.2), keras.layers.Dense(1)])
    m.compile(keras.optimizers.Adam(lr, use_ema=ema, ema_momentum=0.9), "mse",
              metrics=list(metrics))
    return m

class Net(keras.Model):
    """Subclassed, with its own train_step: its variables appear at its first step."""
    def __init__(self):
        super().__init__(name="net")
        self.hidden = keras.layers.Dense(8, activation="relu")
        self.out = keras.layers.Dense(1)
        self.tracker = keras.metrics.Mean(name="loss")
    def call(self, x, training=False):
        return self.out(self.hidden(x))
    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((self(x, training=True) - y) ** 2)
        grads = tape.gradient(loss, self.trainable_variables)
        self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
        self.tracker.update_state(loss)
        return {"loss": self.tracker.result()}
    @property
    def metrics(self):
        return [self.tracker]

def net():
    keras.utils.set_random_seed(0)
    m = Net()
    m.compile(keras.optimizers.Adam(0.01))
    return m

class Count(keras.callbacks.Callback):
    """A user's stateful callback: stops the fit after `epochs` epochs it saw end."""
    def __init__(self, epochs):
        super().__init__()
        self.epochs, self.seen = epochs, 0
    def on_epoch_end(self, epoch, logs=None):
        self.seen += 1
        if self.seen >= self.epochs:
            self.model.stop_training = True
    def get_state(self):
        return {"seen": self.seen}
    def set_state(self, state):
        self.seen = state["seen"]

class Hold(keras.callbacks.Callback):
    """Blocks the training thread, until the kernel dies, at the end of its `at`-th training
    batch or at the start of its `val`-th validation batch."""
    def __init__(self, at=None, val=None):
        super().__init__()
        self.at, self.val, self.trained, self.validated = at, val, 0, 0
    def on_train_batch_end(self, batch, logs=None):
        self.trained += 1
        if self.trained == self.at:
            threading.Event().wait()
    def on_test_batch_begin(self, batch, logs=None):
        self.validated += 1
        if self.validated == self.val:
            threading.Event().wait()

class StopAt(keras.callbacks.Callback):
    """Stops the run as the Stop button does, at the end of its `at`-th batch."""
    def __init__(self, run, at):
        super().__init__()
        self.run, self.at, self.trained = run, at, 0
    def on_train_batch_end(self, batch, logs=None):
        self.trained += 1
        if self.trained == self.at:
            jupyter_supervisor.get_run(self.run).stop(wait=False)

class Raw(keras.callbacks.Callback):
    """The model's weights at the end of each training batch: the raw ones, before fit's end
    swaps in the averages of use_ema=True."""
    def on_train_batch_end(self, batch, logs=None):
        self.weights = [v.numpy().tolist() for v in self.model.trainable_variables]

def checkpointed(logdir, ema=False):
    """The trainable weights of `logdir`'s newest checkpoint, read by plain TensorFlow."""
    probe = dense(ema=ema)
    probe.optimizer.build(probe.trainable_variables)
    tf.train.Checkpoint(model=probe, optimizer=probe.optimizer).read(
        tf.train.latest_checkpoint(logdir)).assert_existing_objects_matched()
    return [v.numpy().tolist() for v in probe.trainable_variables]

def plateau():
    return [keras.callbacks.EarlyStopping(patience=3),
            keras.callbacks.ReduceLROnPlateau(patience=1, factor=0.5)]

def loop(sv, model, optimizer, crash=None):
    """A custom loop (its step a tf.function), blocked at step `crash`."""
    @tf.function
    def train_step(xb, yb):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((model(xb, training=True) - yb) ** 2)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss
    sv.track(model=model, optimizer=optimizer)
    while not sv.should_stop():
        i = sv.read_step() % 8
        loss = train_step(x[i * 8:(i + 1) * 8], y[i * 8:(i + 1) * 8])
        if sv.read_step() + 1 == crash:
            threading.Event().wait()
        sv.step(loss=loss)

def schedule_model():
    m = dense()
    return m, keras.optimizers.Adam(keras.optimizers.schedules.ExponentialDecay(0.05, 4, 0.5))

def state(m, optimizer=None):
    """Every number the run trains, as lists (JSON)."""
    optimizer = optimizer or m.optimizer
    return [v.numpy().tolist() for v in m.variables + optimizer.variables]

def files(folder):
    """{name: its weights} of the .weights.h5 files ModelCheckpoint wrote in `folder`."""
    found = {}
    for name in sorted(os.listdir(folder)):
        probe = dense()
        probe.load_weights(os.path.join(folder, name))
        found[name] = [w.tolist() for w in probe.get_weights()]
    return found
'''

FIT = "{model}.fit(x, y, batch_size=8, verbose=0, callbacks=[sv.callback{more}], {args})"

# name: (how the model is built, the fit's arguments and callbacks, the crashed run's extra
# callback, the step its newest checkpoint holds when it is held). All fits are unshuffled.
SCENARIOS = {
    # A crash inside epoch 3, after ReduceLROnPlateau lowered the rate once; EarlyStopping
    # stops the uninterrupted run after epoch 4.
    "plateau": ("dense()", "epochs=30, validation_data=val",
                "*plateau()", "Hold(at=20)", 19),
    # A crash inside the validation of epoch 4: its batches are trained, its end is pending.
    # EarlyStopping watches the training loss: the epoch's mean must be the whole epoch's.
    "validating": ("dense(metrics=['mae'])",
                   "epochs=40, validation_data=val, validation_batch_size=4",
                   "keras.callbacks.EarlyStopping(monitor='loss', patience=3), "
                   "keras.callbacks.ReduceLROnPlateau(patience=1, factor=0.5)",
                   "Hold(val=14)", 32),
    # The best val_loss is epoch 2's until epoch 7; a crash in epoch 4, whose val_loss is
    # below epoch 1's but above epoch 2's: a ModelCheckpoint starting afresh would save it.
    "best": ("dense(lr=0.2)", "epochs=8, validation_data=val",
             "keras.callbacks.ModelCheckpoint('{best}/{{epoch:02d}}.weights.h5', "
             "save_best_only=True, save_weights_only=True)", "Hold(at=28)", 27),
    "subclassed": ("net()", "epochs=3", "", "Hold(at=11)", 10),
    "counted": ("dense()", "epochs=10", "Count(3)", "Hold(at=20)", 19),
}


EMA_ARGS = "epochs=3, validation_data=val"
LOOP = ("%%supervise --logdir {logdir} --max-steps 24 {options}\n"
        "loop(sv, loop_model, loop_opt, crash={crash})")


def newest_checkpoint(logdir):
    """(path, step) of ``logdir``'s newest checkpoint (from its name); (None, None): none."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    path = tf.train.latest_checkpoint(str(logdir))
    return (None, None) if path is None else (path, int(path.rsplit("-", 1)[1]))


def fit_cell(logdir, scenario, crashed, model="model"):
    """The %%supervise cell of ``scenario`` fitting ``model`` in ``logdir`` (the run's name is
    its last part); ``crashed``: held at its crash point, else waited for."""
    _, args, more, hold, _ = SCENARIOS[scenario]
    more = more.format(best=f"{logdir}-best")
    extra = ", " + more if more else ""
    if crashed:
        extra += ", " + hold
    options = "--save-model-secs 1e-6" + ("" if crashed else " --wait")
    return f"%%supervise --logdir {logdir} {options}\n" + FIT.format(model=model, more=extra,
                                                                     args=args)


@pytest.fixture(scope="module")
def resumed(tmp_path_factory):
    """Every scenario crashed in one kernel, resumed in a fresh one, and run uninterrupted
    there: the kernel (fresh), and {scenario: (the crashed run's output after the resume)}."""
    k = Kernel(tmp_path_factory.mktemp("kernel"))
    try:
        k.ok(SETUP)
        for scenario in SCENARIOS:
            k.ok(f"model_{scenario} = {SCENARIOS[scenario][0]}")
            k.ok(fit_cell(f"runs/{scenario}", scenario, crashed=True, model=f"model_{scenario}"))
        # A custom loop with a learning-rate schedule, held at its step 13.
        k.ok("loop_model, loop_opt = schedule_model()")
        k.ok(LOOP.format(logdir="runs/loop", options="--save-model-secs 1e-6", crash=13))
        # EMA: stopped (the Stop button's way) at the end of its 11th batch, in epoch 2.
        k.ok("model = dense(lr=0.01, ema=True)")
        k.ok("%%supervise --logdir runs/ema --save-model-secs 600 --wait\n"
             + FIT.format(model="model", more=", StopAt('ema', 11)", args=EMA_ARGS))
        for scenario, held in [(s, v[4]) for s, v in SCENARIOS.items()] + [("loop", 12)]:
            wait_for(lambda s=scenario, h=held: newest_checkpoint(k.workdir / "runs" / s)[1] == h,
                     DEADLINE, what=f"the checkpoint of step {held} of {scenario}")
        k.kill()   # a crash of every held run: no final checkpoint
        k.ok(SETUP)
        outputs = {}
        for scenario in SCENARIOS:
            k.ok(f"model = {SCENARIOS[scenario][0]}")
            k.ok(fit_cell(f"runs/{scenario}", scenario, crashed=False))
            k.ok(f"resumed_{scenario} = state(model)\n"
                 f"history_{scenario} = [model.history.epoch, model.history.history]")
            outputs[scenario] = k.value(f"get_run({scenario!r}).history.snapshot().output")
            k.ok(f"model = {SCENARIOS[scenario][0]}")
            k.ok(fit_cell(f"runs/{scenario}_whole", scenario, crashed=False))
            k.ok(f"whole_{scenario} = state(model)\n"
                 f"whole_history_{scenario} = [model.history.epoch, model.history.history]")
        yield k, outputs
    finally:
        k.shutdown()


def same(kernel, a, b):
    """True when the kernel's values ``a`` and ``b`` are equal (bit for bit: as lists)."""
    return kernel.value(f"{a} == {b}")


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_a_crashed_fit_resumes_bit_for_bit(resumed, scenario):
    kernel, outputs = resumed
    assert kernel.value(f"get_run({scenario!r}).restored_from").endswith(
        f"-{SCENARIOS[scenario][4]}")
    assert same(kernel, f"resumed_{scenario}", f"whole_{scenario}")
    # History holds every epoch of the run, and its values: the epoch the callbacks stopped it
    # at, the rates ReduceLROnPlateau set, the epochs' means.
    assert same(kernel, f"history_{scenario}", f"whole_history_{scenario}")
    assert "start afresh" not in outputs[scenario]


def test_the_plateau_runs_stop_and_decay_as_the_uninterrupted_one(resumed):
    kernel, outputs = resumed
    epochs, history = kernel.value("whole_history_plateau")
    rates = history["learning_rate"]
    # Stopped by EarlyStopping after epoch 4 of 30; the rate lowered before the crash, and
    # after it.
    assert epochs == [0, 1, 2, 3]
    assert rates == pytest.approx([0.05, 0.05, 0.025, 0.0125])  # float32's
    assert ("The learning rate of 'optimizer' is 0.025, restored from the checkpoint: training "
            "had changed it from the 0.05 the code sets") in outputs["plateau"]
    epochs, _ = kernel.value("whole_history_validating")
    assert len(epochs) == 11   # EarlyStopping on the training loss, of 40


def test_model_checkpoint_writes_the_files_of_the_uninterrupted_run(resumed):
    kernel, _ = resumed
    resumed_files = kernel.value("files('runs/best-best')")
    whole_files = kernel.value("files('runs/best_whole-best')")
    assert list(resumed_files) == list(whole_files) == [
        "01.weights.h5", "02.weights.h5", "07.weights.h5"]
    assert resumed_files == whole_files


def test_a_user_callbacks_state_resumes(resumed):
    """Count stops the fit at the end of the third epoch it saw: the resumed session saw one
    (a count restarted at 0 would have run three more)."""
    kernel, _ = resumed
    assert kernel.value("whole_history_counted[0]") == [0, 1, 2]
    assert kernel.value("history_counted[0]") == [0, 1, 2]
    assert kernel.value("json.loads(tf.train.load_checkpoint(tf.train.latest_checkpoint("
                        "'runs/counted')).get_tensor('jupyter_supervisor/training/.ATTRIBUTES/"
                        "VARIABLE_VALUE'))['fit']['callbacks'][0]") == {
        "type": "__main__.Count", "state": {"seen": 3}}


def test_a_subclassed_model_built_at_its_first_step_trains_as_under_plain_fit(resumed):
    kernel, _ = resumed
    kernel.ok("plain = net()\nplain.fit(x, y, batch_size=8, epochs=3, verbose=0)")
    assert same(kernel, "state(plain)", "whole_subclassed")


def test_a_custom_loop_with_a_schedule_resumes_bit_for_bit(resumed):
    kernel, _ = resumed
    kernel.ok("loop_model, loop_opt = schedule_model()")
    kernel.ok(LOOP.format(logdir="runs/loop", options="--wait", crash=None))
    assert kernel.value("get_run('loop').restored_from").endswith("-12")
    kernel.ok("resumed_loop = state(loop_model, loop_opt)\n"
              "loop_model, loop_opt = schedule_model()")
    kernel.ok(LOOP.format(logdir="runs/loop_whole", options="--wait", crash=None))
    assert kernel.value("int(loop_opt.iterations)") == 24
    assert same(kernel, "resumed_loop", "state(loop_model, loop_opt)")


def test_the_checkpoint_that_ends_a_fit_with_ema_holds_the_raw_weights(resumed):
    """fit swaps the averages into the model after its last batch (finalize_variable_values):
    the checkpoint that ends it holds what training reached, the averages beside."""
    kernel, _ = resumed
    kernel.ok("model, raw = dense(lr=0.01, ema=True), Raw()")
    kernel.ok("%%supervise --logdir runs/ema_end --save-model-secs 600 --wait\n"
              + FIT.format(model="model", more=", raw", args=EMA_ARGS))
    assert kernel.value("checkpointed('runs/ema_end', ema=True) == raw.weights")
    assert kernel.value("[v.numpy().tolist() for v in model.trainable_variables] "
                        "!= raw.weights")   # the model holds the averages now


def test_a_stop_inside_an_epoch_with_ema_saves_the_training_state_at_once(resumed):
    """The stop's checkpoint is of the stop's step, holds the raw weights (not the averages
    fit swaps in at its end), and the half epoch was not taken for one; the resume in the
    fresh kernel ends where the uninterrupted run does."""
    kernel, _ = resumed
    path, step = newest_checkpoint(kernel.workdir / "runs" / "ema")
    assert step == 11
    kernel.ok("model = dense(lr=0.01, ema=True)")
    kernel.ok("%%supervise --logdir runs/ema --wait\n"
              + FIT.format(model="model", more="", args=EMA_ARGS))
    kernel.ok("resumed_ema = state(model)\nmodel = dense(lr=0.01, ema=True)")
    kernel.ok("%%supervise --logdir runs/ema_whole --wait\n"
              + FIT.format(model="model", more="", args=EMA_ARGS))
    assert same(kernel, "resumed_ema", "state(model)")
    # The stopped session's History: one epoch ended; the half epoch's end did not run.
    saved = kernel.value(f"json.loads(tf.train.load_checkpoint({str(path)!r}).get_tensor("
                         "'jupyter_supervisor/training/.ATTRIBUTES/VARIABLE_VALUE'))['fit']")
    history = next(c["state"] for c in saved["callbacks"] if c["type"].endswith(".History"))
    assert history["epoch"] == [0]
