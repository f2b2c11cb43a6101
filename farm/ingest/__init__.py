"""`farm ingest`: existing TensorRT output into the warehouse, one cell per engine.

The files of one engine (profile JSON, times JSON, layer-info JSON, trtexec or verbose build
logs, in any mix) are recognised by content and combined: layer information joined to per-layer
times by name, per-layer memory by the engine explorer's rule, the performance summary or the
per-query times as the measurement, build facts as the build, the device as a `devices` row.
Figures are TensorRT's own: nothing here computes a number TensorRT did not produce, except the
statistics of an `--exportTimes` file (computed exactly as for the farm's own runs) and the
per-layer byte counts (from the shapes and types TensorRT printed).

Honest by construction: a file that is not TensorRT output is skipped and named; a file that is
but cannot be read, or holds nothing farm can use, and files that say they come from different
engines (model, device, TensorRT version, shapes, layers, profiles, measurements, builds) stop the
ingest before anything is written. Where and with what a cell was measured comes from the files
alone (unknown stays null); the machine that imported it is recorded apart, in `ingested_on`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import socket
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np

from farm import __version__
from farm.backends.base import BuildStats, LayerRecord
from farm.config import Measurement
from farm.ingest.trt_files import HEAD_BYTES, KIND_NAMES, WHAT_FARM_READS, FormatError, IOTensor, LogFacts, \
    Profile, read_inspector_json, read_log_runs, read_profile_json, read_times_json, sniff, timing_from_log
from farm.ingest.trt_versions import rules_for
from farm.layers.engine import EngineLayer, fill_weights, join_key, join_layers
from farm.measure import Samples, latency_stats, phase_stats
from farm.models import ModelArtifact
from farm.plan import Cell
from farm.warehouse import PER_CELL_TABLES, Warehouse
from farm.worker import CellResult

_PRECISIONS = {"FP32": "fp32", "FP16": "fp16", "BF16": "bf16", "INT8": "int8", "FP8": "fp8", "TF32": "tf32"}
_BUILD_FACTS = ("build_s", "layers_after_parsing", "layers_after_fusion", "layers_after_reformat",
                "host_persistent_bytes", "device_persistent_bytes", "scratch_bytes", "builder_peak_host_bytes",
                "builder_peak_device_bytes")


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

    @property
    def usable(self) -> bool:
        return self.kind is not None and self.problem is None

    @property
    def error(self) -> bool:
        """Stops the ingest (a skip does not): recognised but unusable, missing, a folder, unreadable."""
        return self.problem is not None and (self.kind is not None or self.fatal)


@dataclasses.dataclass
class FileReport:
    path: Path
    kind: str | None
    found: str  # what was read from it, or why nothing was


@dataclasses.dataclass
class EngineIngest:
    name: str
    cell: Cell
    result: CellResult
    files: list[FileReport]
    unmatched_profile_rows: list[str]
    unmatched_layers: list[str]


class NotOneEngine(ValueError):
    """Files given as one engine say they are not (the message names what differs and where)."""


class NothingToUse(ValueError):
    """Files recognised as TensorRT output that hold no layer, measurement or build figure."""


# --- reading --------------------------------------------------------------------------------------

def read_file(path: Path) -> FileRead:
    """Recognise one file by its first bytes and read it; never raises for what is in the file.

    A file that is not TensorRT output is read no further than `HEAD_BYTES`; logs are read line by
    line, so neither a large unrelated file nor a large log is held in memory whole."""
    read = FileRead(Path(path))
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


def _read_content(read: FileRead, handle, encoding: str) -> None:
    import io

    if read.kind == "log":
        text = io.TextIOWrapper(handle, encoding=encoding, errors="strict", newline=None)
        try:
            read.runs = read_log_runs(text)
        finally:
            text.detach()  # the caller closes the file
        if len(read.runs) == 1:
            _set_run(read, read.runs[0])
        else:
            read.found = f"log of {len(read.runs)} trtexec runs"
        return
    text = handle.read().decode(encoding)
    if read.kind == "profile":
        read.profile = read_profile_json(text)
        read.found = f"per-layer profile: {len(read.profile.rows)} layers, {read.profile.count} iterations"
        if not read.profile.rows:
            read.problem = (f"recognised as {KIND_NAMES['profile']}, but it lists no layer: nothing farm could use "
                            f"(the profile of an engine that never ran?)")
    elif read.kind == "times":
        read.times = read_times_json(text)
        read.found = f"per-query times: {len(read.times)} queries"
    else:
        read.layers, read.io_tensors = read_inspector_json(text)
        read.found = f"engine inspector JSON: {len(read.layers)} layers"
        if read.io_tensors:
            read.found += f", {len(read.io_tensors)} I/O tensors"
        if not read.layers:
            read.problem = f"recognised as {KIND_NAMES['layer_info']}, but it lists no layer: nothing farm could use"


def _set_run(read: FileRead, log: LogFacts) -> None:
    read.log = log
    read.found = _describe_log(log)
    if _is_empty(log) or (read.run and not _has_figures(log)):
        what = f"run {read.run} of it" if read.run else "it"
        read.problem = (f"recognised as {KIND_NAMES['log']}, but {what} holds nothing farm could use (no performance "
                        f"summary, per-layer profile, layer information or build figures; {read.found})")


def _is_empty(log: LogFacts) -> bool:
    """Nothing at all: no figure, and no device, version or options that could go with other files."""
    return not (_has_figures(log) or log.device or log.tensorrt_version or log.options or log.model_files)


def _has_figures(log: LogFacts) -> bool:
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


# --- one engine -----------------------------------------------------------------------------------

def combine(name: str, reads: list[FileRead], sweep: str) -> EngineIngest:
    """One cell from the usable files of one engine (the rest are reported as skipped)."""
    usable = [r for r in reads if r.usable]
    if not usable:
        raise NothingToUse("none of the files is TensorRT output farm can read")
    differences = conflicts(usable)
    if differences:
        raise NotOneEngine("; ".join(differences))
    facts = _merged_facts([r.log for r in usable if r.log is not None])
    layers = _chosen_layers(usable)
    profile = next((r.profile for r in usable if r.profile is not None), None) or \
        next((r.log.profile for r in usable if r.log is not None and r.log.profile), None)
    times = next((r.times for r in usable if r.times), None)
    digest = hashlib.sha256(sweep.encode() + name.encode())
    for read in usable:
        digest.update(read.digest)

    fill_weights(layers, facts.conv_weight_shapes, facts.weight_shapes)
    records, unmatched_rows, unmatched_layers = _layer_records(layers, profile, facts)
    cell = _cell(name, usable, sweep, digest.hexdigest()[:16], layers, facts)
    # Where and with what it ran: only what the files say. No host, CPU or library of this machine.
    result = CellResult(
        cell.cell_id, "ok", started_at=None, finished_at=None, host={},
        versions={"tensorrt": facts.tensorrt_version} if facts.tensorrt_version else {},
        farm_commit=None, layers=records,
        build=BuildStats(
            build_s=facts.build_s, builder_peak_memory_bytes=facts.builder_peak_device_bytes,
            builder_peak_host_memory_bytes=facts.builder_peak_host_bytes,
            layers_before_fusion=facts.layers_after_parsing, layers_after_fusion=facts.layers_after_fusion,
            layers_with_reformats=facts.layers_after_reformat, host_persistent_bytes=facts.host_persistent_bytes,
            device_persistent_bytes=facts.device_persistent_bytes, scratch_bytes=facts.scratch_bytes,
        ) if _has_build_facts(facts) else None,
        device=_device_row(facts.device) if facts.device.get("name") else None,
    )
    if times:
        result.samples, result.measurement = _from_times(times, cell.batch)
    elif facts.throughput_qps is not None or facts.summary:
        result.measurement = _from_summary(facts, cell.batch)
    if result.measurement is not None:  # what its latency includes, as the log says (null: unknown)
        result.measurement |= timing_from_log(facts)
    if not records and result.measurement is None and result.build is None:
        what = ", ".join(f"{r.path.name} ({r.found})" for r in usable)
        failed = " trtexec reported FAILED." if facts.outcome == "FAILED" else ""
        raise NothingToUse(f"recognised as TensorRT output but nothing farm could use: no per-layer profile, layer "
                           f"information, performance summary, per-query times or build figures in {what}.{failed}")
    reports = [FileReport(r.path, r.kind, r.found) for r in usable]
    return EngineIngest(name, cell, result, reports, unmatched_rows, unmatched_layers)


def _merged_facts(logs: list[LogFacts]) -> LogFacts:
    """Several logs of one engine (`conflicts` found none disagreeing): each fact from the first
    log that has it; per-name tables merged."""
    into = LogFacts()
    for log in logs:
        for field in dataclasses.fields(LogFacts):
            value, current = getattr(log, field.name), getattr(into, field.name)
            if value in (None, {}, []) or field.name in ("layers", "profile"):
                continue
            if isinstance(current, dict):
                setattr(into, field.name, {**value, **current})
            elif isinstance(current, list):
                current.extend(v for v in value if v not in current)
            elif current is None:
                setattr(into, field.name, value)
    return into


def _chosen_layers(reads: list[FileRead]) -> list[EngineLayer]:
    """The fullest layer information (`conflicts` checked the others are part of it); an
    inspector JSON over a log's lines at equal length."""
    sources = [r.layers for r in reads if r.layers] + [r.log.layers for r in reads if r.log and r.log.layers]
    return max(sources, key=len) if sources else []


