"""A fit's input resumes where the run's was (``eager/data_position.py``), in real kernels.

Two kernels serve the module (a kernel start costs more than the fits). In the first, with no
seed set and ops nondeterministic, each input whose order cannot be replayed is stopped
mid-epoch by --max-steps and re-run: the resume says so, once (and so does one given the
dataset or the generator the stopped fit had, made in an earlier cell). Then, seeded and with
deterministic ops, one fit per input kind is started and held at a batch mid-epoch (later than
the first epoch), beside fits that the next kernel resumes with another batch size, another
steps_per_epoch, another dataset length; the kernel is killed (SIGKILL: a crash). In a new
kernel the same cells run again: each resumed fit ends with the weights and optimizer
variables of an uninterrupted fit of the same seeds, bit for bit, and so does a fit stopped
and resumed in that kernel on one dataset object made in an earlier cell; each changed input
is said, in the "Received ... Expected ..." form, with where the resume continued.
"""
import pytest

from helpers import Kernel

pytestmark = [pytest.mark.kernel, pytest.mark.internals]

SETUP = r'''
import keras, numpy as np
from eager_models import at_batch, data, hold
x, y = data(n=64)

def model():
    m = keras.Sequential([keras.Input((4,)), keras.layers.Dense(16, activation="relu"),
                          keras.layers.Dropout(0.3), keras.layers.Dense(1)])
    m.compile(keras.optimizers.Adam(0.01), "mse")
    return m

def tf_data(n=64, seed=1):
    # cache, a shuffle reshuffled at each epoch (the default), map, batch, prefetch
    return (tf.data.Dataset.from_tensor_slices((x[:n], y[:n])).cache().shuffle(64, seed=seed)
            .map(lambda a, b: (a * 2.0, b), num_parallel_calls=tf.data.AUTOTUNE)
            .batch(8).prefetch(tf.data.AUTOTUNE))

def repeated():  # one iterator for the whole fit, reshuffled at each pass
    return tf.data.Dataset.from_tensor_slices((x, y)).shuffle(64, seed=2).batch(8).repeat()

def draws():  # an endless seeded generator of batches
    rng = np.random.default_rng(3)
    while True:
        i = rng.integers(0, 64, 8)
        yield x[i], y[i]

def batches():  # a generator that runs out: fit's later epochs get the 2 batches Keras peeked
    for i in range(8):
        yield x[i * 8:(i + 1) * 8], y[i * 8:(i + 1) * 8]

class Batches(keras.utils.PyDataset):
    # Keras' docs' pattern: indexed by batch, reshuffled by on_epoch_end
    def __init__(self):
        super().__init__()
        self.order = np.arange(8)
    def __len__(self):
        return 8
    def __getitem__(self, i):
        j = self.order[i]
        return x[j * 8:(j + 1) * 8], y[j * 8:(j + 1) * 8]
    def on_epoch_end(self):
        np.random.shuffle(self.order)

FITS = {  # name: fit's arguments (its input made anew)
    "tf_data": lambda: dict(x=tf_data(), epochs=3),
    "repeated": lambda: dict(x=repeated(), epochs=4, steps_per_epoch=5),
    "generator": lambda: dict(x=draws(), epochs=3, steps_per_epoch=5),
    "finite_generator": lambda: dict(x=batches(), epochs=3),
    "py_dataset": lambda: dict(x=Batches(), epochs=3),  # and fit's shuffle=True
    "arrays": lambda: dict(x=x, y=y, batch_size=8, epochs=5, steps_per_epoch=3),
    # Resumed with another input (CHANGED):
    "batch_size": lambda: dict(x=x, y=y, batch_size=8, epochs=3),
    "steps_per_epoch": lambda: dict(x=draws(), epochs=3, steps_per_epoch=5),
    "length": lambda: dict(x=tf_data(), epochs=3),
}

def made(names):
    # A fresh model and input for each, built in this thread (seeded: the same each time)
    built = {}
    for name in names:
        keras.utils.set_random_seed(0)
        built[name] = (model(), FITS[name]())
    return built

def state(m):
    return [v.numpy() for v in m.variables + m.optimizer.variables]

# Inputs made once, in a cell before fit's (NOTES: the resume in this kernel reuses them): a
# pipeline with Python state (which cannot be copied anew), a generator
reused_rows = tf.data.Dataset.from_generator(lambda: zip(x, y), output_signature=(
    tf.TensorSpec((4,), tf.float32), tf.TensorSpec((1,), tf.float32))).shuffle(64, seed=7).batch(8)
reused_draws = draws()

def same(a, b):
    return len(a) == len(b) and all(bool(np.array_equal(u, v)) for u, v in zip(a, b))

def output(name):
    return get_run(name).history.snapshot().output
'''

# Held at the end of this batch: the newest checkpoint is the step before (8 batches an epoch,
# but 'repeated', 'generator' (5), 'arrays' (3), and 'finite_generator' after its first (2):
# each is past its first epoch, mid-epoch).
HOLD = {"tf_data": 13, "repeated": 14, "generator": 13, "finite_generator": 10,
        "py_dataset": 13, "arrays": 8, "batch_size": 13, "steps_per_epoch": 8, "length": 13}
