"""`[backends.torch]`: the PyTorch backend's options (docs/config.md)."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

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
    int8: Literal["dynamic", "weight_only"] = "dynamic"  # int8 cells: torchao's scheme (farm.backends.torch.quantize)
    added_later: ClassVar[frozenset[str]] = frozenset({"int8"})
    read_only_at: ClassVar[dict[str, str]] = {"int8": "int8"}


def set_cpu_threads(torch, threads: int, interop: int) -> None:
    """Intra-op threads: `threads`, or (0) the physical cores this process may use, which is what
    ONNX Runtime's intra_op_threads = 0 gives its CPU cells. Inter-op: 0 leaves PyTorch's."""
    import os

    if not threads:
        try:
            import psutil

            physical = psutil.cpu_count(logical=False) or os.cpu_count() or 1
        except ImportError:
            physical = os.cpu_count() or 1
        threads = max(1, min(physical, len(os.sched_getaffinity(0))))
    torch.set_num_threads(threads)
    if interop and interop != torch.get_num_interop_threads():
        try:
            torch.set_num_interop_threads(interop)
        except RuntimeError as exc:  # PyTorch allows it once, before any inter-op work
            raise RuntimeError(f"backends.torch.interop_threads = {interop}: this process already runs "
                               f"{torch.get_num_interop_threads()} inter-op threads ({exc})") from None
