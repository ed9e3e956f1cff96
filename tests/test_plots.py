"""PlotRenderer: series to PNG with one reused Figure, never pyplot."""
import io
import threading

import numpy as np
import pytest
from matplotlib.collections import PolyCollection
from PIL import Image

from jupyter_supervisor.view import plots, text
from jupyter_supervisor.view.history import RunHistory
from jupyter_supervisor import events

from helpers import run_isolated

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def series(steps, values, mins=None, maxs=None):
    steps = np.asarray(steps)
    values = np.asarray(values, dtype=float)
    return (steps, values, values if mins is None else np.asarray(mins, dtype=float),
            values if maxs is None else np.asarray(maxs, dtype=float))


def figure_of(renderer):
    """The renderer's one Figure (no public accessor: only tests look inside it)."""
    return renderer._figure  # pylint: disable=protected-access


def size_of(png):
    assert png.startswith(PNG_MAGIC)
    with Image.open(io.BytesIO(png)) as image:
        return image.size


def test_one_plot_per_tag_in_a_grid_of_the_configured_size():
    renderer = plots.PlotRenderer(width_px=600, row_height_px=150, columns=2, dpi=72)
    scalars = {tag: series([0, 10, 20], [3.0, 2.0, 1.0]) for tag in ("c", "a", "b")}
    png = renderer.render(scalars)
    assert size_of(png) == (600, 300)                   # 3 tags, 2 columns: 2 rows
    visible = [ax for ax in figure_of(renderer).axes if ax.get_visible()]
    assert [ax.get_title(loc="left").split(" =")[0] for ax in visible] == ["a", "b", "c"]
    assert size_of(renderer.render(scalars, tags=["b"])) == (600, 150)


def test_the_same_figure_is_reused_and_only_data_changes():
    renderer = plots.PlotRenderer()
    figure = figure_of(renderer)
    scalars = {"loss": series([0, 1], [1.0, 0.5])}
    renderer.render(scalars)
    axes = list(figure.axes)
    scalars = {"loss": series([0, 1, 2], [1.0, 0.5, 0.25])}
    renderer.render(scalars)
    assert figure_of(renderer) is figure
    assert list(figure.axes) == axes                    # same tags: same axes
    (line,) = axes[0].get_lines()
    assert list(line.get_xdata()) == [0, 1, 2]
    assert axes[0].get_title(loc="left") == "loss = 0.25 (step 2)"
    renderer.render({"loss": scalars["loss"], "acc": series([2], [0.9])})
    assert len([ax for ax in figure.axes if ax.get_visible()]) == 2


def test_the_envelope_is_shaded_only_where_points_were_merged():
    renderer = plots.PlotRenderer()
    renderer.render({"raw": series([0, 1, 2], [1.0, 2.0, 3.0])})
    assert not [c for c in figure_of(renderer).axes[0].collections if isinstance(c, PolyCollection)]
    renderer.render({"raw": series([0, 1, 2], [1.0, 2.0, 3.0], [0.5, 1.5, 2.5],
                                   [1.5, 2.5, 3.5])})
    bands = [c for c in figure_of(renderer).axes[0].collections if isinstance(c, PolyCollection)]
    assert len(bands) == 1                              # replaced, not piled up
    low, high = figure_of(renderer).axes[0].get_ylim()
    assert low <= 0.5 and high >= 3.5                   # the band is in view


def test_a_heading_and_an_error_line_head_the_image_in_the_panels_colour():
    renderer = plots.PlotRenderer(width_px=600, row_height_px=150)
    scalars = {"loss": series([0, 1_000], [1.0, 123456.0])}
    plain = size_of(renderer.render(scalars))
    png = renderer.render(scalars, heading="fit | failed | step 1,000", error="ValueError: boom")
    assert size_of(png) == (plain[0], plain[1] + 2 * plots._HEADING_PX)
    texts = [t.get_text() for t in figure_of(renderer).texts]
    assert texts == ["fit | failed | step 1,000", "ValueError: boom"]
    ax = figure_of(renderer).axes[0]
    assert ax.get_title(loc="left") == "loss = 1.2346e+05 (step 1,000)"  # as chart.js writes it
    assert ax.get_lines()[0].get_color() == text.PALETTE[0]
    assert size_of(renderer.render(scalars, heading="fit | finished")) == (
        plain[0], plain[1] + plots._HEADING_PX)


