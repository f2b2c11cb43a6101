"""The highest request rate an engine serves under a latency bound: farm's bisection over LoadGen
Server tests (each one VALID by LoadGen's rules or not), between no load and the engine's own
ceiling at its largest batch, to a stated tolerance. farm bisects itself rather than using
LoadGen's FindPeakPerformance mode so that every rate it tried stays a result of its own (the
latency-throughput curve)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from farm.serving.loadgen import ScenarioRun

TOLERANCE = 0.05  # the search stops once the passing and failing rates are this close (of the failing one)
MAX_TESTS = 8  # LoadGen tests a search runs at most


@dataclasses.dataclass
class RateSearch:
    bound_ms: float
    best: ScenarioRun | None  # the highest rate that passed
    tried: list[ScenarioRun]  # every test, in the order run
    why_none: str | None = None  # where no rate passed, or none could


def passes(run: ScenarioRun, bound_ms: float) -> bool:
    """VALID by LoadGen's rules (the latency bound at its percentile among them), p99 under the bound
    (said again: it is the question asked), and the engine ran every batch."""
    p99 = run.latency("99.00")
    return run.valid and run.error is None and p99 is not None and p99 <= bound_ms


def below_the_engine(bound_ms: float, engine_ms: float, batch: int) -> str | None:
    """Why no rate can meet `bound_ms` (the engine's own query at its batch takes longer), or None."""
    if engine_ms >= bound_ms:
        return (f"slo_ms = {bound_ms:g} is below the engine's own latency at batch {batch} ({engine_ms:.3g} ms a query, "
                "before any queueing): no request rate can meet it; raise slo_ms, or serve a smaller max batch")
    return None


def highest_rate(run_at: Callable[[float], ScenarioRun], bound_ms: float, ceiling_qps: float,
                 tolerance: float = TOLERANCE, max_tests: int = MAX_TESTS) -> RateSearch:
    """Bisect between 0 and `ceiling_qps` (the engine's samples/s at its largest batch, back to back:
    no arrival process serves more) for the highest rate at which `run_at(rate)` passes."""
    search = RateSearch(bound_ms, None, [])
    low, high = 0.0, ceiling_qps
    rate = ceiling_qps * 0.9  # most engines pass a little under their ceiling with a loose bound
    while len(search.tried) < max_tests:
        run = run_at(rate)
        search.tried.append(run)
        if run.error is not None:
            search.why_none = f"the engine failed while serving: {run.error}"
            break
        if passes(run, bound_ms):
            low, search.best = rate, run
        else:
            high = rate
        if high - low <= tolerance * high:
            break
        rate = (low + high) / 2
    if search.best is None and search.why_none is None:
        last = search.tried[-1]
        search.why_none = (f"no rate down to {last.target_qps:.3g}/s passed: {last.why_invalid or 'p99 over the bound'}")
    return search
