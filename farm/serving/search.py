"""The highest request rate an engine serves under a latency bound: farm's bisection over LoadGen
Server tests (each one VALID by LoadGen's rules or not), between no load and the engine's own
ceiling at its largest batch, to a stated tolerance. farm bisects itself rather than using
LoadGen's FindPeakPerformance mode so that every rate it tried stays a result of its own (the
latency-throughput curve).

The answer is confirmed: a rate chosen because one test passed is the winner's curse (the highest
of several noisy tests is more often a lucky one), so the search runs the chosen rate again and
keeps it only if it passes twice; a confirmation that fails makes that rate a failing one, and the
search goes on below it. On the H200, single-pass answers of two identical runs differed by up to
12 % (benchmarks/results/serving-h200-*.csv)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from farm.serving.loadgen import ScenarioRun

TOLERANCE = 0.05  # the search stops once the passing and failing rates are this close (of the failing one)
# How far apart runs of one search came on H200s (docs/gpu-figures.md#serving), by the length of their
# LoadGen tests: with 4 s and 10 s tests the pairs of ResNet-50 and BERT-base up to 12.9 %, and eight runs
# of BERT-base on ONNX Runtime CUDA across four machines 16.0 % (4,231 to 5,035/s); with 60 s tests five
# runs of that search came 2.4 % apart (5,064 to 5,190/s), inside the bisection's own TOLERANCE.
# Answers closer than this are not told apart.
RUN_TO_RUN = 0.16
LONG_TEST_S = 60.0
RUN_TO_RUN_LONG = TOLERANCE
MAX_TESTS = 12  # LoadGen tests a search runs at most: the bisection's ~6, a confirmation, and a failed one's way back


def run_to_run(test_s: float | None) -> float:
    """How far apart two runs of one search can come, for LoadGen tests of `test_s` seconds."""
    return RUN_TO_RUN_LONG if test_s is not None and test_s >= LONG_TEST_S else RUN_TO_RUN


@dataclasses.dataclass
class RateSearch:
    bound_ms: float
    best: ScenarioRun | None  # the highest rate that passed (its latest test)
    tried: list[ScenarioRun]  # every test, in the order run
    why_none: str | None = None  # where no rate passed, or none could
    confirmed: bool = False  # `best`'s rate passed twice (the search ran out of tests before, where not)


def passes(run: ScenarioRun, bound_ms: float) -> bool:
    """VALID by LoadGen's rules (the latency bound at its percentile among them), p99 under the bound
    (said again: it is the question asked), and the engine ran every batch."""
    return meets(run.valid, run.error, run.latency("99.00"), bound_ms)


def meets(valid: bool, error: str | None, p99_ms: float | None, bound_ms: float | None) -> bool:
    """`passes` of one LoadGen test's figures, as the `serving` table holds them (no bound: VALID)."""
    if not valid or error is not None or p99_ms is None or p99_ms != p99_ms:  # NaN: no latencies
        return False
    return bound_ms is None or bound_ms != bound_ms or p99_ms <= bound_ms


def below_the_engine(bound_ms: float, engine_ms: float, batch: int) -> str | None:
    """Why no rate can meet `bound_ms` (the engine's own query at its batch takes longer), or None."""
    if engine_ms >= bound_ms:
        return (f"slo_ms = {bound_ms:g} is below the engine's own latency at batch {batch} ({engine_ms:.3g} ms a query, "
                "before any queueing): no request rate can meet it; raise slo_ms, or serve a smaller max batch")
    return None


def highest_rate(run_at: Callable[[float], ScenarioRun], bound_ms: float, ceiling_qps: float,
                 tolerance: float = TOLERANCE, max_tests: int = MAX_TESTS) -> RateSearch:
    """Bisect between 0 and `ceiling_qps` (the engine's samples/s at its largest batch, back to back:
    no arrival process serves more) for the highest rate at which `run_at(rate)` passes twice."""
    search = RateSearch(bound_ms, None, [])
    low, high = 0.0, ceiling_qps
    rate = ceiling_qps * 0.9  # most engines pass a little under their ceiling with a loose bound
    passed: dict[float, list[ScenarioRun]] = {}  # rates whose every test passed, their tests
    while len(search.tried) < max_tests:
        run = run_at(rate)
        search.tried.append(run)
        if run.error is not None:
            search.why_none = f"the engine failed while serving: {run.error}"
            break
        if passes(run, bound_ms):
            passed.setdefault(rate, []).append(run)
            low = rate
        else:
            high = rate
            if passed.pop(rate, None) is not None:  # its confirmation failed: the next passing rate below is the answer
                low = max((r for r in passed if r < rate), default=0.0)
        search.best = passed[low][-1] if low else None
        search.confirmed = bool(low) and len(passed[low]) >= 2
        if high - low > tolerance * high:
            rate = (low + high) / 2
        elif search.confirmed:
            break
        else:
            rate = low  # the bisection has its answer: run it again
    if search.best is None and search.why_none is None:
        last = search.tried[-1]
        search.why_none = (f"no rate down to {last.target_qps:.3g}/s passed: {last.why_invalid or 'p99 over the bound'}")
    return search
