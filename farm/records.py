"""The records every layer passes around: plain dataclasses (from farm: MeasurementRow, ServingPlan).

A cell (what the planner made), what a backend receives to build it (`BuildRequest`), and what
one cell produced (`CellResult`, with its build stats, samples and layer rows). Only plain data,
so a record crosses process boundaries (Ray, the per-cell child process) as it is.

Settings the sweep file validates (farm.config) travel as records (`MeasurementSettings`, `Tolerance`, ...).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from farm.measurement_row import MeasurementRow
from farm.scenario import ServingPlan

# A dynamic dimension with one of these names (case-insensitive) is the batch, unless the model's
# table names its batch with `batch_dim`. Documented in docs/config.md.
BATCH_NAMES = ("batch", "batch_size", "batchsize", "batch_dim", "nbatch", "n", "b", "bs")
# A dynamic dimension with no usable name (no dim_param, an empty one, or "?") is shown as "?"
# and sized by its location, "INPUT:AXIS"; it is never the same as another "?".
UNNAMED = "?"

Shape = tuple[int, ...]


def axis_key(input_name: str, axis: int) -> str:
    """The `dims` / `batch_dim` key of one axis of one input: "INPUT:AXIS"."""
    return f"{input_name}:{axis}"


def is_unnamed(dim: int | str) -> bool:
    return isinstance(dim, str) and dim.strip() in ("", UNNAMED)


# --- models ---------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class InputSpec:
    """One model input: shape entries are ints (static) or dimension names (dynamic)."""

    name: str
    dtype: str  # numpy dtype name
    shape: tuple[int | str, ...]
    low: float
    high: float  # low == high: every element is low (a `value`)
    batch_axis: int | None = 0  # the axis that is the batch; None: the input is fed as declared

    def concrete_shape(self, batch: int, dims: dict[str, int]) -> Shape:
        """The shape a cell runs: the batch axis is `batch`, other dynamic axes come from `dims`,
        by location ("INPUT:AXIS") first, then by name."""
        out = []
        for axis, dim in enumerate(self.shape):
            if axis == self.batch_axis:
                out.append(batch)
            elif isinstance(dim, int):
                out.append(dim)
            else:
                location = axis_key(self.name, axis)
                out.append(dims[location] if location in dims else dims[dim])
        return tuple(out)

    def profile_key(self, axis: int) -> str | None:
        """What a profile range for this axis is keyed by: 'batch', a dimension name, or None
        (a fixed or unnamed axis)."""
        dim = self.shape[axis]
        if axis == self.batch_axis:
            return "batch"
        return dim if isinstance(dim, str) and not is_unnamed(dim) else None

    @property
    def dynamic(self) -> bool:
        """Whether an engine needs an optimization profile for this input (a named or batch axis)."""
        return any(isinstance(dim, str) or axis == self.batch_axis for axis, dim in enumerate(self.shape))


@dataclasses.dataclass(frozen=True)
class ModelArtifact:
    """A resolved model: where its ONNX file is, its hash, and its inputs (or why unreadable)."""

    name: str
    source: str
    path: Path
    sha256: str
    size_bytes: int
    inputs: tuple[InputSpec, ...]
    dims: dict[str, int]
    error: str | None = None  # set when the file is not a readable ONNX model
    declared_batch: int | None = None  # no input has a batch axis: the one batch size it runs
    onnx_error: str | None = None  # a PyTorch source with no ONNX export: why (its PyTorch cells still run)
    onnx_fixed_batch: tuple[int, str] | None = None  # a PyTorch source whose export runs one batch only: it, why
    unsupported: str | None = None  # why no engine can run it on the inputs farm makes (its cells are unsupported)

    def dynamic_dims(self) -> set[str]:
        """Names of the dynamic dimensions that `dims` sizes (not the batch, not unnamed ones)."""
        return {d for spec in self.inputs for axis, d in enumerate(spec.shape)
                if isinstance(d, str) and axis != spec.batch_axis and not is_unnamed(d)}

    def unnamed_dims(self) -> list[str]:
        """"INPUT:AXIS" of every dynamic dimension with no usable name (sized by that key)."""
        return [axis_key(spec.name, axis) for spec in self.inputs for axis, d in enumerate(spec.shape)
                if axis != spec.batch_axis and is_unnamed(d)]

    def batch_names(self) -> set[str]:
        return {spec.shape[spec.batch_axis] for spec in self.inputs  # type: ignore[misc]
                if spec.batch_axis is not None and isinstance(spec.shape[spec.batch_axis], str)}

    def onnx_unsupported(self, batch: int) -> str | None:
        """Why engines that run the ONNX file (not the module itself) cannot run this model at `batch`:
        a PyTorch source with no export, or one whose exporter fixed the batch at another; or None."""
        if self.onnx_error or self.onnx_fixed_batch is None or batch == self.onnx_fixed_batch[0]:
            return self.onnx_error
        fixed, why = self.onnx_fixed_batch
        return (f"the ONNX export fixed the batch at {fixed}: {why}; engines that run the export run batch {fixed} "
                "only (the torch backend runs the module itself at any batch)")

    def batch_unsupported(self, batch: int) -> str | None:
        """Why this model cannot run at `batch` (it has no batch axis), or None."""
        if self.error or self.declared_batch is None or batch == self.declared_batch:
            return None
        if all(spec.shape and spec.shape[0] == self.declared_batch for spec in self.inputs):
            return (f"model {self.name!r} has a fixed batch of {self.declared_batch} (axis 0 of every input), "
                    f"so it runs at batch {self.declared_batch} only: export it with a dynamic batch dimension "
                    "to sweep batch sizes")
        return (f"model {self.name!r} has no batch axis (no input has a dynamic dimension named "
                f"{', '.join(BATCH_NAMES)} or set by batch_dim), so it runs as declared, at batch 1 only: "
                "name its batch dimension with batch_dim = \"NAME\" or \"INPUT:AXIS\" in the model's table")


# --- settings the planner copies from the validated sweep file -----------------------------------

@dataclasses.dataclass(frozen=True)
class MeasurementSettings:
    """How a cell is timed: farm.config.Measurement's values (defaults and bounds live there)."""

    warmup_ms: float = 200.0
    min_iterations: int = 10
    min_duration_ms: float = 3000.0
    repeats: int = 3
    seed: int = 1
    max_cv_percent: float = 2.5
    max_repeat_spread_percent: float = 5.0
    layer_iterations: int = 20
    telemetry: bool = True  # GPU telemetry (farm.telemetry) over the counted repeats of device cells