EXACT = ("tf_data", "repeated", "generator", "finite_generator", "py_dataset", "arrays")
CHANGED = ("batch_size", "steps_per_epoch", "length")

# The fits of the first kernel run at once: each body reads its own entry of `built`.
FIT = ("%%supervise --logdir runs/{logdir} --save-model-secs 0.000001 {options}\n"
       "built[{name!r}][0].fit(**built[{name!r}][1], verbose=0, callbacks=[sv.callback{more}])")

# A fresh model (as the re-run cell makes it) on the dataset `shared` of an earlier cell.
SHARED = ("%%supervise --logdir runs/shared --save-model-secs 0.000001 --wait {options}\n"
          "keras.utils.set_random_seed(0)\nm = model()\n"
          "m.fit(shared, epochs=3, verbose=0, callbacks=[sv.callback])")

# What each input the resumes cannot replay is, built without any seed (module docstring).
NOTES = {
    "unseeded shuffle": (
        "tf.data.Dataset.from_tensor_slices((x, y)).shuffle(64).batch(8)", "", 12,
        "its tf.data input draws its order with no seed (Dataset.shuffle)"),
    "shuffle before repeat": (
        "tf.data.Dataset.from_tensor_slices((x, y)).shuffle(64, seed=5).batch(8).repeat(2)",
        "", 20, "its tf.data input shuffles before a repeat(), cache() or concatenate()"),
    "unseeded PyDataset": (
        "Batches()", "", 12, "of a PyDataset with shuffle=True and no seed"),
    "unseeded arrays": (
        "x", "y=y, batch_size=8, ", 12, "with shuffle=True and no global random seed"),
    # A seeded shuffle split by take/skip: validation reshuffles the training input's split.
    "validation shares the shuffle": (
        "(split := tf.data.Dataset.from_tensor_slices((x, y)).shuffle(64, seed=6)"
        ".batch(8)).take(6)", "validation_data=split.skip(6), ", 9,
        "its validation_data shares a reshuffling shuffle with its training input"),
    # Made once, in an earlier cell: the resume in the same kernel gets the stopped fit's.
    "a dataset reused in the kernel": (
        "reused_rows", "", 12, "its tf.data input is a dataset this kernel already iterated"),
    "a generator reused in the kernel": (
        "reused_draws", "steps_per_epoch=5, ", 7,
        "with a Python generator that an earlier fit in this kernel already drew from"),
}


