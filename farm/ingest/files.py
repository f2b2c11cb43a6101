"""One file as `farm ingest` reads it: recognised by its first bytes (farm.ingest.sniff), then
read with farm.trt_output's readers; a log of several trtexec runs split into one read per run.
Never raises for what is in a file: what farm cannot use is said in `FileRead.problem`."""

from __future__ import annotations

import dataclasses
import hashlib
import io
from pathlib import Path
from typing import BinaryIO

from farm.ingest.sniff import HEAD_BYTES, KIND_NAMES, WHAT_FARM_READS, sniff
from farm.trt_output import (
    EngineInfoFromInspectorJson,
    EngineLayer,
    FormatError,
    IOTensor,
    LogFacts,
    LogRunsFromTrtexecLog,
    Profile,
    ProfileFromProfileJson,
    TimesFromTimesJson,
    TuningCache,
    TuningCacheFromJsonLines,
)


@dataclasses.dataclass
class FileRead:
    """One file as farm read it: what it is, what it holds, or why farm cannot use it."""

    path: Path
    kind: str | None = None  # profile / times / layer_info / log; None: not recognised
    problem: str | None = None  # why farm cannot use it (with `kind`, or `fatal`: an error, not a skip)
    fatal: bool = False  # missing, a folder, unreadable: an error even though nothing was recognised
    found: str = ""  # what was read from it
    digest: bytes = b""
    size: int = 0
    profile: Profile | None = None
    times: list[dict[str, float]] | None = None
    layers: list[EngineLayer] = dataclasses.field(default_factory=list)
    io_tensors: list[IOTensor] = dataclasses.field(default_factory=list)  # inspector "Bindings" / "I/O Tensors"
    log: LogFacts | None = None
    runs: list[LogFacts] = dataclasses.field(default_factory=list)  # a log's trtexec runs (`log` when one)
    run: int | None = None  # which run of the file this read stands for (1-based), when it holds several
    tuning: TuningCache | None = None  # a --tuningCacheFile: one engine per build route (farm.ingest.tuning)

    @property
    def usable(self) -> bool:
        return self.kind is not None and self.problem is None

    @property
    def error(self) -> bool:
        """Stops the ingest (a skip does not): recognised but unusable, missing, a folder, unreadable."""
        return self.problem is not None and (self.kind is not None or self.fatal)



def read_file(path: Path) -> FileRead:
    """Recognise one file by its first bytes and read it; never raises for what is in the file.

    A file that is not TensorRT output is read no further than `HEAD_BYTES`; logs are read line by
    line, so neither a large unrelated file nor a large log is held in memory whole."""
    read = FileRead(path=Path(path))
    try:
        if read.path.is_dir():
            return dataclasses.replace(read, problem="is a folder: give the files in it (e.g. FOLDER/*)", fatal=True)
        if read.path.exists() and not read.path.is_file():
            return dataclasses.replace(read, problem="is not a regular file", fatal=True)
        with open(read.path, "rb") as handle:
            head = handle.read(HEAD_BYTES)
            complete = not handle.read(1)
            sniffed = sniff(head, complete)
            read.kind, read.problem = sniffed.kind, sniffed.problem
            if read.kind is None or read.problem:
                return read
            handle.seek(0)
            read.digest = hashlib.file_digest(handle, "sha256").digest()
            read.size = handle.tell()
            handle.seek(0)
            _read_content(read, handle, sniffed.encoding)
    except FileNotFoundError:
        return dataclasses.replace(read, problem="no such file", fatal=True)
    except OSError as exc:
        return dataclasses.replace(read, problem=f"cannot be read: {exc.strerror or exc}", fatal=True)
    except UnicodeDecodeError as exc:  # past the head: the first part was text
        read.problem = (f"recognised as {KIND_NAMES[read.kind]}, but part of it is not UTF-8 text "
                        f"({exc.reason}); TensorRT writes UTF-8: was it cut or converted?")
    except FormatError as exc:
        read.problem = f"recognised as {KIND_NAMES[read.kind]}, but {exc}"
    return read


