"""Executors turn cells into results. Measurements never share a device.

`ray` (the default) runs them on Ray actors, one per GPU and one per node for CPU cells, each
actor running its cells in a child process under a memory limit (cell_process.py); `local`
runs them one after another in this process (debugging: no isolation, no memory limit).
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from farm.errors import UserError
from farm.records import Cell

if TYPE_CHECKING:
    from farm.records import CellResult

EXECUTORS = ("ray", "local")
DEFAULT_WORKER_MEMORY = "80%"
DEFAULT_CELL_TIMEOUT_S = 3 * 3600.0  # a TensorRT build at the highest optimization level can take an hour
MIN_WORKER_MEMORY = 256 * 2**20  # a cell process alone takes about 100 MiB
_UNITS = {"b": 1, "k": 1e3, "kb": 1e3, "kib": 2**10, "m": 1e6, "mb": 1e6, "mib": 2**20,
          "g": 1e9, "gb": 1e9, "gib": 2**30, "t": 1e12, "tb": 1e12, "tib": 2**40}


@dataclasses.dataclass(frozen=True)
class MemoryLimit:
    """How much memory a worker's cell may use: a share of its node's memory, or a fixed size.

    A share is divided between the workers that run at once on that node (e.g. 80 % of a
    node's memory over its 4 GPU workers: 20 % each)."""

    fraction: float | None = None  # of the node's total memory, before dividing between its workers
    size_bytes: int | None = None

    def for_worker(self, node_total_bytes: int, workers_on_node: int) -> int | None:
        if self.size_bytes is not None:
            return self.size_bytes
        if self.fraction is not None:
            return int(self.fraction * node_total_bytes / max(1, workers_on_node))
        return None


def parse_memory_limit(text: str) -> MemoryLimit:
    """'80%' (of the node's memory, shared by its workers), '12GiB', '512MB', or 'none'."""
    value = text.strip().lower()
    if value in ("none", "off", "0"):
        return MemoryLimit()
    percent = re.fullmatch(r"(\d+(?:\.\d+)?)\s*%", value)
    if percent and 0 < float(percent.group(1)) <= 100:
        return MemoryLimit(fraction=float(percent.group(1)) / 100)
    size = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([a-z]*)", value)
    if size and size.group(2) in _UNITS:
        limit = int(float(size.group(1)) * _UNITS[size.group(2)])
        if limit >= MIN_WORKER_MEMORY:
            return MemoryLimit(size_bytes=limit)
        raise UserError(f"--worker-memory {text!r}: too small for a cell (a cell process alone takes about "
                        f"100 MiB): give at least 256MiB, a share such as 80%, or none")
    raise UserError(f"--worker-memory {text!r}: give a share of the node's memory such as 80%, a size with its unit "
                    "such as 12GiB or 512MB, or none")


class CellEvents(Protocol):
    """What an executor tells the driver (farm.callbacks.Callback is one), in the driver process."""

    def on_cell_start(self, cell: Cell, worker: dict[str, Any] | None = None) -> None: ...

    def on_cell_log(self, cell: Cell, message: str) -> None: ...

    def on_cell_result(self, cell: Cell, result: CellResult) -> None: ...


class Executor(Protocol):
    expected_s: dict[str, float] | None  # each cell id's expected seconds, for the order cells start in

    def start_gpu_workers(self) -> None:
        """Start what runs GPU cells before the cells are known (nothing, where nothing needs starting)."""

    def run(self, cells: list[Cell], cache_dir: Path, callbacks: CellEvents) -> None:
        """Run every cell and report each result through `callbacks.on_cell_result`; then close()."""

    def close(self) -> None:
        """Stop whatever start_gpu_workers or run started and still runs. Idempotent."""


def make_executor(name: str, address: str | None = None, max_retries: int = 2,
                  gpus: int | None = None, worker_memory: str = DEFAULT_WORKER_MEMORY,
                  cell_timeout_s: float | None = DEFAULT_CELL_TIMEOUT_S,
                  expected_s: dict[str, float] | None = None) -> Executor:
    """`expected_s`: each cell id's expected seconds (farm.executor.costs), for the order cells
    start in (longest first); None: the plan's order."""
    if name == "ray":
        from farm.executor.ray_farm import RayExecutor

        return RayExecutor(address=address, max_retries=max_retries, gpus=gpus,
                           memory_limit=parse_memory_limit(worker_memory), cell_timeout_s=cell_timeout_s,
                           expected_s=expected_s)
    if name == "local":
        from farm.executor.local import LocalExecutor

        return LocalExecutor()
    raise ValueError(f"unknown executor {name!r}; known: {', '.join(EXECUTORS)}")
