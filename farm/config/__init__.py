"""The sweep file: a typed TOML schema that rejects typos with one line that says how to fix it.

Types are strict: a number is never read from a string or a boolean (`"8"` and `true` are not
8), an integer field takes no float, and every number must be finite and within bounds.

Every key is documented in docs/config.md (a test fails when one is missing there).
Validation here is pure: it reads the TOML and checks it, and never writes anything. Checks
that need the model itself (its inputs and dynamic dimensions) happen in `farm.plan`.
"""

from __future__ import annotations

import hashlib
import math
import re
import tomllib
import typing
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from farm.backends.registry import BACKENDS, backend_class, expand_option_axes, option_grid
from farm.config.errors import describe_error, dotted
from farm.config.schema import (
    DEFAULT_CONFIG_NAME,
    DEFAULT_TOLERANCES,
    INPUT_DTYPES,
    INT32_MAX,
    INT64_MAX,
    INT64_MIN,
    NAME_HINT,
    NAME_PATTERN,
    NATIVE_PREFIXES,
    NATIVE_SOURCE,
    ZOO_NAMES,
    AccuracySettings,
    AppliedTolerance,
    Axes,
    CalibrationSpec,
    InputOverride,
    Measurement,
    ModelSpec,
    Precision,
    PrecisionSettings,
    ProfileRange,
    Serving,
    Strict,
    SweepConfig,
    Tolerance,
    model_display_name,
)
from farm.errors import ConfigError

__all__ = ["AccuracySettings", "AppliedTolerance", "Axes", "CalibrationSpec", "DEFAULT_CONFIG_NAME",
           "DEFAULT_TOLERANCES", "INPUT_DTYPES", "INT32_MAX", "InputOverride", "LoadedConfig", "Measurement",
           "ModelSpec", "NATIVE_PREFIXES", "NATIVE_SOURCE", "Precision", "PrecisionSettings", "ProfileRange",
           "Serving", "Strict", "SweepConfig", "Tolerance", "ZOO_NAMES", "expand_option_axes", "load_config",
           "model_display_name", "parse_config"]

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

    def named(self, name: str) -> LoadedConfig:
        """The same sweep file, run as sweep `name` (farm sweep --sweep; its cells' ids follow)."""
        return self._replace(config=self.config.model_copy(update={"name": name}))

    def profile_names(self) -> list[str]:
        """Profiles that the sweep runs: the axis if given, else every profile defined."""
        if self.config.axes.profiles is not None:
            return list(self.config.axes.profiles)
        return list(self.config.profiles)


def load_config(path: str | Path) -> LoadedConfig:
    """Read and validate a sweep file; raise ConfigError with one line on any mistake."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8-sig")  # a byte-order mark (Windows editors) is not TOML's
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such sweep file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read the sweep file: {exc}") from None
    return parse_config(text, path)


def parse_config(text: str, path: Path) -> LoadedConfig:
    try:
        raw = tomllib.loads(text)
        _check_numbers(raw, (), path)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    except RecursionError:  # thousands of nested tables: no sweep file is like that
        raise ConfigError(f"{path}: its tables or arrays are nested too deeply to be a sweep file") from None
    if "name" not in raw:  # the file's stem stands in for it, where it can
        stem_name = re.sub(r"[^A-Za-z0-9_.-]", "-", path.stem)
        if not re.fullmatch(NAME_PATTERN, stem_name):
            raise ConfigError(f"{path}: missing key 'name' ({NAME_HINT}); the file name {path.name!r} "
                              "cannot stand in for it")
        raw["name"] = stem_name
    try:
        config = SweepConfig.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(f"{path}: {describe_error(exc.errors()[0])}") from None
    backend_options = _check_semantics(config, path)
    config_hash = hashlib.sha256(text.encode()).hexdigest()[:16]
    return LoadedConfig(path, text, config, config_hash, backend_options)


def _model_file_problem(folder: Path, source: str) -> str | None:
    """Why `source` (relative to the sweep file's folder) is not a model file farm can read, in
    words that say what it is instead; None where it is one."""
    import stat

    hint = "use a path relative to the sweep file or 'zoo:NAME'"
    if "\0" in source:
        return f"{source!r} has a NUL character: no file has that name; {hint}"
    try:
        model_path = (folder / source).resolve(strict=True)
        mode = model_path.stat().st_mode
    except FileNotFoundError:
        return f"no such file {source!r} (looked for {(folder / source).absolute()}); {hint}"
    except (OSError, RuntimeError) as exc:  # a loop of symbolic links, a path too long, no permission
        return f"cannot open {source!r}: {getattr(exc, 'strerror', None) or exc}; {hint}"
    if stat.S_ISDIR(mode):
        return f"{source!r} is a folder, not a model file; name the .onnx file inside it"
    if not stat.S_ISREG(mode):
        return f"{source!r} is not a regular file (a device, a pipe or a socket); name an .onnx file"
    return None


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
        raise ConfigError(f"{path}: {dotted(loc)}: {value} is not allowed: numbers must be finite")
    elif isinstance(value, int) and not isinstance(value, bool) and not INT64_MIN <= value <= INT64_MAX:
        raise ConfigError(f"{path}: {dotted(loc)}: {value} is out of range: TOML integers are 64-bit "
                          f"({INT64_MIN} to {INT64_MAX})")


def _check_semantics(config: SweepConfig, path: Path) -> dict[str, list[dict[str, Any]]]:
    """Checks across tables: names that refer to each other, profile ranges vs batch sizes."""
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

    if "server" in config.axes.scenarios and config.serving.slo_ms is None and not config.serving.rates:
        raise ConfigError(f"{path}: axes.scenarios has \"server\": set serving.slo_ms = MS (the p99 bound under which "
                          "farm searches the highest rate) or serving.rates = [QPS, ...] (rates to measure)")
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
        if source.startswith(NATIVE_PREFIXES):
            continue  # imported, built and exported by the planner (farm.models.native)
        if not source.startswith("zoo:"):
            problem = _model_file_problem(path.parent, source)
            if problem:
                raise ConfigError(f"{path}: models[{index}].source: {problem}")
        elif source.removeprefix("zoo:") not in ZOO_NAMES:
            raise ConfigError(f"{path}: models[{index}].source: unknown zoo model {source.removeprefix('zoo:')!r}; "
                              f"the zoo has: {', '.join(ZOO_NAMES)}")
    names = [model_display_name(m) for m in config.models]
    for name in names:
        if names.count(name) > 1:
            raise ConfigError(f"{path}: models: two models are named {name!r}: give each a distinct `name`")
    return grids


def _backend_grid(backend: str, raw: dict[str, Any], path: Path) -> list[dict[str, Any]]:
    """A backend's option combinations, checked as strictly as the rest of the file."""
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
            raise ConfigError(f"{where}{'.' if loc else ': '}{describe_error({**error, 'loc': loc})}") from None
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
