"""A serving cell: the built engine's query under its scenario's LoadGen tests, as rows of the
`serving` table, one per test, the one that answers the cell marked `chosen` (Server: the highest
rate that passed its p99 bound; SingleStream and MultiStream: the test, where VALID). LoadGen's
logs of each test stay in `log_root`."""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from farm.errors import EngineUnsupported
from farm.records import QueryFn
from farm.scenario import ServingPlan
from farm.serving.loadgen import ScenarioRun, run_scenario
from farm.serving.search import below_the_engine, highest_rate, passes
from farm.telemetry import GpuTelemetry, unavailable_row

# a test's GPU telemetry, as the `serving` table keeps it: the board's energy over the LoadGen test
ENERGY_COLUMNS = ("energy_j", "energy_per_query_mj", "energy_per_sample_mj", "power_mean_w", "telemetry_note")
OpenWindow = Callable[[], tuple[GpuTelemetry | None, str | None]]  # farm.telemetry.cell_window for the cell

CEILING_MS = 500.0  # how long the engine's query runs back to back, after as long a warm-up, for its ceiling
# the engine's query back to back right before each LoadGen test (outside its energy window): a test
# starts on an engine as warm as a served one, not on one idle since the test before (its logs
# written, the next rate chosen), whose first queries a short test's p99 would count
WARMUP_MS = 300.0


def back_to_back(query: QueryFn, duration_ms: float, at_least: int = 3) -> float:
    """Run the query back to back for `duration_ms` (`at_least` queries): ms a query."""
    count, start = 0, time.perf_counter()
    while count < at_least or (time.perf_counter() - start) * 1000 < duration_ms:
        query()
        count += 1
    return (time.perf_counter() - start) * 1000 / count


def engine_ms(query: QueryFn, duration_ms: float = CEILING_MS) -> float:
    """The engine's query back to back (ms a query), after a warm-up as long: the fastest the
    batcher can be fed, and the latency no load can beat."""
    back_to_back(query, duration_ms)  # the warm-up
    return back_to_back(query, duration_ms)


def serving_rows(query: QueryFn, plan: ServingPlan, batch: int, log_root: Path, log: Callable[[str], None],
                 seed: int = 0, telemetry: OpenWindow | None = None) -> list[dict[str, Any]]:
    """Every LoadGen test of the cell, each with the GPU's energy over the test where `telemetry`
    opens a window (a GPU cell with NVML), each right after WARMUP_MS of the query back to back.
    Raises EngineUnsupported where the bound is below the engine's own query (no rate can meet it)."""
    shutil.rmtree(log_root, ignore_errors=True)
    alone = engine_ms(query)
    log(f"the engine's query: {alone:.3f} ms back to back at batch {batch}")
    tests: list[ScenarioRun] = []
    energy: list[dict[str, Any]] = []

    def run(scenario: str, rate: float | None = None) -> ScenarioRun:
        window, why = telemetry() if telemetry else (None, None)
        try:
            try:
                back_to_back(query, WARMUP_MS, at_least=1)
            except Exception:  # noqa: BLE001 - the test below meets the engine's error and records it as its own
                pass
            if window is not None:
                window.start()
            done = run_scenario(query, batch, scenario, log_root / f"test-{len(tests):02d}", max_delay_ms=plan.max_delay_ms,
                                target_qps=rate, latency_bound_ms=plan.slo_ms or 1e6,
                                min_duration_ms=plan.min_duration_ms, min_query_count=plan.min_query_count,
                                samples_per_query=plan.samples_per_query, expected_latency_ms=alone, seed=seed)
            if window is not None:
                window.stop()
            # a MultiStream query is `samples_per_query` samples, the others' one, whatever batches the batcher made
            per_query = plan.samples_per_query if scenario == "multi_stream" else 1
            reading = window.row(done.queries or 0, per_query) if window else unavailable_row(why)
        finally:
            if window is not None:
                window.close()
        tests.append(done)
        energy.append({name: reading[name] for name in ENERGY_COLUMNS})
        p99 = done.latency("99.00")
        log(f"{scenario}{f' at {rate:,.0f}/s' if rate else ''}: {'VALID' if done.valid else 'INVALID'}, "
            f"p99 {p99:.3f} ms" if p99 is not None else f"{scenario}: no latencies")
        return done

    chosen: ScenarioRun | None = None
    if plan.scenario == "server":
        if plan.slo_ms is not None and (why := below_the_engine(plan.slo_ms, alone, batch)):
            raise EngineUnsupported(why)
        if plan.rates:
            for rate in plan.rates:
                run("server", rate)
            passing = [t for t in tests if plan.slo_ms is not None and passes(t, plan.slo_ms)]
            chosen = max(passing, key=lambda t: t.target_qps) if passing else None
        else:
            chosen = highest_rate(lambda rate: run("server", rate), plan.slo_ms, batch / alone * 1000).best
    else:
        done = run(plan.scenario)
        chosen = done if done.valid and done.error is None else None
    return [{**_row(t, plan, t is chosen, alone), **reading} for t, reading in zip(tests, energy)]


def _row(run: ScenarioRun, plan: ServingPlan, chosen: bool, alone_ms: float) -> dict[str, Any]:
    latency = run.latency_ms
    return {
        "test": int(run.log_dir.name.split("-")[-1]), "scenario": run.scenario, "max_delay_ms": plan.max_delay_ms,
        "slo_ms": plan.slo_ms, "target_qps": run.target_qps, "valid": run.valid, "why_invalid": run.why_invalid,
        "chosen": chosen, "samples_per_s": run.samples_per_s, "scheduled_per_s": run.scheduled_per_s,
        "latency_p50_ms": latency.get("p50.00"), "latency_p90_ms": latency.get("p90.00"),
        "latency_p95_ms": latency.get("p95.00"), "latency_p99_ms": latency.get("p99.00"),
        "latency_p999_ms": latency.get("p99.90"), "latency_mean_ms": latency.get("mean"),
        "latency_max_ms": latency.get("max"), "queries": run.queries, "over_latency_queries": run.over_latency,
        "early_stopping": run.early_stopping, "batch_sizes": json.dumps(run.batch_sizes),
        "queue_p50_ms": run.queue_ms_p50, "queue_p99_ms": run.queue_ms_p99,
        "p99_by_second_ms": json.dumps([None if ms is None else round(ms, 3) for ms in run.p99_by_second_ms]),
        "engine_ms": run.engine_ms_median,
        "engine_p99_ms": run.engine_ms_p99,
        "engine_alone_ms": alone_ms, "batcher_ms": run.overhead_ms_median, "duration_s": run.duration_s,
        "error": run.error, "log_dir": str(run.log_dir),
    }
