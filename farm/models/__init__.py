"""Model sources: an .onnx file or `zoo:NAME`, resolved to ONNX bytes on disk plus input specs.

Every backend consumes the same ONNX file, so every backend runs the same weights. The model's
hash (of its bytes) is part of every cell id. Hashes and input specs are cached beside the file
(`<file>.farm.json`, keyed by size and mtime) so large models are read once.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import zlib
from pathlib import Path
from typing import Any

import numpy as np

from farm.config import ModelSpec, model_display_name
from farm.errors import ConfigError

FLOAT_RANGE = (-1.0, 1.0)  # trtexec fills inputs with U(-1, 1)
INT_RANGE = (0.0, 2.0)


@dataclasses.dataclass(frozen=True)
class InputSpec:
    """One model input: shape entries are ints (static) or dimension names (dynamic)."""

    name: str
    dtype: str  # numpy dtype name
    shape: tuple[int | str, ...]
    low: float
    high: float

    def concrete_shape(self, batch: int, dims: dict[str, int]) -> tuple[int, ...]:
        """The shape a cell runs: the first dimension is the batch, named dims come from `dims`."""
        out = []
        for axis, dim in enumerate(self.shape):
            if axis == 0:
                out.append(batch)
            elif isinstance(dim, int):
                out.append(dim)
            else:
                out.append(dims[dim])
        return tuple(out)


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

    def dynamic_dims(self) -> set[str]:
        return {d for spec in self.inputs for d in spec.shape[1:] if isinstance(d, str)}


def resolve_model(spec: ModelSpec, index: int, base_dir: Path, cache_dir: Path) -> ModelArtifact:
    """Materialize a model source and read its inputs, applying the sweep file's overrides."""
    name = model_display_name(spec)
    default_dims: dict[str, int] = {}
    ranges: dict[str, tuple[float, float]] = {}
    if spec.source.startswith("zoo:"):
        from farm.models.zoo import ZOO

        entry = ZOO[spec.source.removeprefix("zoo:")]
        path = zoo_model_path(spec.source.removeprefix("zoo:"), cache_dir)
        default_dims, ranges = entry.default_dims, entry.input_ranges
    else:
        path = (base_dir / spec.source).resolve()
    meta = _read_metadata(path)
    dims = {**default_dims, **spec.dims}
    where = f"models[{index}]"
    if meta.get("error"):
        return ModelArtifact(name, spec.source, path, meta["sha256"], meta["size"], (), dims, meta["error"])

    inputs = []
    by_name = {i["name"]: i for i in meta["inputs"]}
    for key in spec.inputs:
        if key not in by_name:
            raise ConfigError(f"{where}.inputs.{key}: model {name!r} has no input {key!r}; its inputs: "
                              f"{', '.join(by_name) or 'none'}")
    for raw in meta["inputs"]:
        override = spec.inputs.get(raw["name"])
        shape = tuple(override.shape) if override and override.shape else tuple(raw["shape"])
        dtype = override.dtype if override and override.dtype else raw["dtype"]
        if override and override.shape and len(override.shape) != len(raw["shape"]):
            raise ConfigError(f"{where}.inputs.{raw['name']}.shape: the model's input has rank "
                              f"{len(raw['shape'])}, the override has rank {len(override.shape)}")
        kind = np.dtype(dtype).kind if dtype != "bfloat16" else "f"
        default = FLOAT_RANGE if kind == "f" else INT_RANGE
        low, high = override.range if override and override.range else ranges.get(raw["name"], default)
        inputs.append(InputSpec(raw["name"], dtype, shape, float(low), float(high)))
    return ModelArtifact(name, spec.source, path, meta["sha256"], meta["size"], tuple(inputs), dims)


