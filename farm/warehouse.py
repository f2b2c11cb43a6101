"""The warehouse: the only place results live.

Layout: `<root>/<sweep>/<table>/<key>.parquet`, one file per cell per table (per run for
`sweeps`, per device for `devices`), each written to a temporary name and renamed into place,
so a crash loses at most the cell in flight and never leaves half a file. A cell's `cells` file
is written last: a cell counts as done only once it exists, and `repair` removes what a killed
run left of a cell without it. DuckDB reads the files through one view per table.

One writer at a time: `farm sweep`, `farm ingest` and `farm check --fix` hold the warehouse's
writer lock (`Warehouse.writer_lock`, an flock on `<root>/.lock` that the kernel releases when
its process dies), and only a holder repairs, quarantines or removes leftovers.

Writers write only into a warehouse: a folder with the marker `<root>/.farm-warehouse` (written by
the first writer), an empty or new folder, or one an older farm wrote (its sweeps' files carry
farm's `farm.schema_version` Parquet metadata; the marker is then written). Any other folder is
refused before anything is touched (`not_a_warehouse`). Readers need no marker.

A damaged file costs only its cell: readers skip a file that is not whole Parquet with a
one-line warning naming it (DuckDB fails on it; only then are that table's files checked, by
their first and last bytes, ~15 µs a file), and writers move such a file to
`<root>/<sweep>/.damaged/`, with its cell's `cells` file, so that the next sweep measures the
cell again. `inspect` (`farm check`) also parses every footer and compares schemas.

Every column is listed with its unit in docs/warehouse.md (a test checks that).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import functools
import json
import os
import re
import shutil
import socket
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

if TYPE_CHECKING:
    import duckdb

    from farm.plan import Cell
    from farm.worker import CellResult

from farm.errors import UserError
from farm.files import os_reason, write_error
from farm.files import write_atomic as _write_atomic
from farm.layers.coverage import layer_coverage_percent

SCHEMA_VERSION = 1
CACHE_DIR_NAME = ".cache"
TEMP_DIR_NAME = "tmp"  # <root>/.cache/tmp/: every temporary file of a run (zoo, transforms, quantizer)
LOCK_NAME = ".lock"  # <root>/.lock: the writer lock; holds the holder's pid, host, command, start
MARKER_NAME = ".farm-warehouse"  # <root>/.farm-warehouse: JSON, farm's version and the schema version
DAMAGED_DIR_NAME = ".damaged"  # <root>/<sweep>/.damaged/<table>/: files moved aside by writers
KEPT_STATUSES = frozenset({"ok", "unsupported"})  # a rerun redoes failed and skipped cells
UNMEASURED = "an ok cell with no measurements file (left by a run killed while it moved a damaged file aside)"

_ts = pa.timestamp("us", tz="UTC")


def _schema(*fields: tuple[str, pa.DataType]) -> pa.Schema:
    return pa.schema([pa.field(n, t) for n, t in fields])


SCHEMAS: dict[str, pa.Schema] = {
    "sweeps": _schema(
        ("run_id", pa.string()), ("sweep_id", pa.string()), ("name", pa.string()), ("description", pa.string()),
        ("config_path", pa.string()), ("config_text", pa.string()), ("config_hash", pa.string()),
        ("farm_version", pa.string()), ("farm_commit", pa.string()), ("schema_version", pa.int32()),
        ("host", pa.string()), ("command", pa.string()), ("executor", pa.string()),
        ("cells_planned", pa.int32()), ("cells_to_run", pa.int32()), ("cells_resumed", pa.int32()),
        ("started_at", _ts), ("finished_at", _ts), ("planned_cell_ids", pa.list_(pa.string())),
    ),
    "cells": _schema(
        ("cell_id", pa.string()), ("sweep_id", pa.string()), ("run_id", pa.string()),
        ("model", pa.string()), ("model_source", pa.string()), ("model_sha256", pa.string()),
        ("model_bytes", pa.int64()), ("precision", pa.string()), ("batch", pa.int32()),
        ("profile", pa.string()), ("profile_ranges", pa.string()), ("backend", pa.string()),
        ("options", pa.string()), ("shapes", pa.string()), ("status", pa.string()),
        ("reason", pa.string()), ("traceback", pa.string()), ("notes", pa.string()),
        ("device_id", pa.string()), ("worker", pa.string()), ("host", pa.string()), ("cpu_model", pa.string()),
        ("cpu_cores", pa.int32()),
        ("versions", pa.string()), ("farm_version", pa.string()), ("farm_commit", pa.string()),
        ("config_hash", pa.string()), ("started_at", _ts), ("finished_at", _ts), ("duration_s", pa.float64()),
        ("ingested_on", pa.string()), ("attempts", pa.int32()), ("earlier_attempts", pa.string()),
    ),
    "builds": _schema(
        ("cell_id", pa.string()), ("build_s", pa.float64()),
        ("artifact_bytes", pa.int64()), ("cache_hits", pa.int64()), ("builder_peak_memory_bytes", pa.int64()),
        ("layers_before_fusion", pa.int32()), ("layers_after_fusion", pa.int32()),
        ("layers_with_reformats", pa.int32()), ("builder_peak_host_memory_bytes", pa.int64()),
        ("engine_host_persistent_bytes", pa.int64()), ("engine_device_persistent_bytes", pa.int64()),
        ("engine_scratch_bytes", pa.int64()), ("precision_transform_s", pa.float64()),
        ("precision_transform_cached", pa.bool_()), ("calibration", pa.string()),
        ("transform_summary", pa.string()), ("transform_tool", pa.string()), ("transform_tensors_fp16", pa.int32()),
        ("transform_nodes_kept_fp32", pa.int32()), ("transform_nodes_kept_fp32_range", pa.int32()),
        ("transform_subgraphs", pa.int32()), ("transform_qdq_pairs", pa.int32()),
        ("transform_quantized_nodes", pa.int32()),
    ),
    "measurements": _schema(
        ("cell_id", pa.string()), ("queries", pa.int64()),
        ("throughput_qps", pa.float64()), ("throughput_samples_per_s", pa.float64()),
        *[(f"latency_{s}_ms", pa.float64()) for s in ("min", "mean", "median", "p90", "p95", "p99", "max", "std")],
        ("latency_cv_percent", pa.float64()),
        *[(f"latency_p{p}_tail_samples", pa.int64()) for p in (90, 95, 99)],
        *[(f"{p}_{s}_ms", pa.float64()) for p in ("enqueue", "h2d", "compute", "d2h") for s in ("mean", "median")],
        ("compute_p99_ms", pa.float64()), ("host_walltime_ms", pa.float64()), ("repeats", pa.int32()),
        ("warmup_queries", pa.int32()), ("warmup_ms", pa.float64()),
        ("median_ci_low_ms", pa.float64()), ("median_ci_high_ms", pa.float64()), ("median_ci_method", pa.string()),
        ("repeat_spread_percent", pa.float64()), ("stable", pa.bool_()), ("max_cv_percent", pa.float64()),
        ("max_repeat_spread_percent", pa.float64()), ("layer_coverage_percent", pa.float64()),
        ("peak_memory_bytes", pa.int64()),
        ("latency_includes_transfers", pa.bool_()), ("timing_cuda_graph", pa.bool_()), ("timing_spin_wait", pa.bool_()),
        ("timing_streams", pa.int32()), ("timing_engine_version", pa.string()),
    ),
    "samples": _schema(
        ("cell_id", pa.string()), ("repeat", pa.int32()), ("iteration", pa.int32()),
        ("start_ms", pa.float64()), ("latency_ms", pa.float64()), ("enqueue_ms", pa.float64()),
        ("h2d_ms", pa.float64()), ("compute_ms", pa.float64()), ("d2h_ms", pa.float64()),
    ),
    "layers": _schema(
        ("cell_id", pa.string()), ("layer_index", pa.int32()), ("name", pa.string()),
        ("type", pa.string()), ("fused_ops", pa.string()), ("tactic", pa.string()),
        ("input_tensors", pa.string()), ("input_shapes", pa.string()), ("input_dtypes", pa.string()),
        ("output_tensors", pa.string()), ("output_shapes", pa.string()), ("output_dtypes", pa.string()),
        ("input_bytes", pa.int64()), ("weight_bytes", pa.int64()), ("output_bytes", pa.int64()),
        ("total_bytes", pa.int64()), ("macs", pa.int64()), ("calls", pa.int32()),
        ("time_avg_ms", pa.float64()), ("time_median_ms", pa.float64()), ("time_share_percent", pa.float64()),
        ("host_persistent_bytes", pa.int64()), ("device_persistent_bytes", pa.int64()), ("scratch_bytes", pa.int64()),
        ("kind", pa.string()),
    ),
    "accuracy": _schema(
        ("cell_id", pa.string()), ("output_name", pa.string()), ("reference", pa.string()), ("n", pa.int64()),
        ("elements", pa.int64()),
        ("max_abs_error", pa.float64()), ("max_rel_error", pa.float64()), ("mean_abs_error", pa.float64()),
        ("mean_rel_error", pa.float64()), ("cosine_similarity", pa.float64()), ("snr_db", pa.float64()),
        ("top1_agreement", pa.float64()), ("top5_agreement", pa.float64()), ("top1_ties", pa.int64()),
        ("tolerance", pa.string()), ("verdict", pa.string()), ("worst_metric", pa.string()),
        ("worst_value", pa.float64()),
    ),
    "devices": _schema(
        ("device_id", pa.string()), ("kind", pa.string()), ("name", pa.string()), ("host", pa.string()),
        ("uuid", pa.string()), ("compute_capability", pa.string()), ("sm_count", pa.int32()),
        ("memory_bytes", pa.int64()), ("memory_bus_width_bits", pa.int32()),
        ("clock_graphics_mhz", pa.int32()), ("clock_memory_mhz", pa.int32()),
        ("driver_version", pa.string()), ("cuda_version", pa.string()), ("cpu_cores", pa.int32()),
        ("os", pa.string()), ("visible_devices", pa.string()),
    ),
}
PER_CELL_TABLES = ("builds", "measurements", "samples", "layers", "accuracy")  # written before `cells`
_ENGINE_MEMORY = ("host_persistent_bytes", "device_persistent_bytes", "scratch_bytes")  # builds: engine_*
TABLES = tuple(SCHEMAS)


KEY_COLUMNS = {"sweeps": ("run_id", "sweep_id"), "devices": ("device_id",)}  # every other table: cell_id
PARQUET_MAGIC = b"PAR1"
Warn = Callable[[str], None]
_held: dict[Path, int] = {}  # writer locks this process holds (writer_lock nests within a process)
_GLOB_CHARS = re.compile(r"[*?\[\]{}]")
# farm's own temporary names: `.name.<pid>.tmp` (atomic writes; `.tmp.npz` for arrays) anywhere in
# the cache, and in the cache's temp area `name.<pid>.tmp` and quantize./verify. folders
_TEMP_FILE = re.compile(r"^\..+\.\d+\.tmp(\.npz)?$")
_TEMP_AREA_ENTRY = re.compile(r"^(\.?.+\.\d+\.tmp(\.npz)?|quantize\..+|verify\..+)$")
_WORK_ENTRY = re.compile(r"^[0-9a-f]{16}$")  # <cache>/work/<cell id>/


class WarehouseBusy(UserError):
    """Another process holds the warehouse's writer lock."""


