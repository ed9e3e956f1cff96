"""Where a fit's input is, so that a resumed fit draws the batches the uninterrupted one would
have drawn: ``FitInput`` (one per fit under ``sv.callback``), and ``InputState``, its record in
each checkpoint.

What decides the order of a fit's batches lives outside the model: in the input, and in how
many iterators fit made of it. Keras' TensorFlow trainer iterates its input through a tf.data
pipeline: it makes a new iterator at each epoch's start (and one more, unused, when an epoch
of a dataset of known length ends), or, with ``steps_per_epoch``, keeps one across epochs until
it runs through its data. A re-run cell builds the input anew (a new kernel starts from
nothing), so that state is gone; what a checkpoint keeps instead is, for the iterator that fit
draws its next batch from, the number of iterators fit had made up to it (``iterator``) and
the batches drawn from it (``drawn``). A resume replays them, per kind of input:

* a ``tf.data.Dataset``: each ``Dataset.shuffle`` with ``reshuffle_each_iteration=True`` (the
  default) draws new seeds each time an iterator of it is made, from a counter in the dataset
  (a new dataset starts it again). The resume makes ``iterator - 1`` iterators of the new
  dataset and drops them unread (each costs what fit paid to make it), then draws ``drawn``
  batches of fit's first one: that iterator's order and position are the uninterrupted run's,
  whatever ``map``, ``batch``, ``prefetch``, ``cache`` (before the shuffle) or ``repeat``
  (after it) the pipeline holds. TensorFlow could also checkpoint the iterator itself, but
  that copies its shuffle and prefetch buffers into every checkpoint (the whole dataset, for a
  shuffle buffer of its size; ``bench/bench_data_resume.py``); replaying costs nothing at a
  save. An input whose validation data shares a reshuffling shuffle with it (``take``/``skip``
  of one shuffled dataset) cannot be replayed so (fit's validation makes iterators of it too):
  the resume says so.
* a Python generator: the re-run cell makes it again from its start; the resume draws again
  (and drops) every batch the run had drawn from fit's iterator, earlier epochs included, not
  only the current epoch's.
* a ``keras.utils.PyDataset``: its ``on_epoch_begin``/``on_epoch_end`` (which may reshuffle it)
  are called once for each epoch the run had ended, with the draws Keras makes from Python's
  ``random`` for ``shuffle=True`` between them, then ``drawn`` batches are drawn.
* arrays: Keras draws the permutation of each epoch anew from ``tf.random.shuffle``; with a
  global seed it is the same one for every epoch (a Keras fact), so drawing ``drawn`` batches
  resumes exactly.

Exactness needs what an uninterrupted run needs to be repeatable: the same seeds, an input that
yields the same data when built again. Built again: a resume in the kernel that ran the fit
may be given the same dataset object (made in an earlier cell than fit's), whose seed counter
already moved past the iterator the run drew from. The fits under a callback count, in this
process, the iterators they made of each reshuffling transformation (``_ITERATED``), and each
checkpoint records where its fit's count started (``start``: a dataset an earlier fit iterated
gives the next one later seeds). A resume given a dataset already iterated has fit iterate a
copy of it built anew from its graph (``compat.rebuilt_dataset``), whose counter starts
again (``ended`` moves the user's dataset on when that fit ends); every resume makes
``start`` more iterators than fit had made; it says so where the dataset cannot be copied,
and where ``start`` cannot be replayed (a shuffle below ``repeat`` draws seeds per pass). A
generator an earlier fit drew from (``_DRAWN``) cannot start again: the resume says so.
Iterators made outside such fits (``next(iter(ds))``, ``evaluate``, validation on it) are not
seen. Where the order cannot be replayed (an unseeded shuffle, arrays shuffled without a
global seed, a shuffle before ``repeat``/``cache``/``concatenate`` with an iterator per
epoch), the resume says so once, with what to do. A checkpoint also records the input's kind,
length, batch size and batches per epoch: when they changed since (another
``batch_size``...), the resume says what changed and continues the epoch after the same share
of it, not silently at a batch that now means other samples.

Every private attribute of Keras and tf.data that this reads is in ``compat``.
"""
import logging
import time
import weakref
from typing import NamedTuple, Optional, Tuple

