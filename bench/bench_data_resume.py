"""What keeping a tf.data input's position costs (issue 38), against TensorFlow's own way.

The pipeline: ``--samples`` images of 32x32x3 bytes (CIFAR's size) from memory, shuffled with a
seed and a buffer of the whole dataset (reshuffled at each iteration: the default), mapped to
float, batched by 128, prefetched. Measured, each the median of ``--rounds``:

  make      making one iterator of it and dropping it unread: what a resume pays for each
            iterator fit had made before the one it draws from (two per epoch of a dataset of
            known length; ``data_position``), so a resume in epoch E pays about 2 E of these
  read      drawing one batch, without training: what a resume pays for each batch it skips
            (the batches done in the interrupted epoch; with ``repeat()`` and
            ``steps_per_epoch``, every batch of the fit's one iterator)
  epoch     reading a whole epoch (the baseline the two above are compared with)
  rebuild   copying the dataset anew from its graph (``compat.rebuilt_dataset``): what a
            resume in the kernel that stopped the run pays, once, when it is given the same
            dataset object (its arrays are in the graph, so this copies them)
  save_it   ``tf.train.Checkpoint(iterator=...).write`` of an iterator ten batches into an
            epoch, and its size: what checkpointing the iterator itself would add to every
            checkpoint (its shuffle buffer, and the prefetched batches)

Printed: the figures, and as ratios: how many epochs a resume could replay by making iterators
in the time of reading one epoch, and the iterator checkpoint's time and size against one
epoch's read. Figures only; no target.

    .venv/bin/python bench/bench_data_resume.py [--samples 20000] [--rounds 20]
"""
import argparse
import os
import statistics
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from jupyter_supervisor import compat  # noqa: E402


def pipeline(images, labels):
    return (tf.data.Dataset.from_tensor_slices((images, labels))
            .shuffle(len(images), seed=1)
            .map(lambda x, y: (tf.cast(x, tf.float32) / 255.0, y),
                 num_parallel_calls=tf.data.AUTOTUNE)
            .batch(128).prefetch(tf.data.AUTOTUNE))


def timed(fn, rounds):
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (args.samples, 32, 32, 3), dtype=np.uint8)
    labels = rng.integers(0, 10, args.samples)
    dataset = pipeline(images, labels)
    batches = -(-args.samples // 128)

    make = timed(lambda: iter(dataset), args.rounds * 10)

    def one_epoch():
        for _ in dataset:
            pass
    epoch = timed(one_epoch, max(3, args.rounds // 4))

    rebuild = timed(lambda: compat.rebuilt_dataset(dataset, 2**31), max(3, args.rounds // 4))

    iterator = iter(dataset)
    next(iterator)
    read = timed(lambda: next(iterator), min(args.rounds * 5, batches - 2))

    with tempfile.TemporaryDirectory() as folder:
        saved = iter(dataset)
        for _ in range(10):
            next(saved)
        checkpoint = tf.train.Checkpoint(iterator=saved)
        paths = []

        def save_iterator():
            paths.append(checkpoint.write(os.path.join(folder, f"it{len(paths)}")))
        save_it = timed(save_iterator, max(3, args.rounds // 4))
        size = sum(os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder)
                   if f.startswith("it0"))

    print(f"{args.samples} samples of 32x32x3 bytes ({images.nbytes / 1e6:.0f} MB), "
          f"{batches} batches of 128, TensorFlow {tf.__version__}, {os.cpu_count()} cores")
    print(f"make one iterator        {make * 1e3:8.2f} ms")
    print(f"draw one batch           {read * 1e3:8.2f} ms")
    print(f"read one epoch           {epoch * 1e3:8.1f} ms")
    print(f"rebuild from its graph   {rebuild * 1e3:8.1f} ms")
    print(f"iterator checkpoint      {save_it * 1e3:8.1f} ms, {size / 1e6:.0f} MB")
    print(f"epochs a resume replays in one epoch's read: {epoch / (2 * make):.0f}")
    print(f"rebuild / epoch's read: {rebuild / epoch:.2f}")
    print(f"iterator checkpoint / epoch's read: {save_it / epoch:.2f} (time), "
          f"{size / images.nbytes:.2f} of the dataset (size)")


if __name__ == "__main__":
    main()