def zoo_model_path(zoo_name: str, cache_dir: Path) -> Path:
    """Generate a zoo model once into the cache and return its path. Written in the warehouse's
    temp area (`<cache>/tmp/`, emptied by the next sweep if this one is killed) and renamed into
    place; a failed write leaves nothing and is one line (UserError)."""
    from farm.models.zoo import ZOO, ZOO_VERSION
    from farm.warehouse import TEMP_DIR_NAME, write_error

    path = cache_dir / "zoo" / f"{zoo_name}-v{ZOO_VERSION}.onnx"
    if not path.exists():
        tmp = cache_dir / TEMP_DIR_NAME / f"{path.name}.{os.getpid()}.tmp"
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_bytes(ZOO[zoo_name].build().SerializeToString())
            os.replace(tmp, path)
        except OSError as exc:
            raise write_error(path, exc) from None
        finally:  # also on Ctrl-C: a partial file must not stay (on a full disk, it keeps it full)
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)
    return path


def _read_metadata(path: Path) -> dict[str, Any]:
    """Hash and input specs of an ONNX file, cached in a sidecar keyed by size and mtime."""
    stat = path.stat()
    sidecar = path.with_name(path.name + ".farm.json")
    key = {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "version": 1}
    try:
        cached = json.loads(sidecar.read_text())
        if all(cached.get(k) == v for k, v in key.items()):
            return cached
    except (OSError, ValueError):
        pass
    data = path.read_bytes()
    meta: dict[str, Any] = {**key, "sha256": hashlib.sha256(data).hexdigest(), "inputs": []}
    try:
        meta["inputs"] = _onnx_inputs(data)
    except Exception as exc:  # a corrupt file is a failed cell, not a crash
        meta["error"] = f"cannot read {path.name} as an ONNX model: {type(exc).__name__}: {_first_line(exc)}"
    try:
        tmp = sidecar.with_name(f".{sidecar.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(meta))
        os.replace(tmp, sidecar)
    except OSError:
        pass  # read-only model folder: recompute next time
    return meta


def _onnx_inputs(data: bytes) -> list[dict[str, Any]]:
    import onnx
    from onnx import helper

    model = onnx.load_from_string(data)
    if not model.graph.node:
        raise ValueError("the graph has no nodes")
    initializers = {t.name for t in model.graph.initializer}
    inputs = []
    for value in model.graph.input:
        if value.name in initializers:
            continue
        tensor = value.type.tensor_type
        if not value.type.HasField("tensor_type"):
            raise ValueError(f"input {value.name!r} is not a tensor")
        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(tensor.elem_type)).name
        shape: list[int | str] = []
        for axis, dim in enumerate(tensor.shape.dim):
            if dim.HasField("dim_value") and dim.dim_value > 0:
                shape.append(int(dim.dim_value))
            else:
                shape.append(dim.dim_param or f"{value.name}_dim{axis}")
        inputs.append({"name": value.name, "dtype": dtype, "shape": shape})
    if not inputs:
        raise ValueError("the model has no inputs")
    return inputs


def make_feeds(inputs: tuple[InputSpec, ...], shapes: dict[str, tuple[int, ...]], seed: int) -> dict[str, np.ndarray]:
    """Seeded random inputs, never all zeros: U(low, high) for floats, integers in [low, high).

    The stream depends on the seed and the input's name only, so every backend and precision of
    a model sees the same data (what accuracy comparisons need).
    """
    feeds = {}
    for spec in inputs:
        rng = np.random.default_rng([seed, zlib.crc32(spec.name.encode())])
        shape = shapes[spec.name]
        if np.dtype(spec.dtype).kind == "f":
            values = rng.uniform(spec.low, spec.high, size=shape).astype(spec.dtype)
        elif spec.dtype == "bool":
            values = rng.integers(int(spec.low), max(int(spec.high), 2), size=shape).astype(bool)
        else:
            values = rng.integers(int(spec.low), int(spec.high), size=shape).astype(spec.dtype)
        feeds[spec.name] = values
    return feeds


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else "(no message)"
