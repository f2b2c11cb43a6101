"""The timing loop and trtexec's statistics."""

from __future__ import annotations

import time

import numpy as np
import pytest

from farm.backends.base import PhaseTimes
from farm.config import Measurement
from farm.measure import Samples, latency_stats, median_confidence_interval, percentile, run_timed, summarize


def trtexec_percentile_reference(values: list[float], p: float) -> float:
    """trtexec's findPercentile, written out with single-precision arithmetic as in C++."""
    ordered = sorted(values)
    n = len(ordered)
    exclude = int(np.float32(np.float32(1.0) - np.float32(p) / np.float32(100.0)) * np.float32(n))
    return ordered[max(n - 1 - exclude, 0)]


@pytest.mark.parametrize("n", [1, 2, 10, 99, 100, 101, 625, 1000, 4096])
@pytest.mark.parametrize("p", [50, 90, 95, 99])
def test_percentile_matches_trtexec(n: int, p: float) -> None:
    values = list(np.random.default_rng(n).random(n))
    assert percentile(np.sort(values), p) == trtexec_percentile_reference(values, p)


def test_percentile_single_precision_quirk() -> None:
    # With N = 100, double precision would exclude one sample (p99 = 99th value); trtexec's float
    # arithmetic gives 0.99999905 -> excludes none, so p99 is the maximum.
    values = np.arange(1.0, 101.0)
    assert percentile(values, 99) == 100.0


def test_latency_stats() -> None:
    values = np.array([4.0, 1.0, 3.0, 2.0])
    stats = latency_stats(values)
    assert stats["latency_min_ms"] == 1.0 and stats["latency_max_ms"] == 4.0
    assert stats["latency_mean_ms"] == 2.5 and stats["latency_median_ms"] == 2.5
    assert stats["latency_std_ms"] == pytest.approx(np.sqrt(1.25))
    assert stats["latency_cv_percent"] == pytest.approx(100 * np.sqrt(1.25) / 2.5)


def test_run_timed_meets_both_count_and_duration() -> None:
    calls: list[tuple[float, float]] = []  # (entry, exit) of every call, on the loop's own clock

    def query() -> None:
        entry = time.perf_counter()
        time.sleep(0.002)
        calls.append((entry, time.perf_counter()))

    settings = Measurement(warmup_ms=10, min_iterations=3, min_duration_ms=40, repeats=2)
    samples = run_timed(query, settings)
    returned = time.perf_counter()
    per_repeat = [int((samples.repeat == r).sum()) for r in (0, 1)]
    assert all(n >= 3 for n in per_repeat)
    assert len(calls) == samples.warmup_queries + len(samples)  # warm-up calls are not in the samples
    # Each repeat lasted at least min_duration: its loop started after the call before it returned,
    # and its last query ended before the call after it began (or before run_timed returned). Only
    # bounds that hold however the machine schedules the loop: no margin for load is needed.
    counted = calls[samples.warmup_queries:]
    for r in (0, 1):
        first, last = np.flatnonzero(samples.repeat == r)[[0, -1]]
        before = calls[samples.warmup_queries + first - 1][1]
        after = counted[last + 1][0] if last + 1 < len(counted) else returned
        assert (after - before) * 1e3 >= 40
    assert samples.warmup_queries >= 1 and samples.warmup_ms >= 10
    assert np.all(samples.latency_ms >= 2.0)  # a sleep never ends early
    assert np.array_equal(samples.compute_ms, samples.latency_ms)  # CPU: the whole query is compute
    assert samples.h2d_ms is None and samples.d2h_ms is None and samples.enqueue_ms is None


def test_run_timed_count_bound() -> None:
    settings = Measurement(warmup_ms=0, min_iterations=50, min_duration_ms=0, repeats=1)
    samples = run_timed(lambda: None, settings)
    assert len(samples) == 50 and samples.warmup_queries == 1  # the first call is never timed


