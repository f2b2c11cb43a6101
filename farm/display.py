"""What a person sees: a progress bar while a sweep runs, and tables of results."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from rich import box
from rich.console import Console
from rich.markup import escape
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
from rich.text import Text

from farm.callbacks import Callback
from farm.queries import option_labels, with_scenario

if TYPE_CHECKING:
    from farm.records import Cell, CellResult

STATUS_STYLE = {"ok": "green", "failed": "red", "skipped": "yellow", "unsupported": "dim"}
NOT_RUN = ("skipped", "unsupported")
# A speedup's mark: farm compare's verdict on the two median latencies (farm.compare.stats), so a
# ratio inside the noise never reads as a result. Decided changes carry "x"; the legend says the rest.
SPEEDUP_MARKS = {"faster": "x", "slower": "x", "within noise": " ~", "inconclusive": " ?", "not judged": " ·"}
SPEEDUP_LEGEND = "speedup marks (farm compare's rule, ±3 %): x a change, ~ within noise, ? inconclusive, · not judged"
# what a reader of a "?" needs: why it is not a verdict, and what would make it one
INCONCLUSIVE_ADVICE = ("?: the two medians' 95 % intervals leave the change undecided (their repeats or queries "
                       "spread too much); more repeats ([measurement] repeats, min_duration_ms) or a quieter "
                       "machine narrow them, and farm compare BASE NEW gives each interval")


def backend_labels(cells: Sequence[Cell]) -> dict[str, str]:
    """Per cell id, its backend with the options that vary between the plan's cells of that
    backend (`onnxruntime device=cuda`), and its scenario where those vary (`onnxruntime
    scenario=server delay=2ms`), so two rows that differ only there can be told apart."""
    labels = option_labels([(c.backend, with_scenario(c.options, c.serving and c.serving.label)) for c in cells],
                           precisions=[c.precision for c in cells])
    return {cell.cell_id: label for cell, label in zip(cells, labels)}


def cell_labels(cells: Sequence[Cell]) -> dict[str, str]:
    """Per cell id, its label with the backend named as backend_labels names it: the progress
    lines, the end table and the failed cells' list tell `mode=eager` from `mode=cudagraphs`."""
    engines = backend_labels(cells)
    return {cell.cell_id: cell.named(engines[cell.cell_id]) for cell in cells}


class ProgressDisplay(Callback):
    """Cells done/total, the current cell and an ETA; one line per finished cell. A cell that was
    not run (skipped, unsupported) leaves the count instead of advancing it, so the ETA is that of
    the cells measured; a reason already printed is named by its first cell instead of repeated."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.said: dict[str, str] = {}  # reason -> the first cell printed with it
        self.labels: dict[str, str] = {}  # cell id -> its label, the options it differs in included
        self.progress = Progress(
            SpinnerColumn(), TextColumn("{task.description}", style="bold"), BarColumn(),
            MofNCompleteColumn(), TextColumn("cells"), TimeElapsedColumn(), TextColumn("ETA"),
            TimeRemainingColumn(), console=console, transient=True,
        )
        self.task = None

    def on_sweep_start(self, cells: list[Cell]) -> None:
        self.labels = cell_labels(cells)
        self.progress.start()
        self.task = self.progress.add_task("starting", total=len(cells))

    def on_cell_start(self, cell: Cell, worker: dict[str, Any] | None = None) -> None:
        self.progress.update(self.task, description=shown(self.labels.get(cell.cell_id, cell.label)))

    def on_cell_log(self, cell: Cell, message: str) -> None:
        self.console.print(f"[dim]{cell.cell_id[:8]}[/dim] {shown(message)}", highlight=False)

    def on_cell_result(self, cell: Cell, result: CellResult) -> None:
        style = STATUS_STYLE.get(result.status, "")
        text = f"[{style}]{result.status:<11}[/{style}] {shown(self.labels.get(cell.cell_id, cell.label))}"
        if result.status == "ok" and result.measurement:
            m = result.measurement
            text += (f"  {fmt(m['throughput_qps'])} qps  p50 {fmt(m['latency_median_ms'])} ms"
                     f"  p99 {fmt(m['latency_p99_ms'])} ms")
        elif result.reason:
            first = self.said.setdefault(result.reason, cell.cell_id)
            text += f"  [dim]{shown(capped(result.reason)) if first == cell.cell_id else f'as {first[:8]}'}[/dim]"
        self.console.print(text, highlight=False)
        if result.status in NOT_RUN and result.measurement is None:  # nothing measured: not in the ETA's pace
            task = self.progress.tasks[self.task]
            self.progress.update(self.task, total=max((task.total or 1) - 1, task.completed))
        else:
            self.progress.advance(self.task)

    def on_sweep_end(self) -> None:
        self.progress.stop()


CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """`text` with its control characters written out (ESC as `\\x1b`): a model's name or an
    engine's message cannot move the cursor, retitle or recolour the terminal it is printed to."""
    return CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def footnoted(rows: list[tuple], column: int) -> tuple[list[tuple], list[str]]:
    """`rows` with the note in `column` replaced by a footnote mark ('[2]'), and the notes in the
    order first seen: a note shared by many rows (a backend's five-line reason) is printed once. A
    row's notes may be several (a list: farm.queries.cell_notes), each numbered on its own ('[1,3]'),
    so that one sentence shared by cells whose other notes differ is still printed once."""
    notes: dict[str, int] = {}
    marked = []
    for row in rows:
        parts = row[column] if isinstance(row[column], (list, tuple)) else [row[column]]
        numbers = [notes.setdefault(part, len(notes) + 1) for part in dict.fromkeys(p for p in parts if p)]
        if numbers:
            row = (*row[:column], f"[{','.join(map(str, numbers))}]", *row[column + 1:])
        elif parts != [row[column]]:
            row = (*row[:column], None, *row[column + 1:])
        marked.append(row)
    return marked, list(notes)


