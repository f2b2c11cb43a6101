"""One LoadGen test of an engine: LoadGen issues the scenario's queries, the dynamic batcher runs
them on the engine, and the run's figures are read back from LoadGen's own detail log
(`mlperf_log_detail.txt`, one `:::MLLOG {json}` record a line), which stays in `log_dir` beside
its summary and trace.

LoadGen's latency of a sample runs from the moment its schedule issued it to its completion, so
it includes the time the sample waited in the batcher's queue. A test is VALID when LoadGen's
rules hold: its minimum duration and query count, and, for Server, SingleStream and MultiStream,
its early-stopping estimate of the latency percentile (at 99 % confidence, fixed in LoadGen)."""

from __future__ import annotations

import dataclasses
import json
import statistics
import time
from pathlib import Path
from typing import Any

from farm.records import QueryFn
from farm.scenario import SCENARIOS
from farm.serving.batcher import DynamicBatcher, p99

_LOADGEN_NAMES = {"single_stream": "SingleStream", "multi_stream": "MultiStream", "server": "Server",
                  "offline": "Offline"}
PERCENTILES = ("50.00", "90.00", "95.00", "97.00", "99.00", "99.90")  # what LoadGen reports
SAMPLES = 1024  # the query sample library's size: the engine's inputs are the cell's own, so any size serves


@dataclasses.dataclass
class ScenarioRun:
    """One LoadGen test's result (latencies in milliseconds)."""

    scenario: str
    target_qps: float | None  # Server's Poisson rate, Offline's expected rate; None for the streams
    valid: bool
    why_invalid: str | None  # LoadGen's own words where it is INVALID
    samples_per_s: float | None  # completed (Server), or the test's samples over its duration
    scheduled_per_s: float | None  # Server: the rate LoadGen's schedule actually issued
    latency_ms: dict[str, float]  # p50 ... p99.9, mean, min, max (MultiStream: per query)
    queries: int | None
    over_latency: int | None  # Server: queries over the latency bound
    early_stopping: str | None  # LoadGen's early-stopping estimate, its words
    batch_sizes: dict[int, int]  # samples a batch -> batches
    queue_ms_p50: float | None
    queue_ms_p99: float | None
    p99_by_second_ms: list[float | None]  # the batcher's latency of the samples arriving in each second (BatchStats)
    engine_ms_median: float | None  # the engine's own query, per batch
    engine_ms_p99: float | None  # its slow end: a tail the queue behind it inherits
    overhead_ms_median: float | None  # the batcher's own work per batch (forming it, completing it)
    duration_s: float
    log_dir: Path
    error: str | None  # the engine's error: its samples were completed unrun

    def latency(self, percentile: str = "99.00") -> float | None:
        return self.latency_ms.get(f"p{percentile}")


def loadgen_missing() -> str | None:
    """Why serving scenarios cannot run here (LoadGen is not installed), or None."""
    try:
        import mlperf_loadgen  # noqa: F401
    except ImportError as exc:
        return (f"MLPerf LoadGen is not installed here ({exc}): pip install 'farm[serving]' (mlcommons-loadgen; "
                "wheels for Linux x86_64 with glibc 2.28 or newer, macOS arm64 and Windows)")
    return None


def read_detail(log_dir: Path) -> dict[str, Any]:
    """key -> value of LoadGen's detail log (the last record of a key wins)."""
    found: dict[str, Any] = {}
    path = log_dir / "mlperf_log_detail.txt"
    for line in path.read_text(errors="replace").splitlines() if path.is_file() else []:
        if line.startswith(":::MLLOG "):
            try:
                record = json.loads(line[len(":::MLLOG "):])
            except json.JSONDecodeError:
                continue
            found[record.get("key")] = record.get("value")
    return found


