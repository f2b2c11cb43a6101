"""The commands that only read a warehouse: `farm query`, `graph`, `ls`, `show`, `dashboard` and
`report`. Shared SQL comes from farm.queries."""

from __future__ import annotations

import argparse
import math
import sys
from decimal import Decimal
from pathlib import Path

from farm.cli.common import connect, print_rows, require_sweep
from farm.errors import UserError
from farm.queries import STATUS_COUNTS, THROTTLED_TEXT, VERDICT_TEXT, cells_with_figures, sweeps_with_counts, throttled_sql


def cmd_query(args: argparse.Namespace) -> int:
    import duckdb

    try:
        statements = duckdb.extract_statements(args.sql)
    except duckdb.Error as exc:
        raise UserError(f"query failed: {str(exc).splitlines()[0]}") from None
    if not statements:
        raise UserError('the query has no SQL statement (it is empty or only a comment): '
                        'e.g. farm query "SELECT * FROM cells LIMIT 10"')
    warehouse, con = connect(args.results)
    try:
        columns, rows = warehouse.fetch(con, args.sql)
    except duckdb.Error as exc:
        raise UserError(f"query failed: {str(exc).splitlines()[0]}") from None
    if columns is None:
        return 0
    if args.format == "table":  # what the SQL returns, every digit of it: round in the SQL to see fewer
        exact = [tuple(exact_text(v) for v in row) for row in rows]
        numeric = [any(isinstance(r[i], (int, float, Decimal)) and not isinstance(r[i], bool) for r in rows)
                   for i in range(len(columns))]
        if len(rows) > PLAIN_TABLE_ROWS:
            print_plain_table(columns, exact, numeric)
        else:
            print_exact_table(columns, exact, numeric)
        return 0
    print_rows(columns, rows, args.format)
    return 0


def exact_text(value: object) -> str:
    """A value as the query returned it: floats to the shortest text that reads back as the same
    number (0.1, 1234.56789, 1e-07), not rounded to 4 significant digits; the rest as `farm show`
    prints it (blank for NULL, yes/no)."""
    from farm.display import fmt

    if isinstance(value, float) and math.isfinite(value):
        return repr(value)
    return fmt(value)


def print_exact_table(columns: list[str], rows: list[tuple[str, ...]], numeric: list[bool]) -> None:
    from rich.table import Table

    from farm.cli.common import console

    table = Table(header_style="bold")
    for name, right in zip(columns, numeric):
        table.add_column(name, justify="right" if right else "left", overflow="fold")
    for row in rows:
        table.add_row(*row)
    console().print(table, highlight=False, markup=False)


def cmd_graph(args: argparse.Namespace) -> int:
    import shutil

    from farm.layers.graph import FORMATS, layer_rows, render
    from farm.warehouse import write_file

    fmt = Path(args.output).suffix.lstrip(".").lower()
    if fmt not in FORMATS:
        raise UserError(f"--output {args.output}: the file name must end in one of .{', .'.join(FORMATS)}")
    if fmt != "dot" and shutil.which("dot") is None:
        raise UserError("graphviz's `dot` program is not installed (apt-get install graphviz, brew install graphviz); "
                        "or write graphviz source with -o engine.dot")
    warehouse, con = connect(args.results)
    _, matches = warehouse.fetch(
        con, "SELECT cell_id, model, precision, batch, backend FROM cells WHERE cell_id LIKE ? || '%'", [args.cell])
    if len(matches) != 1:
        raise UserError(f"{len(matches)} cells match {args.cell!r}: give a longer prefix of the cell id (farm show)")
    cell_id, model, precision, batch, backend = matches[0]
    rows = layer_rows(con, cell_id, warehouse)
    if not rows:
        raise UserError(f"cell {cell_id[:8]} has no per-layer rows to draw")
    title = f"{model} · {precision} · batch {batch if batch is not None else '?'} · {backend} · cell {cell_id[:8]}"
    write_file(Path(args.output), render(rows, title, fmt))
    from farm.layers.graph import has_edges
    note = "" if has_edges(rows) else ": their rows name no tensors, listed in execution order"
    print(f"wrote {args.output} ({len(rows)} layers{note})")
    return 0


