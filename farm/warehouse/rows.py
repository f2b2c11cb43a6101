"""A cell's result as the warehouse's rows: the one place that maps the planner's cell and the
runner's result onto table columns (and computes the figures derived from several of them, such
as `layer_coverage_percent`). Used by the sweep's writer and by `farm ingest`; the storage below
(farm.warehouse.store) takes these rows and checks them, and never imports this module.

It reads the records' attributes only, and imports neither the planner nor the cell runner.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from farm.backends.registry import layer_kind
from farm.layers.coverage import layer_coverage_percent
from farm.layers.memory import total_bytes

if TYPE_CHECKING:
    from farm.records import Cell, CellResult
    from farm.warehouse.store import Rows, Warehouse

_ENGINE_MEMORY = ("host_persistent_bytes", "device_persistent_bytes", "scratch_bytes")  # builds: engine_*


def cell_tables(cell: Cell, result: CellResult, run_id: str, config_hash: str) -> dict[str, Rows]:
    """Every table's rows of one cell (`Warehouse.write_cell`): the figures only of an ok cell,
    the device's row where the cell reached one, the `cells` row always."""
    ok = result.status == "ok"
    tables: dict[str, Rows] = {}
    if result.build is not None and ok:
        build = {("engine_" + k if k in _ENGINE_MEMORY else k): v for k, v in vars(result.build).items()}
        tables["builds"] = [{"cell_id": cell.cell_id, **build}]
    if result.measurement is not None and ok:
        coverage = layer_coverage_percent(result.layers, result.measurement)
        tables["measurements"] = [{"cell_id": cell.cell_id, **result.measurement, "layer_coverage_percent": coverage}]
    if result.samples is not None and ok:
        tables["samples"] = samples_table(cell, result)
    if result.accuracy and ok:
        tables["accuracy"] = [{"cell_id": cell.cell_id, **row} for row in result.accuracy]
    if result.serving and ok:
        tables["serving"] = [{"cell_id": cell.cell_id, **row} for row in result.serving]
    if result.layers and ok:
        tables["layers"] = layer_rows(cell, result)
    if result.device is not None:
        tables["devices"] = [result.device]
    tables["cells"] = [cell_row(cell, result, run_id, config_hash)]
    return tables


def write_cell_result(warehouse: Warehouse, cell: Cell, result: CellResult, run_id: str, config_hash: str) -> None:
    """Write one cell's result: its rows (`cell_tables`) through `Warehouse.write_cell`."""
    warehouse.write_cell(cell.sweep, cell.cell_id, cell_tables(cell, result, run_id, config_hash))


def cell_row(cell: Cell, result: CellResult, run_id: str, config_hash: str) -> dict[str, Any]:
    """The cell's `cells` row."""
    duration = (result.finished_at - result.started_at).total_seconds() \
        if result.started_at and result.finished_at else None
    return {
        "cell_id": cell.cell_id, "sweep_id": cell.sweep, "run_id": run_id,
        "model": cell.model.name, "model_source": cell.model.source, "model_sha256": cell.model.sha256,
        "model_bytes": cell.model.size_bytes, "precision": cell.precision, "batch": cell.batch,
        "profile": cell.profile.name if cell.profile else None,
        "profile_ranges": cell.profile.describe() if cell.profile else None,
        "backend": cell.backend, "options": json.dumps(cell.options, sort_keys=True),
        "shapes": json.dumps({k: list(v) for k, v in cell.input_shapes.items()}),
        "status": result.status, "reason": result.reason, "traceback": result.traceback,
        "notes": "; ".join(filter(None, [cell.notes, serving_note(result.serving)])) or None,
        "device_id": result.device["device_id"] if result.device else None,
        "worker": describe_worker(result.worker),
        "host": result.host.get("host"), "cpu_model": result.host.get("cpu_model"),
        "cpu_cores": result.host.get("cpu_cores"), "versions": json.dumps(result.versions, sort_keys=True),
        "farm_version": result.versions.get("farm"), "farm_commit": result.farm_commit,
        "config_hash": config_hash, "started_at": result.started_at, "finished_at": result.finished_at,
        "duration_s": duration, "attempts": result.attempts,
        "earlier_attempts": "; ".join(result.earlier_attempts) or None,
        "scenario": cell.serving.label if cell.serving else None,
    }


