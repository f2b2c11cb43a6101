"""`farm sweep SWEEP_FILE`: build and measure every cell into the warehouse, resuming."""

from __future__ import annotations

import argparse
import math
import re

from farm.cli.common import AddCommand, console, table_width
from farm.display import capped, shown
from farm.errors import UserError


def add(add: AddCommand) -> None:
    """The `sweep` subparser (`add` gives it --results)."""
    p = add("sweep", "Run a sweep file: build and measure every cell, resuming cells already in the warehouse.")
    p.add_argument("config", help="sweep file (TOML), e.g. configs/resnet.toml")
    p.add_argument("--force", action="store_true", help="rerun cells that are already in the warehouse")
    p.add_argument("--sweep", default=None, metavar="NAME",
                   help="record the run as sweep NAME instead of the file's name, e.g. nightly-$(date +%%F): each "
                        "run then stays beside the others, and farm history follows them")
    p.add_argument("--cells", nargs="+", default=None, metavar="ID",
                   help="run only the cells whose id starts with one of these (as `farm show` prints them); "
                        "with --force, measure them again")
    p.add_argument("--executor", default="ray", choices=["ray", "local"],
                   help="where cells run: 'ray' (default) on Ray actors, one per GPU and one per node for CPU "
                        "cells; 'local' one by one in this process, for debugging (host-bound GPU cells time "
                        "slower there: take figures with 'ray')")
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


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from farm.cli.sweep_table import SUMMARY_DROP_ORDER, failed_cells, summary_table
    from farm.display import INCONCLUSIVE_ADVICE, SPEEDUP_LEGEND, fitted_table, printable
    from farm.executor import DEFAULT_CELL_TIMEOUT_S, DEFAULT_WORKER_MEMORY, parse_memory_limit
    from farm.queries import serving_answers
    from farm.sweep import run_sweep
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
                        worker_memory=worker_memory, cell_timeout_s=timeout or None, only=args.cells,
                        sweep_name=args.sweep)
    out = console()
    warehouse = Warehouse(args.results)
    columns, rows, notes = summary_table(warehouse, outcome)
    table, hidden = fitted_table(columns, rows, table_width(out), SUMMARY_DROP_ORDER, title=f"sweep {outcome.sweep}")
    out.print(table)
    if any(r[columns.index("speedup")] not in (None, "base") for r in rows) and "speedup" not in hidden:
        out.print(SPEEDUP_LEGEND, highlight=False, markup=False)
        if any(str(r[columns.index("speedup")]).endswith(" ?") for r in rows):
            out.print(INCONCLUSIVE_ADVICE, highlight=False, markup=False)
    if hidden:
        out.print(f"(hidden at {table_width(out)} columns: {', '.join(hidden)}; farm show {outcome.sweep} --wide)",
                  highlight=False, markup=False)
    for number, note in enumerate(notes, 1):
        out.print(f"[{number}] {printable(capped(note))}", highlight=False, markup=False)
    for answer in serving_answers(warehouse, warehouse.connect(), outcome.sweep, [c.cell_id for c in outcome.cells]):
        out.print(printable(answer), highlight=False, markup=False)
    if outcome.failed:
        err = Console(stderr=True)
        err.print(f"[red]{len(outcome.failed)} cell(s) failed:[/red]")
        for label, reason in failed_cells(outcome):
            err.print(f"  {shown(label)}: {shown(capped(reason or ''))}", highlight=False)
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
