"""The timing loop and trtexec's statistics."""

from __future__ import annotations

import os
import time

import numpy as np
import pytest
from scipy import stats

from farm.config import Measurement
from farm.cpus import TIMING_CPUS_VARIABLE
from farm.measure import (
    MAX_REPEAT_SPREAD_PERCENT,
    SAMPLE_INTERVAL_METHOD,
    Samples,
    effective_sample_size,
    latency_stats,
    median_confidence_interval,
    percentile,
    run_timed,
    summarize,
)
from farm.records import PhaseTimes
from tests.conftest import needs_two_cpus


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
    assert row["median_ci_method"] == SAMPLE_INTERVAL_METHOD and row["repeat_spread_percent"] == 0.0
    assert row["median_ci_low_ms"] == row["median_ci_high_ms"] == 2.0


def test_summarize_a_real_timed_loop() -> None:
    settings = Measurement(warmup_ms=0, min_iterations=20, min_duration_ms=0, repeats=3)
    samples = run_timed(lambda: time.sleep(0.001), settings)
    row = summarize(samples, batch=8, settings=settings)
    assert row["queries"] == 60 and row["repeats"] == 3
    assert row["throughput_qps"] == pytest.approx(60 / (samples.walltime_ms / 1e3))
    assert row["throughput_samples_per_s"] == pytest.approx(8 * row["throughput_qps"])
    assert row["throughput_qps"] < 1000  # each query sleeps 1 ms, and a sleep never ends early
    # around the median and positive; beyond [min, max] only where this machine's load made the
    # three repeats disagree (the repeats' t-interval), so no bound on that here
    assert 0 < row["median_ci_low_ms"] <= row["latency_median_ms"] <= row["median_ci_high_ms"]
    assert row["median_ci_method"] == SAMPLE_INTERVAL_METHOD


def test_the_hosts_speed_is_taken_around_the_repeats() -> None:
    """For device cells, a fixed CPU loop timed before each counted repeat and after the last: the
    measurements row has its median and how far the probes moved, from the probes themselves (none
    for CPU cells, or samples farm did not time: TensorRT's own, ingested)."""
    settings = Measurement(warmup_ms=0, min_iterations=3, min_duration_ms=0, repeats=3)
    assert run_timed(lambda: None, settings).host_probe_ms == []  # a CPU cell: its engine's threads would be timed
    samples = run_timed(lambda: None, settings, probe_host=True)
    assert len(samples.host_probe_ms) == 4 and all(p > 0 for p in samples.host_probe_ms)
    row = summarize(samples, batch=1, settings=settings)
    probes = samples.host_probe_ms
    assert row["host_probe_median_ms"] == pytest.approx(float(np.median(probes)))
    assert row["host_probe_spread_percent"] == pytest.approx(100 * (max(probes) - min(probes)) / np.median(probes))
    samples.host_probe_ms = [1.0, 1.9, 1.1, 1.0]
    row = summarize(samples, batch=1, settings=settings)
    assert row["host_probe_median_ms"] == pytest.approx(1.05) and row["host_probe_spread_percent"] == pytest.approx(90 / 1.05)
    bare = summarize(synthetic([2.0] * 30, repeats=3, walltime_ms=60.0), batch=1, settings=settings)
    assert bare["host_probe_median_ms"] is None and bare["host_probe_spread_percent"] is None


@needs_two_cpus
def test_a_device_cells_repeats_are_timed_on_the_quickest_cpu_and_the_thread_let_go_after() -> None:
    """Before each repeat of a device cell the timing thread is kept on the CPU of its set where a
    short loop runs fastest then; the CPU of each repeat is in the row; after the repeats (and after a
    query that raised) the thread may run anywhere again. A CPU cell's thread is never moved."""
    allowed = os.sched_getaffinity(0)
    settings = Measurement(warmup_ms=0, min_iterations=3, min_duration_ms=0, repeats=3)
    seen: list[set[int]] = []
    samples = run_timed(lambda: seen.append(os.sched_getaffinity(0)), settings, probe_host=True)
    assert len(samples.timing_cpus) == 3 and set(samples.timing_cpus) <= allowed
    assert all(len(cpus) == 1 for cpus in seen[-9:])  # the counted queries: one CPU each
    assert os.sched_getaffinity(0) == allowed
    row = summarize(samples, batch=1, settings=settings)
    assert row["timing_cpus"] == " ".join(map(str, samples.timing_cpus))
    assert run_timed(lambda: None, settings).timing_cpus == [] and os.sched_getaffinity(0) == allowed

    def fails() -> None:
        raise RuntimeError("the engine failed mid-loop")

    with pytest.raises(RuntimeError):
        run_timed(fails, Measurement(warmup_ms=0, min_iterations=3, min_duration_ms=0, repeats=1), probe_host=True)
    assert os.sched_getaffinity(0) == allowed