import tensorflow as tf

from .. import capabilities, compat
from .variables import INPUT_STATE

logger = logging.getLogger("jupyter_supervisor")

# The iterators that fits under a callback made, in this process, of each reshuffling
# transformation of a tf.data pipeline (``compat.reshuffling_nodes``); and the Python generators
# such fits drew from. Weak: a dataset or a generator the user drops is forgotten with it.
_ITERATED: "weakref.WeakKeyDictionary[object, int]" = weakref.WeakKeyDictionary()
_DRAWN: "weakref.WeakSet[object]" = weakref.WeakSet()
# The most a copy of a dataset built anew may hold (its graph holds the arrays it was made
# from, and reading it back takes a few times that for a moment).
COPY_LIMIT = 256_000_000

UNKNOWN = -1
# The kinds of input Keras' fit takes (``compat.input_kind``), by their number in a checkpoint.
KINDS = ("other", "arrays", "tf.data", "generator", "PyDataset")
OTHER, ARRAYS, TF_DATA, GENERATOR, PY_DATASET = range(len(KINDS))
KIND_NAMES = ("another input", "arrays", "a tf.data.Dataset", "a Python generator",
              "a keras.utils.PyDataset")


class SavedInput(NamedTuple):
    """A checkpoint's record of its fit's input (UNKNOWN where not known)."""
    kind: int          # ARRAYS, TF_DATA, ...
    length: int        # samples of arrays; batches of a dataset of known length, of a PyDataset
    batch_size: int
    steps: int         # batches per epoch (fit's ``steps_per_epoch``, or the input's length)
    iterator: int      # fit's iterators of the input made up to the one it draws next from
    drawn: int         # batches drawn from that one before the next
    start: int         # iterators of the input earlier fits had made when the run's started


class InputState(tf.Module):
    """The record of ``SavedInput`` in the run's state. A checkpoint written before it existed
    restores with it UNKNOWN (``restored`` is None)."""

    def __init__(self):
        super().__init__(name=INPUT_STATE)
        for field in SavedInput._fields:
            setattr(self, field, tf.Variable(UNKNOWN, dtype=tf.int64, trainable=False,
                                             name=field))

    def record(self, saved: Optional[SavedInput]) -> None:
        """Before a save: ``saved``, or UNKNOWN everywhere (no fit input now)."""
        for field in SavedInput._fields:
            getattr(self, field).assign(UNKNOWN if saved is None else getattr(saved, field))

    def restored(self) -> Optional[SavedInput]:
        """What the restored checkpoint recorded, or None."""
        saved = SavedInput(*(int(getattr(self, f).numpy()) for f in SavedInput._fields))
        return saved if saved.iterator > 0 else None


# Printed once, in the run's output, by a resume whose order cannot be the uninterrupted one's.
RESHUFFLED = (
    "This fit resumes inside epoch %d (after its batch %d) with shuffle=True and no global "
    "random seed: the epoch is shuffled anew, so the batches trained now are not the samples "
    "the interrupted epoch had left (some are seen twice in this epoch, some not at all), and "
    "the run differs from an uninterrupted one. For an exact resume, set a seed before "
    "building the model (keras.utils.set_random_seed(0)): Keras then draws the same order for "
    "the epoch in every run.")
UNSEEDED_DATASET = (
    "This fit resumes inside epoch %d (after its batch %d), and its tf.data input draws its "
    "order with no seed (%s): the epoch's order cannot be drawn again, so the batches trained "
    "now are not the samples the interrupted epoch had left (some are seen twice in this "
    "epoch, some not at all), and the run differs from an uninterrupted one. For an exact "
    "resume, give it a seed (Dataset.shuffle(buffer_size, seed=0)), or set a global one "
    "before building the dataset (keras.utils.set_random_seed(0)).")
UNSEEDED_PY_DATASET = (
    "This fit resumes inside epoch %d (after its batch %d) of a PyDataset with shuffle=True "
    "and no seed: Keras orders its batches with Python's random module, which a new kernel "
    "seeds anew, so the batches trained now are not the ones the interrupted epoch had left, "
    "and the run differs from an uninterrupted one. For an exact resume, set a seed before "
    "fit (keras.utils.set_random_seed(0)).")
