"""Expand a validated sweep into cells: models x precisions x batch sizes x profiles x backends
x backend-option combinations.

An axis that does not apply to a backend collapses to one cell that says so (ONNX Runtime has
no optimization profiles), and a precision a backend cannot run becomes one `unsupported` cell
per batch size, decided here without building anything. A cell id is a hash of everything that
changes the cell's result (and the sweep's name, so that an id is unique in the whole warehouse),
so a rerun finds the cells it already has.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from farm import __version__
from farm.backends.base import LoopTimedBackend
from farm.backends.registry import backend_class
from farm.config import AppliedTolerance, LoadedConfig, Measurement, Serving
from farm.config.keys import parse_axis_key, shape_text, toml_inline_table, toml_key, toml_key_value
from farm.errors import ConfigError
from farm.models import failed_model, resolve_model
from farm.models.parallel_export import export_in_parallel
from farm.records import (
    BATCH_NAMES,
    Calibration,
    Cell,
    InputSpec,
    MeasurementSettings,
    ModelArtifact,
    ProfileShapes,
    ShapeProfile,
    Tolerance,
    axis_key,
    is_unnamed,
)
from farm.scenario import ServingPlan


@dataclasses.dataclass(frozen=True)
class Plan:
    sweep: str
    cells: list[Cell]
    models: list[ModelArtifact]
    # per model (as `models`), what planning had to decide for it that the sweep file did not say
    # (an integer input's range the model does not tell): on its cells, and printed by `farm sweep`
    model_notes: list[list[str]] = dataclasses.field(default_factory=list)

    def notes(self) -> list[str]:
        """Each model's notes as `farm sweep` prints them: 'models[0] (name): note'."""
        return [f"models[{i}] ({model.name}): {note}" for i, (model, notes) in enumerate(zip(self.models, self.model_notes))
                for note in notes]


def plan_sweep(loaded: LoadedConfig, cache_dir: Path) -> Plan:
    """Resolve every model and expand the sweep. Raises ConfigError for shape mistakes."""
    config = loaded.config
    models: list[ModelArtifact] = []
    model_notes: list[list[str]] = []
    seed = config.measurement.seed
    failed = export_in_parallel(config.models, loaded.base_dir, cache_dir, seed)  # where the machine has the cores
    for i, spec in enumerate(config.models):
        model_notes.append([])
        if i in failed:
            models.append(failed_model(spec, cache_dir, seed, failed[i]))
            continue
        try:
            models.append(resolve_model(spec, i, loaded.base_dir, cache_dir, seed, model_notes[i]))
        except ConfigError as exc:  # a mistake about the model's inputs: name the file too
            raise ConfigError(f"{loaded.path}: {exc}") from None
    profiles = [
        ShapeProfile(name, {dim: (r.min, r.opt, r.max) for dim, r in config.profiles[name].items()})
        for name in loaded.profile_names()
    ]
    for index, model in enumerate(models):
        _check_model_shapes(loaded, index, model, profiles)
        spec = config.models[index].calibration
        for key in ("data", "images"):
            value = getattr(spec, key)
            if value and not (loaded.base_dir / value).exists():
                raise ConfigError(f"{loaded.path}: models[{index}].calibration.{key}: no such file or folder "
                                  f"{value!r} (paths are relative to the sweep file)")
    _check_profile_dims(loaded, models, profiles)
    # two [[models]] of the same bytes under two names are two models: their name joins their cells'
    # identity (only then, so the ids of every other model stay as they were)
    shared = {sha for sha in (m.sha256 for m in models) if sum(m.sha256 == sha for m in models) > 1}
    cells = [cell for index, model in enumerate(models)
             for cell in _model_cells(loaded, index, model, profiles, model.sha256 in shared, model_notes[index])]
    return Plan(config.name, cells, models, model_notes)


