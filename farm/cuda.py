"""The few CUDA runtime calls the TensorRT backend needs, through cuda-python
(`cuda.bindings.runtime`, 12.6.1+), each checked: every call returns (err, *out). Event timing
(elapsed time between events) is farm.device_timer's.
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path
from typing import Any

import numpy as np


class CudaError(RuntimeError):
    pass


def visible_gpu_count(driver_dir: Path = Path("/proc/driver/nvidia/gpus")) -> int:
    """NVIDIA GPUs this process would see, without loading CUDA or any framework (planning calls
    it for `device = "auto"`): the driver's list (/proc/driver/nvidia/gpus, Linux), narrowed by
    CUDA_VISIBLE_DEVICES as CUDA narrows it. 0 where there is no NVIDIA driver."""
    try:
        present = sum(1 for _ in driver_dir.iterdir()) if driver_dir.is_dir() else 0
    except OSError:
        present = 0
    chosen = os.environ.get("CUDA_VISIBLE_DEVICES")
    if chosen is None:
        return present
    entries = [e.strip() for e in chosen.split(",") if e.strip()]
    count = 0
    for entry in entries:  # CUDA stops at the first invalid entry
        if entry.lstrip("-").isdigit() and not 0 <= int(entry) < present:
            break
        count += 1
    return min(count, present)


class CudaRuntime:
    """Checked wrappers over cudart; memory handles are plain ints."""

    def __init__(self) -> None:
        from cuda.bindings import runtime as cudart

        self.rt = cudart

    def check(self, result: Any, what: str) -> Any:
        err, *out = result if isinstance(result, tuple) else (result,)
        if err != self.rt.cudaError_t.cudaSuccess:
            raise CudaError(f"{what} failed: {err}")
        return out[0] if len(out) == 1 else (tuple(out) if out else None)

    def device_count(self) -> int:
        return int(self.check(self.rt.cudaGetDeviceCount(), "cudaGetDeviceCount"))

    def properties(self, device: int = 0) -> Any:
        return self.check(self.rt.cudaGetDeviceProperties(device), "cudaGetDeviceProperties")

    def malloc(self, nbytes: int) -> int:
        return int(self.check(self.rt.cudaMalloc(max(nbytes, 1)), "cudaMalloc"))

    def malloc_host(self, nbytes: int) -> int:
        """Pinned host memory (pageable memory would make cudaMemcpyAsync synchronous)."""
        return int(self.check(self.rt.cudaMallocHost(max(nbytes, 1)), "cudaMallocHost"))

    def free(self, pointer: int) -> None:
        self.check(self.rt.cudaFree(pointer), "cudaFree")

    def free_host(self, pointer: int) -> None:
        self.check(self.rt.cudaFreeHost(pointer), "cudaFreeHost")

    def host_array(self, pointer: int, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        """A numpy view of pinned host memory."""
        nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
        buffer = (ctypes.c_byte * max(nbytes, 1)).from_address(pointer)
        return np.frombuffer(buffer, dtype=dtype, count=int(np.prod(shape))).reshape(shape)

    def stream(self) -> int:
        return int(self.check(self.rt.cudaStreamCreate(), "cudaStreamCreate"))

    def event(self) -> Any:
        return self.check(self.rt.cudaEventCreate(), "cudaEventCreate")

    def record(self, event: Any, stream: int) -> None:
        self.check(self.rt.cudaEventRecord(event, stream), "cudaEventRecord")

    def wait(self, event: Any) -> None:
        self.check(self.rt.cudaEventSynchronize(event), "cudaEventSynchronize")

    def copy_h2d(self, device: int, host: int, nbytes: int, stream: int) -> None:
        kind = self.rt.cudaMemcpyKind.cudaMemcpyHostToDevice
        self.check(self.rt.cudaMemcpyAsync(device, host, nbytes, kind, stream), "cudaMemcpyAsync (H2D)")

    def copy_d2h(self, host: int, device: int, nbytes: int, stream: int) -> None:
        kind = self.rt.cudaMemcpyKind.cudaMemcpyDeviceToHost
        self.check(self.rt.cudaMemcpyAsync(host, device, nbytes, kind, stream), "cudaMemcpyAsync (D2H)")

    def begin_capture(self, stream: int) -> None:
        mode = self.rt.cudaStreamCaptureMode.cudaStreamCaptureModeThreadLocal
        self.check(self.rt.cudaStreamBeginCapture(stream, mode), "cudaStreamBeginCapture")

    def end_capture(self, stream: int) -> Any:
        return self.check(self.rt.cudaStreamEndCapture(stream), "cudaStreamEndCapture")

    def instantiate(self, graph: Any) -> Any:
        return self.check(self.rt.cudaGraphInstantiate(graph, 0), "cudaGraphInstantiate")

    def launch(self, graph_exec: Any, stream: int) -> None:
        self.check(self.rt.cudaGraphLaunch(graph_exec, stream), "cudaGraphLaunch")

    def clear_error(self) -> None:
        self.rt.cudaGetLastError()

