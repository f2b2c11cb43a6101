"""How a node's cores are split between its workers, and which CPU a timed loop is kept on."""

from __future__ import annotations

import os

import pytest

import farm.cpus
from farm.cpus import cpu_list, parse_cpu_list, quickest_cpu, timing_and_shared_cores
from tests.conftest import needs_two_cpus


@pytest.mark.parametrize("cores, workers, own", [(32, 2, 4), (16, 2, 2), (64, 4, 4), (128, 8, 4), (8, 2, 1)])
def test_each_worker_has_timing_cores_of_its_own_and_shares_the_rest(cores: int, workers: int, own: int) -> None:
    """The timing cores of the workers are disjoint, none of them is shared, every core is someone's,
    and at least half the node is left for untimed work (compiles, builds) that every worker may use."""
    node = list(range(1000, 1000 + cores))  # CPUs with no topology here: each its own physical core
    splits = [timing_and_shared_cores(node, i, workers) for i in range(workers)]
    timing = [set(t) for t, _ in splits]
    shared = {tuple(s) for _, s in splits}
    assert len(shared) == 1 and all(len(t) == own for t in timing)
    assert sum(len(t) for t in timing) == len(set().union(*timing))  # disjoint
    (common,) = shared
    assert not set(common) & set().union(*timing)
    assert sorted(set(common).union(*timing)) == node and len(common) >= cores / 2


def test_a_node_with_few_cores_gives_each_worker_a_slice_of_its_own() -> None:
    """Too few cores to keep half shared: equal slices, nothing shared (measurements first); fewer
    cores than workers: nothing to split."""
    assert [timing_and_shared_cores([1000, 1001], i, 2) for i in range(2)] == [([1000], []), ([1001], [])]
    assert timing_and_shared_cores([1000], 1, 2) == ([1000], [])


def test_smt_siblings_go_together(monkeypatch) -> None:
    """A physical core's two hardware threads are one unit: a worker's timing thread is never on a
    CPU whose sibling compiles for another worker."""
    siblings = {c: f"{c % 16},{c % 16 + 16}" for c in range(32)}  # Linux's numbering: c and c+16
    real_path = farm.cpus.Path

    class Topology(type(real_path())):
        def read_text(self, *args, **kwargs) -> str:
            return siblings[int(self.parts[-3].removeprefix("cpu"))] + "\n"

    monkeypatch.setattr(farm.cpus, "Path", Topology)
    timing, shared = timing_and_shared_cores(list(range(32)), 1, 2)
    assert timing == [2, 3, 18, 19] and not {c % 16 for c in timing} & {c % 16 for c in shared}


def test_cpu_lists_read_and_write_as_linux_does() -> None:
    assert parse_cpu_list("0-3,8\n") == {0, 1, 2, 3, 8} and parse_cpu_list("") == set()
    assert cpu_list([8, 0, 1, 2, 3]) == "0-3,8"
    with pytest.raises(ValueError):
        parse_cpu_list("zero")


@needs_two_cpus
def test_the_quickest_cpu_is_the_one_where_the_loop_ran_fastest(monkeypatch) -> None:
    """A vCPU in a slow spell (its loop 1.6x slower, as on a GPU host's hypervisor) is not chosen:
    the thread really moves to each CPU to time it, and stays on the quickest. A slow spell cannot be
    made on demand, so the loop's time is read from the CPU the thread is on: slow on the first."""
    allowed = set(os.sched_getaffinity(0))
    slow = min(allowed)

    def loop_ms(iterations: int) -> float:
        here = os.sched_getaffinity(0)
        assert len(here) == 1  # timed on one CPU at a time
        return 1.6 if here == {slow} else 1.0

    monkeypatch.setattr(farm.cpus, "loop_ms", loop_ms)
    try:
        chosen = quickest_cpu(allowed)
        assert chosen != slow and os.sched_getaffinity(0) == {chosen}
    finally:
        os.sched_setaffinity(0, allowed)


@needs_two_cpus
def test_the_timing_thread_keeps_to_the_workers_timing_cpus_and_untimed_work_to_the_rest(monkeypatch) -> None:
    """With timing CPUs set, the timing thread chooses among them and a replacement warms up on the
    others; unset, unreadable or outside this process's CPUs, the thread chooses among all and
    nothing is kept off."""
    allowed = os.sched_getaffinity(0)
    own = max(allowed)
    monkeypatch.setenv(farm.cpus.TIMING_CPUS_VARIABLE, str(own))
    assert farm.cpus.pinnable_cpus() == {own} and farm.cpus.untimed_cpus() == allowed - {own}
    for value in ("", "zero", str(max(allowed) + 4096)):
        monkeypatch.setenv(farm.cpus.TIMING_CPUS_VARIABLE, value)
        assert farm.cpus.pinnable_cpus() == allowed, value
        assert farm.cpus.untimed_cpus() == (allowed if value.isdigit() else set()), value
