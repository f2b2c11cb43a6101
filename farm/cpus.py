"""Which CPUs a worker's cells run on and which one a timed loop is kept on.

A node's cores are split between its workers (timing_and_shared_cores): each GPU worker has a few
cores of its own for its timed loops and shares the rest with the others for untimed work. Before
each counted repeat of a device cell the timing thread is kept on the quickest of its own cores
(quickest_cpu), because a virtual machine's vCPUs change speed one by one.
"""

from __future__ import annotations

import math
import os
import time
from pathlib import Path

# the CPUs (as "0-3,8") a worker's timed loops keep to, where a node's cores are split
TIMING_CPUS_VARIABLE = "FARM_TIMING_CPUS"
# quickest_cpu: a quarter of farm.measure's host probe loop, the fastest of 3 runs on each CPU (~1 ms a CPU)
QUICKEST_CPU_LOOP = 5_000
QUICKEST_CPU_RUNS = 3


def timing_and_shared_cores(cores: list[int], index: int, workers: int) -> tuple[list[int], list[int]]:
    """(worker `index`'s own timing cores, the cores every worker shares) of `cores`: each worker
    gets whole physical cores (a timed thread slows when its SMT sibling is busy), a quarter of its
    share of the node's physical cores, one at least, four at most; where that would leave less
    than half the node shared, each worker gets an equal slice of its own and little or nothing is
    shared (measurements first)."""
    groups = _physical_cores(cores)
    if len(groups) < workers:  # fewer physical cores than workers: nothing to split
        return cores, []
    own = max(1, min(4, len(groups) // (4 * workers)))
    if own * workers * 2 > len(groups):
        own = len(groups) // workers
    mine = [c for group in groups[index * own:(index + 1) * own] for c in group]
    shared = [c for group in groups[workers * own:] for c in group]
    return sorted(mine), sorted(shared)


def _physical_cores(cores: list[int]) -> list[list[int]]:
    """`cores` grouped by physical core (SMT siblings together, as Linux's topology lists them),
    in order of their first CPU; each CPU alone where the topology cannot be read."""
    groups: dict[tuple[int, ...], list[int]] = {}
    for cpu in cores:
        try:
            text = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list").read_text()
            key = tuple(sorted(parse_cpu_list(text)))
        except (OSError, ValueError):
            key = (cpu,)
        groups.setdefault(key, []).append(cpu)
    return sorted(groups.values(), key=min)


def pinnable_cpus() -> set[int]:
    """The CPUs the timing thread may be kept on, where there is a choice and the platform lets a
    thread be kept on one (Linux); else none: the worker's own timing cores (TIMING_CPUS_VARIABLE,
    set where a node's cores are split between workers) if given, else every CPU it may run on
    (also where none of those is among them, which farm's own split never gives)."""
    if not hasattr(os, "sched_setaffinity"):
        return set()
    allowed = os.sched_getaffinity(0)
    candidates = (_timing_cpus() & allowed) or allowed
    return candidates if len(candidates) > 1 or candidates != allowed else set()


def untimed_cpus() -> set[int]:
    """This process's CPUs other than its worker's timing CPUs (TIMING_CPUS_VARIABLE): where a
    worker's untimed work (a replacement process warming up) goes while its cell is timed; empty
    where no timing CPUs are set, or nothing else is left."""
    if not hasattr(os, "sched_getaffinity"):
        return set()
    timing = _timing_cpus()
    return os.sched_getaffinity(0) - timing if timing else set()


def _timing_cpus() -> set[int]:
    """The worker's timing CPUs from the environment; none where unset or unreadable."""
    try:
        return parse_cpu_list(os.environ.get(TIMING_CPUS_VARIABLE, ""))
    except ValueError:
        return set()


def parse_cpu_list(text: str) -> set[int]:
    """'0-3,8' -> {0, 1, 2, 3, 8} (CPU lists as Linux's /sys and taskset write them)."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        if part:
            first, _, last = part.partition("-")
            cpus.update(range(int(first), int(last or first) + 1))
    return cpus


def quickest_cpu(cpus: set[int]) -> int:
    """Keep the calling thread on the CPU of `cpus` where a short fixed loop runs fastest now, and
    return it. A virtual machine's vCPUs change speed one by one (an H200 host's: 1.0 or 1.6-1.8 ms
    for farm.measure.HOST_PROBE_LOOP, in spells of 0.5-9 s, about a third of the time slow, each vCPU on its own),
    so a host-bound query timed on a vCPU in a slow spell is that much slower; the thread moves only
    here, between repeats, never inside one."""
    best, best_ms = min(cpus), math.inf
    for cpu in sorted(cpus):
        os.sched_setaffinity(0, {cpu})
        ms = min(loop_ms(QUICKEST_CPU_LOOP) for _ in range(QUICKEST_CPU_RUNS))
        if ms < best_ms:
            best, best_ms = cpu, ms
    os.sched_setaffinity(0, {best})
    return best


def loop_ms(iterations: int) -> float:
    """Milliseconds this thread takes for a fixed pure-Python loop of `iterations` multiply-adds."""
    clock = time.perf_counter
    begin = clock()
    total = 0
    for i in range(iterations):
        total += i * i
    return (clock() - begin) * 1e3


def cpu_list(cores: list[int]) -> str:
    """[0, 1, 2, 3, 8] -> '0-3,8' (as taskset and /proc print CPU lists)."""
    runs: list[list[int]] = []
    for core in sorted(cores):
        if runs and runs[-1][1] == core - 1:
            runs[-1][1] = core
        else:
            runs.append([core, core])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


# --- what else the host was doing while a cell was timed -------------------------------------------

def host_snapshot() -> tuple:
    """The host's and this process's CPU times now (`host_contention` takes the difference)."""
    import psutil

    return psutil.cpu_times(), psutil.Process().cpu_times(), time.monotonic()


def host_contention(before: tuple) -> dict[str, float | None]:
    """What the host did besides this process since `before` (host_snapshot): `cpu_others_percent`,
    the share of the whole machine's CPU time other processes used (this process's threads, the
    engine's included, left out); `cpu_steal_percent`, the share a virtual machine's hypervisor gave
    to other guests (None where the system does not say); `host_load_per_cpu`, the 1-minute load
    average over the CPU count (this process counted)."""
    import psutil

    host_before, own_before, _ = before
    host_now, own_now = psutil.cpu_times(), psutil.Process().cpu_times()
    total = _total(host_now) - _total(host_before)
    idle = sum(getattr(host_now, f, 0.0) - getattr(host_before, f, 0.0) for f in ("idle", "iowait"))
    steal = (host_now.steal - host_before.steal) if hasattr(host_now, "steal") else None
    own = (own_now.user + own_now.system) - (own_before.user + own_before.system)
    found: dict[str, float | None] = {"cpu_others_percent": None, "cpu_steal_percent": None,
                                      "host_load_per_cpu": os.getloadavg()[0] / (os.cpu_count() or 1)}
    if total > 0:
        others = max(0.0, total - idle - (steal or 0.0) - own)
        found["cpu_others_percent"] = 100.0 * others / total
        found["cpu_steal_percent"] = 100.0 * steal / total if steal is not None else None
    return found


def _total(times) -> float:
    """All of a `psutil.cpu_times()`: on Linux its guest times are inside user and nice already."""
    return sum(times) - getattr(times, "guest", 0.0) - getattr(times, "guest_nice", 0.0)
