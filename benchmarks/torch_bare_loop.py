"""The farm's PyTorch (CUDA) figure for a cell against a bare timing loop of the same module.

For each (precision, batch, mode): build the module through the farm's torch backend, then in
alternating rounds take
  - the farm's median latency: backend.query_fn -> measure.run_timed -> summarize
    (CUDA events: H2D + compute + D2H), and
  - a bare loop's median: host perf_counter around copy-in, forward, copy-out, synchronize,
on the same module, buffers and stream. Prints their ratio (target 0.97-1.03).

    python3 benchmarks/torch_bare_loop.py --model resnet50 --batches 1 8 32 128
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from farm.backends import backend_class
from farm.config import Measurement, ModelSpec
from farm.measure import run_timed, summarize
from farm.models import make_feeds, resolve_model


def bare_median_ms(backend, feeds, count: int) -> float:
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--precisions", nargs="+", default=["fp32", "fp16"])
    parser.add_argument("--batches", nargs="+", type=int, default=[1, 32, 128])
    parser.add_argument("--modes", nargs="+", default=["eager", "cudagraphs"])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--cache", default="results/.cache")
    args = parser.parse_args()

    import torch

    print(f"torch {torch.__version__}, {torch.cuda.get_device_name(0)}")
    artifact = resolve_model(ModelSpec(source=f"zoo:{args.model}"), 0, Path("."), Path(args.cache))
    settings = Measurement(warmup_ms=200, min_iterations=args.queries, min_duration_ms=0, repeats=1)
    print(f"{'precision':>9} {'batch':>5} {'mode':>10} {'farm p50 ms':>12} {'bare p50 ms':>12} {'ratio':>7}")
    ratios = []
    for precision in args.precisions:
        for batch in args.batches:
            for mode in args.modes:
                shapes = {i.name: i.concrete_shape(batch, artifact.dims) for i in artifact.inputs}
                feeds = make_feeds(artifact.inputs, shapes, seed=1)
                backend = backend_class("torch")({"device": "cuda", "mode": mode})
                backend.build(artifact.path, feeds, precision, Path(tempfile.mkdtemp()))
                farm, bare = [], []
                for _ in range(args.rounds):
                    samples = run_timed(backend.query_fn(feeds), settings)
                    farm.append(summarize(samples, batch, settings)["latency_median_ms"])
                    bare.append(bare_median_ms(backend, feeds, args.queries))
                f, b = statistics.median(farm), statistics.median(bare)
                ratios.append(f / b)
                print(f"{precision:>9} {batch:>5} {mode:>10} {f:12.4f} {b:12.4f} {f / b:7.4f}", flush=True)
                backend.close()
    print(f"ratio farm/bare: min {min(ratios):.4f}, median {statistics.median(ratios):.4f}, max {max(ratios):.4f}")


if __name__ == "__main__":
    main()
