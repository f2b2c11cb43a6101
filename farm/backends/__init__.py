"""Backends by name, imported lazily so `farm --help` and planning never load an engine.

A backend module may import only the standard library, numpy and pydantic at top level; the
engine itself (onnxruntime, torch, tensorrt) is imported inside its methods.
"""

from __future__ import annotations

import importlib
from typing import Any

from pydantic import ValidationError

from farm.backends.base import Backend
from farm.config import expand_option_axes

# name -> "module:Class"; the module is imported only when the backend is needed.
BACKENDS: dict[str, str] = {
    "onnxruntime": "farm.backends.onnxruntime:OnnxRuntimeBackend",
    "torch": "farm.backends.pytorch:TorchBackend",
    "tensorrt": "farm.backends.tensorrt:TensorRTBackend",
    "trtexec": "farm.backends.trtexec:TrtexecBackend",
}


def backend_class(name: str) -> type[Backend]:
    """The Backend subclass registered under `name` (KeyError if none)."""
    module_name, _, class_name = BACKENDS[name].partition(":")
    return getattr(importlib.import_module(module_name), class_name)


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
