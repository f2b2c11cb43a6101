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
and `<temp>`.
"""

from __future__ import annotations

import atexit
import dataclasses
import functools
import json
import os
import re
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

from farm.warehouse import SCHEMAS, TABLES, Warehouse, file_problem

if TYPE_CHECKING:  # pandas is imported where a frame is made: the query process never makes one
    import pandas as pd

DEFAULT_ROW_LIMIT = 10_000
DEFAULT_BYTE_LIMIT = 50 * 2**20  # Arrow bytes, as DuckDB hands them over; the browser gets about as much
DEFAULT_TIME_LIMIT_S = 30.0  # a GROUP BY over 1,000,000 layer rows in 10,000 files takes ~8 s on 2 cores
MEMORY_LIMIT = "2GB"
SPILL_LIMIT = "4GB"
THREADS = max(1, min(4, os.cpu_count() or 1))  # a shared dashboard: a console query takes a few cores
BATCH_ROWS = 1024  # rows per Arrow batch fetched: the byte limit is checked this often
# The query process's address space (RLIMIT_AS), in bytes: an idle child takes ~0.7 GB of it,
# DuckDB's MEMORY_LIMIT 2 GB more, the rest is for results and what DuckDB's limit misses.
PROCESS_MEMORY_LIMIT = 4 * 10**9
GRACE_S = 30.0  # past the time limit, the parent kills a query process that has not answered
START_LIMIT_S = 120.0  # for a new query process to import DuckDB and pyarrow and say it is ready
IDLE_EXIT_S = 600.0  # a query process with no query for this long ends; the next query starts one

# Table functions a query may call; every other one (duckdb_settings(), glob(), query(),
# enable_logging(), ...) shows the server's configuration, runs SQL from a string, or writes.
# The file readers stay so that a path reads as DuckDB's own refusal (lock 1).
TABLE_FUNCTIONS = frozenset({
    "range", "generate_series", "unnest", "repeat", "repeat_row", "json_each", "json_tree",
    "read_text", "read_blob", "read_csv", "read_csv_auto", "read_json", "read_json_auto", "read_ndjson",
    "read_ndjson_auto", "read_parquet", "parquet_scan"})
HIDDEN_FUNCTIONS = frozenset({"current_setting", "write_log", "sleep_ms"})  # settings; a log; a stall
SHOW_LISTS = frozenset({'"tables"', "__show_tables_expanded"})  # SHOW TABLES, SHOW ALL TABLES


class QueryRefused(Exception):
    """A statement the console does not run, or one that failed; the message is one line."""


@dataclasses.dataclass
class QueryResult:
    frame: pd.DataFrame
    truncated: bool  # cut at the row or the byte limit: only the first rows are in `frame`
    seconds: float
    byte_limited: bool = False  # the cut was the byte limit


class Sandbox:
    """An in-memory DuckDB whose views read the warehouse through pyarrow; DuckDB itself can open
    no file outside its private spill folder (a fresh temporary folder, or `temp_dir`, an empty
    one made for it). `close` removes that folder."""

    def __init__(self, root: str | Path, memory_limit: str = MEMORY_LIMIT, spill_limit: str = SPILL_LIMIT,
                 threads: int = THREADS, temp_dir: str | Path | None = None) -> None:
        import duckdb
        import pyarrow.dataset as ds

        self.root = Path(root).resolve()
        self.memory_limit, self.spill_limit = memory_limit, spill_limit
        self.temp_dir = Path(temp_dir or tempfile.mkdtemp(prefix="farm-sql-")).resolve()
        self.con = None
        self._root_given = root
        if self.temp_dir.is_relative_to(self.root):
            self.close()
            raise QueryRefused(f"the temporary folder {self.temp_dir.parent} is inside the warehouse: "
                               "set TMPDIR to a folder outside it")
        try:
            self.con = duckdb.connect(":memory:", config={"autoinstall_known_extensions": False,
                                                          "autoload_known_extensions": False,
                                                          "threads": threads})  # not one per core first
            warehouse = Warehouse(self.root)
            for table in TABLES:
                # A damaged file is left out (the pages list it), as every other reader does.
                files = [str(p) for glob in warehouse.table_globs(table)
                         for p in sorted(Path(glob).parent.glob("*.parquet"))
                         if not p.name.startswith(".") and file_problem(p) is None]
                # Files an older farm wrote lack newer columns (read as nulls) or have older types (cast).
                source = ds.dataset(files, schema=SCHEMAS[table], format="parquet") if files \
                    else SCHEMAS[table].empty_table()
                view = self.con.from_arrow(source)
                if table == "devices":  # one file per sweep that used the device
                    view = view.query("_files", "SELECT DISTINCT ON (device_id) * FROM _files")
                view.create_view(table)
            spill = str(self.temp_dir)
            for setting, value in (("enable_progress_bar", False), ("python_enable_replacements", False),
                                   ("threads", threads), ("memory_limit", memory_limit),
                                   ("temp_directory", spill), ("max_temp_directory_size", spill_limit),
                                   # no setting names a folder outside the spill folder
                                   ("secret_directory", f"{spill}/secrets"),
                                   ("extension_directory", f"{spill}/extensions"),
                                   ("enable_external_access", False), ("lock_configuration", True)):
                self.con.execute(f"SET {setting} = ?", [value])
        except BaseException:
            self.close()
            raise

    def execute(self, sql: str, parameters=None):
        return self.con.execute(sql, parameters)

    def sql(self, sql: str):
        return self.con.sql(sql)

    def interrupt(self) -> None:
        self.con.interrupt()

    def close(self) -> None:
        try:
            if self.con is not None:
                self.con.close()
        finally:
            shutil.rmtree(self.temp_dir, ignore_errors=True)

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def scrub(self, text: str) -> str:
        """`text` without this machine's paths of the warehouse and the spill folder."""
        return _scrub(text, self._root_given, self.temp_dir)


