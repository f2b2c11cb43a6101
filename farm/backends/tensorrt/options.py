"""`[backends.tensorrt]`: the TensorRT backend's options, and how to install TensorRT."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, field_validator

from farm.backends.base import BackendOptions
from farm.records import ENGINE_LAYER

INSTALL_HINT = ("install TensorRT 10 or 11 for your CUDA (pip install tensorrt-cu12 or tensorrt-cu13, from "
                "NVIDIA's package index) on a machine with an NVIDIA GPU")
TACTIC_SOURCES = ("CUBLAS", "CUBLAS_LT", "CUDNN", "EDGE_MASK_CONVOLUTIONS", "JIT_CONVOLUTIONS")
# What a strongly typed network runs without builder flags: fp16 and int8 come from farm's ONNX
# transforms; bf16 only through TensorRT 10's builder flag (precision_flags = true).
PRECISIONS = frozenset({"fp32", "tf32", "fp16", "int8"})


def unsupported_precision(precision: str, precision_flags: bool) -> str | None:
    """Why TensorRT (or trtexec) cannot build `precision`, or None (shared by both backends)."""
    if precision in PRECISIONS:
        return None
    if precision_flags and precision == "bf16":
        return None  # TensorRT 10 builder flag; a build error on 11, which says so
    return (f"TensorRT networks are strongly typed: {precision} must come from the ONNX file, and farm has "
            f"no {precision} transform (docs/precision.md); on TensorRT 10, precision_flags = true builds bf16")


class BuildsTensorRTEngines:
    """What the planner asks of both TensorRT backends (the Python API and trtexec): a cell takes a
    GPU, and the same precision rules hold. Listed before the Backend base, so these win."""

    layer_kind = ENGINE_LAYER
    libraries = ("tensorrt",)

    @classmethod
    def build_cost(cls, options: dict[str, Any]) -> float:
        return 6.0  # an engine build: tactic timing over the whole network

    @classmethod
    def device_kind(cls, options: dict[str, Any]) -> str:
        return "cuda"

    @classmethod
    def unsupported_reason(cls, precision: str, options: dict[str, Any]) -> str | None:
        return unsupported_precision(precision, bool(options.get("precision_flags")))


class TensorRTOptions(BackendOptions):
    """`[backends.tensorrt]`: each may be a list, which makes it another sweep axis."""

    builder_optimization_level: Annotated[int, Field(ge=0, le=5)] = 3
    workspace_mib: Annotated[int, Field(ge=1)] | None = None
    tactic_sources: str | None = None  # comma-separated, e.g. "CUBLAS_LT,JIT_CONVOLUTIONS"
    hardware_compatibility: Literal["none", "ampere_plus"] = "none"
    version_compatible: bool = False
    sparsity: bool = False
    max_aux_streams: Annotated[int, Field(ge=0)] | None = None
    avg_timing_iterations: Annotated[int, Field(ge=1)] | None = None
    precision_flags: bool = False
    profiles_in_engine: Literal["one", "all"] = "one"
    streams: Annotated[int, Field(ge=1)] = 1
    cuda_graph: bool = False
    transfers: bool = True
    timing_cache: bool = True
    engine_cache: bool = True

    @field_validator("tactic_sources")
    @classmethod
    def _known_sources(cls, value: str | None) -> str | None:
        if value is None:
            return None
        names = [n.strip() for n in value.split(",") if n.strip()]
        unknown = [n for n in names if n not in TACTIC_SOURCES]
        if unknown:
            raise ValueError(f"unknown tactic source(s) {', '.join(unknown)}; known: {', '.join(TACTIC_SOURCES)}")
        return ",".join(names)
