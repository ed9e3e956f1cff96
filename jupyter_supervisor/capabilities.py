"""Which TensorFlow and Keras a run has, and which of the package's promises hold on them.

The package declares the oldest TensorFlow and Keras its promises were checked on (``FLOORS``,
the install requirements, docs/versions.md) and tests that floor and the newest release. A
promise that needs a private internal of another library (``compat``) is a feature here: its
probes run once per process, and where the running library lacks what a probe looks for, that
feature is off for every run, which says so once at its start (in the cell and the panel),
with what still holds. ``versions()`` (``jupyter_supervisor.versions()``, ``%supervise versions``) reports the lot.

TensorFlow-free at import: the versions come from the installed distributions' metadata, and
the probes import a library only when a run or the report asks.
"""
import dataclasses
import functools
import importlib.metadata
import threading
from typing import Dict, List, Optional, Tuple

from . import compat

# The oldest releases on which every promise was shown to hold (tests/test_floor.py runs the
# tests that depend on internals there); also in pyproject.toml and docs/versions.md.
FLOORS = {"tensorflow": "2.16", "keras": "3.7"}

# The distributions that install the ``tensorflow`` import package, the usual first.
_TENSORFLOW_DISTRIBUTIONS = ("tensorflow", "tensorflow-cpu", "tensorflow-intel",
                             "tensorflow-macos", "tf-nightly", "tf-nightly-cpu")
_REPORTED = ("ipykernel", "ipywidgets", "anywidget", "IPython", "matplotlib", "numpy")

EAGER, GRAPH, KERNEL = "eager", "graph", "kernel"


@dataclasses.dataclass(frozen=True)
class Feature:
    """A promise that rests on another library's internals.

    Attributes:
      kind: the runs it concerns: EAGER (TF2 code, Keras fit), GRAPH (TF1 code) or KERNEL
        (both, in a notebook).
      promise: what it gives, as the report lists it.
      still: what still holds when it is off (said with the note).
    """
    kind: str
    promise: str
    still: str


FEATURES: Dict[str, Feature] = {
    "fit": Feature(
        EAGER, "Keras fit under sv.callback: checkpoints, and a resume at the checkpoint's "
        "epoch and batch",
        "sv.callback refuses to start (a custom loop with sv.track/sv.step still works)"),
    "data order": Feature(
        EAGER, "a resumed fit draws its input in the order the run had (the epoch's shuffle, "
        "a generator's draws), and a change of the input between runs is said",
        "the weights, the optimizer, the callbacks' state and the epoch are restored; the "
        "resumed epoch starts a new iterator of its input and skips the batches done, so a "
        "shuffled input's order may differ from an uninterrupted run"),
    "callback counters": Feature(
        EAGER, "what ModelCheckpoint (an integer save_freq), TensorBoard (its batch steps) and "
        "SwapEMAWeights counted continues on a resume",
        "those callbacks start their counts again on a resume; every other callback's state "
        "is restored"),
    "build before restore": Feature(
        EAGER, "a resumed fit makes the variables Keras makes at the first step (the "
        "optimizer's, the compiled metrics') before restoring them",
        "the model's weights are restored at the fit's start; the optimizer's and the "
        "metrics' variables when Keras makes them at the first step"),
    "background save": Feature(
        EAGER, "a periodic checkpoint costs the training thread one copy; the write runs "
        "beside training",
        "every checkpoint is written, in the training thread"),
    "checkpoint state file": Feature(
        EAGER, "the checkpoint state file names the kept checkpoints by relative paths "
        "(a logdir can be moved)", "-"),
    "graph reuse": Feature(
        GRAPH, "after a run the notebook can add ops to the graph again", "-"),
    "graph NaN guard": Feature(
        GRAPH, "a graph checkpoint is checked for NaN and infinity before it is written", "-"),
    "graph restore check": Feature(
        GRAPH, "a restore names the variables a checkpoint has no value for", "-"),
    "save when the server dies": Feature(
        KERNEL, "a run saves a final checkpoint when the Jupyter server dies",
        "SIGTERM, SIGHUP, a restart and a shutdown still save first"),
    "save on restart": Feature(
        KERNEL, "a restart or shutdown from the page stops each run with a final checkpoint "
        "first", "SIGTERM and SIGHUP still save first"),
    "output routing": Feature(
        KERNEL, "what a run displays goes to its panel", "-"),
    "figures in the run's output": Feature(
        KERNEL, "a run's matplotlib figures go to its panel, not to another cell", "-"),
}

# A feature whose "still" is "-" is one no run depends on for its promise of an exact resume:
# it is reported, not said at a run's start.


