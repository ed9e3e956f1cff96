"""The state of a fit's callbacks, saved with each checkpoint and restored on a resume.

Keras' stateful callbacks decide at each epoch's end from what earlier epochs saw:
``EarlyStopping`` counts the epochs without improvement and remembers the best value,
``ReduceLROnPlateau`` its wait and cooldown, ``ModelCheckpoint(save_best_only=True)`` the best
value it saved at. A resume that starts them afresh stops late (or never), decays late, and
writes a worse model as "best". So their state is saved as plain JSON with every checkpoint
(never pickled) and given back to them on a resume, before the first epoch of the resumed fit
begins (after every callback's ``on_train_begin``, which resets them).

What is saved, per callback:

* Keras' own: ``EarlyStopping`` (wait, stopped_epoch, best, best_epoch, and the best weights
  of ``restore_best_weights=True``, as variables of the checkpoint), ``ReduceLROnPlateau``
  (wait, cooldown_counter, best), ``ModelCheckpoint`` (best, and the batch counters of an
  integer ``save_freq``), ``History`` (the epochs of earlier sessions and their logs: the
  ``History`` that ``fit`` returns holds every epoch), ``CSVLogger`` (the rows it wrote: a
  resume rewrites them, or cuts the rows written after the checkpoint, so the file is the
  uninterrupted run's), ``TensorBoard`` (its batch counters), ``SwapEMAWeights`` (whether the
  model holds the averages).
* A callback of the user's, or a subclass of one of those, that has ``get_state()`` (a dict of
  plain JSON values: strings, numbers, booleans, None, and lists and dicts of them) and
  ``set_state(state)``: what it returns, given back (see docs/resume.md).
* Any other callback holds no state here (``TerminateOnNaN``, ``LearningRateScheduler``: the
  epoch and the restored learning rate are all they read). A user's own without the two
  methods starts afresh on a resume; when it has attributes of its own (which may be state:
  counters, a best value), the resume says so once, naming them.

Callbacks are told apart by their type and order: the n-th callback of a type in fit's list
takes the state the n-th of that type saved. A callback with no saved counterpart (one added
to the list since) starts afresh and a saved state without one is not used, each said once.
"""
import json
import os
from typing import Callable, Dict, List, Optional, Tuple

import keras
import numpy as np

from .. import compat
from .._validate import invalid

Getter = Callable[[object], dict]
Setter = Callable[[object, dict], None]


def _number(value):
    """A plain float (or None) from a Keras monitor value (a NumPy or Python number)."""
    return None if value is None else float(value)


def _attributes(*names: str, numbers: Tuple[str, ...] = ()) -> Tuple[Getter, Setter]:
    """The state of a callback as some of its attributes (``numbers``: floats or None)."""
    def get(callback) -> dict:
        return {name: (_number(getattr(callback, name, None)) if name in numbers
                       else getattr(callback, name, None)) for name in names}

    def set_(callback, state: dict) -> None:
        for name in names:
            if name in state:
                setattr(callback, name, state[name])
    return get, set_


def _history() -> Tuple[Getter, Setter]:
    def get(callback) -> dict:
        return {"epoch": list(getattr(callback, "epoch", [])),
                "history": {k: [_plain(v) for v in values]
                            for k, values in callback.history.items()}}

    def set_(callback, state: dict) -> None:
        callback.epoch = list(state["epoch"])
        callback.history = {k: list(v) for k, v in state["history"].items()}
    return get, set_


