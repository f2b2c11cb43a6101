"""`farm show SWEEP`: the cells of one sweep with their figures, notes once below the table."""

from __future__ import annotations

import argparse
import sys
import textwrap

from farm.cli.common import (
    PLAIN_TABLE_ROWS,
    AddCommand,
    connect,
    print_plain_table,
    print_records,
    print_rows,
    require_sweep,
    table_width,
)
from farm.display import footnoted, printable, stable_text
from farm.errors import UserError
from farm.queries import joined_notes, option_labels, serving_answers, sweep_cells, with_scenario

# What the table shows by default: what tells the cells apart and the figures a reader compares;
# --wide adds the rest. Where the terminal is too narrow, DROP_ORDER's columns go first.
DEFAULT_COLUMNS = ("cell", "model", "backend", "precision", "batch", "profile", "status", "p50 ms", "samples/s",
                   "stable", "accuracy", "note")
DROP_ORDER = ("profile", "stable", "cell", "samples/s", "accuracy")
SHORT_HEADERS = {"precision": "prec"}  # in the terminal's table only; --columns and --sort take either


def add(add: AddCommand) -> None:
    """The `show` subparser (`add` gives it --results)."""
    p = add("show", "Show the cells of one sweep with their figures.")
    p.add_argument("sweep", help="sweep name (see `farm ls`)")
    p.add_argument("--format", choices=["table", "csv", "json", "markdown"], default="table", help="output format")
    p.add_argument("--wide", action="store_true",
                   help="every column (qps, p99, its tail, cv %%, throttled, build time, layer coverage), as a "
                        "record per cell where the terminal cannot hold them side by side; csv and json always have them")
    p.add_argument("--columns", help="these columns, comma-separated, in this order (e.g. model,backend,p99 ms)")
    p.add_argument("--sort", metavar="COLUMN", help="rows ordered by this column (default: model, backend, "
                                                    "precision, batch); numbers and texts alike, blanks last")
    p.add_argument("--reverse", action="store_true", help="with --sort: largest first")
    p.add_argument("--all", action="store_true",
                   help="also the cells of earlier plans of this sweep (before its sweep file changed)")


def run(args: argparse.Namespace) -> int:
    require_sweep(args.results, args.sweep)
    warehouse, con = connect(args.results)
    plan = None if args.all else warehouse.latest_plan(args.sweep)
    columns, rows = _fetch(warehouse, con, args.sweep, plan)
    at = columns.index("note")  # a list of notes: a table footnotes each once; other formats join them
    rows = [(*r[:at], r[at] if args.format == "table" else joined_notes(r[at]), *r[at + 1:]) for r in rows]
    columns, rows = _labelled(columns, rows)
    rows = _sorted(columns, rows, args.sort, args.reverse)
    if args.format == "table":  # 'no, 12 %': how far an unstable cell's repeats moved
        at, spread = columns.index("stable"), columns.index("repeats %")
        rows = [(*r[:at], stable_text(r[at], r[spread]), *r[at + 1:]) for r in rows]
    columns, rows = _chosen(columns, rows, args)
    if args.format == "table":  # each distinct note once, below the table, as the end-of-sweep summary does
        _print_table(columns, rows, explicit=bool(args.wide or args.columns))
    else:
        print_rows(columns, rows, args.format)
    if args.format == "table":
        for answer in serving_answers(warehouse, con, args.sweep, plan):
            print(printable(answer))
    if plan is not None:
        total = con.execute("SELECT count(*) FROM cells WHERE sweep_id = ?", [args.sweep]).fetchone()[0]
        if total > len(rows):
            print(f"farm: {total - len(rows)} cell(s) of earlier plans of sweep {args.sweep!r} not shown "
                  "(its sweep file changed since they ran): --all shows them", file=sys.stderr)
    return 0


# the table's columns, each of farm.queries.sweep_cells' (the end-of-sweep table's query too)
SHOWN = {"cell": "cell_id", "model": "model", "precision": "precision", "batch": "batch", "profile": "profile",
         "backend": "backend", "status": "status", "qps": "qps", "samples/s": "samples_per_s", "p50 ms": "p50",
         "p99 ms": "p99", "p99 tail": "p99_tail", "cv %": "cv", "repeats %": "spread", "stable": "stable",
         "throttled": "throttled", "accuracy": "accuracy", "build s": "build_s", "layers % of compute": "coverage",
         "note": "note", "options": "options", "scenario": "scenario"}


