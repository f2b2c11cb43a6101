"""`farm compare --confirm`: the pairs called slower, faster or inconclusive measured again, here and
now, BASE and NEW interleaved, so that the machine's drift between the two original runs, which
neither run's samples show, falls on both sides alike. An inconclusive pair is most often one whose
runs the machine's drift separates: host-bound cells on a GPU VM move tens of percent from one run
to the next, and within seconds too.

Both cells are built side by side in this process and timed in short alternating blocks (A B, B A,
A B, ...: `rounds` pairs of blocks of at least BLOCK_QUERIES queries and BLOCK_MS, after each cell's
warm-up), so that drift of a second or more falls on both; the change is the mean of the rounds'
log ratios of the block medians with its t interval, judged by farm's one rule
(farm.compare.stats.verdict). A backend that times itself (trtexec) is measured instead in whole
runs of its cell, alternating (its sweep file's settings, no per-layer run, no accuracy check).

The cells are planned again from the sweep files their runs recorded (`sweeps.config_text`, the
models' paths relative to `config_path`), under their sweep's name, so they are the very cells
compared; a cell whose model file changed since plans to another id, and is said to be so.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import math
import statistics
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from farm.compare.core import CONTENDED_UNDECIDED, RUN_SPREAD_UNDECIDED, WITHIN_TWO_RUNS
from farm.compare.stats import FASTER, INCONCLUSIVE, SLOWER, verdict
from farm.errors import UserError

ROUNDS = 20  # A/B rounds per pair in doubt: a timed block of each side a round, order alternating
BLOCK_QUERIES, BLOCK_MS = 5, 200.0  # a block: at least this many queries and this long
IN_DOUBT = (SLOWER, FASTER, INCONCLUSIVE)  # the verdicts --confirm measures again (within noise is settled)


@dataclasses.dataclass
class Confirmation:
    """A suspect pair measured again interleaved: the change of the rounds' medians and its verdict."""

    label: str
    was: str  # the verdict from the two original runs
    verdict: str  # from the interleaved rounds ('could not confirm' where they could not run)
    effect: float = math.nan
    low: float = math.nan
    high: float = math.nan
    rounds: int = 0
    first_rounds: int = 0  # the rounds asked for: `rounds` is a multiple where they left it inconclusive
    why: str | None = None  # where it could not run: why

    @property
    def confirmed(self) -> bool:
        return self.verdict == self.was


def confirm(comparison: Any, base_results: Path, new_results: Path, rounds: int = ROUNDS) -> list[Confirmation]:
    """Each slower, faster or inconclusive pair of `comparison` measured again, `rounds` interleaved
    rounds; its verdict becomes the rounds' (where they could run), with a note saying so."""
    if rounds < 2:
        raise UserError(f"--rounds {rounds}: give 2 or more (the interval needs rounds to spread)")
    suspects = [p for p in comparison.pairs if p.verdict in IN_DOUBT]
    if not suspects:
        return []
    cells, why_not = {}, {}
    for results, sweep in ((base_results, comparison.base_sweep), (new_results, comparison.new_sweep)):
        planned, why = _planned(results, sweep)
        cells |= planned
        if why:
            why_not[sweep] = why
    found = []
    for pair in suspects:
        a, b = cells.get(pair.base_id), cells.get(pair.new_id)
        if a is None or b is None:
            why = next(iter(why_not.values()), None) or (
                "its model file or sweep file changed since it was measured (it plans to another cell id)")
            found.append(Confirmation(pair.label, pair.verdict, "could not confirm", why=why))
        else:
            found.append(_interleaved(pair, a[0], b[0], a[1], rounds, comparison.min_effect_percent))
        if found[-1].why is None:
            pair.verdict = found[-1].verdict
            # what said the two runs could not settle it is settled now
            pair.notes = [n for n in pair.notes if n not in (WITHIN_TWO_RUNS, RUN_SPREAD_UNDECIDED)
                          and not n.startswith(CONTENDED_UNDECIDED)]
            if pair.verdict != SLOWER:
                pair.layers = None  # what explained a slowdown the rounds do not confirm
        pair.notes.append(confirmation_text(found[-1]).split(": ", 1)[1])
    return found