# --- are these files one engine? --------------------------------------------------------------------

def conflicts(reads: list[FileRead]) -> list[str]:
    """What the files say that cannot all be true of one engine run, one phrase per fact."""
    if len(reads) < 2:
        return []
    logs = [(r, r.log) for r in reads if r.log is not None]
    found: list[str] = []

    def differ(what: str, items: list[tuple[FileRead, Any]], same: Callable[[Any, Any], bool],
               show: Callable[[Any], str]) -> None:
        """Files that agree go in one class; more than one class is a conflict, shown one file
        per class (for tables: the entries that differ)."""
        classes: list[list[tuple[FileRead, Any]]] = []
        for item in items:
            home = next((c for c in classes if all(same(item[1], other) for _, other in c)), None)
            if home is None:
                classes.append([item])
            else:
                home.append(item)
        if len(classes) > 1:
            found.append(f"{what}: " + " vs ".join(f"{show(c[0][1])} ({_names(r for r, _ in c)})" for c in classes))

    def agree(a: dict, b: dict) -> bool:
        return all(a[k] == b[k] for k in a.keys() & b.keys())

    def table(items: list[tuple[FileRead, dict]], show: Callable[[str, Any], str]) -> Callable[[dict], str]:
        """Shows the entries that differ between the files (those of the first such pair)."""
        keys = next(([k for k in a if k in b and a[k] != b[k]] for (_, a), (_, b) in itertools.combinations(items, 2)
                     if not agree(a, b)), [])
        return lambda v: ", ".join(show(k, v[k]) for k in keys[:2] if k in v)

    def dims(name: str, value: list[int]) -> str:
        return f"{name} {'x'.join(map(str, value))}"

    def basenames(log: LogFacts) -> frozenset[str]:
        return frozenset(Path(m).name for m in log.model_files)

    differ("different models", [(r, basenames(log)) for r, log in logs if log.model_files],
           lambda a, b: bool(a & b), lambda v: " / ".join(sorted(v)))
    differ("different TensorRT versions", [(r, log.tensorrt_version) for r, log in logs if log.tensorrt_version],
           lambda a, b: a == b, lambda v: v)
    differ("different devices", [(r, log.device) for r, log in logs if log.device],
           lambda a, b: all(a[k] == b[k] for k in ("name", "compute_capability", "uuid") if k in a and k in b),
           lambda v: str(v.get("name") or v.get("uuid")))
    shapes = [(r, s) for r in reads if (s := _tensor_dims(r))]
    differ("different tensor shapes", shapes, agree, table(shapes, dims))
    kernels = [(r, log.conv_weight_shapes) for r, log in logs if log.conv_weight_shapes]
    differ("different convolution kernels", kernels, agree, table(kernels, dims))
    builds = [(r, b) for r, log in logs
              if (b := {k: getattr(log, k) for k in _BUILD_FACTS if getattr(log, k) is not None})]
    differ("different builds", builds, agree, table(builds, lambda k, v: f"{k.replace('_', ' ')} {v}"))
    layer_sources = [(r, r.layers) for r in reads if r.layers] + [(r, log.layers) for r, log in logs if log.layers]
    differ("different layers", layer_sources,
           lambda a, b: _is_part({join_key(x.name) for x in a}, {join_key(x.name) for x in b}),
           lambda v: f"{len(v)} layers")
    profiles = [(r, r.profile) for r in reads if r.profile] + [(r, log.profile) for r, log in logs if log.profile]
    differ("different per-layer profiles", profiles, _same_profile,
           lambda v: f"{len(v.rows)} layers" + (f" over {v.count} iterations" if v.count is not None else ""))
    summaries = [(r, (log.throughput_qps, log.summary)) for r, log in logs if log.summary or log.throughput_qps]
    differ("different performance summaries", summaries, lambda a, b: a == b,
           lambda v: f"{v[0]} qps" if v[0] is not None else
           f"latency median {v[1].get('latency', {}).get('median')} ms")
    times = [(r, r.times) for r in reads if r.times]
    differ("different per-query times", times, lambda a, b: a == b, lambda v: f"{len(v)} queries")
    if found:
        return found
    # One of each: do they fit together?
    if times and summaries:
        measured = float(np.median([t["latencyMs"] for t in times[0][1]]))
        printed = summaries[0][1][1].get("latency", {}).get("median")
        if printed and not (1 / 1.5 <= measured / printed <= 1.5):
            found.append(f"not one run: the per-query times ({times[0][0].path.name}) have a median latency of "
                         f"{measured:.4g} ms, the performance summary ({summaries[0][0].path.name}) {printed} ms")
    if layer_sources and profiles:
        layer_file, layers = max(layer_sources, key=lambda item: len(item[1]))  # what combine() uses
        profile_file, profile = profiles[0]
        matched, _, _ = join_layers(layers, [row.name for row in profile.rows])
        if layer_file is not profile_file and len(matched) * 2 < min(len(layers), len(profile.rows)):
            found.append(f"different layers: only {len(matched)} of the {len(profile.rows)} profile rows of "
                         f"{profile_file.path.name} name one of the {len(layers)} layers of {layer_file.path.name}")
    return found


