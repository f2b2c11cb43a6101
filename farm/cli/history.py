"""`farm history`: each configuration across the warehouse's sweeps, and where its latency changed
(farm.history: Apache Otava's change points)."""

from __future__ import annotations

import argparse
import json
import sys

from farm.cli.common import AddCommand, existing_folder, print_rows


def add(add: AddCommand) -> None:
    """The `history` subparser (`add` gives it --results)."""
    p = add("history", "Follow each configuration (model, precision, batch, profile, backend and options, on one "
                       "kind of device) across the warehouse's sweeps, oldest first, and find where its median "
                       "latency changed: Apache Otava's change points (p < 0.001, over farm compare's minimum "
                       "effect), each with the sweep it starts at and the layers that explain it. Name each "
                       "run's sweep apart (farm sweep --sweep nightly-DATE, farm ingest --sweep) to build a "
                       "history. Exit 1 if a configuration's latest change point slowed it (a slowdown fixed "
                       "since does not count), 0 otherwise.")
    p.add_argument("sweeps", nargs="*", metavar="SWEEP", help="only these sweeps (default: every sweep)")
    for name in ("model", "precision", "backend"):
        p.add_argument(f"--{name}", action="append", metavar=name.upper(), help=f"only this {name} (repeatable)")
    p.add_argument("--batch", action="append", type=int, metavar="N", help="only this batch size (repeatable)")
    p.add_argument("--all", action="store_true", help="also list the configurations without a change point")
    p.add_argument("--format", choices=["table", "csv", "json"], default="table",
                   help="table: a line per configuration; csv and json: every run of each, with its change points")


def run(args: argparse.Namespace) -> int:
    from farm.history import MIN_RUNS, change_text, history, layer_text

    existing_folder(args.results)
    filters = {"model": args.model, "precision": args.precision, "backend": args.backend, "batch": args.batch}
    found = history(args.results, args.sweeps or None, filters)
    slower = any(s.changes and s.changes[-1].change > 0 for s in found)  # still slower since its last change
    if args.format == "json":
        print(json.dumps([_record(s) for s in found], default=str, indent=1))
        return 1 if slower else 0
    if args.format == "csv":
        rows = [(s.label, s.device, i, p.sweep, p.cell_id, p.measured_at, p.median_ms, p.low_ms, p.high_ms,
                 p.contended, next((change_text(c) for c in s.changes if c.index == i), None))
                for s in found for i, p in enumerate(s.points)]
        print_rows(["configuration", "device", "run", "sweep", "cell_id", "measured_at", "median_ms", "ci_low_ms",
                    "ci_high_ms", "contended", "change_point"], rows, "csv")
        return 1 if slower else 0
    if not found:
        print(f"farm: no configuration of {args.results}/ was measured in two sweeps or more: a history is the "
              "same sweep file run into sweeps of their own names (farm sweep --sweep NAME)", file=sys.stderr)
        return 0
    shown = [s for s in found if s.changes or args.all]
    rows = [(s.label, s.device, _runs_text(s), s.points[0].median_ms, s.points[-1].median_ms,
             "; ".join(change_text(c) for c in s.changes) or
             ("none" if len(s.points) >= MIN_RUNS else f"too few runs (under {MIN_RUNS})")) for s in shown]
    if rows:
        print_rows(["configuration", "device", "runs", "first ms", "last ms", "change points"], rows, "table")
    for series in shown:
        for change in series.changes:
            lines = layer_text(change)
            if lines:
                print(f"{series.label}, {change_text(change)}; its layers:")
                print("\n".join(f"  {line}" for line in lines))
    quiet = len(found) - sum(bool(s.changes) for s in found)
    print(f"{len(found)} configuration(s) in 2 or more sweeps: {len(found) - quiet} with a change point"
          + ("" if args.all or not quiet else f", {quiet} without (--all lists them)"))
    return 1 if slower else 0


def _runs_text(series) -> str:
    """'30', or '30 (4 contended)': runs timed under contention, left out of the change points where
    enough others were quiet (farm.history)."""
    contended = sum(bool(p.contended) for p in series.points)
    return f"{len(series.points)} ({contended} contended)" if contended else str(len(series.points))


def _record(series) -> dict:
    from farm.history import change_text

    return {"configuration": series.label, "device": series.device,
            "runs": [vars(p) for p in series.points],
            "change_points": [{"run": c.index, "sweep": c.sweep, "before_ms": c.before_ms, "after_ms": c.after_ms,
                               "change": c.change, "pvalue": c.pvalue, "text": change_text(c),
                               "layers": [dict(r) for r in (c.layers.rows if c.layers else [])]}
                              for c in series.changes]}
