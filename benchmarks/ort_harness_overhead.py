"""Does a farm ONNX Runtime cell time what a bare loop times, at the same moment in the same process?

benchmarks/ort_bare_loop.py and a farm sweep run minutes apart; here both run in one process on the
same ONNX file and the same seeded inputs, in alternating rounds, so clocks and host drift hit all
sides alike, and each of farm's own choices can be set beside ONNX Runtime's plain setup:
  - farm: the onnxruntime backend built as a cell builds it (backend.build: its session options,
    its provider options, its bound session), timed by its own path: backend.query_fn ->
    farm.measure.run_timed -> summarize;
  - bare: benchmarks/ort_bare_loop.py's session (ONNX Runtime's documented fast setup, `use_tf32`
    as the cell sets it) and its query: 4 CUDA events around H2D, run_with_iobinding, D2H;
  - bare, optimized model saved: the same, with `optimized_model_filepath` set as farm's session
    sets it (CUDA only), to tell whether writing the optimized graph changes what runs.
Prints each side's median of round medians and its ratio to the bare side (target within 5 %).

    python3 benchmarks/ort_harness_overhead.py --model resnet50.fp16.onnx --precision fp16 --batch 128 --nhwc
    python3 benchmarks/ort_harness_overhead.py --quick         # a tiny model on CPU; the test suite runs this
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import ort_bare_loop  # noqa: E402  (the bare session, bindings and query)

from farm.backends import backend_class  # noqa: E402
from farm.backends.base import standalone_request  # noqa: E402
from farm.config import Measurement  # noqa: E402
from farm.measure import run_timed, summarize  # noqa: E402
from farm.records import MeasurementSettings  # noqa: E402


def seeded_feeds(model: Path, batch: int, seed: int) -> dict[str, np.ndarray]:
    """The inputs both sides run: standard normal (integers 0..99), at `batch` on the batch axis."""
    import onnxruntime as ort

    specs = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"]).get_inputs()
    batch_name = specs[0].shape[0] if specs[0].shape and isinstance(specs[0].shape[0], str) else None
    rng = np.random.default_rng(seed)
    feeds = {}
    for spec in specs:
        shape, dtype = ort_bare_loop.shape_of(spec.shape, batch, batch_name), ort_bare_loop.NUMPY[spec.type]
        feeds[spec.name] = (rng.standard_normal(shape) if np.issubdtype(dtype, np.floating)
                            else rng.integers(0, 100, shape)).astype(dtype)
    return feeds


def farm_side(model: Path, feeds: dict, args, work: Path):
    """The onnxruntime backend built on `model` as a cell builds it; (backend, one-round timer)."""
    options = {"device": args.device, "cuda_graph": args.graphs, "prefer_nhwc": args.nhwc}
    backend = backend_class("onnxruntime")(options)
    reason = backend.unavailable_reason()
    if reason:
        raise SystemExit(f"onnxruntime backend unavailable: {reason}")
    work.mkdir()
    backend.build(standalone_request(model, feeds, args.precision, work, backend.options.model_dump()), feeds)
    query = backend.query_fn(feeds)
    return backend, lambda settings: summarize(run_timed(query, settings), args.batch, settings)["latency_median_ms"]


def bare_side(model: Path, feeds: dict, args, save_optimized: Path | None):
    """ort_bare_loop's session on `model` with the same inputs; a one-round timer (warmup_s, queries)."""
    if args.device == "cpu":  # ort_bare_loop's own CPU loop: its inputs are seeded_feeds' for float inputs
        sess = ort_bare_loop.session(model, "cpu", None, False, False, save_optimized=save_optimized)
        return lambda warmup_s, queries: ort_bare_loop.time_cpu(sess, args.batch, args.seed, warmup_s, 1,
                                                                queries)["latency_median_ms"]
    import torch

    stream = torch.cuda.Stream()
    sess = ort_bare_loop.session(model, "cuda", int(stream.cuda_stream), args.graphs, args.nhwc,
                                 tf32=args.precision != "fp32", save_optimized=save_optimized)
    binding, inputs, outputs = ort_bare_loop.bound_cuda(sess, args.batch, args.seed)
    for (device, host), array in zip(inputs, feeds.values()):  # the very inputs farm's side runs
        host.copy_(torch.from_numpy(array))
        device.copy_(host)
    return lambda warmup_s, queries: ort_bare_loop.time_cuda(sess, binding, inputs, outputs, stream, warmup_s, 1,
                                                             queries, sync=False)["latency_median_ms"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, default=None, help="the ONNX file (required unless --quick)")
    parser.add_argument("--precision", choices=["fp32", "tf32", "fp16"], default="fp32",
                        help="the cell's precision; the file is run as it is (give farm's fp16 file for fp16)")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cuda")
    parser.add_argument("--graphs", action="store_true", help="CUDA graphs on both sides")
    parser.add_argument("--nhwc", action="store_true", help="prefer_nhwc on both sides")
    parser.add_argument("--rounds", type=int, default=None, help="default 7, quick 2")
    parser.add_argument("--queries", type=int, default=None, help="per round and side (default 200, quick 5)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--quick", action="store_true", help="a tiny model on CPU, few queries: checks the path")
    args = parser.parse_args(argv)
    if args.quick:
        args.device, args.precision, args.batch = "cpu", "fp32", 2
    rounds = args.rounds if args.rounds is not None else (2 if args.quick else 7)
    queries = args.queries if args.queries is not None else (5 if args.quick else 200)
    warmup_s = 0.02 if args.quick else 0.5
    settings = MeasurementSettings(**Measurement(warmup_ms=warmup_s * 1e3, min_iterations=queries, min_duration_ms=0,
                                                 repeats=1).model_dump())
    if args.model is None and not args.quick:
        raise SystemExit("ort_harness_overhead: --model FILE is required (or --quick)")
    import onnxruntime as ort

    if args.device == "cuda" and hasattr(ort, "preload_dlls"):
        ort.preload_dlls()
    with tempfile.TemporaryDirectory(prefix="farm-bench-") as tmp:
        model = args.model or ort_bare_loop.tiny_model(Path(tmp) / "tiny.onnx")
        feeds = seeded_feeds(model, args.batch, args.seed)
        backend, farm = farm_side(model, feeds, args, Path(tmp) / "farm")
        bare = bare_side(model, feeds, args, None)
        sides = {"farm": lambda: farm(settings), "bare": lambda: bare(warmup_s, queries)}
        if args.device == "cuda":
            saved = bare_side(model, feeds, args, Path(tmp) / "bare-optimized.onnx")
            sides["bare, optimized saved"] = lambda: saved(warmup_s, queries)
        print(f"{model.name}: onnxruntime {ort.__version__} {args.device} {args.precision} batch {args.batch}"
              f"{' graphs' if args.graphs else ''}{' nhwc' if args.nhwc else ''}, {rounds} rounds x {queries} "
              f"queries each side{' (quick mode)' if args.quick else ''}", flush=True)
        medians: dict[str, list[float]] = {name: [] for name in sides}
        for _ in range(rounds):  # alternate, so that drift hits every side alike
            for name, timed in sides.items():
                medians[name].append(timed())
        backend.close()
    result = {name: statistics.median(values) for name, values in medians.items()}
    for name, values in medians.items():
        print(f"  {name + ' median':30s}{result[name]:10.4f} ms   rounds: " + " ".join(f"{v:.3f}" for v in values))
    for name in result:
        if name != "bare":
            print(f"  {name + ' / bare':30s}{result[name] / result['bare']:10.4f}")
    print(json.dumps({"precision": args.precision, "batch": args.batch, "graphs": args.graphs, "nhwc": args.nhwc,
                      "medians_ms": result, "farm_over_bare": result["farm"] / result["bare"]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
