"""Small, seeded Keras models and data shared by the eager tests, their training subprocesses and
their kernels, and the callbacks that interrupt a fit at a batch."""
import numpy as np

BATCHES = 8          # batches per epoch with batch_size=8


def data(n=64, features=4, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.random((n, features), dtype=np.float32)
    return x, x.sum(axis=1, keepdims=True)


def make_model(features=4, units=8, lr=0.01, seed=0):
    import keras  # pylint: disable=import-outside-toplevel
    keras.utils.set_random_seed(seed)
    model = keras.Sequential([keras.Input((features,)), keras.layers.Dense(units),
                              keras.layers.Dense(1)])
    model.compile(keras.optimizers.Adam(lr), "mse")
    return model


def at_batch(at, then):
    """A Keras callback that calls ``then()`` at the end of the ``at``-th batch its fit trains:
    ``crash`` (raises, as a failing run does) or ``hold`` (blocks the training thread until the
    process ends: a kernel killed meanwhile)."""
    import keras  # pylint: disable=import-outside-toplevel

    class AtBatch(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.count = 0

        def on_train_batch_end(self, batch, logs=None):
            self.count += 1
            if self.count == at:
                then()

    return AtBatch()


def crash():
    raise RuntimeError("crash")


def hold():
    import threading  # pylint: disable=import-outside-toplevel
    threading.Event().wait()


def custom_loop(seed=0):
    """What a custom loop trains: ``make_model``'s model, its optimizer (built) and a
    tf.function step on the first batch of ``data()`` that returns the loss."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    model = make_model(seed=seed)
    x, y = data(n=64)
    xs, ys = tf.constant(x[:8]), tf.constant(y[:8])
    opt = model.optimizer
    opt.build(model.trainable_variables)

    @tf.function
    def train_step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(xs) - ys))
        opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables),
                                model.trainable_variables))
        return loss

    return model, opt, train_step


# -- models whose validation metric is best in the middle of the run (--keep-best) ----------

def overfitting(lr=0.04):
    """(model, fit arguments): ``y = w x`` fitted to ``2 x`` by SGD from ``w = 0``, validated
    on ``x`` itself, which is best at ``w = 1``: ``w`` passes 1 in the third epoch (8 batches
    each) on its way to 2, so val_loss is best at the end of epoch 3 (0-based 2) and worse at
    every epoch after. No randomness: no shuffling, a zero initial weight."""
    import keras  # pylint: disable=import-outside-toplevel
    rng = np.random.default_rng(0)
    x = rng.random((64, 1), dtype=np.float32)
    x_val = rng.random((32, 1), dtype=np.float32)
    model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(
        1, use_bias=False, kernel_initializer="zeros")])
    model.compile(keras.optimizers.SGD(lr), "mse")
    return model, {"x": x, "y": 2 * x, "validation_data": (x_val, x_val), "batch_size": 8,
                   "shuffle": False}


def drifting_classifier(lr=0.5):
    """(model, fit arguments): a logistic ``sigmoid(w x + b)`` whose decision boundary starts
    at 0 and moves toward the training labels' boundary, 0.6; the validation labels' is 0.2,
    so val_accuracy is best at the end of epoch 2 (0-based 1), when the boundary passes it,
    and worse after. No randomness: fixed initial weights, no shuffling."""
    import keras  # pylint: disable=import-outside-toplevel
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (64, 1)).astype(np.float32)
    x_val = np.linspace(-1, 1, 41, dtype=np.float32)[:, None]
    model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(
        1, activation="sigmoid", kernel_initializer=keras.initializers.Constant(8.0))])
    model.compile(keras.optimizers.SGD(lr), "binary_crossentropy", metrics=["accuracy"])
    return model, {"x": x, "y": (x > 0.6).astype(np.float32),
                   "validation_data": (x_val, (x_val > 0.2).astype(np.float32)),
                   "batch_size": 8, "shuffle": False}
