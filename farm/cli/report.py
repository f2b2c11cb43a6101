"""`farm report SWEEP`: a static, self-contained HTML report of one sweep."""

from __future__ import annotations

import argparse
from pathlib import Path

from farm.cli.common import AddCommand, require_sweep


def add(add: AddCommand) -> None:
    """The `report` subparser (`add` gives it --results)."""
    p = add("report", "Write a static, self-contained HTML report of one sweep (tables, charts, Pareto "
                      "frontier, speedups, top layers), for pull requests and mail.")
    p.add_argument("sweep", help="sweep name (see `farm ls`)")
    p.add_argument("-o", "--output", default="report.html", help="output file (default: report.html)")
    p.add_argument("--baseline", default=None, metavar="SERIES",
                   help="series to compute speedups against, e.g. 'fp32 · onnxruntime' "
                        "(default: fp32 on the first backend the sweep file lists, eager where it has modes)")
    p.add_argument("--against", default=None, metavar="BASE_SWEEP",
                   help="add a 'Changes against BASE_SWEEP' section: `farm compare BASE_SWEEP SWEEP`'s verdicts")
    p.add_argument("--base-results", default=None, metavar="DIR",
                   help="the warehouse holding BASE_SWEEP (default: --results)")


def run(args: argparse.Namespace) -> int:
    from farm.dashboard import require_dashboard_extra
    from farm.report.html import write_report

    require_dashboard_extra("farm report", "matplotlib")
    require_sweep(args.results, args.sweep)
    summary = write_report(args.results, args.sweep, Path(args.output), baseline=args.baseline,
                           against=args.against, base_results=args.base_results)
    print(f"wrote {args.output} ({summary})")
    return 0
