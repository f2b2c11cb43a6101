"""TensorRT through its Python API (10.x and 11.x), written from the documented API
(docs/tensorrt-reference.md): TensorRT cannot be installed where farm is developed,
so this package is verified against a recording double that knows only the documented names and
against recorded real TensorRT output, and runs for real only where TensorRT and a GPU exist
(`pytest -m tensorrt`).

    options       TensorRTOptions, the precisions a strongly typed network runs, INSTALL_HINT
    engine_build  EngineFromOnnx: parser, builder options, profiles, timing and engine caches
    runner        contexts and buffers per stream, the timed query, CUDA graphs, layer profiles
    backend       TensorRTBackend
"""

from farm.backends.tensorrt.backend import TensorRTBackend
from farm.backends.tensorrt.options import INSTALL_HINT, TensorRTOptions, unsupported_precision

__all__ = ["INSTALL_HINT", "TensorRTBackend", "TensorRTOptions", "unsupported_precision"]