def _scrub(text: str, root: str | Path, temp_dir: str | Path) -> str:
    """`text` with the warehouse's paths (as given and resolved) as `<results>` and the spill
    folder's as `<temp>`."""
    paths = {(str(Path(temp_dir).resolve()), "<temp>"), (str(temp_dir), "<temp>"),
             (str(Path(root).resolve()), "<results>"), (str(Path(root).absolute()), "<results>")}
    for path, placeholder in sorted(paths, key=lambda p: -len(p[0])):  # one path may contain another
        text = text.replace(path, placeholder)
    return text


def sandboxed_connection(root: str | Path, **limits) -> Sandbox:
    """A read-only DuckDB over the warehouse's tables (see `Sandbox`); close it when done."""
    return Sandbox(root, **limits)


def check_statement(sql: str) -> str:
    """The statement to run for `sql`: one query reading only what the console allows; raises
    QueryRefused otherwise. EXPLAIN comes back rebuilt as a plain EXPLAIN of the checked query."""
    import duckdb

    kind = _one_statement(sql).type
    if kind == duckdb.StatementType.EXPLAIN:
        inner = _after_first_token(sql)
        try:
            plain = _first_word(sql) == "explain" and _one_statement(inner).type == duckdb.StatementType.SELECT
        except QueryRefused:
            plain = False
        if not plain:
            raise QueryRefused("EXPLAIN ANALYZE and EXPLAIN options are not allowed (they run the statement or "
                               "are not a query): write EXPLAIN SELECT ...")
        _check_tree(inner)
        return f"EXPLAIN {inner}"
    if kind == duckdb.StatementType.MULTI and _first_word(sql) in ("pivot", "unpivot"):
        raise QueryRefused("a PIVOT without an IN list is not allowed (DuckDB creates a type for it first): "
                           "name the values, e.g. PIVOT cells ON precision IN ('fp16', 'fp32') "
                           "USING count(*) GROUP BY model")
    if kind != duckdb.StatementType.SELECT:
        raise QueryRefused(f"{kind.name} statements are not allowed: the console is read-only "
                           "(SELECT, PIVOT and EXPLAIN only)")
    _check_tree(sql)
    return sql


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
                    raise QueryRefused(_time_message(request["time_limit_s"]))
                header = json.loads(conn.recv_bytes())
                payload = conn.recv_bytes()
            except (EOFError, OSError):
                status = self._reap()
                if status == _IDLE_EXIT:  # it ended for want of queries as this one came: start another
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
            raise QueryRefused(f"the console's query process did not start: {_one_line(exc)}") from None
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