def _tensor_dims(read: FileRead) -> dict[str, list[int]]:
    """Tensor name -> dimensions, where a file gives them concretely (inference shapes, layers)."""
    dims: dict[str, list[int]] = {}
    layers = read.layers or (read.log.layers if read.log else [])
    for layer in layers:
        for tensor in layer.inputs + layer.outputs:
            if tensor.dims and tensor.name:
                dims.setdefault(tensor.name, tensor.dims)
    for tensor in read.io_tensors:
        if tensor.dims:
            dims.setdefault(tensor.name, tensor.dims)
    if read.log:
        dims.update(read.log.input_shapes)
    return dims


def _is_part(a: set[str], b: set[str]) -> bool:
    """One list of layers is (a cut copy of) the other."""
    return a <= b or b <= a


def _same_profile(a: Profile, b: Profile) -> bool:
    """The same profile, as two files print it (a JSON's digits and a table's rounding)."""
    if [r.name for r in a.rows] != [r.name for r in b.rows]:
        return False
    return all(abs(x.average_ms - y.average_ms) <= max(1e-4, 1e-3 * abs(x.average_ms)) for x, y in zip(a.rows, b.rows))


def _names(reads: Iterable[FileRead]) -> str:
    return ", ".join(r.path.name for r in reads)


def _describe_log(log: LogFacts) -> str:
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


