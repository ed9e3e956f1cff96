"""Renders scalar series as a PNG with matplotlib's Figure and Agg canvas (``PlotRenderer``,
never pyplot): the image a saved notebook keeps of a run's final curves, headed by what the run
came to (its name, status and step, and its error). The live curves are drawn by the browser
(chart.js), in the same colour (``text.PALETTE``) and with the same number format.

pyplot keeps global state and the inline backend flushes its figures into whichever cell runs
next; a ``Figure`` with its own ``FigureCanvasAgg`` is private to its owner and safe to draw from
a background thread. One ``PlotRenderer`` per panel reuses one Figure for every render.
"""
import io
import math
import threading
from typing import Mapping, Optional, Sequence

import numpy as np
from PIL import Image
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, MaxNLocator

from .text import PALETTE, format_step, format_value

# Figures are private to their renderer, but matplotlib shares font objects (FreeType handles
# in a cache) between all figures; two panels rendering at once on two threads would use them
# concurrently. Renders are short and rare (at most about one a second per panel): serialize.
_RENDER_LOCK = threading.Lock()
# The heading's lines: the run's heading in the text colour, its error in a red that reads on
# the white image (7:1).
_HEADING_PX = 22
_TEXT_COLOUR = "#212121"
_ERROR_COLOUR = "#b71c1c"


def reduce_points(steps: np.ndarray, values: np.ndarray, mins: np.ndarray, maxs: np.ndarray,
                  target: int):
    """Merges runs of neighbouring points so at most about ``target`` remain.

    Each merged point takes the last step and the mean value of its run, and the envelope
    (min of mins, max of maxs), so the drawn band still covers every raw value.
    """
    n = len(steps)
    if n <= target:
        return steps, values, mins, maxs
    size = math.ceil(n / target)
    starts = np.arange(0, n, size)
    ends = np.minimum(starts + size, n)
    with np.errstate(invalid="ignore"):
        sums = np.add.reduceat(values, starts)
    return (steps[ends - 1], sums / (ends - starts), np.fmin.reduceat(mins, starts),
            np.fmax.reduceat(maxs, starts))


