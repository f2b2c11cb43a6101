"""The answer first and charts people read, in a real browser (headless Debian chromium through
Playwright, as test_browser.py), on a copy of the shipped GPU example (examples/results: ResNet-50
on an H200, 4 precisions x 4 batch sizes x 3 PyTorch modes, bf16 and some fp16 failing accuracy).

The landing page's summary is checked against figures computed here, from the warehouse's Parquet
files through DuckDB (not through the dashboard's code): per batch, the fastest cell that passes
accuracy, its samples/s, p99, speedup over fp32 eager, peak memory in MiB/GiB, and the fastest that
fails. Then the baseline is changed, the batch filter and the log-y toggle used, and every series
of the Compare page's charts found in their legends. Every check is an `expect` (retried until the
page shows it). Screenshots: answers-*.png in artifacts/screenshots/ (or $FARM_SCREENSHOTS)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from playwright.sync_api import expect

# its fixtures (browser, page) and helpers; importing it skips this module where there is no chromium
from tests.dashboard.test_browser import browser, page, printed, shoot, wait_idle  # noqa: F401

pytestmark = [pytest.mark.slow, pytest.mark.browser]
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "results"
SWEEP = "gpu-resnet50"

# Per model and batch: the fastest cell whose every accuracy row passes (ok = true) or fails (false).
FASTEST = """
WITH verdicts AS (SELECT cell_id, bool_and(verdict = 'pass') AS ok FROM accuracy GROUP BY cell_id)
SELECT c.batch, v.ok, c.precision, json_extract_string(c.options, '$.mode') AS mode, m.throughput_qps,
       m.throughput_samples_per_s, m.latency_p99_ms, m.peak_memory_bytes, m.energy_per_sample_mj
FROM cells c JOIN measurements m USING (cell_id) JOIN verdicts v USING (cell_id)
WHERE c.status = 'ok' AND c.sweep_id = ?
QUALIFY row_number() OVER (PARTITION BY c.batch, v.ok ORDER BY m.throughput_samples_per_s DESC) = 1
ORDER BY c.batch, v.ok DESC"""
BASELINE = """SELECT c.batch, m.throughput_qps FROM cells c JOIN measurements m USING (cell_id)
WHERE c.sweep_id = ? AND c.precision = ? AND json_extract_string(c.options, '$.mode') = ?"""

if not EXAMPLES.joinpath(SWEEP).is_dir():
    pytest.skip("no example warehouse in this checkout", allow_module_level=True)


def mib(value: float) -> str:
    return f"{value / 2**30:.2f} GiB" if value >= 2**30 else f"{value / 2**20:.2f} MiB"


@pytest.fixture(scope="module")
def example(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy: the server's log goes beside the warehouse, not into the checkout."""
    root = tmp_path_factory.mktemp("answers") / "results"
    shutil.copytree(EXAMPLES, root, ignore=shutil.ignore_patterns("gpu-engines"))  # the one sweep these answers are of
    return root


@pytest.fixture(scope="module")
def expected(example: Path) -> dict:
    """What the summary must say, per batch: computed from the Parquet files with DuckDB."""
    from farm.warehouse import Warehouse

    con = Warehouse(example).connect()
    rows = con.execute(FASTEST, [SWEEP]).fetchall()
    base = dict(con.execute(BASELINE, [SWEEP, "fp32", "eager"]).fetchall())
    compile_base = dict(con.execute(BASELINE, [SWEEP, "fp32", "compile"]).fetchall())
    answers: dict[int, dict] = {}
    for batch, ok, precision, mode, qps, rate, p99, peak, energy in rows:
        answers.setdefault(batch, {})["pass" if ok else "fail"] = {
            "label": f"{precision} · torch mode={mode}", "rate": printed(rate), "p99": printed(p99),
            "speedup": f"{qps / base[batch]:.2f}×", "compile_speedup": f"{qps / compile_base[batch]:.2f}×",
            "peak": mib(peak), "raw_rate": rate, "energy": None if energy is None else printed(energy)}
    return answers


def summary_rows(page):
    return page.get_by_test_id("stTable").first.locator("tbody tr")


def select(page, label: str, option: str) -> None:
    """Pick `option` in the selectbox or multiselect labelled `label`."""
    wait_idle(page)
    page.get_by_label(label, exact=True).click()  # not its help button ("Help for ...")
    page.get_by_role("option", name=option, exact=True).click()
    page.keyboard.press("Escape")  # a multiselect stays open after a pick