@needs_two_cpus
def test_a_workers_timed_loops_keep_to_its_own_timing_cpus(monkeypatch) -> None:
    """Where the node's cores are split (farm.cpus), the timing thread is kept on the worker's own
    timing CPUs only, and given back every CPU of its process after the repeats, not just those."""
    allowed = os.sched_getaffinity(0)
    own = max(allowed)
    monkeypatch.setenv(TIMING_CPUS_VARIABLE, str(own))
    seen: list[set[int]] = []
    settings = Measurement(warmup_ms=0, min_iterations=3, min_duration_ms=0, repeats=2)
    samples = run_timed(lambda: seen.append(os.sched_getaffinity(0)), settings, probe_host=True)
    assert samples.timing_cpus == [own, own] and all(cpus == {own} for cpus in seen[-6:])
    assert os.sched_getaffinity(0) == allowed


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
    assert method == SAMPLE_INTERVAL_METHOD
    assert low < np.median(values) < high and high - low < 0.5


# --- the median's interval, on samples of known distribution ----------------------------------------

DRAWS = 1000


def coverage_bounds(nominal: float, draws: int) -> tuple[float, float]:
    """Where the share of `draws` seeded intervals that cover the true median must lie: within 4
    binomial standard deviations of the nominal level below (a chance of about 3e-5 for an exact
    95 % interval to fall under it), and above no more than half the misses gone (an interval so
    conservative that it covers 97.5 % + 4 sd is needlessly wide)."""
    sd = np.sqrt(nominal * (1 - nominal) / draws)
    return nominal - 4 * sd, 1 - (1 - nominal) / 2 + 4 * sd


