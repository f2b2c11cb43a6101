"""One module per engine (onnxruntime, pytorch, tensorrt, trtexec) behind farm.backends.base,
found by name through farm.backends.registry, which imports each only when a cell needs it."""

from farm.backends.registry import BACKENDS, backend_class, option_grid

__all__ = ["BACKENDS", "backend_class", "option_grid"]
