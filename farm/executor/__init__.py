"""Executors turn cells into results. Measurements never share a device.

`ray` (the default) runs them on Ray actors, one per GPU and one per node for CPU cells;
`local` runs them one after another in this process (debugging).
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from farm.callbacks import Callback
from farm.plan import Cell

EXECUTORS = ("ray", "local")


class Executor(Protocol):
    def run(self, cells: list[Cell], cache_dir: Path, callbacks: Callback) -> None:
        """Run every cell and report each result through `callbacks.on_cell_result`."""


def make_executor(name: str, address: str | None = None, max_retries: int = 2,
                  gpus: int | None = None) -> Executor:
    if name == "ray":
        from farm.executor.ray_farm import RayExecutor

        return RayExecutor(address=address, max_retries=max_retries, gpus=gpus)
    if name == "local":
        from farm.executor.local import LocalExecutor

        return LocalExecutor()
    raise ValueError(f"unknown executor {name!r}; known: {', '.join(EXECUTORS)}")
