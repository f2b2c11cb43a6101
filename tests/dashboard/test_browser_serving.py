"""The Compare page's latency-throughput curves of Server cells in a real browser (headless Debian
chromium through Playwright, as test_browser.py), on test_serving_pages.py's CPU sweep: a line per
setup in the legend, the tests that passed, and a screenshot (serving-curves.png in
artifacts/screenshots/ or $FARM_SCREENSHOTS)."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.sync_api import expect

# its fixtures (browser, page) and helpers; importing it skips this module where there is no chromium
from tests.dashboard.test_browser import SCREENSHOTS, browser, page, wait_idle  # noqa: F401
from tests.dashboard.test_serving_pages import served  # noqa: F401

pytestmark = [pytest.mark.slow, pytest.mark.browser]


def test_the_curves_in_a_real_browser(served: Path, page, dashboard) -> None:  # noqa: F811
    server = dashboard(served)
    page.goto(f"{server.url}/compare")
    heading = page.get_by_role("heading", name="Latency against load (LoadGen Server)")
    expect(heading).to_be_visible()
    chart = page.get_by_test_id("stVegaLiteChart").last
    for setup in ("fp32 · onnxruntime · max batch 2 · delay 2 ms", "fp32 · onnxruntime · max batch 4 · delay 2 ms",
                  "passed"):
        expect(chart.get_by_text(setup, exact=True)).to_be_attached()
    chart.scroll_into_view_if_needed()
    wait_idle(page)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    chart.screenshot(path=str(SCREENSHOTS / "serving-curves.png"))
