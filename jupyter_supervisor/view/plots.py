"""Renders scalar series for the panel: as SVG the browser draws (``SvgRenderer``, the panel's
default), or as PNG bytes with matplotlib's Figure and Agg canvas (``PlotRenderer``, never pyplot).

The live plots are SVG because a matplotlib render costs the kernel 20-150 ms of CPU, holding the
GIL the training thread needs; writing the same downsampled points as SVG paths costs 1-3 ms.

pyplot keeps global state and the inline backend flushes its figures into whichever cell runs
next; a ``Figure`` with its own ``FigureCanvasAgg`` is private to its owner and safe to draw from
a background thread. One ``PlotRenderer`` per panel reuses one Figure for every render.
"""
import html
import io
import itertools
import math
import threading
from typing import Mapping, Optional, Sequence

import numpy as np
from PIL import Image
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, MaxNLocator

# Figures are private to their renderer, but matplotlib shares font objects (FreeType handles
# in a cache) between all figures; two panels rendering at once on two threads would use them
# concurrently. Renders are short and rare (at most about one a second per panel): serialize.
_RENDER_LOCK = threading.Lock()

# Colours of the tab10 cycle, so the panel looks like the user's other matplotlib plots.
_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b")


def format_step(step: float, _position=None) -> str:
    """A compact step label: 950, 12k, 1.5M."""
    step = float(step)
    for limit, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(step) >= limit:
            text = f"{step / limit:.1f}".rstrip("0").rstrip(".")
            return text + suffix
    return f"{step:.0f}"


