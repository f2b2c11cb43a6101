"""How much does a host-bound PyTorch eager query slow down when the machine's other CPUs are busy?

A host-bound query (ResNet-50 fp16 batch 1, eager: ~160 kernel launches whose Python and dispatch
take longer than the GPU's work) is timed in windows in one process, while the rest of the machine
is quiet, while busy processes spin on all its other CPUs (this process on one CPU of its own), and
as a CUDA graph replay (the GPU's own time, which no CPU load should move). Per window: the median
latency, the median enqueue (host time until the forward returns), CPU throttling from the cgroup
(cpu.stat) and steal time (/proc/stat). No farm code: what it shows is the machine's.

    python3 benchmarks/host_contention.py                      # CUDA, torchvision ResNet-50
    python3 benchmarks/host_contention.py --quick --device cpu # a tiny CNN on CPU; the suite
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

CONFIGS = ("quiet", "others busy", "quiet again", "graph")


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def throttled_us() -> int:
    stat = dict(line.split() for line in _read("/sys/fs/cgroup/cpu.stat").splitlines() if len(line.split()) == 2)
    return int(stat.get("throttled_usec", 0))


def steal_ticks() -> int:
    fields = (_read("/proc/stat").splitlines() or [""])[0].split()[1:]
    return int(fields[7]) if len(fields) > 7 else 0


def windows(query, sync, count: int, seconds: float) -> list[dict]:
    out = []
    for _ in range(count):
        latency, enqueue = [], []
        throttled, steal = throttled_us(), steal_ticks()
        end = time.perf_counter() + seconds
        while time.perf_counter() < end or len(latency) < 3:
            start = time.perf_counter()
            query()
            launched = time.perf_counter()
            sync()
            latency.append((time.perf_counter() - start) * 1e3)
            enqueue.append((launched - start) * 1e3)
        out.append({"latency_ms": statistics.median(latency), "enqueue_ms": statistics.median(enqueue),
                    "queries": len(latency), "throttled_ms": (throttled_us() - throttled) / 1e3,
                    "steal_ticks": steal_ticks() - steal})
    return out


def network(device: str, quick: bool):
    import torch

    if quick:
        model = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Conv2d(8, 8, 3, padding=1), torch.nn.ReLU())
                                      for _ in range(8)])
        return model.eval().to(device), torch.randn(1, 8, 16, 16, device=device)
    import torchvision

    model = torchvision.models.resnet50().eval().half().to(device).to(memory_format=torch.channels_last)
    x = torch.randn(1, 3, 224, 224, device=device).half().to(memory_format=torch.channels_last)
    return model, x


def spin(cpus: list[int]) -> list[subprocess.Popen]:
    """One busy process on each of `cpus` (pinned there)."""
    procs = []
    for cpu in cpus:
        procs.append(subprocess.Popen([sys.executable, "-c", "while True: pass"]))
        os.sched_setaffinity(procs[-1].pid, {cpu})
    return procs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--quick", action="store_true", help="a tiny CNN, short windows: the suite")
    parser.add_argument("--windows", type=int, default=None, help="per configuration (default 8; quick 2)")
    parser.add_argument("--seconds", type=float, default=None, help="per window (default 1.5; quick 0.1)")
    parser.add_argument("--json", default=None, help="also write the windows here")
    args = parser.parse_args()
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        print("host_contention: no CUDA GPU visible to PyTorch here; use --device cpu", file=sys.stderr)
        return 2
    count, seconds = args.windows or (2 if args.quick else 8), args.seconds or (0.1 if args.quick else 1.5)
    cuda = args.device == "cuda"
    torch.set_grad_enabled(False)
    torch.set_num_threads(1)  # one host thread, as a CUDA query's launch path is
    torch.backends.cudnn.benchmark = True
    model, x = network(args.device, args.quick)
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    allowed = sorted(os.sched_getaffinity(0))
    mine, others = allowed[-1], allowed[:-1]
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name(0) if cuda else 'CPU'}; {len(allowed)} CPUs "
          f"(this process on CPU {mine}); {count} windows x {seconds} s per configuration")
    for _ in range(20):
        model(x)
    sync()
    results = {}
    for config in CONFIGS:
        if config == "graph" and not cuda:
            continue
        query = lambda: model(x)  # noqa: E731 - the query each window times
        if config == "graph":
            graph, side = torch.cuda.CUDAGraph(), torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(3):
                    model(x)
            torch.cuda.current_stream().wait_stream(side)
            with torch.cuda.graph(graph):
                model(x)
            query = graph.replay
        busy = spin(others) if config == "others busy" else []
        os.sched_setaffinity(0, {mine} if busy else set(allowed))
        try:
            time.sleep(0.3 if busy else 0)
            results[config] = windows(query, sync, count, seconds)
        finally:
            for proc in busy:
                proc.kill()
                proc.wait()
            os.sched_setaffinity(0, set(allowed))
        medians = [w["latency_ms"] for w in results[config]]
        rows = results[config]
        print(f"{config:<12} window medians ms: {' '.join(f'{m:.3f}' for m in medians)}  "
              f"(median {statistics.median(medians):.3f}, enqueue {statistics.median(w['enqueue_ms'] for w in rows):.3f}, "
              f"throttled {sum(w['throttled_ms'] for w in rows):.1f} ms, steal {sum(w['steal_ticks'] for w in rows)} ticks)")
    quiet = statistics.median(w["latency_ms"] for w in results["quiet"] + results["quiet again"])
    busy = statistics.median(w["latency_ms"] for w in results["others busy"])
    print(f"others busy / quiet: {busy / quiet:.3f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"cpus": len(allowed), "windows": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
