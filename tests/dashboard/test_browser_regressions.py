"""The Regressions page in the real browser (Debian's chromium through Playwright), on real sweeps
of a tiny CNN (tests/test_compare.py's `runs`: 'base', and 'planted' with one convolution doing 12
times the work): its counts, its verdicts and the planted layer among the explaining ones are
`farm compare`'s, computed here independently of the page."""

from __future__ import annotations

from pathlib import Path

import pytest

from farm.compare import SLOWER, compare_sweeps
from tests.dashboard.test_browser import browser, expect, metric, page, shoot, wait_idle  # noqa: F401 - the fixtures, shared
from tests.test_compare import runs as runs

pytestmark = [pytest.mark.slow, pytest.mark.browser]


def test_regressions_page_finds_the_planted_slowdown(runs: Path, page, dashboard) -> None:  # noqa: F811
    expected = compare_sweeps("base", "planted", runs, min_effect_percent=3.0)  # the page's defaults
    slower = [p for p in expected.pairs if p.verdict == SLOWER]
    assert slower and len(expected.regressed) >= len(slower)
    server = dashboard(runs)
    page.goto(f"{server.url}/regressions")
    main = page.get_by_test_id("stMain")
    expect(page.get_by_role("heading", name="Regressions")).to_be_visible()
    expect(metric(page, "Regressed")).to_have_text(str(len(expected.regressed)))
    expect(metric(page, "Slower")).to_have_text(str(len(slower)))
    worst = slower[0]
    # the worst regression first, named by its id prefix and configuration, with its change
    expect(main).to_contain_text(f"{worst.new_id[:8]} {worst.label}: {100 * worst.effect.effect:+.1f} %")
    planted = [row["name_new"] for row in worst.layers.rows if "_planted" in str(row.get("name_new"))]
    assert planted  # the layer the slowdown was planted in explains it
    expect(main).to_contain_text(planted[0])
    wait_idle(page)
    shoot(page, "regressions-1-planted")
    assert "Traceback" not in server.log.read_text()