def format_value(value: float) -> str:
    """A scalar value in at most about 5 significant digits."""
    if value != value:
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return f"{value:.5g}"


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
        self._layout: Optional[tuple] = None   # the tags the current axes were built for
        self._plots: list = []                  # per tag: [axes, line, band or None]

    @property
    def figure(self) -> Figure:
        """The one Figure every render draws on."""
        return self._figure

    def render(self, scalars: Mapping[str, Sequence[np.ndarray]],
               tags: Optional[Sequence[str]] = None) -> bytes:
        """PNG bytes of ``scalars[tag]`` = (steps, values, mins, maxs) for each tag in ``tags``.

        ``tags`` defaults to every tag of ``scalars`` in sorted order; tags that have no
        points are left out. With nothing to draw, the image says so.
        """
        if tags is None:
            tags = sorted(scalars)
        tags = tuple(tag for tag in tags if tag in scalars and len(scalars[tag][0]))
        with _RENDER_LOCK:
            if tags != self._layout:
                self._build(tags)
            for tag, plot in zip(tags, self._plots):
                self._update(plot, tag, scalars[tag])
            self._canvas.draw()
            return self._png()

    def _build(self, tags: Sequence[str]) -> None:
        figure = self._figure
        figure.clear()
        self._plots = []
        self._layout = tuple(tags)
        columns = min(self._columns, max(1, len(tags)))
        rows = max(1, math.ceil(len(tags) / columns))
        height_px = rows * self._row_height_px
        figure.set_size_inches(self._width_px / self._dpi, height_px / self._dpi)
        if not tags:
            figure.text(0.5, 0.5, "No scalar summaries yet", ha="center", va="center",
                        color="#666666")
            return
        axes = figure.subplots(rows, columns, squeeze=False)
        for index, ax in enumerate(axes.flat):
            if index >= len(tags):
                ax.set_visible(False)
                continue
            colour = _COLOURS[index % len(_COLOURS)]
            (line,) = ax.plot([], [], color=colour, linewidth=1.3)
            ax.set_title("", fontsize=9, loc="left")
            ax.tick_params(labelsize=8)
            ax.xaxis.set_major_locator(MaxNLocator(nbins=5, integer=True))
            ax.xaxis.set_major_formatter(FuncFormatter(format_step))
            ax.grid(True, alpha=0.3, linewidth=0.6)
            if index + columns >= len(tags):
                ax.set_xlabel("step", fontsize=8)
            self._plots.append([ax, line, None])
        figure.subplots_adjust(left=60 / self._width_px, right=1 - 12 / self._width_px,
                               bottom=34 / height_px, top=1 - 22 / height_px,
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
        ax.set_title(f"{tag} = {format_value(float(values[-1]))}  (step {int(steps[-1])})",
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


# -- the live plots: SVG drawn by the browser -----------------------------------------------
#
# A matplotlib render of the panel's plots costs 20-70 ms of CPU in the kernel (text layout and
# Agg rasterizing hold the GIL), once a second while summaries arrive: 2-7 % of a core taken
# from the training thread. SvgRenderer only maps the downsampled points to pixel coordinates
# and writes them as SVG paths (about 0.5 ms a plot): the browser draws the curves. The figure
# keeps PlotRenderer's look (grid, title with the newest value, min/max envelope, step axis).

_SVG_SCALE = 2    # coordinates are written as integers in half pixels (device pixels on
                 # a high-density screen)


def _svg_number(value: float) -> str:
    return f"{value:.4g}"


def _tick_values(low: float, high: float, integer: bool) -> np.ndarray:
    ticks = MaxNLocator(nbins=5, integer=integer).tick_values(low, high)
    return ticks[(ticks >= low) & (ticks <= high)]


def _svg_run(xs: np.ndarray, ys: np.ndarray) -> str:
    """Path data through the points: an absolute move, then relative lines ('l dx,dy ...')
    between the rounded coordinates (in 1 / _SVG_SCALE pixels), so no error accumulates and
    most numbers are one or two digits."""
    flat = np.empty(2 * len(xs), dtype=np.int64)
    flat[0::2] = np.rint(xs * _SVG_SCALE)
    flat[1::2] = np.rint(ys * _SVG_SCALE)
    steps = np.diff(flat.reshape(-1, 2), axis=0).ravel().tolist()
    head = f"M{flat[0]},{flat[1]}"
    if not steps:
        return head
    pairs = " ".join([f"{a},{b}" for a, b in zip(steps[0::2], steps[1::2])])
    return f"{head}l{pairs}"


def _svg_path(xs: np.ndarray, ys: np.ndarray) -> str:
    """Path data through the finite points; a gap where a value is NaN or infinite."""
    finite = np.isfinite(ys)
    if finite.all():
        runs = [(0, len(ys))]
    else:
        edges = np.flatnonzero(np.diff(np.concatenate(([0], finite.view(np.int8), [0]))))
        runs = list(zip(edges[0::2].tolist(), edges[1::2].tolist()))
    return "".join(_svg_run(xs[a:b], ys[a:b]) for a, b in runs if b > a)


class SvgRenderer:
    """Draws one small plot per tag (a grid of ``columns``), x = global step, as SVG text.

    The same figure as ``PlotRenderer`` (mean line, shaded min/max envelope where points were
    merged, a title with the tag and its newest value), drawn by the browser: the kernel only
    writes coordinates. The root ``<svg>`` carries ``data-render``, a count of renders, so a
    page can tell one drawing from the next. Stateless apart from that count; thread-safe.
    """

    format = "svg"

    def __init__(self, *, width_px: int = 720, row_height_px: int = 170, columns: int = 2):
        for name, value, minimum in (("width_px", width_px, 100),
                                     ("row_height_px", row_height_px, 60),
                                     ("columns", columns, 1)):
            if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                raise ValueError(
                    f"Invalid value for argument `{name}`. Received: {name}={value!r}. "
                    f"Expected an integer >= {minimum}.")
        self._width_px = width_px
        self._row_height_px = row_height_px
        self._columns = columns
        self._count = itertools.count(1)

    def render(self, scalars: Mapping[str, Sequence[np.ndarray]],
               tags: Optional[Sequence[str]] = None) -> str:
        """An ``<svg>`` of ``scalars[tag]`` = (steps, values, mins, maxs) for each tag in
        ``tags`` (default: every tag, sorted); tags without points are left out. With nothing
        to draw, the image says so."""
        if tags is None:
            tags = sorted(scalars)
        tags = tuple(tag for tag in tags if tag in scalars and len(scalars[tag][0]))
        width = self._width_px
        columns = min(self._columns, max(1, len(tags)))
        rows = max(1, math.ceil(len(tags) / columns))
        height = rows * self._row_height_px
        out = [f'<svg xmlns="http://www.w3.org/2000/svg" class="jsv-plot-svg" '
               f'data-render="{next(self._count)}" width="{width}" height="{height}" '
               f'viewBox="0 0 {width} {height}" style="max-width:100%;height:auto" '
               'font-family="DejaVu Sans, Arial, sans-serif">']
        if not tags:
            out.append(f'<text x="{width / 2:g}" y="{height / 2:g}" text-anchor="middle" '
                       'dominant-baseline="middle" fill="#666666" font-size="12">'
                       'No scalar summaries yet</text></svg>')
            return "".join(out)
        # PlotRenderer's margins: the figure's, then hspace/wspace between the axes.
        left, right, top, bottom = 60.0, width - 12.0, 22.0, height - 34.0
        cell_w = (right - left) / (columns + 0.22 * (columns - 1))
        cell_h = (bottom - top) / (rows + 0.5 * (rows - 1))
        for index, tag in enumerate(tags):
            row, column = divmod(index, columns)
            x0 = left + column * cell_w * 1.22
            y0 = top + row * cell_h * 1.5
            out.append(self._plot(tag, scalars[tag], index, x0, y0, cell_w, cell_h,
                                  xlabel=index + columns >= len(tags)))
        out.append("</svg>")
        return "".join(out)

    def _plot(self, tag: str, series: Sequence[np.ndarray], index: int, x0: float, y0: float,
              w: float, h: float, xlabel: bool) -> str:
        steps, values, mins, maxs = reduce_points(
            *(np.asarray(array) for array in series[:4]), target=max(2, int(w)))
        steps = steps.astype(np.float64)
        values = np.where(np.isinf(values), np.nan, values.astype(np.float64))
        mins = np.asarray(mins, dtype=np.float64)
        maxs = np.asarray(maxs, dtype=np.float64)
        finite = np.isfinite(mins) & np.isfinite(maxs)
        x_low, x_high = _limits(steps[0], steps[-1], integer=True)
        low = np.concatenate((mins[finite], values[np.isfinite(values)]))
        if len(low):
            y_low, y_high = _limits(low.min(), max(maxs[finite].max(initial=-math.inf),
                                                   low.max()))
        else:
            y_low, y_high = -1.0, 1.0
        x_scale = w / (x_high - x_low)
        y_scale = h / (y_high - y_low)

        def px(xs):
            return (xs - x_low) * x_scale

        def py(ys):
            return h - (ys - y_low) * y_scale

        colour = _COLOURS[index % len(_COLOURS)]
        title = f"{tag} = {format_value(float(values[-1]))}  (step {int(steps[-1])})"
        out = [f'<g class="jsv-plot-axes" data-tag="{html.escape(tag)}" '
               f'transform="translate({x0:.1f},{y0:.1f})">',
               f'<text class="jsv-plot-title" x="0" y="-6" font-size="11">'
               f'{html.escape(title)}</text>',
               f'<rect width="{w:.1f}" height="{h:.1f}" fill="white" stroke="#000000" '
               'stroke-width="0.8"/>']
        for tick in _tick_values(x_low, x_high, integer=True):
            x = float(px(tick))
            out.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y2="{h:.1f}" stroke="#b0b0b0" '
                       f'stroke-opacity="0.3" stroke-width="0.6"/><text x="{x:.1f}" '
                       f'y="{h + 12:.1f}" font-size="10" text-anchor="middle">'
                       f'{format_step(tick)}</text>')
        for tick in _tick_values(y_low, y_high, integer=False):
            y = float(py(tick))
            out.append(f'<line y1="{y:.1f}" y2="{y:.1f}" x2="{w:.1f}" stroke="#b0b0b0" '
                       f'stroke-opacity="0.3" stroke-width="0.6"/><text x="-4" y="{y:.1f}" '
                       'font-size="10" text-anchor="end" dominant-baseline="middle">'
                       f'{_svg_number(tick)}</text>')
        if xlabel:
            out.append(f'<text x="{w / 2:.1f}" y="{h + 26:.1f}" font-size="10" '
                       'text-anchor="middle">step</text>')
        # Data, in 1 / _SVG_SCALE pixels, clipped to the axes.
        out.append(f'<svg width="{w:.1f}" height="{h:.1f}" overflow="hidden">'
                   f'<g transform="scale({1 / _SVG_SCALE:g})">')
        if finite.any() and not np.array_equal(mins[finite], maxs[finite]):
            xs = px(steps[finite])
            band = _svg_run(np.concatenate((xs, xs[::-1])),
                            np.concatenate((py(maxs[finite]), py(mins[finite])[::-1])))
            out.append(f'<path class="jsv-plot-band" d="{band}z" fill="{colour}" '
                       'fill-opacity="0.22"/>')
        xs, ys = px(steps), py(values)
        if len(steps) == 1 and np.isfinite(ys[0]):
            out.append(f'<circle cx="{xs[0] * _SVG_SCALE:.0f}" cy="{ys[0] * _SVG_SCALE:.0f}" '
                       f'r="{3 * _SVG_SCALE}" fill="{colour}"/>')
        else:
            out.append(f'<path class="jsv-plot-line" d="{_svg_path(xs, ys)}" fill="none" '
                       f'stroke="{colour}" stroke-width="{1.3 * _SVG_SCALE:g}" '
                       'stroke-linejoin="round"/>')
        out.append("</g></svg></g>")
        return "".join(out)