NOT_REPLAYABLE = (
    "This fit resumes at epoch %d (after its batch %d), and its tf.data input shuffles before "
    "a repeat(), cache() or concatenate(), so it draws new seeds while an iterator runs: the "
    "resume replays only the seeds that making fit's earlier iterators drew, so this epoch's "
    "order is another, and the run differs from an uninterrupted one. For an exact resume, "
    "shuffle after cache() (dataset.cache().shuffle(...)), or end the pipeline with repeat() "
    "and pass steps_per_epoch (fit then draws from one iterator, which a resume replays "
    "batch by batch).")
SHARED_WITH_VALIDATION = (
    "This fit resumes at epoch %d (after its batch %d), and its validation_data shares a "
    "reshuffling shuffle with its training input (take()/skip() of one shuffled dataset): "
    "each validation pass draws that shuffle's seeds too, which the resume does not replay, "
    "so this epoch's order is another, and the run differs from an uninterrupted one. It "
    "also means that every epoch splits the data anew (samples move between training and "
    "validation). Split before shuffling, or shuffle with reshuffle_each_iteration=False "
    "before the split, for an exact resume and a fixed split.")
REUSED_DATASET = (
    "This fit resumes at epoch %d (after its batch %d), and its tf.data input is a dataset "
    "this kernel already iterated (an earlier fit drew from it). A dataset draws the seeds of "
    "each new iterator of its shuffle from a counter that only a newly built dataset starts "
    "again, and this one's is past the order the interrupted epoch had; a copy of it built "
    "anew cannot be used: %s. So this epoch's order is another, and the run differs from an "
    "uninterrupted one. For an exact resume, build the dataset in the cell that calls fit (a "
    "resume runs that cell again), or run the cell that builds it again before resuming.")
REUSED_GENERATOR = (
    "This fit resumes at epoch %d (after its batch %d) with a Python generator that an "
    "earlier fit in this kernel already drew from: a generator cannot start again, so the "
    "batches the resume draws to reach the run's position are others than the run trained, "
    "and the run differs from an uninterrupted one. For an exact resume, make the generator "
    "in the cell that calls fit (a resume runs that cell again).")
NO_POSITION = (
    "The checkpoint %s holds no position of the fit's input (it was written before that was "
    "saved): this fit starts epoch %d with a new iterator of its input (%s) and skips its "
    "first %d batches, which an uninterrupted run would not have drawn if the input's order "
    "changes from epoch to epoch.")
UNREADABLE_FIT = (
    "This fit resumes at epoch %d (after its batch %d), and its input's position cannot be "
    "kept on this TensorFlow and Keras (`%%supervise versions` says why): it starts the epoch "
    "with a new iterator and skips its first %d batches, which may differ from an "
    "uninterrupted run.")
CHANGED = (
    "The input of this fit changed since the checkpoint %s was written. Received: %s. "
    "Expected %s (what fit had then). Its position cannot be kept: the resume continues "
    "epoch %d after batch %d of %s (the share of the epoch it had done, batch %d of %s), and "
    "the run differs from an uninterrupted one. Give fit the input it had for an exact "
    "resume, or train the new input in a new logdir.")


def _count(nodes, made: int) -> None:
    for node in nodes:
        _ITERATED[node] = _ITERATED.get(node, 0) + made


def _shown(value: int) -> str:
    return "unknown" if value == UNKNOWN else str(value)


def _seeded() -> bool:
    """True when a global seed is set (TensorFlow's, or Keras' for all of them)."""
    return compat.global_seed() is not None or compat.keras_seed_set()


