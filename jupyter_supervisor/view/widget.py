"""The browser side's counterpart: the anywidget model the panel and the comparison chart drive,
and the encoding of series as deltas.

anywidget ships the front end (one ES module, no build step: the files of ``_ESM_FILES``,
joined, and its CSS, ``theme.css``) inside the widget's state, so JupyterLab 4, Notebook 7,
VS Code and Colab load it without an installed extension. Small state travels as the ``state``
trait, what the user set in a view as the ``settings`` trait; the points travel as custom
messages, each with one binary buffer (float64), and only the points a view lacks
(``SeriesFeed``).

ipywidgets and anywidget are imported when a widget is really made; without them, that step
says what to install.
"""
import functools
import pathlib
import re
from typing import Dict, Mapping, Optional, Sequence, Tuple

import numpy as np

INSTALL_HINT = ("The jupyter_supervisor panel needs ipywidgets and anywidget: "
                "pip install 'ipywidgets>=8' anywidget (and JupyterLab 4 or Notebook 7 to see it).")

# The front end's files, in the order they are joined. anywidget loads one ES module's source,
# so in the browser the files cannot import one another; each is written as a module of its own
# (`import {a, b} from "./scales.js";`, `export function a`) that imports only from files before
# it here, and joined (_join) each runs in a scope of its own and hands on only what it exports,
# as a module would: what a file uses of another is what it imports. The last, panel.js, has
# the module's default export (anywidget's render).
_ESM_FILES = ("scales.js", "dom.js", "theme.js", "paint.js", "chart.js", "link.js", "notify.js",
              "panel.js")
# The front end's rules (anywidget's _css: it puts them in the page once for every view).
_CSS_FILE = "theme.css"

# What _join reads of a file: its imports and exports, whole lines (`[\w\s,]`: a list of
# names, on one line or several).
_IMPORT = re.compile(r'^import \{([\w\s,]*)\} from "\./([\w-]+\.js)";[ \t]*$', re.M)
_EXPORT = re.compile(r"^export ((?:async )?(?:function|class|const|let) (\w+))", re.M)
_ANY_IMPORT_OR_EXPORT = re.compile(r"^(?:import|export)\b.*$", re.M)


def _read(name: str) -> str:
    return pathlib.Path(__file__).with_name(name).read_text(encoding="utf-8")


def _scope(name: str) -> str:
    return "jsv_" + re.sub(r"\W", "_", name[:-len(".js")])


def _join(sources: Sequence[Tuple[str, str]]) -> str:
    """One ES module made of the files ``sources`` ([(file name, text)], in order): each but the
    last in a function's scope that returns what the file exports, its imports taken from those
    of the files before it; the last at the module's top, with its default export.

    Raises ValueError, as a browser would refuse the files as modules, for an import from a
    file not before it or of a name that file does not export, and for any import or export
    other than ``import {a, b} from "./file.js";``, ``export`` before a declaration and the
    last file's ``export default``.
    """
    parts, exported = [], {}
    for index, (name, text) in enumerate(sources):
        last = index == len(sources) - 1

        def imported(match, name=name):
            names = [n.strip() for n in match.group(1).split(",") if n.strip()]
            origin = match.group(2)
            if origin not in exported:
                raise ValueError(f"{name} imports from {origin}, which is not joined before it "
                                 f"(widget._ESM_FILES)")
            missing = [n for n in names if n not in exported[origin]]
            if missing:
                raise ValueError(f"{name} imports {', '.join(missing)} from {origin}, which "
                                 f"does not export it")
            return f"const {{{', '.join(names)}}} = {_scope(origin)};"

        body = _IMPORT.sub(imported, text)
        exports = exported[name] = [match.group(2) for match in _EXPORT.finditer(body)]
        body = _EXPORT.sub(r"\1", body)
        for match in _ANY_IMPORT_OR_EXPORT.finditer(body):
            if not (last and match.group(0).startswith("export default ")):
                raise ValueError(f"{name}: {match.group(0)!r} is not joined: a file imports as "
                                 f"'import {{a, b}} from \"./file.js\";' and exports declarations")
        if last and exports:
            raise ValueError(f"{name} is the last file: it exports only its default")
        if last:
            parts.append(f"// ==== {name}\n{body}")
        else:
            parts.append(f"// ==== {name}\nconst {_scope(name)} = (() => {{\n{body}"
                         f"return {{{', '.join(exports)}}};\n}})();\n")
    return "\n".join(parts)


