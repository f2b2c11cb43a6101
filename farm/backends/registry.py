"""Backends by name, imported lazily so `farm --help`, the config and the planner never load an engine.

A new backend is one package in farm/backends/ (its `Options` and a `Backend` subclass with its
`capabilities`, `libraries`, `layer_kind`, `build_cost` and `transform_note`), one line in
BACKENDS, and one `[backends.NAME]` section in docs/config.md (its options; tests/test_docs.py
checks it); tests/test_backend_contract.py then runs it (its LIVE table
says with which options it runs on a CPU-only machine). A backend module may
import only the standard library, numpy, pydantic and farm's layers below it at top level; the
engine itself (onnxruntime, torch, tensorrt) is imported inside its methods.
"""

from __future__ import annotations

import importlib
import itertools
from typing import Any

from pydantic import ValidationError

from farm.backends.base import Backend

# name -> "module:Class"; the module is imported only when the backend is needed.
BACKENDS: dict[str, str] = {
    "onnxruntime": "farm.backends.onnxruntime:OnnxRuntimeBackend",
    "torch": "farm.backends.torch:TorchBackend",
    "tensorrt": "farm.backends.tensorrt:TensorRTBackend",
    "trtexec": "farm.backends.trtexec:TrtexecBackend",
}


def backend_class(name: str) -> type[Backend]:
    """The Backend subclass registered under `name` (KeyError if none)."""
    module_name, _, class_name = BACKENDS[name].partition(":")
    return getattr(importlib.import_module(module_name), class_name)


def layer_kind(backend: Any) -> str | None:
    """The kind of a backend's layer rows where a row does not say: its Backend.layer_kind (TensorRT,
    trtexec and ingested engines `engine layer`; ONNX Runtime and PyTorch `graph op`; torch.compile
    rows say `kernel` themselves); None for a backend this farm does not have."""
    return backend_class(backend).layer_kind if isinstance(backend, str) and backend in BACKENDS else None


def engine_libraries() -> tuple[str, ...]:
    """Every registered backend's `libraries` (what a cell's provenance records versions of)."""
    return tuple(dict.fromkeys(library for name in BACKENDS for library in backend_class(name).libraries))


def expand_option_axes(options: dict[str, Any]) -> list[dict[str, Any]]:
    """A list value makes that option another sweep axis: return every combination."""
    keys = sorted(options)
    values = [options[k] if isinstance(options[k], list) else [options[k]] for k in keys]
    for key, vals in zip(keys, values):
        if not vals:
            raise ValueError(f"{key}: empty list: give at least one value")
    return [dict(zip(keys, combo)) for combo in itertools.product(*values)]


def option_grid(name: str, raw: dict[str, Any]) -> list[dict[str, Any]]:
    """Validate a backend's options table and expand list values into combinations.

    Returns every combination as a complete, normalized dict (defaults filled in). Raises
    ValueError with `key: what is wrong` on an unknown option or a bad value.
    """
    options_model = backend_class(name).Options
    allowed = list(options_model.model_fields)
    for key in raw:
        if key not in options_model.model_fields:
            raise ValueError(f"{key}: unknown option; allowed options: {', '.join(allowed) or 'none'}")
    grid = []
    for combo in expand_option_axes(raw):
        try:
            grid.append(options_model.model_validate(combo).model_dump(mode="json"))
        except ValidationError as exc:
            first = exc.errors()[0]
            key = ".".join(str(p) for p in first["loc"])
            raise ValueError(f"{key}: {first['msg']} (got {first.get('input')!r})") from None
    return grid
