"""Executors turn cells into results. Measurements never share a device.

`local` runs cells one after another in this process (debugging, and machines without Ray).
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from farm.callbacks import Callback
from farm.plan import Cell

EXECUTORS = ("local",)


class Executor(Protocol):
    def run(self, cells: list[Cell], cache_dir: Path, callbacks: Callback) -> None:
        """Run every cell and report each result through `callbacks.on_cell_result`."""


def make_executor(name: str) -> Executor:
    if name == "local":
        from farm.executor.local import LocalExecutor

        return LocalExecutor()
    raise ValueError(f"unknown executor {name!r}; known: {', '.join(EXECUTORS)}")
