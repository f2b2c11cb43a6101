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
from farm.records import BuildStats, Samples
from farm.trt_output.log import LogFacts
from farm.trt_output.versions import rules_for


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


def MeasurementFromSummary(facts: LogFacts, batch: int | None) -> dict[str, Any]:
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
    row: dict[str, Any] = {"queries": queries, "throughput_qps": qps, "throughput_samples_per_s": samples,
                           "host_walltime_ms": walltime * 1e3 if walltime else None}
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


def MeasurementFromTimes(times: list[dict[str, float]], batch: int | None) -> dict[str, Any]:
    """A measurements row from `--exportTimes`: statistics computed as for the farm's own runs;
    throughput as trtexec defines it, queries / (last D2H end - first H2D start)."""
    samples = SamplesFromTimes(times)
    walltime = _walltime_ms(times)
    qps = len(times) / (walltime / 1e3) if walltime else None
    row: dict[str, Any] = {"queries": len(times), "throughput_qps": qps,
                           "throughput_samples_per_s": qps * batch if qps and batch else None,
                           "host_walltime_ms": walltime, "repeats": 1}
    return row | latency_stats(samples.latency_ms) | phase_stats(samples)


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
