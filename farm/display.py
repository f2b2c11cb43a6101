"""What a person sees: a progress bar while a sweep runs, and tables of results."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from farm.callbacks import Callback

if TYPE_CHECKING:
    from farm.records import Cell, CellResult

STATUS_STYLE = {"ok": "green", "failed": "red", "skipped": "yellow", "unsupported": "dim"}


class ProgressDisplay(Callback):
    """Cells done/total, the current cell and an ETA; one line per finished cell."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.progress = Progress(
            SpinnerColumn(), TextColumn("{task.description}", style="bold"), BarColumn(),
            MofNCompleteColumn(), TextColumn("cells"), TimeElapsedColumn(), TextColumn("ETA"),
            TimeRemainingColumn(), console=console, transient=True,
        )
        self.task = None

    def on_sweep_start(self, cells: list[Cell]) -> None:
        self.progress.start()
        self.task = self.progress.add_task("starting", total=len(cells))

    def on_cell_start(self, cell: Cell, worker: dict[str, Any] | None = None) -> None:
        self.progress.update(self.task, description=cell.label)

    def on_cell_log(self, cell: Cell, message: str) -> None:
        self.console.print(f"[dim]{cell.cell_id[:8]}[/dim] {message}", highlight=False)

    def on_cell_result(self, cell: Cell, result: CellResult) -> None:
        style = STATUS_STYLE.get(result.status, "")
        text = f"[{style}]{result.status:<11}[/{style}] {cell.label}"
        if result.status == "ok" and result.measurement:
            m = result.measurement
            text += (f"  {fmt(m['throughput_qps'])} qps  p50 {fmt(m['latency_median_ms'])} ms"
                     f"  p99 {fmt(m['latency_p99_ms'])} ms")
        elif result.reason:
            text += f"  [dim]{result.reason}[/dim]"
        self.console.print(text, highlight=False)
        self.progress.advance(self.task)

    def on_sweep_end(self) -> None:
        self.progress.stop()


def fmt(value: Any, digits: int = 4) -> str:
    """Numbers to a fixed count of significant digits; blanks for missing values."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if value == 0:
            return "0"
        magnitude = int(math.floor(math.log10(abs(value))))
        decimals = max(digits - 1 - magnitude, 0)
        return f"{value:,.{decimals}f}"
    return str(value)


def render_table(columns: Sequence[str], rows: Sequence[Sequence[Any]], title: str | None = None) -> Table:
    table = Table(title=title, show_lines=False, header_style="bold")
    for name in columns:
        numeric = any(isinstance(r[columns.index(name)], (int, float)) and not isinstance(
            r[columns.index(name)], bool) for r in rows)
        table.add_column(name, justify="right" if numeric else "left", overflow="fold")
    for row in rows:
        table.add_row(*[_cell_text(name, v) for name, v in zip(columns, row)])
    return table


def _cell_text(column: str, value: Any) -> str:
    if column == "status" and value in STATUS_STYLE:
        return f"[{STATUS_STYLE[value]}]{value}[/{STATUS_STYLE[value]}]"
    return fmt(value)
