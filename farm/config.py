"""The sweep file: a typed TOML schema that rejects typos with one line that says how to fix it.

Types are strict: a number is never read from a string or a boolean (`"8"` and `true` are not
8), an integer field takes no float, and every number must be finite and within bounds.

Every key is documented in docs/config.md (a test fails when one is missing there).
Validation here is pure: it reads the TOML and checks it, and never writes anything. Checks
that need the model itself (its inputs and dynamic dimensions) happen in `farm.plan`.
"""

from __future__ import annotations

import hashlib
import itertools
import math
import re
import tomllib
import types
import typing
from pathlib import Path
from typing import Annotated, Any, Literal, Union

from pydantic import (BaseModel, ConfigDict, Field, PositiveFloat, ValidationError, field_validator,
                      model_validator)

from farm.errors import ConfigError

PRECISIONS = ("fp32", "tf32", "fp16", "bf16", "int8", "fp8")
Precision = Literal["fp32", "tf32", "fp16", "bf16", "int8", "fp8"]
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


class ModelSpec(Strict):
    """One model of the sweep: `zoo:NAME` or a path to an .onnx file (relative to the sweep file)."""

    source: Annotated[str, Field(description="'zoo:NAME' or a path to an .onnx file, relative to the sweep file")]
    name: Annotated[str, Field(min_length=1)] | None = None
    dims: dict[str, Size] = {}
    inputs: dict[str, InputOverride] = {}
    batch_dim: str | list[str] | None = None  # a dimension name or "INPUT:AXIS"; [] for none
    calibration: CalibrationSpec = CalibrationSpec()

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
        return source


class Axes(Strict):
    """The sweep's axes; cells are their cross product."""

    precisions: Annotated[list[Precision], Field(min_length=1)] = ["fp32"]
    batch_sizes: Annotated[list[Size], Field(min_length=1)] = [1]
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

    warmup_ms: DurationMs = 200.0
    min_iterations: Annotated[int, Field(ge=1, le=MAX_ITERATIONS)] = 10
    min_duration_ms: DurationMs = 3000.0
    repeats: Annotated[int, Field(ge=1, le=1000)] = 3
    seed: Annotated[int, Field(ge=0)] = 1  # numpy seeds are non-negative
    max_cv_percent: Annotated[float, Field(gt=0)] = 2.5
    max_repeat_spread_percent: Annotated[float, Field(gt=0)] = 5.0
    layer_iterations: Annotated[int, Field(ge=0, le=100_000)] = 20


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
    _check_numbers(raw, (), path)
    if "name" not in raw:  # the file's stem stands in for it, where it can
        stem_name = re.sub(r"[^A-Za-z0-9_.-]", "-", path.stem)
        if not re.fullmatch(NAME_PATTERN, stem_name):
            raise ConfigError(f"{path}: missing key 'name' ({NAME_HINT}); the file name {path.name!r} "
                              "cannot stand in for it")
        raw["name"] = stem_name
    try:
        config = SweepConfig.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(f"{path}: {_describe(exc.errors()[0])}") from None
    backend_options = _check_semantics(config, path)
    config_hash = hashlib.sha256(text.encode()).hexdigest()[:16]
    return LoadedConfig(path, text, config, config_hash, backend_options)


def _check_numbers(value: Any, loc: tuple[Any, ...], path: Path) -> None:
    """Every number in the file, wherever it is (backend options included), is finite and fits
    TOML's 64-bit integers: `inf` would make a loop that never ends."""
    if isinstance(value, dict):
        for key, item in value.items():
            _check_numbers(item, (*loc, key), path)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _check_numbers(item, (*loc, index), path)
    elif isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{path}: {_dotted(loc)}: {value} is not allowed: numbers must be finite")
    elif isinstance(value, int) and not isinstance(value, bool) and not INT64_MIN <= value <= INT64_MAX:
        raise ConfigError(f"{path}: {_dotted(loc)}: {value} is out of range: TOML integers are 64-bit "
                          f"({INT64_MIN} to {INT64_MAX})")


def _check_semantics(config: SweepConfig, path: Path) -> dict[str, list[dict[str, Any]]]:
    """Checks across tables: names that refer to each other, profile ranges vs batch sizes."""
    from farm.backends import BACKENDS

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
    # Every backend named in the file is checked, swept or not: a typo in a table that is not
    # swept today would surface on the day it is.
    grids = {backend: _backend_grid(backend, config.backends.get(backend, {}), path)
             for backend in dict.fromkeys([*config.axes.backends, *config.backends])}
    grids = {backend: grids[backend] for backend in config.axes.backends}

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


