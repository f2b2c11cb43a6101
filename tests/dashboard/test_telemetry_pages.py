"""The Cell and Compare pages show a cell's GPU telemetry, and a throttled cell says so; a warehouse
written before telemetry (examples/results) still opens on both pages."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from farm.cli import main
from tests.conftest import swept_tiny, tiny_sweep_text, warehouse_without_telemetry
from tests.dashboard.test_app import metrics, open_page, texts

ROOT = Path(__file__).resolve().parents[2]
# what a throttled H100 cell could have recorded (made up: this machine has no GPU)
FIGURES = {"energy_j": 2000.0, "energy_per_query_mj": 400.0, "energy_per_sample_mj": 12.5, "power_mean_w": 666.0,
           "power_max_w": 700.0, "power_limit_w": 700.0, "sm_clock_min_mhz": 1410, "sm_clock_median_mhz": 1755.0,
           "mem_clock_min_mhz": 2619, "mem_clock_median_mhz": 2619.0, "temperature_max_c": 71,
           "gpu_util_mean_percent": 99.0, "throttle_reasons": "sw_power_cap", "throttled": True,
           "throttled_percent": 40.0, "telemetry_samples": 60, "telemetry_window_ms": 3000.0, "telemetry_note": None}


@pytest.fixture(scope="module")
def throttled(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    base = tmp_path_factory.mktemp("telemetry")
    results = swept_tiny(base, tiny_sweep_text("gpu", (1,), ("fp32",)))
    [path] = (results / "gpu" / "measurements").glob("*.parquet")
    table = pq.read_table(path)
    for name, value in FIGURES.items():
        column = pa.array([value], table.schema.field(name).type)
        table = table.set_column(table.schema.get_field_index(name), name, column)
    pq.write_table(table, path)
    return results, path.stem


def test_cell_page_says_throttled(monkeypatch, throttled) -> None:
    results, cell_id = throttled
    at = open_page(monkeypatch, results, "cell", cell=cell_id)
    shown = metrics(at)
    assert shown["Energy / inference (mJ)"] == "400" and shown["Energy / sample (mJ)"] == "12.5"
    assert shown["Power mean / max (W)"] == "666 / 700" and shown["SM clock median / min (MHz)"] == "1755 / 1410"
    assert all(len(value) <= 11 for value in shown.values()), shown  # what a metric shows uncut in a row of four
    page = texts(at)
    assert "**Throttled**" in page and "sw_power_cap in 40 % of the samples" in page
    assert "60 samples over the 3 s timed window" in page


def test_compare_page_charts_energy(monkeypatch, throttled) -> None:
    results, _ = throttled
    at = open_page(monkeypatch, results, "compare", sweep="gpu")
    assert "Energy per inference against throughput" in texts(at)


@pytest.mark.parametrize("page", ["cell", "compare"])
def test_warehouse_without_telemetry_opens(monkeypatch, tmp_path: Path, page: str) -> None:
    at = open_page(monkeypatch, warehouse_without_telemetry(tmp_path / "results"), page)
    assert "Energy per inference" not in texts(at) and "GPU telemetry" not in [s.value for s in at.subheader]


def test_show_and_summary_say_throttled(throttled, capsys) -> None:
    from types import SimpleNamespace

    from farm.cli.sweep_table import summary_table
    from farm.warehouse import Warehouse

    results, cell_id = throttled
    assert main(["show", "gpu", "--results", str(results), "--format", "csv"]) == 0
    shown = capsys.readouterr().out.splitlines()
    header, row = shown[0].split(","), shown[1].split(",")
    assert row[header.index("throttled")] == "yes: sw_power_cap"
    cell = SimpleNamespace(cell_id=cell_id, backend="onnxruntime", options={}, serving=None, precision="fp32")
    outcome = SimpleNamespace(cells=[cell], sweep="gpu", run_id="another run")
    _, _, notes = summary_table(Warehouse(results), outcome)
    assert any("GPU clocks slowed during the timed window: sw_power_cap" in n for n in notes), notes