_IDLE_EXIT = 75  # the exit status of a query process that ended for want of queries

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
from farm.dashboard.sql import _serve
_serve(fd, parent, walled, idle)
"""


def _serve(fd: int, parent: int, walled: bool, idle_s: float) -> None:
    """The query process's loop: one request (JSON) in, a header (JSON) and Arrow IPC bytes out."""
    from multiprocessing.connection import Connection

    import duckdb  # noqa: F401 - imported before "ready": the first query does not wait for it
    import pyarrow as pa
    import pyarrow.dataset  # noqa: F401

    pa.set_cpu_count(THREADS)  # not a thread (and its stack's address space) per core
    conn = Connection(fd)
    under_way: dict[str, str | None] = {"spill": None}

    def watch_parent() -> None:
        while os.getppid() == parent:
            time.sleep(0.2)
        if under_way["spill"]:
            shutil.rmtree(under_way["spill"], ignore_errors=True)
        os._exit(0)

    threading.Thread(target=watch_parent, name="watch-parent", daemon=True).start()
    conn.send_bytes(json.dumps({"ready": True, "walled": walled}).encode())
    while True:
        if not conn.poll(idle_s):
            os._exit(_IDLE_EXIT)
        try:
            request = json.loads(conn.recv_bytes())
        except (EOFError, OSError):
            os._exit(0)
        under_way["spill"] = request["spill"]
        header, payload = {}, b""
        try:
            os.chdir(request["spill"])  # what DuckDB writes next to itself lands in the spill folder
            table, cut = _execute(request["root"], request["sql"], request["row_limit"], request["time_limit_s"],
                                  request["byte_limit"], temp_dir=request["spill"], **request["limits"])
            sink = pa.BufferOutputStream()
            with pa.ipc.new_stream(sink, table.schema) as writer:
                writer.write_table(table)
            del table
            header, payload = {"cut": cut}, sink.getvalue()
        except _OutOfMemory as exc:
            header = {"memory": str(exc), "retire": True}
        except MemoryError as exc:
            header = {"memory": _one_line(exc) if str(exc) else "MemoryError", "retire": True}
        except QueryRefused as exc:
            header = {"error": str(exc)}
        except Exception as exc:  # noqa: BLE001 - one line back, never a traceback
            message = _scrub(_one_line(exc), request["root"], request["spill"])
            # Out of memory outside the query's fetch (setting up the connection): the process's limit.
            header = {"memory": message, "retire": True} if message.startswith("Out of Memory Error") \
                else {"error": message}
        finally:
            os.chdir("/")
            under_way["spill"] = None
        try:
            conn.send_bytes(json.dumps(header).encode())
            conn.send_bytes(payload)
        except OSError:
            os._exit(0)
        if header.get("retire"):
            os._exit(0)


class _OutOfMemory(Exception):
    """An allocation refused outside DuckDB's own memory accounting: the query process's limit."""


