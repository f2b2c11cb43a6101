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
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from farm.backends import backend_class  # noqa: E402
from farm.backends.base import standalone_request  # noqa: E402
from farm.config import Measurement, ModelSpec  # noqa: E402
from farm.measure import run_timed, summarize  # noqa: E402
from farm.models import make_feeds, resolve_model  # noqa: E402
from farm.records import MeasurementSettings  # noqa: E402


def bare_side(backend, feeds: dict, mode: str, cuda: bool):
    """A bare query over a copy of the backend's module: (query() -> latency ms)."""
    import torch

    net = copy.deepcopy(backend.module.net)  # already in the cell's dtype, device and memory format
    host = backend._to_device(feeds[backend.input_names[0]]).cpu()
    run = torch.compile(net, mode="default", dynamic=False) if mode == "compile" else net
    if not cuda:
        x = host

        def cpu_query() -> float:
            start = time.perf_counter()
            run(x)
            return (time.perf_counter() - start) * 1e3

        cpu_query()
        return cpu_query
    host = host.pin_memory()
    x = host.to("cuda")
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        out = run(x)
    stream.synchronize()
    host_out = out.cpu().pin_memory()
    events = [torch.cuda.Event(enable_timing=True) for _ in range(4)]

    def query() -> float:
        with torch.cuda.stream(stream):
            events[0].record()
            x.copy_(host, non_blocking=True)
            events[1].record()
            y = run(x)
            events[2].record()
            host_out.copy_(y, non_blocking=True)
            events[3].record()
        events[3].synchronize()
        return events[0].elapsed_time(events[3])

    return query


def bare_round(query, warmup_s: float, queries: int) -> float:
    deadline = time.perf_counter() + warmup_s
    while time.perf_counter() < deadline:
        query()
    return statistics.median(query() for _ in range(queries))


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

    shape = [d if not d.isdigit() else int(d) for d in args.shape.split(",")]
    spec = ModelSpec.model_validate({"source": args.source, "inputs": {"input": {"shape": shape}}})
    artifact = resolve_model(spec, 0, ROOT, Path(args.cache))
    shapes = {i.name: i.concrete_shape(args.batch, artifact.dims) for i in artifact.inputs}
    feeds = make_feeds(artifact.inputs, shapes, seed=1)
    settings = MeasurementSettings(**Measurement(warmup_ms=warmup_s * 1e3, min_iterations=queries,
                                                 min_duration_ms=0, repeats=1).model_dump())
    backend = backend_class("torch")({"device": args.device, "mode": args.mode})
    reason = backend.unavailable_reason()
    if reason:
        raise SystemExit(f"torch backend unavailable: {reason}")
    with tempfile.TemporaryDirectory(prefix="farm-bench-") as tmp:
        stats = backend.build(standalone_request(artifact.path, feeds, args.precision, Path(tmp),
                                                 backend.options.model_dump()), feeds)
        if not backend.native:
            raise SystemExit(f"{args.source} did not build as a native module ({stats.transform_summary})")
        farm_query = backend.query_fn(feeds)
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
