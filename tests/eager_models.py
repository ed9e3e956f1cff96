"""Small, seeded Keras models and data shared by test_eager.py and its training subprocess."""
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
