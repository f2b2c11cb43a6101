"""`farm show SWEEP`: the cells of one sweep with their figures, notes once below the table."""

from __future__ import annotations

import argparse
import sys

from farm.cli.common import PLAIN_TABLE_ROWS, AddCommand, connect, footnoted, print_plain_table, print_rows, require_sweep
from farm.queries import THROTTLED_TEXT, VERDICT_TEXT, cells_with_figures, throttled_sql


def add(add: AddCommand) -> None:
    """The `show` subparser (`add` gives it --results)."""
    p = add("show", "Show the cells of one sweep with their figures.")
    p.add_argument("sweep", help="sweep name (see `farm ls`)")
    p.add_argument("--format", choices=["table", "csv", "json"], default="table", help="output format")
    p.add_argument("--all", action="store_true",
                   help="also the cells of earlier plans of this sweep (before its sweep file changed)")


def run(args: argparse.Namespace) -> int:
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