class NotAWarehouse(UserError):
    """`--results` names a folder that farm did not write (and is not empty): writers refuse it."""


def warn_stderr(message: str) -> None:
    print(f"farm: warning: {message}", file=sys.stderr)


@dataclasses.dataclass(frozen=True)
class Finding:
    """Something `farm check` found: `damaged` (not whole Parquet, or not the table's schema),
    `orphan` (a cell's file with no `cells` file, or a file or folder of no table), `temp`
    (a temporary file an interrupted run left) or `unmeasured` (an ok cell's `cells` file with
    no measurements file: un-marked by --fix, so that the next sweep measures the cell again)."""

    kind: str
    path: Path
    reason: str
    sweep: str | None = None


@dataclasses.dataclass
class Inspection:
    findings: list[Finding]
    files_checked: int
    quarantined: int  # files already moved to .damaged folders
    in_progress: int  # temporary and unfinished-cell files left alone: a writer holds the lock
    holder: dict[str, Any] | None


@dataclasses.dataclass
class Prepared:
    """What a writer found before running a sweep (see `Warehouse.prepare_sweep`)."""

    moved: list[tuple[Path, str, Path]]  # (damaged file, why, where it went)
    removed: list[Path]  # files of cells a killed run left unfinished, and their temporary files
    statuses: dict[str, str]  # status of every finished cell, by cell id


