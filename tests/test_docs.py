"""Every config key and every warehouse column is documented; the example SQL runs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from farm.backends import BACKENDS, backend_class
from farm.config import (
    Axes,
    CalibrationSpec,
    InputOverride,
    Measurement,
    ModelSpec,
    PrecisionSettings,
    Serving,
    SweepConfig,
    Tolerance,
)
from farm.warehouse import SCHEMAS, Warehouse

DOCS = Path(__file__).resolve().parent.parent / "docs"


def config_keys() -> set[str]:
    # A new top-level table must be added here and to docs/config.md.
    assert set(SweepConfig.model_fields) == {"name", "description", "models", "axes", "profiles", "measurement",
                                             "precision", "accuracy", "serving", "backends"}
    keys = {"name", "description", "profiles.NAME.DIM", "accuracy.enabled"}
    keys |= {f"models.{f}" for f in ModelSpec.model_fields if f not in ("inputs", "calibration")}
    keys |= {f"models.calibration.{f}" for f in CalibrationSpec.model_fields}
    keys |= {f"precision.{f}" for f in PrecisionSettings.model_fields}
    keys |= {f"accuracy.tolerances.PRECISION.{f}" for f in Tolerance.model_fields}
    keys |= {f"models.inputs.NAME.{f}" for f in InputOverride.model_fields}
    keys |= {f"axes.{f}" for f in Axes.model_fields}
    keys |= {f"measurement.{f}" for f in Measurement.model_fields}
    keys |= {f"serving.{f}" for f in Serving.model_fields}
    for backend in BACKENDS:
        keys |= {f"backends.{backend}.{f}" for f in backend_class(backend).Options.model_fields}
    return keys


def test_every_config_key_is_documented() -> None:
    text = (DOCS / "config.md").read_text()
    missing = sorted(k for k in config_keys() if f"`{k}`" not in text)
    assert not missing, f"undocumented keys in docs/config.md: {missing}"


def test_every_warehouse_column_is_documented() -> None:
    text = (DOCS / "warehouse.md").read_text()
    sections = dict(re.findall(r"^## `(\w+)`\n(.*?)(?=^## |\Z)", text, flags=re.S | re.M))
    for table, schema in SCHEMAS.items():
        assert table in sections, f"docs/warehouse.md has no section for `{table}`"
        documented = set(re.findall(r"^\| `(\w+)` \|", sections[table], flags=re.M))
        missing = [c for c in schema.names if c not in documented]
        assert not missing, f"undocumented columns of {table}: {missing}"
        extra = documented - set(schema.names)
        assert not extra, f"docs/warehouse.md documents columns {table} lacks: {extra}"


def test_the_measurements_table_is_made_from_the_row_type() -> None:
    """docs/warehouse.md's `measurements` columns are farm.measurement_row's fields, unit and
    meaning and order: `python -m farm.measurement_row` prints the table to paste."""
    from farm.measurement_row import docs_table

    text = (DOCS / "warehouse.md").read_text()
    section = text[text.index("## `measurements`"):text.index("## `samples`")]
    assert docs_table() in section, "docs/warehouse.md's measurements table differs: python -m farm.measurement_row"


@pytest.mark.slow
def test_example_sql_runs(models_dir: Path) -> None:
    from farm.cli import main
    from tests.conftest import write_sweep

    config = write_sweep(models_dir.parent, '[[models]]\nsource = "models/tiny.onnx"\n[axes]\nbatch_sizes = [1, 2]\n')
    results = models_dir.parent / "results"
    assert main(["sweep", str(config), "--results", str(results), "--executor", "local"]) == 0
    con = Warehouse(results).connect()
    cell = con.execute("SELECT cell_id FROM cells LIMIT 1").fetchone()[0]
    blocks = re.findall(r"```sql\n(.*?)```", (DOCS / "warehouse.md").read_text(), flags=re.S)
    assert len(blocks) >= 3
    for sql in blocks:
        rows = con.execute(sql.replace("cb0d3c25%", f"{cell[:8]}%")).fetchall()
        if "status = 'failed'" not in sql and "NOT stable" not in sql:
            assert rows, sql


def test_help_names_every_table_and_dashboard_page(capsys) -> None:
    """`farm query --help` names exactly the warehouse's tables, `farm dashboard --help` every page
    the dashboard has (read from its navigation, without starting Streamlit)."""
    import re

    from farm.cli import main
    from farm.warehouse.schema import TABLES

    def help_of(command: str) -> str:
        try:
            main([command, "--help"])
        except SystemExit:
            pass
        return " ".join(capsys.readouterr().out.split())

    named = re.search(r"tables: ([a-z, ]+);", help_of("query")).group(1)
    assert sorted(named.split(", ")) == sorted(TABLES)
    pages = re.findall(r'title="([^"]+)"', (DOCS.parent / "farm" / "dashboard" / "app.py").read_text())
    dashboard = help_of("dashboard")
    assert len(pages) >= 6 and all(page in dashboard for page in pages), (pages, dashboard)