def _model_cells(loaded: LoadedConfig, index: int, model: ModelArtifact, profiles: list[ShapeProfile],
                 named: bool = False, model_notes: Sequence[str] = ()) -> list[Cell]:
    """One model's cells: backends x option combinations x precisions x batch sizes x profiles, and
    the model's own batch where its inputs fix one the sweep does not list (so that it is measured
    somewhere; its cells at the others are unsupported). `model_notes` go on every one of them (not in
    their ids)."""
    config = loaded.config
    spec = config.models[index].calibration
    calibration = Calibration(spec.data, spec.images, spec.size, spec.mean, spec.std, spec.samples,
                              str(loaded.base_dir))
    measurement = config.measurement
    # a model that runs at one batch only, one the sweep does not list, is measured there too
    own = None if model.error or model.declared_batch in config.axes.batch_sizes else model.declared_batch
    batches = [*config.axes.batch_sizes, *([own] if own is not None else [])]
    own_note = (f"batch {own}: the only batch model {model.name!r} runs (its inputs fix it), which the sweep's "
                "batch sizes do not list")
    cells: list[Cell] = []
    seen: set[str] = set()  # a cell twice: an option list only some precisions read (Options.at_precision)
    for backend in config.axes.backends:
        cls = backend_class(backend)
        with_profiles = cls.capabilities.profiles
        cell_profiles: list[ShapeProfile | None] = profiles if (with_profiles and profiles) else [None]
        note = "; ".join(filter(None, [*model_notes, cls.profile_note() if profiles and not with_profiles else None]))
        note = note or None
        for listed in (cls.resolve_options(o) for o in loaded.backend_options[backend]):
            for precision in config.axes.precisions:
                options = cls.Options.at_precision(listed, precision)
                applied = config.accuracy.tolerance(precision) if config.accuracy.enabled else None
                for batch in batches:
                    for profile in cell_profiles:
                        for serving in _servings(config.axes.scenarios, config.serving):
                            cell = _make_cell(config.name, model, precision, batch, profile, backend, options,
                                              measurement, tuple(profiles) if with_profiles else (), calibration,
                                              config.precision.keep_io_types, applied, named, serving)
                            cell = dataclasses.replace(
                                cell, notes="; ".join(filter(None, [note, own_note if batch == own else None])) or None,
                                device_kind=cls.device_kind(options),
                                unsupported_reason=model.unsupported or model.batch_unsupported(batch)
                                or (None if cls.capabilities.native_modules else model.onnx_unsupported(batch))
                                or cls.unsupported_reason(precision, options) or _serving_refusal(serving, cls))
                            if cell.cell_id not in seen:
                                seen.add(cell.cell_id)
                                cells += _pinned(cell, config.axes.accelerator_types)
    return cells


def _servings(scenarios: list[str], serving: Serving) -> list[ServingPlan | None]:
    """The loads a cell is measured under: None (offline) and each serving scenario, Server once per
    batcher delay (the streams issue a query's samples together and wait for it: no delay serves them)."""
    return [None if scenario == "offline" else
            ServingPlan(scenario, delay, serving.slo_ms, tuple(serving.rates), serving.min_duration_ms,
                        serving.min_query_count, serving.samples_per_query)
            for scenario in scenarios for delay in (serving.delays() if scenario == "server" else [0.0])]


def _serving_refusal(serving: ServingPlan | None, cls: type) -> str | None:
    if serving is None or issubclass(cls, LoopTimedBackend):
        return None
    return (f"{cls.name} times its own runs, and a {serving.scenario} scenario needs an engine farm calls query by "
            "query (its batcher feeds it): run the scenario on the tensorrt, onnxruntime or torch backend")


def _pinned(cell: Cell, accelerator_types: list[str] | None) -> list[Cell]:
    """A CUDA cell once per GPU model it is pinned to (its id covers the model); any other cell
    as it is (a CPU cell runs on CPU whatever the GPUs)."""
    if not accelerator_types or cell.device_kind != "cuda":
        return [cell]
    return [dataclasses.replace(cell, accelerator_type=name, cell_id=hashlib.sha256(
        f"{cell.cell_id} on {name}".encode()).hexdigest()[:16]) for name in accelerator_types]


def with_later_defaults(backend: Any, options: dict[str, Any]) -> dict[str, Any]:
    """A cell's stored backend options with every option its backend added later (`added_later`) at
    its default where the cell predates it: how compare, history and labels see one configuration
    in cells stored before and after an option existed (an unknown backend's: as they are)."""
    from farm.backends.registry import BACKENDS

    if backend not in BACKENDS:
        return options
    model = backend_class(backend).Options
    return {**{k: model.model_fields[k].default for k in model.added_later if k in model.model_fields}, **options}


def options_read(backend: Any, options: Any, precision: Any) -> Any:
    """A cell's backend options less those its precision does not read (Options.read_at): a bf16
    cell's label names no int8 scheme. Anything but a known backend's dict: as it is."""
    return _by_precision("read_at", backend, options, precision)


def options_at(backend: Any, options: Any, precision: Any) -> Any:
    """A cell's backend options as a cell of `precision` would run them (Options.at_precision): how
    an int8 cell pairs with its bf16 cell. Anything but a known backend's dict: as it is."""
    return _by_precision("at_precision", backend, options, precision)


def _by_precision(method: str, backend: Any, options: Any, precision: Any) -> Any:
    from farm.backends.registry import BACKENDS

    if backend not in BACKENDS or not isinstance(options, dict) or not isinstance(precision, str):
        return options
    return getattr(backend_class(backend).Options, method)(options, precision)


