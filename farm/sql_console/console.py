"""The dashboard's SQL console: DuckDB over the warehouse, unable to write to it by construction.

Three locks, each enough for what it guards, and a wall around them (4):

1. DuckDB opens no warehouse file. Each table is a pyarrow dataset over the table's Parquet
   files, registered in an in-memory DuckDB: pyarrow reads the files (a dataset scan cannot
   write) and DuckDB's own file access is off with no allowed directory or file, the
   configuration locked. DuckDB can write one place only, the spill folder it insists on
   allowing: a fresh temporary folder outside the warehouse, capped by
   `max_temp_directory_size`, removed when the connection closes. External access is turned
   off after connecting: off at connect, DuckDB 2.0 allows writing `:memory:` files in the
   working directory. Not chosen: `allowed_paths` naming each Parquet file (DuckDB lets a
   `COPY ... (USE_TMP_FILE false)` overwrite an allowed file), and copying the tables into
   memory (4 to 11 s before every query at 1,000 cells, against 0.1 s to set up the datasets;
   whole queries are 2 to 3 times faster than through DuckDB's reader: docs/dashboard.md). The
   cost: a query cannot name a file (`read_parquet('<results>/...')`); the tables are the way in.
2. Only a query, as DuckDB's parser sees it: one statement, a SELECT (with `FROM`-first,
   DESCRIBE, SUMMARIZE, SHOW TABLES, PIVOT with an `IN` list, UNPIVOT), or EXPLAIN of one,
   which the console runs as a plain EXPLAIN it builds itself (EXPLAIN ANALYZE would run its
   statement). The parse tree (`json_serialize_sql`) may name the warehouse's tables, its own
   CTEs and a few table functions, and no function that shows settings (they hold the spill
   folder's path) or writes a log.
3. Limits: rows and bytes returned (fetching stops at either), time (the query is
   interrupted), DuckDB's memory, spill space and threads. DuckDB's Arrow conversion builds a
   batch of rows before the byte limit sees it, outside DuckDB's memory limit: very wide rows
   still cost a batch of them at once (`SELECT range(10000000) FROM range(3000)`, 80 MB rows,
   passed 8 GB in this process before the wall below).
4. The wall: `Console` runs the queries in a child process, one long-lived child per console
   (started by its first query), whose address space is capped at PROCESS_MEMORY_LIMIT
   (`RLIMIT_AS`, set by the child on itself before it imports DuckDB or pyarrow; Linux). The
   statement is checked in the parent; the child runs it in a fresh Sandbox and sends Arrow IPC
   back. A query that reaches the cap fails with an out-of-memory error, or its process dies
   (killed, aborted); either way the user reads one line ("the query needed more memory than the
   console allows (4 GB): ...") and the next query gets a fresh child. The parent kills a child
   that has not answered by the time limit plus GRACE_S. A child ends with its console (closed or
   collected), at its parent's exit, after IDLE_EXIT_S without a query, and soon after its
   parent's death, SIGKILL included: it checks its parent's pid five times a second
   (PR_SET_PDEATHSIG fires when the *thread* that started the child ends, and Streamlit runs every
   page run on a new thread). Where `resource.RLIMIT_AS` cannot be set (Windows; macOS accepts it
   without enforcing it), the child runs without the cap and locks 1 to 3 hold as before.

Errors are one line, with the warehouse's and the spill folder's paths replaced by `<results>`
and `<temp>`. Locks 1 and 2 live in farm/sql_console/sandbox.py (farm query goes through the same gate);
this module is the console: limits (3) and the query process (4).
"""

from __future__ import annotations

import atexit
import dataclasses
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from pathlib import Path
from typing import TYPE_CHECKING

# The sandbox (locks 1 and 2) is farm/sql_console/sandbox.py's; its names are this console's API too.
from farm.sql_console.process import IDLE_EXIT_STATUS, time_message
from farm.sql_console.sandbox import QueryRefused, Sandbox, check_statement, one_line, sandboxed_connection

if TYPE_CHECKING:  # pandas is imported where a frame is made: the query process never makes one
    import pandas as pd

__all__ = ["Console", "QueryRefused", "QueryResult", "Sandbox", "check_statement", "run_query",
           "sandboxed_connection"]

DEFAULT_ROW_LIMIT = 10_000
DEFAULT_BYTE_LIMIT = 50 * 2**20  # Arrow bytes, as DuckDB hands them over; the browser gets about as much
DEFAULT_TIME_LIMIT_S = 30.0  # a GROUP BY over 1,000,000 layer rows in 10,000 files takes ~8 s on 2 cores
# The query process's address space (RLIMIT_AS), in bytes: an idle child takes ~0.7 GB of it,
# DuckDB's MEMORY_LIMIT 2 GB more, the rest is for results and what DuckDB's limit misses.
PROCESS_MEMORY_LIMIT = 4 * 10**9
GRACE_S = 30.0  # past the time limit, the parent kills a query process that has not answered
START_LIMIT_S = 120.0  # for a new query process to import DuckDB and pyarrow and say it is ready
IDLE_EXIT_S = 600.0  # a query process with no query for this long ends; the next query starts one


