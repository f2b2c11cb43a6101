"""The one interface every backend implements (after Polygraphy's runner: small and stateful).

Life of a backend inside a cell: `build` (parse, optimize, compile: timed as the build),
`query_fn` (returns the callable the timing loop calls once per query), `profile_layers`
(a separate, untimed run with the engine's own per-layer profiler), then `close`.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, Callable, ClassVar

import numpy as np
from pydantic import BaseModel, ConfigDict


class BackendOptions(BaseModel):
    """Base of each backend's options table (`[backends.NAME]`): unknown keys are errors."""

    model_config = ConfigDict(extra="forbid", frozen=True)


@dataclasses.dataclass
class BuildStats:
    """What building the artifact (engine, optimized session) cost and produced."""

    build_s: float
    artifact_bytes: int | None = None
    cache_hits: int | None = None
    builder_peak_memory_bytes: int | None = None
    layers_before_fusion: int | None = None
    layers_after_fusion: int | None = None
    layers_with_reformats: int | None = None
    builder_peak_host_memory_bytes: int | None = None
    host_persistent_bytes: int | None = None
    device_persistent_bytes: int | None = None
    scratch_bytes: int | None = None
    precision_transform_s: float | None = None
    precision_transform_cached: bool | None = None
    calibration: str | None = None
    # what the precision transform did (farm.precision: checked after every transform)
    transform_summary: str | None = None
    transform_tool: str | None = None
    transform_tensors_fp16: int | None = None
    transform_nodes_kept_fp32: int | None = None
    transform_nodes_kept_fp32_range: int | None = None
    transform_subgraphs: int | None = None
    transform_qdq_pairs: int | None = None
    transform_quantized_nodes: int | None = None


@dataclasses.dataclass
class PhaseTimes:
    """One query's phases in milliseconds, as trtexec splits them; None where a phase does not exist."""

    enqueue_ms: float | None = None
    h2d_ms: float | None = None
    compute_ms: float | None = None
    d2h_ms: float | None = None


@dataclasses.dataclass
class LayerRecord:
    """One layer of the built artifact, with its measured time. Bytes follow farm.layers.memory."""

    index: int
    name: str
    type: str
    times_ms: list[float]
    # What a row is (farm.layers.coverage.KINDS): 'graph op', 'kernel' or 'engine layer'; rows of
    # different kinds are never summed or diffed together. None: the writer sets it from the backend.
    kind: str | None = None
    fused_ops: str | None = None
    tactic: str | None = None
    input_shapes: list[list[int] | None] = dataclasses.field(default_factory=list)
    input_dtypes: list[str] = dataclasses.field(default_factory=list)
    output_shapes: list[list[int] | None] = dataclasses.field(default_factory=list)
    output_dtypes: list[str] = dataclasses.field(default_factory=list)
    input_bytes: int | None = None
    weight_bytes: int | None = None
    output_bytes: int | None = None
    macs: int | None = None
    input_tensors: list[str] = dataclasses.field(default_factory=list)  # names: the graph's edges
    output_tensors: list[str] = dataclasses.field(default_factory=list)
    # Set where a tool reports aggregates instead of per-call times (TensorRT profiles):
    time_avg_ms: float | None = None
    time_median_ms: float | None = None
    time_share_percent: float | None = None
    calls: int | None = None
    host_persistent_bytes: int | None = None
    device_persistent_bytes: int | None = None
    scratch_bytes: int | None = None


QueryFn = Callable[[], "PhaseTimes | None"]


class Backend(ABC):
    """Build, time and profile one model. Subclasses set the class attributes below."""

    name: ClassVar[str]
    Options: ClassVar[type[BackendOptions]]
    precisions: ClassVar[frozenset[str]]
    supports_profiles: ClassVar[bool] = False
    self_timed: ClassVar[bool] = False  # a tool that times itself (trtexec): `measure_self` replaces query_fn
    reads_precision_from_onnx: ClassVar[bool] = True  # fp16/int8 cells get the transformed ONNX file
    returns_outputs: ClassVar[bool] = True  # `outputs` gives the tensors the accuracy check compares

    def __init__(self, options: dict[str, Any]) -> None:
        self.options = self.Options.model_validate(options)

    @classmethod
    def device_kind(cls, options: dict[str, Any]) -> str:
        """'cpu' or 'cuda': which kind of device a cell with these options occupies."""
        return "cpu"

    @classmethod
    def unsupported_reason(cls, precision: str, options: dict[str, Any]) -> str | None:
        """Why this backend cannot run `precision` with these options, or None when it can."""
        if precision in cls.precisions:
            return None
        runs = "/".join(p for p in ("fp32", "tf32", "fp16", "bf16", "int8", "fp8") if p in cls.precisions)
        return f"{cls.name} runs {runs}; {precision} is not supported by this backend"

    @classmethod
    def profile_note(cls) -> str | None:
        """Said on cells whose profile axis collapsed because the backend has no profiles."""
        if cls.supports_profiles:
            return None
        return f"profile axis collapsed: {cls.name} has no optimization profiles"

    def prepare(self, cell: Any, cache_dir: Path) -> None:
        """Called before `build` with the cell (profiles, inputs) and the warehouse's cache folder."""

    def unavailable_reason(self) -> str | None:
        """Why this backend cannot run here (with how to fix it), or None when it can."""
        return None

    @abstractmethod
    def build(self, model_path: Path, feeds: dict[str, np.ndarray], precision: str, work_dir: Path) -> BuildStats:
        """Turn the ONNX file into something runnable for these inputs (compilation included)."""

    @abstractmethod
    def query_fn(self, feeds: dict[str, np.ndarray]) -> QueryFn:
        """The callable the timing loop calls once per query, bound to `feeds`.

        Host-timed backends return None from it; device backends return PhaseTimes.
        """

    @abstractmethod
    def profile_layers(self, feeds: dict[str, np.ndarray], iterations: int) -> list[LayerRecord]:
        """Per-layer times from the engine's own profiler, in a run separate from the timed one."""

    def measure_self(self, feeds: dict[str, np.ndarray], settings: Any, batch: int) -> tuple[Any, dict[str, Any]]:
        """For self-timed backends: (Samples, measurements row) from the tool's own timing."""
        raise NotImplementedError

    @property
    def inferences_per_query(self) -> int:
        """Inferences one timed query runs (several streams run one each): throughput counts them all."""
        return 1

    def outputs(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The model's outputs for `feeds`, as float32/int numpy arrays, by output name."""
        raise NotImplementedError

    def runtime_stats(self) -> dict[str, Any]:
        """Extra `measurements` columns gathered while timing (e.g. peak device memory)."""
        return {}

    def device_row(self) -> dict[str, Any]:
        """The `devices` row of what the measurement ran on."""
        from farm.provenance import cpu_device_row

        return cpu_device_row()

    def close(self) -> None:
        """Release what build allocated."""
