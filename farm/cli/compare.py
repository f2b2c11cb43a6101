"""`farm compare BASE NEW`: the table, the explaining layers, the JSON and Markdown files; exit 0
when nothing regressed, 1 when something did (a UserError, exit 2, for a usage mistake)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from farm.cli.common import AddCommand
from farm.errors import UserError


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
    p.add_argument("--precisions", type=_precisions, default=None, metavar="BASE:NEW",
                   help="pair BASE's cells at one precision with NEW's at another, the rest of their configuration "
                        "the same, e.g. `farm compare run run --precisions bf16:int8`: what a precision changes "
                        "(speed, accuracy, layers), with the same verdicts")
    p.add_argument("--confirm", action="store_true",
                   help="measure each slower, faster or inconclusive pair again here, BASE and NEW built side by "
                        "side and timed in alternating blocks, so that the machine's drift falls on both alike; its "
                        "verdict becomes the rounds' (the cells planned again from the sweep files their runs "
                        "recorded)")
    p.add_argument("--rounds", type=int, default=None, metavar="N",
                   help="with --confirm: alternating rounds per pair, each a short timed block of both cells "
                        "(default: 20); a pair they leave inconclusive gets as many again, up to three looks")
    p.add_argument("--json", default=None, metavar="FILE", help="also write the comparison as JSON (for CI)")
    p.add_argument("--markdown", default=None, metavar="FILE",
                   help="also write the comparison as Markdown (a pull request comment)")


def run(args: argparse.Namespace) -> int:
    from farm.compare import compare_sweeps, render_markdown, to_dict
    from farm.files import write_atomic

    comparison = compare_sweeps(args.base, args.new, results=args.results, base_results=args.base_results,
                                min_effect_percent=args.min_effect,
                                allow_timing_differences=args.allow_timing_differences,
                                allow_device_differences=args.allow_device_differences, precisions=args.precisions)
    if args.confirm:
        from farm.compare.confirm import ROUNDS, confirm

        confirm(comparison, comparison.base_results, comparison.new_results, args.rounds or ROUNDS)
    elif args.rounds is not None:
        raise UserError("--rounds: for --confirm only")
    _print(comparison)
    if args.json:
        write_atomic(Path(args.json), json.dumps(to_dict(comparison), indent=1, default=str) + "\n")
    if args.markdown:
        write_atomic(Path(args.markdown), render_markdown(comparison))
    return 1 if comparison.regressed else 0


def _precisions(text: str) -> tuple[str, str]:
    """'bf16:int8' -> ('bf16', 'int8'); argparse's one-line error for anything else."""
    import typing

    from farm.config.schema import Precision

    names = typing.get_args(Precision)
    parts = tuple(part.strip().lower() for part in text.split(":"))
    if len(parts) != 2 or not all(p in names for p in parts) or parts[0] == parts[1]:
        raise argparse.ArgumentTypeError(f"{text!r}: give two different precisions as BASE:NEW, e.g. bf16:int8 "
                                         f"(precisions: {', '.join(names)})")
    return parts[0], parts[1]


def _print(comparison) -> None:
    from farm.cli.common import PLAIN_TABLE_ROWS, console, print_plain_table, table_width
    from farm.compare.render import COLUMNS, layer_lines, pair_row, summary_line
    from farm.display import fitted_table, footnoted

    out = console()
    width = table_width(out)
    title = comparison.title
    rows = [tuple(pair_row(pair)[c] for c in COLUMNS) for pair in comparison.pairs]
    rows, notes = footnoted(rows, COLUMNS.index("notes"))  # a note once, below the table, its words whole
    columns = COLUMNS if notes else COLUMNS[:-1]  # no column of blanks
    rows = [row[:len(columns)] for row in rows]
    if len(rows) > PLAIN_TABLE_ROWS:  # rich lays out 25,000 rows in about 55 s
        out.print(title, markup=False, highlight=False)
        print_plain_table(list(columns), rows, [c in ("latency change", "throughput", "p99") for c in columns])
    else:  # as narrow as the terminal: the least needed columns left out (and named), no value broken
        table, hidden = fitted_table(columns, rows, width, DROP_ORDER, title=title)
        out.print(table)
        if hidden:
            said(out, f"(hidden at {width} columns: {', '.join(hidden)}; --json or --markdown has every figure)", width)
    for number, note in enumerate(notes, 1):
        said(out, f"[{number}] {note}", width)
    for note in comparison.allowed:
        said(out, f"note: {note}", width)
    for pair in comparison.pairs:
        found = layer_lines(pair)
        if found:
            said(out, f"{pair.new_id[:8]} {pair.label} is slower: {found[0]}", width)
            for line in found[1:]:
                said(out, f"  {line}", width)
    for side, cells in (("BASE", comparison.only_base), ("NEW", comparison.only_new)):
        if cells:
            said(out, f"only in {side} (no cell of the same configuration in the other sweep):", width)
            for cell in cells:
                said(out, f"  {cell}", width)
    said(out, summary_line(comparison), width)


# the columns left out first where the terminal is narrow (the JSON and Markdown keep them all)
DROP_ORDER = ("energy/inference", "p99", "throughput", "95 % CI", "accuracy", "median ms")


def said(out, text: str, width: int | None) -> None:
    """A line of text, wrapped at `width` between words (never inside one), as text, not markup."""
    import textwrap

    from farm.display import printable

    text = printable(text)
    lines = textwrap.wrap(text, width, subsequent_indent="    ", break_long_words=False, break_on_hyphens=False,
                          drop_whitespace=True) if width else [text]
    for line in lines or [""]:
        out.print(line, markup=False, highlight=False, soft_wrap=True)
