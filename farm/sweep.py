"""`farm sweep`: config -> plan -> executor -> warehouse, with resume and a summary."""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
import secrets
import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from rich.console import Console

from farm import __version__
from farm.callbacks import Callback, CallbackList
from farm.cell_runner import run_cell
from farm.config import NAME_HINT, NAME_PATTERN, LoadedConfig, load_config
from farm.cuda import visible_gpu_count
from farm.display import ProgressDisplay, shown
from farm.errors import UserError
from farm.executor import DEFAULT_CELL_TIMEOUT_S, DEFAULT_WORKER_MEMORY, Executor, library_logs, make_executor
from farm.executor.costs import expected_seconds, history_from_rows
from farm.plan import Plan, plan_sweep
from farm.provenance import farm_commit, host_info
from farm.records import Cell, CellResult
from farm.warehouse import KEPT_STATUSES, SCHEMA_VERSION, Warehouse
from farm.warehouse.rows import write_cell_result


class WarehouseWriter(Callback):
    """Writes each result the moment it arrives, so a crash loses at most the cell in flight."""

    def __init__(self, warehouse: Warehouse, run_id: str, config_hash: str) -> None:
        self.warehouse, self.run_id, self.config_hash = warehouse, run_id, config_hash

    def on_cell_result(self, cell: Cell, result: CellResult) -> None:
        write_cell_result(self.warehouse, cell, result, self.run_id, self.config_hash)


@dataclasses.dataclass
class SweepOutcome:
    sweep: str
    run_id: str
    cells: list[Cell]
    ran: int
    resumed: int
    failed: dict[str, str]  # cell id -> reason, of every cell of the plan the warehouse holds as failed

    @property
    def exit_code(self) -> int:
        return 1 if self.failed else 0


# libraries' log records never fail on a stream a capture closed (no "--- Logging error ---"
# tracebacks on the terminal), and a cell's go to its log (farm.executor.library_logs)
@library_logs.installed()
def run_sweep(config_path: str | Path, results: str | Path, *, force: bool = False, executor: str = "ray",
              address: str | None = None, retries: int = 2, gpus: int | None = None,
              worker_memory: str = DEFAULT_WORKER_MEMORY, cell_timeout_s: float | None = DEFAULT_CELL_TIMEOUT_S,
              console: Console | None = None, only: Sequence[str] | None = None,
              sweep_name: str | None = None) -> SweepOutcome:
    """Run a sweep file into the warehouse at `results`, skipping cells it already holds; with
    `only`, just the planned cells whose id starts with one of those prefixes; with `sweep_name`,
    as a sweep of that name instead of the file's (a nightly run kept beside the others: farm history)."""
    console = console or Console(stderr=True)
    loaded = load_config(config_path)
    if sweep_name is not None:
        if not re.fullmatch(NAME_PATTERN, sweep_name):
            raise UserError(f"--sweep {sweep_name!r}: {NAME_HINT}, at most 64, starting with a letter or digit")
        loaded = loaded.named(sweep_name)
    warehouse = Warehouse(Path(results).resolve())  # absolute: workers may run in other folders
    # A folder that is not a warehouse, or one another writer holds, is refused now, with nothing
    # touched; then the sweep is planned before the lock is taken, so that a mistake in the sweep
    # file (a ConfigError) leaves nothing written, not even the lock file. (Planning writes only
    # zoo models into the cache, each whole or not at all.)
    warehouse.refuse_writer()
    runner = make_executor(executor, address=address, max_retries=retries, gpus=gpus,
                           worker_memory=worker_memory, cell_timeout_s=cell_timeout_s)
    planned = plan_while_workers_start(loaded, warehouse, runner, early=executor == "ray" and bool(
        address or visible_gpu_count()))
    # One writer at a time: a second sweep (or ingest) on this warehouse stops here, naming this
    # one; and what looks like leftovers (temporary files, unfinished cells) is nobody's work in
    # progress while we hold the lock.
    try:
        chosen = planned.cells if only is None else _chosen(planned, only)
        with warehouse.writer_lock():
            leftovers = warehouse.remove_leftovers()
            if leftovers:
                console.print(f"[yellow]removed {len(leftovers)} temporary file(s) left by an interrupted run"
                              "[/yellow]", soft_wrap=True)
            try:
                return _run_locked(loaded, planned, warehouse, console, runner, force=force, executor=executor,
                                   address=address, chosen=chosen)
            finally:
                warehouse.remove_leftovers()  # what this run's cells left in the temp area, even when it failed
    finally:
        runner.close()  # workers started early and never used: the lock refused, or nothing to run


