"""A figure the body shows appears in its run's panel in a real JupyterLab (headless Chromium),
not in the cell that runs meanwhile. The session's server and browser (tests/conftest.py),
with browser_helpers.py's page helpers."""
import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook
from playwright.sync_api import expect

from browser_helpers import (ARTIFACTS, KERNEL_NAME, SENTINEL, keep_evidence, new_page,
                             open_notebook, panel_of)

pytestmark = [pytest.mark.browser, pytest.mark.kernel]

CELLS = [
    "%load_ext jupyter_supervisor",
    "import threading\nimport matplotlib.pyplot as plt\nimport jupyter_supervisor\n"
    "go = threading.Event()",
    # The body plots once the next cell runs.
    "%%supervise --name figure\ngo.wait(60)\nplt.plot([1, 4, 9])\nplt.show()\n",
    "go.set()\njupyter_supervisor.get_run('figure').wait(60)",
    f"import sys\nprint({SENTINEL!r}, sys.executable)",
]
OTHER_CELL = 3


def test_a_figure_shown_by_the_body_appears_in_its_panel(lab, chromium):
    notebook = new_notebook(metadata={
        "kernelspec": {"name": KERNEL_NAME, "display_name": "jupyter_supervisor test",
                       "language": "python"}, "language_info": {"name": "python"}})
    notebook.cells = [new_code_cell(cell) for cell in CELLS]
    nbformat.write(notebook, str(lab.root / "panel.ipynb"))
    page = new_page(chromium, height=1400)
    try:
        open_notebook(page, lab)
        page.get_by_role("menuitem", name="Run", exact=True).click()
        page.get_by_role("menuitem", name="Run All Cells", exact=True).click()
        expect(page.locator(".jp-OutputArea-output", has_text=SENTINEL)).to_be_visible(
            timeout=120_000)
        panel = panel_of(page, "figure")
        expect(panel.locator(".jsv-status")).to_have_text("finished")
        figure = panel.locator(".jsv-output img")
        expect(figure).to_have_count(1)
        expect(figure).to_be_visible()
        assert figure.evaluate("img => img.naturalWidth") > 100   # a real PNG, drawn
        other = page.locator(".jp-Notebook .jp-Cell").nth(OTHER_CELL)
        expect(other.locator(".jp-InputArea")).to_contain_text("go.set()")
        expect(other.locator(".jp-OutputArea img")).to_have_count(0)
        panel.screenshot(path=str(ARTIFACTS / "panel-body-figure.png"))
    except BaseException:
        keep_evidence(page, [], lab)
        raise
    finally:
        page.context.close()
