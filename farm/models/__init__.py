"""Model sources: an .onnx file, `zoo:NAME`, or a PyTorch factory (`module:PKG.MOD:FACTORY`,
`torchvision:NAME`: farm.models.native exports it), resolved to ONNX bytes on disk plus input specs.

Every backend consumes the same ONNX file, so every backend runs the same weights. The model's
hash (of its bytes) is part of every cell id. Hashes and input specs are cached beside the file
(`<file>.farm.json`, keyed by size and mtime) so large models are read once.
"""

from __future__ import annotations

import hashlib
import json
import math
import zlib
from pathlib import Path
from typing import Any

import numpy as np

from farm.config import NATIVE_PREFIXES, ModelSpec, model_display_name
from farm.config.keys import parse_axis_key, shape_text, toml_key, toml_key_value
from farm.errors import ConfigError
from farm.files import write_atomic
from farm.models.input_values import element_kind, input_values
from farm.models.onnx_file import read_metadata
from farm.records import BATCH_NAMES, InputSpec, ModelArtifact, axis_key, is_unnamed


def resolve_model(spec: ModelSpec, index: int, base_dir: Path, cache_dir: Path, seed: int = 1,
                  notes: list[str] | None = None) -> ModelArtifact:
    """Materialize a model source and read its inputs, applying the sweep file's overrides. A
    PyTorch source is built with torch seeded by `seed` and exported to ONNX (farm.models.native).
    What its cells should say of it (an integer input given input_values.DEFAULT_INT_RANGE) goes into `notes`."""
    name = model_display_name(spec)
    default_dims: dict[str, int] = {}
    ranges: dict[str, tuple[float, float]] = {}
    meta: dict[str, Any] | None = None
    onnx_error = onnx_fixed_batch = None
    if spec.source.startswith(NATIVE_PREFIXES):
        native = _native(spec, index, base_dir, cache_dir, seed)
        if isinstance(native, ModelArtifact):
            return native
        path, meta, onnx_error, onnx_fixed_batch = native
    elif spec.source.startswith("zoo:"):
        from farm.models.zoo import ZOO

        entry = ZOO[spec.source.removeprefix("zoo:")]
        path = zoo_model_path(spec.source.removeprefix("zoo:"), cache_dir)
        default_dims, ranges = entry.default_dims, entry.input_ranges
    else:
        path = (base_dir / spec.source).resolve()
    meta = meta or read_metadata(path)
    dims = {**default_dims, **spec.dims}
    where = f"models[{index}]"
    if meta.get("error"):
        return ModelArtifact(name, spec.source, path, meta["sha256"], meta["size"], (), dims, meta["error"])
    if meta.get("unsupported"):
        return ModelArtifact(name, spec.source, path, meta["sha256"], meta["size"], (), dims,
                             unsupported=meta["unsupported"])

    by_name = {i["name"]: i for i in meta["inputs"]}
    for key in spec.inputs:
        if key not in by_name:
            raise ConfigError(f"{where}.inputs.{toml_key(key)}: model {name!r} has no input {key!r}; its inputs: "
                              f"{', '.join(by_name) or 'none'}")
    shapes: dict[str, tuple[int | str, ...]] = {}
    for raw in meta["inputs"]:
        override = spec.inputs.get(raw["name"])
        if override and override.shape and len(override.shape) != len(raw["shape"]):
            raise ConfigError(f"{where}.inputs.{toml_key(raw['name'])}.shape: the model's input has rank "
                              f"{len(raw['shape'])}, the override has rank {len(override.shape)}")
        shapes[raw["name"]] = tuple(override.shape) if override and override.shape else tuple(raw["shape"])
    batch_axes = _batch_axes(name, shapes, spec.batch_dim, where)

    inputs, refused = [], []
    for raw in meta["inputs"]:
        override = spec.inputs.get(raw["name"])
        dtype = override.dtype if override and override.dtype else raw["dtype"]
        (low, high), refusal = input_values(raw["name"], raw["dtype"], dtype, shapes[raw["name"]], override, ranges,
                                            where, raw.get("hint"), onnx_error, notes)
        if refusal:
            refused.append(refusal)
        inputs.append(InputSpec(raw["name"], dtype, shapes[raw["name"]], float(low), float(high),
                                batch_axes[raw["name"]]))
    return ModelArtifact(name, spec.source, path, meta["sha256"], meta["size"], tuple(inputs), dims,
                         declared_batch=_declared_batch(shapes, batch_axes), onnx_error=onnx_error,
                         onnx_fixed_batch=onnx_fixed_batch, unsupported="; ".join(refused) or None)


