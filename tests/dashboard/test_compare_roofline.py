"""The Compare page's roofline columns (farm.dashboard.roofline.cell_roofline) on the GPU example
warehouse: every ok cell has its achieved TFLOP/s, % of the H200's peaks and the roof that bounds it."""

from __future__ import annotations

import pytest

from tests.dashboard.test_app import EXAMPLES, open_page


@pytest.mark.skipif(not (EXAMPLES / "gpu-resnet50").is_dir(), reason="no example warehouse in this checkout")
def test_compare_page_shows_the_roofline_of_the_example_cells(monkeypatch) -> None:
    at = open_page(monkeypatch, EXAMPLES, "compare", sweep="gpu-resnet50")
    assert at.dataframe[0].value.achieved_tflops.isna().all()  # off until asked for: the page stays quick
    at.toggle(key="roofline").set_value(True).run()
    table = at.dataframe[0].value
    for column in ("achieved_tflops", "pct_peak_compute", "pct_peak_bandwidth", "bound"):
        assert column in table.columns, list(table.columns)
    measured = table[table.throughput_qps.notna()]
    assert len(measured) and measured.achieved_tflops.gt(0).all() and measured.pct_peak_compute.between(0, 100).all()
    assert set(measured.bound) <= {"compute", "memory"} and measured.bound.notna().all()
