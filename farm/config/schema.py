"""The sweep file's schema: one strict pydantic model per table (docs/config.md documents every key)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveFloat, field_validator, model_validator

Precision = Literal["fp32", "tf32", "fp16", "bf16", "int8", "fp8"]
Scenario = Literal["offline", "server", "single_stream", "multi_stream"]  # farm.scenario.SCENARIOS
INPUT_DTYPES = ("float32", "float16", "bfloat16", "float64", "int64", "int32", "int8", "uint8", "bool")
DEFAULT_CONFIG_NAME = "sweep"
NAME_PATTERN = r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}"
NAME_HINT = "the sweep's name: letters, digits, '_', '-', '.'"
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1  # TOML integers are 64-bit
INT32_MAX = 2**31 - 1  # the warehouse stores batch sizes and dimension sizes as int32
MAX_DURATION_MS = 3_600_000.0  # one hour per warm-up or repeat: more is a typo, not a benchmark
MAX_ITERATIONS = 10_000_000  # counted queries per repeat: each is a row of `samples`

# A size: of a batch, a dimension, a profile bound.
Size = Annotated[int, Field(ge=1, le=INT32_MAX)]
DurationMs = Annotated[float, Field(ge=0, le=MAX_DURATION_MS)]


class Strict(BaseModel):
    """Base for every table of the sweep file: unknown keys are errors; no coercion (`"8"` and
    `true` are not 8; an int field takes no float, a float field takes an int); finite numbers only.

    Tuples are written as TOML arrays, so tuple fields say `Field(strict=False)` (their items stay strict).
    """

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


class ProfileRange(Strict):
    """A min/opt/max range for one dimension, written `"1-16-64"` or `{min=1, opt=16, max=64}`."""

    min: Annotated[Size, Field(description="the smallest size, e.g. min = 1")]
    opt: Annotated[Size, Field(description="the size to tune for, e.g. opt = 16")]
    max: Annotated[Size, Field(description="the largest size, e.g. max = 64")]

    @model_validator(mode="before")
    @classmethod
    def _parse_short_form(cls, value: Any) -> Any:
        if isinstance(value, str):
            parts = value.split("-")
            if len(parts) != 3 or not all(p.strip().isascii() and p.strip().isdigit() for p in parts):
                raise ValueError(f"expected 'min-opt-max' such as '1-16-64', got {value!r}")
            return dict(zip(("min", "opt", "max"), (int(p) for p in parts)))
        if isinstance(value, int) and not isinstance(value, bool):
            return {"min": value, "opt": value, "max": value}
        if not isinstance(value, (dict, ProfileRange)):
            raise ValueError(f"expected 'min-opt-max' such as '1-16-64', {{min, opt, max}} or a size, got {value!r}")
        return value

    @model_validator(mode="after")
    def _ordered(self) -> ProfileRange:
        if not self.min <= self.opt <= self.max:
            raise ValueError(
                f"min {self.min}, opt {self.opt}, max {self.max} are out of order: need min <= opt <= max"
            )
        return self

    def __str__(self) -> str:
        return f"{self.min}-{self.opt}-{self.max}"

    def contains(self, size: int) -> bool:
        return self.min <= size <= self.max


class InputOverride(Strict):
    """Overrides what the model says about one of its inputs."""

    shape: Annotated[list[int | str], Field(min_length=1)] | None = None
    dtype: Literal[INPUT_DTYPES] | None = None  # type: ignore[valid-type]
    range: Annotated[tuple[float, float], Field(strict=False)] | None = None
    value: int | float | None = None  # every element this value: a range of one value

    @field_validator("value", mode="before")
    @classmethod
    def _value_is_a_number(cls, value: Any) -> Any:
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise ValueError(f"expected a number, the value every element of the input takes (got {value!r})")
        return value

    @model_validator(mode="after")
    def _range_or_value(self) -> InputOverride:
        if self.range is not None and self.value is not None:
            raise ValueError("give either range or value, not both")
        return self

    @field_validator("shape", mode="before")
    @classmethod
    def _shape_entries(cls, shape: Any) -> Any:
        for dim in shape if isinstance(shape, list) else ():
            if isinstance(dim, bool) or not isinstance(dim, (int, str)):
                raise ValueError(f"each dimension is a size (an integer >= 1) or a dimension name, got {dim!r}")
            if isinstance(dim, int) and not 1 <= dim <= INT32_MAX:
                raise ValueError(f"dimension sizes must be 1 to {INT32_MAX} or a dimension name, got {dim}")
            if isinstance(dim, str) and not dim.strip():
                raise ValueError("a dimension name must not be empty")
        return shape

    @field_validator("range")
    @classmethod
    def _range_order(cls, value: tuple[float, float] | None) -> tuple[float, float] | None:
        if value is not None and not value[0] < value[1]:
            raise ValueError(f"range [low, high) needs low < high, got {list(value)}")
        return value


class CalibrationSpec(Strict):
    """int8 calibration data: an .npz / folder of .npy files, a folder of images, or (neither) seeded
    synthetic inputs."""

    data: Annotated[str, Field(min_length=1)] | None = None
    images: Annotated[str, Field(min_length=1)] | None = None
    size: Annotated[tuple[Size, Size], Field(strict=False)] | None = None
    mean: Annotated[tuple[float, float, float], Field(strict=False)] = (0.485, 0.456, 0.406)
    std: Annotated[tuple[PositiveFloat, PositiveFloat, PositiveFloat], Field(strict=False)] = (0.229, 0.224, 0.225)
    samples: Annotated[int, Field(ge=1, le=100_000)] = 16

    @model_validator(mode="after")
    def _one_source(self) -> CalibrationSpec:
        if self.data and self.images:
            raise ValueError("give either data or images, not both")
        return self


# PyTorch-native sources (farm.models.native): a factory, `module:PKG.MOD:FACTORY`, or a torchvision model
NATIVE_SOURCE = re.compile(r"module:(?P<module>[A-Za-z_][\w.]*):(?P<factory>[A-Za-z_]\w*)|torchvision:(?P<name>[A-Za-z_]\w*)")
NATIVE_PREFIXES = ("module:", "torchvision:")
# the models `zoo:NAME` names (farm.models.zoo generates them; tests/test_models.py checks the two agree)
ZOO_NAMES = ("resnet18", "resnet50", "bert-base")


class ModelSpec(Strict):
    """One model of the sweep: `zoo:NAME`, a path to an .onnx file (relative to the sweep file), or a
    PyTorch factory (`module:PKG.MOD:FACTORY`, `torchvision:NAME`) exported to ONNX by farm."""

    source: Annotated[str, Field(description="'zoo:NAME' or a path to an .onnx file, relative to the sweep file, "
                                             "or a PyTorch factory: 'module:PKG.MOD:FACTORY', 'torchvision:NAME'")]
    name: Annotated[str, Field(min_length=1)] | None = None
    dims: dict[str, Size] = {}
    inputs: dict[str, InputOverride] = {}
    batch_dim: str | list[str] | None = None  # a dimension name or "INPUT:AXIS"; [] for none
    calibration: CalibrationSpec = CalibrationSpec()
    kwargs: dict[str, Any] = {}  # the factory's keyword arguments (module and torchvision sources only)

    @field_validator("batch_dim", mode="before")
    @classmethod
    def _batch_dim_names(cls, value: Any) -> Any:
        names = [value] if isinstance(value, str) else value if isinstance(value, list) else None
        if value is not None and (names is None or not all(isinstance(n, str) for n in names)):
            raise ValueError('expected a dimension name, "INPUT:AXIS", or a list of them '
                             f"([] for no batch axis), got {value!r}")
        for name in names or ():
            if not name.strip():
                raise ValueError("a dimension name must not be empty")
        return value

    @field_validator("source")
    @classmethod
    def _source_form(cls, source: str) -> str:
        if not source.strip():
            raise ValueError("source is empty: use 'zoo:NAME' or a path to an .onnx file")
        if source.startswith(NATIVE_PREFIXES) and not NATIVE_SOURCE.fullmatch(source):
            raise ValueError(f"{source!r} is not a PyTorch source: write 'module:PKG.MOD:FACTORY' (e.g. "
                             "'module:torchvision.models:resnet50') or 'torchvision:NAME' (e.g. 'torchvision:resnet50')")
        return source

    @model_validator(mode="after")
    def _kwargs_for_factories(self) -> ModelSpec:
        if self.kwargs and not self.source.startswith(NATIVE_PREFIXES):
            raise ValueError("kwargs are a PyTorch factory's arguments: only for sources 'module:PKG.MOD:FACTORY' "
                             "and 'torchvision:NAME'")
        return self


class Axes(Strict):
    """The sweep's axes; cells are their cross product."""

    precisions: Annotated[list[Precision], Field(min_length=1)] = ["fp32"]
    batch_sizes: Annotated[list[Size], Field(min_length=1)] = [1]
    profiles: Annotated[list[str], Field(min_length=1)] | None = None
    backends: Annotated[list[str], Field(min_length=1)] = ["onnxruntime"]
    # offline: farm's timing loop; the others: MLPerf LoadGen's scenarios through the batcher ([serving])
    scenarios: Annotated[list[Scenario], Field(min_length=1)] = ["offline"]
    # GPU cells once per GPU model, each run only on that model (Ray's accelerator_type:<NAME>)
    accelerator_types: Annotated[list[Annotated[str, Field(pattern=r"^[A-Za-z0-9_.-]+$")]],
                                 Field(min_length=1)] | None = None

    @field_validator("precisions", "batch_sizes", "profiles", "backends", "accelerator_types", "scenarios")
    @classmethod
    def _no_repeats(cls, values: list | None) -> list | None:
        if values is not None and len(set(values)) != len(values):
            dupes = sorted({str(v) for v in values if values.count(v) > 1})
            raise ValueError(f"repeated value(s) {', '.join(dupes)}: list each once")
        return values