class Warehouse:
    """A results folder: writes cell results atomically and opens DuckDB over them."""

    def __init__(self, root: str | Path, warn: Warn | None = None) -> None:
        # absolute, so that every path it names (to DuckDB, in `skipped`, in DuckDB's errors) is
        # spelled the same whatever the current folder; `..` and `.` removed, links kept
        self.root = Path(os.path.abspath(root))
        self.warn = warn or warn_stderr
        self.skipped: dict[Path, str] = {}  # damaged files readers skipped, with why

    @property
    def cache_dir(self) -> Path:
        """Zoo models, work folders and (later) engine and timing caches."""
        return self.root / CACHE_DIR_NAME

    @property
    def temp_dir(self) -> Path:
        """Where a run keeps its temporary files; emptied by the next writer (under the lock)."""
        return self.cache_dir / TEMP_DIR_NAME

    def table_dir(self, sweep: str, table: str) -> Path:
        return self.root / sweep / table

    # --- what is a warehouse ---------------------------------------------------------------------

    def not_a_warehouse(self) -> str | None:
        """Why a writer must not write `root`, or None when it is a warehouse: it has the marker,
        is empty or missing (only a lock file or cache counts as empty), holds a sweep an older
        farm wrote (a Parquet file of a sweep folder with farm's `farm.schema_version` metadata),
        or holds nothing but such warehouses (as `results/` holds `results/examples/`). Reads only."""
        root = self.root
        if not root.exists():
            return None
        if not root.is_dir():
            return f"--results {root} is a file, not a warehouse folder: pass --results DIR"
        if (root / MARKER_NAME).is_file():
            return None
        try:
            names = sorted(os.listdir(root))
        except OSError:
            return None  # writing it fails with one line of its own
        others = [n for n in names if n not in (LOCK_NAME, CACHE_DIR_NAME, MARKER_NAME)]
        if not others or self._written_by_farm():
            return None
        visible = [n for n in others if not n.startswith(".")]
        if visible and all((root / n).is_dir() and Warehouse(root / n)._is_marked_or_written() for n in visible):
            return None
        shown = ", ".join(others[:4]) + (", ..." if len(others) > 4 else "")
        return f"{root} is not a farm warehouse: it holds {shown} and no sweep farm wrote (no {MARKER_NAME})"

    def refuse_writer(self) -> None:
        """Raise, touching nothing, what `writer_lock` would: NotAWarehouse, or WarehouseBusy
        naming the writer that holds the lock now (a writer calls it before it plans)."""
        self._refuse_unless_warehouse()
        holder = self.lock_holder()
        if holder is not None:
            raise WarehouseBusy(self._busy(holder))

    def _refuse_unless_warehouse(self) -> None:
        problem = self.not_a_warehouse()
        if problem:
            if " is not a farm warehouse" in problem:
                problem += "; pass an empty or new folder to --results (nothing was written)"
            raise NotAWarehouse(problem)

    def _busy(self, holder: dict[str, Any] | None) -> str:
        return (f"{self.root} is being written by another farm command ({describe_holder(holder)}): wait until "
                "it finishes, or pass another --results folder")

    def _is_marked_or_written(self) -> bool:
        return (self.root / MARKER_NAME).is_file() or self._written_by_farm()

    def _written_by_farm(self) -> bool:
        """Whether a sweep folder holds a Parquet file farm wrote (its metadata says so): the
        first two files of each table are looked at."""
        for sweep_dir in self.sweep_dirs():
            for table in ("cells", *(t for t in TABLES if t != "cells")):
                for name in sorted(_parquet_names(sweep_dir / table))[:2]:
                    if file_problem(sweep_dir / table / name):  # a FIFO would block the read
                        continue
                    try:
                        metadata = pq.read_schema(sweep_dir / table / name).metadata or {}
                    except Exception:  # noqa: BLE001 - damaged or foreign: look at the next
                        continue
                    if b"farm.schema_version" in metadata:
                        return True
        return False

    def _mark(self) -> None:
        """Write the marker (a writer holding the lock, once)."""
        marker = self.root / MARKER_NAME
        if marker.is_file():
            return
        from farm import __version__

        text = json.dumps({"farm_version": __version__, "schema_version": SCHEMA_VERSION}) + "\n"
        write_file(marker, text)  # whole or not at all, one line when refused

    # --- one writer at a time -------------------------------------------------------------------

    @contextlib.contextmanager
    def writer_lock(self) -> Iterator[None]:
        """Hold the warehouse's writer lock for the block: `farm sweep`, `farm ingest` and
        `farm check --fix` write only while they hold it. Refuses (NotAWarehouse, one line, exit 2,
        nothing touched) a folder that is not a warehouse (`not_a_warehouse`). An flock on
        `<root>/.lock` (created, and the warehouse folder with it, if missing; readable and
        writable by whoever may write the folder, as the umask allows), which the kernel releases
        when the process dies, so a killed writer never leaves a stale lock; the holder's pid,
        host, command and start time are written into the file, and the marker if missing. Nests
        within one process. Raises WarehouseBusy (a UserError: one line, exit 2) naming the holder
        when another process holds it."""
        lock = self.root.resolve() / LOCK_NAME
        if lock in _held:
            _held[lock] += 1
            try:
                yield
            finally:
                _held[lock] -= 1
            return
        self._refuse_unless_warehouse()
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise write_error(self.root, exc) from None
        fd = self._open_locked(lock)
        try:
            record = {"pid": os.getpid(), "host": socket.gethostname(), "command": _command_line(),
                      "started_at": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")}
            with contextlib.suppress(OSError):  # a lock file of another user's, opened read-only: no record
                os.ftruncate(fd, 0)
                os.pwrite(fd, (json.dumps(record) + "\n").encode(), 0)
            self._mark()
            _held[lock] = 1
            try:
                yield
            finally:
                del _held[lock]
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, 0)
        finally:
            os.close(fd)  # releases the lock

    def _open_locked(self, lock: Path) -> int:
        """Open the lock file and take the lock: a descriptor holding it. Read-only where the file
        is another user's that this one may not write (flock needs no write access). A holder that
        names nobody is given a moment (`farm check` probes with a shared lock, and a writer writes
        its record right after it takes the lock) before this one gives up."""
        import fcntl
        import time

        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o666)
        except PermissionError:
            try:
                fd = os.open(lock, os.O_RDONLY)
            except OSError as exc:
                raise write_error(lock, exc) from None
        except OSError as exc:
            raise write_error(lock, exc) from None
        deadline = time.monotonic() + 2.0
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    return fd
                except BlockingIOError:
                    holder = _read_holder(fd, tries=1)
                    if holder or time.monotonic() > deadline:
                        raise WarehouseBusy(self._busy(holder)) from None
                    time.sleep(0.02)
                except OSError as exc:
                    raise UserError(f"cannot lock {lock}: {os.strerror(exc.errno) if exc.errno else exc}") from None
        except BaseException:
            os.close(fd)
            raise

    def lock_holder(self) -> dict[str, Any] | None:
        """Who holds the writer lock ({} if it does not say), or None when no other process does."""
        import fcntl

        lock = self.root.resolve() / LOCK_NAME
        if lock in _held:
            return None
        try:
            fd = os.open(lock, os.O_RDONLY)
        except OSError:
            return None
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                return _read_holder(fd)
            except OSError:
                return None
            fcntl.flock(fd, fcntl.LOCK_UN)
            return None
        finally:
            os.close(fd)

    def leftovers(self) -> list[Path]:
        """Temporary files and folders that runs left (killed, or failed before cleaning up), by
        farm's own names only: in the cache's temp area `name.<pid>.tmp` files and `quantize.*`,
        `verify.*` folders, in its work area the folders named by a cell id, `.name.<pid>.tmp`
        files anywhere in the cache, and temporary files in the sweeps' table folders. Leftovers
        only while no writer holds the lock."""
        found: list[Path] = []
        cache = self.cache_dir
        areas = {cache / TEMP_DIR_NAME: _TEMP_AREA_ENTRY, cache / "work": _WORK_ENTRY}
        for area, names in areas.items():
            if area.is_dir() and not area.is_symlink():
                found += sorted(p for p in area.iterdir() if names.match(p.name))
        if cache.is_dir() and not cache.is_symlink():
            found += sorted(p for p in cache.rglob(".*.tmp*") if _TEMP_FILE.match(p.name)
                            and not any(a in p.parents for a in areas) and not p.is_dir())
        for sweep_dir in self.sweep_dirs():
            for table in TABLES:
                found += sorted(p for p in (sweep_dir / table).glob(".*.tmp") if _TEMP_FILE.match(p.name))
        return found

    def remove_leftovers(self) -> list[Path]:
        """Remove `leftovers()`; only while holding the writer lock."""
        removed = self.leftovers()
        for path in removed:
            _remove(path)
        return removed

    # --- resume ---------------------------------------------------------------------------------

    def repair(self, sweep: str) -> list[Path]:
        """Remove temporary files and rows of cells that a killed run left unfinished (only while
        holding the writer lock: a running sweep's files look just the same)."""
        removed = []
        sweep_dir = self.root / sweep
        if not sweep_dir.is_dir():
            return removed
        for table in TABLES:
            for tmp in (sweep_dir / table).glob(".*.tmp"):
                tmp.unlink(missing_ok=True)
                removed.append(tmp)
        finished = {p.stem for p in self.table_dir(sweep, "cells").glob("*.parquet")}
        for table in PER_CELL_TABLES:
            for path in self.table_dir(sweep, table).glob("*.parquet"):
                if path.stem not in finished:
                    path.unlink(missing_ok=True)
                    removed.append(path)
        return removed

    def prepare_sweep(self, sweep: str) -> Prepared:
        """What a writer does before it runs cells of `sweep` (holding the writer lock): move every
        damaged file aside (quarantine: its cell is measured again), remove what a killed run
        left of unfinished cells, and read the status of every finished cell."""
        damaged = [(path, problem) for table in TABLES for path in self._table_files(sweep, table)
                   if (problem := file_problem(path))]
        moved = []
        for path, problem in damaged:
            moved += [(path, problem, to) for source, to in self.quarantine(sweep, path) if source == path]
        statuses, unreadable = self._read_statuses(sweep)
        for path, problem in unreadable:  # whole at both ends, yet unreadable or of another schema
            moved += [(path, problem, to) for source, to in self.quarantine(sweep, path) if source == path]
        for path in self.unmeasured(sweep, statuses):  # measured again
            moved += [(path, UNMEASURED, to) for source, to in self.quarantine(sweep, path) if source == path]
            statuses.pop(path.stem, None)
        return Prepared(moved, self.repair(sweep), statuses)

    def unmeasured(self, sweep: str, statuses: dict[str, str] | None = None) -> list[Path]:
        """`cells` files of ok cells that have no measurements file (an older farm, killed while
        it quarantined a cell's file, left them so): un-marked, they are measured again. Ingested
        cells are left out (an ingested engine may have no measurement)."""
        measured = _parquet_names(self.table_dir(sweep, "measurements"))
        candidates = [p for p in self._table_files(sweep, "cells") if p.name not in measured]
        found = []
        for path in candidates:
            if statuses is not None and statuses.get(path.stem, "ok") != "ok" or file_problem(path):
                continue
            try:
                row = pq.read_table(path, columns=["status", "run_id"]).to_pylist()
            except Exception:  # noqa: BLE001 - damaged: found as such
                continue
            if row and row[0]["status"] == "ok" and row[0]["run_id"] != "ingest":
                found.append(path)
        return found

    def quarantine(self, sweep: str, path: Path) -> list[tuple[Path, Path]]:
        """Move a damaged file (or a folder of no table) to `<root>/<sweep>/.damaged/`, keeping its
        table folder's name; for a file of a cell, that cell's `cells` file goes too, so the cell
        counts as not done and the next sweep measures it again: it goes first, as `write_cell`
        un-marks a cell before it touches its files, so that a kill in between never leaves a
        done cell without the file. Only while holding the writer lock. Returns (from, to) of
        every move."""
        sources = [path]
        if _is_cell_file(path):
            sources.insert(0, self.table_dir(sweep, "cells") / path.name)
        moves = []
        for source in sources:
            if not os.path.lexists(source):
                continue
            target_dir = self.root / sweep / DAMAGED_DIR_NAME
            if source.parent != self.root / sweep:
                target_dir = target_dir / source.parent.name
            target_dir.mkdir(parents=True, exist_ok=True)
            target = _free_name(target_dir / source.name)
            os.replace(source, target)
            moves.append((source, target))
        return moves

    def cell_statuses(self, sweep: str) -> dict[str, str]:
        """Status of every finished cell of a sweep, by cell id (unreadable `cells` files skipped,
        with a warning)."""
        statuses, unreadable = self._read_statuses(sweep)
        for path, problem in unreadable:
            self.skip(path, problem)
        return statuses

    def _read_statuses(self, sweep: str) -> tuple[dict[str, str], list[tuple[Path, str]]]:
        files = [p for p in self._table_files(sweep, "cells") if p not in self.skipped]
        if not files:
            return {}, []
        try:  # one read for all files; file by file only when one of them fails
            table = pq.read_table(files if len(files) > 1 else files[0], columns=["cell_id", "status"])
            return dict(zip(table.column("cell_id").to_pylist(), table.column("status").to_pylist())), []
        except Exception:  # noqa: BLE001 - which file: see below
            pass
        statuses, unreadable = {}, []
        for path in files:
            try:
                table = pq.read_table(path, columns=["cell_id", "status"])
            except FileNotFoundError:
                continue
            except Exception as exc:  # noqa: BLE001 - any reason a file cannot be read makes it damaged
                unreadable.append((path, f"unreadable: {_first_line(exc)}"))
                continue
            statuses.update(zip(table.column("cell_id").to_pylist(), table.column("status").to_pylist()))
        return statuses, unreadable

    def _table_files(self, sweep: str, table: str) -> list[Path]:
        directory = self.table_dir(sweep, table)
        return [directory / name for name in sorted(_parquet_names(directory))]

    def sweep_dirs(self) -> list[Path]:
        """The sweeps' folders: the root's folders, dot folders aside, that hold at least one table
        folder (others are not sweeps: a nested warehouse, say, is left alone). The one rule every
        reader and writer goes by."""
        try:
            entries = sorted(p for p in self.root.iterdir() if not p.name.startswith(".") and p.is_dir())
        except OSError:
            return []
        return [p for p in entries if any((p / t).is_dir() for t in TABLES)]

    # --- checking -------------------------------------------------------------------------------

    def inspect(self) -> Inspection:
        """Every damaged file (not whole Parquet, footer unreadable, or not its table's schema),
        orphaned file and leftover temporary file of the warehouse: what `farm check` lists.
        Reads every file's footer (about 0.3 ms a file). While a writer holds the lock, its
        temporary files and unfinished cells are counted as in progress, not as findings."""
        holder = self.lock_holder()
        findings: list[Finding] = []
        checked = quarantined = in_progress = 0
        for sweep_dir in self.sweep_dirs():
            sweep = sweep_dir.name
            cells_present = _parquet_names(sweep_dir / "cells")
            for entry in sorted(sweep_dir.iterdir()):
                if entry.name == DAMAGED_DIR_NAME:
                    quarantined += sum(1 for p in entry.rglob("*") if p.is_file())
                    continue
                if entry.name not in TABLES or not entry.is_dir():
                    what = "folder" if entry.is_dir() else "file"
                    findings.append(Finding("orphan", entry, f"a {what} of no warehouse table", sweep))
                    continue
                for path in sorted(entry.iterdir()):
                    if path.name.startswith(".") and ".tmp" in path.name:
                        if holder is not None:
                            in_progress += 1
                        else:
                            findings.append(Finding("temp", path, "temporary file of an interrupted write", sweep))
                        continue
                    if not path.name.endswith(".parquet") or not path.is_file():
                        findings.append(Finding("orphan", path, f"not a Parquet file of the {entry.name} table",
                                                sweep))
                        continue
                    if entry.name in PER_CELL_TABLES and path.name not in cells_present:
                        if holder is not None:
                            in_progress += 1
                        else:
                            findings.append(Finding("orphan", path, "no cells file: left by an interrupted run",
                                                    sweep))
                        continue
                    checked += 1
                    problem = file_problem(path) or schema_problem(path, entry.name)
                    if problem:
                        findings.append(Finding("damaged", path, problem, sweep))
            damaged = {f.path for f in findings}
            findings += [Finding("unmeasured", path, UNMEASURED, sweep) for path in self.unmeasured(sweep)
                         if path not in damaged and (sweep_dir / "measurements" / path.name) not in damaged]
        cache = self.cache_dir.absolute()
        for path in self.leftovers():
            if cache in path.absolute().parents:  # those of the table folders are listed above
                if holder is not None:
                    in_progress += 1
                else:
                    findings.append(Finding("temp", path, "temporary file or folder of an interrupted run"))
        return Inspection(findings, checked, quarantined, in_progress, holder)

    def fix(self, findings: list[Finding]) -> list[tuple[Finding, str]]:
        """Resolve what `inspect` found (only while holding the writer lock): damaged files are
        quarantined (their cells then count as not done), orphaned files and files of no table
        moved to `.damaged` too, unmeasured cells un-marked (their `cells` file moved there), and
        temporary files removed. Returns what was done to each."""
        done = []
        sweeps = set()
        for finding in findings:
            if finding.kind in ("damaged", "orphan", "unmeasured"):
                moves = sorted(self.quarantine(finding.sweep, finding.path), key=lambda m: m[0] != finding.path)
                where = ", ".join(str(to.relative_to(self.root)) for _, to in moves) or "already gone"
                extra = " with its cell's cells file (measured again by the next sweep)" if len(moves) > 1 else \
                    " (un-marked: the next sweep measures the cell again)" if finding.kind == "unmeasured" else ""
                done.append((finding, f"moved to {where}{extra}"))
                sweeps.add(finding.sweep)
            else:
                _remove(finding.path)
                done.append((finding, "removed"))
        for sweep in sorted(s for s in sweeps if s):
            for path in self.repair(sweep):  # the other files of the cells un-marked above
                done.append((Finding("orphan", path, "a file of a cell un-marked above", sweep), "removed"))
        return done

    # --- writing --------------------------------------------------------------------------------

    def write_sweep_run(self, row: dict[str, Any]) -> None:
        self._write("sweeps", row["sweep_id"], row["run_id"], [row])

    def write_cell(self, cell: Cell, result: CellResult, run_id: str, config_hash: str) -> None:
        """Write every table of one cell; the `cells` row goes last, marking the cell done."""
        sweep = cell.sweep
        # A rerun replaces a cell: un-mark it done first, so a kill in between leaves no done cell
        # with missing or stale rows (repair then removes the leftovers).
        for table in ("cells", *PER_CELL_TABLES):
            path = self.table_dir(sweep, table) / f"{cell.cell_id}.parquet"
            try:
                path.unlink(missing_ok=True)
            except OSError as exc:
                raise write_error(path, exc) from None
        if result.build is not None and result.status == "ok":
            build = {("engine_" + k if k in _ENGINE_MEMORY else k): v for k, v in vars(result.build).items()}
            self._write("builds", sweep, cell.cell_id, [{"cell_id": cell.cell_id, **build}])
        if result.measurement is not None and result.status == "ok":
            coverage = layer_coverage_percent(result.layers, result.measurement)  # farm.layers.coverage
            self._write("measurements", sweep, cell.cell_id, [{"cell_id": cell.cell_id, **result.measurement,
                                                               "layer_coverage_percent": coverage}])
        if result.samples is not None and result.status == "ok":
            self._write_table("samples", sweep, cell.cell_id, _samples_table(cell, result))
        if result.accuracy and result.status == "ok":
            self._write("accuracy", sweep, cell.cell_id, [{"cell_id": cell.cell_id, **row} for row in result.accuracy])
        if result.layers and result.status == "ok":
            self._write("layers", sweep, cell.cell_id, _layer_rows(cell, result))
        if result.device is not None:
            self._write("devices", sweep, result.device["device_id"], [result.device])
        self._write("cells", sweep, cell.cell_id, [_cell_row(cell, result, run_id, config_hash)])

    def _write(self, table: str, sweep: str, key: str, rows: list[dict[str, Any]]) -> None:
        schema = SCHEMAS[table]
        columns = {f.name: [r.get(f.name) for r in rows] for f in schema}
        self._write_table(table, sweep, key, pa.table(columns, schema=schema))

    def _write_table(self, table_name: str, sweep: str, key: str, table: pa.Table) -> None:
        directory = self.table_dir(sweep, table_name)
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise write_error(directory, exc) from None
        table = table.replace_schema_metadata({"farm.schema_version": str(SCHEMA_VERSION)})
        write_atomic(table, directory / f"{key}.parquet")

    # --- reading --------------------------------------------------------------------------------

    def latest_plan(self, sweep: str) -> list[str] | None:
        """The cell ids the sweep's latest recorded run planned; None where no run recorded them
        (older warehouses, ingested sweeps). Unreadable `sweeps` files are skipped, with a warning."""
        latest: tuple | None = None
        for path in self._table_files(sweep, "sweeps"):
            if path in self.skipped:
                continue
            try:
                table = pq.read_table(path)
            except FileNotFoundError:
                continue
            except Exception as exc:  # noqa: BLE001 - any reason a file cannot be read makes it damaged
                self.skip(path, f"unreadable: {_first_line(exc)}")
                continue
            if "planned_cell_ids" not in table.column_names:
                continue
            for row in table.select(["started_at", "planned_cell_ids"]).to_pylist():
                if row["planned_cell_ids"] is not None and (latest is None or row["started_at"] > latest[0]):
                    latest = (row["started_at"], row["planned_cell_ids"])
        return None if latest is None else list(latest[1])

    def sweeps(self) -> list[str]:
        """The sweeps' names (`sweep_dirs`)."""
        return [p.name for p in self.sweep_dirs()]

    def connect(self) -> duckdb.DuckDBPyConnection:
        """An in-memory DuckDB with one view per table over the warehouse's readable Parquet files."""
        import duckdb

        con = duckdb.connect(":memory:")
        self.create_views(con)
        return con

    def table_globs(self, table: str) -> list[str]:
        """One glob per sweep that has files of `table`: views list them so that DuckDB never has
        to list the warehouse's root (the SQL console allows reading those folders only)."""
        return [str(folder / table / "*.parquet") for folder in self.sweep_dirs()
                if _parquet_names(folder / table)]

    def create_views(self, con: duckdb.DuckDBPyConnection) -> None:
        """Create (or replace) one view per table in `con`; an empty typed view where the table
        has no file. Damaged files are left out, each with a one-line warning."""
        for table in SCHEMAS:
            self._create_view(con, table)

    def fetch(self, con: duckdb.DuckDBPyConnection, sql: str,
              params: Any = None) -> tuple[list[str] | None, list[tuple[Any, ...]]]:
        """Run `sql` on a connection with this warehouse's views: (column names, rows), or (None, [])
        for a statement without a result. A file that turns out unreadable only now (its ends are
        whole, its insides are not) is left out with a warning and the query run again."""
        import duckdb

        seen = set()
        while True:
            try:
                cursor = con.execute(sql, params)
                if cursor.description is None:
                    return None, []
                return [d[0] for d in cursor.description], cursor.fetchall()
            except duckdb.Error as exc:
                if str(exc) in seen or not self._skip_file_of(exc):
                    raise
                seen.add(str(exc))
                self.create_views(con)

    def _create_view(self, con: duckdb.DuckDBPyConnection, table: str) -> None:
        import duckdb

        checked = footers_checked = False
        seen = set()
        while True:
            sources = self._sources(table)
            if not sources:
                con.register(f"_empty_{table}", SCHEMAS[table].empty_table())
                con.execute(f"CREATE OR REPLACE VIEW {table} AS SELECT * FROM _empty_{table}")
                return
            files = ", ".join(f"'{sql_string(s)}'" for s in sources)
            source = f"read_parquet([{files}], union_by_name = true)"
            select = "SELECT DISTINCT ON (device_id) *" if table == "devices" else "SELECT *"  # devices: one file
            try:  # per sweep that used the device
                con.execute(f"CREATE OR REPLACE VIEW {table} AS {select} FROM {source}")
                return
            except duckdb.Error as exc:
                # Binding reads every file's footer (union_by_name), so a damaged file fails here:
                # only then are the table's files checked (their ends, ~15 µs a file), all at once;
                # and if DuckDB names no file (a garbled footer: "TProtocolException: Invalid
                # data"), their footers are parsed (~0.2 ms a file).
                repeated = str(exc) in seen
                seen.add(str(exc))
                if not checked:
                    checked = True
                    newly = False
                    for path in self._files(table):
                        if path not in self.skipped and (problem := file_problem(path)):
                            self.skip(path, problem)
                            newly = True
                    if newly or self._skip_file_of(exc, skip_new=False):
                        continue
                if not repeated and self._skip_file_of(exc):
                    continue
                if not footers_checked:
                    footers_checked = True
                    if self.skip_unreadable_footers(self._files(table)):
                        continue
                raise

    def skip_unreadable_footers(self, paths: Iterable[Path]) -> bool:
        """Skip those of `paths` whose footer does not parse; whether any was newly skipped."""
        newly = False
        for path in paths:
            if path in self.skipped or file_problem(path):
                continue
            try:
                pq.read_metadata(path)
            except FileNotFoundError:
                continue
            except Exception as exc:  # noqa: BLE001 - whatever pyarrow says about the footer
                self.skip(path, f"unreadable footer: {_first_line(exc)}")
                newly = True
        return newly

    def _files(self, table: str) -> list[Path]:
        return [path for sweep in self.sweep_dirs() for path in self._table_files(sweep.name, table)]

    def _sources(self, table: str) -> list[str]:
        """What a view reads, as DuckDB globs (glob characters in the path escaped): per sweep
        folder, its glob, or where it holds a file found damaged or not a regular file (a FIFO
        would block the read), its other files by name."""
        sources = []
        for folder in self.sweep_dirs():
            directory = folder / table
            names = _parquet_names(directory, regular=False)
            for name, regular in names.items():
                if not regular:
                    self.skip(directory / name, "not a regular file")
            if any(p.parent == directory for p in self.skipped):
                sources += [duckdb_glob_escape(str(directory / n)) for n in sorted(names)
                            if directory / n not in self.skipped]
            elif names:
                sources.append(duckdb_glob_escape(str(directory)) + "/*.parquet")
        return sources

    def skip(self, path: Path, problem: str) -> None:
        """Note that readers leave `path` out, with a one-line warning (once per file)."""
        if path not in self.skipped:
            self.skipped[path] = problem
            self.warn(f"skipped damaged file {path} ({problem}); `farm check --fix` moves it aside")

    def _skip_file_of(self, exc: Exception, skip_new: bool = True) -> bool:
        """Whether the error names a file of this warehouse that a retry can do without: one that
        is gone (a writer replaced it), skipped already, or (`skip_new`), now skipped, damaged."""
        for path in parquet_files_named(exc, self.root):
            if not path.exists() or path in self.skipped:
                return True
            if skip_new:
                self.skip(path, _first_line(exc))
                return True
        return False


