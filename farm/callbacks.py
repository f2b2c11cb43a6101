"""Side outputs of a sweep (warehouse writer, progress display) as callbacks with no-op defaults."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from farm.records import Cell, CellResult


class Callback:
    """Override what you need; the executor calls these in the driver process, in order."""

    def on_sweep_start(self, cells: list[Cell]) -> None:
        pass

    def on_cell_start(self, cell: Cell, worker: dict[str, Any] | None = None) -> None:
        """`worker` describes the executor worker the cell was handed to (pid, host, GPUs)."""

    def on_cell_log(self, cell: Cell, message: str) -> None:
        pass

    def on_cell_result(self, cell: Cell, result: CellResult) -> None:
        pass

    def on_sweep_end(self) -> None:
        pass


class CallbackList(Callback):
    """Fans each event out to several callbacks."""

    def __init__(self, callbacks: list[Callback]) -> None:
        self.callbacks = callbacks

    def on_sweep_start(self, cells: list[Cell]) -> None:
        for cb in self.callbacks:
            cb.on_sweep_start(cells)

    def on_cell_start(self, cell: Cell, worker: dict[str, Any] | None = None) -> None:
        for cb in self.callbacks:
            cb.on_cell_start(cell, worker)

    def on_cell_log(self, cell: Cell, message: str) -> None:
        for cb in self.callbacks:
            cb.on_cell_log(cell, message)

    def on_cell_result(self, cell: Cell, result: CellResult) -> None:
        for cb in self.callbacks:
            cb.on_cell_result(cell, result)

    def on_sweep_end(self) -> None:
        for cb in self.callbacks:
            cb.on_sweep_end()
