"""The commands that write a warehouse: `farm sweep`, `farm ingest` and `farm check`."""

from __future__ import annotations

import argparse
import math
import re
import sys
from pathlib import Path

from farm.cli.common import console, existing_folder
from farm.errors import UserError


def cmd_sweep(args: argparse.Namespace) -> int:
    from rich.console import Console

    from farm.executor import DEFAULT_CELL_TIMEOUT_S, DEFAULT_WORKER_MEMORY, parse_memory_limit
    from farm.sweep import run_sweep, summary_table
    from farm.warehouse import Warehouse

    ray_only = {"--address": args.address, "--gpus": args.gpus, "--retries": args.retries,
                "--worker-memory": args.worker_memory, "--cell-timeout": args.cell_timeout}
    given = [flag for flag, value in ray_only.items() if value is not None]
    if args.executor == "local" and given:
        raise UserError(f"{', '.join(given)}: for --executor ray only (local runs each cell in this process, "
                        "with no isolation)")
    retries = 2 if args.retries is None else args.retries
    if retries < 0:
        raise UserError(f"--retries {retries}: give 0 or more")
    if args.gpus is not None and args.gpus < 1:
        raise UserError(f"--gpus {args.gpus}: give 1 or more (to run without GPUs, leave CUDA cells out of the sweep)")
    worker_memory = DEFAULT_WORKER_MEMORY if args.worker_memory is None else args.worker_memory
    parse_memory_limit(worker_memory)  # a mistake here is one line, before anything runs
    timeout = DEFAULT_CELL_TIMEOUT_S if args.cell_timeout is None else args.cell_timeout
    if not math.isfinite(timeout) or timeout < 0:
        raise UserError(f"--cell-timeout {args.cell_timeout}: give a number of seconds, or 0 for no limit")
    if args.address:
        _check_reachable(args.address)
    outcome = run_sweep(args.config, args.results, force=args.force, executor=args.executor,
                        address=args.address, retries=retries, gpus=args.gpus,
                        worker_memory=worker_memory, cell_timeout_s=timeout or None, only=args.cells)
    out = console()
    table, notes = summary_table(Warehouse(args.results), outcome)
    out.print(table)
    for number, note in enumerate(notes, 1):
        out.print(f"[{number}] {note}", highlight=False, markup=False)
    if outcome.failures:
        err = Console(stderr=True)
        err.print(f"[red]{len(outcome.failures)} cell(s) failed:[/red]")
        for label, reason in outcome.failures:
            err.print(f"  {label}: {reason}", highlight=False)
    return outcome.exit_code


def _check_reachable(address: str) -> None:
    """A Ray address that nothing answers at is one line now, not a wait of many minutes in ray.init."""
    import socket

    match = re.fullmatch(r"(?:ray://)?\[?([^\]]+?)\]?:(\d+)", address)
    if address == "auto" or not match:  # 'auto' finds the local cluster itself, and says when there is none
        return
    host, port = match.group(1), int(match.group(2))
    try:
        socket.create_connection((host, port), timeout=10).close()
    except OSError as exc:
        raise UserError(f"--address {address}: nothing answers there ({exc.strerror or exc}); start the cluster "
                        "(ray start --head) or give its address") from None


def cmd_ingest(args: argparse.Namespace) -> int:
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

    engines = []
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


def _write_ingested(warehouse, engine, args: argparse.Namespace, console) -> None:
    """Write one ingested engine's cell and say what was read."""
    try:
        warehouse.write_engine(engine)
    except OSError as exc:
        raise UserError(f"cannot write to {args.results}: {exc.strerror or exc}") from None
    console.print(f"[bold]{engine.name}[/bold] -> sweep {args.sweep}, cell {engine.cell.cell_id[:8]} "
                  f"({engine.result.status})", highlight=False)
    for report in engine.files:
        console.print(f"  [green]read[/green] {report.path}: {report.found}", highlight=False)
    if engine.unmatched_profile_rows:
        console.print(f"  [yellow]{len(engine.unmatched_profile_rows)} profile row(s) matched no layer[/yellow]: "
                      + "; ".join(engine.unmatched_profile_rows[:5]), highlight=False)
    if engine.unmatched_layers:
        console.print(f"  [yellow]{len(engine.unmatched_layers)} layer(s) have no profile row[/yellow]: "
                      + "; ".join(engine.unmatched_layers[:5]), highlight=False)


def cmd_check(args: argparse.Namespace) -> int:
    from farm.warehouse import Warehouse, describe_holder

    existing_folder(args.results)
    warehouse = Warehouse(args.results)
    problem = warehouse.not_a_warehouse()  # --fix would move its files: refused, nothing touched
    if problem:
        raise UserError(f"{problem}; farm check looks only at farm warehouses: pass --results DIR of one")
    if args.fix:
        with warehouse.writer_lock():
            inspection = warehouse.inspect()
            done = warehouse.fix(inspection.findings)
            for sweep in warehouse.sweeps():
                warehouse.consolidate(sweep)
        lines = [f"{f.kind:8} {f.path}: {f.reason}; {action}" for f, action in done]
    else:
        inspection = warehouse.inspect()
        lines = [f"{f.kind:8} {f.path}: {f.reason}" for f in inspection.findings]
    for line in lines:
        print(line)
    counts = {kind: sum(f.kind == kind for f in inspection.findings)
              for kind in ("damaged", "orphan", "temp", "unmeasured")}
    found = ", ".join(f"{n} {name}" for name, n in
                      [("damaged", counts["damaged"]), ("orphaned", counts["orphan"]), ("temporary", counts["temp"]),
                       ("unmeasured", counts["unmeasured"])] if n)
    print(f"{inspection.files_checked} file(s) checked in {args.results}/: " + (found or "clean")
          + ("" if not found or args.fix else "; `farm check --fix` resolves them"))
    if inspection.holder is not None:
        print(f"note: a writer holds the warehouse ({describe_holder(inspection.holder)}): "
              f"{inspection.in_progress} file(s) of its work in progress were not counted")
    if inspection.quarantined:
        print(f"note: {inspection.quarantined} file(s) moved aside earlier are in <sweep>/.damaged/ folders; "
              "delete them when you no longer need them")
    return 1 if inspection.findings else 0


def cmd_compact(args: argparse.Namespace) -> int:
    from farm.cli.common import require_sweep
    from farm.warehouse import Warehouse

    if args.sweep is not None:
        require_sweep(args.results, args.sweep)
    existing_folder(args.results)
    warehouse = Warehouse(args.results)
    with warehouse.writer_lock():  # one writer at a time: exits 2 while a sweep or ingest writes
        for sweep in [args.sweep] if args.sweep is not None else warehouse.sweeps():
            done = warehouse.compact(sweep)
            for path, problem, moved_to in done.moved:
                print(f"moved damaged file {path} to {moved_to.parent}/ ({problem}): its cells are measured again")
            warehouse.consolidate(sweep)
            print(f"{sweep}: " + (f"{done.cells} cell(s) compacted" + (f", {done.rewritten} compacted cell(s) "
                                                                         "rewritten" if done.rewritten else "")
                                  + f", {done.files_removed} file(s) removed" if done.cells else "nothing to compact")
                  + f"; {done.blocks} compacted block(s)")
    return 0