def _esm() -> str:
    return _join([(name, _read(name)) for name in _ESM_FILES])


def _css() -> str:
    return _read(_CSS_FILE)


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
        _css = _css()
        state = traitlets.Dict().tag(sync=True)
        compare = traitlets.Bool(False).tag(sync=True)
        runs = traitlets.List(traitlets.Unicode()).tag(sync=True)
        # What the user set in a view (log scale, smoothing, x axis, hidden tags, zooms, the
        # timeline open): written by the views, kept here so that every view of the model,
        # one re-created after a page reload too, shows it. The kernel never writes it.
        settings = traitlets.Dict().tag(sync=True)

    return SupervisorView


# What a view holds of one tag: (generation, number of points, last step, last wall time).
Known = Tuple[int, int, float, float]


def _known_of(have) -> Dict[Tuple[str, str], Known]:
    """A view's ``have`` ({run: {tag: [generation, n, last step, last wall]}}, from the browser)
    as {(run, tag): Known}; what does not read as that is left out (sent again in full)."""
    known = {}
    if not isinstance(have, dict):
        return known
    for run, tags in have.items():
        if not isinstance(tags, dict):
            continue
        for tag, entry in tags.items():
            try:
                generation, n, step, wall = entry
                known[(str(run), str(tag))] = (int(generation), int(n), float(step), float(wall))
            except (TypeError, ValueError):
                continue
    return known


class SeriesFeed:
    """The points of one or more runs as custom messages that carry only what a view lacks.

    A part ``{run, tag, gen, from, n}`` replaces that series' points from index ``from`` on with
    n points of generation ``gen`` (``ScalarSeries.generation``); the message's one buffer holds,
    part after part, n steps, n values and n wall times (float64), then, for each part that
    says ``merged`` (its points are means of several), n minimums, n maximums and n counts
    (float32: the band). A view applies a part that
    starts at 0, or one of the generation it holds that starts within what it holds; any other
    part tells it that it missed one, and it asks (``answer``). ``push`` gives what changed since
    the last push (the refresher's messages to every view); ``answer`` what one view lacks, from
    what it says it holds (a view's request, answered on the comm thread).
    """

    def __init__(self):
        self._pushed: Dict[Tuple[str, str], Known] = {}

    def push(self, runs: Mapping[str, Mapping[str, object]]) -> Optional[Tuple[list, bytes]]:
        """(parts, buffer) of what changed since the last push, or None when nothing did."""
        parts, buffer = _delta(runs, self._pushed, update=True)
        return (parts, buffer) if parts else None

    @staticmethod
    def answer(runs: Mapping[str, Mapping[str, object]], have) -> Tuple[list, bytes]:
        """(parts, buffer) of what a view that holds ``have`` lacks."""
        return _delta(runs, _known_of(have), update=False)


def _delta(runs, known: Dict[Tuple[str, str], Known], update: bool) -> Tuple[list, bytes]:
    parts, arrays, bands = [], [], []
    for run, scalars in runs.items():
        for tag, series in scalars.items():
            n = len(series.steps)
            key = (int(series.generation), n, float(series.steps[-1]), float(series.walls[-1]))
            before = known.get((run, tag))
            if before == key:
                continue
            start = 0
            if before is not None and before[0] == key[0] and 0 < before[1] <= n:
                last = before[1] - 1  # the view's last point: the bucket may have grown since
                same = (float(series.steps[last]), float(series.walls[last])) == before[2:]
                start = before[1] if same else last
            part = {"run": run, "tag": tag, "gen": key[0], "from": start, "n": n - start}
            arrays += [series.steps[start:], series.values[start:], series.walls[start:]]
            if getattr(series, "merged", False):
                # The band's bounds are values the run logged (float32), the counts small.
                part["merged"] = True
                bands += [series.mins[start:], series.maxs[start:], series.counts[start:]]
            parts.append(part)
            if update:
                known[(run, tag)] = key
    for run, tag in [key for key in known if key[1] not in runs.get(key[0], {})]:
        parts.append({"run": run, "tag": tag, "gen": 0, "from": 0, "n": 0})  # all dropped
        if update:
            del known[(run, tag)]
    buffer = b"".join([np.concatenate([np.asarray(a, dtype="<f8") for a in arrays]).tobytes()
                       if arrays else b"",
                       np.concatenate([np.asarray(a, dtype="<f4") for a in bands]).tobytes()
                       if bands else b""])
    return parts, buffer