def cmd_ls(args: argparse.Namespace) -> int:
    warehouse, con = connect(args.results)
    columns, data = warehouse.fetch(con, sweeps_with_counts(
        f"{STATUS_COUNTS}, any_value(r.runs) AS runs, strftime(any_value(r.last_run), '%Y-%m-%d %H:%M UTC') AS last_run"))
    if not data:
        print(f"no sweeps in {args.results}/ yet: run `farm sweep configs/resnet.toml`", file=sys.stderr)
        return 0
    print_rows(columns, data, "table")
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    from farm.layers.coverage import COVERAGE_WARN_PERCENT
    from farm.measure import MIN_TAIL_SAMPLES

    require_sweep(args.results, args.sweep)
    warehouse, con = connect(args.results)
    # a warehouse written before the tail counts existed has no such column in its view
    measured = {d[0] for d in con.execute("SELECT * FROM measurements LIMIT 0").description}
    tail = "m.latency_p99_tail_samples" if "latency_p99_tail_samples" in measured else "CAST(NULL AS BIGINT)"
    coverage = "m.layer_coverage_percent" if "layer_coverage_percent" in measured else "CAST(NULL AS DOUBLE)"
    throttled = throttled_sql(THROTTLED_TEXT, measured)
    plan = None if args.all else warehouse.latest_plan(args.sweep)
    # "p99 tail": queries above p99, marked "(few)" under MIN_TAIL_SAMPLES (docs/warehouse.md)
    columns, rows = warehouse.fetch(con, cells_with_figures(
        f"""left(c.cell_id, 8) AS cell, c.model, c.precision, c.batch, c.profile, c.backend, c.status,
            m.throughput_qps AS qps, m.throughput_samples_per_s AS "samples/s",
            m.latency_median_ms AS "p50 ms", m.latency_p99_ms AS "p99 ms",
            CASE WHEN {tail} < ? THEN {tail} || ' (few)' ELSE CAST({tail} AS VARCHAR) END AS "p99 tail",
            m.latency_cv_percent AS "cv %", m.stable, {throttled} AS throttled, {VERDICT_TEXT} AS accuracy,
            b.build_s AS "build s",
            CASE WHEN {coverage} < ? THEN CAST(round({coverage}) AS INTEGER) || ' (partial)'
                 ELSE CAST(CAST(round({coverage}) AS INTEGER) AS VARCHAR) END AS "layers % of compute",
            coalesce(c.reason, c.notes) AS note""",
        where="c.sweep_id = ? AND (? OR list_contains(?, c.cell_id))",
        order_by="c.model, c.backend, c.precision, c.batch, c.profile, c.options, c.cell_id"),  # ties: in one order
        [MIN_TAIL_SAMPLES, COVERAGE_WARN_PERCENT, args.sweep, plan is None, plan or []])
    if args.format == "table":  # each distinct note once, below the table, as the end-of-sweep summary does
        rows, notes = footnoted(rows, columns.index("note"))
        if len(rows) > PLAIN_TABLE_ROWS:
            print_plain_table(columns, rows)
        else:
            print_rows(columns, rows, args.format)
        for number, note in enumerate(notes, 1):
            print(f"[{number}] {note}")
    else:
        print_rows(columns, rows, args.format)
    if plan is not None:
        total = con.execute("SELECT count(*) FROM cells WHERE sweep_id = ?", [args.sweep]).fetchone()[0]
        if total > len(rows):
            print(f"farm: {total - len(rows)} cell(s) of earlier plans of sweep {args.sweep!r} not shown "
                  "(its sweep file changed since they ran): --all shows them", file=sys.stderr)
    return 0


def footnoted(rows: list[tuple], column: int) -> tuple[list[tuple], list[str]]:
    """`rows` with the text in `column` replaced by a footnote mark ('[2]'), and the notes in the
    order first seen: a note shared by many rows (a backend's five-line reason) is printed once."""
    notes: dict[str, int] = {}
    marked = []
    for row in rows:
        note = row[column]
        if note:
            number = notes.setdefault(note, len(notes) + 1)
            row = (*row[:column], f"[{number}]", *row[column + 1:])
        marked.append(row)
    return marked, list(notes)


PLAIN_TABLE_ROWS = 500  # a larger `farm show` prints plain text: rich lays out 2,500 rows in about 40 s


def print_plain_table(columns: list[str], rows: list[tuple], numeric: list[bool] | None = None) -> None:
    """Rows as aligned plain text (numbers right-aligned), as quick for 25,000 rows as for 25.
    Values are formatted with farm.display.fmt (texts stay as they are); `numeric` says which
    columns to right-align where the rows are texts already."""
    from farm.display import fmt

    text = [[fmt(v) for v in row] for row in rows]
    if numeric is None:
        numeric = [any(isinstance(r[i], (int, float)) and not isinstance(r[i], bool) for r in rows)
                   for i in range(len(columns))]
    widths = [max([len(c)] + [len(r[i]) for r in text]) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths)).rstrip(), "  ".join("-" * w for w in widths)]
    lines += ["  ".join(v.rjust(w) if n else v.ljust(w) for v, w, n in zip(r, widths, numeric)).rstrip()
              for r in text]
    sys.stdout.write("\n".join(lines) + "\n")


def cmd_dashboard(args: argparse.Namespace) -> int:
    import socket

    from farm.dashboard import require_dashboard_extra, serve

    require_dashboard_extra("farm dashboard", "streamlit")
    if not 1 <= args.port <= 65535:
        raise UserError(f"--port {args.port}: give a port from 1 to 65535")
    try:  # a port in use or an address not of this machine: one line now, not Streamlit's traceback
        family = socket.AF_INET6 if ":" in args.address else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((args.address, args.port))
    except OSError as exc:
        raise UserError(f"cannot serve on {args.address}:{args.port}: {exc.strerror or exc} "
                        "(pick another --port, or an --address of this machine such as 127.0.0.1)") from None
    results = Path(args.results).resolve()
    if not results.is_dir():
        print(f"farm: note: no warehouse at {args.results}/ yet; the dashboard will say what to run", file=sys.stderr)
    print(f"farm dashboard: http://{args.address}:{args.port}/  (warehouse {results}; Ctrl-C stops it)",
          file=sys.stderr)
    return serve(results, args.address, args.port)  # in this process: the server ends when farm does


def cmd_report(args: argparse.Namespace) -> int:
    from farm.dashboard import require_dashboard_extra
    from farm.dashboard.report import write_report

    require_dashboard_extra("farm report", "matplotlib")
    require_sweep(args.results, args.sweep)
    summary = write_report(args.results, args.sweep, Path(args.output), baseline=args.baseline,
                           against=args.against, base_results=args.base_results)
    print(f"wrote {args.output} ({summary})")
    return 0
