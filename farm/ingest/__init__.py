"""`farm ingest`: existing TensorRT output into the warehouse, one cell per engine.

The files of one engine (profile JSON, times JSON, layer-info JSON, trtexec or verbose build
logs, in any mix) are recognised by content and combined: layer information joined to per-layer
times by name, per-layer memory by the engine explorer's rule, the performance summary or the
per-query times as the measurement, build facts as the build, the device as a `devices` row.
Figures are TensorRT's own: nothing here computes a number TensorRT did not produce, except the
statistics of an `--exportTimes` file (computed exactly as for the farm's own runs) and the
per-layer byte counts (from the shapes and types TensorRT printed).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np

from farm.backends.base import BuildStats, LayerRecord
from farm.config import Measurement
from farm.errors import UserError
from farm.ingest.trt_files import LogFacts, Profile, detect_kind, read_layer_info_json, read_log, read_profile_json, \
    read_times_json
from farm.layers.engine import EngineLayer, fill_weights, join_key, join_layers
from farm.measure import Samples, latency_stats, phase_stats
from farm.models import ModelArtifact
from farm.plan import Cell
from farm.provenance import farm_commit, host_info, library_versions
from farm.worker import CellResult

_PRECISIONS = {"FP32": "fp32", "FP16": "fp16", "BF16": "bf16", "INT8": "int8", "FP8": "fp8", "TF32": "tf32"}


@dataclasses.dataclass
class FileReport:
    path: Path
    kind: str | None
    found: str  # what was read from it, or why nothing was


@dataclasses.dataclass
class EngineIngest:
    name: str
    cell: Cell
    result: CellResult
    files: list[FileReport]
    unmatched_profile_rows: list[str]
    unmatched_layers: list[str]


def ingest_engine(name: str, paths: list[Path], sweep: str) -> EngineIngest:
    """Read one engine's files and turn them into a cell and its result (nothing is written)."""
    reports: list[FileReport] = []
    facts = LogFacts()
    layers: list[EngineLayer] = []
    profile: Profile | None = None
    times: list[dict[str, float]] | None = None
    digest = hashlib.sha256(sweep.encode() + name.encode())
    for path in paths:
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            raise UserError(f"cannot read {path}: {exc.strerror or exc}") from None
        digest.update(hashlib.sha256(text.encode()).digest())
        kind = detect_kind(text)
        try:
            if kind == "profile":
                profile = read_profile_json(text)
                found = f"per-layer profile: {len(profile.rows)} layers, {profile.count} iterations"
            elif kind == "times":
                times = read_times_json(text)
                found = f"per-query times: {len(times)} queries"
            elif kind == "layer_info":
                layers = read_layer_info_json(text)
                found = f"engine inspector JSON: {len(layers)} layers"
            elif kind == "log":
                log = read_log(text)
                _merge(facts, log)
                if log.layers:
                    layers = log.layers
                if log.profile and profile is None:
                    profile = log.profile
                found = _describe_log(log)
            else:
                found = "not recognised as TensorRT output (profile, times or layer-info JSON, trtexec or builder log)"
        except (ValueError, KeyError, TypeError) as exc:
            kind, found = None, f"unreadable {kind} file: {type(exc).__name__}: {exc}"
        reports.append(FileReport(path, kind, found))

    fill_weights(layers, facts.conv_weight_shapes)
    records, unmatched_rows, unmatched_layers = _layer_records(layers, profile, facts)
    cell = _cell(name, paths, sweep, digest.hexdigest()[:16], layers, facts)
    started = dt.datetime.now(dt.timezone.utc)
    result = CellResult(
        cell.cell_id, "ok", started_at=started, finished_at=started, host=host_info(),
        versions={**library_versions(), **({"tensorrt": facts.tensorrt_version} if facts.tensorrt_version else {})},
        farm_commit=farm_commit(), layers=records,
        build=BuildStats(
            build_s=facts.build_s, builder_peak_memory_bytes=facts.builder_peak_device_bytes,
            builder_peak_host_memory_bytes=facts.builder_peak_host_bytes,
            layers_before_fusion=facts.layers_after_parsing, layers_after_fusion=facts.layers_after_fusion,
            layers_with_reformats=facts.layers_after_reformat, host_persistent_bytes=facts.host_persistent_bytes,
            device_persistent_bytes=facts.device_persistent_bytes, scratch_bytes=facts.scratch_bytes,
        ) if _has_build_facts(facts) else None,
        device=_device_row(facts.device) if facts.device.get("name") else None,
    )
    if times:
        result.samples, result.measurement = _from_times(times, cell.batch)
    elif facts.throughput_qps is not None or facts.summary:
        result.measurement = _from_summary(facts, cell.batch)
    if not any(r.kind for r in reports):
        result.status, result.reason = "failed", "no file of this engine was recognised as TensorRT output"
    return EngineIngest(name, cell, result, reports, unmatched_rows, unmatched_layers)


