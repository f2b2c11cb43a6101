"""One writer at a time, and only into a warehouse.

`farm sweep`, `farm ingest` and `farm check --fix` hold the warehouse's writer lock
(`writer_lock`, an flock on `<root>/.lock` that the kernel releases when its process dies), and
only a holder repairs, quarantines or removes leftovers.

Writers write only into a warehouse: a folder with the marker `<root>/.farm-warehouse` (written by
the first writer), an empty or new folder, or one an older farm wrote (its sweeps' files carry
farm's `farm.schema_version` Parquet metadata; the marker is then written). Any other folder is
refused before anything is touched (`not_a_warehouse`). Readers need no marker.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from farm.errors import UserError
from farm.files import write_error
from farm.warehouse.layout import WarehouseLayout
from farm.warehouse.parquet import file_problem, parquet_names, write_file
from farm.warehouse.schema import CACHE_DIR_NAME, LOCK_NAME, MARKER_NAME, SCHEMA_VERSION, TABLES

_held: dict[Path, int] = {}  # writer locks this process holds (writer_lock nests within a process)


class WarehouseBusy(UserError):
    """Another process holds the warehouse's writer lock."""


class NotAWarehouse(UserError):
    """`--results` names a folder that farm did not write (and is not empty): writers refuse it."""


class WarehouseLocking:
    """The writer lock and the marker of a warehouse (a part of the warehouse handles: farm.warehouse.reader, store)."""

    def __init__(self, layout: WarehouseLayout) -> None:
        self.layout = layout

    def not_a_warehouse(self) -> str | None:
        """Why a writer must not write `root`, or None when it is a warehouse: it has the marker,
        is empty or missing (only a lock file or cache counts as empty), or holds a sweep an older
        farm wrote (a Parquet file of a sweep folder with farm's `farm.schema_version` metadata).
        Reads only."""
        root = self.layout.root
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
            # a folder of other files (not a file given as --results, which says what to pass itself)
            raise NotAWarehouse(problem + ("; pass an empty or new folder to --results (nothing was written)"
                                           if self.layout.root.is_dir() else ""))

    def _busy(self, holder: dict[str, Any] | None) -> str:
        return (f"{self.layout.root} is being written by another farm command ({describe_holder(holder)}): wait until "
                "it finishes, or pass another --results folder")

    def _written_by_farm(self) -> bool:
        """Whether the folder is a warehouse an older farm wrote: it holds nothing but sweep folders
        (besides farm's own dot files), and one of them a Parquet file with farm's metadata (the
        first two files of each table are looked at). A project's folder, where a farm file was
        copied beside the project's own files, is not one: no writer or --fix touches it."""
        sweeps = self.layout.sweep_dirs()
        entries = [p for p in self.layout.root.iterdir() if not p.name.startswith(".")]
        if len(entries) != len(sweeps):
            return False
        return any(self._farm_file_in(sweep_dir / table) for sweep_dir in sweeps
                   for table in ("cells", *(t for t in TABLES if t != "cells")))

    @staticmethod
    def _farm_file_in(folder: Path) -> bool:
        for name in sorted(parquet_names(folder))[:2]:
            if file_problem(folder / name):  # a FIFO would block the read
                continue
            try:
                metadata = pq.read_schema(folder / name).metadata or {}
            except Exception:  # noqa: BLE001 - damaged or foreign: look at the next
                continue
            if b"farm.schema_version" in metadata:
                return True
        return False

    def _mark(self) -> None:
        """Write the marker (a writer holding the lock, once)."""
        marker = self.layout.root / MARKER_NAME
        if marker.is_file():
            return
        from farm import __version__

        text = json.dumps({"farm_version": __version__, "schema_version": SCHEMA_VERSION}) + "\n"
        write_file(marker, text)  # whole or not at all, one line when refused

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
        lock = self.layout.root.resolve() / LOCK_NAME
        if lock in _held:
            _held[lock] += 1
            try:
                yield
            finally:
                _held[lock] -= 1
            return
        self._refuse_unless_warehouse()
        try:
            self.layout.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise write_error(self.layout.root, exc) from None
        fd = self._open_locked(lock)
        try:
            record = {"pid": os.getpid(), "host": socket.gethostname(), "command": command_line(),
                      "started_at": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")}
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
                    holder = read_holder(fd, tries=1)
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

        lock = self.layout.root.resolve() / LOCK_NAME
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
                return read_holder(fd)
            except OSError:
                return None
            fcntl.flock(fd, fcntl.LOCK_UN)
            return None
        finally:
            os.close(fd)


def describe_holder(holder: dict[str, Any] | None) -> str:
    """The lock holder in words, for messages."""
    if not holder:
        return "it did not say which"
    return (f"pid {holder.get('pid', '?')} on {holder.get('host', '?')} since {holder.get('started_at', '?')}: "
            f"{holder.get('command', '?')}")


def read_holder(fd: int, tries: int = 3) -> dict[str, Any]:
    """The holder's record in the lock file ({} where it wrote none)."""
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


def command_line() -> str:
    """This process's command, as the lock file records it."""
    argv = list(sys.argv) or ["python"]
    program = Path(argv[0])
    name = "farm" if program.name == "farm" or program.parts[-2:] == ("farm", "__main__.py") else program.name
    return " ".join([name, *argv[1:]])[:1000]