def file_problem(path: str | Path) -> str | None:
    """Why `path` is not a whole Parquet file, or None (also when it is gone): its size, the magic
    bytes at both ends and the footer length, about 12 µs a file. A truncated, emptied or
    overwritten file fails this; `schema_problem` parses the footer itself. Opened without
    blocking, so that a FIFO or device is "not a regular file" instead of a hang."""
    import stat

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"cannot open it: {os_reason(exc)}"
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return "not a regular file"
        size = st.st_size
        if size < 12:
            return f"not a Parquet file: {size} bytes"
        head, tail = os.pread(fd, 4, 0), os.pread(fd, 8, size - 8)
    except OSError as exc:
        return f"cannot read it: {os_reason(exc)}"
    finally:
        os.close(fd)
    if tail[4:] != PARQUET_MAGIC:
        return "not a whole Parquet file: no footer at its end (truncated or overwritten)"
    if head != PARQUET_MAGIC:
        return "not a Parquet file: its first bytes are not PAR1"
    if int.from_bytes(tail[:4], "little") + 12 > size:
        return "not a whole Parquet file: its footer is longer than the file"
    return None


def schema_problem(path: str | Path, table: str) -> str | None:
    """Why a whole Parquet file is not a file of `table`, or None: its footer unreadable, its key
    column missing, a column of a type the table's cannot take, or no other column of the table.
    Columns an older farm wrote under other names, or not at all, are fine. About 0.2 ms a file."""
    try:
        schema = pq.read_schema(path)
    except FileNotFoundError:
        return None
    except Exception as exc:  # noqa: BLE001 - whatever pyarrow says about the footer
        return f"unreadable footer: {_first_line(exc)}"
    found = dict(zip(schema.names, schema.types))
    keys = KEY_COLUMNS.get(table, ("cell_id",))
    missing = [k for k in keys if k not in found]
    if missing:
        return f"wrong schema: no {', '.join(missing)} column, so not a file of the {table} table"
    kinds = _table_kinds(table)
    for name, type_ in found.items():
        if name in kinds and _kind(type_) not in (None, kinds[name]):
            return f"wrong schema: column {name} is {type_}, the {table} table's is {SCHEMAS[table].field(name).type}"
    if not (found.keys() & kinds.keys()) - set(keys):
        return f"wrong schema: no column of the {table} table besides {', '.join(keys)}"
    return None