def test_the_landing_page_answers_first(example: Path, expected: dict, page, dashboard) -> None:
    server = dashboard(example)
    page.goto(server.url)
    expect(page.get_by_role("heading", name="Fastest configuration per model and batch")).to_be_visible()
    batches = sorted(expected)
    rows = summary_rows(page)
    expect(rows).to_have_count(len(batches))
    for index, batch in enumerate(batches):
        good, bad = expected[batch]["pass"], expected[batch].get("fail")  # none may fail at a batch
        cells = rows.nth(index).locator("td")
        failing = 7  # the failing configuration's column, after the energy per inference where there is one
        if good["energy"] is not None:
            expect(cells.nth(7)).to_have_text(good["energy"])
            failing = 8
        # batch, configuration, samples/s, p99 ms, speedup (verdict), accuracy, peak memory, then the failing one
        expect(cells.nth(0)).to_have_text(str(batch))
        expect(cells.nth(1)).to_have_text(good["label"])
        expect(cells.nth(2)).to_have_text(good["rate"])
        expect(cells.nth(3)).to_have_text(good["p99"])
        verdict = r" \((faster|slower|within noise|inconclusive|not judged)\)$"
        expect(cells.nth(4)).to_have_text(re.compile("^" + re.escape(good["speedup"]) + verdict))
        expect(cells.nth(5)).to_have_text(re.compile(r"^(cosine|top-1 agreement) [\d.]+( %)?, n "))
        expect(cells.nth(6)).to_have_text(good["peak"])
        if bad is None:
            expect(cells.nth(failing)).to_have_text("–")
            continue
        expect(cells.nth(failing)).to_have_text(bad["label"])
        faster = " ⚠ faster" if bad["raw_rate"] > good["raw_rate"] else ""
        expect(cells.nth(failing + 1)).to_have_text(bad["rate"] + faster)
    main = page.get_by_test_id("stMain")
    expect(main).to_contain_text("MiB")
    assert not re.search(r"(?<![\d.])\d{9,}", main.inner_text())  # bytes never raw (154140672)
    shoot(page, "answers-1-summary")

    # "Which precision and mode is fastest at batch 32, and what did it cost in accuracy?": one row
    select(page, "Batch sizes", "32")
    expect(rows).to_have_count(1)
    expect(rows.first.locator("td").nth(1)).to_have_text(expected[32]["pass"]["label"])
    shoot(page, "answers-2-summary-batch-32")

    # another baseline: every speedup is against it
    select(page, "Baseline for speedup", "fp32 · torch mode=compile")
    expect(rows.first.locator("td").nth(4)).to_have_text(
        re.compile("^" + re.escape(expected[32]["pass"]["compile_speedup"]) + " "))
    expect(main).to_contain_text("speedup over fp32 · torch mode=compile")
    assert "Traceback" not in server.log.read_text()


def test_compare_charts_people_read(example: Path, page, dashboard) -> None:
    from farm.dashboard.data import Snapshot, series_labels

    cells = Snapshot(example).cell_frame
    series = sorted(set(series_labels(cells)))
    assert len(series) == 12
    server = dashboard(example)
    page.goto(f"{server.url}/compare?sweep={SWEEP}")
    charts = page.locator(".vega-embed")
    # throughput and latency against batch, the Pareto frontier, energy per inference (GPU telemetry)
    expect(charts).to_have_count(4)
    throughput = charts.first
    # every series has a legend entry (and the backend/mode legend its 3), inside the chart: none cut off
    labels = throughput.locator("g.role-legend-label text")
    expect(labels).to_have_count(12 + 3)
    texts = labels.all_text_contents()
    assert sorted(texts[:12]) == series and sorted(texts[12:]) == [f"torch mode={m}" for m in
                                                                   ("compile", "cudagraphs", "eager")]
    frame = throughput.locator("svg").first.bounding_box()
    for label in labels.all():
        box = label.bounding_box()
        assert box and frame["y"] <= box["y"] and box["y"] + box["height"] <= frame["y"] + frame["height"] + 1
    # log y by default; the batch sizes on the Pareto points
    y_axis = throughput.locator('[aria-roledescription="axis"][aria-label^="Y-axis"]')
    expect(y_axis).to_have_attribute("aria-label", re.compile("for a log scale"))
    expect(charts.nth(2).locator("g.role-mark text").filter(has_text=re.compile(r"^b128$")).first).to_be_attached()
    shoot(page, "answers-3-compare")

    # batch 32 only, linear y
    select(page, "Batch sizes", "32")
    x_axis = throughput.locator('[aria-roledescription="axis"][aria-label^="X-axis"]')
    expect(x_axis).to_have_attribute("aria-label", re.compile("values from 32 to 32"))
    frontier = charts.nth(2).locator("g.role-mark text").filter(has_text=re.compile(r"^b\d+$"))
    expect(frontier.first).to_have_text("b32")  # the frontier's points are labelled, not all 12 (they overlapped)
    assert 1 <= len(frontier.all_text_contents()) < 12 and set(frontier.all_text_contents()) == {"b32"}
    wait_idle(page)
    page.get_by_text("Log y-axis").click()
    expect(y_axis).to_have_attribute("aria-label", re.compile("for a linear scale"))
    shoot(page, "answers-4-compare-batch-32-linear")
    assert "Traceback" not in server.log.read_text()