def test_device_phases_make_the_latency() -> None:
    phase = PhaseTimes(enqueue_ms=0.01, h2d_ms=0.1, compute_ms=1.0, d2h_ms=0.2)
    settings = Measurement(warmup_ms=0, min_iterations=4, min_duration_ms=0, repeats=1)
    samples = run_timed(lambda: phase, settings)
    assert np.allclose(samples.latency_ms, 1.3)
    row = summarize(samples, batch=4, settings=settings)
    assert row["h2d_mean_ms"] == pytest.approx(0.1) and row["d2h_median_ms"] == pytest.approx(0.2)
    assert row["compute_p99_ms"] == pytest.approx(1.0) and row["enqueue_mean_ms"] == pytest.approx(0.01)


def synthetic(latency_ms: list[float], repeats: int, walltime_ms: float) -> Samples:
    """Samples with the given latencies, split evenly into `repeats` repeats, as if timed."""
    latency = np.asarray(latency_ms, dtype=np.float64)
    return Samples(repeat=np.repeat(np.arange(repeats), len(latency) // repeats).astype(np.int32),
                   start_ms=np.concatenate([[0.0], np.cumsum(latency)[:-1]]), latency_ms=latency,
                   compute_ms=latency, walltime_ms=walltime_ms, warmup_queries=1, warmup_ms=1.0)


def test_summarize_throughput() -> None:
    settings = Measurement(repeats=3)
    samples = synthetic([2.0] * 60, repeats=3, walltime_ms=150.0)  # 60 queries in 0.15 s
    row = summarize(samples, batch=8, settings=settings)
    assert row["queries"] == 60 and row["repeats"] == 3 and row["host_walltime_ms"] == 150.0
    assert row["throughput_qps"] == pytest.approx(400.0)
    assert row["throughput_samples_per_s"] == pytest.approx(3200.0)
    assert summarize(samples, batch=8, settings=settings, inferences_per_query=2)["throughput_qps"] == pytest.approx(800.0)
    assert row["median_ci_method"] == "t_over_repeat_medians" and row["repeat_spread_percent"] == 0.0
    assert row["median_ci_low_ms"] == row["median_ci_high_ms"] == 2.0


def test_summarize_a_real_timed_loop() -> None:
    settings = Measurement(warmup_ms=0, min_iterations=20, min_duration_ms=0, repeats=3)
    samples = run_timed(lambda: time.sleep(0.001), settings)
    row = summarize(samples, batch=8, settings=settings)
    assert row["queries"] == 60 and row["repeats"] == 3
    assert row["throughput_qps"] == pytest.approx(60 / (samples.walltime_ms / 1e3))
    assert row["throughput_samples_per_s"] == pytest.approx(8 * row["throughput_qps"])
    assert row["throughput_qps"] < 1000  # each query sleeps 1 ms, and a sleep never ends early
    assert row["median_ci_low_ms"] <= row["median_ci_high_ms"]
    assert row["median_ci_method"] == "t_over_repeat_medians"


def test_stable_is_the_latency_cv_within_the_threshold() -> None:
    """`stable` on samples of known spread, not on this machine's noise: 9 and 11 ms alternating
    have a mean of 10 ms and a (population) standard deviation of 1 ms, a CV of exactly 10 %."""
    samples = synthetic([9.0, 11.0] * 30, repeats=3, walltime_ms=600.0)
    for threshold, stable in ((50, True), (10.5, True), (10, True), (9.99, False), (1e-9, False)):
        row = summarize(samples, 1, Measurement(max_cv_percent=threshold))
        assert row["latency_cv_percent"] == 10.0
        assert row["stable"] is stable and row["max_cv_percent"] == threshold
    steady = summarize(synthetic([3.0] * 30, repeats=3, walltime_ms=90.0), 1, Measurement(max_cv_percent=1e-9))
    assert steady["latency_cv_percent"] == 0.0 and steady["stable"] is True


def test_median_interval_single_repeat_brackets_the_median() -> None:
    values = np.random.default_rng(3).normal(10, 1, 500)
    low, high, method = median_confidence_interval(values, np.zeros(500, dtype=int))
    assert method == "order_statistic"
    assert low < np.median(values) < high and high - low < 0.5