def _has_build_facts(facts: LogFacts) -> bool:
    return any(v is not None for v in (facts.build_s, facts.layers_after_parsing, facts.builder_peak_device_bytes,
                                       facts.host_persistent_bytes))


def _layer_records(layers: list[EngineLayer], profile: Profile | None,
                   facts: LogFacts) -> tuple[list[LayerRecord], list[str], list[str]]:
    rows = profile.rows if profile else []
    matched, unmatched_rows, unmatched_layers = join_layers(layers, [r.name for r in rows])
    row_of_layer = {index: rows[[r.name for r in rows].index(name)] for name, index in matched.items()}
    memory = {join_key(k): v for k, v in facts.layer_memory.items()}
    records = []
    for index, layer in enumerate(layers):
        row = row_of_layer.get(index)
        mem = facts.layer_memory.get(layer.name) or memory.get(join_key(layer.name)) or {}
        records.append(LayerRecord(
            index=index, name=layer.name, type=layer.type or "?", times_ms=[], tactic=layer.tactic,
            input_tensors=[t.name for t in layer.inputs], output_tensors=[t.name for t in layer.outputs],
            input_shapes=[_display_dims(t) for t in layer.inputs], input_dtypes=[t.dtype or "?" for t in layer.inputs],
            output_shapes=[_display_dims(t) for t in layer.outputs],
            output_dtypes=[t.dtype or "?" for t in layer.outputs],
            input_bytes=layer.input_bytes, weight_bytes=layer.weight_bytes, output_bytes=layer.output_bytes,
            macs=layer.macs, fused_ops=" + ".join(_fused(layer.name)) or None,
            time_avg_ms=row.average_ms if row else None, time_median_ms=row.median_ms if row else None,
            time_share_percent=row.percentage if row else None,
            calls=profile.count if row and profile else None, **mem,
        ))
    for name in unmatched_rows:  # timed rows with no layer information: times only, sizes unknown
        row = next(r for r in rows if r.name == name)
        records.append(LayerRecord(index=len(records), name=name, type="?", times_ms=[], time_avg_ms=row.average_ms,
                                   time_median_ms=row.median_ms, time_share_percent=row.percentage,
                                   calls=profile.count if profile else None))
    return records, (unmatched_rows if layers else []), (unmatched_layers if rows else [])


