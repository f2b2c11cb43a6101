"""The timing loop and trtexec's statistics."""

from __future__ import annotations

import time

import numpy as np
import pytest

from farm.backends.base import PhaseTimes
from farm.config import Measurement
from farm.measure import latency_stats, median_confidence_interval, percentile, run_timed, summarize


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
    calls = []

    def query() -> None:
        calls.append(time.perf_counter())
        time.sleep(0.002)

    settings = Measurement(warmup_ms=10, min_iterations=3, min_duration_ms=40, repeats=2)
    samples = run_timed(query, settings)
    per_repeat = [int((samples.repeat == r).sum()) for r in (0, 1)]
    assert all(n >= 3 for n in per_repeat)
    for r in (0, 1):  # each repeat lasted at least min_duration
        starts = samples.start_ms[samples.repeat == r]
        lat = samples.latency_ms[samples.repeat == r]
        assert starts[-1] + lat[-1] - starts[0] >= 40
    assert samples.warmup_queries >= 1 and samples.warmup_ms >= 10
    assert len(calls) == samples.warmup_queries + len(samples)  # warm-up calls are not in the samples
    assert np.all(samples.latency_ms >= 2.0)
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


def test_summarize_throughput_and_stability() -> None:
    settings = Measurement(warmup_ms=0, min_iterations=20, min_duration_ms=0, repeats=3, max_cv_percent=50)
    samples = run_timed(lambda: time.sleep(0.001), settings)
    row = summarize(samples, batch=8, settings=settings)
    assert row["queries"] == 60 and row["repeats"] == 3
    assert row["throughput_qps"] == pytest.approx(60 / (samples.walltime_ms / 1e3))
    assert row["throughput_samples_per_s"] == pytest.approx(8 * row["throughput_qps"])
    assert row["throughput_qps"] < 1000  # each query sleeps 1 ms
    assert row["median_ci_low_ms"] <= row["median_ci_high_ms"]
    assert row["median_ci_method"] == "t_over_repeat_medians"
    assert row["stable"] is True
    strict = settings.model_copy(update={"max_cv_percent": 1e-9})
    assert summarize(samples, 8, strict)["stable"] is False


def test_median_interval_single_repeat_brackets_the_median() -> None:
    values = np.random.default_rng(3).normal(10, 1, 500)
    low, high, method = median_confidence_interval(values, np.zeros(500, dtype=int))
    assert method == "order_statistic"
    assert low < np.median(values) < high and high - low < 0.5
