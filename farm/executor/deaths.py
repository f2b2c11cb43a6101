"""How a Ray actor running a cell died, in farm's words (farm.executor.cell_process.CellDeath), and
what a retry after the node's own trouble waits for. Ray's memory monitor stops workers when the
whole node runs low on memory, whoever filled it: a worker far under its own limit was stopped for
the node's trouble (other programs), and its cell is retried once memory is back; one near its
limit grew, and would grow as far again."""

from __future__ import annotations

import math
import re
import time

from farm.errors import first_line
from farm.executor.cell_process import CellDeath

# Ray's memory monitor's words for a worker it stopped: its pid and memory, then the node's
# ("... pid=548, memory used=12.18GB) was running was 21.91GB / 33.28GB (0.658192) ..."; newer
# Rays say "actual memory used")
_RAY_OOM = re.compile(r"pid=\d+, (?:actual )?memory used=(?P<worker>[\d.]+)GB.*?was (?P<used>[\d.]+)GB / "
                      r"(?P<total>[\d.]+)GB", re.DOTALL)
# A worker stopped by it while using under this share of its own memory limit (--worker-memory)
# was stopped for the node's trouble (other programs), not for the cell's growth
NODE_PRESSURE_SHARE = 0.5


def actor_death(exc: BaseException, worker_limit_bytes: int | None = None) -> CellDeath:
    """Ray's account of an actor's death, as one line. Stopped by Ray's memory monitor: the node's
    trouble (retried) where the worker used under NODE_PRESSURE_SHARE of its limit, else the cell's
    growth (not retried: it would grow as far again)."""
    text = str(exc)
    if "memory monitor" in text or "OutOfMemoryError" in text or "low on memory" in text:
        found = _RAY_OOM.search(text)
        if found and float(found["worker"]) * 1e9 < NODE_PRESSURE_SHARE * (worker_limit_bytes or math.inf):
            return CellDeath(f"the node ran low on memory ({found['used']} of {found['total']} GB in use) and Ray's "
                             f"memory monitor stopped this cell's worker, which used {found['worker']} GB: the "
                             "node's trouble (other programs), not the cell's", node_memory=True)
        return CellDeath("out of memory: Ray's memory monitor killed the worker (the node ran low on memory); "
                         "lower --worker-memory or the batch size", out_of_memory=True, retry=False)
    return CellDeath(f"the worker actor died ({first_line(exc)[:300]})", signal="actor died")


NODE_MEMORY_WAIT_S = 120  # how long a retry after the node ran low on memory waits for it to recover


def await_node_memory(threshold: float, timeout_s: float = NODE_MEMORY_WAIT_S, poll_s: float = 1.0) -> bool:
    """Wait until this node's memory in use is under `threshold` (a share, e.g. Ray's 0.95 less a
    margin) or `timeout_s` passes; whether it recovered."""
    import psutil

    deadline = time.monotonic() + timeout_s
    while psutil.virtual_memory().percent / 100 >= threshold:
        if time.monotonic() >= deadline:
            return False
        time.sleep(poll_s)
    return True