def note_cell(name, logdir, options):
    source, more, _, _ = NOTES[name]
    return (f"%%supervise --logdir runs/{logdir} --wait {options}\n"
            f"m = model()\nm.fit({source}, {more}epochs=3, verbose=0, callbacks=[sv.callback])")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Runs every scenario (module docstring); returns what the tests assert on: {"notes":
    {name: (first output, resumed output)}, "exact": {name: (equal, resumed iterations,
    uninterrupted iterations, resumed output)}, "changed": {name: (output, iterations)}}."""
    kernel = Kernel(tmp_path_factory.mktemp("data"))
    found = {"notes": {}, "exact": {}, "changed": {}, "shared": None}
    try:
        kernel.ok(SETUP)
        for number, name in enumerate(NOTES):
            logdir = f"note{number}"
            steps = NOTES[name][2]
            kernel.ok(note_cell(name, logdir, f"--max-steps {steps}"))
            first = kernel.value(f"output({logdir!r})")
            kernel.ok(note_cell(name, logdir, ""))
            found["notes"][name] = (first, kernel.value(f"output({logdir!r})"))

        kernel.ok("tf.config.experimental.enable_op_determinism()\n"
                  f"built = made({list(HOLD)!r})")
        for name, at in HOLD.items():
            held_at = f", at_batch({at}, hold)"
            kernel.ok(FIT.format(logdir=name, options="", name=name, more=held_at))
        held = " and ".join(f"(tf.train.latest_checkpoint('runs/{name}') or '-0')"
                            f".endswith('-{at - 1}')" for name, at in HOLD.items())
        kernel.wait_until(held, "each run's checkpoint of the step before its held batch")
        kernel.kill()

        kernel.ok(SETUP + "tf.config.experimental.enable_op_determinism()")
        for name in EXACT:
            kernel.ok(f"built = made([{name!r}])")
            kernel.ok(FIT.format(logdir=name, options="--wait", name=name, more=""))
            kernel.ok(f"m = built[{name!r}][0]\n"
                      "resumed, resumed_steps = state(m), int(m.optimizer.iterations)\n"
                      f"built = made([{name!r}])")
            kernel.ok(FIT.format(logdir=f"{name}-whole", options="--wait", name=name, more=""))
            found["exact"][name] = kernel.value(
                f"[same(resumed, state(built[{name!r}][0])), resumed_steps, "
                f"int(built[{name!r}][0].optimizer.iterations), output({name!r})]")
        # The same dataset object stopped and resumed in this kernel (made in a cell before
        # fit's), against the uninterrupted fit of one built anew.
        kernel.ok("keras.utils.set_random_seed(0)\nshared = tf_data()")
        for options in ("--max-steps 13", ""):
            kernel.ok(SHARED.format(options=options))
        kernel.ok("resumed = state(m)\nbuilt = made(['tf_data'])")
        kernel.ok(FIT.format(logdir="shared-whole", options="--wait", name="tf_data", more=""))
        found["shared"] = kernel.value(
            "[same(resumed, state(built['tf_data'][0])), output('shared')]")
        kernel.ok("built = made(['batch_size', 'steps_per_epoch', 'length'])\n"
                  "built['batch_size'][1]['batch_size'] = 16\n"
                  "built['steps_per_epoch'][1]['steps_per_epoch'] = 4\n"
                  "built['length'][1]['x'] = tf_data(n=48)")
        for name in CHANGED:
            kernel.ok(FIT.format(logdir=name, options="--wait", name=name, more=""))
            found["changed"][name] = kernel.value(
                f"[output({name!r}), int(built[{name!r}][0].optimizer.iterations)]")
    finally:
        kernel.shutdown()
    return found


# ------------------------------------------------------------------------------ exact resumes

@pytest.mark.parametrize("name", EXACT)
def test_a_crashed_fit_resumes_its_input_bit_for_bit(runs, name):
    """tf_data: a seeded shuffle reshuffled at each epoch, with cache, map and prefetch,
    crashed in its second epoch (fit made three iterators of it before); repeated: repeat()
    with steps_per_epoch, crashed in the second pass; generator: crashed in its third epoch,
    every earlier draw skipped again; finite_generator: crashed after it ran out (fit's
    second epoch draws the two batches Keras peeked at, then finds it empty again);
    py_dataset: reshuffled by on_epoch_end and by fit's
    shuffle=True; arrays: shuffle=True with steps_per_epoch shorter than the data."""
    equal, resumed, whole, output = runs["exact"][name]
    assert resumed == whole
    assert equal
    assert "differs from an uninterrupted" not in output


def test_a_dataset_resumed_in_the_kernel_that_stopped_it_resumes_bit_for_bit(runs):
    """Stopped by --max-steps in its second epoch, and the cell run again in the same kernel on
    the same dataset object (its shuffle's counter past the run's order): fit iterates a copy
    built anew, and the run ends as the uninterrupted one."""
    equal, output = runs["shared"]
    assert equal
    assert "differs from an uninterrupted" not in output


# ------------------------------------------------------------------------------ notes

@pytest.mark.parametrize("name", list(NOTES))
def test_a_resume_that_cannot_be_exact_says_so_once(runs, name):
    first, resumed = runs["notes"][name]
    said = NOTES[name][3]
    assert said not in first
    assert resumed.count(said) == 1
    assert resumed.count("the run differs from an uninterrupted one") == 1


# ------------------------------------------------------------------------------ changes

def test_another_batch_size_is_said_and_the_epoch_continues_after_its_share(runs):
    """Held after 12 batches of 8 (epoch 2, batch 4 of 8): with batch_size=16 the resume
    continues epoch 2 after batch 2 of 4, then trains epoch 3: 2 + 4 steps more."""
    output, iterations = runs["changed"]["batch_size"]
    assert ("Received: batch_size=16, batches_per_epoch=4. Expected batch_size=8, "
            "batches_per_epoch=8 (what fit had then). Its position cannot be kept: the "
            "resume continues epoch 2 after batch 2 of 4 (the share of the epoch it had "
            "done, batch 4 of 8)") in output
    assert output.count("Received:") == 1
    assert iterations == 12 + 2 + 4


def test_another_steps_per_epoch_is_said(runs):
    """Held after 7 batches (epoch 2, batch 2 of 5): with steps_per_epoch=4 the resume
    continues epoch 2 after batch 1 of 4 (2 * 4 // 5), then trains epoch 3: 3 + 4 steps."""
    output, iterations = runs["changed"]["steps_per_epoch"]
    assert ("Received: batches_per_epoch=4. Expected batches_per_epoch=5 (what fit had "
            "then). Its position cannot be kept: the resume continues epoch 2 after batch 1 "
            "of 4 (the share of the epoch it had done, batch 2 of 5)") in output
    assert iterations == 7 + 3 + 4


def test_another_dataset_length_is_said(runs):
    """Held after 12 batches (epoch 2, batch 4 of 8); 48 samples make 6 batches: the resume
    continues epoch 2 after batch 3 of 6, then trains epoch 3: 3 + 6 steps more."""
    output, iterations = runs["changed"]["length"]
    assert ("Received: batches=6, batches_per_epoch=6. Expected batches=8, "
            "batches_per_epoch=8 (what fit had then)") in output
    assert "continues epoch 2 after batch 3 of 6" in output
    assert iterations == 12 + 3 + 6
