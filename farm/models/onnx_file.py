"""What an ONNX file says of itself, read once: its hash (the model's identity, with its external
data files), its inputs (name, dtype, shape, and what the graph tells of an integer input's values:
farm.models.input_values), cached beside it in `<file>.farm.json` keyed by size and mtime."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np

from farm.errors import UserError, describe
from farm.files import write_atomic
from farm.records import UNNAMED


def read_metadata(path: Path) -> dict[str, Any]:
    """Hash and input specs of an ONNX file, cached in a sidecar keyed by the size and mtime of the
    file and of its external data files. The hash is the model's identity (cell ids, the accuracy
    reference and precision caches): the file's bytes, and where its weights lie in external data
    files, each of those files' name and bytes too, so new weights are a new model."""
    stat = path.stat()
    sidecar = path.with_name(path.name + ".farm.json")
    key = {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "version": 6}  # 6: unfed inputs unsupported
    try:
        cached = json.loads(sidecar.read_text())
        if all(cached.get(k) == v for k, v in key.items()) and cached.get("external", {}) == _stamps(
                path.parent, cached.get("external", {})):
            return cached
    except (OSError, ValueError):
        pass
    data = path.read_bytes()
    digest = hashlib.sha256(data)
    meta: dict[str, Any] = {**key, "inputs": []}
    try:
        meta["inputs"], locations = _onnx_inputs(data)
    except UnfedInput as exc:  # a readable model farm cannot feed: its cells are unsupported
        meta["unsupported"], locations = str(exc), []
    except Exception as exc:  # noqa: BLE001 - a corrupt file is a failed cell, not a crash
        meta["error"], locations = f"cannot read {path.name} as an ONNX model: {describe(exc)}", []
    for location in locations:  # in the order the file names them (sorted): the same files, the same hash
        digest.update(b"\0" + location.encode() + b"\0")
        external = path.parent / location
        if external.is_file() and path.parent.resolve() in external.resolve().parents:
            with external.open("rb") as handle:
                for chunk in iter(lambda: handle.read(1 << 20), b""):
                    digest.update(chunk)
    meta["sha256"] = digest.hexdigest()
    meta["external"] = _stamps(path.parent, dict.fromkeys(locations))
    try:
        write_atomic(sidecar, json.dumps(meta))
    except UserError:
        pass  # read-only model folder: recompute next time
    return meta


class UnfedInput(ValueError):
    """An input of the model that farm makes no values for (not a tensor)."""


def _stamps(folder: Path, locations: dict[str, Any]) -> dict[str, list[int] | None]:
    """(size, mtime) of each external data file, None where it is missing."""
    stamps: dict[str, list[int] | None] = {}
    for location in locations:
        try:
            found = (folder / location).stat()
            stamps[location] = [found.st_size, found.st_mtime_ns]
        except OSError:
            stamps[location] = None
    return stamps


def _external_locations(model) -> list[str]:
    """The external data files the model's tensors name (subgraphs and attributes included), sorted."""
    from onnx.external_data_helper import ExternalDataInfo, uses_external_data

    def tensors(graph):
        yield from graph.initializer
        for node in graph.node:
            for attribute in node.attribute:
                if attribute.HasField("t"):
                    yield attribute.t
                yield from attribute.tensors
                for sub in ([attribute.g] if attribute.HasField("g") else []) + list(attribute.graphs):
                    yield from tensors(sub)

    return sorted({ExternalDataInfo(t).location for t in tensors(model.graph) if uses_external_data(t)})


def _onnx_inputs(data: bytes) -> tuple[list[dict[str, Any]], list[str]]:
    """The model's input specs, and the external data files it names."""
    import onnx
    from onnx import helper

    from farm.models.input_values import integer_hints

    model = onnx.load_from_string(data)
    locations = _external_locations(model)
    if not model.graph.node:
        raise ValueError("the graph has no nodes")
    initializers = {t.name for t in model.graph.initializer}
    hints = integer_hints(model)
    inputs = []
    for value in model.graph.input:
        if value.name in initializers:
            continue
        tensor = value.type.tensor_type
        if not value.type.HasField("tensor_type"):  # a sequence, map or optional: farm makes no such inputs
            kind = (value.type.WhichOneof("value") or "value").removesuffix("_type").replace("_", " ")
            raise UnfedInput(f"input {value.name!r} is a {kind}, not a tensor: farm makes tensor inputs only; give "
                             "the model tensor inputs")
        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(tensor.elem_type)).name
        shape: list[int | str] = []
        for dim in tensor.shape.dim:
            if dim.HasField("dim_value") and dim.dim_value > 0:
                shape.append(int(dim.dim_value))
            else:  # no name (or "?"): sized by its location, never shared with another "?"
                shape.append(dim.dim_param if dim.dim_param.strip() else UNNAMED)
        inputs.append({"name": value.name, "dtype": dtype, "shape": shape, "hint": hints.get(value.name)})
    if not inputs:
        raise ValueError("the model has no inputs")
    return inputs, locations
