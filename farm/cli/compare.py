"""`farm compare BASE NEW`: the table, the explaining layers, the JSON and Markdown files; exit 0
when nothing regressed, 1 when something did (a UserError, exit 2, for a usage mistake)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from farm.cli.common import AddCommand

VERDICT_STYLE = {"slower": "bold red", "failed": "bold red", "faster": "green", "fixed": "green",
                 "within noise": "dim", "inconclusive": "yellow", "not judged": "yellow", "not measured": "dim"}


def add(add: AddCommand) -> None:
    """The `compare` subparser (`add` is build_parser's: it adds --results)."""
    p = add("compare", "Compare two runs of a sweep cell by cell (cells matched by configuration): per cell a "
                       "verdict from both cells' raw samples (faster / slower / within noise / inconclusive, the "
                       "change in median latency with its confidence interval), throughput, p99, energy and accuracy "
                       "changes, and the layers that explain each slower cell. Exit 0 when nothing regressed, 1 "
                       "when something did, 2 on a usage error.")
    p.add_argument("base", metavar="BASE", help="the sweep to compare against (see `farm ls`)")
    p.add_argument("new", metavar="NEW", help="the sweep to judge (in --results)")
    p.add_argument("--base-results", default=None, metavar="DIR",
                   help="warehouse holding BASE, when it is not the one holding NEW (default: --results)")
    p.add_argument("--min-effect", type=float, default=3.0, metavar="PCT",
                   help="smallest change in median latency that counts, in percent (default: 3): 'slower' only "
                        "when the whole 95 %% interval lies above +PCT, 'within noise' when it lies inside ±PCT")
    p.add_argument("--allow-timing-differences", action="store_true",
                   help="compare cells whose latencies are defined differently (transfers, CUDA graph, spin-wait, "
                        "streams) instead of refusing")
    p.add_argument("--allow-device-differences", action="store_true",
                   help="compare cells measured on different kinds of device (another GPU or CPU model) instead "
                        "of refusing")
    p.add_argument("--json", default=None, metavar="FILE", help="also write the comparison as JSON (for CI)")
    p.add_argument("--markdown", default=None, metavar="FILE",
                   help="also write the comparison as Markdown (a pull request comment)")


def run(args: argparse.Namespace) -> int:
    from farm.compare import compare_sweeps, render_markdown, to_dict
    from farm.files import write_atomic

    comparison = compare_sweeps(args.base, args.new, results=args.results, base_results=args.base_results,
                                min_effect_percent=args.min_effect,
                                allow_timing_differences=args.allow_timing_differences,
                                allow_device_differences=args.allow_device_differences)
    _print(comparison)
    if args.json:
        write_atomic(Path(args.json), json.dumps(to_dict(comparison), indent=1, default=str) + "\n")
    if args.markdown:
        write_atomic(Path(args.markdown), render_markdown(comparison))
    return 1 if comparison.regressed else 0


def _print(comparison) -> None:
    from rich.table import Table

    from farm.cli.common import PLAIN_TABLE_ROWS, console, print_plain_table
    from farm.compare.render import COLUMNS, layer_lines, pair_row, summary_line

    out = console()
    if len(comparison.pairs) > PLAIN_TABLE_ROWS:  # rich lays out 25,000 rows in about 55 s
        out.print(f"{comparison.new_sweep} against {comparison.base_sweep}", markup=False, highlight=False)
        rows = [pair_row(pair) for pair in comparison.pairs]
        print_plain_table(list(COLUMNS), [tuple(row[c] for c in COLUMNS) for row in rows],
                          [c in ("latency change", "throughput", "p99") for c in COLUMNS])
    else:
        table = Table(title=f"{comparison.new_sweep} against {comparison.base_sweep}", header_style="bold")
        for column in COLUMNS:
            table.add_column(column, overflow="fold",
                             justify="right" if column in ("latency change", "throughput", "p99") else "left")
        for pair in comparison.pairs:
            row = pair_row(pair)
            style = VERDICT_STYLE.get(pair.verdict)
            row["verdict"] = f"[{style}]{pair.verdict}[/{style}]" if style else pair.verdict
            table.add_row(*(row[c] for c in COLUMNS))
        out.print(table)
    for note in comparison.allowed:
        out.print(f"note: {note}", markup=False)
    for pair in comparison.pairs:
        found = layer_lines(pair)
        if found:
            out.print(f"{pair.new_id[:8]} {pair.label} is slower: {found[0]}", markup=False, highlight=False)
            for line in found[1:]:
                out.print(f"  {line}", markup=False, highlight=False)
    for side, cells in (("BASE", comparison.only_base), ("NEW", comparison.only_new)):
        if cells:
            out.print(f"only in {side} (no cell of the same configuration in the other sweep):", markup=False)
            for cell in cells:
                out.print(f"  {cell}", markup=False, highlight=False)
    out.print(summary_line(comparison), markup=False, highlight=False)