def _planned(results: Path, sweep: str) -> tuple[dict[str, Any], str | None]:
    """Cell id -> (the cell as planned again, the cache folder), from the sweep file the sweep's
    latest run recorded; and why not, where it cannot be planned again here."""
    from farm.config import parse_config
    from farm.plan import plan_sweep
    from farm.warehouse import WarehouseReader

    warehouse = WarehouseReader(results)  # reads the sweeps table; the cells it plans write only the cache
    _, rows = warehouse.fetch(warehouse.connect(), "SELECT config_path, config_text FROM sweeps WHERE sweep_id = ? "
                                                   "AND config_text IS NOT NULL ORDER BY started_at DESC LIMIT 1", [sweep])
    if not rows:
        return {}, f"sweep {sweep!r} recorded no sweep file (cells ingested from trtexec output cannot be run here)"
    path, text = rows[0]
    try:
        loaded = parse_config(text, Path(path))
        plan = plan_sweep(loaded.named(sweep), warehouse.cache_dir)
    except (UserError, OSError) as exc:
        return {}, f"sweep {sweep!r}'s file cannot be planned again here ({exc})"
    return {cell.cell_id: (cell, warehouse.cache_dir) for cell in plan.cells}, None


def _interleaved(pair: Any, base: Any, new: Any, cache_dir: Path, rounds: int, min_effect: float) -> Confirmation:
    """`rounds` rounds of both cells, the order alternating, and the verdict on their log ratios;
    timed in blocks, a pair still inconclusive after them gets as many rounds again, up to one look
    per LOOK_CONFIDENCES."""
    from farm.backends.base import LoopTimedBackend
    from farm.backends.registry import backend_class

    if all(issubclass(backend_class(c.backend), LoopTimedBackend) for c in (base, new)):
        ratios, why = _blocks(base, new, cache_dir, rounds, min_effect)
    else:
        ratios, why = _whole_runs(base, new, cache_dir, rounds)
    if why:
        return Confirmation(pair.label, pair.verdict, "could not confirm", rounds=len(ratios), why=why)
    found, effect, low, high = judged(ratios, min_effect, look_of(len(ratios), rounds))
    return Confirmation(pair.label, pair.verdict, found, effect, low, high, len(ratios), rounds)


# A pair the first `rounds` leave inconclusive is timed for as many rounds again and judged on all of
# them, and once more if that leaves it inconclusive: a host-bound change of 10 % on a GPU VM needed
# 40 to 60 rounds where a steady machine needs 20 (two of ten planted +10 % changes stayed undecided
# at +7.2 and +7.7 % over 40, benchmarks/results/verdicts-h200-resnet50-b1-second-look.csv). Each
# look's interval is stricter, so that the looks together call an unchanged pair changed at most
# 8.75 % of the time with no minimum effect at all (Bonferroni: 5 + 2.5 + 1.25 %; tests/test_compare.py
# draws it), and with the 3 % minimum effect about as rarely as one look does.
LOOK_CONFIDENCES = (0.95, 0.975, 0.9875)


def another_look(ratios: list[float], rounds: int, min_effect: float) -> bool:
    """After a look (each `rounds` rounds): whether the pair is still inconclusive with a look left,
    so that `rounds` more are timed."""
    return (len(ratios) < len(LOOK_CONFIDENCES) * rounds
            and judged(ratios, min_effect, look_of(len(ratios), rounds))[0] == INCONCLUSIVE)


def rounds_timed(ratios: list[float], rounds: int, min_effect: float) -> int:
    """How many of a pair's rounds `--confirm` would time had they come out `ratios` (all it could
    time, or more): where it stops, by another_look. For replaying recorded rounds."""
    count = min(rounds, len(ratios))
    while count + rounds <= len(ratios) and another_look(ratios[:count], rounds, min_effect):
        count += rounds
    return count


def look_of(count: int, rounds: int) -> int:
    """Which look `count` rounds are (1 for the first `rounds`, 2 after as many again, ...)."""
    return min(max(1, math.ceil(count / max(rounds, 1))), len(LOOK_CONFIDENCES))


def judged(ratios: list[float], min_effect: float, look: int = 1) -> tuple[str, float, float, float]:
    """(verdict, change, interval low, high) of the rounds' log ratios NEW / BASE: their mean with its
    t interval (at LOOK_CONFIDENCES of `look`: 95 % on the first), by farm's one rule."""
    from scipy import stats

    mean = sum(ratios) / len(ratios)
    spread = stats.tstd(ratios) / math.sqrt(len(ratios))
    confidence = LOOK_CONFIDENCES[look - 1]
    half = stats.t.ppf(1 - (1 - confidence) / 2, len(ratios) - 1) * spread
    low, high = math.exp(mean - half) - 1, math.exp(mean + half) - 1
    return verdict(low, high, min_effect), math.exp(mean) - 1, low, high


