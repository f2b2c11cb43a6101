"""The SQL console's query process (the wall, 4 in farm/sql_console/console.py's docstring): it runs
each checked statement in a fresh Sandbox under the byte, row and time limits, and sends Arrow
IPC back to its console. Started by `Console` with its address space already capped."""

from __future__ import annotations

import json
import os
import re
import shutil
import threading
import time
from pathlib import Path

from farm.sql_console.sandbox import THREADS, QueryRefused, Sandbox, one_line, scrub

IDLE_EXIT_STATUS = 75  # the exit status of a query process that ended for want of queries
BATCH_ROWS = 1024  # rows per Arrow batch fetched: the byte limit is checked this often
# DuckDB's own memory limit reached: its buffer manager says how much of the limit is used
# ("could not allocate block of size 256.0 KiB (28.6 MiB/28.6 MiB used)"); a refused malloc says
# "(bad allocation)", "Allocation failure" or "failed to allocate N bytes" instead.
_DUCKDB_ACCOUNTED = re.compile(r"\([^()]*/[^()]* used\)")


def serve(fd: int, parent: int, walled: bool, idle_s: float) -> None:
    """The query process's loop: one request (JSON) in, a header (JSON) and Arrow IPC bytes out."""
    from multiprocessing.connection import Connection

    import duckdb  # noqa: F401 - imported before "ready": the first query does not wait for it
    import pyarrow as pa
    import pyarrow.dataset

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
            os._exit(IDLE_EXIT_STATUS)
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
            header = {"memory": one_line(exc) if str(exc) else "MemoryError", "retire": True}
        except QueryRefused as exc:
            header = {"error": str(exc)}
        except Exception as exc:  # noqa: BLE001 - one line back, never a traceback
            message = scrub(one_line(exc), request["root"], request["spill"])
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
            if size + shown_bytes(batch) > byte_limit:
                batch, cut = _fit(batch, byte_limit - size), "bytes"
            batches.append(batch)
            rows, size = rows + batch.num_rows, size + shown_bytes(batch)
            if cut:
                break
        table = pa.Table.from_batches(batches, schema=reader.schema)
    except duckdb.InterruptException:
        raise QueryRefused(time_message(time_limit_s)) from None
    except (duckdb.Error, pa.ArrowException, OSError) as exc:
        message = one_line(exc)
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


def time_message(time_limit_s: float) -> str:
    return (f"stopped after the time limit of {time_limit_s:g} s: narrow the query "
            "(a WHERE on sweep_id or cell_id, or a LIMIT)")


# What one value inside a list, struct or map column costs once the page holds it: a Python object
# each (a dict, a list, a boxed bool: 28 to 232 bytes), where Arrow keeps a bit or a few bytes.
# 2,000,000 structs of one bool are 0.25 MB of Arrow and 1.9 GB of Python objects.
PYTHON_OBJECT_BYTES = 100


def shown_bytes(batch) -> int:
    """What `batch` costs its reader once converted for the page: its Arrow bytes, plus a Python
    object per value nested in its list, struct and map columns (the byte limit counts this, so
    the caller's memory is bounded, not only the query process's)."""
    return batch.nbytes + PYTHON_OBJECT_BYTES * sum(_nested_values(column) for column in batch.columns)


def _nested_values(array) -> int:
    import pyarrow as pa

    kind = array.type
    if pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind) \
            or pa.types.is_map(kind):
        values = array.flatten()  # the slice's own values
        return len(values) + _nested_values(values)
    if pa.types.is_struct(kind):
        return len(array) + sum(_nested_values(field) for field in array.flatten())
    return 0


def _fit(batch, room: int):
    """The longest head of `batch` within `room` bytes (`shown_bytes`)."""
    low, high = 0, batch.num_rows
    while low < high:
        middle = (low + high + 1) // 2
        low, high = (middle, high) if shown_bytes(batch.slice(0, middle)) <= room else (low, middle - 1)
    return batch.slice(0, low)
