"""End to end: `farm dashboard` serving the test warehouse, driven in headless Chromium (Debian's
chromium package) through Playwright. Walks every page, checks what each shows, downloads a table,
and tries to read /etc/passwd and to write a file from the SQL page. Screenshots go to
artifacts/screenshots/ (or $FARM_SCREENSHOTS)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
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

if not Path(CHROMIUM).exists():
    if os.environ.get("CI"):
        raise RuntimeError("CI needs Debian's chromium for the browser test: .ci/run installs it (apt-get install "
                           "chromium)")
    pytest.skip("no chromium here (apt-get install chromium); CI installs it", allow_module_level=True)


def printed(value: float) -> str:
    """How pages print a figure: 4 significant digits, whole numbers with separators from 10,000."""
    return f"{value:,.0f}" if abs(value) >= 10_000 else f"{value:.4g}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Dashboard:
    """`farm dashboard` in a child process, on a free loopback port."""

    def __init__(self, results: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = results.parent / f"dashboard-{self.port}.log"
        self.process = subprocess.Popen(
            [sys.executable, "-m", "farm", "dashboard", "--results", str(results), "--port", str(self.port)],
            env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=self.log.open("w"), stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"farm dashboard exited: {self.log.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{self.url}/_stcore/health", timeout=2) as response:
                    if response.read() == b"ok":
                        return
            except OSError:
                time.sleep(0.3)
        raise RuntimeError(f"farm dashboard did not answer in 90 s: {self.log.read_text()[-2000:]}")

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1400, "height": 1800}, accept_downloads=True)
    page = context.new_page()
    page.set_default_timeout(60_000)
    yield page
    context.close()


def shoot(page, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.wait_for_timeout(800)  # let charts finish drawing
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"))


def wait_idle(page) -> None:
    """Until Streamlit has finished the script run the last action started."""
    page.wait_for_timeout(300)
    page.locator('[data-testid="stStatusWidget"]').wait_for(state="detached")


def alerts(page) -> list[str]:
    return page.locator('[data-testid="stAlert"]').all_inner_texts()


def download(page, index: int) -> tuple[str, str]:
    with page.expect_download() as info:
        page.locator('[data-testid="stDownloadButton"] button').nth(index).click()
    return info.value.suggested_filename, Path(info.value.path()).read_text()


def test_every_page_in_a_real_browser(warehouse: Path, page) -> None:
    snap = Snapshot(warehouse)
    dashboard = Dashboard(warehouse)
    try:
        walk_pages(page, dashboard.url, warehouse, snap)
    finally:
        dashboard.stop()
    assert "Traceback" not in dashboard.log.read_text()


def walk_pages(page, url: str, warehouse: Path, snap: Snapshot) -> None:
    # Overview: counts, the failures with their reason, and a table as CSV.
    page.goto(url)
    page.get_by_role("heading", name="Overview").wait_for()
    page.get_by_text("Download a warehouse table").wait_for()  # the page's last section
    wait_idle(page)
    metrics = dict(t.split("\n\n") for t in page.locator('[data-testid="stMetric"]').all_inner_texts())
    assert metrics == {"Sweeps": "2", "Cells": "20", "Ok": "8", "Failed": "6", "Skipped": "0", "Unsupported": "6"}
    nav = [t.split("\n")[-1] for t in page.locator('[data-testid="stSidebarNav"] a').all_inner_texts()]
    assert nav == ["Overview", "Compare", "Cell", "Diff", "SQL"]
    name, csv = download(page, 4)  # Sweeps CSV, Parquet, Devices CSV, Parquet, Failures CSV
    assert name == "failures.csv" and csv.count("NoSuchOperator") == 6
    name, csv = download(page, 6)  # a whole warehouse table: measurements of both sweeps
    assert name == "measurements.csv" and len(csv.strip().splitlines()) == 1 + 6 + 1  # dash ok + mnist
    with page.expect_download() as info:
        page.locator('[data-testid="stDownloadButton"] button').nth(7).click()
    parquet = pq.read_table(info.value.path())
    assert info.value.suggested_filename == "measurements.parquet" and parquet.num_rows == 7
    assert "throughput_qps" in parquet.column_names
    shoot(page, "1-overview")

    # Compare, reached through the sidebar: three charts for the one model, a table as CSV.
    page.get_by_role("link", name="Compare").click()
    page.get_by_role("heading", name="Compare").wait_for()
    page.goto(f"{url}/compare?sweep=dash")
    page.get_by_text("Pareto frontier").first.wait_for()
    page.locator(".vega-embed").nth(2).wait_for()  # charts mount after the text around them
    wait_idle(page)
    assert page.locator(".vega-embed").count() == 3
    page.locator(".vega-embed canvas, .vega-embed svg").nth(2).wait_for()  # drawn, not only declared
    name, csv = download(page, 0)
    assert name == "compare.csv"
    lines = csv.strip().splitlines()
    assert len(lines) == 1 + 6 and "speedup" in lines[0] and "vs_baseline" in lines[0]
    assert sum(",baseline," in line for line in lines) == 3  # the fp32 cells at batch 1, 2 and 4
    shoot(page, "2-compare")

    # Cell: one measured cell, linked by id; histogram, layers, engine graph, provenance.
    ok = snap.cell_frame[(snap.cell_frame.sweep_id == "dash") & (snap.cell_frame.status == "ok")]
    cell = ok[ok.precision == "fp16"].iloc[0]
    page.goto(f"{url}/cell?cell={cell.cell_id}")
    page.get_by_role("heading", name="Cell").wait_for()
    page.get_by_text("Provenance", exact=True).wait_for()  # the page's last section
    wait_idle(page)
    body = page.locator("body").inner_text()
    assert f"of {cell.queries:,} raw samples" in body and printed(cell.throughput_qps) in body
    assert "Top layers by time" in body and "Provenance" in body and "dash" in body
    page.get_by_text("Engine graph").first.scroll_into_view_if_needed()
    graph = page.locator('[data-testid="stImage"] img')
    graph.first.wait_for()
    assert graph.count() >= 1
    shoot(page, "3-cell")

    # Diff: fp32 against fp16 of the same model and batch; matched layers.
    base = ok[(ok.precision == "fp32") & (ok.batch == cell.batch)].iloc[0]
    page.get_by_role("link", name="Diff").click()
    page.get_by_role("heading", name="Diff").wait_for()
    page.goto(f"{url}/diff?a={base.cell_id}&b={cell.cell_id}")
    page.get_by_text("Matched layers").wait_for()
    wait_idle(page)
    metrics = dict(t.split("\n\n")[:2] for t in page.locator('[data-testid="stMetric"]').all_inner_texts())
    assert int(metrics["Matched layers"]) >= 3
    name, csv = download(page, 0)
    assert name == f"diff-{base.cell_id[:8]}-{cell.cell_id[:8]}.csv" and "time_delta_ms" in csv
    shoot(page, "4-diff")

    # SQL: a query works; reading /etc/passwd and writing a file are refused.
    page.get_by_role("link", name="SQL").click()
    page.get_by_role("heading", name="SQL").wait_for()
    count_by_precision = "SELECT precision, count(*) AS cells FROM cells WHERE sweep_id = 'dash' GROUP BY 1 ORDER BY 1"
    run_sql(page, count_by_precision)
    page.get_by_text("row(s) in").wait_for()
    name, csv = download(page, 0)
    assert csv.splitlines() == ["precision,cells", "bf16,6", "fp16,6", "fp32,6"]
    shoot(page, "5-sql-query")

    run_sql(page, "SELECT * FROM read_text('/etc/passwd')")
    page.get_by_text('Cannot access file "/etc/passwd"').wait_for()
    assert any(a.startswith("Refused: Permission Error") for a in alerts(page))
    assert "root:x:0:0" not in page.content()
    shoot(page, "6-sql-passwd-refused")

    target = warehouse / "dash" / "cells" / "written-by-browser.csv"
    for destination in (target, Path("/tmp/written-by-browser.csv")):  # inside the warehouse, and outside
        run_sql(page, count_by_precision)  # clears the previous refusal, so the next one is seen anew
        page.get_by_text("row(s) in").wait_for()
        run_sql(page, f"COPY (SELECT * FROM cells) TO '{destination}'")
        page.get_by_text("COPY statements are not allowed").wait_for()
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
    wait_idle(page)


def test_a_link_opens_its_page_on_a_fresh_server(warehouse: Path, page) -> None:
    """A shared URL (/cell?cell=...) is the first request the server sees: it must still be farm's
    page, in farm's navigation."""
    snap = Snapshot(warehouse)
    cell = snap.cell_frame[snap.cell_frame.status == "ok"].iloc[0]
    dashboard = Dashboard(warehouse)
    try:
        page.goto(f"{dashboard.url}/cell?cell={cell.cell_id}")
        page.get_by_text("Provenance", exact=True).wait_for()
        nav = [t.split("\n")[-1] for t in page.locator('[data-testid="stSidebarNav"] a').all_inner_texts()]
        assert nav == ["Overview", "Compare", "Cell", "Diff", "SQL"]
        assert cell.cell_id in page.locator("body").inner_text()
    finally:
        dashboard.stop()


def test_empty_warehouse_in_a_real_browser(tmp_path: Path, page) -> None:
    empty = tmp_path / "results"
    dashboard = Dashboard(empty)
    try:
        for path in ("", "/compare", "/cell", "/diff", "/sql"):
            page.goto(dashboard.url + path)
            page.get_by_text("No results yet").wait_for()
            page.get_by_text("bin/farm sweep configs/resnet.toml").wait_for()
            wait_idle(page)
            assert "does not exist" in page.locator("body").inner_text()
        shoot(page, "0-empty-warehouse")
    finally:
        dashboard.stop()
