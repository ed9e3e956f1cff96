"""One live run trains an object at a time (the eager counterpart of the graph that a live run
finalizes).

Two runs fitting one Keras model at once would both "finish" with a model that took the steps of
both, and each logdir would hold checkpoints whose step counts nothing. So when a run names what
it trains (``sv.track``, or ``model.fit`` with ``sv.callback``), it claims those objects and the
variables they hold (a layer shared by two models is caught too), before anything is restored
into them; a second live run that names any of them is refused with ``RunConflictError`` naming
the run that holds it. The claim ends with the session.
"""
import threading
from typing import Dict, List, Tuple

from ..backend import RunConflictError

# id(object) -> (the object, kept alive so that its id is not reused; the holder; the run's
# name). Guarded by _LOCK.
_HELD: Dict[int, Tuple[object, object, str]] = {}
_LOCK = threading.Lock()


def _held_by(value) -> List[object]:
    """``value`` and the variables it holds."""
    try:
        variables = list(getattr(value, "variables", ()) or ())
    except Exception:  # pylint: disable=broad-except  (a property that needs a built model)
        variables = []
    return [value, *variables]


def claim(holder, run_name: str, objects: Dict[str, object]) -> None:
    """Claims ``objects`` (by name, as tracked) for ``holder``, the backend of run
    ``run_name``; raises RunConflictError, claiming nothing, when another holder has one."""
    wanted = {name: _held_by(value) for name, value in objects.items()}
    with _LOCK:
        for name, values in wanted.items():
            for value in values:
                held = _HELD.get(id(value))
                if held is not None and held[1] is not holder:
                    other = held[2]
                    what = name if value is objects[name] else f"a variable of {name}"
                    raise RunConflictError(
                        f"Run {other!r} is training {what} ({type(objects[name]).__name__}): "
                        "one live run trains a model at a time. Stop it first with "
                        f"`%supervise stop {other}` (or jupyter_supervisor.get_run({other!r})"
                        ".stop()). Or train another copy in this run "
                        "(keras.models.clone_model(model), compiled anew).")
        for values in wanted.values():
            for value in values:
                _HELD[id(value)] = (value, holder, run_name)


def release(holder) -> None:
    """Ends every claim of ``holder`` (the session ended)."""
    with _LOCK:
        for key in [k for k, held in _HELD.items() if held[1] is holder]:
            del _HELD[key]
