"""The warehouse's files: the cheap check that a file is whole Parquet, writing one whole or not
at all (through farm.files.write_atomic), their names in a folder, and the paths DuckDB is given
and names in its errors."""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from farm.files import os_reason, write_atomic

PARQUET_MAGIC = b"PAR1"
_GLOB_CHARS = re.compile(r"[*?\[\]{}]")


# why farm leaves a symbolic link in a warehouse alone: readers (file_problem) and farm check say it
LINK_PROBLEM = "a symbolic link: farm never reads or writes through one (it could lead out of the warehouse)"


def file_problem(path: str | Path) -> str | None:
    """Why `path` is not a whole Parquet file, or None (also when it is gone): its size, the magic
    bytes at both ends and the footer length, about 12 µs a file. A truncated, emptied or
    overwritten file fails this; `schema_problem` parses the footer itself. Opened without
    blocking, so that a FIFO or device is "not a regular file" instead of a hang."""
    import stat

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return LINK_PROBLEM
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


def write_parquet(table: pa.Table, path: Path) -> None:
    """Write a warehouse Parquet file whole or not at all, flushed to disk (farm.files)."""
    write_atomic(path, lambda tmp: pq.write_table(table, tmp), fsync=True)


def write_file(path: Path, data: bytes | str) -> None:
    """Write an output file (a report, a graph) whole or not at all (farm.files)."""
    write_atomic(path, data)


def parquet_names(directory: Path, regular: bool = True) -> Any:
    """Names of the table files in `directory` (not temporary files, not symbolic links: nothing is
    read through a link), none if it is missing; with `regular=False`, a dict of every such name,
    links included, to whether it is a regular file (a link is not)."""
    try:
        with os.scandir(directory) as entries:
            found = {e.name: e for e in entries if e.name.endswith(".parquet") and not e.name.startswith(".")}
            if regular:
                return {name for name, entry in found.items() if not entry.is_symlink()}
            return {name: _is_regular(entry) for name, entry in found.items()}
    except (FileNotFoundError, NotADirectoryError):
        return set() if regular else {}


def _is_regular(entry: os.DirEntry) -> bool:
    try:
        return entry.is_file(follow_symlinks=False)
    except OSError:
        return False


def sql_string(text: str) -> str:
    """`text` escaped for use inside a single-quoted SQL literal."""
    return text.replace("'", "''")


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


# DuckDB's words for a file that is not there (a list of names: "No files found that match the pattern")
_GONE = ("No files found that match the pattern", "No such file or directory")


def files_gone(exc: BaseException | str, root: Path) -> bool:
    """Whether a DuckDB error says that Parquet files under `root` it was told to read were not
    there: they were gone when it read them (a compaction or a rerun moved them), whatever lies
    at their names now, so never damaged; the reader lists the files again."""
    return bool(parquet_files_named(exc, root)) and any(words in str(exc) for words in _GONE)


def free_name(path: Path) -> Path:
    """`path`, or `name.1.parquet`, `name.2.parquet`, ... if it is taken."""
    candidate, n = path, 0
    while os.path.lexists(candidate):
        n += 1
        candidate = path.with_name(f"{path.stem}.{n}{path.suffix}")
    return candidate


def remove_path(path: Path) -> None:
    """Remove a file or a folder tree, ignoring what is already gone or refused."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(OSError):
            path.unlink()