def _identity(model: Any, values: dict[str, Any]) -> dict[str, Any]:
    """The settings of `model` (the measurement settings, a backend's options) a cell id covers:
    all of them, except those added after ids were in use (`model.added_later`) while at their
    default, so that cells measured before they existed keep their ids."""
    return {k: v for k, v in values.items()
            if not (k in model.added_later and k in model.model_fields and v == model.model_fields[k].default)}


def _make_cell(sweep: str, model: ModelArtifact, precision: str, batch: int, profile: ShapeProfile | None,
               backend: str, options: dict[str, Any], measurement: Measurement,
               all_profiles: tuple[ShapeProfile, ...], calibration: Calibration, keep_io_types: bool,
               tolerance: AppliedTolerance | None, named: bool = False, serving: ServingPlan | None = None) -> Cell:
    """The cell and its id: a hash of everything that changes its result (tests/test_plan.py pins it)."""
    shapes = {} if model.error else {i.name: i.concrete_shape(batch, model.dims) for i in model.inputs}
    identity = {
        "sweep": sweep,  # ids are unique across the warehouse, so joins on cell_id alone are safe
        "model_sha256": model.sha256,
        "inputs": [_input_identity(i) for i in model.inputs],
        "input_shapes": shapes,
        "precision": precision,
        "batch": batch,
        "profile": dataclasses.asdict(profile) if profile else None,
        "backend": backend,
        "options": _identity(backend_class(backend).Options, options),
        "measurement": _identity(Measurement, measurement.model_dump(mode="json")),
        "farm_version": __version__,
    }
    if precision in ("fp16", "int8"):  # what the precision transform depends on
        identity["transform"] = {"keep_io_types": keep_io_types,
                                 "calibration": dataclasses.asdict(calibration) if precision == "int8" else None}
    if named:  # another model of this sweep has the same bytes: the name tells them apart
        identity["model_name"] = model.name
    if tolerance is not None:  # the verdict is part of the result
        identity["tolerance"] = tolerance.model_dump()
    if serving is not None:  # a serving scenario's load (offline cells' ids are those from before scenarios)
        identity["serving"] = dataclasses.asdict(serving)
    if all_profiles:  # engines may hold every profile: they are part of what is built
        identity["all_profiles"] = [dataclasses.asdict(p) for p in all_profiles]
    digest = hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()[:16]
    record = Tolerance(**tolerance.model_dump()) if tolerance is not None else None
    return Cell(digest, sweep, model, precision, batch, profile, backend, options,
                MeasurementSettings(**measurement.model_dump()), shapes, calibration=calibration,
                keep_io_types=keep_io_types, tolerance=record, all_profiles=all_profiles,
                profile_shapes=profile_shapes(profile, model.inputs, shapes) if profile else None,
                all_profile_shapes=tuple(profile_shapes(p, model.inputs, shapes) for p in all_profiles),
                serving=serving)


def profile_shapes(profile: ShapeProfile, inputs: tuple[InputSpec, ...],
                   shapes: dict[str, tuple[int, ...]]) -> ProfileShapes:
    """A profile's (min, opt, max) shape per input: the profile's range on each axis it keys
    ('batch' or a dimension name), the cell's own size on every other axis."""
    per_input = {}
    for spec in inputs:
        if spec.name not in shapes:
            continue
        low, opt, high = [], [], []
        for axis in range(len(spec.shape)):
            size = shapes[spec.name][axis]
            key = spec.profile_key(axis)  # 'batch' on the model's batch axis, wherever it is
            lo, op, hi = profile.ranges.get(key, (size, size, size)) if key is not None else (size, size, size)
            low.append(lo), opt.append(op), high.append(hi)
        per_input[spec.name] = (tuple(low), tuple(opt), tuple(high))
    return ProfileShapes(profile.name, per_input)


def _input_identity(spec: Any) -> dict[str, Any]:
    """An input's part of the cell id. Its batch axis counts only where it is not axis 0 (how
    every model was read before models could say where their batch is), so those ids stay."""
    identity = dataclasses.asdict(spec)
    first_fixed = bool(spec.shape) and isinstance(spec.shape[0], int)
    if spec.batch_axis == 0 or (spec.batch_axis is None and first_fixed):
        identity.pop("batch_axis")
    return identity


def _check_model_shapes(loaded: LoadedConfig, index: int, model: ModelArtifact, profiles: list[ShapeProfile]) -> None:
    if model.error:
        return  # the model's cells fail with the reason; the rest of the sweep goes on
    where = f"{loaded.path}: models[{index}]"
    _check_dims_keys(loaded, index, model, where)
    _check_dims_given(loaded, index, model, where)
    for profile in profiles:
        for dim, (lo, _, hi) in profile.ranges.items():
            if dim in model.dims and dim in model.dynamic_dims() and not lo <= model.dims[dim] <= hi:
                raise ConfigError(
                    f"{where}.dims.{toml_key(dim)}: {model.dims[dim]} is outside profile {profile.name!r} "
                    f"({dim} {lo}-{hi}): widen profiles.{profile.name}.{dim} or change the size"
                )