def _declared_batch(shapes: dict[str, tuple[int | str, ...]], batch_axes: dict[str, int | None]) -> int | None:
    """The one batch a model without a batch axis runs (as declared): its fixed batch where axis 0 of
    every input is the same number, else 1; None for a model with a batch axis."""
    if any(axis is not None for axis in batch_axes.values()):
        return None
    firsts = {shape[0] for shape in shapes.values() if shape}
    return firsts.pop() if len(firsts) == 1 and isinstance(next(iter(firsts)), int) else 1


def failed_model(spec: ModelSpec, cache_dir: Path, seed: int, reason: str) -> ModelArtifact:
    """A PyTorch source that cannot be built or exported here: its cells fail with `reason`."""
    identity = hashlib.sha256(json.dumps([spec.source, spec.kwargs, seed], default=str).encode()).hexdigest()
    return ModelArtifact(model_display_name(spec), spec.source, cache_dir / "native", identity, 0, (),
                         dict(spec.dims), reason)


def _native(spec: ModelSpec, index: int, base_dir: Path, cache_dir: Path,
            seed: int) -> ModelArtifact | tuple[Path, dict[str, Any] | None, str | None, tuple[int, str] | None]:
    """A PyTorch source's ONNX path, its metadata where no ONNX file can give it, and why it has
    none; or, where the factory cannot build the module, a model whose cells fail with the reason."""
    from farm.models.native import WEIGHTS_NAME, ModelFailed, native_model

    try:
        native = native_model(spec, f"models[{index}]", base_dir, cache_dir, seed)
    except ModelFailed as exc:  # this model's cells fail with the reason; the sweep goes on
        return failed_model(spec, cache_dir, seed, exc.reason)
    if not native.onnx_error:
        return native.path, None, None, native.onnx_fixed_batch
    # no ONNX file to read: the inputs as the sweep file gives them
    return native.path, {"sha256": native.sha256, "size": (native.path.parent / WEIGHTS_NAME).stat().st_size,
                         "inputs": native.inputs}, native.onnx_error, None


def _common_dynamic_first_axis(shapes: dict[str, tuple[int | str, ...]]) -> bool:
    """Every input has a dynamic axis 0, and those axes share one name (or are all unnamed)."""
    firsts = [shape[0] if shape else None for shape in shapes.values()]
    if not firsts or not all(isinstance(d, str) for d in firsts):
        return False
    named = {d for d in firsts if not is_unnamed(d)}
    return len(named) <= 1 and (not named or len(named) == 1 and all(not is_unnamed(d) for d in firsts))


