"""Does what ran earlier in a process slow a host-bound loop that runs later in it?

A farm cell process is reused from cell to cell, so a cell is timed after whatever the cells before
it left behind. This runs benchmarks/torch_bare_loop.py's query (no farm code) in windows before and
after one treatment, each treatment in a fresh process, and prints the median latency before and
after and their ratio. Treatments: what a cell does besides its timed loop.

    none            nothing (the run-to-run noise of this machine)
    profiler        torch.profiler with CPU and CUDA activities (CUPTI) around 10 queries: the per-layer
                    profiling of farm's PyTorch cells and of ONNX Runtime CUDA cells' kernels
    profiler-teardown   the same with TEARDOWN_CUPTI=1 (Kineto finalizes CUPTI when the profiler stops)
    profiler-cpu    torch.profiler with the CPU activity only (no CUPTI)
    telemetry       a thread reading NVML (power, clocks) every 200 ms while the after-windows run
    objects         three million live Python objects (a long-lived process's heap for the collector)
    compile         a torch.compile (inductor) of another network, compiled and run once
    NAME-x10        a profiler treatment ten times over (ten cells' per-layer profiling)
    teardown-graphs with TEARDOWN_CUPTI=1: profile, capture and replay a CUDA graph, profile again, capture
                    again (does CUPTI's teardown and re-init survive CUDA graphs? a crash says no)

    python3 benchmarks/carryover.py                          # ResNet-50 fp16 batch 1 eager on CUDA
    python3 benchmarks/carryover.py --treatments none profiler profiler-teardown
    python3 benchmarks/carryover.py --quick --device cpu     # a tiny CNN on CPU; the test suite
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
TREATMENTS = ("none", "profiler", "profiler-teardown", "profiler-cpu", "telemetry", "objects", "compile",
              "teardown-graphs", "profiler-x10", "profiler-cpu-x10", "profiler-teardown-x10")
CPU_TREATMENTS = ("none", "profiler-cpu", "objects")


def windows(run, x, host, host_out, device: str, count: int, queries: int) -> list[float]:
    """Median latency (ms) of each of `count` windows of `queries` queries."""
    import torch_bare_loop as bare

    if device == "cuda":
        return [bare.time_cuda(run, x, host, host_out, 0.2, 1, queries)[0] for _ in range(count)]
    return [bare.time_cpu(run, x, 0.05, 1, queries)[0] for _ in range(count)]


def treat(name: str, run, x, device: str) -> object:
    """Do the treatment; return what must stay alive (a thread, objects) through the after-windows."""
    import torch

    if name.endswith("-x10"):  # ten cells' worth: does the aftereffect add up?
        for _ in range(10):
            treat(name.removesuffix("-x10"), run, x, device)
        return None
    if name == "teardown-graphs":
        import torch_bare_loop as bare

        for _ in range(2):
            treat("profiler", run, x, device)
            replay = bare.capture(run, x)
            for _ in range(10):
                replay(x)
            torch.cuda.synchronize()
        return None
    if name.startswith("profiler"):
        from torch.profiler import ProfilerActivity, profile

        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if name != "profiler-cpu" and device == "cuda"
                                               else [])
        with profile(activities=activities) as prof:
            for _ in range(10):
                run(x)
            if device == "cuda":
                torch.cuda.synchronize()
        return len(prof.events())
    if name == "objects":
        return [(i, str(i)) for i in range(3_000_000)]
    if name == "compile":
        other = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.GELU(), torch.nn.Linear(64, 8)).to(device)
        compiled = torch.compile(other)
        compiled(torch.randn(4, 64, device=device))
        return compiled
    if name == "telemetry":
        return nvml_poller()
    return None


def nvml_poller():
    import threading

    import pynvml

    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(0.2):
            pynvml.nvmlDeviceGetPowerUsage(handle)
            pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM)

    threading.Thread(target=loop, daemon=True).start()
    return stop


def one(args: argparse.Namespace) -> dict:
    """In this process: the windows before, the treatment, the windows after."""
    sys.path.insert(0, str(HERE))
    import torch
    import torch_bare_loop as bare

    torch.set_grad_enabled(False)
    torch.backends.cudnn.benchmark = True
    cuda = args.device == "cuda"
    precision = "fp16" if cuda else "fp32"
    if cuda:
        torch.cuda.set_stream(torch.cuda.Stream())
    run, x, host, host_out = bare.prepare(bare.network(args.model, args.quick), precision, 1,
                                          16 if args.quick else 224, args.device, "eager", cuda)
    before = windows(run, x, host, host_out, args.device, args.windows, args.queries)
    began = time.perf_counter()
    kept = treat(args.one, run, x, args.device)
    treated_s = time.perf_counter() - began
    after = windows(run, x, host, host_out, args.device, args.windows, args.queries)
    del kept
    return {"treatment": args.one, "before_ms": before, "after_ms": after, "treatment_s": treated_s}


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--model", default="resnet50", help="a torchvision.models name (default resnet50)")
    parser.add_argument("--treatments", nargs="+", choices=TREATMENTS, default=None,
                        help="default: all (CPU: none profiler-cpu objects)")
    parser.add_argument("--windows", type=int, default=None, help="before and after, each (default 5, quick 2)")
    parser.add_argument("--queries", type=int, default=None, help="per window (default 300, quick 10)")
    parser.add_argument("--json", default=None, help="also write the rows to this JSON file")
    parser.add_argument("--quick", action="store_true", help="a tiny CNN, few queries: checks the path")
    parser.add_argument("--one", default=None, help=argparse.SUPPRESS)  # the child: one treatment
    args = parser.parse_args(argv)
    args.windows = args.windows or (2 if args.quick else 5)
    args.queries = args.queries or (10 if args.quick else 300)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.one:
        print(json.dumps(one(args)))
        return 0
    treatments = args.treatments or (TREATMENTS if args.device == "cuda" else CPU_TREATMENTS)
    rows = []
    print(f"{args.model if not args.quick else 'tiny CNN'} batch 1 eager on {args.device}: "
          f"{args.windows} windows of {args.queries} queries before and after, each treatment in a fresh process")
    print(f"{'treatment':>18} {'before p50 ms':>14} {'after p50 ms':>13} {'after/before':>13}  windows after")
    for name in treatments:
        env = {**os.environ, **({"TEARDOWN_CUPTI": "1"} if name.startswith(("profiler-teardown", "teardown-graphs")) else {})}
        command = [sys.executable, __file__, "--one", name, "--device", args.device, "--model", args.model,
                   "--windows", str(args.windows), "--queries", str(args.queries), *(["--quick"] if args.quick else [])]
        done = subprocess.run(command, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            print(f"{name:>18}  failed (exit {done.returncode}): {(done.stderr or done.stdout).strip()[-300:]}",
                  flush=True)
            rows.append({"treatment": name, "failed": done.returncode})
            continue
        row = json.loads(done.stdout.strip().splitlines()[-1])
        before, after = statistics.median(row["before_ms"]), statistics.median(row["after_ms"])
        row["ratio"] = after / before
        rows.append(row)
        print(f"{name:>18} {before:14.3f} {after:13.3f} {row['ratio']:13.3g}  "
              f"{' '.join(f'{v:.2f}' for v in row['after_ms'])}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
