"""Run one cell from model to result rows: build, time, profile layers. Never raises.

This is what an executor calls for each cell, in-process or inside a Ray actor. A failure
becomes a `failed` result carrying the reason (one line) and the traceback.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import gc
import shutil
import traceback
from pathlib import Path
from typing import Any, Callable

from farm.backends import backend_class
from farm.backends.base import Backend, BuildStats, LayerRecord
from farm.accuracy import REFERENCE, check as check_accuracy
from farm.measure import Samples, run_timed, summarize
from farm.precision import TRANSFORMS, TransformUnsupported, transform
from farm.models import make_feeds
from farm.plan import Cell
from farm.provenance import farm_commit, host_info, library_versions

Log = Callable[[str], None]


@dataclasses.dataclass
class CellResult:
    """Everything one cell produced. Only plain data, so it crosses process boundaries."""

    cell_id: str
    status: str  # ok / failed / skipped / unsupported
    reason: str | None = None
    traceback: str | None = None
    started_at: dt.datetime | None = None
    finished_at: dt.datetime | None = None
    build: BuildStats | None = None
    measurement: dict[str, Any] | None = None
    samples: Samples | None = None
    layers: list[LayerRecord] = dataclasses.field(default_factory=list)
    device: dict[str, Any] | None = None
    host: dict[str, Any] = dataclasses.field(default_factory=dict)
    versions: dict[str, str] = dataclasses.field(default_factory=dict)
    farm_commit: str | None = None
    worker: dict[str, Any] | None = None  # which executor worker ran it (pid, host, visible GPUs)
    accuracy: list[dict[str, Any]] = dataclasses.field(default_factory=list)  # rows of the accuracy table
    attempts: int = 1  # runs of the cell this result ends (more when its process died and it was retried)
    earlier_attempts: list[str] = dataclasses.field(default_factory=list)  # how each earlier run died


def now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def run_cell(cell: Cell, cache_dir: Path, log: Log = lambda message: None) -> CellResult:
    """Build, measure and profile one cell; any exception becomes a failed result.

    `log` receives progress lines (the executor tags them with the cell and shows them)."""
    result = CellResult(cell.cell_id, "ok", started_at=now(), host=host_info(), versions=library_versions(),
                        farm_commit=farm_commit())
    if cell.unsupported_reason:
        result.status, result.reason = "unsupported", cell.unsupported_reason
    elif cell.model.error:
        result.status, result.reason = "failed", cell.model.error
    else:
        backend = backend_class(cell.backend)(cell.options)
        unavailable = backend.unavailable_reason()
        if unavailable:
            result.status, result.reason = "skipped", unavailable
        else:
            _build_and_measure(backend, cell, cache_dir, result, log)
    result.finished_at = now()
    return result


def _build_and_measure(backend: Backend, cell: Cell, cache_dir: Path, result: CellResult, log: Log) -> None:
    work_dir = cache_dir / "work" / cell.cell_id
    shutil.rmtree(work_dir, ignore_errors=True)
    work_dir.mkdir(parents=True)
    try:
        feeds = make_feeds(cell.model.inputs, cell.input_shapes, cell.measurement.seed)
        backend.prepare(cell, cache_dir)
        model_path, transformed = cell.model.path, None
        if backend.reads_precision_from_onnx and cell.precision in TRANSFORMS:
            log(f"converting to {cell.precision}")
            try:
                transformed = transform(cell.model.path, cell.model.sha256, cell.precision, cell.model.inputs,
                                        cell.input_shapes, cell.calibration, cell.keep_io_types, cache_dir,
                                        cell.measurement.seed)
            except TransformUnsupported as exc:  # never stored under a precision it did not get
                result.status, result.reason, result.traceback = "unsupported", exc.reason, exc.detail
                return
            model_path = transformed.path
        log("building")
        result.build = backend.build(model_path, feeds, cell.precision, work_dir)
        if transformed is not None:
            result.build.precision_transform_s = transformed.seconds
            result.build.precision_transform_cached = transformed.cached
            result.build.calibration = transformed.calibration
            note = transformed.onnxruntime_cpu if cell.backend == "onnxruntime" else None  # its CPU EP only
            result.build.transform_summary = "; ".join(filter(None, [transformed.summary, note]))
            result.build.transform_tool = transformed.tool
            for name, count in transformed.counts.items():  # builds.transform_<name>
                setattr(result.build, f"transform_{name}", count)
        result.device = backend.device_row()
        seconds = result.build.build_s
        log(f"built in {seconds:.2f} s; measuring" if seconds is not None else "built; measuring")
        if backend.self_timed:
            result.samples, measurement = backend.measure_self(feeds, cell.measurement, cell.batch)
        else:
            result.samples = run_timed(backend.query_fn(feeds), cell.measurement)
            measurement = summarize(result.samples, cell.batch, cell.measurement, backend.inferences_per_query)
        # What the latency includes: backends that know say so in runtime_stats (TensorRT: transfers,
        # CUDA graph, spin-wait); every backend knows its streams and its own version.
        engine = backend.name if backend.name in result.versions else None
        result.measurement = {"timing_streams": backend.inferences_per_query,
                              "timing_engine_version": f"{engine} {result.versions[engine]}" if engine else None,
                              } | measurement | backend.runtime_stats()
        if cell.tolerance is not None and backend.returns_outputs:
            log("checking accuracy against the fp32 reference")
            try:
                result.accuracy = check_accuracy(backend.outputs, cell, feeds, cache_dir, log)
            except MemoryError:
                raise
            except Exception as exc:  # the latency stands: an accuracy check that cannot run fails the check
                first = (str(exc).strip().splitlines() or ["(no message)"])[0]
                log(f"accuracy could not be checked: {type(exc).__name__}: {first}")
                result.accuracy = [{"output_name": "(all outputs)", "reference": REFERENCE,
                                    "verdict": "fail", "tolerance": str(cell.tolerance),
                                    "worst_metric": f"not checked: {type(exc).__name__}: {first}"[:300]}]
        if cell.measurement.layer_iterations:
            log("profiling layers")
            result.layers = backend.profile_layers(feeds, cell.measurement.layer_iterations)
    except MemoryError:
        result.status = "failed"
        result.reason = "out of memory while building or running: try a smaller batch size or fewer threads"
        result.traceback = traceback.format_exc()
    except Exception as exc:  # a failed cell is a result; the sweep goes on
        result.status = "failed"
        message = str(exc).strip().splitlines()
        result.reason = f"{type(exc).__name__}: {message[0] if message else '(no message)'}"[:500]
        result.traceback = traceback.format_exc()
    finally:
        backend.close()
        del backend
        gc.collect()
        shutil.rmtree(work_dir, ignore_errors=True)
