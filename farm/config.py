"""The sweep file: a typed TOML schema that rejects typos with one line that says how to fix it.

Every key is documented in docs/config.md (a test fails when one is missing there).
Validation here is pure: it reads the TOML and checks it, and never writes anything. Checks
that need the model itself (its inputs and dynamic dimensions) happen in `farm.plan`.
"""

from __future__ import annotations

import hashlib
import itertools
import re
import tomllib
import types
import typing
from pathlib import Path
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from farm.errors import ConfigError

PRECISIONS = ("fp32", "tf32", "fp16", "bf16", "int8", "fp8")
Precision = Literal["fp32", "tf32", "fp16", "bf16", "int8", "fp8"]
INPUT_DTYPES = ("float32", "float16", "bfloat16", "float64", "int64", "int32", "int8", "uint8", "bool")
DEFAULT_CONFIG_NAME = "sweep"


class Strict(BaseModel):
    """Base for every table of the sweep file: unknown keys are errors."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class ProfileRange(Strict):
    """A min/opt/max range for one dimension, written `"1-16-64"` or `{min=1, opt=16, max=64}`."""

    min: Annotated[int, Field(ge=1)]
    opt: Annotated[int, Field(ge=1)]
    max: Annotated[int, Field(ge=1)]

    @model_validator(mode="before")
    @classmethod
    def _parse_short_form(cls, value: Any) -> Any:
        if isinstance(value, str):
            parts = value.split("-")
            if len(parts) != 3 or not all(p.strip().isdigit() for p in parts):
                raise ValueError(f"expected 'min-opt-max' such as '1-16-64', got {value!r}")
            return dict(zip(("min", "opt", "max"), (int(p) for p in parts)))
        if isinstance(value, int) and not isinstance(value, bool):
            return {"min": value, "opt": value, "max": value}
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

    shape: list[int | str] | None = None
    dtype: Literal[INPUT_DTYPES] | None = None  # type: ignore[valid-type]
    range: tuple[float, float] | None = None

    @field_validator("shape")
    @classmethod
    def _shape_sizes(cls, shape: list[int | str] | None) -> list[int | str] | None:
        for dim in shape or ():
            if isinstance(dim, int) and dim < 1:
                raise ValueError(f"dimension sizes must be >= 1 or a dimension name, got {dim}")
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

    data: str | None = None
    images: str | None = None
    size: tuple[Annotated[int, Field(ge=1)], Annotated[int, Field(ge=1)]] | None = None
    mean: tuple[float, float, float] = (0.485, 0.456, 0.406)
    std: tuple[float, float, float] = (0.229, 0.224, 0.225)
    samples: Annotated[int, Field(ge=1)] = 16

    @model_validator(mode="after")
    def _one_source(self) -> CalibrationSpec:
        if self.data and self.images:
            raise ValueError("give either data or images, not both")
        return self


class ModelSpec(Strict):
    """One model of the sweep: `zoo:NAME` or a path to an .onnx file (relative to the sweep file)."""

    source: str
    name: str | None = None
    dims: dict[str, Annotated[int, Field(ge=1)]] = {}
    inputs: dict[str, InputOverride] = {}
    calibration: CalibrationSpec = CalibrationSpec()

    @field_validator("source")
    @classmethod
    def _source_form(cls, source: str) -> str:
        if not source.strip():
            raise ValueError("source is empty: use 'zoo:NAME' or a path to an .onnx file")
        return source


class Axes(Strict):
    """The sweep's axes; cells are their cross product."""

    precisions: Annotated[list[Precision], Field(min_length=1)] = ["fp32"]
    batch_sizes: Annotated[list[Annotated[int, Field(ge=1)]], Field(min_length=1)] = [1]
    profiles: Annotated[list[str], Field(min_length=1)] | None = None
    backends: Annotated[list[str], Field(min_length=1)] = ["onnxruntime"]

    @field_validator("precisions", "batch_sizes", "profiles", "backends")
    @classmethod
    def _no_repeats(cls, values: list | None) -> list | None:
        if values is not None and len(set(values)) != len(values):
            dupes = sorted({str(v) for v in values if values.count(v) > 1})
            raise ValueError(f"repeated value(s) {', '.join(dupes)}: list each once")
        return values


