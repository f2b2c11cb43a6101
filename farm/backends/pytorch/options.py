"""`[backends.torch]`: the PyTorch backend's options (docs/config.md)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from farm.backends.base import BackendOptions


class TorchOptions(BackendOptions):
    """`[backends.torch]`: each may be a list, which makes it another sweep axis."""

    device: Literal["cuda", "cpu"] = "cuda"
    mode: Literal["eager", "compile", "cudagraphs"] = "eager"
    compile_mode: Literal["default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"] = "default"
    transfers: bool = True
    # "auto": channels_last on CUDA where the model has a 4-D convolution input, else contiguous
    memory_format: Literal["auto", "channels_last", "contiguous"] = "auto"
    cudnn_benchmark: bool = True  # fixed shapes per cell: let cuDNN time its algorithms once
    threads: Annotated[int, Field(ge=0)] = 0  # CPU intra-op threads; 0: physical cores, as ONNX Runtime's 0
    interop_threads: Annotated[int, Field(ge=0)] = 0  # CPU inter-op threads; 0: PyTorch's