def _execute(root: str | Path, statement: str, row_limit: int, time_limit_s: float, byte_limit: int,
             **limits):
    """Run a checked statement in a fresh Sandbox in this process: (Arrow table, "rows", "bytes"
    or "" for the cut). `limits`: Sandbox's."""
    import duckdb
    import pyarrow as pa

    sandbox = Sandbox(root, **limits)
    timer = threading.Timer(time_limit_s, sandbox.interrupt)
    timer.start()
    try:
        reader = sandbox.sql(statement).to_arrow_reader(BATCH_ROWS)
        batches, rows, size, cut = [], 0, 0, ""
        for batch in reader:
            if rows + batch.num_rows > row_limit:
                batch, cut = batch.slice(0, row_limit - rows), "rows"
            if size + batch.nbytes > byte_limit:
                batch, cut = _fit(batch, byte_limit - size), "bytes"
            batches.append(batch)
            rows, size = rows + batch.num_rows, size + batch.nbytes
            if cut:
                break
        table = pa.Table.from_batches(batches, schema=reader.schema)
    except duckdb.InterruptException:
        raise QueryRefused(_time_message(time_limit_s)) from None
    except (duckdb.Error, pa.ArrowException, OSError) as exc:
        message = _one_line(exc)
        if isinstance(exc, MemoryError) or message.startswith("Out of Memory Error"):
            if not _DUCKDB_ACCOUNTED.search(message):  # malloc refused: the process's limit
                raise _OutOfMemory(sandbox.scrub(message)) from None
            raise QueryRefused(f"the query needs more than the console's {sandbox.memory_limit} of memory and "
                               f"{sandbox.spill_limit} of spill space: narrow it (a WHERE, fewer columns, "
                               "a LIMIT)") from None
        raise QueryRefused(sandbox.scrub(message)) from None
    finally:
        timer.cancel()
        sandbox.close()
    return table, cut


# DuckDB's own memory limit reached: its buffer manager says how much of the limit is used
# ("could not allocate block of size 256.0 KiB (28.6 MiB/28.6 MiB used)"); a refused malloc says
# "(bad allocation)", "Allocation failure" or "failed to allocate N bytes" instead.
_DUCKDB_ACCOUNTED = re.compile(r"\([^()]*/[^()]* used\)")


def _time_message(time_limit_s: float) -> str:
    return (f"stopped after the time limit of {time_limit_s:g} s: narrow the query "
            "(a WHERE on sweep_id or cell_id, or a LIMIT)")


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


def _one_statement(sql: str):
    import duckdb

    try:
        statements = duckdb.extract_statements(sql)
    except duckdb.Error as exc:
        raise QueryRefused(_one_line(exc)) from None
    if not statements:
        raise QueryRefused("no statement: write a query, e.g. SELECT * FROM cells LIMIT 10")
    if len(statements) > 1:
        raise QueryRefused(f"{len(statements)} statements: the console runs one query at a time")
    return statements[0]


def _tokens(sql: str) -> list[tuple[int, int]]:
    """(start, end) byte offsets of `sql`'s tokens, comments left out."""
    import duckdb

    raw = sql.encode()
    found = duckdb.tokenize(sql)
    spans = [(start, found[i + 1][0] if i + 1 < len(found) else len(raw), kind)
             for i, (start, kind) in enumerate(found)]
    return [(start, end) for start, end, kind in spans if kind != duckdb.token_type.comment]


def _first_word(sql: str) -> str:
    tokens = _tokens(sql)
    return sql.encode()[tokens[0][0]:tokens[0][1]].decode().strip().lower() if tokens else ""


def _after_first_token(sql: str) -> str:
    """`sql` from its second token on (what follows EXPLAIN)."""
    tokens = _tokens(sql)
    return sql.encode()[tokens[1][0]:].decode() if len(tokens) > 1 else ""


