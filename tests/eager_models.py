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