def covered(draw, true_median: float, n: int, repeats: int = 3) -> tuple[float, list[tuple[float, float, np.ndarray]]]:
    rng = np.random.default_rng(20261122)
    repeat = np.repeat(np.arange(repeats), -(-n // repeats))[:n]
    hits, intervals = 0, []
    for _ in range(DRAWS):
        values = draw(rng, n)
        low, high, _ = median_confidence_interval(values, repeat)
        hits += low <= true_median <= high
        intervals.append((low, high, values))
    return hits / DRAWS, intervals


def ar1_lognormal(phi: float):
    """Log-normal latencies (median 1) whose logs are an AR(1) process: consecutive queries alike."""
    def draw(rng: np.random.Generator, n: int) -> np.ndarray:
        noise = rng.normal(0, np.sqrt(1 - phi ** 2), n)
        z = np.empty(n)
        z[0] = rng.normal()
        for i in range(1, n):
            z[i] = phi * z[i - 1] + noise[i]
        return np.exp(0.3 * z)
    return draw


def test_median_interval_covers_the_true_median_at_the_nominal_rate() -> None:
    """1,000 seeded draws of 300 log-normal latencies (true median 1): the intervals cover 1 at
    about 95 %, and every one lies within [min, max] of its draw, around its median, positive."""
    share, intervals = covered(lambda rng, n: rng.lognormal(0.0, 0.5, n), 1.0, 300)
    low_bound, high_bound = coverage_bounds(0.95, DRAWS)
    assert low_bound <= share <= high_bound, share
    for low, high, values in intervals:
        assert values.min() <= low <= np.median(values) <= high <= values.max() and low > 0


def test_median_interval_widens_for_autocorrelated_queries() -> None:
    """Consecutive queries alike (AR(1), phi 0.5): the plain binomial interval, which assumes
    independent samples, covers the true median far less often than 95 %; the farm's, at the
    effective sample size, keeps the nominal rate."""
    draw = ar1_lognormal(0.5)
    share, intervals = covered(draw, 1.0, 1000)
    low_bound, high_bound = coverage_bounds(0.95, DRAWS)
    assert low_bound <= share <= high_bound, share
    k = int(stats.binom.ppf(0.025, 1000, 0.5))  # the independent-samples interval, for contrast
    naive = np.mean([np.sort(v)[k - 1] <= 1.0 <= np.sort(v)[1000 - k] for _, _, v in intervals])
    assert naive < low_bound


def test_effective_sample_size() -> None:
    rng = np.random.default_rng(7)
    one = np.zeros(4000, dtype=int)
    independent = rng.normal(size=4000)
    # independent: about n (a chance excess of the block-mean variance only ever lowers it)
    assert 2000 < effective_sample_size(independent, one, 0.0) <= 4000
    alike = np.repeat(rng.normal(size=400), 10)  # runs of 10 identical queries: worth about 400
    assert 200 < effective_sample_size(alike, one, float(np.median(alike))) < 800
    # two repeats at different levels: the repeats disagree, the interval must say so
    shifted = np.concatenate([rng.normal(0, 1, 2000), rng.normal(3, 1, 2000)])
    two = np.repeat([0, 1], 2000)
    assert effective_sample_size(shifted, two, float(np.median(shifted))) < 100
    assert effective_sample_size(np.ones(50), np.zeros(50, dtype=int), 1.0) == 50  # all alike: nothing to inflate


@pytest.mark.parametrize("n", [1, 2, 3, 5, 20])
def test_median_interval_of_few_samples_is_within_min_and_max(n: int) -> None:
    values = np.random.default_rng(n).lognormal(0, 1, n)
    low, high, _ = median_confidence_interval(values, np.zeros(n, dtype=int))
    assert values.min() <= low <= np.median(values) <= high <= values.max()
    if n <= 5:  # the binomial cannot reach 95 % with fewer than 6 samples: the whole range
        assert (low, high) == (values.min(), values.max())
    assert median_confidence_interval(np.array([]), np.array([], dtype=int)) == (None, None, None)


def test_three_noisy_repeats_no_longer_give_an_interval_below_zero() -> None:
    """The case that misled: three repeats whose medians disagree (6.8, 7.0 and 17 ms) made a
    t-interval over 3 repeat medians run from below zero to 18 ms. Now the repeats' part is on the
    log scale: wide (nobody can say whether the next run gives 7 or 17 ms), but positive and around
    the median; the disagreement also shows as the repeat spread and an unstable cell."""
    rng = np.random.default_rng(5)
    latency = np.concatenate([rng.normal(6.8, 0.1, 100), rng.normal(7.0, 0.1, 100), rng.normal(17.0, 0.3, 100)])
    samples = synthetic(list(latency), repeats=3, walltime_ms=float(latency.sum()))
    row = summarize(samples, 1, Measurement(max_cv_percent=1e9))
    assert 0 < row["median_ci_low_ms"] < row["latency_min_ms"] and row["median_ci_high_ms"] > row["latency_max_ms"]
    assert row["median_ci_low_ms"] * row["median_ci_high_ms"] == pytest.approx(row["latency_median_ms"] ** 2)
    assert row["repeat_spread_percent"] > 100 and row["stable"] is False  # the CV test alone would pass it


def repeat_levels(tau: float):
    """3 repeats of log-normal AR(1) latencies (phi 0.5), each repeat at its own level (sd tau on
    the log scale): what moves a whole run. The median a run-to-run average gives is 1."""
    inner = ar1_lognormal(0.5)

    def draw(rng: np.random.Generator, n: int) -> np.ndarray:
        size = -(-n // 3)
        return np.concatenate([np.exp(rng.normal(0, tau)) * inner(rng, size) for _ in range(3)])[:n]
    return draw


def test_median_interval_covers_what_runs_move_by() -> None:
    """Each repeat at its own level (sd 3 %, against a query sd of 30 %): the samples alone cover
    the run-to-run median far less often than 95 % (they cannot see between runs); with the
    repeats' t-interval the farm's interval keeps at least the nominal rate."""
    draw = repeat_levels(0.03)
    share, intervals = covered(draw, 1.0, 600)
    low_bound, _ = coverage_bounds(0.95, DRAWS)
    assert share >= low_bound, share
    repeat = np.repeat(np.arange(3), 200)
    alone = np.mean([low <= 1.0 <= high for low, high, _ in
                     (median_confidence_interval(v, repeat, across_repeats=False) for _, _, v in intervals)])
    assert alone < low_bound, alone
    for low, high, values in intervals:
        assert 0 < low <= np.median(values) <= high


def test_stable_needs_the_repeats_to_agree() -> None:
    """Repeat medians 10 and 10 * (1 + spread): stable exactly while the spread is within the threshold."""
    for spread, stable in ((0.0, True), (MAX_REPEAT_SPREAD_PERCENT * 0.9, True), (MAX_REPEAT_SPREAD_PERCENT * 1.1, False)):
        high = 10.0 * (1 + spread / 100)
        samples = synthetic([10.0] * 21 + [high] * 21 + [10.0] * 21, repeats=3, walltime_ms=630.0)
        row = summarize(samples, 1, Measurement(max_cv_percent=50))
        assert row["repeat_spread_percent"] == pytest.approx(spread)
        assert row["stable"] is stable and row["max_repeat_spread_percent"] == MAX_REPEAT_SPREAD_PERCENT
        wider = summarize(samples, 1, Measurement(max_cv_percent=50, max_repeat_spread_percent=spread + 1))
        assert wider["stable"] is True and wider["max_repeat_spread_percent"] == spread + 1  # the sweep file's
    single = summarize(synthetic([10.0, 11.0] * 10, repeats=1, walltime_ms=210.0), 1, Measurement(max_cv_percent=50))
    assert single["repeat_spread_percent"] is None and single["stable"] is True  # one repeat: nothing to disagree


@pytest.mark.parametrize("n", [50, 99, 100, 101, 1000, 1001])
def test_tail_samples_count_the_queries_above_each_percentile(n: int) -> None:
    values = np.random.default_rng(n).permutation(np.arange(1.0, n + 1))  # distinct: counts are exact
    row = latency_stats(values)
    for p in (90, 95, 99):
        assert row[f"latency_p{p}_tail_samples"] == int((values > row[f"latency_p{p}_ms"]).sum())
    assert row["latency_p99_tail_samples"] == n - int(row["latency_p99_ms"])  # values are 1..n
    ties = latency_stats(np.array([1.0] * 90 + [5.0] * 10))  # p95 is one of ten equal slowest: none above it
    assert ties["latency_p95_ms"] == 5.0 and ties["latency_p95_tail_samples"] == 0
    assert latency_stats(np.array([]))["latency_p99_tail_samples"] is None


def test_an_unstable_host_bound_device_cell_says_why() -> None:
    """The note of farm show and the end-of-sweep table: a device cell whose launches took about as
    long as the GPU's work (enqueue >= 80 % of compute) and whose figure was unstable is called
    host-bound; a GPU-bound, a stable or a CPU cell (no enqueue time) is not."""
    import duckdb

    from farm.display import stable_text
    from farm.queries import HOST_BOUND_NOTE

    rows = duckdb.sql(f"""SELECT name, {HOST_BOUND_NOTE} AS note FROM (VALUES
        ('eager b1', false, 4.10, 4.12), ('eager b128', false, 2.2, 13.5), ('graph b1', true, 0.07, 0.98),
        ('steady eager', true, 4.10, 4.12), ('cpu', false, NULL, 11.3)) AS m(name, stable, enqueue_median_ms,
        compute_median_ms)""").fetchall()
    notes = dict(rows)
    assert notes["eager b1"].startswith("host-bound: the GPU waited on the host's launches")
    assert [name for name, note in rows if note] == ["eager b1"]
    assert stable_text(False, 12.4) == "no, 12 %" and stable_text(True, 0.4) == "yes"

    from farm.queries import unstable_notes_sql

    columns = ("stable", "enqueue_median_ms", "compute_median_ms", "host_probe_spread_percent")
    rows = duckdb.sql(f"""SELECT name, {unstable_notes_sql(columns)} AS note FROM (VALUES
        ('eager, host moved', false, 4.10, 4.12, 80.0), ('cpu, host moved', false, NULL, 11.3, 40.0),
        ('cpu, host steady', false, NULL, 11.3, 3.0), ('stable, host moved', true, NULL, 11.3, 80.0),
        ('older farm', false, NULL, 11.3, NULL)) AS m(name, stable, enqueue_median_ms, compute_median_ms,
        host_probe_spread_percent)""").fetchall()
    notes = dict(rows)
    assert notes["eager, host moved"].startswith("host-bound: ") and "; the host's own speed moved" in notes[
        "eager, host moved"]
    assert notes["cpu, host moved"].startswith("the host's own speed moved 15 % or more between its repeats")
    assert [name for name, note in rows if note] == ["eager, host moved", "cpu, host moved"]
    assert unstable_notes_sql(columns[:3]) != unstable_notes_sql(columns)
    assert unstable_notes_sql(["stable"]) == "CAST(NULL AS VARCHAR)"

    # a GPU-bound cell unstable by its per-query CV alone (repeats agree, host steady): its single
    # queries spread, its median holds; not where the repeats disagree, the host moved, the CV is
    # within bounds (the repeats made it unstable) or one repeat leaves nothing to agree
    columns += ("latency_cv_percent", "max_cv_percent", "repeat_spread_percent", "max_repeat_spread_percent")
    rows = duckdb.sql(f"""SELECT name, {unstable_notes_sql(columns)} AS note
        FROM (SELECT *, 2.5 AS max_cv_percent, 5.0 AS max_repeat_spread_percent FROM (VALUES
        ('ort fp32 b8', false, 1.2, 4.3, 2.0, 8.24, 0.24), ('gpu, repeats disagree', false, 1.2, 4.3, 2.0, 8.2, 7.5),
        ('gpu, host moved', false, 1.2, 4.3, 30.0, 8.2, 0.2), ('gpu, cv within', false, 1.2, 4.3, 2.0, 2.0, 0.2),
        ('gpu, one repeat', false, 1.2, 4.3, 2.0, 8.2, NULL), ('eager b1', false, 4.10, 4.12, 2.0, 9.0, 1.0),
        ('gpu, stable', true, 1.2, 4.3, 2.0, 1.0, 0.2), ('cpu', false, NULL, 11.3, 2.0, 9.0, 1.0))
        AS v(name, stable, enqueue_median_ms, compute_median_ms, host_probe_spread_percent, latency_cv_percent,
        repeat_spread_percent)) AS m""").fetchall()
    notes = dict(rows)
    # the same words for every such cell (its figures are the cv % and repeats % columns): a table's
    # footnote prints them once, not once per cell with its own figures
    assert notes["ort fp32 b8"] == ("GPU-bound: single queries spread beyond max_cv_percent while the repeats' "
                                    "medians agree: the median holds, a single query's time does not (cv % and "
                                    "repeats % in farm show --wide)")
    assert notes["eager b1"].startswith("host-bound: ") and "GPU-bound" not in notes["eager b1"]
    assert notes["gpu, host moved"].startswith("the host's own speed moved")
    assert [name for name, note in rows if note] == ["ort fp32 b8", "gpu, host moved", "eager b1"]
    assert stable_text(False, None) == "no" and stable_text(None, None) is None


def test_other_programs_cpu_time_during_a_window_is_recorded_and_an_unstable_cell_says_so() -> None:
    """A process spinning beside a quiet window: its CPU time counts as other programs' (at least
    half a core's share of the machine); this process's own work does not. An unstable cell timed at
    25 % or more, or 10 % steal, says so in the same words whatever its figures."""
    import subprocess
    import sys

    import duckdb

    from farm.cpus import host_contention, host_snapshot
    from farm.queries import unstable_notes_sql

    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.3)  # it is spinning
        before = host_snapshot()
        time.sleep(1.0)
        found = host_contention(before)
    finally:
        spinner.kill()
        spinner.wait()
    share_of_a_core = 100.0 / (os.cpu_count() or 1)
    assert found["cpu_others_percent"] >= 0.5 * share_of_a_core, found
    assert found["host_load_per_cpu"] > 0
    columns = ("stable", "cpu_others_percent", "cpu_steal_percent")
    rows = duckdb.sql(f"""SELECT name, {unstable_notes_sql(columns)} AS note FROM (VALUES
        ('busy', false, 40.0, 0.0), ('stolen', false, 1.0, 12.0), ('quiet', false, 3.0, 0.0),
        ('busy but stable', true, 60.0, 0.0), ('no steal figure', false, 30.0, NULL)) AS m(name, {", ".join(columns)})
        """).fetchall()
    notes = dict(rows)
    assert notes["busy"] == notes["stolen"] == notes["no steal figure"] and notes["busy"].startswith(
        "timed while other programs (or other virtual machines) used a quarter or more of the host's CPU time")
    assert notes["quiet"] is None and notes["busy but stable"] is None