class Measurement(Strict):
    """How each cell is timed (trtexec's definitions: warm-up, then both a count and a duration)."""

    warmup_ms: Annotated[float, Field(ge=0)] = 200.0
    min_iterations: Annotated[int, Field(ge=1)] = 10
    min_duration_ms: Annotated[float, Field(ge=0)] = 3000.0
    repeats: Annotated[int, Field(ge=1)] = 3
    seed: int = 1
    max_cv_percent: Annotated[float, Field(gt=0)] = 2.5
    layer_iterations: Annotated[int, Field(ge=0)] = 20


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


class AccuracySettings(Strict):
    """Accuracy against the FP32 reference (ONNX Runtime CPU) for every measured cell."""

    enabled: bool = True
    tolerances: dict[Precision, Tolerance] = {}

    def tolerance(self, precision: str) -> Tolerance:
        return self.tolerances.get(precision, DEFAULT_TOLERANCES[precision])


class SweepConfig(Strict):
    """The whole sweep file."""

    name: str = DEFAULT_CONFIG_NAME
    description: str = ""
    models: Annotated[list[ModelSpec], Field(min_length=1)]
    axes: Axes = Axes()
    profiles: dict[str, dict[str, ProfileRange]] = {}
    measurement: Measurement = Measurement()
    precision: PrecisionSettings = PrecisionSettings()
    accuracy: AccuracySettings = AccuracySettings()
    backends: dict[str, dict[str, Any]] = {}

    @field_validator("name")
    @classmethod
    def _name_is_a_folder_name(cls, name: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}", name):
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


class LoadedConfig(typing.NamedTuple):
    """A validated sweep file and what is derived from it without looking at any model."""

    path: Path
    text: str
    config: SweepConfig
    config_hash: str
    backend_options: dict[str, list[dict[str, Any]]]  # backend -> every option combination

    @property
    def base_dir(self) -> Path:
        return self.path.parent

    def profile_names(self) -> list[str]:
        """Profiles that the sweep runs: the axis if given, else every profile defined."""
        if self.config.axes.profiles is not None:
            return list(self.config.axes.profiles)
        return list(self.config.profiles)


