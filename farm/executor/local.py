"""Run cells one by one in this process: one device, no isolation, easiest to debug."""

from __future__ import annotations

from pathlib import Path

from farm.callbacks import Callback
from farm.plan import Cell
from farm.worker import run_cell


class LocalExecutor:
    def run(self, cells: list[Cell], cache_dir: Path, callbacks: Callback) -> None:
        for cell in cells:
            callbacks.on_cell_start(cell)
            callbacks.on_cell_result(cell, run_cell(cell, cache_dir))