def _read_content(read: FileRead, handle: BinaryIO, encoding: str) -> None:
    if read.kind == "log":
        text = io.TextIOWrapper(handle, encoding=encoding, errors="strict", newline=None)
        try:
            read.runs = LogRunsFromTrtexecLog(text)
        finally:
            text.detach()  # the caller closes the file
        if len(read.runs) == 1:
            _set_run(read, read.runs[0])
        else:
            read.found = f"log of {len(read.runs)} trtexec runs"
        return
    text = handle.read().decode(encoding)
    if read.kind == "profile":
        read.profile = ProfileFromProfileJson(text)
        read.found = f"per-layer profile: {len(read.profile.rows)} layers, {read.profile.count} iterations"
        if not read.profile.rows:
            read.problem = (f"recognised as {KIND_NAMES['profile']}, but it lists no layer: nothing farm could use "
                            f"(the profile of an engine that never ran?)")
    elif read.kind == "times":
        read.times = TimesFromTimesJson(text)
        read.found = f"per-query times: {len(read.times)} queries"
    elif read.kind == "tuning_cache":
        read.tuning = TuningCacheFromJsonLines(text)
        crashed = sum(r.crashed for r in read.tuning.routes)
        read.found = f"tuning cache: {len(read.tuning.routes)} build routes ({crashed} crashed)"
        if not read.tuning.routes:
            read.problem = f"recognised as {KIND_NAMES['tuning_cache']}, but it lists no build route yet"
    else:
        info = EngineInfoFromInspectorJson(text)
        read.layers, read.io_tensors = info.layers, info.io_tensors
        read.found = f"engine inspector JSON: {len(read.layers)} layers"
        if read.io_tensors:
            read.found += f", {len(read.io_tensors)} I/O tensors"
        if not read.layers:
            read.problem = f"recognised as {KIND_NAMES['layer_info']}, but it lists no layer: nothing farm could use"


def _set_run(read: FileRead, log: LogFacts) -> None:
    read.log = log
    read.found = describe_log(log)
    if _is_empty(log) or (read.run and not has_figures(log)):
        what = f"run {read.run} of it" if read.run else "it"
        read.problem = (f"recognised as {KIND_NAMES['log']}, but {what} holds nothing farm could use (no performance "
                        f"summary, per-layer profile, layer information or build figures; {read.found})")


def _is_empty(log: LogFacts) -> bool:
    """Nothing at all: no figure, and no device, version or options that could go with other files."""
    return not (has_figures(log) or log.device or log.tensorrt_version or log.options or log.model_files)


def has_figures(log: LogFacts) -> bool:
    """A figure farm stores as a measurement, a layer or a build (a device, a version, options or a
    model name alone are not a cell)."""
    return bool(log.summary or log.throughput_qps is not None or log.profile or log.layers or log.layer_memory
                or log.build_s is not None or log.layers_after_parsing is not None
                or log.builder_peak_device_bytes is not None or log.host_persistent_bytes is not None
                or log.scratch_bytes is not None)


def split_runs(read: FileRead, run: int | None = None) -> list[FileRead]:
    """A log of several trtexec runs as one read per run (`run`: only that one, 1-based); any other
    file as itself. ValueError where `run` names a run the file does not hold."""
    if read.kind != "log" or len(read.runs) < 2:
        if run is not None and run != 1 and read.kind == "log":
            raise ValueError(f"{read.path}: --run {run}: it holds one trtexec run")
        return [read]
    if run is not None and not 1 <= run <= len(read.runs):
        raise ValueError(f"{read.path}: --run {run}: it holds {len(read.runs)} trtexec runs (1 to {len(read.runs)})")
    reads = []
    for number, log in enumerate(read.runs, 1):
        if run is not None and number != run:
            continue
        one = dataclasses.replace(read, runs=[log], run=number, problem=None,
                                  digest=hashlib.sha256(read.digest + str(number).encode()).digest())
        _set_run(one, log)
        one.found = f"run {number} of {len(read.runs)}: {one.found}"
        reads.append(one)
    return reads


def describe_skip(read: FileRead) -> str:
    """The one line that says why a file was left out, and what farm reads."""
    return f"{read.path}: not TensorRT output farm can read: {read.problem or 'nothing in it says TensorRT'}; " \
           f"{WHAT_FARM_READS}"


def describe_log(log: LogFacts) -> str:
    """What a log holds that farm stores, in a few words (`FileRead.found`)."""
    parts = []
    if log.layers:
        parts.append(f"{len(log.layers)} engine layers")
    if log.profile:
        parts.append(f"per-layer profile table ({len(log.profile.rows)} layers)")
    if log.summary or log.throughput_qps is not None:
        parts.append("performance summary")
    if log.device:
        parts.append("device information")
    if log.layers_after_parsing is not None:
        parts.append("layer counts through fusion")
    if log.layer_memory:
        parts.append(f"memory of {len(log.layer_memory)} layers")
    if log.conv_weight_shapes:
        parts.append(f"{len(log.conv_weight_shapes)} convolution kernel shapes")
    if log.model_files:
        parts.append("model " + ", ".join(Path(m).name for m in log.model_files))
    if log.tensorrt_version:
        parts.append(f"TensorRT {log.tensorrt_version}")
    if log.device.get("name"):
        parts[parts.index("device information")] = f"device {log.device['name']}"
    if log.outcome == "FAILED":
        parts.append("trtexec reported FAILED")
    return "log: " + (", ".join(parts) if parts else "nothing farm stores")


