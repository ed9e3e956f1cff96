"""A live run's panel in two browsers at once: JupyterLab in headless Chromium, driven by
Playwright (the server, kernelspec and clean-up of test_browser.py).

The notebook runs a live Keras fit; its first page is closed, the notebook opened again, the
page reloaded, and a second browser context (another browser, as far as the server knows) opens
the saved notebook. Each view gets the whole series with its first answer (its charts hold the
kernel's points within one request), and what a user sets in one browser reaches the other.
Screenshots of both go to test-artifacts/ (contexts-*.png).
"""
import os
import re

from playwright.sync_api import expect, sync_playwright

from test_browser import (ARTIFACTS, CHROMIUM, KERNEL_READY_JS, LIVE_CELL,  # noqa: F401
                          SENTINEL, SENTINEL_CELL, SETUP_CELL, WAIT_MS, _browser, _open,
                          _panel, _save, _write_notebook, lab)

# The first answer comes within one pull interval (2 s) and its own time: far below this.
FIRST_ANSWER_MS = 8000


def _charts_full(view, timeout=FIRST_ANSWER_MS):
    """The view's loss chart holds points, and every tag has its chip."""
    chart = view.locator(".jsv-chart[data-tag='loss']")
    expect(chart).to_have_attribute("data-points", re.compile(r"^[1-9]\d*$"), timeout=timeout)
    expect(view.locator(".jsv-tag")).to_have_count(3, timeout=timeout)
    return chart


def test_a_second_browser_after_close_reopen_reload_gets_every_point(lab, tmp_path):
    assert os.path.exists(CHROMIUM), f"{CHROMIUM} is missing: apt-get install chromium"
    ARTIFACTS.mkdir(exist_ok=True)
    root, flags = tmp_path / "runs", tmp_path / "flags"
    flags.mkdir()
    _write_notebook(lab.root / "panel.ipynb",
                    ["%load_ext jupyter_supervisor", SETUP_CELL, LIVE_CELL, SENTINEL_CELL],
                    root=root, flags=str(flags))
    with sync_playwright() as playwright:
        browser, page = _browser(playwright, height=1400)
        other = None
        try:
            _open(page, lab)
            page.get_by_role("menuitem", name="Run", exact=True).click()
            page.get_by_role("menuitem", name="Run All Cells", exact=True).click()
            expect(page.locator(".jp-OutputArea-output", has_text=SENTINEL)).to_be_visible(
                timeout=180_000)
            _charts_full(_panel(page, "live"), timeout=WAIT_MS)
            _save(page)
            # Closed, opened again, reloaded.
            context = page.context
            page.close()
            page = context.new_page()
            page.set_default_timeout(WAIT_MS)
            page.goto(f"{lab.base}/lab/tree/panel.ipynb?token={lab.token}")
            page.wait_for_function(KERNEL_READY_JS)
            _charts_full(_panel(page, "live"))
            page.reload()
            page.wait_for_function(KERNEL_READY_JS)
            first = _panel(page, "live")
            _charts_full(first)
            # Another browser on the same notebook.
            other = playwright.chromium.launch(executable_path=CHROMIUM,
                                               args=["--no-sandbox", "--disable-gpu"])
            second_page = other.new_context(viewport={"width": 1280, "height": 1400}).new_page()
            second_page.set_default_timeout(WAIT_MS)
            second_page.goto(f"{lab.base}/lab/tree/panel.ipynb?token={lab.token}")
            second_page.wait_for_selector(".jp-Notebook .jp-Cell")
            second = _panel(second_page, "live")
            expect(second.locator(".jsv-status")).to_have_text("running")
            _charts_full(second)
            second.screenshot(path=str(ARTIFACTS / "contexts-second.png"))
            # What is set in one browser reaches the other, both ways.
            second.locator(".jsv-log input").check()
            expect(first.locator(".jsv-log input")).to_be_checked()
            first.locator(".jsv-chart[data-tag='loss']").scroll_into_view_if_needed()
            expect(first.locator(".jsv-chart[data-tag='loss']")).to_have_attribute(
                "data-yscale", "log")
            first.locator(".jsv-xaxis select").select_option("relative")
            expect(second.locator(".jsv-chart[data-tag='loss']")).to_have_attribute(
                "data-xaxis", "relative")
            first.screenshot(path=str(ARTIFACTS / "contexts-first.png"))
        except BaseException:
            print("server log tail:\n", lab.log_tail())
            page.screenshot(path=str(ARTIFACTS / "contexts-failure.png"), full_page=True)
            raise
        finally:
            if other is not None:
                other.close()
            browser.close()
