"""End to end: `farm dashboard` serving the test warehouse, driven in headless Chromium (Debian's
chromium package) through Playwright. Walks every page, checks what each shows, downloads a table,
and tries to read /etc/passwd and to write a file from the SQL page. Screenshots go to
artifacts/screenshots/ (or $FARM_SCREENSHOTS).

Streamlit draws a page in pieces, over a websocket, after navigation returns: every check of
something drawn is a Playwright `expect`, which retries until the page shows it (or a generous
timeout passes), so a slow or loaded machine makes the test slower, not red. The `dashboard`
fixture (conftest.py) stops every server it started."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from farm.dashboard.data import Snapshot

pytestmark = [pytest.mark.slow, pytest.mark.browser]
ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
SCREENSHOTS = Path(os.environ.get("FARM_SCREENSHOTS", ROOT / "artifacts" / "screenshots"))
# As root, in a sandbox with no network: no Chrome sandbox, no GPU, no background connections.
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
PAGES = ["Overview", "Compare", "Cell", "Diff", "Regressions", "History", "SQL"]
PATIENCE_MS = 120_000  # how long a check waits for the page to show what it expects: only a failure waits this long

if not Path(CHROMIUM).exists():
    if os.environ.get("CI"):
        raise RuntimeError("CI needs Debian's chromium for the browser test: .ci/run installs it (apt-get install "
                           "chromium)")
    pytest.skip("no chromium here (apt-get install chromium); CI installs it", allow_module_level=True)

from playwright.sync_api import expect  # noqa: E402 - after the skip: no chromium, no Playwright needed


def printed(value: float) -> str:
    """How pages print a figure: 4 significant digits, whole numbers with separators from 10,000."""
    return f"{value:,.0f}" if abs(value) >= 10_000 else f"{value:.4g}"


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    expect.set_options(timeout=PATIENCE_MS)
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1400, "height": 1800}, accept_downloads=True)
    page = context.new_page()
    page.set_default_timeout(PATIENCE_MS)
    page.set_default_navigation_timeout(PATIENCE_MS)
    yield page
    context.close()


def wait_idle(page) -> None:
    """Until Streamlit reports no script run in progress. A run an action has asked for may not
    have started yet, so this is no proof that the page is complete: checks of what it shows use
    `expect`. It keeps downloads and screenshots off a page in the middle of a run."""
    expect(page.get_by_test_id("stApp")).to_have_attribute("data-test-connection-state", "CONNECTED")
    expect(page.get_by_test_id("stApp")).to_have_attribute("data-test-script-state", "notRunning")


def shoot(page, name: str) -> None:
    wait_idle(page)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"))


def expect_metrics(page, expected: dict[str, str]) -> None:
    expect(page.get_by_test_id("stMetricLabel")).to_have_text(list(expected))
    expect(page.get_by_test_id("stMetricValue")).to_have_text(list(expected.values()))


def metric(page, label: str):
    """The value of the metric labelled `label`."""
    return page.get_by_test_id("stMetric").filter(has=page.get_by_test_id("stMetricLabel").get_by_text(
        label, exact=True)).get_by_test_id("stMetricValue")


def expect_navigation(page) -> None:
    expect(page.get_by_test_id("stSidebarNavLink").locator("span[label]")).to_have_text(PAGES)


def download(page, index: int):
    wait_idle(page)
    with page.expect_download() as info:
        page.locator('[data-testid="stDownloadButton"] button').nth(index).click()
    return info.value


def download_text(page, index: int) -> tuple[str, str]:
    value = download(page, index)
    return value.suggested_filename, Path(value.path()).read_text()


def test_every_page_in_a_real_browser(warehouse: Path, page, dashboard) -> None:
    snap = Snapshot(warehouse)
    server = dashboard(warehouse)
    walk_pages(page, server.url, warehouse, snap)
    assert "Traceback" not in server.log.read_text()


def walk_pages(page, url: str, warehouse: Path, snap: Snapshot) -> None:
    main = page.get_by_test_id("stMain")

    # Overview: counts, the failures with their reason, and a table as CSV.
    page.goto(url)
    expect(page.get_by_role("heading", name="Overview")).to_be_visible()
    expect_metrics(page, {"Sweeps": "2", "Cells": "20", "Ok": "8", "Failed": "6", "Skipped": "0",
                          "Unsupported": "6"})
    expect_navigation(page)
    expect(page.get_by_text("Download a warehouse table")).to_be_visible()  # the page's last section
    # Sweeps CSV, Parquet; Devices CSV, Parquet; Failures CSV, Parquet; a whole table CSV, Parquet
    expect(page.locator('[data-testid="stDownloadButton"] button')).to_have_count(8)
    name, csv = download_text(page, 4)
    assert name == "failures.csv" and csv.count("NoSuchOperator") == 6
    name, csv = download_text(page, 6)  # a whole warehouse table: measurements of both sweeps
    assert name == "measurements.csv" and len(csv.strip().splitlines()) == 1 + 6 + 1  # dash ok + mnist
    value = download(page, 7)
    parquet = pq.read_table(value.path())
    assert value.suggested_filename == "measurements.parquet" and parquet.num_rows == 7
    assert "throughput_qps" in parquet.column_names
    shoot(page, "1-overview")

    # Compare, reached through the sidebar: three charts for the one model, a table as CSV.
    page.get_by_role("link", name="Compare").click()
    expect(page.get_by_role("heading", name="Compare")).to_be_visible()
    page.goto(f"{url}/compare?sweep=dash")
    expect(page.get_by_text("Pareto frontier").first).to_be_visible()
    charts = page.locator(".vega-embed")
    expect(charts).to_have_count(3)
    for chart in range(3):  # drawn, not only declared
        expect(charts.nth(chart).locator("canvas, svg.marks").first).to_be_visible()
    name, csv = download_text(page, 0)
    assert name == "compare.csv"
    lines = csv.strip().splitlines()
    assert len(lines) == 1 + 6 and "speedup" in lines[0] and "vs_baseline" in lines[0]
    assert sum(",baseline," in line for line in lines) == 3  # the fp32 cells at batch 1, 2 and 4
    shoot(page, "2-compare")

    # Cell: one measured cell, linked by id; histogram, layers, engine graph, provenance.
    ok = snap.cell_frame[(snap.cell_frame.sweep_id == "dash") & (snap.cell_frame.status == "ok")]
    cell = ok[ok.precision == "fp16"].iloc[0]
    page.goto(f"{url}/cell?cell={cell.cell_id}")
    expect(page.get_by_role("heading", name="Cell")).to_be_visible()
    expect(metric(page, "Throughput (qps)")).to_have_text(printed(cell.throughput_qps))
    expect(main).to_contain_text(f"of {cell.queries:,} raw samples")
    expect(page.get_by_role("radio", name="Top layers by time")).to_be_visible()
    expect(page.get_by_text("Provenance", exact=True)).to_be_visible()  # the page's last section
    expect(main).to_contain_text("dash")
    page.get_by_text("Engine graph").first.scroll_into_view_if_needed()
    expect(page.get_by_test_id("stImage").locator("img").first).to_be_visible()
    shoot(page, "3-cell")

    # Diff: fp32 against fp16 of the same model and batch; matched layers.
    base = ok[(ok.precision == "fp32") & (ok.batch == cell.batch)].iloc[0]
    page.get_by_role("link", name="Diff").click()
    expect(page.get_by_role("heading", name="Diff")).to_be_visible()
    page.goto(f"{url}/diff?a={base.cell_id}&b={cell.cell_id}")
    expect(metric(page, "Matched layers")).to_have_text(re.compile(r"^([3-9]|[1-9]\d+)$"))  # at least 3
    name, csv = download_text(page, 0)
    assert name == f"diff-{base.cell_id[:8]}-{cell.cell_id[:8]}.csv" and "time_delta_ms" in csv
    shoot(page, "4-diff")

    # SQL: a query works; reading /etc/passwd and writing a file are refused.
    page.get_by_role("link", name="SQL").click()
    expect(page.get_by_role("heading", name="SQL")).to_be_visible()
    rows = page.get_by_text(re.compile(r"^3 row\(s\) in "))
    refusals = page.get_by_test_id("stAlert").filter(has_text="Refused")
    count_by_precision = "SELECT precision, count(*) AS cells FROM cells WHERE sweep_id = 'dash' GROUP BY 1 ORDER BY 1"
    run_sql(page, count_by_precision)
    expect(rows).to_be_visible()
    name, csv = download_text(page, 0)
    assert csv.splitlines() == ["precision,cells", "bf16,6", "fp16,6", "fp32,6"]
    shoot(page, "5-sql-query")

    run_sql(page, "SELECT * FROM read_text('/etc/passwd')")
    expect(refusals).to_contain_text('Cannot access file "/etc/passwd"')
    expect(refusals).to_have_text(re.compile(r"^Refused: Permission Error"))
    expect(rows).to_have_count(0)
    assert "root:x:0:0" not in page.content()
    shoot(page, "6-sql-passwd-refused")

    target = warehouse / "dash" / "cells" / "written-by-browser.csv"
    for destination in (target, Path("/tmp/written-by-browser.csv")):  # inside the warehouse, and outside
        run_sql(page, count_by_precision)  # clears the previous refusal, so the next one is seen anew
        expect(rows).to_be_visible()
        expect(refusals).to_have_count(0)
        run_sql(page, f"COPY (SELECT * FROM cells) TO '{destination}'")
        expect(refusals).to_contain_text("COPY statements are not allowed")
        assert not destination.exists()
    assert sorted(p.name for p in (warehouse / "dash" / "cells").iterdir()) == sorted(
        f"{c}.parquet" for c in snap.cell_frame[snap.cell_frame.sweep_id == "dash"].cell_id)
    shoot(page, "7-sql-write-refused")


def run_sql(page, sql: str) -> None:
    box = page.get_by_label("Query")
    box.fill(sql)
    box.press("Control+Enter")  # commit the text before the click reruns the page
    wait_idle(page)
    page.get_by_role("button", name="Run").click()


def test_a_link_opens_its_page_on_a_fresh_server(warehouse: Path, page, dashboard) -> None:
    """A shared URL (/cell?cell=...) is the first request the server sees: it must still be farm's
    page, in farm's navigation."""
    snap = Snapshot(warehouse)
    cell = snap.cell_frame[snap.cell_frame.status == "ok"].iloc[0]
    server = dashboard(warehouse)
    page.goto(f"{server.url}/cell?cell={cell.cell_id}")
    expect(page.get_by_text("Provenance", exact=True)).to_be_visible()
    expect_navigation(page)
    expect(page.get_by_test_id("stMain")).to_contain_text(cell.cell_id)


def test_empty_warehouse_in_a_real_browser(tmp_path: Path, page, dashboard) -> None:
    server = dashboard(tmp_path / "results")
    for path in ("", "/compare", "/cell", "/diff", "/sql"):
        page.goto(server.url + path)
        expect(page.get_by_text("No results yet")).to_be_visible()
        expect(page.get_by_text("bin/farm sweep configs/resnet.toml")).to_be_visible()
        expect(page.get_by_test_id("stMain")).to_contain_text("does not exist")
    shoot(page, "0-empty-warehouse")
