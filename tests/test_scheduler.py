"""The cell scheduler on fakes: no Ray, no processes, no clock (farm/scheduler.py)."""

from __future__ import annotations

import dataclasses
import random

import pytest

from farm.scheduler import (
    CellScheduler,
    Died,
    Failed,
    Finished,
    Raised,
    Retry,
    Returned,
    Start,
    Stranded,
    failure_reason,
    simulate,
)


@dataclasses.dataclass(frozen=True)
class FakeCell:
    cell_id: str


@dataclasses.dataclass
class FakeResult:
    cell_id: str
    status: str = "ok"
    attempts: int = 0
    earlier_attempts: list[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class FakeDeath:
    reason: str
    retry: bool = True
    out_of_memory: bool = False
    timed_out: bool = False
    signal: str | None = "SIGKILL"
    node_memory: bool = False

    @property
    def kind(self) -> str:
        return "out of memory" if self.out_of_memory else "timed out" if self.timed_out else self.signal or "exited"


KILLED = FakeDeath("the cell's process was killed by SIGKILL")
OOM = FakeDeath("out of memory: over this worker's limit", retry=False, out_of_memory=True)
TIMED_OUT = FakeDeath("timed out: still running", retry=False, timed_out=True)
NODE_LOW = FakeDeath("the node ran low on memory: the node's trouble (other programs), not the cell's", node_memory=True)


def cells(n: int) -> list[FakeCell]:
    return [FakeCell(f"c{i}") for i in range(n)]


def starts(decisions) -> list[tuple[str, str]]:
    return [(d.attempt.cell.cell_id, d.slot) for d in decisions if isinstance(d, Start)]


def test_cells_start_in_order_on_free_slots_and_wait_for_one() -> None:
    scheduler = CellScheduler(cells(3), ["gpu0", "gpu1"])
    assert starts(scheduler.step()) == [("c0", "gpu0"), ("c1", "gpu1")]
    assert scheduler.step() == []  # no slot free
    decision = scheduler.report("gpu1", Returned(FakeResult("c1")))
    assert isinstance(decision, Finished) and decision.result.attempts == 1
    assert starts(scheduler.step()) == [("c2", "gpu1")]
    scheduler.report("gpu0", Returned(FakeResult("c0")))
    assert not scheduler.done
    scheduler.report("gpu1", Returned(FakeResult("c2")))
    assert scheduler.done and scheduler.step() == []


def test_a_failed_result_is_a_result_not_retried() -> None:
    scheduler = CellScheduler(cells(1), ["w"], max_retries=2)
    scheduler.step()
    decision = scheduler.report("w", Returned(FakeResult("c0", status="failed")))
    assert isinstance(decision, Finished) and decision.result.status == "failed"
    assert scheduler.done


def test_a_death_is_retried_first_in_line_on_a_fresh_process() -> None:
    scheduler = CellScheduler(cells(3), ["w"], max_retries=2)
    assert starts(scheduler.step()) == [("c0", "w")]
    decision = scheduler.report("w", Died(KILLED))
    assert isinstance(decision, Retry) and decision.attempt.number == 1 and decision.death is KILLED
    (start,) = scheduler.step()
    assert (start.attempt.cell.cell_id, start.attempt.number) == ("c0", 2)  # before c1
    decision = scheduler.report("w", Returned(FakeResult("c0")))
    assert decision.result.attempts == 2 and decision.result.earlier_attempts == [KILLED.reason]


def test_retries_stop_after_max_retries_and_the_cell_fails_once() -> None:
    scheduler = CellScheduler(cells(1), ["w"], max_retries=2)
    decisions = []
    while not scheduler.done:
        scheduler.step()
        decisions.append(scheduler.report("w", Died(KILLED)))
    assert [type(d) for d in decisions] == [Retry, Retry, Failed]
    failed = decisions[-1]
    assert failed.attempt.number == 3 and len(failed.attempt.deaths) == 3
    assert failed.reason.startswith("the cell's worker died 3 time(s); last: ")


@pytest.mark.parametrize("death, suffix", [(OOM, "(not retried: it would grow as far again)"),
                                           (TIMED_OUT, "(not retried: it would likely time out again)")])
def test_out_of_memory_and_timeouts_are_not_retried(death: FakeDeath, suffix: str) -> None:
    scheduler = CellScheduler(cells(2), ["w"], max_retries=5)
    scheduler.step()
    decision = scheduler.report("w", Died(death))
    assert isinstance(decision, Failed) and decision.attempt.number == 1
    assert decision.reason == f"{death.reason} {suffix}"
    assert starts(scheduler.step()) == [("c1", "w")]  # the sweep goes on


def test_deaths_the_node_caused_do_not_use_up_the_cells_retries() -> None:
    """Other programs filling the node's memory stop workers again and again while it lasts: those
    deaths are retried beside --retries, up to MAX_NODE_RETRIES; the cell's own still count."""
    from farm.scheduler import MAX_NODE_RETRIES

    scheduler = CellScheduler(cells(1), ["w"], max_retries=1)
    for _ in range(MAX_NODE_RETRIES):
        scheduler.step()
        assert isinstance(scheduler.report("w", Died(NODE_LOW)), Retry)
    scheduler.step()
    assert isinstance(scheduler.report("w", Died(KILLED)), Retry)  # its own first death: --retries 1 left
    scheduler.step()
    finished = scheduler.report("w", Returned(FakeResult("c0")))
    assert isinstance(finished, Finished) and finished.result.attempts == MAX_NODE_RETRIES + 2

    scheduler = CellScheduler(cells(1), ["w"], max_retries=2)
    decisions = []
    while not scheduler.done:
        scheduler.step()
        decisions.append(scheduler.report("w", Died(NODE_LOW)))
    assert [type(d) for d in decisions] == [Retry] * MAX_NODE_RETRIES + [Failed]

    scheduler = CellScheduler(cells(1), ["w"], max_retries=0)  # no retries asked for: none
    scheduler.step()
    assert isinstance(scheduler.report("w", Died(NODE_LOW)), Failed)


def test_no_retries_at_zero() -> None:
    scheduler = CellScheduler(cells(1), ["w"], max_retries=0)
    scheduler.step()
    assert isinstance(scheduler.report("w", Died(KILLED)), Failed)


def test_deaths_of_several_kinds_are_counted_by_kind() -> None:
    scheduler = CellScheduler(cells(1), ["w"], max_retries=3)
    for death in (KILLED, dataclasses.replace(KILLED, signal="SIGSEGV", reason="segfault"), KILLED, OOM):
        scheduler.step()
        decision = scheduler.report("w", Died(death))
    assert isinstance(decision, Failed)
    assert decision.reason == ("the cell's worker died 4 time(s) (2x SIGKILL, 1x SIGSEGV, 1x out of memory); "
                               f"last: {OOM.reason} (not retried: it would grow as far again)")


def test_a_raising_worker_fails_its_cell_at_once_and_keeps_its_slot() -> None:
    scheduler = CellScheduler(cells(2), ["w"], max_retries=2)
    scheduler.step()
    decision = scheduler.report("w", Raised("the worker failed: boom", traceback="Traceback ..."))
    assert isinstance(decision, Failed)
    assert (decision.reason, decision.traceback) == ("the worker failed: boom", "Traceback ...")
    assert starts(scheduler.step()) == [("c1", "w")]


def test_a_replaced_worker_keeps_its_slot_and_the_cell_is_retried() -> None:
    scheduler = CellScheduler(cells(1), ["a", "b"], max_retries=1)
    assert starts(scheduler.step()) == [("c0", "a")]
    assert isinstance(scheduler.report("a", Died(KILLED, worker_lost=False)), Retry)
    assert starts(scheduler.step()) == [("c0", "b")]  # the idle slot first, then the replaced one


def test_a_lost_worker_takes_no_more_cells() -> None:
    scheduler = CellScheduler(cells(3), ["a", "b"], max_retries=1)
    scheduler.step()
    assert isinstance(scheduler.report("a", Died(KILLED, worker_lost=True)), Retry)
    assert scheduler.step() == []  # b is busy, a is gone
    scheduler.report("b", Returned(FakeResult("c1")))
    assert starts(scheduler.step()) == [("c0", "b")]
    scheduler.report("b", Returned(FakeResult("c0")))
    assert starts(scheduler.step()) == [("c2", "b")]
    assert scheduler.lost == {"a"}


def test_cells_left_without_a_slot_are_stranded_with_their_deaths() -> None:
    scheduler = CellScheduler(cells(3), ["a"], max_retries=2)
    scheduler.step()
    assert isinstance(scheduler.report("a", Died(KILLED, worker_lost=True)), Retry)
    stranded = scheduler.step()
    assert [type(d) for d in stranded] == [Stranded] * 3 and scheduler.done
    assert [d.attempt.cell.cell_id for d in stranded] == ["c0", "c1", "c2"]
    assert stranded[0].attempt.number == 2 and stranded[0].attempt.deaths == [KILLED]
    # the executor's reason for a stranded cell: how it died if it did, else its own
    assert failure_reason(stranded[0].attempt.deaths, "no worker left") == KILLED.reason
    assert failure_reason(stranded[1].attempt.deaths, "no worker left") == "no worker left"


def test_no_slot_at_all_strands_every_cell() -> None:
    scheduler = CellScheduler(cells(2), [])
    assert [type(d) for d in scheduler.step()] == [Stranded, Stranded]
    assert scheduler.done


def test_executor_notes_travel_with_retries() -> None:
    scheduler = CellScheduler(cells(1), ["w"], max_retries=1)
    (start,) = scheduler.step()
    start.attempt.started_at, start.attempt.worker = "t0", {"pid": 1}
    scheduler.report("w", Died(KILLED))
    (start,) = scheduler.step()
    assert (start.attempt.started_at, start.attempt.worker) == ("t0", None)


def test_the_reason_is_one_bounded_line() -> None:
    assert len(failure_reason([FakeDeath("x" * 5000)], "")) == 1000
    assert len(failure_reason([], "y" * 5000)) == 1000


@pytest.mark.parametrize("seed", range(20))
def test_every_cell_ends_exactly_once_whatever_happens(seed: int) -> None:
    """Random outcomes, random order of completion, slots lost along the way: every cell gets one
    ending (Finished, Failed or Stranded), no cell runs on two slots at once, no slot runs two cells."""
    rng = random.Random(seed)
    names = [f"w{i}" for i in range(rng.randint(1, 4))]
    all_cells = cells(rng.randint(0, 25))
    scheduler = CellScheduler(all_cells, names, max_retries=rng.randint(0, 3))
    endings: list[str] = []
    running: dict[str, str] = {}
    for _ in range(10_000):
        if scheduler.done:
            break
        for decision in scheduler.step():
            if isinstance(decision, Stranded):
                endings.append(decision.attempt.cell.cell_id)
                continue
            assert decision.slot not in running and decision.attempt.cell.cell_id not in running.values()
            running[decision.slot] = decision.attempt.cell.cell_id
        if not running:
            continue
        slot = rng.choice(sorted(running))
        cell_id = running.pop(slot)
        outcome = rng.choice([Returned(FakeResult(cell_id)), Returned(FakeResult(cell_id, "failed")),
                              Died(KILLED), Died(OOM), Died(KILLED, worker_lost=rng.random() < 0.2),
                              Raised("the worker failed")])
        decision = scheduler.report(slot, outcome)
        assert decision.attempt.cell.cell_id == cell_id
        if isinstance(decision, (Finished, Failed)):
            endings.append(cell_id)
    assert scheduler.done
    assert sorted(endings) == sorted(c.cell_id for c in all_cells)  # each once: none lost, none doubled


# --- order: longest expected first, and cells pinned to slots ---------------------------------------

def issue_16_sweep() -> dict[str, float]:
    """Issue 16's 18 ResNet-50 cells (fp16/bf16 x b1/32/128 x eager/compile/CUDA graphs), as
    measured on H200s: the 6 compile cells far longer than the 12 others, in the plan's order."""
    seconds = {}
    for precision in ("fp16", "bf16"):
        for batch, scale in ((1, 1.0), (32, 1.3), (128, 1.9)):
            for mode, base in (("eager", 5.5), ("compile", 24.0), ("cudagraphs", 6.5)):
                seconds[f"{precision} b{batch} {mode}"] = base * scale
    return seconds


def makespan(timeline) -> float:
    return max(end for *_, end in timeline)


def best_packing_bound(durations: list[float], slots: int) -> float:
    """A lower bound on any packing's makespan: the longest cell, or the work spread evenly."""
    return max(max(durations), sum(durations) / slots)


def idle_at_end(timeline, slots: list[str]) -> dict[str, float]:
    end = makespan(timeline)
    return {s: end - max((e for _, slot, _, e in timeline if slot == s), default=0.0) for s in slots}


def test_longest_first_packs_issue_16_sweep_within_10_percent_of_the_best() -> None:
    seconds = issue_16_sweep()
    sweep = [FakeCell(name) for name in seconds]
    gpus = ["gpu0", "gpu1", "gpu2", "gpu3"]
    bound = best_packing_bound(list(seconds.values()), len(gpus))
    fifo = simulate(sweep, gpus, lambda cell, slot: seconds[cell.cell_id])
    lpt = simulate(sweep, gpus, lambda cell, slot: seconds[cell.cell_id], expected_s=seconds)
    assert sorted(c.cell_id for c, *_ in lpt) == sorted(seconds)  # every cell once
    assert makespan(lpt) <= 1.10 * bound
    assert makespan(fifo) > 1.10 * bound  # the plan's order: long cells late, slots idle at the end
    assert sum(idle > 0.2 * bound for idle in idle_at_end(fifo, gpus).values()) >= 2
    # longest first: the six compile cells start before any eager cell
    assert all("compile" in c.cell_id for c, *_ in lpt[:6])


def test_without_expected_seconds_cells_start_in_plan_order() -> None:
    scheduler = CellScheduler(cells(3), ["w"], expected_s=None)
    assert starts(scheduler.step()) == [("c0", "w")]


def test_cells_with_equal_expectations_keep_their_order_and_unknown_ones_go_last() -> None:
    scheduler = CellScheduler(cells(4), ["a", "b", "c", "d"], expected_s={"c1": 2.0, "c2": 5.0, "c3": 2.0})
    assert [c for c, _ in starts(scheduler.step())] == ["c2", "c1", "c3", "c0"]


def test_a_retried_cell_goes_first_whatever_its_expectation() -> None:
    scheduler = CellScheduler(cells(2), ["w"], expected_s={"c0": 1.0, "c1": 9.0})
    assert starts(scheduler.step()) == [("c1", "w")]
    scheduler.report("w", Died(KILLED))
    assert starts(scheduler.step()) == [("c1", "w")]


def test_a_slot_takes_the_first_cell_that_fits_it() -> None:
    """Cells pinned to a GPU model ('h100:c0') run only on slots of that model; others anywhere."""
    def fits(cell, slot):
        return ":" not in cell.cell_id or cell.cell_id.split(":")[0] == slot.split("-")[0]

    pinned = [FakeCell("h200:c0"), FakeCell("h200:c1"), FakeCell("any"), FakeCell("h100:c2")]
    scheduler = CellScheduler(pinned, ["h100-0", "h200-0"], fits=fits)
    assert starts(scheduler.step()) == [("any", "h100-0"), ("h200:c0", "h200-0")]
    scheduler.report("h100-0", Returned(FakeResult("any")))
    assert starts(scheduler.step()) == [("h100:c2", "h100-0")]  # skips the h200 cell it cannot run
    scheduler.report("h100-0", Returned(FakeResult("h100:c2")))
    assert scheduler.step() == []  # h200:c1 waits for its own model's slot
    scheduler.report("h200-0", Returned(FakeResult("h200:c0")))
    assert starts(scheduler.step()) == [("h200:c1", "h200-0")]


def test_a_cell_no_slot_fits_is_stranded_at_once_and_the_others_run() -> None:
    scheduler = CellScheduler([FakeCell("a100:c0"), FakeCell("c1")], ["h100-0"],
                              fits=lambda cell, slot: not cell.cell_id.startswith("a100"))
    decisions = scheduler.step()
    assert [type(d) for d in decisions] == [Start, Stranded]
    assert decisions[1].attempt.cell.cell_id == "a100:c0"


def test_a_pinned_cell_whose_slots_are_all_lost_is_stranded() -> None:
    scheduler = CellScheduler([FakeCell("x:c0"), FakeCell("x:c1"), FakeCell("c2")], ["x-0", "y-0"], max_retries=1,
                              fits=lambda cell, slot: ":" not in cell.cell_id or slot.startswith("x"))
    assert starts(scheduler.step()) == [("x:c0", "x-0"), ("c2", "y-0")]
    assert isinstance(scheduler.report("x-0", Died(KILLED, worker_lost=True)), Retry)
    stranded = scheduler.step()
    assert sorted(d.attempt.cell.cell_id for d in stranded if isinstance(d, Stranded)) == ["x:c0", "x:c1"]
    scheduler.report("y-0", Returned(FakeResult("c2")))
    assert scheduler.done