def _merge(into: LogFacts, log: LogFacts) -> None:
    """Several logs of one engine: later non-empty facts fill in what earlier ones lacked."""
    for field in dataclasses.fields(LogFacts):
        value = getattr(log, field.name)
        if value in (None, {}, []) or field.name in ("layers", "profile"):
            continue
        current = getattr(into, field.name)
        if isinstance(current, dict):
            current.update(value)
        elif current is None:
            setattr(into, field.name, value)


def _describe_log(log: LogFacts) -> str:
    parts = []
    if log.layers:
        parts.append(f"{len(log.layers)} engine layers")
    if log.profile:
        parts.append(f"per-layer profile table ({len(log.profile.rows)} layers)")
    if log.summary or log.throughput_qps is not None:
        parts.append("performance summary")
    if log.device:
        parts.append("device information")
    if log.layers_after_parsing is not None:
        parts.append("layer counts through fusion")
    if log.layer_memory:
        parts.append(f"memory of {len(log.layer_memory)} layers")
    if log.conv_weight_shapes:
        parts.append(f"{len(log.conv_weight_shapes)} convolution kernel shapes")
    return "log: " + (", ".join(parts) if parts else "nothing farm stores")


def _has_build_facts(facts: LogFacts) -> bool:
    return any(v is not None for v in (facts.build_s, facts.layers_after_parsing, facts.builder_peak_device_bytes,
                                       facts.host_persistent_bytes))


def _layer_records(layers: list[EngineLayer], profile: Profile | None,
                   facts: LogFacts) -> tuple[list[LayerRecord], list[str], list[str]]:
    rows = profile.rows if profile else []
    matched, unmatched_rows, unmatched_layers = join_layers(layers, [r.name for r in rows])
    row_of_layer = {index: rows[[r.name for r in rows].index(name)] for name, index in matched.items()}
    memory = {join_key(k): v for k, v in facts.layer_memory.items()}
    records = []
    for index, layer in enumerate(layers):
        row = row_of_layer.get(index)
        mem = facts.layer_memory.get(layer.name) or memory.get(join_key(layer.name)) or {}
        records.append(LayerRecord(
            index=index, name=layer.name, type=layer.type or "?", times_ms=[], tactic=layer.tactic,
            input_tensors=[t.name for t in layer.inputs], output_tensors=[t.name for t in layer.outputs],
            input_shapes=[_display_dims(t) for t in layer.inputs], input_dtypes=[t.dtype or "?" for t in layer.inputs],
            output_shapes=[_display_dims(t) for t in layer.outputs],
            output_dtypes=[t.dtype or "?" for t in layer.outputs],
            input_bytes=layer.input_bytes, weight_bytes=layer.weight_bytes, output_bytes=layer.output_bytes,
            macs=layer.macs, fused_ops=" + ".join(_fused(layer.name)) or None,
            time_avg_ms=row.average_ms if row else None, time_median_ms=row.median_ms if row else None,
            time_share_percent=row.percentage if row else None,
            calls=profile.count if row and profile else None, **mem,
        ))
    for name in unmatched_rows:  # timed rows with no layer information: times only, sizes unknown
        row = next(r for r in rows if r.name == name)
        records.append(LayerRecord(index=len(records), name=name, type="?", times_ms=[], time_avg_ms=row.average_ms,
                                   time_median_ms=row.median_ms, time_share_percent=row.percentage,
                                   calls=profile.count if profile else None))
    return records, (unmatched_rows if layers else []), (unmatched_layers if rows else [])


def _display_dims(tensor) -> list[int] | None:
    """Dimensions as printed (negative = dynamic), vector formats reduced to the logical size."""
    if not tensor.raw_dims:
        return tensor.dims
    try:
        return [int(p.strip().split(":")[0]) for p in tensor.raw_dims.split(",") if p.strip()]
    except ValueError:
        return None