@functools.cache
def _table_kinds(table: str) -> dict[str, str | None]:
    return {f.name: _kind(f.type) for f in SCHEMAS[table]}


def _kind(t: pa.DataType) -> str | None:
    """The family a column type belongs to: values cast within a family (None: a null column)."""
    if pa.types.is_dictionary(t):
        t = t.value_type
    if pa.types.is_null(t):
        return None
    if pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t):
        return "number"
    if pa.types.is_string(t) or pa.types.is_large_string(t) or getattr(pa.types, "is_string_view", bool)(t):
        return "string"
    if pa.types.is_timestamp(t) or pa.types.is_date(t):
        return "time"
    if pa.types.is_list(t) or pa.types.is_large_list(t):  # the item field's name varies by writer
        return f"list<{_kind(t.value_type)}>"
    return str(t)


def write_atomic(table: pa.Table, path: Path) -> None:
    """Write a warehouse Parquet file whole or not at all, flushed to disk (farm.files)."""
    _write_atomic(path, lambda tmp: pq.write_table(table, tmp), fsync=True)


def write_file(path: Path, data: bytes | str) -> None:
    """Write an output file (a report, a graph) whole or not at all (farm.files)."""
    _write_atomic(path, data)


def sql_string(text: str) -> str:
    """`text` escaped for use inside a single-quoted SQL literal."""
    return text.replace("'", "''")


