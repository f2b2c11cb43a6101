"""`[backends.onnxruntime]`: OnnxRuntimeOptions, and the options that mean something on CUDA only."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field

from farm.backends.base import BackendOptions

# what a CUDA-only option is at its default: on a CPU cell any other value is refused
CUDA_ONLY_OPTIONS = {"provider": "default", "cudnn_conv_algo_search": "EXHAUSTIVE", "prefer_nhwc": False,
              "cuda_graph": False, "transfers": True, "trt_builder_optimization_level": 3}
_OPTIMIZATION_LEVELS = {
    "disable": "ORT_DISABLE_ALL", "basic": "ORT_ENABLE_BASIC",
    "extended": "ORT_ENABLE_EXTENDED", "all": "ORT_ENABLE_ALL",
}


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

    def session_options(self):
        """onnxruntime.SessionOptions with these options' threads, graph optimization and scheduling."""
        import onnxruntime as ort

        opts = ort.SessionOptions()
        opts.intra_op_num_threads = self.intra_op_threads
        opts.inter_op_num_threads = self.inter_op_threads
        if not self.spinning:  # threads that wait for work block instead of burning a core
            for pool in ("intra_op", "inter_op"):
                opts.add_session_config_entry(f"session.{pool}.allow_spinning", "0")
        opts.graph_optimization_level = getattr(ort.GraphOptimizationLevel, _OPTIMIZATION_LEVELS[self.graph_optimization])
        opts.execution_mode = (ort.ExecutionMode.ORT_PARALLEL if self.execution_mode == "parallel"
                               else ort.ExecutionMode.ORT_SEQUENTIAL)
        opts.log_severity_level = 3  # errors only: the NCHWc "hardware specific" warning is expected
        return opts