def _chosen(plan: Plan, prefixes: Sequence[str]) -> list[Cell]:
    """The planned cells whose id starts with one of `prefixes` (`--cells`, the ids `farm show`
    prints); a prefix that names no planned cell is a mistake, said before anything runs."""
    chosen = [c for c in plan.cells if any(p and c.cell_id.startswith(p) for p in prefixes)]
    unknown = [p for p in prefixes if not p or not any(c.cell_id.startswith(p) for c in chosen)]
    if unknown:
        raise UserError(f"--cells {' '.join(repr(p) for p in unknown)}: no cell of sweep {plan.sweep!r} has such an "
                        f"id (`farm show {plan.sweep}` lists them; the sweep file plans {len(plan.cells)})")
    return chosen


def plan_while_workers_start(loaded: LoadedConfig, warehouse: Warehouse, runner: Executor, early: bool) -> Plan:
    """Plan the sweep. With `early` (Ray, on a GPU machine or a cluster) and a sweep the warehouse
    has never run, the GPU workers start meanwhile: Ray, the actors, and in each actor's cell
    process the engines' imports and the GPU's CUDA context overlap model generation, instead of
    following it and then slowing every GPU's first cell. A rerun (resume) plans first, as it may
    have nothing to run."""
    if not early or warehouse.table_files(loaded.config.name, "sweeps"):
        return plan_sweep(loaded, warehouse.cache_dir)
    with ThreadPoolExecutor(1, thread_name_prefix="farm-plan") as pool:
        planning = pool.submit(plan_sweep, loaded, warehouse.cache_dir)
        try:
            runner.start_gpu_workers()
            return planning.result()
        except BaseException:
            runner.close()  # a ConfigError, Ctrl-C: nothing left running (the pool waits for the plan)
            raise


