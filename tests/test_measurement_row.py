"""A cell's `measurements` row is typed from where it is made to where it is written
(farm.measurement_row): a name that is not a column is refused where it is set, and a new column
is one field with its line."""

from __future__ import annotations

import dataclasses

import pyarrow as pa
import pytest

from farm.measurement_row import MeasurementRow, arrow_fields, column, docs_table
from farm.warehouse.schema import SCHEMAS


def test_a_name_that_is_not_a_column_is_refused_where_it_is_set() -> None:
    row = MeasurementRow.of({"queries": 10, "latency_median_ms": 1.5})
    with pytest.raises(KeyError, match="the measurements table has no column 'latency_p50_ms'"):
        row["latency_p50_ms"] = 1.5
    with pytest.raises(KeyError, match="no column 'qps'"):
        MeasurementRow.of({"qps": 3.0})
    assert row.get("qps") is None and dict(row) == {"queries": 10, "latency_median_ms": 1.5}


def test_it_merges_as_a_dict_of_what_was_put_in() -> None:
    """A column a log says is unknown (None, set through the mapping) stays a key and overrides,
    as it did when rows were dicts; one never set is not a key."""
    row = MeasurementRow.of({"timing_streams": 2, "queries": 5})
    row |= {"timing_streams": None}
    assert dict(row) == {"queries": 5, "timing_streams": None}
    merged = MeasurementRow.of({"timing_streams": 1, **row})
    assert merged["timing_streams"] is None and merged == {"queries": 5, "timing_streams": None}


def test_the_warehouse_schema_is_the_row_type() -> None:
    assert list(zip(SCHEMAS["measurements"].names, SCHEMAS["measurements"].types)) == [
        ("cell_id", pa.string()), *arrow_fields()]


def test_a_new_column_is_one_field_and_its_line() -> None:
    """What a contributor adds for a new figure: a field with its unit and meaning; its Arrow
    type, its place in the schema and its line in docs/warehouse.md follow from it."""
    queued = dataclasses.make_dataclass(
        "WithQueue", [("queue_median_ms", float | None, column("ms", "Median time a query waited in the queue."))],
        bases=(MeasurementRow,), eq=False)
    assert arrow_fields(queued)[-1] == ("queue_median_ms", pa.float64())
    assert arrow_fields(queued)[:-1] == arrow_fields()
    assert docs_table(queued).endswith("| `queue_median_ms` | ms | Median time a query waited in the queue. |\n")
    assert queued.of({"queue_median_ms": 0.25, "queries": 4})["queue_median_ms"] == 0.25
    with pytest.raises(KeyError):
        MeasurementRow.of({"queue_median_ms": 0.25})