def describe_holder(holder: dict[str, Any] | None) -> str:
    if not holder:
        return "it did not say which"
    return (f"pid {holder.get('pid', '?')} on {holder.get('host', '?')} since {holder.get('started_at', '?')}: "
            f"{holder.get('command', '?')}")


def _read_holder(fd: int, tries: int = 3) -> dict[str, Any]:
    for _ in range(tries):  # the holder writes its record right after it takes the lock
        try:
            record = json.loads(os.pread(fd, 4096, 0) or b"null")
            if isinstance(record, dict):
                return record
        except (OSError, ValueError):
            pass
        if tries > 1:
            import time

            time.sleep(0.05)
    return {}


def _command_line() -> str:
    argv = list(sys.argv) or ["python"]
    program = Path(argv[0])
    name = "farm" if program.name == "farm" or program.parts[-2:] == ("farm", "__main__.py") else program.name
    return " ".join([name, *argv[1:]])[:1000]


def _parquet_names(directory: Path, regular: bool = True) -> Any:
    """Names of the table files in `directory` (not temporary files), none if it is missing;
    with `regular=False`, a dict of every such name to whether it is a regular file (a link to
    one counts)."""
    try:
        with os.scandir(directory) as entries:
            found = {e.name: e for e in entries if e.name.endswith(".parquet") and not e.name.startswith(".")}
            if regular:
                return set(found)
            return {name: _is_regular(entry) for name, entry in found.items()}
    except (FileNotFoundError, NotADirectoryError):
        return set() if regular else {}