def _csv_logger() -> Tuple[Getter, Setter]:
    """The rows CSVLogger wrote: its file's length (with ``append=True`` the file keeps what
    earlier runs wrote; a resume cuts it back to that length) or its text (``append=False``:
    ``on_train_begin`` empties the file; a resume writes the text back), and its columns. A
    file that is not local (``gs://...``) is left as Keras writes it."""
    def get(callback) -> dict:
        if "://" in callback.filename:
            return {"size": None}
        f = getattr(callback, "csv_file", None)  # Keras before 3.11 sets it at train begin
        if f is not None and not f.closed:
            f.flush()
        try:
            size = os.path.getsize(callback.filename)
        except OSError:
            size = 0
        text = None
        if not callback.append and size:
            with open(callback.filename, encoding="utf-8", newline="") as saved:
                text = saved.read()
        return {"size": size, "text": text, "keys": callback.keys}

    def set_(callback, state: dict) -> None:
        f = getattr(callback, "csv_file", None)
        if state["size"] is None or "://" in callback.filename or f is None:
            return
        if callback.append:
            f.truncate(state["size"])
        elif state["text"]:
            f.write(state["text"])
            f.flush()
        if state["size"]:
            callback.keys = state["keys"]
            callback.append_header = False  # the header is among the rows kept
    return get, set_


# Keras' callbacks whose decisions depend on what earlier epochs saw, and their state (the
# private attributes among it: compat).
_PRIVATE = compat.callback_state_attributes()
_KERAS: Dict[type, Tuple[Getter, Setter]] = {
    keras.callbacks.EarlyStopping: _attributes(
        "wait", "stopped_epoch", "best", "best_epoch", numbers=("best",)),
    keras.callbacks.ReduceLROnPlateau: _attributes(
        "wait", "cooldown_counter", "best", numbers=("best",)),
    keras.callbacks.ModelCheckpoint: _attributes(
        "best", *_PRIVATE.get(keras.callbacks.ModelCheckpoint, ()), numbers=("best",)),
    keras.callbacks.History: _history(),
    keras.callbacks.CSVLogger: _csv_logger(),
    **{cls: _attributes(*names) for cls, names in _PRIVATE.items()
       if cls is not keras.callbacks.ModelCheckpoint},
}


def _plain(value):
    """``value`` with NumPy scalars made Python numbers; ValueError for what JSON cannot hold
    as it is (a tuple, an array, an object)."""
    if isinstance(value, (np.generic, np.ndarray)) and np.ndim(value) == 0:
        value = value.item()
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {k: _plain(v) for k, v in value.items()}
    raise ValueError(repr(value)[:80])


def key(callback) -> str:
    """How a callback's type is named in a checkpoint: its module and qualified name."""
    kind = type(callback)
    return f"{kind.__module__}.{kind.__qualname__}"


def _protocol(callback) -> Optional[Tuple[Getter, Setter]]:
    """How the state of ``callback`` is read and given back, or None (it has none here)."""
    if callable(getattr(callback, "get_state", None)) and \
            callable(getattr(callback, "set_state", None)):
        return (lambda c: c.get_state()), (lambda c, s: c.set_state(s))
    for kind in type(callback).__mro__:
        if kind in _KERAS:
            return _KERAS[kind]
    return None


# The callbacks that keep arrays beside their state, and where: EarlyStopping's best weights
# (restore_best_weights=True), model-sized, go into the checkpoint as variables, not JSON.
_ARRAYS: Dict[type, str] = {keras.callbacks.EarlyStopping: "best_weights"}


def _arrays_of(callback) -> Optional[str]:
    """The attribute of ``callback`` that holds a list of arrays to save, or None."""
    return next((name for kind, name in _ARRAYS.items() if isinstance(callback, kind)), None)


def _own_attributes(callback) -> List[str]:
    """The attributes a callback of the user's (not one of Keras') set beyond what every
    Callback has: what may be state that a resume without ``get_state`` loses."""
    if type(callback).__module__.split(".")[0] == "keras":
        return []
    return sorted(name for name in vars(callback)
                  if name not in _BASE_ATTRIBUTES and not name.startswith("__"))


_BASE_ATTRIBUTES = frozenset(vars(keras.callbacks.Callback())) | {"model", "validation_data"}