def _display_dims(tensor) -> list[int] | None:
    """Dimensions as printed (negative = dynamic), vector formats reduced to the logical size."""
    if not tensor.raw_dims:
        return tensor.dims
    try:
        return [int(p.strip().split(":")[0]) for p in tensor.raw_dims.split(",") if p.strip()]
    except ValueError:
        return None


def _fused(name: str) -> list[str]:
    from farm.layers.engine import member_nodes

    members = member_nodes(name)
    return members if len(members) > 1 else []


def _cell(name: str, reads: list[FileRead], sweep: str, cell_id: str, layers: list[EngineLayer],
          facts: LogFacts) -> Cell:
    precision = _precision(facts, layers)
    first_input = next((t for layer in layers for t in layer.inputs), None)
    batch = first_input.dims[0] if first_input is not None and first_input.dims else None
    io_input = next((t for r in reads for t in r.io_tensors if t.is_input and t.dims), None)
    if batch is None and io_input is not None:  # 11.x "I/O Tensors" (layers listed by name only)
        batch = io_input.dims[0]
    firsts = {dims[0] for dims in facts.input_shapes.values() if dims}
    if batch is None and len(firsts) == 1:  # the inference shapes (dynamic-shape engines); all inputs agree
        batch = firsts.pop()
    definition = summary_definition(facts)
    if definition["batch"] == "implicit":  # --batch=N: each query ran N samples, whatever the layers say
        batch = facts.inference_batch
    paths = [r.path for r in reads]
    size = sum(r.size for r in reads)
    model = ModelArtifact(name, "ingest:" + ",".join(p.name for p in paths), paths[0].resolve(), cell_id, size, (), {})
    options = {"ingested_files": [str(p) for p in paths], "trtexec_options": facts.options}
    runs = [r.run for r in reads if r.run]
    if runs:
        options["ingested_run"] = runs[0]
    if facts.throughput_qps is not None or facts.queries_printed is not None:
        # what the printed figures meant in that version; throughput_qps is stored as queries/s
        options["trtexec_definitions"] = {
            "batch": definition["batch"], "samples_per_printed_query": definition["per_query"],
            "printed_throughput": facts.throughput_qps, "printed_queries": facts.queries_printed,
            "printed_figures_are_zeros_of_explicit_batch": definition["zeros"]}
    if facts.build_passes > 1:
        options["build_passes"] = facts.build_passes  # build figures are the last (the engine's) pass's
    notes = f"ingested from {len(paths)} file(s) of real TensorRT output"
    if facts.tensorrt_version:
        notes += f" (TensorRT {facts.tensorrt_version})"
    return Cell(cell_id, sweep, model, precision, batch, None, "tensorrt", options, Measurement(), {}, None, notes,
                "cuda")