def serving_note(rows: list[dict[str, Any]]) -> str | None:
    """A serving cell's answer in words (its `chosen` LoadGen test), for the cell's notes."""
    if not rows:
        return None
    first, chosen = rows[0], next((r for r in rows if r.get("chosen")), None)
    policy = f" (max delay {first['max_delay_ms']:g} ms)" if first["scenario"] == "server" else ""
    if chosen is None:
        bound = f" under p99 {first['slo_ms']:g} ms" if first["scenario"] == "server" and first.get("slo_ms") else ""
        return (f"{first['scenario']}{policy}: no test VALID{bound} in {len(rows)}: "
                f"{rows[-1].get('why_invalid') or 'p99 over the bound'}")[:500]
    if chosen["scenario"] == "server":
        twice = sum(1 for r in rows if r["target_qps"] == chosen["target_qps"] and r.get("valid")) >= 2
        if not chosen.get("slo_ms"):
            return f"server{policy}: {chosen['target_qps']:,.0f} queries/s VALID"
        return (f"server{policy}: {chosen['target_qps']:,.0f} queries/s under p99 {chosen['slo_ms']:g} ms "
                f"(p99 {chosen['latency_p99_ms']:.3g} ms, LoadGen VALID{' twice' if twice else ''}; {len(rows)} tests)"
                + split_verdicts(rows, chosen["target_qps"]) + failing_seconds(rows, chosen["target_qps"]))
    return (f"{chosen['scenario']}: p50 {chosen['latency_p50_ms']:.3g} ms, p99 {chosen['latency_p99_ms']:.3g} ms, "
            f"{chosen['samples_per_s'] or 0:,.0f} samples/s, LoadGen VALID")


def split_verdicts(rows: list[dict[str, Any]], answer_qps: float) -> str:
    """'; above it 4,539/s (1 of 2) passed some tests, not all: ...' where a rate over the answer both
    passed and failed the bound: the rate at which p99 meets it moved between tests of one search, so
    another run of the search can come apart from this one by more than the engine's speed moved."""
    from farm.serving.search import meets

    verdicts: dict[float, list[bool]] = {}
    for r in rows:
        if r["target_qps"] is not None and r["target_qps"] > answer_qps and not r.get("error"):  # the engine ran
            verdicts.setdefault(r["target_qps"], []).append(
                meets(bool(r.get("valid")), r.get("error"), r.get("latency_p99_ms"), r.get("slo_ms")))
    split = sorted(rate for rate, passed in verdicts.items() if any(passed) and not all(passed))
    if not split:
        return ""
    rates = ", ".join(f"{rate:,.0f}/s ({sum(verdicts[rate])} of {len(verdicts[rate])})" for rate in split)
    return (f"; above it {rates} passed some tests, not all: where p99 meets the bound moved between tests, "
            "so runs of this search can come further apart")


def failing_seconds(rows: list[dict[str, Any]], answer_qps: float, shown: int = 3) -> str:
    """'; over p99 30 ms in 2 of 10 seconds at 5,217/s, 60 of 60 seconds at 5,327/s': for the failed tests just
    above the answer, in how many seconds of each the samples' p99 was over the bound (the batcher's
    `p99_by_second_ms`): a failure in a few seconds is a burst, and a longer test dilutes it."""
    from farm.serving.search import meets

    failed = sorted((r for r in rows if r["target_qps"] is not None and r["target_qps"] > answer_qps
                     and r.get("slo_ms") and not r.get("error") and r.get("p99_by_second_ms")
                     and not meets(bool(r.get("valid")), None, r.get("latency_p99_ms"), r["slo_ms"])),
                    key=lambda r: r["target_qps"])[:shown]
    counts = []
    for r in failed:
        seconds = [ms for ms in json.loads(r["p99_by_second_ms"]) if ms is not None]
        counts.append(f"{sum(ms > r['slo_ms'] for ms in seconds)} of {len(seconds)} seconds at {r['target_qps']:,.0f}/s")
    return f"; over p99 {failed[0]['slo_ms']:g} ms in {', '.join(counts)}" if counts else ""


