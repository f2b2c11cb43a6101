"""The `farm` command. Imports stay light here: engines load only when a cell needs them."""

from __future__ import annotations

import argparse
import io
import json
import math
import sys
from pathlib import Path
from typing import Any, Sequence

from farm import __version__
from farm.errors import UserError

DEFAULT_RESULTS = "results"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="farm",
        description="Benchmark farm for inference engines: sweep models x precisions x batch sizes x "
                    "profiles x backends into a Parquet warehouse, then query it.",
    )
    parser.add_argument("--version", action="version", version=f"farm {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def add(name: str, help_text: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.add_argument("--results", default=DEFAULT_RESULTS, metavar="DIR",
                       help=f"warehouse folder (default: {DEFAULT_RESULTS}/)")
        return p

    p = add("sweep", "Run a sweep file: build and measure every cell, resuming cells already in the warehouse.")
    p.add_argument("config", help="sweep file (TOML), e.g. configs/resnet.toml")
    p.add_argument("--force", action="store_true", help="rerun cells that are already in the warehouse")
    p.add_argument("--executor", default="ray", choices=["ray", "local"],
                   help="where cells run: 'ray' (default) on Ray actors, one per GPU and one per node for CPU "
                        "cells; 'local' one by one in this process, for debugging")
    p.add_argument("--address", default=None, metavar="ADDR",
                   help="join an existing Ray cluster ('auto' or 'ray://host:port'); default: start a local Ray "
                        "bound to localhost")
    p.add_argument("--retries", type=int, default=None, metavar="N",
                   help="times a cell is retried on a fresh process when its process dies (default: 2; "
                        "--executor ray only)")
    p.add_argument("--worker-memory", default=None, metavar="SIZE",
                   help="memory a cell's processes may use before they are stopped and the cell fails as out of "
                        "memory: a share of the node's memory, divided between the workers running at once on it "
                        "(default: 80%%), a size such as 12GiB, or none (--executor ray only)")
    p.add_argument("--cell-timeout", type=float, default=None, metavar="SECONDS",
                   help="stop a cell still running after this long and record it failed, timed out (default: "
                        "10800, three hours; 0: never; --executor ray only)")
    p.add_argument("--gpus", type=int, default=None, metavar="N",
                   help="use at most N GPUs (one actor each); default: every GPU Ray sees")

    p = add("query", "Run SQL over the warehouse (tables: sweeps, cells, builds, measurements, samples, "
                     "layers, devices).")
    p.add_argument("sql", help='e.g. "SELECT model, batch, throughput_qps FROM cells JOIN measurements USING (cell_id)"')
    p.add_argument("--format", choices=["table", "csv", "json"], default="table", help="output format")

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

    p = add("graph", "Draw a cell's engine graph (layers with type, precision, time share and memory).")
    p.add_argument("cell", help="cell id, or a unique prefix of one (see `farm show`)")
    p.add_argument("-o", "--output", default="engine.svg", help="output file; .svg, .png, .pdf or .dot (default engine.svg)")

    add("ls", "List the sweeps in the warehouse with their cell counts.")

    p = add("show", "Show the cells of one sweep with their figures.")
    p.add_argument("sweep", help="sweep name (see `farm ls`)")
    p.add_argument("--format", choices=["table", "csv", "json"], default="table", help="output format")
    p.add_argument("--all", action="store_true",
                   help="also the cells of earlier plans of this sweep (before its sweep file changed)")

    p = add("dashboard", "Serve the comparison dashboard (Streamlit) on localhost: overview, compare, cell, diff "
                         "and a read-only SQL console over the warehouse.")
    p.add_argument("--port", type=int, default=8501, help="port on 127.0.0.1 (default: 8501)")
    p.add_argument("--address", default="127.0.0.1",
                   help="address to listen on (default: 127.0.0.1; 0.0.0.0 shares it with your network)")

    p = add("report", "Write a static, self-contained HTML report of one sweep (tables, charts, Pareto "
                      "frontier, speedups, top layers), for pull requests and mail.")
    p.add_argument("sweep", help="sweep name (see `farm ls`)")
    p.add_argument("-o", "--output", default="report.html", help="output file (default: report.html)")
    p.add_argument("--baseline", default=None, metavar="SERIES",
                   help="series to compute speedups against, e.g. 'fp32 · onnxruntime' "
                        "(default: the first fp32 series)")

    p = add("check", "Check every file of the warehouse: list damaged files (not whole Parquet, or not their "
                     "table's schema), orphaned files (a cell's file without its cells file, files of no table) "
                     "and temporary files interrupted runs left. Exit 1 if it found any, 0 if clean.")
    p.add_argument("--fix", action="store_true",
                   help="also resolve them (waits for no one: exits 2 while a sweep or ingest writes the warehouse): "
                        "move damaged files and files of no table to <sweep>/.damaged/ (a damaged cell file takes "
                        "its cells file along, so the next `farm sweep` measures the cell again), remove orphaned "
                        "cell files and temporary files, and bring the dashboard's consolidated copy up to date")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except UserError as exc:
        print(f"farm: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("farm: interrupted; rerun the same command to resume", file=sys.stderr)
        return 130


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
                        worker_memory=worker_memory, cell_timeout_s=timeout or None)
    out = _console()
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
    import re
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