@dataclasses.dataclass
class QueryResult:
    frame: pd.DataFrame
    truncated: bool  # cut at the row or the byte limit: only the first rows are in `frame`
    seconds: float
    byte_limited: bool = False  # the cut was the byte limit


def run_query(root: str | Path, sql: str, row_limit: int = DEFAULT_ROW_LIMIT,
              time_limit_s: float = DEFAULT_TIME_LIMIT_S, byte_limit: int = DEFAULT_BYTE_LIMIT,
              **limits) -> QueryResult:
    """Run one read-only query over the warehouse in this process's shared `Console`; raises
    QueryRefused with a one-line reason. `limits`: Sandbox's memory_limit, spill_limit and threads."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = Console()
        console = _shared
    return console.run_query(root, sql, row_limit=row_limit, time_limit_s=time_limit_s, byte_limit=byte_limit,
                             **limits)


class Console:
    """Runs console queries in one long-lived child process (started at the first query) whose
    address space is capped at `memory_limit` bytes (RLIMIT_AS, where the system has it). The
    statement is checked here; the child runs it in a fresh Sandbox and sends back Arrow IPC.
    One query at a time per console; `close` (or collection, or this process's exit) ends the
    child."""

    def __init__(self, memory_limit: int = PROCESS_MEMORY_LIMIT, grace_s: float = GRACE_S,
                 idle_exit_s: float = IDLE_EXIT_S) -> None:
        self.memory_limit, self.grace_s, self.idle_exit_s = int(memory_limit), grace_s, idle_exit_s
        self._lock = threading.Lock()
        self._process: subprocess.Popen | None = None
        self._conn = None
        self._spill: str | None = None  # the spill folder of the query under way
        self.walled = True  # the child capped its address space (False where the system cannot)
        _consoles.add(self)

    @property
    def pid(self) -> int | None:
        """The query process's pid while it runs (None before the first query and after a death)."""
        process = self._process
        return process.pid if process is not None and process.poll() is None else None

    def run_query(self, root: str | Path, sql: str, row_limit: int = DEFAULT_ROW_LIMIT,
                  time_limit_s: float = DEFAULT_TIME_LIMIT_S, byte_limit: int = DEFAULT_BYTE_LIMIT,
                  **limits) -> QueryResult:
        """As the module's run_query, in this console's query process."""
        import pyarrow as pa

        statement = check_statement(sql)
        temp = Path(tempfile.gettempdir()).resolve()
        if temp.is_relative_to(Path(root).resolve()):  # before anything is made there
            raise QueryRefused(f"the temporary folder {temp} is inside the warehouse: "
                               "set TMPDIR to a folder outside it")
        request = {"root": os.path.abspath(root), "sql": statement, "row_limit": int(row_limit),
                   "time_limit_s": float(time_limit_s), "byte_limit": int(byte_limit), "limits": limits}
        with self._lock:
            started = time.perf_counter()
            self._spill = request["spill"] = tempfile.mkdtemp(prefix="farm-sql-")
            try:
                header, payload = self._ask(request, time_limit_s + self.grace_s)
            finally:
                shutil.rmtree(self._spill, ignore_errors=True)
                self._spill = None
        if "memory" in header:
            raise QueryRefused(self._memory_message(header["memory"]))
        if "error" in header:
            raise QueryRefused(header["error"])
        table = pa.ipc.open_stream(pa.py_buffer(payload)).read_all()
        cut = header["cut"]
        return QueryResult(_frame(table), bool(cut), time.perf_counter() - started, byte_limited=cut == "bytes")

    def close(self) -> None:
        """End the query process (at once, even mid-query) and remove its spill folder."""
        self._stop()
        if self._spill:
            shutil.rmtree(self._spill, ignore_errors=True)

    def _stop(self) -> None:
        process, conn, self._process, self._conn = self._process, self._conn, None, None
        if conn is not None:
            conn.close()
        if process is not None:
            if process.poll() is None:
                process.kill()
            process.wait()

    def __enter__(self) -> Console:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - at interpreter exit, modules may be gone
            pass

    def _ask(self, request: dict, timeout_s: float) -> tuple[dict, bytes]:
        """Send `request` to the query process (started if need be) and read its answer; a process
        that dies is reaped, and its death is the answer."""
        for _attempt in range(2):
            self._start()
            conn = self._conn  # `close` from another thread (at exit) closes it under our feet: OSError
            try:
                conn.send_bytes(json.dumps(request).encode())
                if not conn.poll(timeout_s):
                    self._stop()
                    raise QueryRefused(time_message(request["time_limit_s"]))
                header = json.loads(conn.recv_bytes())
                payload = conn.recv_bytes()
            except (EOFError, OSError):
                status = self._reap()
                if status == IDLE_EXIT_STATUS:  # it ended for want of queries as this one came: start another
                    continue
                return {"memory": f"its process ended ({_status_text(status)})"}, b""
            if header.pop("retire", False):  # it ran out of memory: the next query gets a fresh process
                self._reap()
            return header, payload
        raise QueryRefused("the console's query process ended as the query was sent: run it again")

    def _start(self) -> None:
        if self._process is not None and self._process.poll() is None:
            return
        from multiprocessing.connection import Connection

        self._stop()
        ours, theirs = socket.socketpair()
        # The limit counts address space reserved, not only memory used: glibc reserves 64 MB per
        # arena (up to 8 per core), pyarrow's mimalloc 1 GiB at a time. Reserved less, an idle
        # query process takes ~0.65 GB of address space rather than ~2.6 GB.
        env = dict(os.environ, MALLOC_ARENA_MAX="2", MIMALLOC_ARENA_RESERVE="64MiB")
        package_root = str(Path(__file__).resolve().parents[2])
        paths = [package_root, *(os.path.abspath(p) for p in env.get("PYTHONPATH", "").split(os.pathsep) if p)]
        env["PYTHONPATH"] = os.pathsep.join(paths)  # the child runs in "/"
        try:
            self._process = subprocess.Popen(
                [sys.executable, "-c", _CHILD, str(theirs.fileno()), str(os.getpid()), str(self.memory_limit),
                 str(self.idle_exit_s)], pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, cwd="/", env=env)
        except OSError as exc:
            ours.close()
            raise QueryRefused(f"the console's query process did not start: {one_line(exc)}") from None
        finally:
            theirs.close()
        self._conn = Connection(ours.detach())
        try:
            if not self._conn.poll(START_LIMIT_S):
                raise QueryRefused(f"the console's query process did not start within {START_LIMIT_S:g} s")
            hello = json.loads(self._conn.recv_bytes())
        except (EOFError, OSError):
            status = self._reap()
            raise QueryRefused("the console's query process did not start: it ended "
                               f"({_status_text(status)}) within its memory limit of "
                               f"{_gigabytes(self.memory_limit)}") from None
        except QueryRefused:
            self._stop()
            raise
        self.walled = hello.get("walled", False)

    def _reap(self) -> int | None:
        """Close the connection, wait for the process to end (killing it if it does not within 10 s),
        and return its exit status."""
        process = self._process
        status = None
        if process is not None:
            try:
                status = process.wait(10)
            except subprocess.TimeoutExpired:
                pass
        self._stop()
        return status if status is not None else (process.returncode if process is not None else None)

    def _memory_message(self, detail: str) -> str:
        needed = (f"the query needed more memory than the console allows ({_gigabytes(self.memory_limit)})"
                  if self.walled else "the query ran out of memory (this system has no per-process limit)")
        return f"{needed}: {detail}; narrow it (a WHERE, fewer or narrower columns, a LIMIT)"


_consoles: weakref.WeakSet[Console] = weakref.WeakSet()
_shared: Console | None = None
_shared_lock = threading.Lock()


@atexit.register
def _close_consoles() -> None:
    for console in list(_consoles):
        console.close()


# The query process: its address space capped first, before anything is imported; Ctrl-C in a
# terminal reaches the whole process group, and the query process ends with the dashboard.
_CHILD = """import sys
fd, parent, limit, idle = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
walled = False
try:
    import resource
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    walled = sys.platform != "darwin"  # macOS accepts the limit and does not enforce it
except (ImportError, AttributeError, ValueError, OSError):
    pass
import signal
signal.signal(signal.SIGINT, signal.SIG_IGN)
from farm.sql_console.process import serve
serve(fd, parent, walled, idle)
"""


def _status_text(status: int | None) -> str:
    if status is None:
        return "status unknown"
    if status < 0:
        try:
            return signal.Signals(-status).name
        except ValueError:
            return f"signal {-status}"
    return f"exit status {status}"


def _gigabytes(size: int) -> str:
    return f"{size / 1e9:g} GB"


def _frame(table) -> pd.DataFrame:
    import pandas as pd
    import pyarrow as pa

    table = table.rename_columns(_unique(table.column_names))
    try:
        return table.to_pandas()
    except pa.ArrowNotImplementedError:  # a type pandas has no column for (a UNION): Python objects there
        columns = {}
        for name, column in zip(table.column_names, table.columns):
            try:
                columns[name] = column.to_pandas()
            except pa.ArrowNotImplementedError:
                columns[name] = pd.Series(column.to_pylist(), dtype=object)
        return pd.DataFrame(columns)


def _unique(columns: list[str]) -> list[str]:
    """Column names made unique (SELECT a.x, b.x gives two 'x'), as a table display needs."""
    seen: dict[str, int] = {}
    out = []
    for name in columns:
        seen[name] = seen.get(name, 0) + 1
        out.append(name if seen[name] == 1 else f"{name}_{seen[name]}")
    return out


