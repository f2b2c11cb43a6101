"""Where libraries' log records and warnings go while farm runs: a cell's into that cell's log,
never onto the terminal as "--- Logging error ---" tracebacks.

Those tracebacks are Python logging's `Handler.handleError` at work: a library's StreamHandler
(transformers makes its own the first time one of its loggers is asked for, bound to sys.stderr
*as it is then*) that was made while farm captured a factory's or an exporter's output holds the
capture's stream, closed when the capture ended; each later record fails to write and prints a
traceback of 30-40 lines. So, while farm runs (`install`: the sweep's process, each cell process):

- every record, as it is made, first points the handlers that will take it and that write to a
  closed stream at `STREAM`, a stream that is never closed: outside a cell it writes to sys.stderr
  as it is at the time, inside one to the cell's log;
- inside a cell (`cell_log`), those that write to the terminal's streams (stderr, stdout) are
  pointed there too, records of loggers with no handler of their own and `warnings.warn` calls go
  there through the root logger, and the log is the cell's: kept beside the warehouse's cache as
  `cell-logs/<cell id>.log`, added to a failed cell's traceback, and, in a cell process
  (`echo`), also in that process's output, whose last lines a dead cell's reason quotes.
"""

from __future__ import annotations

import contextlib
import io
import logging
import sys
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path

from farm.files import write_atomic
from farm.records import CellResult

LOG_DIR_NAME = "cell-logs"  # under the warehouse's cache: <cache>/cell-logs/<cell id>.log
TRACEBACK_LOG_CHARS = 8_000  # of a cell's log, what its traceback keeps (the last part)
FORMAT = "%(levelname)s %(name)s: %(message)s"


class _Stream(io.TextIOBase):
    """A text stream that is never closed: into the running cell's log (and, with `echo`, sys.stderr
    too), else into sys.stderr as it is at each write."""

    def __init__(self) -> None:
        super().__init__()
        self.cell: io.StringIO | None = None
        self.echo = False

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        targets = [self.cell] if self.cell is not None else []
        if self.cell is None or self.echo:
            targets.append(sys.stderr)
        for target in targets:
            if target is not None and target is not self:
                with contextlib.suppress(ValueError, OSError):  # a stderr that went away: the log keeps it
                    target.write(text)
        return len(text)

    def flush(self) -> None:
        if self.cell is None or self.echo:
            with contextlib.suppress(ValueError, OSError, AttributeError):
                sys.stderr.flush()

    def close(self) -> None:
        """Never closed: handlers that hold it keep working."""


STREAM = _Stream()
_HANDLER = logging.StreamHandler(STREAM)  # the root logger's while a cell runs
_HANDLER.setFormatter(logging.Formatter(FORMAT))
_lock = threading.Lock()
_installed: list = []  # the record factory that `install` wrapped, while installed


def install() -> None:
    """From now on, in this process, a record repairs the handlers it is about to meet (see the
    module's docstring). Idempotent; `uninstall` undoes it."""
    with _lock:
        if _installed:
            return
        previous = logging.getLogRecordFactory()

        def factory(name, *args, **kwargs):
            record = previous(name, *args, **kwargs)
            with contextlib.suppress(Exception):  # never let the repair break a library's logging
                _repair(logging.getLogger(name) if name != "root" else logging.getLogger())
            return record

        _installed.append((previous, factory))
        logging.setLogRecordFactory(factory)


def uninstall() -> None:
    """Stop repairing (handlers already pointed at STREAM stay so: it is never closed)."""
    with _lock:
        if _installed:
            previous, factory = _installed.pop()
            if logging.getLogRecordFactory() is factory:
                logging.setLogRecordFactory(previous)


@contextlib.contextmanager
def installed() -> Iterator[None]:
    """`install` for the block, unless already installed."""
    if _installed:
        yield
        return
    install()
    try:
        yield
    finally:
        uninstall()


def _repair(logger: logging.Logger | None) -> None:
    """Point the handlers `logger`'s records reach that write to a closed stream (or, in a cell,
    to the terminal's) at STREAM."""
    while logger is not None:
        for handler in list(logger.handlers):
            if isinstance(handler, logging.StreamHandler) and not isinstance(handler, logging.FileHandler) \
                    and handler is not _HANDLER and handler.stream is not STREAM and _rerouted(handler.stream):
                _point_at_stream(handler)
        logger = logger.parent if logger.propagate else None


def _rerouted(stream) -> bool:
    """Whether a handler writing to `stream` must write to STREAM instead."""
    if stream is None:  # a handler that opens its own stream on its first record (torch's trace log): leave it
        return False
    try:
        if getattr(stream, "closed", False):
            return True
    except ValueError:
        return True
    if STREAM.cell is None:
        return False
    if stream in (sys.stderr, sys.stdout, sys.__stderr__, sys.__stdout__):
        return True
    try:
        return stream.fileno() in (1, 2)
    except (AttributeError, ValueError, OSError, io.UnsupportedOperation):
        return False


def _point_at_stream(handler: logging.StreamHandler) -> None:
    handler.acquire()
    try:
        old = handler.stream
        handler.stream = STREAM  # not setStream: it flushes the old stream, which may be closed
        flush = handler.__dict__.get("flush")  # transformers binds its handler's flush to that stream's
        if flush is not None and getattr(flush, "__self__", None) in (old, sys.stderr, sys.__stderr__):
            del handler.flush
    finally:
        handler.release()


@contextlib.contextmanager
def cell_log(echo: bool = False) -> Iterator[io.StringIO]:
    """While the block runs (one cell), libraries' records and warnings go to the log it yields
    (and, with `echo`, to sys.stderr too: a cell process's output file)."""
    log = io.StringIO()
    root = logging.getLogger()
    showwarning = warnings.showwarning
    STREAM.cell, STREAM.echo = log, echo
    root.addHandler(_HANDLER)
    logging.captureWarnings(True)
    try:
        with installed():
            yield log
    finally:
        logging.captureWarnings(False)
        warnings.showwarning = showwarning
        root.removeHandler(_HANDLER)
        STREAM.cell, STREAM.echo = None, False


def keep(result: CellResult, log: str, cache_dir: Path) -> CellResult:
    """Keep what libraries logged during the cell: `<cache>/cell-logs/<cell id>.log`, and the end
    of it in a failed cell's traceback. Nothing logged: nothing written."""
    if not log.strip():
        return result
    path = cache_dir / LOG_DIR_NAME / f"{result.cell_id}.log"
    with contextlib.suppress(Exception):  # a log that cannot be written never costs the cell's result
        write_atomic(path, log, make_parents=True)
    if result.status == "failed":
        tail = log[-TRACEBACK_LOG_CHARS:]
        result.traceback = "\n".join(filter(None, [result.traceback, f"--- what libraries logged during the cell "
                                                                      f"({LOG_DIR_NAME}/{result.cell_id}.log) ---", tail]))
    return result