@dataclasses.dataclass(frozen=True)
class Tolerance:
    """What a cell's outputs must meet against the FP32 reference, with the evaluation set's size
    and tie margin (farm.config.AppliedTolerance's values)."""

    min_cosine: float = 0.99
    min_top1: float | None = None
    max_abs: float | None = None
    samples: int = 64
    tie_margin: float = 0.01

    def __str__(self) -> str:  # as the accuracy table has always shown it (pydantic's form)
        return " ".join(f"{f.name}={getattr(self, f.name)!r}" for f in dataclasses.fields(self))


@dataclasses.dataclass(frozen=True)
class Calibration:
    """Where int8 calibration data comes from (all None: seeded synthetic inputs)."""

    data: str | None = None  # .npz file or folder of .npy files, relative to the sweep file
    images: str | None = None  # folder of images
    size: tuple[int, int] | None = None  # images: resized to (height, width)
    mean: tuple[float, ...] = (0.485, 0.456, 0.406)
    std: tuple[float, ...] = (0.229, 0.224, 0.225)
    samples: int = 16
    base_dir: str = "."

    def describe(self) -> str:
        if self.data:
            return f"calibrated on {self.data}"
        if self.images:
            return f"calibrated on images in {self.images}"
        return f"calibrated on seeded synthetic data ({self.samples} samples): no calibration data given"


# --- cells and what a backend receives -----------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class ShapeProfile:
    """A named optimization profile: (min, opt, max) per dimension name ('batch' or a model dim)."""

    name: str
    ranges: dict[str, tuple[int, int, int]]

    def describe(self) -> str:
        return ", ".join(f"{dim} {lo}-{opt}-{hi}" for dim, (lo, opt, hi) in self.ranges.items())


@dataclasses.dataclass(frozen=True)
class ProfileShapes:
    """A profile as an engine takes it: (min, opt, max) shape per input, computed once by the planner."""

    name: str
    shapes: dict[str, tuple[Shape, Shape, Shape]]


@dataclasses.dataclass(frozen=True)
class Cell:
    """One thing to build and measure. Picklable, so executors can ship it to workers."""

    cell_id: str
    sweep: str
    model: ModelArtifact
    precision: str
    batch: int
    profile: ShapeProfile | None
    backend: str
    options: dict[str, Any]
    measurement: MeasurementSettings
    input_shapes: dict[str, Shape]
    unsupported_reason: str | None = None
    notes: str | None = None
    device_kind: str = "cpu"  # 'cpu' or 'cuda': the kind of worker that must run it
    all_profiles: tuple[ShapeProfile, ...] = ()  # every swept profile, for engines that hold several
    calibration: Calibration | None = None  # for int8 transforms
    keep_io_types: bool = True
    tolerance: Tolerance | None = None  # of this precision; None: no accuracy check
    profile_shapes: ProfileShapes | None = None  # `profile` per input
    all_profile_shapes: tuple[ProfileShapes, ...] = ()  # `all_profiles` per input
    accelerator_type: str | None = None  # a CUDA cell pinned to this GPU model (Ray's accelerator_type); None: any
    serving: ServingPlan | None = None  # a serving scenario's load (farm.scenario); None: offline

    @property
    def label(self) -> str:
        return self.named(self.backend)

    def named(self, engine: str) -> str:
        """The label with `engine` for the backend ('torch mode=cudagraphs': farm.display.cell_labels)."""
        parts = [self.model.name, self.precision, f"b{self.batch}", self.profile and self.profile.name, engine,
                 self.accelerator_type and f"on {self.accelerator_type}"]
        return " ".join(part for part in parts if part)