def _batch_axes(name: str, shapes: dict[str, tuple[int | str, ...]], batch_dim: str | list[str] | None,
                where: str) -> dict[str, int | None]:
    """Each input's batch axis: where the dimension that `batch_dim` names (a name or "INPUT:AXIS"),
    or else a dimension named as in BATCH_NAMES, is; None for inputs without it (states, scalars)."""
    axes: dict[str, int | None] = dict.fromkeys(shapes)
    key = f"{where}.batch_dim"
    if batch_dim is None:
        found: dict[str, list[str]] = {}
        for input_name, shape in shapes.items():
            for axis, dim in enumerate(shape):
                if isinstance(dim, str) and dim.strip().lower() in BATCH_NAMES:
                    found.setdefault(dim, []).append(f"input {input_name!r} axis {axis}")
        if len(found) > 1:
            named = "; ".join(f"{dim!r} ({', '.join(places)})" for dim, places in found.items())
            raise ConfigError(f"{where}: model {name!r} has several dimensions named like a batch: {named}; "
                              f"say which one is in {where}: batch_dim = {toml_key_value(next(iter(found)))}")
        if not found and _common_dynamic_first_axis(shapes):
            # No batch name, but every input starts with the same dynamic axis (tf2onnx's 'unk__612',
            # an unnamed '?'): that axis is the batch, as exporters mean it.
            return dict.fromkeys(shapes, 0)
        refs = list(found)
    else:
        refs = [batch_dim] if isinstance(batch_dim, str) else list(batch_dim)
    for ref in refs:
        location = parse_axis_key(ref, shapes)
        if location is not None:
            input_name, axis = location
            shape = shapes[input_name]
            if axis >= len(shape):
                raise ConfigError(f"{key}: input {input_name!r} has no axis {axis}: its shape is "
                                  f"{shape_text(shape)}")
            if isinstance(shape[axis], int):
                raise ConfigError(f"{key}: axis {axis} of input {input_name!r} is fixed ({shape[axis]}): the "
                                  "batch must be a dynamic dimension")
            places = [location]
        else:
            places = [(n, a) for n, shape in shapes.items() for a, d in enumerate(shape) if d == ref]
            if not places or is_unnamed(ref):
                named = sorted({d for shape in shapes.values() for d in shape
                                if isinstance(d, str) and not is_unnamed(d)})
                unnamed = [axis_key(n, a) for n, shape in shapes.items() for a, d in enumerate(shape)
                           if is_unnamed(d)]
                raise ConfigError(f"{key}: model {name!r} has no dynamic dimension {ref!r}; its dynamic "
                                  f"dimensions: {', '.join([*named, *unnamed]) or 'none'} (\"INPUT:AXIS\" "
                                  "names one axis of one input)")
        for input_name, axis in places:
            if axes[input_name] not in (None, axis):
                fix = toml_key_value(axis_key(input_name, axis))
                raise ConfigError(f"{key}: input {input_name!r} would have two batch axes, {axes[input_name]} "
                                  f"and {axis}: say which in {where}: batch_dim = {fix}")
            axes[input_name] = axis
    return axes


def zoo_model_path(zoo_name: str, cache_dir: Path) -> Path:
    """Generate a zoo model once into the cache and return its path. Written in the warehouse's
    temp area (`<cache>/tmp/`, emptied by the next sweep if this one is killed) and renamed into
    place; a failed write leaves nothing and is one line (UserError)."""
    from farm.files import TEMP_DIR_NAME
    from farm.models.zoo import ZOO, ZOO_VERSION

    path = cache_dir / "zoo" / f"{zoo_name}-v{ZOO_VERSION}.onnx"
    if not path.exists():
        write_atomic(path, lambda tmp: tmp.write_bytes(ZOO[zoo_name].build().SerializeToString()),
                     tmp_dir=cache_dir / TEMP_DIR_NAME, make_parents=True)
    return path


def make_feeds(inputs: tuple[InputSpec, ...], shapes: dict[str, tuple[int, ...]], seed: int) -> dict[str, np.ndarray]:
    """Seeded random inputs, never all zeros: U(low, high) for floats, integers in [low, high),
    lowercase words of [low, high) letters for strings.

    The stream depends on the seed and the input's name only, so every backend and precision of
    a model sees the same data (what accuracy comparisons need).
    """
    feeds = {}
    for spec in inputs:
        rng = np.random.default_rng([seed, zlib.crc32(spec.name.encode())])
        shape = shapes[spec.name]
        kind = element_kind(spec.dtype)
        if kind == "O":  # ONNX strings: Python str in an object array, as ONNX Runtime takes them
            lengths = rng.integers(math.ceil(spec.low), max(math.ceil(spec.high), math.ceil(spec.low) + 1), size=shape)
            letters = rng.integers(ord("a"), ord("z") + 1, size=(*shape, max(int(lengths.max(initial=0)), 1)))
            values = np.empty(shape, dtype=object)
            for at in np.ndindex(*shape):
                values[at] = "".join(map(chr, letters[at][:lengths[at]]))
        elif spec.low == spec.high:  # a `value`
            values = np.full(shape, spec.low).astype(spec.dtype)
        elif kind == "f":  # bfloat16 and float8 too, drawn in float64 and rounded to their type
            values = rng.uniform(spec.low, spec.high, size=shape).astype(spec.dtype)
        elif spec.dtype == "bool":
            values = rng.integers(int(spec.low), max(int(spec.high), 2), size=shape).astype(bool)
        else:
            # the integers in [low, high): from ceil(low) up to, not including, ceil(high)
            values = rng.integers(math.ceil(spec.low), math.ceil(spec.high), size=shape).astype(spec.dtype)
        feeds[spec.name] = values
    return feeds


