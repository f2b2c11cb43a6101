"""Which cell runs next where, and what an outcome means: the farm's scheduler, with no I/O.

After Ray Tune's TuneController, the scheduler decides and the executor acts. It holds the
queue of cells, the free slots (one per worker: a GPU's actor, a node's CPU actor, this
process), each cell's attempts and the retry policy; it starts nothing, waits for nothing and
reads no clock. An executor loops:

    scheduler = CellScheduler(cells, slots, max_retries)
    while not scheduler.done:
        for decision in scheduler.step():      # Start(attempt, slot), or Stranded(attempt)
            ...                                 # hand the cell to the slot's worker
        ...                                     # wait for one outcome
        decision = scheduler.report(slot, Returned(result) | Died(death) | Raised(reason, traceback))
        ...                                     # Finished, Retry or Failed: tell the callbacks

Order: with `expected_s` (a cell id's expected seconds: farm.executor.costs, from earlier
sweeps in the warehouse or a prior), the longest expected cell starts first (LPT: the long
cells are spread over the slots early, and the short ones fill the gaps at the end, where FIFO
could leave slots idle behind one long cell); without it, the cells' own order. `fits(cell,
slot)` says whether a slot may run a cell (a cell pinned to a GPU model, farm.executor.ray_farm);
a slot takes the first queued cell that fits it.

The policy (`farm sweep --retries N`): a cell whose process died is retried on a fresh
process up to N times, unless its death says a retry would end the same way (out of memory,
timed out); deaths the node's memory caused (other programs filled it: `node_memory`) do not
count against N, up to MAX_NODE_RETRIES of them (with N = 0, nothing is retried); a cell that
returned a result, failed or not, is done; a worker that raised
instead of returning (a bug) fails its cell at once. A slot whose worker is gone for good
(`Died(..., worker_lost=True)`) takes no more cells; when no slot is left, the queued cells
are stranded. Every cell ends exactly once: one Finished, Failed or Stranded decision.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Callable, Hashable, Iterable, Mapping
from typing import Any, Protocol


class Death(Protocol):
    """How a cell's process died (farm.executor.cell_process.CellDeath)."""

    reason: str
    retry: bool
    out_of_memory: bool
    timed_out: bool
    # node_memory (optional, False where absent): the node ran low on memory for other programs,
    # and the worker was stopped for it: not this cell's doing

    @property
    def kind(self) -> str: ...


MAX_NODE_RETRIES = 5  # retries after deaths the node's memory caused, beside --retries


@dataclasses.dataclass
class Attempt:
    """One run of a cell. `started_at` and `worker` are the executor's notes (when the cell was
    first handed out, the worker of this run): the scheduler carries them and never reads them."""

    cell: Any  # anything with a `cell_id`
    number: int = 1
    deaths: list[Death] = dataclasses.field(default_factory=list)  # of this cell's earlier runs, and this one's
    started_at: Any = None
    worker: Any = None


# --- what the executor reports ------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Returned:
    """The cell returned its result (ok, failed, skipped: the cell's own verdict)."""

    result: Any  # a CellResult: its `attempts` and `earlier_attempts` are filled in


@dataclasses.dataclass(frozen=True)
class Died:
    """The cell's process (or its whole worker) died before returning a result."""

    death: Death
    worker_lost: bool = False  # the slot's worker is gone and could not be replaced


@dataclasses.dataclass(frozen=True)
class Raised:
    """The worker raised instead of returning (a bug, or a result that could not travel)."""

    reason: str
    traceback: str | None = None


# --- what the scheduler decides -----------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Start:
    """Hand this attempt's cell to this slot's worker now."""

    attempt: Attempt
    slot: Hashable


@dataclasses.dataclass(frozen=True)
class Finished:
    """The cell is done with this result."""

    attempt: Attempt
    result: Any


@dataclasses.dataclass(frozen=True)
class Retry:
    """The cell's process died; the cell is queued again (first in line) for a fresh process."""

    attempt: Attempt  # the run that died
    death: Death


@dataclasses.dataclass(frozen=True)
class Failed:
    """The cell is done without a result: record it failed with this reason."""

    attempt: Attempt
    reason: str
    traceback: str | None = None


@dataclasses.dataclass(frozen=True)
class Stranded:
    """The cell is done without a run: no slot is left to run it."""

    attempt: Attempt