class Measurement(Strict):
    """How each cell is timed (trtexec's definitions: warm-up, then both a count and a duration)."""

    warmup_ms: DurationMs = 200.0
    min_iterations: Annotated[int, Field(ge=1, le=MAX_ITERATIONS)] = 10
    min_duration_ms: DurationMs = 3000.0
    repeats: Annotated[int, Field(ge=1, le=1000)] = 3
    seed: Annotated[int, Field(ge=0)] = 1  # numpy seeds are non-negative
    max_cv_percent: Annotated[float, Field(gt=0)] = 2.5
    max_repeat_spread_percent: Annotated[float, Field(gt=0)] = 5.0
    layer_iterations: Annotated[int, Field(ge=0, le=100_000)] = 20
    telemetry: bool = True

    # Settings added after cell ids were in use: at their default they stay out of the cell id
    # (farm.plan), as backends' Options.added_later do.
    added_later: ClassVar[frozenset[str]] = frozenset({"max_repeat_spread_percent", "telemetry"})


class Serving(Strict):
    """`[serving]`: the load of the serving scenarios (axes.scenarios other than offline), which MLPerf
    LoadGen makes; a serving cell's batch is the batcher's max batch."""

    slo_ms: PositiveFloat | None = None  # server: the p99 latency bound the rate search holds
    max_delay_ms: Annotated[float, Field(ge=0, le=60_000)] | Annotated[
        list[Annotated[float, Field(ge=0, le=60_000)]], Field(min_length=1)] = 2.0  # a list: another axis
    rates: list[PositiveFloat] = []  # server: measure at these rates (queries/s) instead of searching
    min_duration_ms: DurationMs = 10_000.0  # LoadGen's minimum duration of each test
    min_query_count: Annotated[int, Field(ge=1, le=MAX_ITERATIONS)] = 1000
    samples_per_query: Annotated[int, Field(ge=1, le=4096)] = 8  # multi_stream

    def delays(self) -> list[float]:
        return self.max_delay_ms if isinstance(self.max_delay_ms, list) else [self.max_delay_ms]


