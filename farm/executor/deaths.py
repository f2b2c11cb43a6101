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

# Ray's memory monitor's words for a worker it stopped: the worker's pid and memory ("pid=548,
# memory used=12.18GB"; Ray 2.4x and later "actual memory used") and the node's ("was 21.91GB /
# 33.28GB (0.658192)"; Ray 2.60 "was 2.35GB used / 23.54GB limit (0.099830)"), in either order;
# Ray 2.60 may leave the worker's out
_RAY_WORKER_MEMORY = re.compile(r"pid=\d+, (?:actual )?memory used=(?P<worker>[\d.]+)GB")
_RAY_NODE_MEMORY = re.compile(r"was (?P<used>[\d.]+)GB(?: used)? / (?P<total>[\d.]+)GB")
LOW_MEMORY_WORDS = ("memory monitor", "OutOfMemoryError", "low on memory")  # Ray's, for its monitor's kills
# A worker stopped by it while using under this share of its own memory limit (--worker-memory)
# was stopped for the node's trouble (other programs), not for the cell's growth
NODE_PRESSURE_SHARE = 0.5


def actor_death(exc: BaseException, worker_limit_bytes: int | None = None) -> CellDeath:
    """Ray's account of an actor's death, as one line. Stopped by Ray's memory monitor: the node's
    trouble (retried) where the worker used under NODE_PRESSURE_SHARE of its limit, else the cell's
    growth (not retried: it would grow as far again)."""
    text = str(exc)
    if any(words in text for words in LOW_MEMORY_WORDS):
        worker, node = _RAY_WORKER_MEMORY.search(text), _RAY_NODE_MEMORY.search(text)
        limit = NODE_PRESSURE_SHARE * (worker_limit_bytes or math.inf)
        # the worker's own memory where Ray says it; else the whole node's in use, which bounds it
        used_gb = worker["worker"] if worker else node["used"] if node else None
        if used_gb is not None and float(used_gb) * 1e9 < limit:
            node_text = f" ({node['used']} of {node['total']} GB in use)" if node else ""
            own = f"which used {worker['worker']} GB" if worker else "far under its memory limit"
            return CellDeath(f"the node ran low on memory{node_text} and Ray's memory monitor stopped this cell's "
                             f"worker, {own}: the node's trouble (other programs), not the cell's", node_memory=True)
        return CellDeath("out of memory: Ray's memory monitor killed the worker (the node ran low on memory); "
                         "lower --worker-memory or the batch size", out_of_memory=True, retry=False)
    return CellDeath(f"the worker actor died ({first_line(exc)[:300]})", signal="actor died")


NODE_MEMORY_WAIT_S = 120  # how long a retry after the node ran low on memory waits for it to recover


def node_memory_threshold() -> float:
    """The share of this node's memory a retry waits to be under: Ray's memory monitor's threshold
    (RAY_memory_usage_threshold, 0.95 by default) less 0.05."""
    import os

    return float(os.environ.get("RAY_memory_usage_threshold", "0.95")) - 0.05


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
