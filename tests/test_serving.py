"""Serving scenarios (farm.serving): MLPerf LoadGen's own load on the dynamic batcher in front of a
real ONNX Runtime engine, the batcher's promises, and the search for the highest rate under a
latency bound."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("mlperf_loadgen")

from farm.backends.base import standalone_request
from farm.backends.onnxruntime import OnnxRuntimeBackend
from farm.serving import DynamicBatcher, loadgen_missing, run_scenario
from farm.serving.loadgen import ScenarioRun
from farm.serving.search import below_the_engine, highest_rate
from tests.conftest import tiny_cnn


def served(query, max_batch: int, max_delay_ms: float, arrivals: list[list[int]], gap_s: float = 0.0):
    """Issue `arrivals` (lists of sample ids) to a batcher, `gap_s` apart; (completed ids in order, stats)."""
    completed: list[int] = []
    lock = threading.Lock()

    def complete(ids: list[int]) -> None:
        with lock:
            completed.extend(ids)

    batcher = DynamicBatcher(query, max_batch, max_delay_ms, complete)
    batcher.start()
    for ids in arrivals:
        batcher.issue(ids)
        time.sleep(gap_s)
    batcher.stop()
    return completed, batcher.stats


def test_every_sample_is_completed_once_in_batches_no_larger_than_the_max() -> None:
    runs = []
    completed, stats = served(lambda: runs.append(1), 4, 5.0, [list(range(10)), [10], [11, 12]], gap_s=0.001)
    assert sorted(completed) == list(range(13))
    assert max(stats.batch_sizes) <= 4 and sum(n * k for n, k in stats.batch_sizes.items()) == 13
    assert len(runs) == sum(stats.batch_sizes.values()) == len(stats.engine_ms)
    assert len(stats.queue_ms) == 13 and min(stats.queue_ms) >= 0


def test_an_engine_that_fails_still_completes_every_sample_and_says_why() -> None:
    """LoadGen waits for every sample it issued: a failing engine must not hang the test."""
    def query() -> None:
        raise RuntimeError("device lost")

    completed, stats = served(query, 2, 0.0, [[1, 2, 3], [4, 5]])
    assert sorted(completed) == [1, 2, 3, 4, 5]
    assert stats.error == "RuntimeError: device lost"


def test_loadgen_server_on_a_real_engine_is_read_back_from_its_own_log(tmp_path: Path) -> None:
    """A real ONNX Runtime CPU engine under LoadGen's Server scenario at a low rate and a loose
    bound: VALID, its percentiles ordered and no shorter than the engine's own query (LoadGen's
    latency includes the queue), every sample counted in the batch histogram, the logs kept."""
    assert loadgen_missing() is None
    model = tiny_cnn(tmp_path / "tiny.onnx")
    feeds = {"x": np.random.default_rng(0).standard_normal((4, 3, 8, 8)).astype(np.float32)}
    backend = OnnxRuntimeBackend({"intra_op_threads": 1})
    backend.build(standalone_request(model, feeds, "fp32", tmp_path), feeds)
    try:
        run = run_scenario(backend.query_fn(feeds), 4, "server", tmp_path / "logs", max_delay_ms=2.0,
                           target_qps=200, latency_bound_ms=1000, min_duration_ms=1000, min_query_count=500)
    finally:
        backend.close()
    assert run.valid, run.why_invalid
    p50, p99 = run.latency("50.00"), run.latency("99.00")
    assert 0 < p50 <= p99 <= run.latency_ms["max"]
    # each sample's latency holds its batch's query (and its wait before it): no median below the engine's
    assert p50 >= 0.9 * run.engine_ms_median > 0
    assert sum(n * k for n, k in run.batch_sizes.items()) == run.queries >= 500
    assert max(run.batch_sizes) <= 4 and run.error is None
    assert (tmp_path / "logs" / "mlperf_log_summary.txt").read_text().count("Result is : VALID") == 1


def _run(rate: float, p99: float, valid: bool = True) -> ScenarioRun:
    return ScenarioRun("server", rate, valid, None if valid else "INVALID", rate, rate, {"p99.00": p99}, 1000, 0,
                       None, {}, None, None, 1.0, 0.01, 1.0, Path("."), None)


def test_the_search_finds_the_highest_passing_rate_within_its_tolerance() -> None:
    """Bisection against a known edge (a rate passes up to 1234/s): the best rate passes, lies within
    the tolerance of the edge, and every rate tried is kept."""
    search = highest_rate(lambda rate: _run(rate, 5.0 if rate <= 1234 else 50.0), 10.0, 4000)
    assert search.best is not None and search.best.target_qps <= 1234
    assert search.best.target_qps >= 1234 * 0.95 - 1e-9 or len(search.tried) == 8
    assert len(search.tried) <= 8 and search.why_none is None
    nothing = highest_rate(lambda rate: _run(rate, 50.0), 10.0, 4000, max_tests=3)
    assert nothing.best is None and nothing.why_none == "no rate down to 900/s passed: p99 over the bound"


def test_a_bound_below_the_engines_own_latency_is_one_line() -> None:
    assert below_the_engine(5.0, 2.0, 8) is None
    why = below_the_engine(1.0, 2.5, 8)
    assert why == ("slo_ms = 1 is below the engine's own latency at batch 8 (2.5 ms a query, before any queueing): "
                   "no request rate can meet it; raise slo_ms, or serve a smaller max batch")