class PrecisionSettings(Strict):
    """How the ONNX precision transforms convert models."""

    keep_io_types: bool = True


class Tolerance(Strict):
    """What a cell's outputs must meet against the FP32 reference to pass."""

    min_cosine: Annotated[float, Field(ge=-1, le=1)] = 0.99
    min_top1: Annotated[float, Field(ge=0, le=1)] | None = None
    max_abs: Annotated[float, Field(ge=0)] | None = None


DEFAULT_TOLERANCES = {
    "fp32": Tolerance(min_cosine=0.99999, min_top1=1.0),
    "tf32": Tolerance(min_cosine=0.9999, min_top1=0.99),
    "fp16": Tolerance(min_cosine=0.999, min_top1=0.99),
    "bf16": Tolerance(min_cosine=0.99, min_top1=0.95),
    "int8": Tolerance(min_cosine=0.98, min_top1=0.9),
    "fp8": Tolerance(min_cosine=0.98, min_top1=0.9),
}


class AppliedTolerance(Tolerance):
    """A precision's tolerance with the evaluation set and tie margin it is judged on (a cell's)."""

    samples: int = 64
    tie_margin: float = 0.01


class AccuracySettings(Strict):
    """Accuracy against the FP32 reference (ONNX Runtime CPU) for every measured cell, on a fixed
    evaluation set per model (docs/precision.md#accuracy)."""

    enabled: bool = True
    samples: Annotated[int, Field(ge=1, le=100_000)] = 64  # seeded inputs when no calibration data is given
    tie_margin: Annotated[float, Field(ge=0, le=1)] = 0.01  # of the reference row's logit range
    tolerances: dict[Precision, Tolerance] = {}

    def tolerance(self, precision: str) -> AppliedTolerance:
        chosen = self.tolerances.get(precision, DEFAULT_TOLERANCES[precision])
        return AppliedTolerance(**chosen.model_dump(), samples=self.samples, tie_margin=self.tie_margin)