@dataclasses.dataclass(frozen=True)
class BuildRequest:
    """Everything a backend needs to build and run one cell, and nothing of the planner's."""

    model_path: Path  # the ONNX file to build (farm's precision transform already applied, if any)
    model_sha256: str  # of the original model: part of engine cache keys
    precision: str
    batch: int
    input_shapes: dict[str, Shape]  # the shapes every query runs
    options: dict[str, Any]  # the backend's validated options
    measurement: MeasurementSettings
    work_dir: Path  # emptied before the build, removed after the cell
    cache_dir: Path | None = None  # shared across cells: timing caches, engines
    profile: ProfileShapes | None = None  # the swept profile this cell runs (None: none swept)
    all_profiles: tuple[ProfileShapes, ...] = ()  # every swept profile, in sweep order
    dynamic: bool = False  # some input has a dynamic axis: an engine needs a profile even with none swept


# --- what a cell produced ------------------------------------------------------------------------

@dataclasses.dataclass
class BuildStats:
    """What building the artifact (engine, optimized session) cost and produced."""

    build_s: float | None
    artifact_bytes: int | None = None
    cache_hits: int | None = None
    builder_peak_memory_bytes: int | None = None
    layers_before_fusion: int | None = None
    layers_after_fusion: int | None = None
    layers_with_reformats: int | None = None
    builder_peak_host_memory_bytes: int | None = None
    host_persistent_bytes: int | None = None  # TensorRT's engine memory: builds.engine_*
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
    transform_layers: str | None = None  # PyTorch int8/fp8: each layer's precision (JSON, torch.quantize)
    provider_nodes: str | None = None  # ONNX Runtime: where its nodes ran (farm.backends.onnxruntime.placement)
    cpu_provider_nodes: int | None = None
    cpu_provider_ops: str | None = None
    cpu_provider_node_ms: float | None = None


@dataclasses.dataclass
class PhaseTimes:
    """One query's phases in milliseconds, as trtexec splits them; None where a phase does not exist."""

    enqueue_ms: float | None = None
    h2d_ms: float | None = None
    compute_ms: float | None = None
    d2h_ms: float | None = None


# What the timing loop calls once per query: PhaseTimes from a device timer, None when host-timed.
QueryFn = Callable[[], "PhaseTimes | None"]


@dataclasses.dataclass
class Samples:
    """Every counted query of a cell, in order. Times in milliseconds."""

    repeat: np.ndarray  # which repeat the query belongs to (0-based)
    start_ms: np.ndarray  # host start, relative to the first counted query
    latency_ms: np.ndarray  # host walltime of the query, or h2d + compute + d2h on a device
    enqueue_ms: np.ndarray | None = None
    h2d_ms: np.ndarray | None = None
    compute_ms: np.ndarray | None = None
    d2h_ms: np.ndarray | None = None
    walltime_ms: float = 0.0  # sum over repeats of (last end - first start)
    warmup_queries: int = 0
    warmup_ms: float = 0.0
    host_probe_ms: list[float] = dataclasses.field(default_factory=list)  # the host's speed around the repeats (farm.measure)
    timing_cpus: list[int] = dataclasses.field(default_factory=list)  # the CPU the timing thread was kept on, per repeat
    contention: dict[str, float | None] = dataclasses.field(default_factory=dict)  # farm.cpus.host_contention

    def __len__(self) -> int:
        return len(self.latency_ms)


# What a per-layer row timed (LayerRecord.kind; farm.layers.coverage says how they are used)
GRAPH_OP, KERNEL, ENGINE_LAYER = "graph op", "kernel", "engine layer"


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
    measurement: MeasurementRow | None = None
    samples: Samples | None = None
    layers: list[LayerRecord] = dataclasses.field(default_factory=list)
    device: dict[str, Any] | None = None
    host: dict[str, Any] = dataclasses.field(default_factory=dict)
    versions: dict[str, str] = dataclasses.field(default_factory=dict)
    farm_commit: str | None = None
    worker: dict[str, Any] | None = None  # which executor worker ran it (pid, host, visible GPUs)
    accuracy: list[dict[str, Any]] = dataclasses.field(default_factory=list)  # rows of the accuracy table
    serving: list[dict[str, Any]] = dataclasses.field(default_factory=list)  # rows of the serving table
    attempts: int = 1  # runs of the cell this result ends (more when its process died and it was retried)
    earlier_attempts: list[str] = dataclasses.field(default_factory=list)  # how each earlier run died


def now() -> dt.datetime:
    """The current time in UTC, as every record's timestamps are."""
    return dt.datetime.now(dt.UTC)
