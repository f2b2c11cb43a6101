"""`farm ingest PATH...`: existing TensorRT output (trtexec JSON and logs) as cells of a sweep."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from farm.cli.common import AddCommand, console
from farm.display import shown
from farm.errors import UserError


def add(add: AddCommand) -> None:
    """The `ingest` subparser (`add` gives it --results)."""
    p = add("ingest", "Import existing TensorRT output (trtexec --exportProfile/--exportTimes/--exportLayerInfo "
                      "JSON, trtexec and verbose build logs) as cells of a sweep; files are recognised by content, "
                      "others are skipped, and files that say they are of different engines are refused.")
    p.add_argument("paths", nargs="+", metavar="PATH", help="files of one engine (or of several, with --separate)")
    p.add_argument("--sweep", default="ingested", help="sweep to add the engines to (default: ingested)")
    p.add_argument("--engine", default=None, help="engine name (default: the first file's name up to its first '.')")
    p.add_argument("--separate", action="store_true", help="each file is a different engine")
    p.add_argument("--run", type=int, default=None, metavar="N",
                   help="of a log that holds several trtexec runs, ingest only run N (1 = the first); without it, "
                        "such a log given alone becomes one cell per run")


def run(args: argparse.Namespace) -> int:
    from farm.config import NAME_PATTERN
    from farm.ingest import IngestWarehouse

    if not re.fullmatch(NAME_PATTERN, args.sweep):
        raise UserError(f"--sweep {args.sweep!r}: use letters, digits, '_', '-' and '.'")
    if args.engine and args.separate:
        raise UserError("--engine names the one engine all the files are of; with --separate each file is its own "
                        "engine, named after the file: give one of the two")
    engines, skipped = _read_engines(args)  # everything read and checked first: a failed ingest writes nothing
    warehouse = IngestWarehouse(Path(args.results).resolve())
    out = console()
    with warehouse.writer_lock():  # one writer at a time: a running sweep or ingest stops this one here
        for engine in engines:
            _write_ingested(warehouse, engine, args, out)
        warehouse.consolidate(args.sweep)  # the dashboard's consolidated copy, so its first load is quick
    return 1 if skipped else 0


def _read_engines(args: argparse.Namespace) -> tuple[list, list]:
    """The engines the files given hold, and the files skipped (not TensorRT output); every
    problem found is one UserError (the last line; those before it printed), before any write."""
    from farm.ingest import describe_skip, read_file, split_runs

    paths = list({Path(p).resolve(): Path(p) for p in args.paths}.values())  # a file given twice is read once
    reads, errors = [], []
    for read in map(read_file, paths):
        try:
            reads.extend(split_runs(read, args.run) if read.usable else [read])
        except ValueError as exc:
            errors.append(str(exc))
    several = sorted({str(read.path) for read in reads if read.run is not None and args.run is None})
    if several and (len({read.path for read in reads if read.usable}) > 1 or args.engine):
        errors.append(f"{', '.join(several)} holds several trtexec runs: give it alone (one cell per run), or pick "
                      "one with --run N")
    errors += [f"{read.path}" + (f" (run {read.run})" if read.run else "") + f": {read.problem}"
               for read in reads if read.error]
    skipped = [read for read in reads if not read.usable and not read.error]
    usable = [read for read in reads if read.usable]
    if not usable and not errors:
        if len(skipped) == 1:
            raise UserError(describe_skip(skipped[0]))
        for read in skipped:
            print(f"farm: skipped {describe_skip(read)}", file=sys.stderr)
        raise UserError(f"none of the {len(skipped)} files is TensorRT output farm can read: nothing to ingest")
    for read in skipped:
        print(f"farm: skipped {describe_skip(read)}", file=sys.stderr)
    engines = _combine(args, usable, by_run=bool(several) and not errors, errors=errors)
    return engines, skipped


def _combine(args: argparse.Namespace, usable: list, by_run: bool, errors: list[str]) -> list:
    """The usable files as engines (one, one per file with --separate, or one per run of a log of
    several); raises the errors found (those of the reading, in `errors`, too)."""
    from farm.ingest import NotOneEngine, combine
    from farm.ingest.tuning import tuning_engines

    engines = []
    tuning = [read for read in usable if read.tuning is not None]
    if tuning and (len(usable) > 1 or args.run):
        errors.append(f"{tuning[0].path} is a trtexec tuning cache, one engine per build route: give it to a "
                      "`farm ingest` of its own")
        tuning = []
    for read in tuning:
        engines += tuning_engines(read, args.sweep, args.engine)
    usable = [read for read in usable if read.tuning is None]
    for group in ([[read] for read in usable] if args.separate or by_run else [usable] if usable else []):
        name = args.engine or re.sub(r"\..*$", "", group[0].path.name)
        if group[0].run is not None and args.run is None:
            name += f".run{group[0].run}"
        try:
            engines.append(combine(name, group, args.sweep))
        except NotOneEngine as exc:
            errors.append(f"these files are not of one engine: {exc}. Give each engine's files to its own "
                          "`farm ingest`, or add --separate to make each file its own engine")
        except ValueError as exc:
            errors.append(f"{', '.join(str(read.path) for read in group)}: {exc}")
    if errors:
        for line in errors[:-1]:
            print(f"farm: error: {line}", file=sys.stderr)
        raise UserError(errors[-1] + (" (nothing was written: fix or leave out the files named)"
                                      if engines or len(errors) > 1 else ""))
    return engines


# Layers summing to more than this share of the compute time they were joined to: beyond what
# per-layer profiling adds (real trtexec pairs reach ~320 %), the profile is likely not of this run.
PROFILE_MISFIT_PERCENT = 500


def _write_ingested(warehouse, engine, args: argparse.Namespace, console) -> None:
    """Write one ingested engine's cell and say what was read."""
    from farm.layers.coverage import layer_coverage_percent

    try:
        warehouse.write_engine(engine)
    except OSError as exc:
        raise UserError(f"cannot write to {args.results}: {exc.strerror or exc}") from None
    # names, paths and what the files hold are data: printed as text (shown), never as markup
    console.print(f"[bold]{shown(engine.name)}[/bold] -> sweep {shown(args.sweep)}, cell {engine.cell.cell_id[:8]} "
                  f"({engine.result.status})", highlight=False)
    for report in engine.files:
        console.print(f"  [green]read[/green] {shown(report.path)}: {shown(report.found)}", highlight=False)
    if engine.unmatched_profile_rows:
        console.print(f"  [yellow]{len(engine.unmatched_profile_rows)} profile row(s) matched no layer[/yellow]: "
                      + shown("; ".join(engine.unmatched_profile_rows[:5])), highlight=False)
    if engine.unmatched_layers:
        console.print(f"  [yellow]{len(engine.unmatched_layers)} layer(s) have no profile row[/yellow]: "
                      + shown("; ".join(engine.unmatched_layers[:5])), highlight=False)
    coverage = layer_coverage_percent(engine.result.layers, engine.result.measurement)
    if coverage is not None and coverage > PROFILE_MISFIT_PERCENT:
        console.print(f"  [yellow]the profile's layers sum to {coverage:,.0f} % of the log's compute time[/yellow]: "
                      "a profile taken by another run or of another engine gives this; if it is, ingest the files "
                      "apart (--separate) and compare layers only within one engine's run", highlight=False)
