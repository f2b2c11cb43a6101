"""trtexec's `--tuningCacheFile` (TensorRT 11.1 on: the global performance tuner, `--tuneBuildRoutes`).

JSON lines, as trtexec 11.1 writes them (`writeTuningCacheHeader` / `writeTuningCacheIteration` in
TensorRT OSS `samples/common/sampleUtils.cpp`): line 1 a header object (`tuner_version`,
`accuracy_algorithm`, `accuracy_parameter` {atol, rtol, epsilon}, `searching_algorithm`,
`command_line`, `default_build_route`, `tuning_expr`, `files`, `argv`), then one object per build
route tried: `iter`, `build_route`, `crash`, `error_message`, `accuracy_loss` (per output tensor,
or null), `gpu_time` (ms, or null). What the fields mean:

- `gpu_time`: the mean GPU compute time of every query of that route's child run, its warm-up
  queries included, so not trtexec's reported "GPU Compute Time" mean; no latency distribution.
- a crashed route (a signal, no result file): `crash` true, loss and time null, the cause in
  `error_message`;
- a route whose loss reached the threshold: `crash` false, its loss and time given, and
  `error_message` "child exited with status 1"; trtexec's rule is loss >= `epsilon`
  (`--accuracyThreshold`), checked only where that is above 0.
- `iter` counts within a search phase: the `mixed` search starts again at 0.
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

from farm.trt_output.figures import MAX_QUERY_MS
from farm.trt_output.json_files import FormatError

ROUTE_KEYS = ("iter", "build_route", "crash", "error_message", "accuracy_loss", "gpu_time")
# a query's mean GPU time above an hour is no measurement trtexec made (1e308 would be stored as a figure)
MAX_GPU_TIME_MS = MAX_QUERY_MS


@dataclasses.dataclass(frozen=True)
class TuningRoute:
    """One build route of a tuning cache, as trtexec recorded its child run."""

    line: int  # of the file, 1-based
    iteration: int
    build_route: str  # "-knob=value -knob=value": the knobs of the tuning expression
    crashed: bool
    error_message: str
    accuracy_loss: dict[str, float | None] | None  # per output tensor; None: crashed, or no reference outputs
    gpu_time_ms: float | None


@dataclasses.dataclass(frozen=True)
class TuningCache:
    header: dict[str, Any]
    routes: list[TuningRoute]

    @property
    def algorithm(self) -> str | None:
        return self.header.get("accuracy_algorithm")

    @property
    def threshold(self) -> float | None:
        """`--accuracyThreshold` (the header's epsilon); None where none was given (0)."""
        parameter = self.header.get("accuracy_parameter")
        epsilon = parameter.get("epsilon") if isinstance(parameter, dict) else None
        return float(epsilon) if isinstance(epsilon, (int, float)) and epsilon > 0 else None

    @property
    def model(self) -> str | None:
        files = self.header.get("files")
        onnx = files.get("onnx") if isinstance(files, dict) else None
        return onnx if isinstance(onnx, str) and onnx else None


def TuningCacheFromJsonLines(text: str) -> TuningCache:
    """The header and the routes of a tuning cache file; FormatError (naming the line) where it is
    not one, or a line is not what trtexec writes."""
    lines = [(number, line) for number, line in enumerate(text.splitlines(), 1) if line.strip()]
    if not lines:
        raise FormatError("it is empty")
    header = _object(*lines[0])
    if "tuner_version" not in header or "tuning_expr" not in header:
        raise FormatError("line 1 is no tuning cache header (no tuner_version and tuning_expr)")
    return TuningCache(header, [_route(number, _object(number, line)) for number, line in lines[1:]])


def _object(number: int, line: str) -> dict[str, Any]:
    try:
        value = json.loads(line)
    except json.JSONDecodeError as exc:
        raise FormatError(f"line {number} is not JSON ({exc.msg}): was the file cut while trtexec wrote it?") from None
    if not isinstance(value, dict):
        raise FormatError(f"line {number} is {type(value).__name__}, not an object")
    return value


def _route(number: int, value: dict[str, Any]) -> TuningRoute:
    missing = [key for key in ROUTE_KEYS if key not in value]
    if missing:
        raise FormatError(f"line {number} is a build route without {', '.join(missing)}")
    iteration, route, crash, message = value["iter"], value["build_route"], value["crash"], value["error_message"]
    loss, time = value["accuracy_loss"], value["gpu_time"]
    problems = [name for name, ok in (
        ("iter", isinstance(iteration, int) and not isinstance(iteration, bool) and iteration >= 0),
        ("build_route", isinstance(route, str)), ("crash", isinstance(crash, bool)),
        ("error_message", isinstance(message, str)),
        ("accuracy_loss", loss is None or (isinstance(loss, dict) and all(v is None or _number(v) for v in loss.values()))),
        ("gpu_time", time is None or (_number(time) and 0 <= time <= MAX_GPU_TIME_MS))) if not ok]
    if problems:
        raise FormatError(f"line {number}: {', '.join(f'{p} {json.dumps(value[p])}' for p in problems)} is not "
                          "what trtexec writes there")
    return TuningRoute(number, iteration, route, crash, message,
                       None if loss is None else {str(k): (None if v is None else float(v)) for k, v in loss.items()},
                       None if time is None else float(time))


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