class CellScheduler:
    """The queue of cells over a set of slots (any hashable: the executor's own slot objects)."""

    def __init__(self, cells: Iterable[Any], slots: Iterable[Hashable], max_retries: int = 2,
                 expected_s: Mapping[str, float] | None = None,
                 fits: Callable[[Any, Hashable], bool] | None = None) -> None:
        self.max_retries = max_retries
        self.fits = fits or (lambda cell, slot: True)
        ordered = list(cells)
        if expected_s is not None:  # longest first; a stable sort keeps the plan's order among equals
            ordered.sort(key=lambda cell: -expected_s.get(cell.cell_id, 0.0))
        self.queue: collections.deque[Attempt] = collections.deque(Attempt(cell) for cell in ordered)
        self.idle: list[Hashable] = list(slots)  # first in, first used
        self.running: dict[Hashable, Attempt] = {}
        self.lost: set[Hashable] = set()

    @property
    def done(self) -> bool:
        """Every cell has ended (nothing queued, nothing running)."""
        return not self.queue and not self.running

    def step(self) -> list[Start | Stranded]:
        """What to do now: start queued cells on idle slots (each slot the first queued cell that
        fits it); strand the queued cells that no slot left can run."""
        decisions: list[Start | Stranded] = []
        for slot in list(self.idle):
            attempt = next((a for a in self.queue if self.fits(a.cell, slot)), None)
            if attempt is None:
                continue
            self.queue.remove(attempt)
            self.idle.remove(slot)
            self.running[slot] = attempt
            decisions.append(Start(attempt, slot))
        live = [*self.idle, *self.running]
        stranded = [a for a in self.queue if not any(self.fits(a.cell, slot) for slot in live)]
        for attempt in stranded:
            self.queue.remove(attempt)
        return decisions + [Stranded(attempt) for attempt in stranded]

    def report(self, slot: Hashable, outcome: Returned | Died | Raised) -> Finished | Retry | Failed:
        """What the outcome of the attempt running on `slot` means; the slot is free again (or lost)."""
        attempt = self.running.pop(slot)
        if isinstance(outcome, Died) and outcome.worker_lost:
            self.lost.add(slot)
        else:
            self.idle.append(slot)
        if isinstance(outcome, Returned):
            outcome.result.attempts = attempt.number
            outcome.result.earlier_attempts = [death.reason for death in attempt.deaths]
            return Finished(attempt, outcome.result)
        if isinstance(outcome, Raised):
            return Failed(attempt, failure_reason(attempt.deaths, outcome.reason), outcome.traceback)
        attempt.deaths.append(outcome.death)
        if outcome.death.retry and self._may_retry(attempt.deaths):
            self.queue.appendleft(Attempt(attempt.cell, attempt.number + 1, attempt.deaths, attempt.started_at))
            return Retry(attempt, outcome.death)
        return Failed(attempt, failure_reason(attempt.deaths, ""))


    def _may_retry(self, deaths: list[Death]) -> bool:
        """Whether a cell that died this way (`deaths`, its runs so far) is run again: up to
        max_retries deaths of its own, and MAX_NODE_RETRIES the node's memory caused besides."""
        node = sum(1 for death in deaths if getattr(death, "node_memory", False))
        return self.max_retries > 0 and len(deaths) - node <= self.max_retries and node <= MAX_NODE_RETRIES


def failure_reason(deaths: list[Death], fallback: str) -> str:
    """One line for a cell no run of which returned a result: how its runs died, else `fallback`."""
    if not deaths:
        return fallback[:1000]
    kinds = collections.Counter(death.kind for death in deaths)
    reason = deaths[0].reason if len(deaths) == 1 else f"the cell's worker died {len(deaths)} time(s)"
    if len(kinds) > 1:
        reason += " (" + ", ".join(f"{n}x {kind}" for kind, n in kinds.most_common()) + ")"
    if len(deaths) > 1:
        reason += f"; last: {deaths[-1].reason}"
    if not deaths[-1].retry:
        reason += (" (not retried: it would grow as far again)" if deaths[-1].out_of_memory else
                   " (not retried: it would likely time out again)" if deaths[-1].timed_out else " (not retried)")
    return reason[:1000]


def simulate(cells: Iterable[Any], slots: Iterable[Hashable], seconds: Callable[[Any, Hashable], float],
             **scheduler_options: Any) -> list[tuple[Any, Hashable, float, float]]:
    """Run the scheduler in virtual time: every cell returns after `seconds(cell, slot)`.
    (cell, slot, start, end) per cell, in the order they started (benchmarks/scaling.py
    --simulate, tests/test_scheduler.py). Stranded cells are left out."""
    scheduler = CellScheduler(cells, slots, **scheduler_options)
    clock, timeline, ending = 0.0, [], []  # ending: (end, order, slot)
    while not scheduler.done:
        for decision in scheduler.step():
            if isinstance(decision, Start):
                end = clock + seconds(decision.attempt.cell, decision.slot)
                timeline.append((decision.attempt.cell, decision.slot, clock, end))
                ending.append((end, len(timeline), decision.slot))
        if not ending:
            break
        ending.sort(key=lambda e: (e[0], e[1]))
        clock, _, slot = ending.pop(0)
        scheduler.report(slot, Returned(_SimulatedResult()))
    return timeline


@dataclasses.dataclass
class _SimulatedResult:
    attempts: int = 0
    earlier_attempts: list[str] = dataclasses.field(default_factory=list)