class PlotRenderer:
    """Draws one small plot per tag (a grid of ``columns``), x = global step, to PNG bytes.

    Each plot shows the mean line and, where old points were merged, the min/max envelope as a
    shaded band; its title gives the tag and the newest value. The axes are kept between
    renders while the tags stay the same, and only their data changes. Not thread-safe by
    itself: one renderer belongs to one panel's refresher.
    """

    format = "png"

    def __init__(self, *, width_px: int = 720, row_height_px: int = 170, columns: int = 2,
                 dpi: int = 72, colours: int = 64):
        for name, value, minimum in (("width_px", width_px, 100),
                                     ("row_height_px", row_height_px, 60),
                                     ("columns", columns, 1), ("dpi", dpi, 20),
                                     ("colours", colours, 0)):
            if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                raise ValueError(
                    f"Invalid value for argument `{name}`. Received: {name}={value!r}. "
                    f"Expected an integer >= {minimum}.")
        if colours > 256:
            raise ValueError(
                f"Invalid value for argument `colours`. Received: colours={colours}. "
                "Expected 0 (full colour) or a palette size up to 256.")
        self._width_px = width_px
        self._row_height_px = row_height_px
        self._columns = columns
        self._dpi = dpi
        self._colours = colours
        self._figure = Figure(dpi=dpi)
        self._canvas = FigureCanvasAgg(self._figure)
        self._layout: Optional[tuple] = None   # what the current axes were built for
        self._plots: list = []                  # per tag: [axes, line, band or None]
        self._heading: list = []                # the heading's Text artists

    def render(self, scalars: Mapping[str, Sequence[np.ndarray]],
               tags: Optional[Sequence[str]] = None, *, heading: str = "",
               error: str = "") -> bytes:
        """PNG bytes of ``scalars[tag]`` = (steps, values, mins, maxs) for each tag in ``tags``,
        under ``heading`` and ``error`` (a line each, left out when empty).

        ``tags`` defaults to every tag of ``scalars`` in sorted order; tags that have no
        points are left out. With nothing to draw, the image says so.
        """
        if tags is None:
            tags = sorted(scalars)
        tags = tuple(tag for tag in tags if tag in scalars and len(scalars[tag][0]))
        lines = [(text, colour) for text, colour in ((heading, _TEXT_COLOUR),
                                                     (error, _ERROR_COLOUR)) if text]
        with _RENDER_LOCK:
            if (tags, len(lines)) != self._layout:
                self._build(tags, len(lines))
            for artist, (text, colour) in zip(self._heading, lines):
                artist.set_text(text)
                artist.set_color(colour)
            for tag, plot in zip(tags, self._plots):
                self._update(plot, tag, scalars[tag])
            self._canvas.draw()
            return self._png()

    def _build(self, tags: Sequence[str], heading_lines: int) -> None:
        figure = self._figure
        figure.clear()
        self._plots = []
        self._layout = (tuple(tags), heading_lines)
        columns = min(self._columns, max(1, len(tags)))
        rows = max(1, math.ceil(len(tags) / columns))
        top_px = heading_lines * _HEADING_PX
        height_px = rows * self._row_height_px + top_px
        figure.set_size_inches(self._width_px / self._dpi, height_px / self._dpi)
        self._heading = [
            figure.text(8 / self._width_px, 1 - (6 + i * _HEADING_PX) / height_px, "",
                        ha="left", va="top", fontsize=11, fontweight="bold" if i == 0 else None)
            for i in range(heading_lines)]
        if not tags:
            figure.text(0.5, 0.5 - top_px / height_px / 2, "No scalar summaries yet",
                        ha="center", va="center", color="#666666")
            return
        axes = figure.subplots(rows, columns, squeeze=False)
        for index, ax in enumerate(axes.flat):
            if index >= len(tags):
                ax.set_visible(False)
                continue
            # One run: the colour the panel draws its curves in.
            (line,) = ax.plot([], [], color=PALETTE[0], linewidth=1.3)
            ax.set_title("", fontsize=9, loc="left")
            ax.tick_params(labelsize=8)
            ax.xaxis.set_major_locator(MaxNLocator(nbins=5, integer=True))
            ax.xaxis.set_major_formatter(FuncFormatter(format_step))
            ax.grid(True, alpha=0.3, linewidth=0.6)
            if index + columns >= len(tags):
                ax.set_xlabel("step", fontsize=8)
            self._plots.append([ax, line, None])
        figure.subplots_adjust(left=60 / self._width_px, right=1 - 12 / self._width_px,
                               bottom=34 / height_px, top=1 - (22 + top_px) / height_px,
                               hspace=0.5, wspace=0.22)

    def _update(self, plot: list, tag: str, series: Sequence[np.ndarray]) -> None:
        ax, line, band = plot
        # More points than pixel columns only add ink and PNG bytes: merge them first.
        steps, values, mins, maxs = reduce_points(
            *(np.asarray(array) for array in series[:4]),
            target=self._width_px // min(self._columns, len(self._plots)))
        values = np.where(np.isinf(values), np.nan, values)
        if band is not None:
            band.remove()
            plot[2] = None
        finite = np.isfinite(mins) & np.isfinite(maxs)
        if not np.array_equal(mins[finite], maxs[finite]):
            plot[2] = ax.fill_between(steps[finite], mins[finite], maxs[finite],
                                      color=line.get_color(), alpha=0.22, linewidth=0)
        line.set_data(steps, values)
        line.set_marker("." if len(steps) == 1 else "None")
        ax.set_title(f"{tag} = {format_value(float(values[-1]))} (step {int(steps[-1]):,})",
                     fontsize=9, loc="left")
        ax.set_xlim(*_limits(steps[0], steps[-1], integer=True))
        low = np.concatenate((mins[finite], values[np.isfinite(values)]))
        if len(low):
            ax.set_ylim(*_limits(low.min(), max(maxs[finite].max(initial=-math.inf),
                                                low.max())))

    def _png(self) -> bytes:
        buffer = io.BytesIO()
        if not self._colours:
            self._canvas.print_png(buffer)
            return buffer.getvalue()
        # A palette of a few dozen colours keeps lines and bands crisp and makes the PNG
        # several times smaller than full colour: what goes to the browser every second.
        width, height = self._canvas.get_width_height()
        image = Image.frombuffer("RGBA", (width, height), self._canvas.buffer_rgba(),
                                 "raw", "RGBA", 0, 1)
        image.convert("RGB").quantize(colors=self._colours,
                                      method=Image.Quantize.FASTOCTREE).save(buffer, "png")
        return buffer.getvalue()


def _limits(low: float, high: float, integer: bool = False):
    low, high = float(low), float(high)
    if high <= low:
        pad = 1.0 if integer or low == 0 else abs(low) * 0.05
        return low - pad, high + pad
    pad = (high - low) * 0.04
    return low - pad, high + pad