NOTE_CHARACTERS = 2000  # a note past this (an engine's 20 MB error message) is cut where it is printed


def capped(text: str, limit: int = NOTE_CHARACTERS) -> str:
    """`text`, or its first `limit` characters and how many more there are (the warehouse keeps it whole)."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text) - limit:,} more characters: farm query reads the whole text)"


def shown(text: Any) -> str:
    """Text from the data for a rich markup string: printable, and its brackets never markup."""
    return escape(printable(str(text)))


def stable_text(stable: Any, spread_percent: Any) -> str | None:
    """A cell's `stable` as the tables print it: 'yes', or 'no' with how far apart its repeats'
    medians were ('no, 12 %'), which an unstable figure's reader needs; blank where unknown."""
    if stable is None:
        return None
    if stable or spread_percent is None or (isinstance(spread_percent, float) and math.isnan(spread_percent)):
        return "yes" if stable else "no"
    return f"no, {spread_percent:.0f} %"


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


def speedup_text(ratio: float, verdict: str) -> str:
    """A speedup with its verdict's mark: '1.511x', '1.02 ~', '1.51 ?'."""
    return f"{fmt(ratio, 3)}{SPEEDUP_MARKS.get(verdict, ' ·')}"


def fitted_table(columns: Sequence[str], rows: Sequence[Sequence[Any]], width: int | None,
                 drop_order: Sequence[str] = (), title: str | None = None) -> tuple[Table, list[str]]:
    """`render_table` of `rows` narrow enough for `width` characters (None: no limit), no word ever
    split: the columns of `drop_order` are left out, first first, until it fits; past that, text
    columns are cut with an ellipsis when printed (numbers never are). Returns the table and the
    names of the columns left out, for the caller to say how to see them."""
    keep = list(range(len(columns)))
    hidden: list[str] = []
    measure = Console(width=1 << 20).measure
    droppable = [columns.index(name) for name in drop_order if name in columns]
    while True:
        table = render_table([columns[i] for i in keep], [[row[i] for i in keep] for row in rows], title)
        if width is None or measure(table).maximum <= width or not droppable:
            return table, hidden
        gone = droppable.pop(0)
        keep.remove(gone)
        hidden.append(columns[gone])


def render_table(columns: Sequence[str], rows: Sequence[Sequence[Any]], title: str | None = None) -> Table:
    """Rows as a light table (a rule under the header, no boxes): numbers right-aligned at their full
    width, texts on one line, cut with an ellipsis where the terminal is too narrow (never folded
    inside a word)."""
    table = Table(title=title, box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1, 0, 0),
                  header_style="bold")
    texts = [[_cell_text(name, v) for name, v in zip(columns, row)] for row in rows]
    for index, name in enumerate(columns):
        numeric = any(isinstance(r[index], (int, float)) and not isinstance(r[index], bool) for r in rows)
        widest = max([len(name)] + [len(Text.from_markup(r[index])) for r in texts])
        table.add_column(name, justify="right" if numeric else "left", no_wrap=True, overflow="ellipsis",
                         min_width=widest if numeric else min(widest, max(len(name), 8)))
    for row in texts:
        table.add_row(*row)
    return table


def _cell_text(column: str, value: Any) -> str:
    if column == "status" and value in STATUS_STYLE:
        return f"[{STATUS_STYLE[value]}]{value}[/{STATUS_STYLE[value]}]"
    return shown(fmt(value))  # a model named "[b]x" is shown as such, not as markup
