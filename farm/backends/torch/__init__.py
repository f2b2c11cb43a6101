"""PyTorch (CUDA or CPU): the GPU baseline every TensorRT figure is compared with.

A model from a PyTorch source (farm.models.native) runs as the user's own nn.Module, built by
its factory with the weights the ONNX engines run loaded; any other ONNX file becomes a module
through farm.onnx_torch, so PyTorch runs the same weights as every other backend. Modes: eager,
torch.compile, and CUDA graphs (captured once, replayed per query). Precisions: fp32, tf32, fp16 and
bf16 by converting the module; int8 and fp8 by quantizing its Linear layers with torchao. On CUDA each query is timed as
trtexec does, by farm.device_timer: CUDA events around the H2D copy, the compute and the D2H copy
on one non-default stream, host time around the launch (enqueue), pinned host buffers.

    options          TorchOptions (`[backends.torch]`), the CPU thread count
    missing_kernels  the kernels a device or dtype lacks, said as unsupported with what to do
    quantize         int8 and fp8 through torchao: the module's Linear layers quantized
    profiler_rows    per-layer rows from PyTorch's profiler, and the interpreter's node tensors
    backend          TorchBackend
"""

from farm.backends.torch.backend import TorchBackend
from farm.backends.torch.options import TorchOptions

__all__ = ["TorchBackend", "TorchOptions"]