def _check_tree(sql: str) -> None:
    """Refuse a query whose parse tree names anything but the warehouse's tables, its own CTEs and
    the allowed table functions, or a hidden function."""
    import duckdb

    parser = duckdb.connect(":memory:")  # parses only; a connection of its own, as threads share nothing
    try:
        tree = json.loads(parser.execute("SELECT json_serialize_sql(?)", [sql]).fetchone()[0])
    finally:
        parser.close()
    if tree.get("error"):
        raise QueryRefused(f"{tree.get('error_type', 'parser')}: {tree.get('error_message', '')}".splitlines()[0])
    names: dict[str, set[str]] = {"function": set(), "table_function": set(), "table": set(), "show": set(),
                                  "cte": set()}
    _collect(tree, names)
    refused_functions, catalog_views = _catalog()
    hidden = sorted(names["function"] & refused_functions | names["table_function"] - TABLE_FUNCTIONS)
    if hidden:
        raise QueryRefused(f"{hidden[0]}() is not available in the console (it keeps the server's settings, "
                           "files and logs out of reach): query the warehouse's tables")
    shown = sorted(names["show"] - SHOW_LISTS - set(TABLES))
    if shown:
        raise QueryRefused(f"SHOW {shown[0]} is not available in the console (it shows a setting): "
                           "use SHOW TABLES or DESCRIBE <table>")
    shadowing = sorted(names["cte"] & catalog_views)
    if shadowing:
        raise QueryRefused(f"a CTE named {shadowing[0]} is not allowed (DuckDB has a catalog view of that name): "
                           "rename it")
    unknown = sorted(names["table"] - set(TABLES) - names["cte"])
    if unknown:
        raise QueryRefused(f"no table {unknown[0]} in the console: its tables are {', '.join(TABLES)}")


@functools.cache
def _catalog() -> tuple[frozenset[str], frozenset[str]]:
    """(functions refused, DuckDB's catalog views). Refused: HIDDEN_FUNCTIONS and DuckDB's macros
    built on one or on a table function not allowed (pg_get_viewdef() reads duckdb_views()), as a
    macro's body is not in the parse tree. The views (pg_settings, ...) may not be shadowed by a
    CTE, which would let the view's name through the table check outside the CTE's scope."""
    import duckdb

    con = duckdb.connect(":memory:")
    try:
        functions = con.execute("SELECT DISTINCT lower(function_name), function_type, lower(macro_definition) "
                                "FROM duckdb_functions()").fetchall()
        views = frozenset(v for (v,) in con.execute("SELECT DISTINCT lower(view_name) FROM duckdb_views() "
                                                     "WHERE internal").fetchall())
    finally:
        con.close()
    tables = {name for name, kind, _ in functions if kind in ("table", "table_macro") and name not in TABLE_FUNCTIONS}
    macros = {name: body for name, kind, body in functions if kind == "macro" and body}
    hidden = set(HIDDEN_FUNCTIONS)
    while True:  # a macro may call a macro that calls a hidden function
        calls = re.compile(r"\b(" + "|".join(re.escape(n) for n in sorted(hidden | tables)) + r")\s*\(")
        more = {name for name, body in macros.items() if name not in hidden and calls.search(body)}
        if not more:
            return frozenset(hidden), views
        hidden |= more


def _collect(node, names: dict[str, set[str]]) -> None:
    if isinstance(node, list):
        for item in node:
            _collect(item, names)
        return
    if not isinstance(node, dict):
        return
    kind = node.get("type")
    if "function_name" in node:
        names["function"].add(node["function_name"].lower())
    if kind == "TABLE_FUNCTION":
        names["table_function"].add(str((node.get("function") or {}).get("function_name", "")).lower())
    elif kind == "BASE_TABLE":
        qualified = node.get("catalog_name") not in ("", "memory") or node.get("schema_name") not in ("", "main")
        table = node.get("table_name", "").lower()
        names["table"].add(f"{node.get('schema_name')}.{table}" if qualified else table)
    elif kind == "SHOW_REF" and not node.get("query"):
        names["show"].add(node.get("table_name", "").lower())
    for entry in (node.get("cte_map") or {}).get("map", []):
        names["cte"].add(str(entry.get("key", "")).lower())
    for value in node.values():
        _collect(value, names)


def _fit(batch, room: int):
    """The longest head of `batch` within `room` bytes."""
    low, high = 0, batch.num_rows
    while low < high:
        middle = (low + high + 1) // 2
        low, high = (middle, high) if batch.slice(0, middle).nbytes <= room else (low, middle - 1)
    return batch.slice(0, low)


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


def _one_line(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