def _fused(name: str) -> list[str]:
    from farm.layers.engine import member_nodes

    members = member_nodes(name)
    return members if len(members) > 1 else []


def _cell(name: str, paths: list[Path], sweep: str, cell_id: str, layers: list[EngineLayer], facts: LogFacts) -> Cell:
    precision = _precision(facts, layers)
    first_input = next((t for layer in layers for t in layer.inputs), None)
    batch = first_input.dims[0] if first_input is not None and first_input.dims else None
    size = sum(p.stat().st_size for p in paths)
    model = ModelArtifact(name, "ingest:" + ",".join(p.name for p in paths), paths[0].resolve(), cell_id, size, (), {})
    options = {"ingested_files": [str(p) for p in paths], "trtexec_options": facts.options}
    notes = f"ingested from {len(paths)} file(s) of real TensorRT output"
    if facts.tensorrt_version:
        notes += f" (TensorRT {facts.tensorrt_version})"
    return Cell(cell_id, sweep, model, precision, batch, None, "tensorrt", options, Measurement(), {}, None, notes,
                "cuda")


def _precision(facts: LogFacts, layers: list[EngineLayer]) -> str:
    option = facts.options.get("build.Precision", "")
    flags = [_PRECISIONS[p] for p in _PRECISIONS if p in option.upper()]
    if flags:
        return "+".join(flags)
    types = {t.dtype for layer in layers for t in layer.inputs + layer.outputs if t.dtype}
    for trt, name in (("Int8", "int8"), ("FP8", "fp8"), ("Half", "fp16"), ("BFloat16", "bf16"), ("Float", "fp32")):
        if trt in types:
            return name  # the lowest precision any layer runs, as the layer information says
    return "unknown"


def _device_row(device: dict[str, Any]) -> dict[str, Any]:
    ident = device.get("uuid") or hashlib.sha256(json.dumps(device, sort_keys=True).encode()).hexdigest()[:16]
    return {"device_id": f"gpu-{ident}", "kind": "cuda", **device}


def _from_summary(facts: LogFacts, batch: int | None) -> dict[str, Any]:
    """A measurements row from trtexec's performance summary (its statistics, as printed)."""
    latency = facts.summary.get("latency", {})
    row: dict[str, Any] = {"throughput_qps": facts.throughput_qps,
                           "throughput_samples_per_s": facts.throughput_qps * batch
                           if facts.throughput_qps is not None and batch else None,
                           "host_walltime_ms": facts.host_walltime_s * 1e3 if facts.host_walltime_s else None}
    for stat in ("min", "mean", "median", "p90", "p95", "p99", "max"):
        row[f"latency_{stat}_ms"] = latency.get(stat)
    for phase in ("enqueue", "h2d", "compute", "d2h"):
        stats = facts.summary.get(phase, {})
        row[f"{phase}_mean_ms"] = stats.get("mean")
        row[f"{phase}_median_ms"] = stats.get("median")
    row["compute_p99_ms"] = facts.summary.get("compute", {}).get("p99")
    return row


def _from_times(times: list[dict[str, float]], batch: int | None) -> tuple[Samples, dict[str, Any]]:
    """Samples and statistics from `--exportTimes`, computed as for the farm's own runs; throughput
    as trtexec defines it: queries / (last D2H end - first H2D start)."""
    latency = np.asarray([t["latencyMs"] for t in times])

    def column(key: str) -> np.ndarray | None:
        return np.asarray([t[key] for t in times]) if all(key in t for t in times) else None

    start = column("startH2dMs")
    end = column("endD2hMs")
    enqueue = (column("endEnqMs") - column("startEnqMs")) if column("startEnqMs") is not None else None
    walltime = float(end[-1] - start[0]) if start is not None and end is not None else None
    samples = Samples(repeat=np.zeros(len(times), dtype=np.int32),
                      start_ms=(start - start[0]) if start is not None else np.zeros(len(times)),
                      latency_ms=latency, enqueue_ms=enqueue, h2d_ms=column("h2dMs"), compute_ms=column("computeMs"),
                      d2h_ms=column("d2hMs"), walltime_ms=walltime or 0.0)
    qps = len(times) / (walltime / 1e3) if walltime else None
    row: dict[str, Any] = {"queries": len(times), "throughput_qps": qps,
                           "throughput_samples_per_s": qps * batch if qps and batch else None,
                           "host_walltime_ms": walltime, "repeats": 1}
    row |= latency_stats(latency) | phase_stats(samples)
    return samples, row
