"""What sv.callback uses of Keras beyond the callback API (``eager/keras_internals.py``) still
exists: each check fails loudly, naming what went away, when a Keras release changes it."""
import keras
import numpy as np

from jupyter_supervisor.eager import keras_internals


class Look(keras.callbacks.Callback):
    """Reads what keras_internals reads, from inside a fit."""

    def __init__(self):
        super().__init__()
        self.seen = {}

    def on_train_begin(self, logs=None):
        for name in ("x", "shuffle", "initial_epoch", "callbacks", "epoch_iterator"):
            self.seen[name] = keras_internals.fit_local(self.model, name)


def test_fit_keeps_what_a_callback_reads_of_it():
    x = np.zeros((16, 4), np.float32)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    look = Look()
    model.fit(x, x[:, :1], batch_size=8, epochs=1, shuffle=False, verbose=0, callbacks=[look])
    seen = look.seen
    assert seen["x"] is x and seen["shuffle"] is False and seen["initial_epoch"] == 0
    assert isinstance(seen["callbacks"], keras.callbacks.CallbackList), \
        "fit's local `callbacks` is no longer the CallbackList it calls"
    assert look in seen["callbacks"].callbacks
    dataset = getattr(seen["epoch_iterator"], "_distributed_dataset", None)
    assert dataset is not None, "TFEpochIterator._distributed_dataset is gone"
    assert dataset.element_spec[0].shape.as_list()[-1] == 4


def test_fit_starts_at_the_initial_epoch_a_callback_sets():
    class Start(keras.callbacks.Callback):
        def on_train_begin(self, logs=None):
            keras_internals.set_initial_epoch(self.model, 2)

        def on_epoch_begin(self, epoch, logs=None):
            self.first = getattr(self, "first", epoch)

    x = np.zeros((8, 4), np.float32)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    start = Start()
    model.fit(x, x[:, :1], epochs=3, verbose=0, callbacks=[start])
    assert start.first == 2, "fit no longer reads model._initial_epoch after on_train_begin"


def test_a_model_built_at_its_first_step_is_built_from_the_data_spec():
    class Net(keras.Model):
        def __init__(self):
            super().__init__()
            self.dense = keras.layers.Dense(2)

        def call(self, x):
            return self.dense(x)

    class Build(keras.callbacks.Callback):
        def on_train_begin(self, logs=None):
            self.built = keras_internals.build_for_fit(self.model, metrics=True)
            self.weights = len(self.model.weights)
            self.optimizer_built = self.model.optimizer.built

    x = np.zeros((8, 3), np.float32)
    model = Net()
    model.compile("adam", "mse", metrics=["mae"])
    build = Build()
    model.fit(x, np.zeros((8, 2), np.float32), epochs=1, verbose=0, callbacks=[build])
    assert build.built and build.weights == 2 and build.optimizer_built, \
        "Trainer._symbolic_build no longer builds the model and its optimizer"