def load_config(path: str | Path) -> LoadedConfig:
    """Read and validate a sweep file; raise ConfigError with one line on any mistake."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such sweep file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read the sweep file: {exc}") from None
    return parse_config(text, path)


def parse_config(text: str, path: Path) -> LoadedConfig:
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    if "name" not in raw:
        raw["name"] = re.sub(r"[^A-Za-z0-9_.-]", "-", path.stem) or DEFAULT_CONFIG_NAME
    try:
        config = SweepConfig.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(f"{path}: {_describe(exc.errors()[0])}") from None
    backend_options = _check_semantics(config, path)
    config_hash = hashlib.sha256(text.encode()).hexdigest()[:16]
    return LoadedConfig(path, text, config, config_hash, backend_options)


def _check_semantics(config: SweepConfig, path: Path) -> dict[str, list[dict[str, Any]]]:
    """Checks across tables: names that refer to each other, profile ranges vs batch sizes."""
    from farm.backends import BACKENDS, option_grid

    for backend in config.axes.backends:
        if backend not in BACKENDS:
            raise ConfigError(
                f"{path}: axes.backends: unknown backend {backend!r}; known backends: {', '.join(BACKENDS)}"
            )
    for backend in config.backends:
        if backend not in BACKENDS:
            raise ConfigError(
                f"{path}: backends.{backend}: unknown backend {backend!r}; known backends: {', '.join(BACKENDS)}"
            )
    grids = {}
    for backend in config.axes.backends:
        try:
            grids[backend] = option_grid(backend, config.backends.get(backend, {}))
        except ValueError as exc:
            raise ConfigError(f"{path}: backends.{backend}.{exc}") from None

    wanted = config.axes.profiles if config.axes.profiles is not None else list(config.profiles)
    for name in wanted:
        if name not in config.profiles:
            defined = ", ".join(config.profiles) or "none (add a [profiles.NAME] table)"
            raise ConfigError(f"{path}: axes.profiles: unknown profile {name!r}; defined profiles: {defined}")
    for name in wanted:
        batch_range = config.profiles[name].get("batch")
        if batch_range is None:
            continue
        for batch in config.axes.batch_sizes:
            if not batch_range.contains(batch):
                raise ConfigError(
                    f"{path}: axes.batch_sizes: batch {batch} is outside profile {name!r} "
                    f"(batch {batch_range}): widen profiles.{name}.batch or remove the batch size"
                )

    for index, model in enumerate(config.models):
        source = model.source
        if not source.startswith("zoo:"):
            model_path = (path.parent / source).resolve()
            if not model_path.is_file():
                raise ConfigError(
                    f"{path}: models[{index}].source: no such file {source!r} "
                    f"(looked for {model_path}); use a path relative to the sweep file or 'zoo:NAME'"
                )
        else:
            from farm.models.zoo import ZOO

            zoo_name = source.removeprefix("zoo:")
            if zoo_name not in ZOO:
                raise ConfigError(
                    f"{path}: models[{index}].source: unknown zoo model {zoo_name!r}; "
                    f"the zoo has: {', '.join(ZOO)}"
                )
    names = [model_display_name(m) for m in config.models]
    for name in names:
        if names.count(name) > 1:
            raise ConfigError(f"{path}: models: two models are named {name!r}: give each a distinct `name`")
    return grids


def model_display_name(spec: ModelSpec) -> str:
    if spec.name:
        return spec.name
    if spec.source.startswith("zoo:"):
        return spec.source.removeprefix("zoo:")
    return Path(spec.source).stem


def expand_option_axes(options: dict[str, Any]) -> list[dict[str, Any]]:
    """A list value makes that option another sweep axis: return every combination."""
    keys = sorted(options)
    values = [options[k] if isinstance(options[k], list) else [options[k]] for k in keys]
    for key, vals in zip(keys, values):
        if not vals:
            raise ValueError(f"{key}: empty list: give at least one value")
    return [dict(zip(keys, combo)) for combo in itertools.product(*values)]


# --- error messages ----------------------------------------------------------------------------

def _describe(error: dict[str, Any]) -> str:
    """Turn one pydantic error into `key.path: what is wrong; what is allowed`."""
    loc = tuple(error["loc"])
    where = _dotted(loc)
    kind = error["type"]
    if kind == "extra_forbidden":
        allowed = _allowed_keys(loc[:-1])
        hint = f"; allowed keys: {', '.join(allowed)}" if allowed else ""
        return f"{_dotted(loc[:-1])}: unknown key {loc[-1]!r}{hint}"
    if kind == "missing":
        return f"{where}: required key is missing"
    if kind == "literal_error":
        return f"{where}: {error['input']!r} is not allowed; {error['msg'].removeprefix('Input should be ')}"
    if kind == "too_short":
        return f"{where}: must not be empty"
    message = error["msg"].removeprefix("Value error, ")
    if kind.endswith("_type") or kind.endswith("_parsing"):
        message = f"{message} (got {error['input']!r})"
    return f"{where}: {message}"


def _dotted(loc: tuple[Any, ...]) -> str:
    parts: list[str] = []
    for item in loc:
        if isinstance(item, int):
            parts[-1:] = [f"{parts[-1] if parts else ''}[{item}]"]
        elif item in ("function-after", "function-before") or "[" in str(item):
            continue
        else:
            parts.append(str(item))
    return ".".join(parts) or "(top level)"


def _allowed_keys(loc: tuple[Any, ...]) -> list[str]:
    """The keys allowed in the table at `loc`, found by walking the schema's annotations."""
    kind: Any = SweepConfig
    for item in loc:
        kind = _unwrap(kind)
        if isinstance(kind, type) and issubclass(kind, BaseModel):
            field = kind.model_fields.get(str(item))
            if field is None:
                return []
            kind = field.annotation
        else:
            origin, args = typing.get_origin(kind), typing.get_args(kind)
            if origin is list:
                kind = args[0]
            elif origin is dict:
                kind = args[1]
            else:
                return []
    kind = _unwrap(kind)
    if isinstance(kind, type) and issubclass(kind, BaseModel):
        return list(kind.model_fields)
    return []


def _unwrap(kind: Any) -> Any:
    """Strip Annotated and Optional so the walk reaches the model or container inside."""
    while True:
        origin = typing.get_origin(kind)
        if origin is Annotated:
            kind = typing.get_args(kind)[0]
        elif origin in (Union, types.UnionType):
            non_none = [a for a in typing.get_args(kind) if a is not type(None)]
            models = [a for a in non_none if isinstance(a, type) and issubclass(a, BaseModel)]
            kind = models[0] if models else non_none[0]
            if not models and len(non_none) > 1:
                return kind
        else:
            return kind
