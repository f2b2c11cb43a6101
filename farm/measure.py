"""Timing like trtexec: warm up, then count queries until both a minimum count and a minimum
duration are met, keep every raw sample, and summarise with trtexec's own statistics.

The loop is deliberately bare (two clock reads and two appends per query) so that the farm's
figure for a cell is the engine's figure: benchmarks/harness_overhead.py checks the ratio.
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Any

import numpy as np

from farm.backends.base import PhaseTimes, QueryFn
from farm.config import Measurement

PERCENTILES = (90, 95, 99)
CI_LEVEL = 0.95


@dataclasses.dataclass
class Samples:
    """Every counted query of a cell, in order. Times in milliseconds."""

    repeat: np.ndarray  # which repeat the query belongs to (0-based)
    start_ms: np.ndarray  # host start, relative to the first counted query
    latency_ms: np.ndarray  # host walltime of the query, or h2d + compute + d2h on a device
    enqueue_ms: np.ndarray | None = None
    h2d_ms: np.ndarray | None = None
    compute_ms: np.ndarray | None = None
    d2h_ms: np.ndarray | None = None
    walltime_ms: float = 0.0  # sum over repeats of (last end - first start)
    warmup_queries: int = 0
    warmup_ms: float = 0.0

    def __len__(self) -> int:
        return len(self.latency_ms)


def run_timed(query: QueryFn, settings: Measurement) -> Samples:
    """Warm up, then run `settings.repeats` counted loops of `query`.

    The first call is always a warm-up call (it pays for lazy loading and allocation). Each
    counted loop runs until it has `min_iterations` queries and has lasted `min_duration_ms`.
    """
    clock = time.perf_counter
    warm_start = clock()
    warm_deadline = warm_start + settings.warmup_ms / 1e3
    warmup_queries = 0
    while True:
        query()
        warmup_queries += 1
        if clock() >= warm_deadline:
            break
    warmup_ms = (clock() - warm_start) * 1e3

    starts: list[float] = []
    ends: list[float] = []
    phases: list[PhaseTimes | None] = []
    repeat_of: list[int] = []
    walltime = 0.0
    min_iterations = settings.min_iterations
    for repeat in range(settings.repeats):
        count = 0
        begin = clock()
        deadline = begin + settings.min_duration_ms / 1e3
        end = begin
        while count < min_iterations or end < deadline:
            start = clock()
            phase = query()
            end = clock()
            starts.append(start)
            ends.append(end)
            phases.append(phase)
            count += 1
        repeat_of.extend([repeat] * count)
        walltime += ends[-1] - starts[-count]

    start_arr = np.asarray(starts)
    host_ms = (np.asarray(ends) - start_arr) * 1e3
    samples = Samples(
        repeat=np.asarray(repeat_of, dtype=np.int32),
        start_ms=(start_arr - start_arr[0]) * 1e3,
        latency_ms=host_ms,
        walltime_ms=walltime * 1e3,
        warmup_queries=warmup_queries,
        warmup_ms=warmup_ms,
    )
    if any(p is not None for p in phases):
        _attach_phases(samples, phases)
    else:
        # A host-timed (CPU) backend has no transfers: the whole query is compute.
        samples.compute_ms = host_ms
    return samples


def _attach_phases(samples: Samples, phases: list[PhaseTimes | None]) -> None:
    """Device backends time H2D / compute / D2H with events; latency is their sum (trtexec)."""

    def column(name: str) -> np.ndarray | None:
        values = [getattr(p, name) if p is not None else None for p in phases]
        if all(v is None for v in values):
            return None
        return np.asarray([np.nan if v is None else v for v in values], dtype=np.float64)

    samples.enqueue_ms = column("enqueue_ms")
    samples.h2d_ms = column("h2d_ms")
    samples.compute_ms = column("compute_ms")
    samples.d2h_ms = column("d2h_ms")
    parts = [a for a in (samples.h2d_ms, samples.compute_ms, samples.d2h_ms) if a is not None]
    if parts:
        samples.latency_ms = np.nansum(np.vstack(parts), axis=0)


def percentile(sorted_values: np.ndarray, p: float) -> float:
    """trtexec's percentile: sorted[max(N - 1 - int((1 - p/100) * N), 0)], in single precision.

    trtexec computes the excluded count in float32; doing the same keeps the farm's p99 and
    trtexec's p99 the same sample for the same data.
    """
    n = len(sorted_values)
    exclude = int((np.float32(1) - np.float32(p) / np.float32(100)) * np.float32(n))
    return float(sorted_values[max(n - 1 - exclude, 0)])


def latency_stats(values: np.ndarray, prefix: str = "latency") -> dict[str, float | None]:
    """min, mean, median, p90/p95/p99, max, std and coefficient of variation (percent).

    The same function summarises the farm's own samples and ingested `--exportTimes` files.
    """
    values = np.asarray(values, dtype=np.float64)
    values = values[~np.isnan(values)]
    keys = ["min", "mean", "median", *(f"p{p}" for p in PERCENTILES), "max", "std"]
    if values.size == 0:
        return {f"{prefix}_{k}_ms": None for k in keys} | {f"{prefix}_cv_percent": None}
    ordered = np.sort(values)
    mean = float(ordered.mean())
    std = float(ordered.std())  # population std, as trtexec's coefficient of variance uses
    stats: dict[str, float | None] = {
        f"{prefix}_min_ms": float(ordered[0]),
        f"{prefix}_mean_ms": mean,
        f"{prefix}_median_ms": float(np.median(ordered)),
    }
    for p in PERCENTILES:
        stats[f"{prefix}_p{p}_ms"] = percentile(ordered, p)
    stats[f"{prefix}_max_ms"] = float(ordered[-1])
    stats[f"{prefix}_std_ms"] = std
    stats[f"{prefix}_cv_percent"] = 100.0 * std / mean if mean > 0 else None
    return stats


def median_confidence_interval(values: np.ndarray, repeat: np.ndarray) -> tuple[float, float, str]:
    """A 95 % interval for the median latency.

    With two or more repeats: a t-interval over the per-repeat medians (run-to-run noise, the
    honest one). With one repeat: the distribution-free order-statistic interval of the median.
    """
    from scipy import stats

    repeats = np.unique(repeat)
    if len(repeats) >= 2:
        medians = np.asarray([np.median(values[repeat == r]) for r in repeats])
        centre = float(medians.mean())
        half = float(stats.t.ppf(0.5 + CI_LEVEL / 2, len(medians) - 1) * medians.std(ddof=1) / math.sqrt(len(medians)))
        return centre - half, centre + half, "t_over_repeat_medians"
    ordered = np.sort(values)
    n = len(ordered)
    lower_rank = max(int(stats.binom.ppf((1 - CI_LEVEL) / 2, n, 0.5)), 1)  # 1-based
    upper_rank = min(n - lower_rank + 1, n)
    return float(ordered[lower_rank - 1]), float(ordered[upper_rank - 1]), "order_statistic"


def phase_stats(samples: Samples) -> dict[str, float | None]:
    """Mean and median of each phase (enqueue, H2D, compute, D2H) and the p99 of compute."""
    row: dict[str, float | None] = {}
    for phase in ("enqueue", "h2d", "compute", "d2h"):
        values = getattr(samples, f"{phase}_ms")
        row[f"{phase}_mean_ms"] = float(np.nanmean(values)) if values is not None else None
        row[f"{phase}_median_ms"] = float(np.nanmedian(values)) if values is not None else None
    row["compute_p99_ms"] = (latency_stats(samples.compute_ms, "compute")["compute_p99_ms"]
                             if samples.compute_ms is not None else None)
    return row


def summarize(samples: Samples, batch: int, settings: Measurement, inferences_per_query: int = 1) -> dict[str, Any]:
    """One `measurements` row (without the cell id) from a cell's samples.

    Throughput counts inferences: `inferences_per_query` > 1 when each timed query runs several
    concurrent inferences (several streams), as trtexec's --infStreams counts them."""
    n = len(samples)
    walltime_s = samples.walltime_ms / 1e3
    qps = n * inferences_per_query / walltime_s if walltime_s > 0 else None
    row: dict[str, Any] = {
        "queries": n,
        "throughput_qps": qps,
        "throughput_samples_per_s": qps * batch if qps is not None else None,
        "host_walltime_ms": samples.walltime_ms,
        "repeats": int(samples.repeat.max()) + 1 if n else 0,
        "warmup_queries": samples.warmup_queries,
        "warmup_ms": samples.warmup_ms,
    }
    row |= latency_stats(samples.latency_ms) | phase_stats(samples)
    low, high, method = median_confidence_interval(samples.latency_ms, samples.repeat)
    medians = [float(np.median(samples.latency_ms[samples.repeat == r])) for r in np.unique(samples.repeat)]
    row["median_ci_low_ms"] = low
    row["median_ci_high_ms"] = high
    row["median_ci_method"] = method
    row["repeat_spread_percent"] = (
        100.0 * (max(medians) - min(medians)) / row["latency_median_ms"]
        if len(medians) > 1 and row["latency_median_ms"] > 0 else None
    )
    cv = row["latency_cv_percent"]
    row["stable"] = bool(cv is not None and cv <= settings.max_cv_percent)
    row["max_cv_percent"] = settings.max_cv_percent
    return row
