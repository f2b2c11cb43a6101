"""Files written whole or not at all, and one line when the file system refuses.

Every file farm writes (warehouse Parquet, cached models and transforms, engines, reports) goes
through `write_atomic`: written under a temporary name, optionally flushed to disk, then renamed
into place, so a reader never sees half a file and a crash leaves none. A failed write removes
its temporary file (on a full disk a partial one would keep it full). Imports nothing from farm
but its errors.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Callable
from pathlib import Path

from farm.errors import UserError, first_line

# <cache>/tmp/ (the cache: <results>/.cache/): where a run keeps its temporary files, emptied by the
# next writer of the warehouse (farm.warehouse), written by the models and precision caches
TEMP_DIR_NAME = "tmp"


def temp_name(path: Path, tmp_dir: Path | None = None) -> Path:
    """Where `path` is written before it is renamed into place: beside it (hidden), or in
    `tmp_dir` (a temporary area on the same file system, which cleanup can sweep)."""
    name = f".{path.name}.{os.getpid()}.tmp"
    return (tmp_dir / name) if tmp_dir is not None else path.with_name(name)


def write_atomic(path: Path, write: Callable[[Path], None] | bytes | str, *, tmp_dir: Path | None = None,
                 fsync: bool = False, make_parents: bool = False) -> None:
    """Write `path` whole or not at all. `write` is the content (bytes or text) or a function that
    writes the temporary path it is given. `fsync`: flush to disk before the rename (warehouse
    files, which a crash must not lose). A refused write raises a UserError saying what to do;
    any failure, Ctrl-C included, leaves no temporary file."""
    refuse_special(path)
    tmp = temp_name(path, tmp_dir)
    try:
        if make_parents:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(write, str):
            tmp.write_text(write, encoding="utf-8")
        elif isinstance(write, (bytes, bytearray, memoryview)):
            tmp.write_bytes(write)
        else:
            write(tmp)
        if fsync:
            fd = os.open(tmp, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise write_error(path, exc) from None
        raise


def refuse_special(path: Path) -> None:
    """A UserError where `path` exists and is not a regular file (or a link, which the rename
    replaces, never its target): a folder, a device (`-o /dev/null` run as root would replace the
    device node), a FIFO or a socket is never replaced by a file."""
    try:
        mode = os.lstat(path).st_mode
    except OSError:  # absent (the usual), or unreadable: the write itself says what is wrong
        return
    if stat.S_ISREG(mode) or stat.S_ISLNK(mode):
        return
    kind = ("a folder" if stat.S_ISDIR(mode) else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
            else "a FIFO" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode) else "not a file")
    raise UserError(f"cannot write {path}: it is {kind}, and farm replaces only regular files; give a file's path")


def write_error(path: str | Path, exc: OSError) -> UserError:
    """One line for a write the file system refused, saying what to do."""
    code = exc.errno
    if code in (errno.ENOSPC, errno.EDQUOT):
        hint = "free some space, then run the same command again (a sweep resumes)"
    elif code == errno.EFBIG:
        hint = "the file is larger than this process may write (ulimit -f): raise the limit, then run the same " \
               "command again (a sweep resumes)"
    elif code in (errno.EACCES, errno.EPERM, errno.EROFS):
        hint = "the folder is not writable: fix its permissions or choose another folder"
    elif code in (errno.ENOTDIR, errno.EEXIST):
        hint = "a file stands where a folder should be: choose another folder"
    elif code == errno.ENOENT:
        hint = "its folder does not exist: create it or choose another"
    else:
        hint = "run the same command again (a sweep resumes)"
    return UserError(f"cannot write {path}: {os_reason(exc)}; {hint}")


def os_reason(exc: OSError) -> str:
    """The system's words for an OSError (`No space left on device`), else its first line."""
    if exc.errno:
        return os.strerror(exc.errno)
    return first_line(exc)