def _is_regular(entry: os.DirEntry) -> bool:
    try:
        return entry.is_file()
    except OSError:
        return False


def duckdb_glob_escape(path: str) -> str:
    """`path` as a DuckDB glob that matches only itself: `*`, `?` and `[` each in a class of its
    own (DuckDB reads every name it is given as a glob)."""
    return re.sub(r"([*?\[])", r"[\1]", path)


def parquet_files_named(exc: BaseException | str, root: Path) -> list[Path]:
    """The Parquet files under `root` that a DuckDB error names (quoted). The echo of the SQL
    that DuckDB adds (`LINE 1: ... '<dir>/*.parquet'`) names globs, escaped ones included:
    names with glob characters below `root` are left out. Shared by every reader."""
    found = []
    for match in re.finditer(r"""["']([^"']+\.parquet)["']""", str(exc)):
        path = Path(match.group(1))
        if root not in path.parents or _GLOB_CHARS.search(str(path.relative_to(root))):
            continue
        if path not in found:
            found.append(path)
    return found


def _is_cell_file(path: Path) -> bool:
    return path.parent.name in PER_CELL_TABLES and path.name.endswith(".parquet")


def _free_name(path: Path) -> Path:
    """`path`, or `name.1.parquet`, `name.2.parquet`, ... if it is taken."""
    candidate, n = path, 0
    while os.path.lexists(candidate):
        n += 1
        candidate = path.with_name(f"{path.stem}.{n}{path.suffix}")
    return candidate


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(OSError):
            path.unlink()


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _cell_row(cell: Cell, result: CellResult, run_id: str, config_hash: str) -> dict[str, Any]:
    duration = (result.finished_at - result.started_at).total_seconds() \
        if result.started_at and result.finished_at else None
    return {
        "cell_id": cell.cell_id, "sweep_id": cell.sweep, "run_id": run_id,
        "model": cell.model.name, "model_source": cell.model.source, "model_sha256": cell.model.sha256,
        "model_bytes": cell.model.size_bytes, "precision": cell.precision, "batch": cell.batch,
        "profile": cell.profile.name if cell.profile else None,
        "profile_ranges": cell.profile.describe() if cell.profile else None,
        "backend": cell.backend, "options": json.dumps(cell.options, sort_keys=True),
        "shapes": json.dumps({k: list(v) for k, v in cell.input_shapes.items()}),
        "status": result.status, "reason": result.reason, "traceback": result.traceback, "notes": cell.notes,
        "device_id": result.device["device_id"] if result.device else None,
        "worker": _describe_worker(result.worker),
        "host": result.host.get("host"), "cpu_model": result.host.get("cpu_model"),
        "cpu_cores": result.host.get("cpu_cores"), "versions": json.dumps(result.versions, sort_keys=True),
        "farm_version": result.versions.get("farm"), "farm_commit": result.farm_commit,
        "config_hash": config_hash, "started_at": result.started_at, "finished_at": result.finished_at,
        "duration_s": duration, "attempts": result.attempts,
        "earlier_attempts": "; ".join(result.earlier_attempts) or None,
    }