def _check_dims_keys(loaded: LoadedConfig, index: int, model: ModelArtifact, where: str) -> None:
    """Every key of the model's `dims` names a dynamic dimension or one dynamic axis ("INPUT:AXIS")."""
    spec_dims = loaded.config.models[index].dims
    dynamic = model.dynamic_dims()
    inputs = {spec.name: spec for spec in model.inputs}
    known = ", ".join([*sorted(dynamic), *model.unnamed_dims()])
    for dim in spec_dims:
        location = parse_axis_key(dim, inputs)
        if location is not None:  # "INPUT:AXIS": one axis of one input
            spec, axis = inputs[location[0]], location[1]
            problem = None
            if axis >= len(spec.shape):
                problem = f"input {spec.name!r} has no axis {axis} (its shape is {shape_text(spec.shape)})"
            elif axis == spec.batch_axis:
                problem = (f"axis {axis} of input {spec.name!r} is the batch: its sizes are axes.batch_sizes")
            elif isinstance(spec.shape[axis], int):
                problem = f"axis {axis} of input {spec.name!r} is fixed ({spec.shape[axis]})"
            if problem:
                raise ConfigError(f"{where}.dims.{toml_key(dim)}: {problem}; its dynamic dimensions: {known or 'none'}")
        elif is_unnamed(dim):
            fixed = {k: v for k, v in spec_dims.items() if k != dim}
            fixed.update({key: spec_dims[dim] for key in model.unnamed_dims() if key not in fixed})
            raise ConfigError(
                f"{where}.dims.{toml_key(dim)}: {dim!r} is not a name: the model's unnamed dimensions are sized one by one, "
                f"by input and axis; set in models[{index}]: dims = {toml_inline_table(fixed)}")
        elif dim not in dynamic:
            note = " (that is the batch: its sizes are axes.batch_sizes)" if dim in model.batch_names() else ""
            raise ConfigError(
                f"{where}.dims.{toml_key(dim)}: model {model.name!r} has no dynamic dimension {dim!r}{note}; its dynamic "
                f"dimensions: {known or 'none (every dimension but the batch is fixed)'}"
            )


def _check_dims_given(loaded: LoadedConfig, index: int, model: ModelArtifact, where: str) -> None:
    """Every dynamic dimension but the batch has a size, or the error says which `dims` to set."""
    spec_dims = loaded.config.models[index].dims
    missing: dict[str, str] = {}  # dims key -> where it is
    first_axis: str | None = None  # the dims key of a missing axis 0: maybe the batch
    for spec in model.inputs:
        for axis, dim in enumerate(spec.shape):
            if axis == spec.batch_axis or isinstance(dim, int):
                continue
            location = axis_key(spec.name, axis)
            if location in model.dims or (not is_unnamed(dim) and dim in model.dims):
                continue
            key = location if is_unnamed(dim) else dim
            if is_unnamed(dim):
                missing[location] = f"input {spec.name!r} axis {axis} (unnamed: {dim!r})"
            else:
                missing.setdefault(dim, f"{dim!r} (input {spec.name!r} axis {axis})")
            if axis == 0 and first_axis is None:
                first_axis = key
    if missing:
        if not any(spec.batch_axis is not None for spec in model.inputs):
            example = f" (e.g. batch_dim = {toml_key_value(first_axis)})" if first_axis else ""
            batch_hint = ("; the model has no batch axis (no dynamic dimension named "
                          f"{', '.join(BATCH_NAMES)}): if one of these is the batch, set batch_dim instead{example}")
        else:
            batch_hint = ""
        suggestion = toml_inline_table({**spec_dims, **dict.fromkeys(missing, 128)})
        raise ConfigError(
            f"{where}.dims: dynamic dimension(s) with no size: {', '.join(missing.values())}{batch_hint}; "
            f"set in models[{index}]: dims = {suggestion}"
        )


def _check_profile_dims(loaded: LoadedConfig, models: list[ModelArtifact], profiles: list[ShapeProfile]) -> None:
    known = {"batch"}.union(*(m.dynamic_dims() for m in models if not m.error))
    if any(m.error for m in models):
        return  # an unreadable model's dims are unknown; do not reject its profiles
    for profile in profiles:
        for dim in profile.ranges:
            if dim not in known:
                raise ConfigError(
                    f"{loaded.path}: profiles.{profile.name}.{dim}: no model has a dynamic dimension "
                    f"{dim!r}; dimensions: {', '.join(sorted(known))}"
                )