def cmd_query(args: argparse.Namespace) -> int:
    import duckdb

    try:
        statements = duckdb.extract_statements(args.sql)
    except duckdb.Error as exc:
        raise UserError(f"query failed: {str(exc).splitlines()[0]}") from None
    if not statements:
        raise UserError('the query has no SQL statement (it is empty or only a comment): '
                        'e.g. farm query "SELECT * FROM cells LIMIT 10"')
    warehouse, con = _connect(args.results)
    try:
        columns, rows = warehouse.fetch(con, args.sql)
    except duckdb.Error as exc:
        raise UserError(f"query failed: {str(exc).splitlines()[0]}") from None
    if columns is None:
        return 0
    _print_rows(columns, rows, args.format)
    return 0


def cmd_ingest(args: argparse.Namespace) -> int:
    import re

    from farm.config import SweepConfig
    from farm.ingest import IngestWarehouse, NotOneEngine, combine, describe_skip, read_file, split_runs

    try:
        SweepConfig.model_validate({"name": args.sweep, "models": [{"source": "x"}]})
    except Exception:
        raise UserError(f"--sweep {args.sweep!r}: use letters, digits, '_', '-' and '.'") from None
    if args.engine and args.separate:
        raise UserError("--engine names the one engine all the files are of; with --separate each file is its own "
                        "engine, named after the file: give one of the two")
    paths = list({Path(p).resolve(): Path(p) for p in args.paths}.values())  # a file given twice is read once
    # Everything is read and checked before anything is written: an ingest that fails writes nothing.
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
    engines = []
    by_run = bool(several) and not errors
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

    warehouse = IngestWarehouse(Path(args.results).resolve())
    console = _console()
    with warehouse.writer_lock():  # one writer at a time: a running sweep or ingest stops this one here
        for engine in engines:
            _write_ingested(warehouse, engine, args, console)
        from farm.dashboard.loader import refresh

        refresh(warehouse.root, args.sweep)
    return 1 if skipped else 0


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
    warehouse, con = _connect(args.results)
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
    print(f"wrote {args.output} ({len(rows)} layers)")
    return 0