def _blocks(base: Any, new: Any, cache_dir: Path, rounds: int, min_effect: float) -> tuple[list[float], str | None]:
    """Both cells built side by side, timed in alternating blocks: each round's log(NEW / BASE) of
    the block medians; or why they could not be. After each `rounds`, `rounds` more where
    another_look says so."""
    from farm.errors import describe

    ratios: list[float] = []
    try:
        with side_by_side(base, new, cache_dir) as queries:
            target = rounds
            for base_ms, new_ms in block_rounds(queries):
                ratios.append(math.log(statistics.median(new_ms) / statistics.median(base_ms)))
                if len(ratios) == target:
                    if not another_look(ratios, rounds, min_effect):
                        break
                    target += rounds
    except Exception as exc:  # noqa: BLE001 - a pair that cannot be measured again says why; the rest go on
        return ratios, f"building or timing them side by side failed: {describe(exc)[:300]}"
    return ratios, None


@contextlib.contextmanager
def side_by_side(base: Any, new: Any, cache_dir: Path) -> Iterator[tuple[Any, Any]]:
    """Both cells built in this process, each warmed up: their query functions (BASE, NEW)."""
    from farm.cell_runner import built_backend
    from farm.measure import warm_up_query

    with built_backend(base, cache_dir) as (a, feeds_a), built_backend(new, cache_dir) as (b, feeds_b):
        queries = (a.query_fn(feeds_a), b.query_fn(feeds_b))
        for query, cell in zip(queries, (base, new)):
            warm_up_query(query, cell.measurement.warmup_ms)
        yield queries


def block_rounds(queries: tuple[Any, Any]) -> Iterator[tuple[list[float], list[float]]]:
    """Rounds of one timed block of each side (BASE, NEW), the order alternating (A B, B A, A B,
    ...): each round's (BASE latencies, NEW latencies), ms. Endless: the caller stops."""
    from farm.measure import block_latencies_ms

    for number in itertools.count():
        latencies = {side: block_latencies_ms(queries[side], BLOCK_QUERIES, BLOCK_MS)
                     for side in ((0, 1) if number % 2 == 0 else (1, 0))}
        yield latencies[0], latencies[1]


def _whole_runs(base: Any, new: Any, cache_dir: Path, rounds: int) -> tuple[list[float], str | None]:
    """Each round a whole run of each cell (its repeats, no accuracy check, no per-layer run): for
    backends that time themselves."""
    from farm.cell_runner import run_cell

    cells = [dataclasses.replace(c, measurement=dataclasses.replace(c.measurement, layer_iterations=0), tolerance=None)
             for c in (base, new)]
    ratios: list[float] = []
    for number in range(rounds):
        medians = {}
        for side in ((0, 1) if number % 2 == 0 else (1, 0)):
            result = run_cell(cells[side], cache_dir)
            if result.status != "ok" or not result.measurement:
                return ratios, f"a round ended {result.status}: {result.reason}"
            medians[side] = float(result.measurement["latency_median_ms"])
        ratios.append(math.log(medians[1] / medians[0]))
    return ratios, None


def confirmation_text(found: Confirmation) -> str:
    """'tiny · fp32 · b1 · onnxruntime: measured again interleaved, slower confirmed (+240.1 %, 95 %
    interval +201.3 to +281.0 % over 4 rounds)'; an inconclusive pair's 'inconclusive from the two
    runs; measured again interleaved, slower (...)'."""
    if found.why:
        return f"{found.label}: {found.was}, could not be measured again: {found.why}"
    if found.was == INCONCLUSIVE:
        outcome = f"inconclusive from the two runs; measured again interleaved, {found.verdict}"
    else:
        outcome = "measured again interleaved, " + (f"{found.was} confirmed" if found.confirmed
                                                    else f"{found.was} not confirmed, {found.verdict}")
    second = found.first_rounds and found.rounds > found.first_rounds
    confidence = LOOK_CONFIDENCES[look_of(found.rounds, found.first_rounds or found.rounds) - 1]
    figures = (f"{100 * found.effect:+.1f} %, {100 * confidence:g} % interval {100 * found.low:+.1f} to "
               f"{100 * found.high:+.1f} %").replace("-", "−")
    rounds = f"{found.rounds} rounds" + (f", the last {found.rounds - found.first_rounds} because the first "
                                         f"{found.first_rounds} left it undecided" if second else "")
    return f"{found.label}: {outcome} ({figures} over {rounds})"
