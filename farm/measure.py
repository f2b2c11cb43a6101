"""Timing like trtexec: warm up, then count queries until both a minimum count and a minimum
duration are met, keep every raw sample, and summarise with trtexec's own statistics.

The loop is deliberately bare (two clock reads and two appends per query) so that the farm's
figure for a cell is the engine's figure: benchmarks/harness_overhead.py checks the ratio.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from typing import Protocol

import numpy as np

from farm.cpus import host_contention, host_snapshot, loop_ms, pinnable_cpus, quickest_cpu
from farm.measurement_row import MeasurementRow
from farm.records import MeasurementSettings, PhaseTimes, QueryFn, Samples

PERCENTILES = (90, 95, 99)
CI_LEVEL = 0.95
# A tail percentile is only as good as the samples beyond it: with fewer than this many samples
# above it, p99 is one or two queries' latency, and shown with a marker (`latency_pNN_tail_samples`).
MIN_TAIL_SAMPLES = 10
# what else the host did while a cell was timed (farm.cpus.host_contention), measurements' columns
CONTENTION_COLUMNS = ("cpu_others_percent", "cpu_steal_percent", "host_load_per_cpu")
# The host's own speed, taken before each counted repeat and after the last: a fixed pure-Python
# loop (about 1 ms), the fastest of a few runs, after a pause that lets an engine's spinning worker
# threads park (timed right after ONNX Runtime CPU queries on a 2-core VM, the loop took up to 1.8x
# its time; after a 5 ms pause, within 5 % in two trials of three). On a virtual machine the host moves by itself: on an H200
# host's 16 vCPUs the loop switched between 1.08 and 1.9 ms over seconds with nothing else running,
# and a host-bound query moves with it. A cell whose probes disagree ran on a host that changed
# speed (`host_probe_spread_percent`), which its figure carries. Device cells only: on a CPU cell
# the engine's own threads (ONNX Runtime's, OpenMP's, which spin-wait up to 200 ms) share the
# cores with the probe, which would time them, not the host (up to 2x the idle loop in a sweep here).
HOST_PROBE_LOOP = 20_000
HOST_PROBE_RUNS = 9
HOST_PROBE_PAUSE_S = 0.005
# `stable` also asks that the repeats agree: (slowest - fastest repeat median) / median at most
# this, by default (the sweep file's `measurement.max_repeat_spread_percent`).
MAX_REPEAT_SPREAD_PERCENT = MeasurementSettings.max_repeat_spread_percent
# median_ci_method of median_confidence_interval: the order-statistic interval at the effective
# sample size, widened where the repeats disagree more than it allows (see that function)
SAMPLE_INTERVAL_METHOD = "order_statistic_neff_repeats"


class TimedWindow(Protocol):
    """Told when the counted repeats begin and end (farm.telemetry.GpuTelemetry): called outside
    the per-query loop, so the loop stays two clock reads and two appends."""

    def start(self) -> None: ...

    def stop(self) -> None: ...


def run_timed(query: QueryFn, settings: MeasurementSettings, window: TimedWindow | None = None,
              probe_host: bool = False) -> Samples:
    """Warm up, then run `settings.repeats` counted loops of `query`.

    The first call is always a warm-up call (it pays for lazy loading and allocation). Each
    counted loop runs until it has `min_iterations` queries and has lasted `min_duration_ms`.
    `window`, if given, is started after the warm-up and stopped after the last repeat.
    `probe_host` (device cells: a CPU engine's own threads would share the cores with the probe):
    before each repeat the timing thread is kept on the quickest CPU just then (farm.cpus.quickest_cpu)
    of its worker's timing CPUs, or of its process's set where there are none (farm.cpus.pinnable_cpus),
    and the host's speed is taken there before each repeat and after the last.
    """
    warmup_queries, warmup_ms = warm_up_query(query, settings.warmup_ms)
    allowed = pinnable_cpus() if probe_host else set()
    own_cpus = os.sched_getaffinity(0) if allowed else set()
    cpus: list[int] = []

    def before_repeat() -> float | None:
        if not probe_host:
            return None
        if allowed:
            cpus.append(quickest_cpu(allowed))
        return host_probe_ms()

    try:
        snapshot = host_snapshot()
        starts, ends, phases, repeat_of, walltime, probes = _timed_repeats(query, settings, window, before_repeat)
        contention = host_contention(snapshot)  # what else ran while it was timed
        probes.append(host_probe_ms() if probe_host else None)  # and the host's speed after the last
    finally:
        if allowed:
            os.sched_setaffinity(0, own_cpus)
    start_arr = np.asarray(starts)
    host_ms = (np.asarray(ends) - start_arr) * 1e3
    samples = Samples(
        repeat=np.asarray(repeat_of, dtype=np.int32),
        start_ms=(start_arr - start_arr[0]) * 1e3,
        latency_ms=host_ms,
        walltime_ms=walltime * 1e3,
        warmup_queries=warmup_queries,
        warmup_ms=warmup_ms,
        host_probe_ms=[p for p in probes if p is not None],
        timing_cpus=cpus,
        contention=contention,
    )
    if any(p is not None for p in phases):
        _attach_phases(samples, phases)
    else:
        # A host-timed (CPU) backend has no transfers: the whole query is compute.
        samples.compute_ms = host_ms
    return samples


def _timed_repeats(query: QueryFn, settings: MeasurementSettings, window: TimedWindow | None,
                   before_repeat: Callable[[], float | None]) -> tuple:
    """The counted repeats: starts, ends, phases, repeat of each query, walltime (s), probes."""
    clock = time.perf_counter
    starts: list[float] = []
    ends: list[float] = []
    phases: list[PhaseTimes | None] = []
    repeat_of: list[int] = []
    walltime = 0.0
    min_iterations = settings.min_iterations
    probes = [before_repeat()]  # then one between repeats (inside the telemetry window: ~15 ms and ~1 ms a CPU of seconds)
    if window is not None:
        window.start()
    for repeat in range(settings.repeats):
        if repeat:
            probes.append(before_repeat())
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
    if window is not None:
        window.stop()
    return starts, ends, phases, repeat_of, walltime, probes


def warm_up_query(query: QueryFn, duration_ms: float) -> tuple[int, float]:
    """Run `query` for `duration_ms` (at least once); the queries run and the time taken (ms)."""
    clock = time.perf_counter
    start = clock()
    deadline = start + duration_ms / 1e3
    queries = 0
    while True:
        query()
        queries += 1
        if clock() >= deadline:
            break
    return queries, (clock() - start) * 1e3


def block_latencies_ms(query: QueryFn, min_queries: int, min_ms: float) -> list[float]:
    """The latencies (ms, the host clock, as a cell's latency) of one block of `query`: at least
    `min_queries` queries and `min_ms` long. For timing two engines in alternating blocks (farm
    compare --confirm), where drift of a second or more then falls on both alike."""
    clock, latencies = time.perf_counter, []
    deadline = clock() + min_ms / 1e3
    while len(latencies) < min_queries or clock() < deadline:
        start = clock()
        query()
        latencies.append((clock() - start) * 1e3)
    return latencies


def host_probe_ms() -> float:
    """The host's speed now: the fastest (ms) of HOST_PROBE_RUNS runs of a fixed pure-Python loop,
    after a pause of HOST_PROBE_PAUSE_S (preemption only slows a run: the fastest is the host's)."""
    time.sleep(HOST_PROBE_PAUSE_S)
    return min(loop_ms(HOST_PROBE_LOOP) for _ in range(HOST_PROBE_RUNS))


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
    """min, mean, median, p90/p95/p99, max, std and coefficient of variation (percent), and for
    each percentile the count of samples above it (`{prefix}_pNN_tail_samples`).

    The same function summarises the farm's own samples and ingested `--exportTimes` files.
    """
    values = np.asarray(values, dtype=np.float64)
    values = values[~np.isnan(values)]
    keys = ["min", "mean", "median", *(f"p{p}" for p in PERCENTILES), "max", "std"]
    if values.size == 0:
        return ({f"{prefix}_{k}_ms": None for k in keys} | {f"{prefix}_cv_percent": None}
                | {f"{prefix}_p{p}_tail_samples": None for p in PERCENTILES})
    ordered = np.sort(values)
    mean = float(ordered.mean())
    std = float(ordered.std())  # population std, as trtexec's coefficient of variance uses
    stats: dict[str, float | None] = {
        f"{prefix}_min_ms": float(ordered[0]),
        f"{prefix}_mean_ms": mean,
        f"{prefix}_median_ms": float(np.median(ordered)),
    }
    for p in PERCENTILES:
        stats[f"{prefix}_p{p}_ms"] = value = percentile(ordered, p)
        # samples strictly above the percentile: how many queries the tail figure stands on
        stats[f"{prefix}_p{p}_tail_samples"] = int(ordered.size - np.searchsorted(ordered, value, side="right"))
    stats[f"{prefix}_max_ms"] = float(ordered[-1])
    stats[f"{prefix}_std_ms"] = std
    stats[f"{prefix}_cv_percent"] = 100.0 * std / mean if mean > 0 else None
    return stats


def effective_sample_size(values: np.ndarray, repeat: np.ndarray, centre: float) -> float:
    """How many independent samples `values` are worth for a median near `centre`.

    Consecutive queries are not independent (clocks, caches, thermal and power state drift), and
    the variance of a sample median is the variance of the mean of the sign process
    1[value <= centre], divided by the density squared. The sign process's variance inflation
    (1 + 2 * sum of its autocorrelations) is estimated by batch means, never across a repeat (so
    a repeat that sits higher or lower than the others inflates it as well), at two block lengths,
    sqrt(n) and n^(2/3), each at most the shortest repeat (so short repeats are blocks of their
    own rather than no blocks at all); the larger estimate counts, since a block shorter than the
    correlation under-estimates it (simulated AR(1) latencies, 300 draws: coverage of the 95 %
    interval 0.93 at phi 0.9 and 0.87 at phi 0.98, against 0.91 and 0.78 with sqrt(n) alone; 0.97
    for independent samples). n / inflation, never more than n (clamped at inflation 1: a chance
    under-estimate on independent samples must not narrow the interval) and at least 1.
    """
    n = len(values)
    below = (values <= centre).astype(np.float64)
    p = below.mean() if n else 0.0
    if n == 0 or p * (1 - p) == 0:
        return float(n)
    runs = [below[repeat == r] for r in np.unique(repeat)]
    shortest = min(len(run) for run in runs)
    estimates = [1.0]
    for exponent in (1 / 2, 2 / 3):
        block = max(min(int(n ** exponent), shortest), 1)
        means = [run[: len(run) // block * block].reshape(-1, block).mean(axis=1) for run in runs]
        block_means = np.concatenate(means)
        if block_means.size >= 2:
            estimates.append(block * float(np.mean((block_means - p) ** 2)) / (p * (1 - p)))
    return float(max(n / max(estimates), 1.0))


def median_confidence_interval(values: np.ndarray, repeat: np.ndarray, across_repeats: bool = True,
                               ) -> tuple[float | None, float | None, str | None]:
    """A 95 % interval for the median latency, from the raw samples (all repeats pooled).

    The distribution-free order-statistic interval: [X(r), X(n - r + 1)] with r from the binomial
    distribution of the count of samples below the true median (scipy.stats.binom), so no shape
    is assumed for the latency distribution, which is skewed and often multi-modal. It is always
    inside [min, max], contains the sample median, and is never negative. Chosen over a bootstrap
    because it is exact for independent samples, deterministic (the same cell always gets the same
    interval) and costs one sort. Independence does not hold for consecutive queries, so the
    binomial is taken at the effective sample size (`effective_sample_size`, batch means of the
    sign process) and its rank mapped back to the n samples: autocorrelated or drifting samples get
    a wider interval.

    Queries inside one run cannot show how far a whole run moves (clocks, placement, a neighbour's
    load): with two or more repeats, the interval is also at least the t-interval (k - 1 degrees
    of freedom) of the repeats' medians on the log scale, centred on the median, so it stays
    positive. Simulated (benchmarks/interval_coverage.py: log-normal AR(1) queries, a random level
    per repeat with sd tau, 3 repeats of 300) the samples alone covered the median a run-to-run
    average gives 54-75 % of the time at tau 3 %, and 86 % at phi 0.98 with tau 0; with the
    repeats' part, 94-97 % everywhere, and two identical cells are called different (2 % minimum
    effect) at most 3 % of the time instead of up to 33 %. The cost: about 1.8 times the width
    when runs do not move. With one repeat nothing can show it; the disagreement is also its own
    figure, `repeat_spread_percent`, and counts against `stable`. (`across_repeats=False` leaves
    the repeats' part out: for that comparison only.)

    Warehouses written before this have `t_over_repeat_medians` intervals (a t-interval over 2-3
    repeat medians: up to 2.7 times the median wide, and below zero); readers compute the interval
    again from the samples (farm.compare.load, farm.dashboard.data).
    """
    from scipy import stats

    values = np.asarray(values, dtype=np.float64)
    keep = ~np.isnan(values)
    values, repeat = values[keep], np.asarray(repeat)[keep]
    n = len(values)
    if n == 0:
        return None, None, None
    ordered = np.sort(values)
    median = float(np.median(ordered))
    m = max(int(effective_sample_size(values, repeat, median)), 1)
    k = int(stats.binom.ppf((1 - CI_LEVEL) / 2, m, 0.5))  # 1-based rank of the lower end, among m
    rank = min(max(int(k * n / m), 1), (n + 1) // 2)  # the same quantile among the n samples
    low, high = float(ordered[rank - 1]), float(ordered[n - rank])
    medians = [np.median(values[repeat == r]) for r in np.unique(repeat)]
    if across_repeats and len(medians) >= 2 and min(medians) > 0:
        half = (float(stats.t.ppf(1 - (1 - CI_LEVEL) / 2, len(medians) - 1))
                * float(np.std(np.log(medians), ddof=1)) / math.sqrt(len(medians)))
        low, high = min(low, median * math.exp(-half)), max(high, median * math.exp(half))
    return low, high, SAMPLE_INTERVAL_METHOD


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


def summarize(samples: Samples, batch: int, settings: MeasurementSettings, inferences_per_query: int = 1) -> MeasurementRow:
    """One `measurements` row (without the cell id) from a cell's samples.

    Throughput counts inferences: `inferences_per_query` > 1 when each timed query runs several
    concurrent inferences (several streams), as trtexec's --infStreams counts them."""
    n = len(samples)
    walltime_s = samples.walltime_ms / 1e3
    qps = n * inferences_per_query / walltime_s if walltime_s > 0 else None
    row = MeasurementRow(**{
        "queries": n,
        "throughput_qps": qps,
        "throughput_samples_per_s": qps * batch if qps is not None else None,
        "host_walltime_ms": samples.walltime_ms,
        "repeats": int(samples.repeat.max()) + 1 if n else 0,
        "warmup_queries": samples.warmup_queries,
        "warmup_ms": samples.warmup_ms,
    })
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
    cv, spread = row["latency_cv_percent"], row["repeat_spread_percent"]
    # stable: the queries agree (CV) and so do the repeats (one repeat: nothing to disagree)
    row["stable"] = bool(cv is not None and cv <= settings.max_cv_percent
                         and (spread is None or spread <= settings.max_repeat_spread_percent))
    row["max_cv_percent"] = settings.max_cv_percent
    row["max_repeat_spread_percent"] = settings.max_repeat_spread_percent
    probes = [p for p in samples.host_probe_ms if p > 0]
    centre = float(np.median(probes)) if probes else None
    row["host_probe_median_ms"] = centre
    row["host_probe_spread_percent"] = 100.0 * (max(probes) - min(probes)) / centre if len(probes) > 1 else None
    row["timing_cpus"] = " ".join(map(str, samples.timing_cpus)) or None
    row |= {key: samples.contention.get(key) for key in CONTENTION_COLUMNS}
    return row
