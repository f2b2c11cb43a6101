"""Does a farm torch cell time what a bare loop times, at the same moment in the same process?

A host-bound cell (eager, or compiled at small batch) follows the CPU, and a shared machine's CPU
drifts by tens of percent within seconds, so a sweep's figure and a bare loop's taken minutes
apart disagree whoever is right. Here both run in one process on the same module and weights, in
alternating rounds, so that drift hits both alike:
  - farm: the torch backend built as a cell builds it (a PyTorch-native source: the factory's own
    nn.Module), timed by its own path: backend.query_fn -> farm.measure.run_timed -> summarize;
  - bare: a copy of that module (same layout and dtype), torch.compile'd or eager as the cell is,
    timed by the bare loop of benchmarks/torch_bare_loop.py: 4 CUDA events around H2D, forward,
    D2H on one stream (on CPU, the host clock around the forward).
Prints each side's median of round medians and farm / bare (target within 5 %).

    python3 benchmarks/torch_harness_overhead.py --device cuda --mode compile --precision fp16 --batch 1
    python3 benchmarks/torch_harness_overhead.py --quick         # a tiny CNN on CPU; the test suite runs this
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import native_vs_interpreter  # noqa: E402  (the cell's inputs and the torch backend built as a cell builds it)
import torch_bare_loop  # noqa: E402  (the bare loop's own timing: its query, warm-up and median)

from farm.measure import run_timed, summarize  # noqa: E402


def bare_side(backend, feeds: dict, mode: str, cuda: bool):
    """A bare loop over a copy of the backend's module: (warmup_s, queries) -> median latency ms,
    timed by benchmarks/torch_bare_loop.py's own functions (on CUDA on a stream of its own, made
    current for its rounds only: farm's query launches on farm's)."""
    import torch

    net = copy.deepcopy(backend.module.net)  # already in the cell's dtype, device and memory format
    host = backend._to_device(feeds[backend.input_names[0]]).cpu()
    run = torch.compile(net, mode="default", dynamic=False) if mode == "compile" else net
    if not cuda:
        run(host)
        return lambda warmup_s, queries: torch_bare_loop.time_cpu(run, host, warmup_s, 1, queries)[0]
    host = host.pin_memory()
    x = host.to("cuda")
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        out = run(x)
    stream.synchronize()
    host_out = out.cpu().pin_memory()

    def timed(warmup_s: float, queries: int) -> float:
        farm_stream = torch.cuda.current_stream()
        torch.cuda.set_stream(stream)
        try:
            return torch_bare_loop.time_cuda(run, x, host, host_out, warmup_s, 1, queries)[0]
        finally:
            torch.cuda.set_stream(farm_stream)

    return timed


def bare_round(bare, warmup_s: float, queries: int) -> float:
    """One round of the bare side `bare_side` made: its median latency in ms."""
    return bare(warmup_s, queries)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--source", default="module:torchvision.models:resnet50")
    parser.add_argument("--shape", default="batch,3,224,224", help="the input's shape; 'batch' is the batch axis")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cuda")
    parser.add_argument("--mode", choices=["eager", "compile"], default="eager")
    parser.add_argument("--precision", choices=["fp32", "tf32", "fp16", "bf16"], default="fp16")
    parser.add_argument("--rounds", type=int, default=None, help="default 9, quick 2")
    parser.add_argument("--queries", type=int, default=None, help="per round and side (default 200, quick 5)")
    parser.add_argument("--cache", default="results/.cache", help="where the export is cached")
    parser.add_argument("--quick", action="store_true", help="a tiny CNN on CPU, few queries: checks the path")
    args = parser.parse_args(argv)
    if args.quick:
        args.source, args.shape, args.device, args.precision = "module:tests.native_models:tiny_cnn", \
            "batch,3,32,32", "cpu", "fp32"
    rounds = args.rounds if args.rounds is not None else (2 if args.quick else 9)
    queries = args.queries if args.queries is not None else (5 if args.quick else 200)
    warmup_s = 0.02 if args.quick else 0.5

    import torch

    artifact, feeds, settings = native_vs_interpreter.cell_inputs(args, warmup_s * 1e3, queries)
    with tempfile.TemporaryDirectory(prefix="farm-bench-") as tmp:
        backend, farm_query, note = native_vs_interpreter.build(artifact.path, feeds, args, Path(tmp) / "farm")
        if not backend.native:
            raise SystemExit(f"{args.source} did not build as a native module ({note})")
        bare_query = bare_side(backend, feeds, args.mode, args.device == "cuda")
        print(f"{args.source}: torch {torch.__version__} {args.device} {args.mode} {args.precision} batch "
              f"{args.batch} ({backend.memory_format(backend.module)}), {rounds} rounds x {queries} queries each side"
              f"{' (quick mode)' if args.quick else ''}", flush=True)
        sides: dict[str, list[float]] = {"farm": [], "bare": []}
        for _ in range(rounds):  # alternate, so that drift hits both sides alike
            sides["farm"].append(summarize(run_timed(farm_query, settings), args.batch, settings)["latency_median_ms"])
            sides["bare"].append(bare_round(bare_query, warmup_s, queries))
        backend.close()
    farm, bare = statistics.median(sides["farm"]), statistics.median(sides["bare"])
    paired = statistics.median(f / b for f, b in zip(sides["farm"], sides["bare"]))
    for name, values in sides.items():
        print(f"  {name + ' median':16s}{statistics.median(values):10.4f} ms   rounds: "
              + " ".join(f"{v:.3f}" for v in values))
    print(f"  {'farm / bare':16s}{farm / bare:10.4f}   (median of paired rounds {paired:.4f})")
    print(json.dumps({"mode": args.mode, "precision": args.precision, "batch": args.batch, "farm_ms": farm,
                      "bare_ms": bare, "ratio": farm / bare, "paired_ratio": paired}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
