"""Run one cell end to end: precision transform, build, measure, check accuracy, profile layers.
Never raises.

This is what an executor calls for each cell, in-process or inside a Ray actor. A failure
becomes a `failed` result carrying the reason (one line) and the traceback. The backend sees only
a `BuildRequest` and the feeds; what it can do is its declared `capabilities`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import importlib
import shutil
import tempfile
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

from farm.accuracy import REFERENCE
from farm.accuracy import check as check_accuracy
from farm.backends.base import Backend
from farm.backends.registry import backend_class, engine_libraries
from farm.config import NATIVE_PREFIXES
from farm.errors import EngineUnsupported, describe, first_line
from farm.measurement_row import MeasurementRow
from farm.models import make_feeds
from farm.models.opset import runnable
from farm.precision import TRANSFORMS, Transformed, TransformUnsupported, transform
from farm.provenance import farm_commit, host_info, library_versions
from farm.records import BuildRequest, Cell, CellResult, Samples, now
from farm.serving import loadgen_missing
from farm.serving.cell import serving_rows
from farm.telemetry import cell_window, unavailable_row

__all__ = ["CellResult", "Log", "built_backend", "now", "run_cell", "warm_up"]  # CellResult and now: from farm.records

Log = Callable[[str], None]


def run_cell(cell: Cell, cache_dir: Path, log: Log = lambda message: None,
             timing: Callable[[bool], None] = lambda on: None,
             checkpoint: Callable[[CellResult], None] = lambda result: None) -> CellResult:
    """Build, measure and profile one cell; any exception becomes a failed result.

    `log` receives progress lines (the executor tags them with the cell and shows them); `timing`
    True when the timed loop starts and False when it ends, so that whoever watches this process
    can keep its costlier readings out of the timed window (farm.executor.cell_process);
    `checkpoint` the result as it stands before per-layer profiling (the step after the figures),
    so that a process that dies there does not take the figures with it."""
    result = CellResult(cell.cell_id, "ok", started_at=now(), host=host_info(), versions=library_versions(engine_libraries()),
                        farm_commit=farm_commit())
    if cell.unsupported_reason:
        result.status, result.reason = "unsupported", cell.unsupported_reason
    elif cell.model.error:
        result.status, result.reason = "failed", cell.model.error
    else:
        backend = backend_class(cell.backend)(cell.options)
        unavailable = backend.unavailable_reason() or (cell.serving and loadgen_missing())
        if unavailable:
            result.status, result.reason = "skipped", unavailable
        else:
            _run_backend(backend, cell, cache_dir, result, log, timing, checkpoint)
    result.finished_at = now()
    return result


def warm_up(device_kind: str) -> None:
    """Prepare a fresh cell process for cells of `device_kind` before the first one arrives: for
    'cuda', import PyTorch and ONNX Runtime and open the GPU's CUDA context (about 4-5 s on an H100
    host). Best effort: what fails here is left for the cell to meet, and report, itself. Touches
    no timing: cells still warm up as before."""
    if device_kind != "cuda":
        return
    try:
        import torch

        if torch.cuda.is_available():
            torch.zeros(1, device="cuda")  # the CUDA context
    except Exception:  # noqa: BLE001 - no torch, no GPU, a broken install: the cells say so
        pass
    try:
        import onnxruntime  # noqa: F401
    except Exception:  # noqa: BLE001 - as above: the cells say so
        pass
    gc.collect()


# torch.compile's modules in steps, so that a cell arriving mid-way waits for one step, not for
# all of dynamo (5-6 s on an H100 host, one import): first what dynamo and inductor import from
# other packages, then dynamo's own package, then inductor's heaviest modules. Chosen from
# `python -X importtime -c "import torch._dynamo, torch._inductor.compile_fx"` on torch 2.13's CPU
# build (no step over ~1.3 s on a 2-core VM; a CUDA build's inductor imports Triton as well, its
# own step). A module this torch lacks is skipped; the last step imports whatever is left.
COMPILER_IMPORT_STEPS = ("sympy.polys", "networkx", "torch.fx.experimental.symbolic_shapes", "torch.distributed.tensor",
                         "torch._dynamo", "triton", "torch._inductor.decomposition", "torch._inductor.lowering",
                         "torch._inductor.compile_fx")


def warm_up_compiler(device_kind: str, wanted: Callable[[], bool]) -> None:
    """Then, while `wanted()` (no cell is waiting), import torch.compile's modules step by step
    (COMPILER_IMPORT_STEPS: 8-10 s on an H100 host, which a torch.compile cell's build time would
    otherwise include). A cell that arrives first waits at most for the step under way."""
    if device_kind != "cuda":
        return
    for module in COMPILER_IMPORT_STEPS:
        if not wanted():
            return
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:  # the step itself absent (this torch, this build): skipped
            if not (exc.name and module.startswith(exc.name)):
                return  # something it needs is missing: the cells meet that themselves, and say so
        except Exception:  # noqa: BLE001 - as in warm_up: the cells say so
            return


def build_request(cell: Cell, model_path: Path, work_dir: Path, cache_dir: Path | None) -> BuildRequest:
    """What the backend receives for `cell`: its shapes and profiles, never the cell itself."""
    return BuildRequest(model_path=model_path, model_sha256=cell.model.sha256, precision=cell.precision,
                        batch=cell.batch, input_shapes=cell.input_shapes, options=cell.options,
                        measurement=cell.measurement, work_dir=work_dir, cache_dir=cache_dir,
                        profile=cell.profile_shapes, all_profiles=cell.all_profile_shapes,
                        dynamic=any(spec.dynamic for spec in cell.model.inputs))


def _run_backend(backend: Backend, cell: Cell, cache_dir: Path, result: CellResult, log: Log,
                 timing: Callable[[bool], None], checkpoint: Callable[[CellResult], None]) -> None:
    work_dir = cache_dir / "work" / cell.cell_id
    shutil.rmtree(work_dir, ignore_errors=True)
    work_dir.mkdir(parents=True)
    try:
        _build_and_measure(backend, cell, cache_dir, work_dir, result, log, timing, checkpoint)
    except MemoryError:
        result.status = "failed"
        result.reason = "out of memory while building or running: try a smaller batch size or fewer threads"
        result.traceback = traceback.format_exc()
    except EngineUnsupported as exc:  # a limit of the engine, not an accident: what to do is in it
        result.status, result.reason, result.traceback = "unsupported", first_line(exc)[:1000], traceback.format_exc()
    except Exception as exc:  # noqa: BLE001 - a failed cell is a result; the sweep goes on
        result.status = "failed"
        result.reason = describe(exc)[:500]
        result.traceback = traceback.format_exc()
    finally:
        backend.close()
        del backend
        gc.collect()
        shutil.rmtree(work_dir, ignore_errors=True)


def _transformed(backend: Backend, cell: Cell, cache_dir: Path, log: Log) -> Transformed | None:
    """The cell's model in its precision, where the backend takes precision as an ONNX transform
    (None: the model as it is). Raises TransformUnsupported."""
    if not (backend.capabilities.onnx_precision and cell.precision in TRANSFORMS):
        return None
    log(f"converting to {cell.precision}")
    source, converted = runnable(cell.model.path, cache_dir)  # the transforms run ONNX Runtime, as of opset 7
    done = transform(source, cell.model.sha256, cell.precision, cell.model.inputs, cell.input_shapes,
                     cell.calibration, cell.keep_io_types, cache_dir, cell.measurement.seed)
    return dataclasses.replace(done, summary="; ".join(filter(None, [converted, done.summary]))) if converted else done


@contextlib.contextmanager
def built_backend(cell: Cell, cache_dir: Path) -> Iterator[tuple[Backend, dict[str, np.ndarray]]]:
    """`cell`'s backend built as `run_cell` builds it, with its feeds; closed on leaving. For
    measuring cells side by side (farm compare --confirm). Raises what building raises, and
    EngineUnsupported where the engine is not available here."""
    backend = backend_class(cell.backend)(cell.options)
    (cache_dir / "work").mkdir(parents=True, exist_ok=True)
    work_dir = Path(tempfile.mkdtemp(prefix=f"{cell.cell_id}-side-", dir=cache_dir / "work"))  # two of one cell
    try:
        unavailable = backend.unavailable_reason()
        if unavailable:
            raise EngineUnsupported(unavailable)
        feeds = make_feeds(cell.model.inputs, cell.input_shapes, cell.measurement.seed)
        transformed = _transformed(backend, cell, cache_dir, lambda message: None)
        model_path = transformed.path if transformed is not None else cell.model.path
        backend.build(build_request(cell, model_path, work_dir, cache_dir), feeds)
        yield backend, feeds
    finally:
        backend.close()
        del backend
        gc.collect()
        shutil.rmtree(work_dir, ignore_errors=True)


def _build_and_measure(backend: Backend, cell: Cell, cache_dir: Path, work_dir: Path, result: CellResult,
                       log: Log, timing: Callable[[bool], None], checkpoint: Callable[[CellResult], None]) -> None:
    feeds = make_feeds(cell.model.inputs, cell.input_shapes, cell.measurement.seed)
    try:
        transformed = _transformed(backend, cell, cache_dir, log)
    except TransformUnsupported as exc:  # never stored under a precision it did not get
        result.status, result.reason, result.traceback = "unsupported", exc.reason, exc.detail
        return
    log("building")
    model_path = transformed.path if transformed is not None else cell.model.path
    result.build = backend.build(build_request(cell, model_path, work_dir, cache_dir), feeds)
    if transformed is not None:
        _record_transform(result, transformed, cell)
    _record_exporter(result, cell, backend)
    result.device = backend.device_row()
    seconds = result.build.build_s
    log(f"built in {seconds:.2f} s; measuring" if seconds is not None else "built; measuring")
    if cell.serving is not None:  # under LoadGen's load instead of the timing loop (farm.serving)
        timing(True)  # LoadGen's tests are timed too: the watcher's costlier readings wait
        try:
            result.serving = serving_rows(backend.query_fn(feeds), cell.serving, cell.batch,
                                          cache_dir / "serving" / cell.cell_id, log, cell.measurement.seed,
                                          lambda: cell_window(cell.device_kind, cell.measurement.telemetry,
                                                              (result.device or {}).get("uuid")))
        finally:
            timing(False)
        return
    timing(True)
    try:
        result.samples, measurement, telemetry = _measure(backend, cell, result.device, feeds)
    finally:
        timing(False)
    # What the latency includes: backends that know say so in runtime_stats (TensorRT: transfers,
    # CUDA graph, spin-wait); every backend knows its streams and its own version.
    engine = backend.name if backend.name in result.versions else None
    result.measurement = MeasurementRow.of({
        "timing_streams": backend.inferences_per_query,
        "timing_engine_version": f"{engine} {result.versions[engine]}" if engine else None,
        **measurement, **backend.runtime_stats(), **telemetry})
    if cell.tolerance is not None and backend.capabilities.outputs:
        log("checking accuracy against the fp32 reference")
        result.accuracy = _accuracy_rows(backend, cell, feeds, cache_dir, log)
    if cell.measurement.layer_iterations:
        checkpoint(dataclasses.replace(result, finished_at=now()))
        log("profiling layers")
        result.layers = backend.profile_layers(feeds, cell.measurement.layer_iterations)


def _measure(backend: Backend, cell: Cell, device: dict | None,
             feeds: dict[str, np.ndarray]) -> tuple[Samples | None, dict, dict]:
    """The backend's samples and measurements row, and the GPU telemetry of its counted repeats
    (farm.telemetry: device cells only; nulls and the reason otherwise)."""
    window, why = cell_window(cell.device_kind, cell.measurement.telemetry, (device or {}).get("uuid"))
    try:
        samples, measurement = backend.measure(feeds, window)
        if window is None:
            return samples, measurement, unavailable_row(why)
        inferences = (len(samples) if samples is not None else measurement.get("queries") or 0) \
            * backend.inferences_per_query
        return samples, measurement, window.row(inferences, cell.batch)
    finally:
        if window is not None:
            window.close()


def _record_transform(result: CellResult, transformed: Transformed, cell: Cell) -> None:
    """What the precision transform did, in the build's `transform_*` columns."""
    build = result.build
    build.precision_transform_s = transformed.seconds
    build.precision_transform_cached = transformed.cached
    build.calibration = transformed.calibration
    note = backend_class(cell.backend).transform_note(cell.options, transformed)  # e.g. ONNX Runtime CPU's kernels
    # what the backend did to the file on top (a TensorRT backend's Q/DQ repair) stays after it
    build.transform_summary = "; ".join(filter(None, [transformed.summary, note, build.transform_summary]))
    build.transform_tool = transformed.tool
    for name, count in transformed.counts.items():  # builds.transform_<name>
        setattr(build, f"transform_{name}", count)


