"""farm's records from what trtexec printed or exported: a `measurements` row, samples, the
build, and a `devices` row.

Figures are trtexec's own: the performance summary as printed (read by its version's rules:
`summary_definition`), or the per-query times of `--exportTimes` with statistics computed exactly
as for farm's own runs (farm.measure) and throughput as trtexec defines it.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import numpy as np

from farm.measure import latency_stats, phase_stats
from farm.measurement_row import MeasurementRow
from farm.records import BuildStats, Samples
from farm.trt_output.log import LogFacts
from farm.trt_output.versions import rules_for

# Bounds of what trtexec can have measured: a query or a layer that took over an hour, a whole run
# over a year, or a trillion queries a second is a damaged or hand-made file (1e308 would be
# stored, shown and compared as a figure). Times are milliseconds.
MAX_QUERY_MS = 3_600_000.0
MAX_TOTAL_MS = 365 * 24 * MAX_QUERY_MS
MAX_PER_SECOND = 1e12


def implausible_figure(name: str, value: Any) -> str | None:
    """Why `value`, read as trtexec's figure `name` (a measurements column or a layer's, a sample
    column), cannot be one it measured; None where it can (or it is no number)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.number)):
        return None
    value = float(value)
    if name.endswith("_ms") or name == "times_ms":
        total = "walltime" in name or "total" in name or name.startswith("warmup")
        bound = MAX_TOTAL_MS if total else MAX_QUERY_MS
        if not (0 <= value <= bound):
            return f"{name} = {value:.6g} ms is no time trtexec measured ({'a run' if total else 'a query or layer'} " \
                   f"of 0 to {bound / MAX_QUERY_MS:,.0f} h)"
    elif name.startswith("throughput") and not (0 <= value <= MAX_PER_SECOND):
        return f"{name} = {value:.6g} is no throughput trtexec measured (0 to 10^12 a second)"
    return None


def implausible(measurement: dict[str, Any] | None, layers: list[Any], samples: Samples | None) -> str | None:
    """The first figure of an ingested cell that trtexec cannot have measured (`implausible_figure`:
    NaN, infinite, negative or far out of range), named: a query's own before the statistics made
    of them; None where every one can be."""
    if samples is not None:
        for name in ("latency_ms", "enqueue_ms", "h2d_ms", "compute_ms", "d2h_ms"):
            column = getattr(samples, name)
            if column is None or not len(column):
                continue
            values = np.asarray(column, dtype=np.float64)
            bad = ~((values >= 0) & (values <= MAX_QUERY_MS))  # NaN fails both
            if bad.any():
                return f"query {int(np.argmax(bad)) + 1}: " + (implausible_figure(name, values[bad][0]) or name)
    for name, value in (measurement or {}).items():
        if why := implausible_figure(name, value):
            return why
    for layer in layers:
        for name in ("time_avg_ms", "time_median_ms"):
            if why := implausible_figure(name, getattr(layer, name, None)):
                return f"layer {getattr(layer, 'name', '?')!r}: {why}"
        for value in getattr(layer, "times_ms", None) or ():
            if why := implausible_figure("times_ms", value):
                return f"layer {getattr(layer, 'name', '?')!r}: {why}"
    return None


def summary_definition(facts: LogFacts) -> dict[str, Any]:
    """How to read a log's printed Throughput and query count in its version (versions): the
    number of samples each printed query stands for (`per_query`; None: unknown, so queries/s are
    unknown), whether the figures are the 7.x explicit-batch zeros (not figures), and what the
    batch was ('implicit' with --batch / "Batch: N", 'explicit', or None)."""
    rules = rules_for(facts.tensorrt_version, facts.layout_major)
    stated = facts.inference_batch
    if rules.explicit_batch_prints_zero and stated == 0:
        return {"per_query": None, "zeros": True, "batch": "explicit"}
    if stated:
        return {"per_query": stated, "zeros": False, "batch": "implicit"}
    if rules.major == 7:  # implicit or explicit, with a batch the log does not state
        return {"per_query": None, "zeros": facts.throughput_qps == 0, "batch": None}
    return {"per_query": 1, "zeros": False, "batch": "explicit" if stated == 0 else None}


