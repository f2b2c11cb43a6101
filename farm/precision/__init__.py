"""Precision as an ONNX-to-ONNX step, shared by the backends that read precision from the model
(ONNX Runtime, TensorRT's strongly typed networks, trtexec).

- fp16 (fp16.py): onnxconverter-common's float16 conversion, keeping numerically sensitive operators,
  every node that reads a value beyond fp16's range (weights, and activations of a seeded run of
  the fp32 model) and (by default) the model's inputs and outputs in fp32.
- int8 (int8.py): explicit quantization with ONNX Runtime's `quantize_static`, Q/DQ format, symmetric
  activations and weights (the form TensorRT's parser accepts), calibrated on the data the sweep
  file names or, when it names none, on seeded synthetic data, which the results then say.

Transforms are checked, not trusted (farm.precision.checks): every output passes onnx.checker's
full check and loads in ONNX Runtime, and what changed is counted, subgraphs included. An
invalid output, or one where nothing changed, raises TransformUnsupported (the cell is
`unsupported`, never stored under a precision it did not get).
Results are cached by a hash of everything that changes them (model bytes, precision, options,
calibration data), so a second sweep does not recalibrate. Why these libraries: docs/precision.md.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import time
from pathlib import Path
from typing import Any

from farm.errors import UserError
from farm.files import write_atomic
from farm.precision.checks import TransformUnsupported, transform_label, verify
from farm.precision.fp16 import SENSITIVE_OPS, probe_shapes, to_fp16
from farm.precision.int8 import calibration_batches, calibration_hash, to_int8
from farm.records import Calibration  # moved to farm.records

__all__ = ["TRANSFORMS", "Calibration", "Transformed", "TransformUnsupported", "calibration_batches", "transform"]

TRANSFORM_VERSION = 7  # bump when a transform changes, so cached models are made again (7: old opsets converted first)
TRANSFORMS = ("fp16", "int8")


@dataclasses.dataclass
class Transformed:
    path: Path
    seconds: float  # time of the transform, 0 when it came from the cache
    cached: bool
    calibration: str | None
    summary: str = ""  # one line: what the transform did (builds.transform_summary)
    counts: dict[str, int] = dataclasses.field(default_factory=dict)  # builds.transform_<name>
    tool: str = ""  # the library and its version (builds.transform_tool)
    onnxruntime_cpu: str | None = None  # how ONNX Runtime's CPU EP runs it (fp32 kernels between Casts...)


def transform(model_path: Path, model_sha256: str, precision: str, inputs, shapes: dict[str, tuple[int, ...]],
              calibration: Calibration, keep_io_types: bool, cache_dir: Path, seed: int) -> Transformed:
    """The model converted to `precision` (cached by content hash), checked; raises
    TransformUnsupported when the output is invalid or nothing was converted."""
    calibrated_on = calibration_hash(calibration, inputs, shapes, seed) if precision == "int8" else None
    key = hashlib.sha256(json.dumps({
        "model": model_sha256, "precision": precision, "keep_io_types": keep_io_types,
        "calibration": calibrated_on, "version": TRANSFORM_VERSION, "sensitive": SENSITIVE_OPS,
        # fp16: the seeded run that finds activations beyond fp16's range
        "probe": [seed, sorted(probe_shapes(inputs, shapes).items())] if precision == "fp16" else None,
    }, sort_keys=True).encode()).hexdigest()[:24]
    path = cache_dir / "precision" / f"{key}.{precision}.onnx"
    report_path = path.with_suffix(".json")
    described = calibration.describe() if precision == "int8" else None
    if report_path.is_file():
        with contextlib.suppress(OSError, ValueError):
            report = json.loads(report_path.read_text())
            if "unsupported" in report:  # the same model, the same transform: the same verdict
                raise TransformUnsupported(report["unsupported"], report.get("detail", ""))
            if path.is_file():
                return Transformed(path, 0.0, True, described, **report)
    from farm.files import TEMP_DIR_NAME

    temp_area = cache_dir / TEMP_DIR_NAME  # emptied by the next sweep if this one is killed
    start = time.perf_counter()
    done: dict[str, Any] = {}

    def transform(tmp: Path) -> None:  # checked in its temporary file, renamed into place only if good
        if precision == "fp16":
            report = to_fp16(model_path, tmp, keep_io_types, inputs, shapes, seed)
        elif precision == "int8":
            report = to_int8(model_path, tmp, calibration_batches(calibration, inputs, shapes, seed), temp_area)
        else:
            raise ValueError(f"no ONNX transform for {precision}")
        done["seconds"] = time.perf_counter() - start
        report["onnxruntime_cpu"], skipped = verify(tmp, transform_label(precision), temp_area, model_path,
                                                    quantized=precision == "int8")
        report["summary"] += skipped
        done["report"] = report

    try:
        write_atomic(path, transform, tmp_dir=temp_area, make_parents=True)
        _write_json(report_path, done["report"], temp_area)
    except TransformUnsupported as exc:
        with contextlib.suppress(UserError):  # the verdict stands even where it cannot be cached
            if exc.cacheable:
                _write_json(report_path, {"unsupported": exc.reason, "detail": exc.detail}, temp_area)
        raise
    return Transformed(path, done["seconds"], False, described, **done["report"])


def _write_json(path: Path, report: dict, temp_area: Path) -> None:
    write_atomic(path, json.dumps(report, sort_keys=True), tmp_dir=temp_area)
