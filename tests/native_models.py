"""PyTorch factories for tests/test_native_sources.py and benchmarks/native_vs_interpreter.py:
`module:tests.native_models:FACTORY` sources, importable by the planner and by cell processes."""

from __future__ import annotations

import torch
from torch import nn


class TinyCnn(nn.Module):
    """Conv-BN-ReLU twice, pooled, then a linear classifier: a small ResNet-like stem."""

    def __init__(self, channels: int = 8, num_classes: int = 10) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, channels, 3, padding=1, bias=False), nn.BatchNorm2d(channels), nn.ReLU(),
            nn.Conv2d(channels, channels, 3, padding=1, stride=2, bias=False), nn.BatchNorm2d(channels), nn.ReLU())
        self.head = nn.Linear(channels, num_classes)
        with torch.no_grad():  # running statistics away from 0/1, so that loading them matters
            for module in self.modules():
                if isinstance(module, nn.BatchNorm2d):
                    module.running_mean.uniform_(-0.1, 0.1)
                    module.running_var.uniform_(0.5, 1.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x).mean(dim=(2, 3)))


def tiny_cnn(channels: int = 8, num_classes: int = 10) -> nn.Module:
    return TinyCnn(channels, num_classes)


def two_outputs(width: int = 16) -> nn.Module:
    """A module returning a tuple: both outputs become ONNX outputs, in order."""

    class TwoHeads(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.body = nn.Linear(width, width)

        def forward(self, x: torch.Tensor):
            y = self.body(x)
            return y, torch.relu(y).sum(dim=1, keepdim=True)

    return TwoHeads()


def broken() -> nn.Module:
    raise RuntimeError("this factory always fails")


def not_a_module() -> int:
    return 3


def not_exportable(width: int = 16) -> nn.Module:
    """Runs in PyTorch, exported by no exporter: forward() calls out to numpy, which neither
    torch.export nor TorchScript's tracer can follow into ONNX."""

    class ThroughNumpy(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.body = nn.Linear(width, width)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if torch.onnx.is_in_onnx_export() or torch.compiler.is_compiling():
                raise RuntimeError("this module cannot be exported")
            return self.body(x)

    return ThroughNumpy()


def aborts_in_cell_process(stage: str = "measuring", width: int = 16) -> nn.Module:
    """A module that prints an engine-like message and aborts inside a farm cell process (never in
    the planner that exports it): while measuring, or only under the profiler (per-layer profiling,
    after the cell's figures are taken)."""
    import os
    import sys

    class Aborts(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.body = nn.Linear(width, width)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            in_cell = "cell_process" in sys.argv[0] and not torch.onnx.is_in_onnx_export()
            if in_cell and (stage == "measuring" or torch.autograd._profiler_enabled()):
                os.write(2, b"CUDA failure 800: operation not permitted ; GPU=0 ; file=cuda_allocator.cc ; "
                            b"expr=cudaFreeHost(p);\n")
                os.abort()
            return self.body(x)

    return Aborts()


def exits() -> nn.Module:
    """A factory that ends its process (a script's main() given as a factory)."""
    import sys

    sys.exit(3)


def says_too_much() -> nn.Module:
    """A factory that raises with a message of 100,000 characters on one line."""
    raise RuntimeError("x" * 100_000)


def exits_hard() -> nn.Module:
    """A factory that ends its process without unwinding (os._exit: no exception to catch)."""
    import os

    os._exit(0)


def kills_its_process() -> nn.Module:
    """A factory whose process is killed (SIGKILL: the kernel's out-of-memory killer does the same)."""
    import os
    import signal
    import sys

    print("building the model that is killed", file=sys.stderr, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
    raise AssertionError("unreachable")


def hangs_in_forward() -> nn.Module:
    """A module whose forward() never returns on the example inputs."""
    import threading

    class Waits(nn.Module):
        def forward(self, x):
            threading.Event().wait()
            return x

    return Waits()


def hangs() -> nn.Module:
    """A factory that never returns (a download or a lock that waits forever)."""
    import threading

    threading.Event().wait()
    raise AssertionError("unreachable")