class CallbackStates:
    """The stateful callbacks of one fit (``callbacks``: fit's list, in its order, without the
    supervisor's own): ``capture()`` at a save, ``restore(saved)`` on a resume. Arrays go
    through ``keep(name, arrays)`` at a save and come back from ``restored(name)``
    (``Checkpointer.keep_arrays``, ``restored_arrays``)."""

    def __init__(self, callbacks: list, keep: Callable[[str, list], None],
                 restored: Callable[[str], Optional[list]]):
        self._entries: List[Tuple[str, object, Getter, Setter]] = []
        self._unsaved: List[Tuple[str, List[str]]] = []
        for callback in callbacks:
            protocol = _protocol(callback)
            if protocol is not None:
                self._entries.append((key(callback), callback, *protocol))
            elif (attributes := _own_attributes(callback)):
                self._unsaved.append((type(callback).__name__, attributes))
        self._keep, self._restored = keep, restored
        self._states()  # a get_state() that cannot be saved fails before training starts

    def capture(self) -> List[dict]:
        """[{"type": key, "state": its JSON state, "arrays": the name its arrays are kept
        under, if any}] of the stateful callbacks, in order."""
        captured = []
        for entry, (_, callback, _, _) in zip(self._states(), self._entries):
            attribute = _arrays_of(callback)
            arrays = getattr(callback, attribute, None) if attribute else None
            if arrays is not None:
                entry["arrays"] = f"callback_arrays_{len(captured)}"
                self._keep(entry["arrays"], arrays)
            captured.append(entry)
        return captured

    def _states(self) -> List[dict]:
        """[{"type": key, "state": its JSON state}] of the stateful callbacks, in order."""
        captured = []
        for name, callback, get, _ in self._entries:
            state = get(callback)
            try:
                if not isinstance(state, dict):
                    raise ValueError(repr(state)[:80])
                state = _plain(state)
                json.dumps(state)
            except ValueError as e:
                raise ValueError(invalid(
                    f"{type(callback).__name__}.get_state()", state,
                    "a dict of plain JSON values (string keys; strings, numbers, booleans, "
                    "None, and lists and dicts of them): it is saved as JSON with each "
                    f"checkpoint, and {e} is none", shown=repr(state)[:80])) from None
            captured.append({"type": name, "state": state})
        return captured

    def restore(self, saved: Optional[List[dict]]) -> List[str]:
        """Gives each callback the state saved by the callback of its type and rank in the
        checkpoint's fit (``saved``; None: the checkpoint holds no callbacks' state). Returns
        what could not be matched, one note each."""
        notes = [f"{name} has attributes of its own ({', '.join(names)}) but no get_state() and "
                 "set_state(), so none of them is saved: it starts afresh on this resume. If "
                 "they change during training, give it the two methods (docs/resume.md) to "
                 "resume it as an uninterrupted fit would." for name, names in self._unsaved]
        if saved is None:
            # (History alone decides nothing: it holds only this session's epochs then.)
            deciding = [type(c).__name__ for _, c, _, _ in self._entries
                        if not isinstance(c, keras.callbacks.History)]
            if deciding:
                notes.append("The checkpoint holds no callbacks' state (it was written before "
                             "that was saved), so these start afresh: " + ", ".join(deciding) +
                             ". This resumed fit may stop, decay the learning rate or pick a "
                             "best model otherwise than an uninterrupted one.")
            return notes
        unused = list(saved)
        for name, callback, _, set_ in self._entries:
            match = next((entry for entry in unused if entry["type"] == name), None)
            if match is None:
                notes.append(f"{type(callback).__name__} has no state in the checkpoint (it "
                             "was not among the callbacks of the fit that wrote it): it starts "
                             "afresh.")
                continue
            unused.remove(match)
            set_(callback, match["state"])
            if "arrays" in match:  # written with the JSON, in the same checkpoint
                setattr(callback, _arrays_of(callback), self._restored(match["arrays"]))
        for entry in unused:
            notes.append(f"The checkpoint holds the state of a {entry['type'].rsplit('.', 1)[-1]}"
                         " callback, which this fit does not have: it is not used.")
        return notes

