"""`[backends.onnxruntime]`: OnnxRuntimeOptions, and the options that mean something on CUDA only."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field

from farm.backends.base import BackendOptions

# what a CUDA-only option is at its default: on a CPU cell any other value is refused
CUDA_ONLY_OPTIONS = {"provider": "default", "cudnn_conv_algo_search": "EXHAUSTIVE", "prefer_nhwc": False,
              "cuda_graph": False, "transfers": True, "trt_builder_optimization_level": 3}


class OnnxRuntimeOptions(BackendOptions):
    """`[backends.onnxruntime]`: each may be a list, which makes it another sweep axis."""

    # auto: cuda where the planning machine sees an NVIDIA GPU, else cpu (settled at planning)
    device: Literal["cpu", "cuda", "auto"] = "cpu"
    provider: Literal["default", "tensorrt"] = "default"
    intra_op_threads: Annotated[int, Field(ge=0)] = 0
    inter_op_threads: Annotated[int, Field(ge=0)] = 0
    spinning: bool = True
    graph_optimization: Literal["disable", "basic", "extended", "all"] = "all"
    execution_mode: Literal["sequential", "parallel"] = "sequential"
    cudnn_conv_algo_search: Literal["EXHAUSTIVE", "HEURISTIC", "DEFAULT"] = "EXHAUSTIVE"
    prefer_nhwc: bool = False
    cuda_graph: bool = False
    transfers: bool = True
    trt_builder_optimization_level: Annotated[int, Field(ge=0, le=5)] = 3

    added_later: ClassVar[frozenset[str]] = frozenset({
        "device", "provider", "cudnn_conv_algo_search", "prefer_nhwc", "cuda_graph", "transfers",
        "trt_builder_optimization_level", "spinning"})

