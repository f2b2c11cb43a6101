"""Is a host-bound torch figure's drift the engine's or the machine's? (issue 15, item 3)

On one GPU, in rounds: a pure-Python loop's time (the CPU's speed as Python sees it), the
kernel-launch rate of an empty CUDA op loop, and a bare eager torchvision ResNet-50 query's median
(host-bound at batch 1), with the CPU steal time of each round (/proc/stat). Phases: as is, pinned
to one core (sched_setaffinity), and with the garbage collector off. If the Python loop and the
ResNet-50 median move together, the host's speed moves, whatever runs on it. Last, farm's own
module (farm.onnx_torch over the zoo's ResNet-50, loaded without the rest of farm) and the
torchvision one in alternating queries: their ratio, free of the host's drift.

    python3 benchmarks/device/host_noise.py [--rounds 12]
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import time


def steal() -> int:
    with open("/proc/stat") as handle:
        fields = handle.readline().split()
    return int(fields[8]) if len(fields) > 8 else 0


def python_loop_ms() -> float:
    start = time.perf_counter()
    total = 0
    for i in range(300_000):
        total += i
    return (time.perf_counter() - start) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--queries", type=int, default=40)
    args = parser.parse_args()
    import torch
    import torchvision

    torch.backends.cudnn.benchmark = True
    torch.set_grad_enabled(False)
    model = torchvision.models.resnet50(weights=None).cuda().half().eval().to(memory_format=torch.channels_last)
    x = torch.randn(1, 3, 224, 224, device="cuda", dtype=torch.half).contiguous(memory_format=torch.channels_last)
    small = torch.zeros(16, device="cuda")
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(20):
        model(x)
    torch.cuda.synchronize()
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")), "?")
    print(f"{cpu}; {os.cpu_count()} cpus; load {os.getloadavg()}; {torch.cuda.get_device_name(0)}")

    def query_ms() -> float:
        start.record()
        model(x)
        end.record()
        end.synchronize()
        return start.elapsed_time(end)

    def launches_us() -> float:
        torch.cuda.synchronize()
        begin = time.perf_counter()
        for _ in range(2000):
            small.add_(1)
        elapsed = time.perf_counter() - begin
        torch.cuda.synchronize()
        return elapsed / 2000 * 1e6

    phases = [("as is", None, True), ("pinned to cpu 3", {3}, True), ("gc off", None, False)]
    every = os.sched_getaffinity(0)
    print(f"{'phase':<16} {'round':>5} {'python ms':>10} {'launch us':>10} {'resnet50 b1 ms':>15} {'steal ticks':>11}")
    for name, cpus, collect in phases:
        os.sched_setaffinity(0, cpus or every)
        (gc.enable if collect else gc.disable)()
        rows = []
        for r in range(args.rounds):
            s0 = steal()
            py, launch = python_loop_ms(), launches_us()
            median = statistics.median(query_ms() for _ in range(args.queries))
            rows.append((py, launch, median, steal() - s0))
            print(f"{name:<16} {r:>5} {py:10.2f} {launch:10.2f} {median:15.3f} {rows[-1][3]:>11}", flush=True)
        cols = list(zip(*rows))
        spread = [100 * (max(c) - min(c)) / min(c) for c in cols[:3]]
        print(f"{name:<16} spread (max-min)/min: python {spread[0]:.1f} %, launch {spread[1]:.1f} %, "
              f"resnet50 {spread[2]:.1f} %; corr(python, resnet50) "
              f"{statistics.correlation(cols[0], cols[2]):.2f}; corr(launch, resnet50) "
              f"{statistics.correlation(cols[1], cols[2]):.2f}", flush=True)
    gc.enable()
    os.sched_setaffinity(0, every)
    interleaved(model, x, args)


def farm_module():
    """farm.onnx_torch's module of the zoo's ResNet-50 (zoo.py loaded alone: it needs only onnx)."""
    import importlib.util
    import sys

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    sys.path.insert(0, root)
    spec = importlib.util.spec_from_file_location("farm_zoo", os.path.join(root, "farm", "models", "zoo.py"))
    zoo = importlib.util.module_from_spec(spec)
    sys.modules["farm_zoo"] = zoo  # dataclasses look their module up
    spec.loader.exec_module(zoo)
    from farm.onnx_torch import build_module

    return build_module(zoo.make_resnet(50))


def interleaved(model, x, args) -> None:
    import torch

    farm = farm_module().cuda().half().eval().to(memory_format=torch.channels_last)
    for _ in range(20):
        farm(x)
    ratios = []
    print(f"{'round':>5} {'farm module ms':>15} {'torchvision ms':>15} {'ratio':>7}")
    for r in range(args.rounds):
        pairs = []
        for _ in range(args.queries):
            pairs.append((_time(farm, x), _time(model, x)))
        f, b = statistics.median(p[0] for p in pairs), statistics.median(p[1] for p in pairs)
        ratios.append(f / b)
        print(f"{r:>5} {f:15.3f} {b:15.3f} {f / b:7.3f}", flush=True)
    print(f"farm module / torchvision, eager fp16 b1: median {statistics.median(ratios):.3f}, "
          f"min {min(ratios):.3f}, max {max(ratios):.3f}")


def _time(module, x) -> float:
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    module(x)
    end.record()
    end.synchronize()
    return start.elapsed_time(end)


if __name__ == "__main__":
    main()
