"""The files of one engine combined into one cell and its result: layer information joined to
per-layer times by name, per-layer memory by the engine explorer's rule, the per-query times or
the performance summary as the measurement, build facts as the build, the device as a `devices`
row. Where and with what it ran comes from the files alone: no host, CPU or library of this
machine (unknown stays null)."""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path

import numpy as np

from farm.ingest.conflicts import conflicts
from farm.ingest.files import FileRead
from farm.records import Cell, CellResult, MeasurementSettings, ModelArtifact
from farm.trt_output import (
    BuildStatsFromLog,
    DeviceRowFromLog,
    EngineLayer,
    LayerRecordsFromEngineLayers,
    LogFacts,
    MeasurementFromSummary,
    MeasurementFromTimes,
    SamplesFromTimes,
    TimingFromLog,
    fill_weights,
    implausible,
    summary_definition,
)

_PRECISIONS = {"FP32": "fp32", "FP16": "fp16", "BF16": "bf16", "INT8": "int8", "FP8": "fp8", "TF32": "tf32"}


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


class NotMeasured(ValueError):
    """A figure in the files that trtexec cannot have measured (NaN, negative, over an hour a query)."""


class NothingToUse(ValueError):
    """Files recognised as TensorRT output that hold no layer, measurement or build figure."""


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
    joined = LayerRecordsFromEngineLayers(layers, profile, facts.layer_memory)
    cell = _cell(name, usable, sweep, digest.hexdigest()[:16], layers, facts)
    # Where and with what it ran: only what the files say. No host, CPU or library of this machine.
    result = CellResult(
        cell_id=cell.cell_id, status="ok", started_at=None, finished_at=None, host={},
        versions={"tensorrt": facts.tensorrt_version} if facts.tensorrt_version else {},
        farm_commit=None, layers=joined.records,
        build=BuildStatsFromLog(facts) if _has_build_facts(facts) else None,
        device=DeviceRowFromLog(facts),
    )
    with np.errstate(all="ignore"):  # a file's absurd figures (1e308) are refused below, not warned about
        if times:
            result.samples, result.measurement = SamplesFromTimes(times), MeasurementFromTimes(times, cell.batch)
        elif facts.throughput_qps is not None or facts.summary:
            result.measurement = MeasurementFromSummary(facts, cell.batch)
    if why := implausible(result.measurement, joined.records, result.samples):
        raise NotMeasured(f"{why}: the file is damaged or not trtexec's; nothing was written")
    if result.measurement is not None:  # what its latency includes, as the log says (null: unknown)
        result.measurement |= TimingFromLog(facts)
        if result.measurement.get("latency_includes_transfers") is False:
            _no_transfers(result)
    if not joined.records and result.measurement is None and result.build is None:
        what = ", ".join(f"{r.path.name} ({r.found})" for r in usable)
        failed = " trtexec reported FAILED." if facts.outcome == "FAILED" else ""
        raise NothingToUse(f"recognised as TensorRT output but nothing farm could use: no per-layer profile, layer "
                           f"information, performance summary, per-query times or build figures in {what}.{failed}")
    reports = [FileReport(path=r.path, kind=r.kind, found=r.found) for r in usable]
    return EngineIngest(name=name, cell=cell, result=result, files=reports,
                        unmatched_profile_rows=joined.unmatched_profile_rows, unmatched_layers=joined.unmatched_layers)


def _no_transfers(result: CellResult) -> None:
    """A run without data transfers (11.x's default, or --noDataTransfers) made no copies: its H2D and
    D2H are absent, never the zeros trtexec writes for them in --exportTimes and its summary."""
    for phase in ("h2d", "d2h"):
        for stat in ("mean", "median"):
            result.measurement[f"{phase}_{stat}_ms"] = None
    if result.samples is not None:
        result.samples.h2d_ms = result.samples.d2h_ms = None


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


def _has_build_facts(facts: LogFacts) -> bool:
    return any(v is not None for v in (facts.build_s, facts.layers_after_parsing, facts.builder_peak_device_bytes,
                                       facts.host_persistent_bytes))


def _batch(reads: list[FileRead], layers: list[EngineLayer], facts: LogFacts) -> int | None:
    """The batch the engine ran: its first layer input's, else the inspector's first input's, else
    the inference shapes' where all inputs agree; --batch=N (implicit batch) over all of them."""
    first_input = next((t for layer in layers for t in layer.inputs), None)
    batch = first_input.dims[0] if first_input is not None and first_input.dims else None
    io_input = next((t for r in reads for t in r.io_tensors if t.is_input and t.dims), None)
    if batch is None and io_input is not None:  # 11.x "I/O Tensors" (layers listed by name only)
        batch = io_input.dims[0]
    firsts = {dims[0] for dims in facts.input_shapes.values() if dims}
    if batch is None and len(firsts) == 1:  # the inference shapes (dynamic-shape engines); all inputs agree
        batch = firsts.pop()
    if summary_definition(facts)["batch"] == "implicit":  # --batch=N: each query ran N samples, whatever the layers say
        batch = facts.inference_batch
    return batch


def _cell(name: str, reads: list[FileRead], sweep: str, cell_id: str, layers: list[EngineLayer],
          facts: LogFacts) -> Cell:
    definition = summary_definition(facts)
    paths = [r.path for r in reads]
    model = ModelArtifact(name=name, source="ingest:" + ",".join(p.name for p in paths), path=paths[0].resolve(),
                          sha256=cell_id, size_bytes=sum(r.size for r in reads), inputs=(), dims={})
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
        options["build_passes"] = facts.build_passes  # build figures are the kept (the engine's) pass's
    notes = f"ingested from {len(paths)} file(s) of real TensorRT output"
    if facts.tensorrt_version:
        notes += f" (TensorRT {facts.tensorrt_version})"
    return Cell(cell_id=cell_id, sweep=sweep, model=model, precision=_precision(facts, layers),
                batch=_batch(reads, layers, facts), profile=None, backend="tensorrt", options=options,
                measurement=MeasurementSettings(), input_shapes={}, unsupported_reason=None, notes=notes,
                device_kind="cuda")


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