def _fetch(warehouse, con, sweep: str, plan: list[str] | None) -> tuple[list[str], list[tuple]]:
    rows = sweep_cells(warehouse, con, sweep, plan)
    return list(SHOWN), [tuple(r[key][:8] if key == "cell_id" else r[key] for key in SHOWN.values()) for r in rows]


def _labelled(columns: list[str], rows: list[tuple]) -> tuple[list[str], list[tuple]]:
    """`variant`: the options (and the scenario) that tell this sweep's cells of one backend apart, as
    short labels ('compile', 'cuda_graph', 'no-cuda_graph', 'server delay=2ms'); `options` and
    `scenario` stay for csv and json."""
    import json

    at = columns.index("options")
    scenario = columns.index("scenario")
    labels = option_labels([(r[columns.index("backend")], with_scenario(json.loads(r[at] or "{}"), r[scenario]))
                            for r in rows], short=True, precisions=[r[columns.index("precision")] for r in rows])
    variants = [label.partition(" ")[2] or None for label in labels]
    where = columns.index("backend") + 1
    return (columns[:where] + ["variant"] + columns[where:],
            [tuple(r[:where]) + (v,) + tuple(r[where:]) for r, v in zip(rows, variants)])


def _sorted(columns: list[str], rows: list[tuple], column: str | None, reverse: bool) -> list[tuple]:
    if column is None:
        return rows
    at = _column_index(columns, column)
    present = [r for r in rows if r[at] is not None]
    blank = [r for r in rows if r[at] is None]
    numbers = all(isinstance(r[at], (int, float)) for r in present)
    return sorted(present, key=lambda r: r[at] if numbers else str(r[at]), reverse=reverse) + blank


def _column_index(columns: list[str], name: str) -> int:
    wanted = name.strip().lower()
    wanted = {short: full for full, short in SHORT_HEADERS.items()}.get(wanted, wanted)
    for index, column in enumerate(columns):
        if column.lower() == wanted:
            return index
    unit_left_out = [i for i, column in enumerate(columns) if column.lower().startswith(wanted + " ")]
    if len(unit_left_out) == 1:  # 'p50' for 'p50 ms'
        return unit_left_out[0]
    raise UserError(f"no column {name!r}: the columns are {', '.join(columns)}")


def _chosen(columns: list[str], rows: list[tuple], args: argparse.Namespace) -> tuple[list[str], list[tuple]]:
    """The columns asked for: --columns; else every one for --wide, csv and json; else the default
    set (the backend and its variant as one column; profile only where a cell has one)."""
    if args.columns:
        keep = [_column_index(columns, name) for name in args.columns.split(",") if name.strip()]
    elif args.wide or args.format in ("csv", "json"):
        keep = [i for i, c in enumerate(columns) if c not in ("options", "scenario") or args.format != "table"]
    else:
        at = columns.index("backend"), columns.index("variant")
        rows = [tuple(r[:at[0]]) + (" ".join(filter(None, (r[at[0]], r[at[1]]))),) + tuple(r[at[0] + 1:])
                for r in rows]
        profile = columns.index("profile")
        keep = [columns.index(c) for c in DEFAULT_COLUMNS if c != "profile" or any(r[profile] for r in rows)]
    return [columns[i] for i in keep], [tuple(r[i] for i in keep) for r in rows]


def _print_table(columns: list[str], rows: list[tuple], explicit: bool) -> None:
    from rich.console import Console

    from farm.cli.common import console
    from farm.display import capped, fitted_table, fmt, printable

    if "note" in columns:
        rows, notes = footnoted(rows, columns.index("note"))
    else:
        notes = []
    if len(rows) > PLAIN_TABLE_ROWS:
        print_plain_table(columns, rows)
    else:
        out = console()
        width = table_width(out)
        headers = [SHORT_HEADERS.get(c, c) for c in columns]
        table, hidden = fitted_table(headers, rows, None if explicit else width,
                                     [SHORT_HEADERS.get(c, c) for c in DROP_ORDER])
        if explicit and width is not None and Console(width=1 << 20).measure(table).maximum > width:
            # every column asked for, and the terminal cannot hold them side by side: a record per cell
            print_records(headers, [tuple(fmt(v) for v in row) for row in rows], width)
        else:
            out.print(table)
        if hidden:
            print(f"(hidden at {width} columns: {', '.join(hidden)}; --wide or --columns shows them)")
    width = table_width(console())
    for number, note in enumerate(notes, 1):  # wrapped where a width applies, words whole
        text = f"[{number}] {printable(capped(note))}"
        print(textwrap.fill(text, width, subsequent_indent="    ", break_long_words=False,
                            break_on_hyphens=False) if width else text)