def cmd_ls(args: argparse.Namespace) -> int:
    warehouse, con = _connect(args.results)
    columns, data = warehouse.fetch(
        con,
        """
        WITH runs AS (SELECT sweep_id, count(*) AS runs, max(started_at) AS last_run FROM sweeps GROUP BY sweep_id)
        SELECT c.sweep_id AS sweep, count(*) AS cells,
               count(*) FILTER (status = 'ok') AS ok, count(*) FILTER (status = 'failed') AS failed,
               count(*) FILTER (status = 'skipped') AS skipped,
               count(*) FILTER (status = 'unsupported') AS unsupported,
               any_value(r.runs) AS runs, strftime(any_value(r.last_run), '%Y-%m-%d %H:%M UTC') AS last_run
        FROM cells c LEFT JOIN runs r USING (sweep_id) GROUP BY c.sweep_id ORDER BY c.sweep_id
        """
    )
    if not data:
        print(f"no sweeps in {args.results}/ yet: run `farm sweep configs/resnet.toml`", file=sys.stderr)
        return 0
    _print_rows(columns, data, "table")
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    from farm.layers.coverage import COVERAGE_WARN_PERCENT
    from farm.measure import MIN_TAIL_SAMPLES

    _require_sweep(args.results, args.sweep)
    warehouse, con = _connect(args.results)
    # a warehouse written before the tail counts existed has no such column in its view
    measured = {d[0] for d in con.execute("SELECT * FROM measurements LIMIT 0").description}
    tail = "m.latency_p99_tail_samples" if "latency_p99_tail_samples" in measured else "CAST(NULL AS BIGINT)"
    coverage = "m.layer_coverage_percent" if "layer_coverage_percent" in measured else "CAST(NULL AS DOUBLE)"
    plan = None if args.all else warehouse.latest_plan(args.sweep)
    columns, rows = warehouse.fetch(
        con,
        # accuracy as the end-of-sweep summary shows it (farm/sweep.py summary_table); "p99 tail":
        # queries above p99, marked "(few)" under MIN_TAIL_SAMPLES (docs/warehouse.md)
        f"""
        WITH verdicts AS (SELECT cell_id, CASE WHEN bool_and(verdict = 'pass') THEN 'pass'
                                               ELSE 'fail: ' || min(worst_metric) FILTER (verdict = 'fail') END AS verdict
                          FROM accuracy GROUP BY cell_id)
        SELECT left(c.cell_id, 8) AS cell, c.model, c.precision, c.batch, c.profile, c.backend, c.status,
               m.throughput_qps AS qps, m.throughput_samples_per_s AS "samples/s",
               m.latency_median_ms AS "p50 ms", m.latency_p99_ms AS "p99 ms",
               CASE WHEN {tail} < ? THEN {tail} || ' (few)' ELSE CAST({tail} AS VARCHAR) END AS "p99 tail",
               m.latency_cv_percent AS "cv %", m.stable, v.verdict AS accuracy, b.build_s AS "build s",
               CASE WHEN {coverage} < ? THEN CAST(round({coverage}) AS INTEGER) || ' (partial)'
                    ELSE CAST(CAST(round({coverage}) AS INTEGER) AS VARCHAR) END AS "layers % of compute",
               coalesce(c.reason, c.notes) AS note
        FROM cells c LEFT JOIN measurements m USING (cell_id) LEFT JOIN builds b USING (cell_id)
             LEFT JOIN verdicts v USING (cell_id)
        WHERE c.sweep_id = ? AND (? OR list_contains(?, c.cell_id))
        ORDER BY c.model, c.backend, c.precision, c.batch, c.profile
        """,
        [MIN_TAIL_SAMPLES, COVERAGE_WARN_PERCENT, args.sweep, plan is None, plan or []],
    )
    _print_rows(columns, rows, args.format)
    if plan is not None:
        total = con.execute("SELECT count(*) FROM cells WHERE sweep_id = ?", [args.sweep]).fetchone()[0]
        if total > len(rows):
            print(f"farm: {total - len(rows)} cell(s) of earlier plans of sweep {args.sweep!r} not shown "
                  "(its sweep file changed since they ran): --all shows them", file=sys.stderr)
    return 0


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
    _require_sweep(args.results, args.sweep)
    summary = write_report(args.results, args.sweep, Path(args.output), baseline=args.baseline)
    print(f"wrote {args.output} ({summary})")
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    from farm.warehouse import Warehouse, describe_holder

    _existing_folder(args.results)
    warehouse = Warehouse(args.results)
    problem = warehouse.not_a_warehouse()  # --fix would move its files: refused, nothing touched
    if problem:
        raise UserError(f"{problem}; farm check looks only at farm warehouses: pass --results DIR of one")
    if args.fix:
        from farm.dashboard.loader import refresh

        with warehouse.writer_lock():
            inspection = warehouse.inspect()
            done = warehouse.fix(inspection.findings)
            for sweep in warehouse.sweeps():
                refresh(warehouse.root, sweep)
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


def _existing_folder(results: str) -> None:
    path = Path(results)
    if path.exists() and not path.is_dir():
        raise UserError(f"--results {results} is a file, not a warehouse folder: pass --results DIR")
    if not path.is_dir():
        raise UserError(f"no warehouse at {results}/: run `farm sweep configs/resnet.toml` first, "
                        "or pass --results DIR")


def _require_sweep(results: str, sweep: str) -> None:
    from farm.warehouse import Warehouse

    _existing_folder(results)
    sweeps = Warehouse(results).sweeps()
    if sweep not in sweeps:
        known = ", ".join(sweeps) or "none yet"
        raise UserError(f"no sweep {sweep!r} in {results}/; sweeps: {known}")


def _console():
    """stdout; wide when it is a file or a pipe, so tables are not folded at 80 columns."""
    from rich.console import Console

    console = Console()
    return console if console.is_terminal else Console(width=160)


def _connect(results: str):
    """The warehouse and a DuckDB connection with its views (damaged files left out, with a warning)."""
    from farm.warehouse import Warehouse

    _existing_folder(results)
    warehouse = Warehouse(results)
    return warehouse, warehouse.connect()


def _print_rows(columns: list[str], rows: list[tuple[Any, ...]], fmt: str) -> None:
    if fmt == "json":
        print(json.dumps([dict(zip(columns, r)) for r in rows], default=str, indent=1))
    elif fmt == "csv":
        import csv

        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(columns)
        writer.writerows(rows)
        sys.stdout.write(buffer.getvalue())
    else:
        from farm.display import render_table

        _console().print(render_table(columns, rows))


COMMANDS = {"sweep": cmd_sweep, "query": cmd_query, "ingest": cmd_ingest, "graph": cmd_graph, "ls": cmd_ls,
            "show": cmd_show, "dashboard": cmd_dashboard, "report": cmd_report, "check": cmd_check}