def describe_worker(worker: dict[str, Any] | None) -> str | None:
    """The executor worker that ran the cell, in words (the `cells.worker` column)."""
    if not worker:
        return None
    text = f"{worker.get('kind', '?')} worker pid {worker.get('pid')} on {worker.get('host')}"
    if worker.get("cell_pid"):
        text += f", cell process pid {worker['cell_pid']}"
    if worker.get("kind") == "cuda":
        text += f", Ray GPU {','.join(worker.get('gpu_ids') or []) or '?'}, " \
                f"CUDA_VISIBLE_DEVICES={worker.get('visible_devices')}"
    if worker.get("node_id"):  # which Ray node: two nodes may share a host name
        text += f", Ray node {str(worker['node_id'])[:12]}"
    return text


def samples_table(cell: Cell, result: CellResult) -> pa.Table:
    """The cell's `samples` rows (one per query), as an Arrow table: they can be many."""
    s = result.samples
    n = len(s)
    iteration = np.empty(n, dtype=np.int32)
    for r in np.unique(s.repeat):  # iteration counts within each repeat
        mask = s.repeat == r
        iteration[mask] = np.arange(mask.sum(), dtype=np.int32)

    def optional(values: np.ndarray | None) -> pa.Array:
        return pa.nulls(n, pa.float64()) if values is None else pa.array(values, pa.float64(), from_pandas=True)

    return pa.table({
        "cell_id": pa.array([cell.cell_id] * n, pa.string()),
        "repeat": pa.array(s.repeat, pa.int32()),
        "iteration": pa.array(iteration, pa.int32()),
        "start_ms": pa.array(s.start_ms, pa.float64()),
        "latency_ms": pa.array(s.latency_ms, pa.float64()),
        "enqueue_ms": optional(s.enqueue_ms), "h2d_ms": optional(s.h2d_ms),
        "compute_ms": optional(s.compute_ms), "d2h_ms": optional(s.d2h_ms),
    })


def _shapes(shapes: Iterable[list[int] | None]) -> str:
    return ", ".join("?" if s is None else "x".join(str(d) for d in s) or "scalar" for s in shapes)


def layer_rows(cell: Cell, result: CellResult) -> list[dict[str, Any]]:
    """The cell's `layers` rows: averages, medians and time shares filled in where the backend
    gave only per-call times."""
    averages = [layer.time_avg_ms if layer.time_avg_ms is not None else
                float(np.mean(layer.times_ms)) if layer.times_ms else None for layer in result.layers]
    total_time = sum(a for a in averages if a is not None)
    rows = []
    for layer, avg in zip(result.layers, averages):
        median = layer.time_median_ms if layer.time_median_ms is not None else \
            float(np.median(layer.times_ms)) if layer.times_ms else None
        share = layer.time_share_percent if layer.time_share_percent is not None else \
            100.0 * avg / total_time if avg is not None and total_time > 0 else None
        rows.append({
            "cell_id": cell.cell_id, "layer_index": layer.index, "name": layer.name, "type": layer.type,
            "fused_ops": layer.fused_ops, "tactic": layer.tactic,
            "input_tensors": json.dumps(layer.input_tensors), "output_tensors": json.dumps(layer.output_tensors),
            "input_shapes": _shapes(layer.input_shapes), "input_dtypes": ", ".join(layer.input_dtypes),
            "output_shapes": _shapes(layer.output_shapes), "output_dtypes": ", ".join(layer.output_dtypes),
            "input_bytes": layer.input_bytes, "weight_bytes": layer.weight_bytes, "output_bytes": layer.output_bytes,
            "total_bytes": total_bytes([layer.input_bytes, layer.weight_bytes, layer.output_bytes]),
            "macs": layer.macs, "calls": layer.calls if layer.calls is not None else len(layer.times_ms),
            "time_avg_ms": avg, "time_median_ms": median, "time_share_percent": share,
            "host_persistent_bytes": layer.host_persistent_bytes,
            "device_persistent_bytes": layer.device_persistent_bytes, "scratch_bytes": layer.scratch_bytes,
            "kind": layer.kind or layer_kind(cell.backend),  # ingested engines: 'engine layer'
        })
    return rows