def MeasurementFromSummary(facts: LogFacts, batch: int | None) -> MeasurementRow:
    """A measurements row from trtexec's performance summary (its statistics, as printed), its
    throughput and query count as queries (what a query meant in that version: summary_definition)."""
    latency = facts.summary.get("latency", {})
    definition = summary_definition(facts)
    per_query, printed = definition["per_query"], facts.throughput_qps
    qps = samples = queries = None
    if printed is not None and not definition["zeros"]:
        if per_query is not None:
            qps = printed / per_query
        if definition["batch"] == "implicit" or (definition["batch"] is None and definition["per_query"] is None):
            samples = printed  # batch x queries / walltime
        elif qps is not None and batch:
            samples = qps * batch
    if facts.queries_printed is not None and not definition["zeros"] and per_query:
        queries = facts.queries_printed // per_query
    walltime = facts.host_walltime_s if facts.host_walltime_s is not None else facts.trace_walltime_s
    row = MeasurementRow(queries=queries, throughput_qps=qps, throughput_samples_per_s=samples,
                         host_walltime_ms=walltime * 1e3 if walltime else None)
    for stat in ("min", "mean", "median", "p90", "p95", "p99", "max"):
        row[f"latency_{stat}_ms"] = latency.get(stat)
    for phase in ("enqueue", "h2d", "compute", "d2h"):
        stats = facts.summary.get(phase, {})
        row[f"{phase}_mean_ms"] = stats.get("mean")
        row[f"{phase}_median_ms"] = stats.get("median")
    row["compute_p99_ms"] = facts.summary.get("compute", {}).get("p99")
    return row


def _column(times: list[dict[str, float]], key: str) -> np.ndarray | None:
    """One timing of every query, where every query has it."""
    return np.asarray([t[key] for t in times]) if all(key in t for t in times) else None


def _walltime_ms(times: list[dict[str, float]]) -> float | None:
    """trtexec's walltime of a trace: last D2H end - first H2D start (None where not exported)."""
    start, end = _column(times, "startH2dMs"), _column(times, "endD2hMs")
    return float(end[-1] - start[0]) if start is not None and end is not None else None


def SamplesFromTimes(times: list[dict[str, float]]) -> Samples:
    """Every query of an `--exportTimes` trace as samples (one repeat), phases where exported."""
    start = _column(times, "startH2dMs")
    start_enqueue, end_enqueue = _column(times, "startEnqMs"), _column(times, "endEnqMs")
    enqueue = end_enqueue - start_enqueue if start_enqueue is not None and end_enqueue is not None else None
    return Samples(repeat=np.zeros(len(times), dtype=np.int32),
                   start_ms=(start - start[0]) if start is not None else np.zeros(len(times)),
                   latency_ms=np.asarray([t["latencyMs"] for t in times]), enqueue_ms=enqueue,
                   h2d_ms=_column(times, "h2dMs"), compute_ms=_column(times, "computeMs"),
                   d2h_ms=_column(times, "d2hMs"), walltime_ms=_walltime_ms(times) or 0.0)


def MeasurementFromTimes(times: list[dict[str, float]], batch: int | None) -> MeasurementRow:
    """A measurements row from `--exportTimes`: statistics computed as for the farm's own runs;
    throughput as trtexec defines it, queries / (last D2H end - first H2D start)."""
    samples = SamplesFromTimes(times)
    walltime = _walltime_ms(times)
    qps = len(times) / (walltime / 1e3) if walltime else None
    row = MeasurementRow(queries=len(times), throughput_qps=qps,
                         throughput_samples_per_s=qps * batch if qps and batch else None, host_walltime_ms=walltime,
                         repeats=1)
    row |= latency_stats(samples.latency_ms) | phase_stats(samples)
    return row


def DeviceRowFromLog(facts: LogFacts) -> dict[str, Any] | None:
    """A `devices` row from the log's "Device Information" (None where it names no device)."""
    device = facts.device
    if not device.get("name"):
        return None
    ident = device.get("uuid") or hashlib.sha256(json.dumps(device, sort_keys=True).encode()).hexdigest()[:16]
    return {"device_id": f"gpu-{ident}", "kind": "cuda", **device}


def BuildStatsFromLog(facts: LogFacts, artifact_bytes: int | None = None) -> BuildStats:
    """The build as the builder logged it (the pass the builder kept, the engine's); `artifact_bytes`: the
    engine file's size, where the caller has it."""
    return BuildStats(build_s=facts.build_s, artifact_bytes=artifact_bytes,
                      builder_peak_memory_bytes=facts.builder_peak_device_bytes,
                      builder_peak_host_memory_bytes=facts.builder_peak_host_bytes,
                      layers_before_fusion=facts.layers_after_parsing, layers_after_fusion=facts.layers_after_fusion,
                      layers_with_reformats=facts.layers_after_reformat,
                      host_persistent_bytes=facts.host_persistent_bytes,
                      device_persistent_bytes=facts.device_persistent_bytes, scratch_bytes=facts.scratch_bytes)