def _describe_worker(worker: dict[str, Any] | None) -> str | None:
    if not worker:
        return None
    text = f"{worker.get('kind', '?')} worker pid {worker.get('pid')} on {worker.get('host')}"
    if worker.get("cell_pid"):
        text += f", cell process pid {worker['cell_pid']}"
    if worker.get("kind") == "cuda":
        text += f", Ray GPU {','.join(worker.get('gpu_ids') or []) or '?'}, " \
                f"CUDA_VISIBLE_DEVICES={worker.get('visible_devices')}"
    return text


def _samples_table(cell: Cell, result: CellResult) -> pa.Table:
    s = result.samples
    n = len(s)
    iteration = np.empty(n, dtype=np.int32)
    for r in np.unique(s.repeat):  # iteration counts within each repeat
        mask = s.repeat == r
        iteration[mask] = np.arange(mask.sum(), dtype=np.int32)

    def optional(values: np.ndarray | None) -> pa.Array:
        return pa.nulls(n, pa.float64()) if values is None else pa.array(values, pa.float64(), from_pandas=True)

    return pa.table({
        "cell_id": pa.array([cell.cell_id] * n, pa.string()),
        "repeat": pa.array(s.repeat, pa.int32()),
        "iteration": pa.array(iteration, pa.int32()),
        "start_ms": pa.array(s.start_ms, pa.float64()),
        "latency_ms": pa.array(s.latency_ms, pa.float64()),
        "enqueue_ms": optional(s.enqueue_ms), "h2d_ms": optional(s.h2d_ms),
        "compute_ms": optional(s.compute_ms), "d2h_ms": optional(s.d2h_ms),
    }, schema=SCHEMAS["samples"])


def _shapes(shapes: Iterable[list[int] | None]) -> str:
    return ", ".join("?" if s is None else "x".join(str(d) for d in s) or "scalar" for s in shapes)


def _layer_rows(cell: Cell, result: CellResult) -> list[dict[str, Any]]:
    from farm.layers.coverage import default_kind
    from farm.layers.memory import total_bytes

    averages = [layer.time_avg_ms if layer.time_avg_ms is not None else
                float(np.mean(layer.times_ms)) if layer.times_ms else None for layer in result.layers]
    total_time = sum(a for a in averages if a is not None)
    rows = []
    for layer, avg in zip(result.layers, averages):
        median = layer.time_median_ms if layer.time_median_ms is not None else \
            float(np.median(layer.times_ms)) if layer.times_ms else None
        share = layer.time_share_percent if layer.time_share_percent is not None else \
            100.0 * avg / total_time if avg is not None and total_time > 0 else None
        rows.append({
            "cell_id": cell.cell_id, "layer_index": layer.index, "name": layer.name, "type": layer.type,
            "fused_ops": layer.fused_ops, "tactic": layer.tactic,
            "input_tensors": json.dumps(layer.input_tensors), "output_tensors": json.dumps(layer.output_tensors),
            "input_shapes": _shapes(layer.input_shapes), "input_dtypes": ", ".join(layer.input_dtypes),
            "output_shapes": _shapes(layer.output_shapes), "output_dtypes": ", ".join(layer.output_dtypes),
            "input_bytes": layer.input_bytes, "weight_bytes": layer.weight_bytes, "output_bytes": layer.output_bytes,
            "total_bytes": total_bytes([layer.input_bytes, layer.weight_bytes, layer.output_bytes]),
            "macs": layer.macs, "calls": layer.calls if layer.calls is not None else len(layer.times_ms),
            "time_avg_ms": avg, "time_median_ms": median, "time_share_percent": share,
            "host_persistent_bytes": layer.host_persistent_bytes,
            "device_persistent_bytes": layer.device_persistent_bytes, "scratch_bytes": layer.scratch_bytes,
            "kind": layer.kind or default_kind(cell.backend),  # ingested engines: 'engine layer'
        })
    return rows