class FitInput:
    """The input of one fit under ``sv.callback``, in the training thread: what it is, which of
    fit's iterators of it the next batch comes from, and how far that one was drawn
    (``saved``); on a resume, the replay that puts a new input where the run's was
    (``resume``). See the module docstring."""

    def __init__(self, model):
        self._model = model
        # Where this Keras lacks what is read here, the run said so at its start.
        self._epochs = compat.fit_epoch_iterator(model) if capabilities.holds("data order") \
            else None
        adapter = self._epochs.data_adapter if self._epochs is not None else None
        self.kind = KINDS.index(compat.input_kind(adapter)) if adapter is not None else OTHER
        self._adapter = adapter
        steps = self._epochs.num_batches if self._epochs is not None else None
        length = None
        if self.kind == ARRAYS:
            length = compat.array_samples(adapter)
        elif self.kind in (TF_DATA, PY_DATASET):
            length = adapter.num_batches
        batch_size = getattr(adapter, "batch_size", None)
        self.signature = tuple(UNKNOWN if v is None else int(v)
                               for v in (self.kind, length, batch_size, steps))
        # What earlier fits in this process did to this very input (module docstring).
        self._counted, self._reused = [], False  # the transformations fit's iterators count for
        self._start = 0  # the count of those iterators where the run's fit started
        self._copy = None  # (the user's dataset, its transformations) when fit iterates a copy
        if self.kind == TF_DATA:
            dataset = compat.adapter_dataset(adapter)
            self._counted = compat.reshuffling_nodes(dataset) if dataset is not None else []
            self._start = max((_ITERATED.get(node, 0) for node in self._counted), default=0)
            self._reused = self._start > 0
        elif self.kind == GENERATOR:
            given = compat.fit_argument(model, "x")
            self._reused = given in _DRAWN
            try:
                _DRAWN.add(given)
            except TypeError:  # None (fit's arguments not found), or not weakly referable
                pass
        self.predraw = 0    # batches to draw (and drop) before the resumed epoch's skip
        self.made = 0       # iterators fit made of the input, as the run counted them
        self._last = None   # a weak reference to the iterator fit drew from last
        self._last_index = 1
        self._base = 0      # batches drawn from that one before this epoch
        self._next = (1, 0)  # (iterator, drawn) of the next epoch's first batch
        if self._epochs is not None:
            compat.count_iterators(self._epochs, self._made)

    def _made(self) -> None:
        self.made += 1
        _count(self._counted, 1)

    # ---------------------------------------------------------------------------- resume

    def resume(self, saved: Optional[SavedInput], checkpoint: Tuple[int, int], epoch: int,
               batch: int, first_epoch: int, path: Optional[str]) -> Tuple[int, int]:
        """A resume of this fit (which started at ``first_epoch``) from the checkpoint ``path``,
        at (epoch, batches of it done) ``checkpoint``, which recorded ``saved``; the callback
        resumes it at ``epoch``, ``batch`` (the next epoch when that one was complete). This
        replays what the run did to its input (see the module docstring), says once what keeps
        the resume from being exact, and returns the (epoch, batch) to resume at: another one
        when the input changed since."""
        if self._epochs is None:
            if epoch > first_epoch or batch:
                logger.warning(UNREADABLE_FIT, epoch + 1, batch, batch)
            return epoch, batch
        if saved is None:
            if self.kind != ARRAYS and (epoch > first_epoch or batch):
                logger.warning(NO_POSITION, path, epoch + 1, KIND_NAMES[self.kind],
                               batch)
            return epoch, batch
        changed = self._changed(saved)
        if changed:
            return self._continued(saved, changed, *checkpoint, path)
        self.made = saved.iterator - 1
        self._last_index, self._base = saved.iterator, saved.drawn - batch
        self._next = (saved.iterator, saved.drawn)
        self.predraw = saved.drawn - batch
        replay = {TF_DATA: self._replay_dataset, GENERATOR: self._replay_generator,
                  PY_DATASET: self._replay_py_dataset,
                  ARRAYS: self._replay_arrays}.get(self.kind)
        if replay is not None:
            replay(saved, epoch, batch, first_epoch)
        return epoch, batch

    def _changed(self, saved: SavedInput) -> list:
        """[(name, saved, now)] for what the input changed since ``saved`` (where both known)."""
        names = ("input", "samples" if self.kind == ARRAYS else "batches", "batch_size",
                 "batches_per_epoch")
        found = []
        for name, was, now in zip(names, saved[:4], self.signature):
            if was != now and UNKNOWN not in (was, now):
                if name == "input":
                    was, now = KIND_NAMES[was], KIND_NAMES[now]
                found.append((name, was, now))
        return found

    def _continued(self, saved: SavedInput, changed: list, epoch: int, batch: int,
                   path: Optional[str]) -> Tuple[int, int]:
        """Where a resume continues an input that changed: after the same share of the
        epoch (the batches a new batch size takes to reach the samples trained before)."""
        old, new = saved.steps, self.signature[3]
        moved = batch
        if UNKNOWN not in (old, new) and old > 0:
            moved = batch * new // old
        logger.warning(CHANGED, path, ", ".join(f"{n}={v}" for n, _, v in changed),
                       ", ".join(f"{n}={v}" for n, v, _ in changed), epoch + 1, moved,
                       _shown(new), batch, _shown(old))
        if new != UNKNOWN and moved >= new:
            return epoch + 1, 0
        return epoch, moved

    def _replay_dataset(self, saved, epoch, batch, first_epoch) -> None:
        dataset = compat.adapter_dataset(self._adapter)
        nodes = compat.random_nodes(dataset)
        unseeded = sorted({kind for kind, seeded, _, _ in nodes if not seeded})
        self._start = max(saved.start, 0)  # the run's; UNKNOWN before checkpoints held it
        replayed = self._start + saved.iterator - 1
        shared = self._shares_a_shuffle_with_validation(dataset)
        stale = self._rebuild(dataset, replayed, shared) if self._reused else None
        # Earlier fits' iterators (start) drew seeds as the run's did: where the run's draw
        # them while they run, or validation draws them too, so did those.
        earlier = self._start > 0
        if unseeded and saved.drawn:
            logger.warning(UNSEEDED_DATASET, epoch + 1, batch, " and ".join(
                {"shuffle": "Dataset.shuffle", "random": "Dataset.random"}[k] for k in unseeded))
        elif (saved.iterator > 1 or earlier) and any(again and below
                                                     for _, _, again, below in nodes):
            logger.warning(NOT_REPLAYABLE, epoch + 1, batch)
        elif (epoch > first_epoch or earlier) and shared:
            logger.warning(SHARED_WITH_VALIDATION, epoch + 1, batch)
        elif stale and (epoch > first_epoch or batch):
            logger.warning(REUSED_DATASET, epoch + 1, batch, stale)
        if self._copy is None and replayed:
            began = time.perf_counter()
            compat.make_iterators(self._epochs, replayed)
            _count(self._counted, replayed)
            logger.info("Resuming: made and dropped the %d iterators of the dataset that fit "
                        "had made before the one it draws from (%.2f s).", replayed,
                        time.perf_counter() - began)

    def _rebuild(self, dataset, replayed: int, shared: bool) -> Optional[str]:
        """Has fit iterate ``dataset`` built anew (its seed counters at zero), ``replayed``
        iterators of it made and dropped; None if so, else why it cannot (``shared``: its
        validation_data shares its shuffle)."""
        iterated = compat.epoch_dataset(self._epochs)
        if dataset is None or iterated is None:
            return "this Keras keeps the dataset fit iterates where the package does not read it"
        if iterated is not dataset:
            return "fit's tf.distribute strategy distributes it"
        if shared:
            return "its validation_data shares its shuffle, and validation iterates the dataset"
        began = time.perf_counter()
        try:
            compat.set_epoch_dataset(self._epochs, compat.rebuilt_dataset(dataset, COPY_LIMIT))
            compat.make_iterators(self._epochs, replayed)
        except Exception as error:  # pylint: disable=broad-except  # the resume goes on
            compat.set_epoch_dataset(self._epochs, dataset)
            return str(error) if isinstance(error, ValueError) else \
                f"making it failed ({type(error).__name__}: {error})"
        # The copy's iterators leave the user's dataset as it is, until the fit ends (ended).
        self._copy, self._counted = (dataset, self._counted), []
        logger.info("Resuming: this kernel's fits had iterated the dataset already; fit "
                    "iterates a copy built anew from its graph, %d iterators of it made and "
                    "dropped (%.2f s).", replayed, time.perf_counter() - began)
        return None

    def ended(self) -> None:
        """The fit ended. After a copy (``_rebuild``), the user's dataset gets the iterators
        the uninterrupted fit would have made of it, so that a later fit on it (in this cell,
        or a new run) draws the orders it would have drawn."""
        if self._copy is None:
            return
        (dataset, nodes), self._copy = self._copy, None
        behind = self._start + self.made - max((_ITERATED.get(n, 0) for n in nodes), default=0)
        try:
            for _ in range(behind):
                iter(dataset)
        except Exception as error:  # pylint: disable=broad-except  # fit has ended well
            logger.warning("After this resumed fit, its dataset could not be moved to where the "
                           "uninterrupted fit would have left it (%s: %s): a later fit on the "
                           "same dataset object draws other orders than it would have.",
                           type(error).__name__, error)
            return
        _count(nodes, max(behind, 0))

    def _shares_a_shuffle_with_validation(self, dataset) -> bool:
        """True when fit's ``validation_data`` is a dataset that shares a reshuffling random
        transformation with the training input: each validation pass then draws that one's
        seeds too, which the replay does not count."""
        validation = compat.fit_argument(self._model, "validation_data")
        if not isinstance(validation, tf.data.Dataset) or dataset is None:
            return False
        shared = {id(node) for node in compat.reshuffling_nodes(dataset)}
        return any(id(node) in shared for node in compat.reshuffling_nodes(validation))

    def _replay_generator(self, saved, epoch, batch, first_epoch) -> None:
        if self._reused and (epoch > first_epoch or batch):
            logger.warning(REUSED_GENERATOR, epoch + 1, batch)
        if saved.iterator > 1:  # the generator had run out; fit draws its first batches again
            compat.drain_generator(self._adapter)

    def _replay_py_dataset(self, saved, epoch, batch, first_epoch) -> None:
        py_dataset = self._adapter.py_dataset
        shuffles = compat.py_dataset_shuffles(self._adapter)
        if shuffles and batch and not _seeded():
            logger.warning(UNSEEDED_PY_DATASET, epoch + 1, batch)
        ended = epoch - first_epoch
        passes = 0
        if shuffles and self.signature[1] != UNKNOWN:
            passes = ended if self._epochs.steps_per_epoch is None else saved.iterator - 1
        for done in range(max(ended, passes)):
            if done < ended:
                py_dataset.on_epoch_begin()
            if done < passes:
                compat.shuffle_batch_indices(self.signature[1])
            if done < ended:
                py_dataset.on_epoch_end()

    def _replay_arrays(self, saved, epoch, batch, first_epoch) -> None:
        if batch and compat.shuffles_arrays(self._adapter) and compat.global_seed() is None:
            logger.warning(RESHUFFLED, epoch + 1, batch)

    # ---------------------------------------------------------------------------- position

    def used(self, iterator) -> None:
        """Fit calls its train function with ``iterator`` (training thread). The first time,
        a resume draws (and drops) the batches the run had drawn from it before this epoch;
        then the resumed epoch's skip draws those of this epoch."""
        if self.predraw:
            for _ in range(self.predraw):
                next(iterator)
            compat.count_drawn(self._epochs, self.predraw)
            self.predraw = 0
        last = self._last() if self._last is not None else None
        if iterator is last:
            return
        if self._last is not None:
            self._base = 0  # a new iterator, after the first (whose base a resume set)
        self._last_index = self.made
        self._last = weakref.ref(iterator)

    def epoch_ended(self, done: int) -> None:
        """The epoch ended with ``done`` batches drawn in it: where the next one starts."""
        last = self._last() if self._last is not None else None
        total = self._base + done
        current = compat.current_iterator(self._epochs) if self._epochs is not None else None
        if self._epochs is None or self._epochs.steps_per_epoch is None or current is None:
            self._next = (self.made + 1, 0)   # fit makes a new iterator at the epoch's start
        elif current is last:
            self._next = (self._last_index, total)
            self._base = total
        else:                                 # made when the last one ran through its data
            self._next = (self.made, 0)

    def saved(self, epoch: int, batch: int) -> SavedInput:
        """The record of a checkpoint at ``epoch`` with ``batch`` batches of it done."""
        del epoch  # the batch says it: 0 is before the epoch's first, else inside it
        if batch > 0:
            return SavedInput(*self.signature, self._last_index, self._base + batch,
                              self._start)
        return SavedInput(*self.signature, *self._next, self._start)