def _record_exporter(result: CellResult, cell: Cell, backend: Backend) -> None:
    """Which exporter made the ONNX file an engine ran, for a PyTorch source (`transform_summary`)."""
    from farm.models.native import read_native

    meta = read_native(cell.model.path) if cell.model.source.startswith(NATIVE_PREFIXES) else None
    if not meta or not meta.get("exporter") or backend.capabilities.native_modules:
        return
    build = result.build
    build.transform_summary = "; ".join(filter(None, [f"ONNX by {meta['exporter']}", build.transform_summary]))[:1000]


def _accuracy_rows(backend: Backend, cell: Cell, feeds: dict[str, np.ndarray], cache_dir: Path,
                   log: Log) -> list[dict]:
    """The cell's accuracy rows; a check that cannot run says so (verdict 'unjudged', never 'fail'),
    and the latency stands."""
    def unchecked(why: str) -> list[dict]:
        return [{"output_name": "(all outputs)", "reference": REFERENCE, "verdict": "unjudged",
                 "tolerance": str(cell.tolerance), "worst_metric": f"not checked: {why}"[:300]}]

    if cell.model.onnx_error:  # the reference runs the ONNX export, which this model does not have
        return unchecked("no fp32 reference (the reference runs the model's ONNX export, which PyTorch could not make)")
    if cell.model.onnx_unsupported(cell.batch):
        return unchecked(f"no fp32 reference at batch {cell.batch} (the reference runs the model's ONNX export, "
                         f"which runs batch {cell.model.onnx_fixed_batch[0]} only)")
    try:
        return check_accuracy(backend.outputs, cell, feeds, cache_dir, log)
    except MemoryError:
        raise
    except Exception as exc:  # noqa: BLE001 - an accuracy check that cannot run is said, never a failed cell
        from farm.backends.onnxruntime import lacking_operator

        lacks = lacking_operator(exc, "")
        why = f"the fp32 reference cannot run: {lacks}" if lacks else f"{type(exc).__name__}: {first_line(exc)}"
        log(f"accuracy could not be checked: {why}")
        return unchecked(why)