def run_scenario(query: QueryFn, batch: int, scenario: str, log_dir: Path, *, max_delay_ms: float = 0.0,
                 target_qps: float | None = None, latency_bound_ms: float | None = None,
                 percentile: float = 0.99, min_duration_ms: float = 10_000, min_query_count: int = 100,
                 samples_per_query: int = 8, expected_latency_ms: float | None = None,
                 seed: int = 0) -> ScenarioRun:
    """Run one LoadGen test of `scenario` on `query` (the engine bound to inputs of `batch`, the
    batcher's largest batch) and read its result. Server needs `target_qps` and
    `latency_bound_ms` (its `percentile` of latencies must stay under it for VALID)."""
    import mlperf_loadgen as lg

    if scenario not in _LOADGEN_NAMES:
        raise ValueError(f"scenario {scenario!r}: one of {', '.join(SCENARIOS)}")
    if scenario == "server" and (not target_qps or not latency_bound_ms):
        raise ValueError("the server scenario needs a target rate and a latency bound")
    settings = lg.TestSettings()
    settings.scenario = getattr(lg.TestScenario, _LOADGEN_NAMES[scenario])
    settings.mode = lg.TestMode.PerformanceOnly
    settings.min_duration_ms = int(min_duration_ms)
    settings.min_query_count = int(min_query_count)
    settings.qsl_rng_seed = settings.sample_index_rng_seed = settings.schedule_rng_seed = seed
    if scenario == "server":
        settings.server_target_qps = float(target_qps)
        settings.server_target_latency_ns = int(latency_bound_ms * 1e6)
        settings.server_target_latency_percentile = percentile
    elif scenario == "offline":
        settings.offline_expected_qps = float(target_qps or 1.0)
    elif scenario == "single_stream":
        settings.single_stream_expected_latency_ns = int((expected_latency_ms or 1.0) * 1e6)
    else:
        settings.multi_stream_samples_per_query = samples_per_query
        settings.multi_stream_expected_latency_ns = int((expected_latency_ms or 8.0) * 1e6)

    log_dir.mkdir(parents=True, exist_ok=True)  # LoadGen writes nothing (and aborts at exit) without it
    log = lg.LogSettings()
    log.log_output.outdir = str(log_dir)
    log.log_output.copy_summary_to_stdout = False
    log.enable_trace = False

    def complete(ids: list[int]) -> None:
        lg.QuerySamplesComplete([lg.QuerySampleResponse(i, 0, 0) for i in ids])

    batcher = DynamicBatcher(query, batch, max_delay_ms, complete)
    sut = lg.ConstructSUT(lambda samples: batcher.issue([s.id for s in samples]), lambda: None)
    qsl = lg.ConstructQSL(SAMPLES, SAMPLES, lambda _indices: None, lambda _indices: None)
    batcher.start()
    started = time.perf_counter()
    try:
        lg.StartTestWithLogSettings(sut, qsl, settings, log)
    finally:
        batcher.stop()
        lg.DestroyQSL(qsl)
        lg.DestroySUT(sut)
    duration = time.perf_counter() - started
    return _result(scenario, target_qps, read_detail(log_dir), batcher, duration, log_dir)


def _result(scenario: str, target_qps: float | None, detail: dict[str, Any], batcher: DynamicBatcher,
            duration: float, log_dir: Path) -> ScenarioRun:
    stats = batcher.stats
    per_query = "_per_query" if scenario == "multi_stream" else ""
    latency = {f"p{p}": detail[key] / 1e6 for p in PERCENTILES
               if isinstance(detail.get(key := f"result_{p}_percentile{per_query}_latency_ns"), (int, float))}
    for name in ("mean", "min", "max"):
        key = f"result_{name}{'_query' if per_query else ''}_latency_ns"
        if isinstance(detail.get(key), (int, float)):
            latency[name] = detail[key] / 1e6
    valid = detail.get("result_validity") == "VALID"
    why = None
    if not valid:
        failed = [what for key, what in (("result_perf_constraints_met", "the latency bound"),
                                         ("result_min_duration_met", "the minimum duration"),
                                         ("result_min_queries_met", "the minimum query count"),
                                         ("early_stopping_met", "the early-stopping estimate")) if detail.get(key) is False]
        why = "; ".join(filter(None, [detail.get("result_invalid_reason") or None,
                                      f"not met: {', '.join(failed)}" if failed else None])) or \
            ("LoadGen wrote no result" if not detail else "LoadGen says INVALID")
    samples = next((detail[k] for k in ("result_completed_samples_per_sec", "result_samples_per_second",
                                        "result_qps_with_loadgen_overhead") if isinstance(detail.get(k), (int, float))), None)
    queue = sorted(stats.queue_ms)
    return ScenarioRun(
        scenario=scenario, target_qps=target_qps, valid=valid, why_invalid=why, samples_per_s=samples,
        scheduled_per_s=detail.get("result_scheduled_samples_per_sec"), latency_ms=latency,
        queries=detail.get("result_query_count"), over_latency=detail.get("result_overlatency_query_count"),
        early_stopping=detail.get("early_stopping_result"), batch_sizes=dict(sorted(stats.batch_sizes.items())),
        queue_ms_p50=queue[len(queue) // 2] if queue else None,
        queue_ms_p99=p99(queue), p99_by_second_ms=stats.p99_by_second(),
        engine_ms_median=statistics.median(stats.engine_ms) if stats.engine_ms else None,
        engine_ms_p99=p99(stats.engine_ms),
        overhead_ms_median=statistics.median(stats.overhead_ms) if stats.overhead_ms else None,
        duration_s=duration, log_dir=log_dir, error=stats.error)

