"""The farm's PyTorch figure for a cell against a bare timing loop of the same module.

For each (precision, batch, mode): build the module through the farm's torch backend, then in
alternating rounds take
  - the farm's median latency: backend.query_fn -> measure.run_timed -> summarize
    (on CUDA, CUDA events: H2D + compute + D2H; on CPU, host time around the forward), and
  - a bare loop's median: host perf_counter around what the farm's query does (on CUDA: copy-in,
    forward, copy-out, synchronize; on CPU: the forward),
on the same module, buffers and stream. Prints their ratio (target 0.97-1.03).

    python3 benchmarks/torch_bare_loop.py --model resnet50 --batches 1 8 32 128
    .venv/bin/python benchmarks/torch_bare_loop.py --device cpu --model resnet18 --batches 1 8
    .venv/bin/python benchmarks/torch_bare_loop.py --quick --device cpu   # seconds; the test suite runs this

--model is a zoo name or an ONNX file. --quick runs the same code on a tiny CNN with 2 rounds of
10 queries and a short warm-up: its figures only show that the path works. On --device cpu the
defaults are fp32 and eager (tf32 and CUDA graphs need CUDA; say --modes compile to add it).
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from farm.backends import backend_class  # noqa: E402
from farm.backends.base import standalone_request  # noqa: E402
from farm.config import Measurement, ModelSpec  # noqa: E402
from farm.measure import run_timed, summarize  # noqa: E402
from farm.models import make_feeds, resolve_model  # noqa: E402


def bare_median_ms(backend, feeds, count: int) -> float:
    if backend.dev.type != "cuda":
        return bare_cpu_median_ms(backend, count)
    import torch

    stream = backend.stream
    torch.cuda.set_stream(stream)
    host_in = [backend._to_device(feeds[n]).cpu().pin_memory() for n in backend.input_names]
    outs = backend.run(*backend.device_inputs)
    stream.synchronize()
    host_out = [o.cpu().pin_memory() for o in outs]
    laps = []
    clock = time.perf_counter
    for _ in range(count + 1):
        start = clock()
        for device, host in zip(backend.device_inputs, host_in):
            device.copy_(host, non_blocking=True)
        outs = backend.run(*backend.device_inputs)
        for host, out in zip(host_out, outs):
            host.copy_(out, non_blocking=True)
        stream.synchronize()
        laps.append((clock() - start) * 1e3)
    return float(np.median(laps[1:]))  # the first is not timed


def bare_cpu_median_ms(backend, count: int) -> float:
    """On CPU the farm's query is the forward on the inputs already in place: so is this loop."""
    run, inputs = backend.run, backend.device_inputs
    laps = []
    clock = time.perf_counter
    for _ in range(count + 1):
        start = clock()
        run(*inputs)
        laps.append((clock() - start) * 1e3)
    return float(np.median(laps[1:]))  # the first is not timed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--model", default=None, help="zoo name or ONNX file (default resnet50, quick a tiny CNN)")
    parser.add_argument("--precisions", nargs="+", default=None, help="default fp32 fp16 (CPU: fp32)")
    parser.add_argument("--batches", nargs="+", type=int, default=None, help="default 1 32 128 (quick: 1 4)")
    parser.add_argument("--modes", nargs="+", default=None, help="default eager cudagraphs (CPU: eager)")
    parser.add_argument("--rounds", type=int, default=None, help="default 5 (quick 2)")
    parser.add_argument("--queries", type=int, default=None, help="default 100 (quick 10)")
    parser.add_argument("--cache", default="results/.cache", help="where zoo models are generated")
    parser.add_argument("--quick", action="store_true",
                        help="a tiny model, few rounds: checks the path (the test suite)")
    args = parser.parse_args(argv)
    cuda = args.device == "cuda"
    precisions = args.precisions or (["fp32", "fp16"] if cuda else ["fp32"])
    batches = args.batches or ([1, 4] if args.quick else [1, 32, 128])
    modes = args.modes or (["eager", "cudagraphs"] if cuda else ["eager"])
    rounds = args.rounds or (2 if args.quick else 5)
    queries = args.queries or (10 if args.quick else 100)
    settings = Measurement(warmup_ms=20 if args.quick else 200, min_iterations=queries, min_duration_ms=0, repeats=1)

    import torch

    if cuda and not torch.cuda.is_available():
        print("torch_bare_loop: no CUDA GPU visible to PyTorch here; use --device cpu", file=sys.stderr)
        return 2
    where = torch.cuda.get_device_name(0) if cuda else f"CPU {platform.processor() or platform.machine()}, " \
                                                         f"{torch.get_num_threads()} threads"
    print(f"torch {torch.__version__}, {where}{' (quick mode)' if args.quick else ''}", flush=True)
    torch_backend = backend_class("torch")
    ratios = []
    with tempfile.TemporaryDirectory(prefix="farm-bench-") as tmp:
        work = Path(tmp)
        if args.model is None and args.quick:
            from tests.conftest import tiny_cnn

            source = str(tiny_cnn(work / "tiny.onnx", channels=8, spatial=16))
        else:
            model = args.model or "resnet50"
            source = model if model.endswith(".onnx") or Path(model).is_file() else f"zoo:{model}"
        artifact = resolve_model(ModelSpec(source=source), 0, Path("."), Path(args.cache))
        print(f"model {artifact.name}: {rounds} rounds x {queries} queries each side")
        print(f"{'precision':>9} {'batch':>5} {'mode':>10} {'farm p50 ms':>12} {'bare p50 ms':>12} {'ratio':>7}")
        for precision in precisions:
            for batch in batches:
                for mode in modes:
                    options = {"device": args.device, "mode": mode}
                    reason = torch_backend.unsupported_reason(precision, options)
                    if reason:
                        print(f"{precision:>9} {batch:>5} {mode:>10}  skipped: {reason}", flush=True)
                        continue
                    shapes = {i.name: i.concrete_shape(batch, artifact.dims) for i in artifact.inputs}
                    feeds = make_feeds(artifact.inputs, shapes, seed=1)
                    backend = torch_backend(options)
                    cell_dir = Path(tempfile.mkdtemp(dir=work))
                    backend.build(standalone_request(artifact.path, feeds, precision, cell_dir), feeds)
                    farm, bare = [], []
                    for _ in range(rounds):
                        samples = run_timed(backend.query_fn(feeds), settings)
                        farm.append(summarize(samples, batch, settings)["latency_median_ms"])
                        bare.append(bare_median_ms(backend, feeds, queries))
                    f, b = statistics.median(farm), statistics.median(bare)
                    ratios.append(f / b)
                    print(f"{precision:>9} {batch:>5} {mode:>10} {f:12.4f} {b:12.4f} {f / b:7.4f}", flush=True)
                    backend.close()
    if not ratios:
        print("no cell could run on this device", file=sys.stderr)
        return 1
    print(f"ratio farm/bare: min {min(ratios):.4f}, median {statistics.median(ratios):.4f}, max {max(ratios):.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
