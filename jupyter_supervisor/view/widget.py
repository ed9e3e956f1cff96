"""The browser side's counterpart: the anywidget model the panel and the comparison chart drive,
and the encoding of series as deltas.

anywidget ships the front end (one ES module, no build step: ``chart.js`` then ``panel.js``,
joined) inside the widget's state, so JupyterLab 4, Notebook 7, VS Code and Colab load it without an installed extension.
Small state travels as the ``state`` trait; the points travel as custom messages, each with one
binary buffer (float64), and only the points a view has not seen (``SeriesFeed``).

ipywidgets and anywidget are imported when a widget is really made; without them, that step
says what to install.
"""
import functools
import pathlib
from typing import Dict, List, Mapping, Optional, Tuple

import numpy as np

INSTALL_HINT = ("The jupyter_supervisor panel needs ipywidgets and anywidget: "
                "pip install 'ipywidgets>=8' anywidget (and JupyterLab 4 or Notebook 7 to see it).")

# The front end's files, in the order they are joined into one ES module (chart.js defines
# what panel.js uses; panel.js has the module's default export).
_ESM_FILES = ("chart.js", "panel.js")


def _esm() -> str:
    here = pathlib.Path(__file__).parent
    return "\n".join(here.joinpath(name).read_text(encoding="utf-8") for name in _ESM_FILES)


def ipywidgets():
    """The ipywidgets module, or an ImportError that says what to install."""
    try:
        import ipywidgets as module  # pylint: disable=import-outside-toplevel
    except ImportError as error:
        raise ImportError(INSTALL_HINT) from error
    return module


@functools.lru_cache(maxsize=None)
def view_class():
    """The anywidget class of the panel's view (made once, at the first panel)."""
    ipywidgets()
    try:
        import anywidget  # pylint: disable=import-outside-toplevel
        import traitlets  # pylint: disable=import-outside-toplevel
    except ImportError as error:
        raise ImportError(INSTALL_HINT) from error

    class SupervisorView(anywidget.AnyWidget):
        """One run's panel (``compare=False``) or several runs in one chart (``runs``)."""

        _esm = _esm()
        state = traitlets.Dict().tag(sync=True)
        compare = traitlets.Bool(False).tag(sync=True)
        runs = traitlets.List(traitlets.Unicode()).tag(sync=True)
        smoothing = traitlets.Float(0.6).tag(sync=True)

    return SupervisorView


class SeriesFeed:
    """What one run's series look like to the views: for each tag, the generation and length of
    what was sent, so that the next message carries only the new buckets.

    ``message(scalars, full)`` returns ``(content, buffers)`` for a custom message, or None when
    nothing changed. A part ``{tag, from, n}`` replaces the points from index ``from`` on with n
    points; the buffer holds, part after part, n steps, n values and n wall times.
    """

    def __init__(self, run_name: str):
        self._run = run_name
        self._sent: Dict[str, Tuple[int, int, float, float]] = {}

    def message(self, scalars: Mapping[str, object], full: bool = False
                ) -> Optional[Tuple[dict, List[bytes]]]:
        parts, arrays = [], []
        sent = {} if full else self._sent
        for tag, series in scalars.items():
            n = len(series.steps)
            key = (series.generation, n, float(series.steps[-1]), float(series.values[-1]))
            before = sent.get(tag)
            if before == key:
                continue
            if before is None or before[0] != series.generation or before[1] > n:
                start = 0
            else:
                start = max(0, before[1] - 1)  # the last bucket may have grown meanwhile
            parts.append({"tag": tag, "from": start, "n": n - start})
            arrays += [series.steps[start:], series.values[start:], series.walls[start:]]
            self._sent[tag] = key
        for tag in [tag for tag in self._sent if tag not in scalars]:
            parts.append({"tag": tag, "from": 0, "n": 0})  # its points were all dropped
            del self._sent[tag]
        if not parts and not full:
            return None
        buffer = (np.concatenate([np.asarray(a, dtype="<f8") for a in arrays]).tobytes()
                  if arrays else b"")
        content = {"type": "series", "run": self._run, "reset": bool(full), "parts": parts}
        return content, [buffer]


def decode_series(content: dict, buffer: bytes) -> Dict[str, Tuple[int, np.ndarray, np.ndarray,
                                                                    np.ndarray]]:
    """The parts of a series message as {tag: (from, steps, values, walls)} (what panel.js
    reads; for tests and benchmarks)."""
    data = np.frombuffer(buffer, dtype="<f8")
    out, at = {}, 0
    for part in content["parts"]:
        n = part["n"]
        steps, values, walls = (data[at + i * n:at + (i + 1) * n] for i in range(3))
        at += 3 * n
        out[part["tag"]] = (part["from"], steps, values, walls)
    return out