def _precision(facts: LogFacts, layers: list[EngineLayer]) -> str:
    loaded = facts.options.get("build.Load engine") or "--loadEngine=" in (facts.command or "")
    option = "" if loaded else facts.options.get("build.Precision", "")  # a loaded engine's log prints defaults
    flags = [_PRECISIONS[p] for p in _PRECISIONS if p in option.upper()]
    if flags:
        return "+".join(flags)
    types = {t.dtype for layer in layers for t in layer.inputs + layer.outputs if t.dtype}
    for trt, name in (("Int8", "int8"), ("FP8", "fp8"), ("Half", "fp16"), ("BFloat16", "bf16"), ("Float", "fp32")):
        if trt in types:
            return name  # the lowest precision any layer runs, as the layer information says
    return "unknown"


def _device_row(device: dict[str, Any]) -> dict[str, Any]:
    ident = device.get("uuid") or hashlib.sha256(json.dumps(device, sort_keys=True).encode()).hexdigest()[:16]
    return {"device_id": f"gpu-{ident}", "kind": "cuda", **device}


def summary_definition(facts: LogFacts) -> dict[str, Any]:
    """How to read a log's printed Throughput and query count in its version (trt_versions): the
    number of samples each printed query stands for (`per_query`; None: unknown, so queries/s are
    unknown), whether the figures are the 7.x explicit-batch zeros (not figures), and what the
    batch was ('implicit' with --batch / "Batch: N", 'explicit', or None)."""
    rules = rules_for(facts.tensorrt_version, facts.layout_major)
    stated = facts.inference_batch
    if rules.explicit_batch_prints_zero and stated == 0:
        return {"per_query": None, "zeros": True, "batch": "explicit"}
    if stated:
        return {"per_query": stated, "zeros": False, "batch": "implicit"}
    if rules.major == 7:  # implicit or explicit, with a batch the log does not state
        return {"per_query": None, "zeros": facts.throughput_qps == 0, "batch": None}
    return {"per_query": 1, "zeros": False, "batch": "explicit" if stated == 0 else None}