class SweepConfig(Strict):
    """The whole sweep file."""

    name: str = DEFAULT_CONFIG_NAME
    description: str = ""
    models: Annotated[list[ModelSpec], Field(
        min_length=1, description="one [[models]] table per model, with source = 'zoo:NAME' or a path to an .onnx file")]
    axes: Axes = Axes()
    profiles: dict[str, dict[str, ProfileRange]] = {}
    measurement: Measurement = Measurement()
    precision: PrecisionSettings = PrecisionSettings()
    accuracy: AccuracySettings = AccuracySettings()
    serving: Serving = Serving()
    backends: dict[str, dict[str, Any]] = {}

    @field_validator("name")
    @classmethod
    def _name_is_a_folder_name(cls, name: str) -> str:
        if not re.fullmatch(NAME_PATTERN, name):
            raise ValueError(
                f"{name!r} is not usable as a folder name: use letters, digits, '_', '-' and '.', "
                "starting with a letter or digit"
            )
        return name

    @field_validator("profiles")
    @classmethod
    def _profiles_not_empty(cls, profiles: dict[str, dict[str, ProfileRange]]) -> dict:
        for name, dims in profiles.items():
            if not dims:
                raise ValueError(f"profile {name!r} has no dimensions: add e.g. batch = \"1-8-32\"")
        return profiles


def model_display_name(spec: ModelSpec) -> str:
    if spec.name:
        return spec.name
    if spec.source.startswith("zoo:"):
        return spec.source.removeprefix("zoo:")
    native = NATIVE_SOURCE.fullmatch(spec.source)
    if native:  # the factory's name: resnet50
        return native["factory"] or native["name"]
    return Path(spec.source).stem