def _run_locked(loaded: LoadedConfig, plan: Plan, warehouse: Warehouse, console: Console, runner: Executor, *,
                force: bool, executor: str, address: str | None, chosen: list[Cell]) -> SweepOutcome:
    prepared = warehouse.prepare_sweep(plan.sweep)
    for path, problem, moved_to in prepared.moved:
        table = path.parent.name
        consequence = ("its cell is measured again" if table not in ("sweeps", "devices") else
                       "the device's row is written again when a cell of this sweep next runs on it"
                       if table == "devices" else "that run's record is lost")
        console.print(f"[yellow]moved damaged file {shown(path)} to {shown(moved_to.parent)}/ ({shown(problem)}): "
                      f"{consequence}[/yellow]",
                      highlight=False, soft_wrap=True)
    if prepared.removed:
        console.print(f"[yellow]removed {len(prepared.removed)} file(s) left by an interrupted run[/yellow]")
    existing = {} if force else prepared.statuses
    todo = [c for c in chosen if existing.get(c.cell_id) not in KEPT_STATUSES]
    resumed = len(chosen) - len(todo)
    console.print(f"sweep [bold]{shown(plan.sweep)}[/bold]: {len(plan.cells)} cells"
                  + (f", {len(chosen)} chosen by --cells" if chosen is not plan.cells else "") + f", {len(todo)} to run"
                  + (f", {resumed} already in {shown(warehouse.root)}" if resumed else ""))
    for note in plan.notes():  # what planning chose that the sweep file did not say (also on the cells)
        console.print(f"[yellow]note: {shown(note)}[/yellow]", highlight=False, soft_wrap=True)

    run_id = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ-") + secrets.token_hex(3)
    planned = [c.cell_id for c in plan.cells]
    # a rerun with nothing to do writes nothing at all, unless its plan is not the one recorded
    # last (a narrowed sweep file): then a run row records the plan, so `farm show` follows it
    if not todo and warehouse.latest_plan(plan.sweep) in (planned, None):
        return SweepOutcome(plan.sweep, run_id, plan.cells, 0, resumed, _failed(warehouse, plan.cells))
    sweep_row = {
        "run_id": run_id, "sweep_id": plan.sweep, "name": loaded.config.name,
        "description": loaded.config.description, "config_path": str(loaded.path), "config_text": loaded.text,
        "config_hash": loaded.config_hash, "farm_version": __version__, "farm_commit": farm_commit(),
        "schema_version": SCHEMA_VERSION, "host": host_info()["host"], "command": " ".join(sys.argv),
        "executor": executor + (f" {address}" if address else ""), "cells_planned": len(plan.cells), "cells_to_run": len(todo),
        "cells_resumed": resumed, "started_at": dt.datetime.now(dt.UTC), "finished_at": None,
        # what this plan is: a changed sweep file (or a farm that names cells differently) leaves
        # the earlier plan's cells beside these; `farm show` shows this plan's unless asked
        "planned_cell_ids": planned,
    }
    if not todo:  # only the plan to record: a run that ran nothing
        warehouse.write_sweep_run({**sweep_row, "finished_at": sweep_row["started_at"]})
        return SweepOutcome(plan.sweep, run_id, plan.cells, 0, resumed, _failed(warehouse, plan.cells))
    warehouse.write_sweep_run(sweep_row)
    callbacks = CallbackList([WarehouseWriter(warehouse, run_id, loaded.config_hash), ProgressDisplay(console)])
    callbacks.on_sweep_start(todo)
    try:
        _run_cells(todo, runner, warehouse, callbacks)
    finally:
        callbacks.on_sweep_end()
    warehouse.write_sweep_run({**sweep_row, "finished_at": dt.datetime.now(dt.UTC)})
    warehouse.consolidate(plan.sweep)  # the dashboard's consolidated copy, so its first load is quick

    return SweepOutcome(plan.sweep, run_id, plan.cells, len(todo), resumed, _failed(warehouse, plan.cells))



def _run_cells(todo: list[Cell], runner: Executor, warehouse: Warehouse, callbacks: CallbackList) -> None:
    """Run `todo`: first, here, the cells planning already knows cannot run (a fixed batch, a
    precision the backend lacks), recorded and said at once (they need no worker, and queued
    longest-first they came last); then the rest on the executor, longest expected first."""
    for cell in (c for c in todo if c.unsupported_reason):
        callbacks.on_cell_start(cell)
        callbacks.on_cell_result(cell, run_cell(cell, warehouse.cache_dir))
    rest = [c for c in todo if not c.unsupported_reason]
    if rest:
        runner.expected_s = expected_seconds(rest, _durations(warehouse))
        runner.run(rest, warehouse.cache_dir, callbacks)

# How long each (model, backend, options, precision, batch) took in earlier sweeps: the
# scheduler's cost model (farm.executor.costs) orders the longest expected cells first.
DURATIONS_SQL = """SELECT model_sha256, backend, options, precision, batch, median(duration_s)
FROM cells WHERE status = 'ok' AND duration_s IS NOT NULL AND model_sha256 IS NOT NULL
GROUP BY model_sha256, backend, options, precision, batch"""


def _durations(warehouse: Warehouse) -> dict:
    """The warehouse's history of cell durations (empty where it cannot be read: only the order
    of the cells depends on it)."""
    try:
        return history_from_rows(warehouse.fetch(warehouse.connect(), DURATIONS_SQL)[1])
    except Exception:  # noqa: BLE001 - a warehouse without cells, or one being repaired
        return {}


def _failed(warehouse: Warehouse, cells: list[Cell]) -> dict[str, str]:
    """cell id -> reason of every planned cell that the warehouse holds as failed."""
    reasons = warehouse.failure_reasons(cells[0].sweep) if cells else {}  # compacted cells too
    return {cell.cell_id: reasons[cell.cell_id] or "unknown error" for cell in cells if cell.cell_id in reasons}
