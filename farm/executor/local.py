"""Run cells one by one in this process: one device, no isolation, easiest to debug."""

from __future__ import annotations

from pathlib import Path

from farm.cell_runner import run_cell
from farm.executor import CellEvents
from farm.executor.library_logs import cell_log, keep
from farm.records import Cell


class LocalExecutor:
    """No scheduler needed: one slot, and no retries (a cell that kills this process ends the sweep)."""

    expected_s: dict[str, float] | None = None  # the plan's order is kept

    def start_gpu_workers(self) -> None:
        """Nothing to start: cells run in this process."""

    def close(self) -> None:
        """Nothing to stop."""

    def run(self, cells: list[Cell], cache_dir: Path, callbacks: CellEvents) -> None:
        for cell in cells:
            callbacks.on_cell_start(cell)
            with cell_log() as log:  # libraries' records and warnings: the cell's log, not the terminal
                result = run_cell(cell, cache_dir)
            callbacks.on_cell_result(cell, keep(result, log.getvalue(), cache_dir))
