"""A bare PyTorch timing loop, with no farm code: the reference farm's torch cells are checked against.

It imports torch and torchvision and nothing of farm. The network is torchvision's (ResNet-50 by
default, random weights: timing does not depend on them), in channels_last on CUDA as PyTorch's
performance guide advises for CNNs, with cudnn.benchmark on; each query does what a farm torch
CUDA cell's query does, on one non-default stream:

    event 0, H2D copy of a pinned host input (same layout as the device one), event 1,
    forward (eager, torch.compile or a CUDA graph replay), event 2, D2H copy into pinned memory,
    event 3, synchronize on event 3

latency = event 0 -> 3 (farm's H2D + compute + D2H), compute = event 1 -> 2. On CPU, host time
around the forward. Medians over `--rounds` x `--queries` queries after `--warmup-s` of warm-up.

    python3 benchmarks/torch_bare_loop.py                                    # resnet50, CUDA
    python3 benchmarks/torch_bare_loop.py --precisions fp16 --batches 128 --modes cudagraphs
    python3 benchmarks/torch_bare_loop.py --json bare.json                   # also as JSON
    python3 benchmarks/torch_bare_loop.py --quick --device cpu               # a tiny CNN; the test suite

--quick runs the same code on a tiny CNN defined here (no torchvision needed) with few queries:
its figures only show that the path works. benchmarks/device/farm_vs_bare.sh sets it beside two
farm sweeps of the same cells.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

DTYPES = {"fp32": "float32", "tf32": "float32", "fp16": "float16", "bf16": "bfloat16"}


def network(name: str, quick: bool):
    import torch

    if quick:
        return torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(),
                                   torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(8, 5))
    import torchvision

    return getattr(torchvision.models, name)(weights=None)


def prepare(base, precision: str, batch: int, image: int, device: str, mode: str, channels_last: bool):
    """The model, its device input, a pinned host input and output, and the callable a query runs."""
    import copy

    import torch

    tf32 = precision == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = tf32
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    model = copy.deepcopy(base).to(device=device, dtype=getattr(torch, DTYPES[precision])).eval()
    model = model.to(memory_format=fmt)
    host = torch.randn(batch, 3, image, image, dtype=getattr(torch, DTYPES[precision])).contiguous(memory_format=fmt)
    if device == "cuda":
        host = host.pin_memory()
    x = host.to(device)
    torch._dynamo.reset()
    if mode == "cudagraphs":
        run = capture(model, x)
    else:
        run = torch.compile(model, mode="default", dynamic=False) if mode == "compile" else model
    out = run(x)
    host_out = out.cpu().pin_memory() if device == "cuda" else None
    return run, x, host, host_out


def capture(model, x):
    """One forward captured in a CUDA graph; a query replays it on the static input `x`."""
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):  # warm up outside the capture, as PyTorch's docs ask
            model(x)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = model(x)

    def replay(_x):
        graph.replay()
        return static_out

    return replay


def time_cuda(run, x, host, host_out, warmup_s: float, rounds: int, queries: int,
              quickest: bool = False) -> tuple[float, float, int]:
    import torch

    events = [torch.cuda.Event(enable_timing=True) for _ in range(4)]

    def query() -> tuple[float, float]:
        events[0].record()
        x.copy_(host, non_blocking=True)
        events[1].record()
        out = run(x)
        events[2].record()
        host_out.copy_(out, non_blocking=True)
        events[3].record()
        events[3].synchronize()
        return events[0].elapsed_time(events[3]), events[1].elapsed_time(events[2])

    deadline = time.perf_counter() + warmup_s
    while True:
        query()
        if time.perf_counter() >= deadline:
            break
    laps = []
    for _ in range(rounds):
        if quickest:
            keep_on_quickest_cpu()
        laps += [query() for _ in range(queries)]
    return statistics.median(a for a, _ in laps), statistics.median(b for _, b in laps), len(laps)


def keep_on_quickest_cpu() -> None:
    """Keep this thread on the CPU where a short Python loop runs fastest now (a virtual machine's
    vCPUs change speed one by one): what an engineer does by hand with taskset on a quiet core.
    Written here, so the reference shares no code with what it checks."""
    def loop_s() -> float:
        begin = time.perf_counter()
        for i in range(5000):
            i * i
        return time.perf_counter() - begin

    allowed = os.sched_getaffinity(0)
    timed = {}
    for cpu in sorted(allowed):
        os.sched_setaffinity(0, {cpu})
        timed[cpu] = min(loop_s() for _ in range(3))
    os.sched_setaffinity(0, {min(timed, key=timed.get)})


def time_cpu(run, x, warmup_s: float, rounds: int, queries: int) -> tuple[float, float, int]:
    deadline = time.perf_counter() + warmup_s
    while True:
        run(x)
        if time.perf_counter() >= deadline:
            break
    laps = []
    for _ in range(rounds * queries):
        start = time.perf_counter()
        run(x)
        laps.append((time.perf_counter() - start) * 1e3)
    median = statistics.median(laps)
    return median, median, len(laps)


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--model", default="resnet50", help="a torchvision.models name (default resnet50)")
    parser.add_argument("--image", type=int, default=224)
    parser.add_argument("--precisions", nargs="+", default=None, help="default fp16 bf16 (CPU: fp32)")
    parser.add_argument("--batches", nargs="+", type=int, default=None, help="default 1 32 128 (quick: 1 4)")
    parser.add_argument("--modes", nargs="+", default=None, help="default eager compile cudagraphs (CPU: eager)")
    parser.add_argument("--rounds", type=int, default=None, help="default 3 (quick 2)")
    parser.add_argument("--queries", type=int, default=None, help="per round; default 100 (quick 10)")
    parser.add_argument("--warmup-s", type=float, default=None, help="default 1 (quick 0.05)")
    parser.add_argument("--memory-format", choices=["channels_last", "contiguous"], default=None,
                        help="default channels_last on CUDA, contiguous on CPU")
    parser.add_argument("--cudnn-benchmark", choices=["on", "off"], default="on",
                        help="torch.backends.cudnn.benchmark (default on: cuDNN times its algorithms per shape)")
    parser.add_argument("--json", default=None, help="also write the rows to this JSON file")
    parser.add_argument("--quick", action="store_true", help="a tiny CNN, few queries: checks the path")
    parser.add_argument("--quickest-cpu", action="store_true",
                        help="CUDA: before each round keep the timing thread on the CPU where a short loop runs "
                             "fastest then (as farm's GPU cells are timed: farm.measure.quickest_cpu)")
    parser.add_argument("--cache", default=None, help=argparse.SUPPRESS)  # accepted for older callers
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    import torch

    cuda = args.device == "cuda"
    if cuda and not torch.cuda.is_available():
        print("torch_bare_loop: no CUDA GPU visible to PyTorch here; use --device cpu", file=sys.stderr)
        return 2
    precisions = args.precisions or (["fp16", "bf16"] if cuda else ["fp32"])
    batches = args.batches or ([1, 4] if args.quick else [1, 32, 128])
    modes = args.modes or (["eager", "compile", "cudagraphs"] if cuda else ["eager"])
    rounds, queries = args.rounds or (2 if args.quick else 3), args.queries or (10 if args.quick else 100)
    warmup_s = args.warmup_s if args.warmup_s is not None else (0.05 if args.quick else 1.0)
    channels_last = (args.memory_format or ("channels_last" if cuda else "contiguous")) == "channels_last"
    image = 16 if args.quick else args.image
    torch.set_grad_enabled(False)
    torch.backends.cudnn.benchmark = args.cudnn_benchmark == "on"
    where = torch.cuda.get_device_name(0) if cuda else f"CPU, {torch.get_num_threads()} threads"
    name = "tiny CNN" if args.quick else f"torchvision {args.model}"
    print(f"torch {torch.__version__}, {where}; {name}, {'channels_last' if channels_last else 'contiguous'}, "
          f"{rounds} x {queries} queries per cell", flush=True)
    print(f"{'precision':>9} {'batch':>5} {'mode':>10} {'latency p50':>12} {'compute p50':>12} {'queries':>7}")
    base, rows = network(args.model, args.quick), []
    stream = torch.cuda.Stream() if cuda else None
    for precision in precisions:
        for batch in batches:
            for mode in modes:
                if not cuda and (mode == "cudagraphs" or precision == "tf32"):
                    print(f"{precision:>9} {batch:>5} {mode:>10}  skipped: needs CUDA", flush=True)
                    continue
                start = time.perf_counter()
                if cuda:
                    torch.cuda.set_stream(stream)
                run, x, host, host_out = prepare(base, precision, batch, image, args.device, mode, channels_last)
                build_s = time.perf_counter() - start
                latency, compute, count = (time_cuda(run, x, host, host_out, warmup_s, rounds, queries, args.quickest_cpu)
                                           if cuda
                                           else time_cpu(run, x, warmup_s, rounds, queries))
                rows.append({"precision": precision, "batch": batch, "mode": mode, "latency_median_ms": latency,
                             "compute_median_ms": compute, "queries": count, "build_s": build_s,
                             "memory_format": "channels_last" if channels_last else "contiguous"})
                print(f"{precision:>9} {batch:>5} {mode:>10} {latency:12.4f} {compute:12.4f} {count:>7}", flush=True)
                del run, x, host, host_out
                if cuda:
                    torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"device": where, "torch": torch.__version__, "model": name, "rows": rows}, handle, indent=1)
    return 0 if rows else 1


if __name__ == "__main__":
    sys.exit(main())
