"""A trtexec `--tuningCacheFile` as cells: one cell per build route (farm.trt_output.tuning_cache).

Each route is an engine of its own (the same model built with other builder knobs), so each is a
cell: backend `tensorrt`, options the route (`build_route`) and the tuning run's settings, the
cell ok with its GPU time as `compute_mean_ms`, or failed with trtexec's words where the route
crashed. Its accuracy rows are trtexec's per-output loss against `--loadRefOutputs`, judged by
trtexec's own rule (fail where loss >= `--accuracyThreshold`; not judged without a threshold).
Nothing else is stated by the file: no latency distribution, no throughput, no device, no layers.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from farm.ingest.combine import EngineIngest, FileReport
from farm.ingest.files import FileRead
from farm.measurement_row import MeasurementRow
from farm.records import Cell, CellResult, MeasurementSettings, ModelArtifact
from farm.trt_output import TuningCache, TuningRoute

GPU_TIME_NOTE = ("gpu_time from trtexec's --tuningCacheFile: the mean GPU compute time of every query of this "
                 "route's run, its warm-up queries included (not trtexec's reported GPU Compute Time); no latency "
                 "distribution or throughput")


def tuning_engines(read: FileRead, sweep: str, name: str | None = None) -> list[EngineIngest]:
    """One EngineIngest per build route of the tuning cache `read` holds, in the file's order."""
    cache = read.tuning
    assert cache is not None
    model = name or (Path(cache.model).stem if cache.model else read.path.name.split(".")[0])
    return [_engine(read, cache, route, sweep, model) for route in cache.routes]


def _engine(read: FileRead, cache: TuningCache, route: TuningRoute, sweep: str, model: str) -> EngineIngest:
    digest = hashlib.sha256(sweep.encode() + model.encode() + read.digest + str(route.line).encode())
    cell_id = digest.hexdigest()[:16]
    # `route`: the route's place in the file (1 = the first), the short name tables show; `build_route` its knobs
    options = {"route": route.line - 1, "build_route": route.build_route, "tuning_expr": cache.header.get("tuning_expr"),
               "searching_algorithm": cache.header.get("searching_algorithm"),
               "tuner_version": cache.header.get("tuner_version"), "trtexec_command": cache.header.get("command_line"),
               "ingested_files": [str(read.path)]}
    artifact = ModelArtifact(name=model, source=f"ingest:{read.path.name}", path=read.path.resolve(),
                             sha256=hashlib.sha256(read.digest).hexdigest()[:16], size_bytes=read.size, inputs=(),
                             dims={})
    cell = Cell(cell_id=cell_id, sweep=sweep, model=artifact, precision="unknown", batch=None, profile=None,
                backend="tensorrt", options=options, measurement=MeasurementSettings(), input_shapes={},
                unsupported_reason=None, notes=f"ingested from a trtexec tuning cache; {GPU_TIME_NOTE}",
                device_kind="cuda")
    if route.crashed:
        result = CellResult(cell_id=cell_id, status="failed", reason=f"trtexec: {route.error_message or 'crashed'}")
    else:
        result = CellResult(cell_id=cell_id, status="ok",
                            measurement=(MeasurementRow(compute_mean_ms=route.gpu_time_ms)
                                         if route.gpu_time_ms is not None else None),
                            accuracy=_accuracy(cell_id, cache, route))
    found = f"line {route.line}, build route {route.iteration} ({route.build_route or 'the default route'})"
    return EngineIngest(name=f"{model}.route{route.line - 1}", cell=cell, result=result,
                        files=[FileReport(path=read.path, kind=read.kind, found=found)], unmatched_profile_rows=[],
                        unmatched_layers=[])


def _accuracy(cell_id: str, cache: TuningCache, route: TuningRoute) -> list[dict]:
    """trtexec's loss per output, judged by its rule: fail at loss >= threshold (`--accuracyThreshold`),
    pass below it; unjudged without a threshold, or where trtexec wrote no value (NaN)."""
    threshold, algorithm = cache.threshold, cache.algorithm or "?"
    rows = []
    for output, loss in (route.accuracy_loss or {}).items():
        if loss is None or threshold is None:
            verdict = "unjudged"
        else:
            verdict = "fail" if loss >= threshold else "pass"
        rows.append({"cell_id": cell_id, "output_name": output, "reference": "trtexec --loadRefOutputs",
                     "tolerance": f"{algorithm} loss < {threshold} (trtexec --accuracyThreshold)" if threshold
                     else f"{algorithm} loss; no --accuracyThreshold: trtexec judged nothing",
                     "verdict": verdict, "worst_metric": f"{algorithm} loss", "worst_value": loss})
    return rows