def _from_summary(facts: LogFacts, batch: int | None) -> dict[str, Any]:
    """A measurements row from trtexec's performance summary (its statistics, as printed), its
    throughput and query count as queries (what a query meant in that version: summary_definition)."""
    latency = facts.summary.get("latency", {})
    definition = summary_definition(facts)
    per_query, printed = definition["per_query"], facts.throughput_qps
    qps = samples = queries = None
    if printed is not None and not definition["zeros"]:
        if per_query is not None:
            qps = printed / per_query
        if definition["batch"] == "implicit" or (definition["batch"] is None and definition["per_query"] is None):
            samples = printed  # batch x queries / walltime
        elif qps is not None and batch:
            samples = qps * batch
    if facts.queries_printed is not None and not definition["zeros"] and per_query:
        queries = facts.queries_printed // per_query
    walltime = facts.host_walltime_s if facts.host_walltime_s is not None else facts.trace_walltime_s
    row: dict[str, Any] = {"queries": queries, "throughput_qps": qps, "throughput_samples_per_s": samples,
                           "host_walltime_ms": walltime * 1e3 if walltime else None}
    for stat in ("min", "mean", "median", "p90", "p95", "p99", "max"):
        row[f"latency_{stat}_ms"] = latency.get(stat)
    for phase in ("enqueue", "h2d", "compute", "d2h"):
        stats = facts.summary.get(phase, {})
        row[f"{phase}_mean_ms"] = stats.get("mean")
        row[f"{phase}_median_ms"] = stats.get("median")
    row["compute_p99_ms"] = facts.summary.get("compute", {}).get("p99")
    return row


def _from_times(times: list[dict[str, float]], batch: int | None) -> tuple[Samples, dict[str, Any]]:
    """Samples and statistics from `--exportTimes`, computed as for the farm's own runs; throughput
    as trtexec defines it: queries / (last D2H end - first H2D start)."""
    latency = np.asarray([t["latencyMs"] for t in times])

    def column(key: str) -> np.ndarray | None:
        return np.asarray([t[key] for t in times]) if all(key in t for t in times) else None

    start = column("startH2dMs")
    end = column("endD2hMs")
    start_enqueue, end_enqueue = column("startEnqMs"), column("endEnqMs")
    enqueue = end_enqueue - start_enqueue if start_enqueue is not None and end_enqueue is not None else None
    walltime = float(end[-1] - start[0]) if start is not None and end is not None else None
    samples = Samples(repeat=np.zeros(len(times), dtype=np.int32),
                      start_ms=(start - start[0]) if start is not None else np.zeros(len(times)),
                      latency_ms=latency, enqueue_ms=enqueue, h2d_ms=column("h2dMs"), compute_ms=column("computeMs"),
                      d2h_ms=column("d2hMs"), walltime_ms=walltime or 0.0)
    qps = len(times) / (walltime / 1e3) if walltime else None
    row: dict[str, Any] = {"queries": len(times), "throughput_qps": qps,
                           "throughput_samples_per_s": qps * batch if qps and batch else None,
                           "host_walltime_ms": walltime, "repeats": 1}
    row |= latency_stats(latency) | phase_stats(samples)
    return samples, row


# --- writing ----------------------------------------------------------------------------------------

def ingested_on() -> str:
    """The importing machine, for the `cells.ingested_on` column: host name and farm version."""
    return f"{socket.gethostname()} (farm {__version__})"


class IngestWarehouse(Warehouse):
    """The warehouse, writing ingested cells: their `cells` row also says which machine imported
    them, and a cell whose write fails is removed whole (no partial cell is left behind)."""

    def __init__(self, root: str | Path, imported_by: str | None = None) -> None:
        super().__init__(root)
        self.imported_by = imported_by or ingested_on()

    def _write(self, table: str, sweep: str, key: str, rows: list[dict[str, Any]]) -> None:
        if table == "cells":
            rows = [{**row, "ingested_on": self.imported_by} for row in rows]
        super()._write(table, sweep, key, rows)

    def write_engine(self, engine: EngineIngest) -> None:
        cell, result = engine.cell, engine.result
        device_file = self.table_dir(cell.sweep, "devices") / f"{result.device['device_id']}.parquet" \
            if result.device else None
        device_existed = device_file is not None and device_file.exists()
        try:
            self.write_cell(cell, result, "ingest", "")
        except BaseException:
            for table in ("cells", *PER_CELL_TABLES):
                directory = self.table_dir(cell.sweep, table)
                (directory / f"{cell.cell_id}.parquet").unlink(missing_ok=True)
                for tmp in directory.glob(f".{cell.cell_id}.parquet.*.tmp"):
                    tmp.unlink(missing_ok=True)
            if device_file is not None and not device_existed:
                device_file.unlink(missing_ok=True)
            raise