def _backend_grid(backend: str, raw: dict[str, Any], path: Path) -> list[dict[str, Any]]:
    """A backend's option combinations, checked as strictly as the rest of the file."""
    from farm.backends import backend_class, option_grid

    where = f"{path}: backends.{backend}"
    try:
        grid = option_grid(backend, raw)  # unknown options, bad values, empty lists
    except ValueError as exc:
        raise ConfigError(f"{where}.{exc}") from None
    options_model = backend_class(backend).Options
    for combo in expand_option_axes(raw):  # no coercion: `true` is not 1, "2" is not 2
        try:
            options_model.model_validate(combo, strict=True)
        except ValidationError as exc:
            error = exc.errors()[0]
            loc: tuple[Any, ...] = tuple(error["loc"][:1])
            if loc and isinstance(raw.get(loc[0]), list):  # which item: by type too, as `true == 1`
                bad = combo[loc[0]]
                loc += (next(i for i, v in enumerate(raw[loc[0]]) if type(v) is type(bad) and v == bad),)
            raise ConfigError(f"{where}{'.' if loc else ': '}{_describe({**error, 'loc': loc})}") from None
    base = expand_option_axes(raw)[0]
    for key, value in raw.items():
        if isinstance(value, list):  # repeated values would plan the same cells twice
            normalized = [options_model.model_validate({**base, key: v}).model_dump(mode="json")[key] for v in value]
            dupes = []
            for i, v in enumerate(value):
                first = normalized.index(normalized[i])
                if first != i:
                    dupes.append(repr(v) if value[first] == v else f"{v!r} (the same as {value[first]!r})")
            if dupes:
                raise ConfigError(f"{where}.{key}: repeated value(s) {', '.join(dupes)}: list each once")
    return grid


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
    got = error.get("input")
    if kind == "extra_forbidden":
        allowed = _allowed_keys(loc[:-1])
        hint = f"; allowed keys: {', '.join(allowed)}" if allowed else ""
        return f"{_dotted(loc[:-1])}: unknown key {loc[-1]!r}{hint}"
    if kind == "missing" and loc and isinstance(loc[-1], int):  # a too short tuple
        count = f"got {len(got)}" if isinstance(got, (list, tuple)) else "got fewer"
        return f"{_dotted(loc[:-1])}: expected {_tuple_length(loc[:-1])} values, {count}"
    if kind == "missing":
        description = _field_description(loc)
        hint = f" ({description})" if description else ""
        parent = f"{_dotted(loc[:-1])}: " if loc[:-1] else ""
        return f"{parent}missing key {loc[-1]!r}{hint}"
    if kind == "literal_error":
        return f"{where}: {got!r} is not allowed; {error['msg'].removeprefix('Input should be ')}"
    if kind == "too_short":
        least = (error.get("ctx") or {}).get("min_length", 1)
        return f"{where}: must not be empty" if least == 1 else f"{where}: needs at least {least} values (got {got!r})"
    if kind == "too_long" and isinstance(got, (list, tuple)):
        return f"{where}: expected {_tuple_length(loc) or 'fewer'} values, got {len(got)}"
    if kind in ("model_type", "model_attributes_type", "dict_type"):
        return f"{where}: expected a table (got {got!r})"
    if kind in ("list_type", "tuple_type"):
        return f"{where}: expected a list (got {got!r})"
    message = error["msg"].removeprefix("Value error, ")
    if kind.endswith("_type") or kind.endswith("_parsing") or kind in (
            "greater_than", "greater_than_equal", "less_than", "less_than_equal", "finite_number",
            "string_too_short"):
        message = f"{message} (got {got!r})"
        if isinstance(got, list):
            message += "; one value here: a list sweeps values only in [axes] and [backends.NAME]"
    return f"{where}: {message}"


def _tuple_length(loc: tuple[Any, ...]) -> int | None:
    field = _field_at(loc)
    kind = _unwrap(field.annotation) if field is not None else None
    if typing.get_origin(kind) is tuple and Ellipsis not in typing.get_args(kind):
        return len(typing.get_args(kind))
    return None


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


def _field_at(loc: tuple[Any, ...]) -> Any:
    """The pydantic FieldInfo of the key at `loc` (None if the walk does not reach one)."""
    if not loc or not isinstance(loc[-1], str):
        return None
    if not loc[:-1]:
        return SweepConfig.model_fields.get(loc[-1])
    kind = _kind_at(loc[:-1])
    if isinstance(kind, type) and issubclass(kind, BaseModel):
        return kind.model_fields.get(loc[-1])
    return None


def _field_description(loc: tuple[Any, ...]) -> str | None:
    field = _field_at(loc)
    return field.description if field is not None else None


def _allowed_keys(loc: tuple[Any, ...]) -> list[str]:
    """The keys allowed in the table at `loc`, found by walking the schema's annotations."""
    kind = _kind_at(loc)
    if isinstance(kind, type) and issubclass(kind, BaseModel):
        return list(kind.model_fields)
    return []


def _kind_at(loc: tuple[Any, ...]) -> Any:
    """The type of the value at `loc` (a model, a container or None), walking the annotations."""
    kind: Any = SweepConfig
    for item in loc:
        kind = _unwrap(kind)
        if isinstance(kind, type) and issubclass(kind, BaseModel):
            field = kind.model_fields.get(str(item))
            if field is None:
                return None
            kind = field.annotation
        else:
            origin, args = typing.get_origin(kind), typing.get_args(kind)
            if origin is list:
                kind = args[0]
            elif origin is dict:
                kind = args[1]
            else:
                return None
    return _unwrap(kind)


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
