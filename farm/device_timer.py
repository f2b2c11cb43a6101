"""The one CUDA-event timer every device backend uses to split a query as trtexec does.

Four events on one stream: before the H2D copies, after them, after the compute, after the D2H
copies; the host clock around the launch gives the enqueue time. Latency is H2D + compute + D2H
(farm.measure adds them). Waiting on a default-flag event polls, which is trtexec's --useSpinWait.

Events come from whichever CUDA API the backend already holds: the CUDA runtime through
cuda-python (`CudartEvents`, TensorRT) or PyTorch (`TorchEvents`); ONNX Runtime on CUDA can use
either. Nothing here imports a GPU library at module level.
"""

from __future__ import annotations

import time
from typing import Any, Protocol

from farm.records import PhaseTimes


class CudaEvents(Protocol):
    """The four event operations a DeviceTimer needs, on some CUDA API's events and streams."""

    def event(self) -> Any: ...

    def record(self, event: Any, stream: Any) -> None: ...

    def wait(self, event: Any) -> None: ...

    def elapsed_ms(self, start: Any, end: Any) -> float: ...


class CudartEvents:
    """CUDA runtime events (cuda-python), through farm.cuda.CudaRuntime's checked calls."""

    def __init__(self, runtime: Any) -> None:
        self.runtime = runtime

    def event(self) -> Any:
        return self.runtime.event()

    def record(self, event: Any, stream: Any) -> None:
        self.runtime.record(event, stream)

    def wait(self, event: Any) -> None:
        self.runtime.wait(event)

    def elapsed_ms(self, start: Any, end: Any) -> float:
        rt = self.runtime.rt
        return float(self.runtime.check(rt.cudaEventElapsedTime(start, end), "cudaEventElapsedTime"))


class TorchEvents:
    """PyTorch's CUDA events on torch.cuda.Stream objects (timing enabled, default flags)."""

    def __init__(self) -> None:
        import torch

        self.torch = torch

    def event(self) -> Any:
        return self.torch.cuda.Event(enable_timing=True)

    def record(self, event: Any, stream: Any) -> None:
        event.record(stream)

    def wait(self, event: Any) -> None:
        event.synchronize()

    def elapsed_ms(self, start: Any, end: Any) -> float:
        return float(start.elapsed_time(end))


class DeviceTimer:
    """Times one query's phases on `stream`. Per query: `inputs_start`, the H2D copies,
    `inputs_done`, then `enqueue(launch)`, `compute_done`, the D2H copies, `outputs_done`, and
    `phases()` (which waits for the last event). With `transfers` False the copies are left out
    and so are their phases (None); the compute is timed the same way."""

    def __init__(self, events: CudaEvents, stream: Any, transfers: bool = True) -> None:
        self.events, self.stream, self.transfers = events, stream, transfers
        self.h2d_start, self.h2d_end, self.compute_end, self.d2h_end = (events.event() for _ in range(4))
        self.enqueue_s = 0.0

    def inputs_start(self) -> None:
        self.events.record(self.h2d_start, self.stream)

    def inputs_done(self) -> None:
        self.events.record(self.h2d_end, self.stream)

    def enqueue(self, launch: Any) -> Any:
        """Call `launch()` (the asynchronous compute) with the host clock around it."""
        start = time.perf_counter()
        result = launch()
        self.enqueue_s = time.perf_counter() - start
        return result

    def compute_done(self) -> None:
        self.events.record(self.compute_end, self.stream)

    def outputs_done(self) -> None:
        self.events.record(self.d2h_end, self.stream)

    def phases(self) -> PhaseTimes:
        """Wait for the query's last event; its phases in milliseconds."""
        events = self.events
        events.wait(self.d2h_end)
        transfers = self.transfers
        return PhaseTimes(enqueue_ms=self.enqueue_s * 1e3,
                          h2d_ms=events.elapsed_ms(self.h2d_start, self.h2d_end) if transfers else None,
                          compute_ms=events.elapsed_ms(self.h2d_end, self.compute_end),
                          d2h_ms=events.elapsed_ms(self.compute_end, self.d2h_end) if transfers else None)