def test_x_is_the_global_step():
    renderer = plots.PlotRenderer()
    renderer.render({"loss": series([1_000_000, 2_000_000], [1.0, 0.5])})
    ax = figure_of(renderer).axes[0]
    low, high = ax.get_xlim()
    assert low <= 1_000_000 and high >= 2_000_000
    assert ax.get_xlabel() == "step"
    assert text.format_step(1_500_000) == "1.5M" and text.format_step(12_000) == "12k"


def test_nothing_to_draw_says_so():
    renderer = plots.PlotRenderer(width_px=300, row_height_px=100)
    png = renderer.render({"empty": series([], [])})
    assert size_of(png) == (300, 100)
    assert "No scalar summaries yet" in [t.get_text() for t in figure_of(renderer).texts]


def test_nan_and_inf_do_not_break_a_render():
    renderer = plots.PlotRenderer()
    values = [1.0, float("nan"), float("inf"), 2.0, float("-inf")]
    png = renderer.render({"loss": series(range(5), values)})
    assert png.startswith(PNG_MAGIC)
    png = renderer.render({"nan": series([0], [float("nan")])})
    assert png.startswith(PNG_MAGIC)


def test_reduce_points_keeps_the_envelope_of_everything():
    rng = np.random.default_rng(3)
    values = rng.normal(size=10_001)
    steps = np.arange(10_001)
    out_steps, out_values, out_mins, out_maxs = plots.reduce_points(
        steps, values, values, values, target=300)
    assert len(out_steps) <= 300
    assert out_steps[-1] == 10_000
    assert out_mins.min() == values.min() and out_maxs.max() == values.max()
    assert np.all(out_mins <= out_values) and np.all(out_values <= out_maxs)


def test_a_history_snapshot_renders_directly():
    history = RunHistory(max_points=100)
    for step in range(1000):
        history.on_event(events.SummaryWritten(step, {"loss": 1.0 / (step + 1)}, 0.0))
    png = plots.PlotRenderer().render(history.snapshot().scalars)
    assert png.startswith(PNG_MAGIC)


def test_two_renderers_on_two_threads():
    results, errors = {}, []

    def render(name):
        try:
            renderer = plots.PlotRenderer()
            for i in range(5):
                results[name] = renderer.render(
                    {name: series(range(100), np.sin(np.arange(100) / 10 + i))})
        except Exception as error:  # recorded, asserted below on the main thread
            errors.append(error)

    threads = [threading.Thread(target=render, args=(f"t{i}",)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors
    assert all(png.startswith(PNG_MAGIC) for png in results.values()) and len(results) == 2


def test_full_colour_png_when_asked():
    png = plots.PlotRenderer(colours=0).render({"loss": series([0, 1], [1.0, 0.0])})
    with Image.open(io.BytesIO(png)) as image:
        assert image.mode in ("RGB", "RGBA")
    png = plots.PlotRenderer().render({"loss": series([0, 1], [1.0, 0.0])})
    with Image.open(io.BytesIO(png)) as image:
        assert image.mode == "P"                          # palette: several times smaller


@pytest.mark.parametrize("kwargs", [dict(width_px=10), dict(columns=0), dict(dpi=True),
                                    dict(colours=300)])
def test_bad_arguments_are_refused(kwargs):
    with pytest.raises(ValueError, match="Invalid value for argument"):
        plots.PlotRenderer(**kwargs)


def test_plots_never_imports_pyplot_or_tensorflow():
    result = run_isolated([], """
import numpy as np
from jupyter_supervisor.view import plots
plots.PlotRenderer().render({"loss": (np.arange(3), np.ones(3), np.ones(3), np.ones(3))})
print(sorted(m for m in ("matplotlib.pyplot", "tensorflow") if m in sys.modules))
""")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