@dataclasses.dataclass(frozen=True)
class Report:
    """The installed versions and each feature's state (``versions()``).

    Attributes:
      libraries: {distribution: version or None when it is not installed}.
      below_floor: the notes on a TensorFlow or Keras older than ``FLOORS``.
      off: {feature: why it is off}, for the features off on this stack.
    """
    libraries: Dict[str, Optional[str]]
    below_floor: Tuple[str, ...]
    off: Dict[str, str]

    def text(self) -> str:
        """The report as the user reads it."""
        lines = ["Installed: " + ", ".join(
            f"{name} {version or '(not installed)'}" for name, version in self.libraries.items())]
        lines.append(f"Checked on: TensorFlow >= {FLOORS['tensorflow']}, Keras >= "
                     f"{FLOORS['keras']} (docs/versions.md).")
        lines.extend(self.below_floor)
        width = max(len(name) for name in FEATURES)
        for name, feature in FEATURES.items():
            state = f"off: {self.off[name]}" if name in self.off else "holds"
            lines.append(f"  {name:<{width}}  {state}  ({feature.promise})")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.text()

    def _repr_pretty_(self, printer, cycle) -> None:  # IPython shows the text, not a repr
        printer.text(self.text())


def installed(distribution: str) -> Optional[str]:
    """The installed version of ``distribution``, or None."""
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def tensorflow_version() -> Optional[str]:
    """The version of the installed distribution that provides ``import tensorflow``."""
    return next((v for v in map(installed, _TENSORFLOW_DISTRIBUTIONS) if v), None)


def _release(version: str) -> Tuple[int, ...]:
    """(major, minor) of ``version`` ("2.19.1", "3.10.0rc1", "2.21.0.dev20260101")."""
    parts = []
    for part in version.split(".")[:2]:
        digits = "".join(c for c in part if c.isdigit()) or "0"
        parts.append(int(digits) if part[:1].isdigit() else 0)
    return tuple(parts)


def _below_floor(libraries: Dict[str, Optional[str]]) -> Tuple[str, ...]:
    found = []
    for name, label in (("tensorflow", "TensorFlow"), ("keras", "Keras")):
        version = libraries.get(name)
        if version and _release(version) < _release(FLOORS[name]):
            found.append(
                f"{label} {version} is older than {FLOORS[name]}, the oldest this package's "
                "promises were checked on: each feature below that it lacks is off, and the "
                f"rest was not tested there. For every promise, install {name}>="
                f"{FLOORS[name]}.")
    return tuple(found)


_LOCK = threading.Lock()
_FOUND: Dict[str, Optional[str]] = {}  # feature -> why it is off (None: holds); once probed


def _probe(kinds: Tuple[str, ...]) -> None:
    """Runs, once per process, the probes of the features of ``kinds`` not probed yet."""
    with _LOCK:
        for name, feature in FEATURES.items():
            if feature.kind not in kinds or name in _FOUND:
                continue
            lacking = [p for p in compat.PROBES if p.feature == name and not p.holds()]
            _FOUND[name] = None if not lacking else "; ".join(
                f"{_label(p.library)} {_library_version(p.library) or '?'} lacks {p.what} "
                f"(checked on {p.checked})" for p in lacking)


def _label(library: str) -> str:
    return {"tensorflow": "TensorFlow", "keras": "Keras"}.get(library, library)


def _library_version(library: str) -> Optional[str]:
    return tensorflow_version() if library == "tensorflow" else installed(library)


def off(feature: str) -> Optional[str]:
    """Why ``feature`` (a key of ``FEATURES``) is off in this process, or None where it holds.
    Probes it the first time it is asked."""
    if feature not in FEATURES:
        raise KeyError(f"no feature {feature!r}: one of {', '.join(FEATURES)}")
    if feature not in _FOUND:
        _probe((FEATURES[feature].kind,))
    return _FOUND[feature]


def holds(feature: str) -> bool:
    """True when ``feature`` holds on the running libraries (``off`` is None)."""
    return off(feature) is None


def start_notes(kind: str) -> List[str]:
    """What a run of ``kind`` (EAGER or GRAPH) says once at its start: a TensorFlow or Keras
    below the floor, and each feature it relies on that is off here, with what still holds."""
    kinds = (kind, KERNEL)
    _probe(kinds)
    notes = list(_below_floor(_libraries()))
    for name, feature in FEATURES.items():
        why = _FOUND.get(name)
        if feature.kind in kinds and why is not None:
            still = "" if feature.still == "-" else f" Still: {feature.still}."
            notes.append(f"Off on this stack: {name} ({feature.promise}): {why}.{still} "
                         "`%supervise versions` lists what holds.")
    return notes


@functools.lru_cache(maxsize=1)
def _libraries() -> Dict[str, Optional[str]]:
    found = {"tensorflow": tensorflow_version(), "keras": installed("keras")}
    found.update((name, installed(name)) for name in _REPORTED)
    return found


def versions(probe: bool = True) -> Report:
    """The installed TensorFlow, Keras and notebook libraries, and for each promise that rests
    on their internals whether it holds here, and why not.

    Args:
      probe: run the probes of every feature not probed yet (this imports TensorFlow and
        Keras); False reports only what earlier runs probed.

    Returns:
      A ``Report``; ``print`` it, or read ``report.off`` ({feature: why it is off}).

    Example:
      >>> import jupyter_supervisor
      >>> print(jupyter_supervisor.versions())     # doctest: +SKIP
    """
    if probe:
        _probe((EAGER, GRAPH, KERNEL))
    libraries = _libraries()
    return Report(libraries=dict(libraries), below_floor=_below_floor(libraries),
                  off={name: why for name, why in _FOUND.items() if why is not None})
