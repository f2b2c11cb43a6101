"""How much does the farm's timing harness add to what it measures?

In one run, on one ONNX Runtime session and one set of inputs, alternate rounds of
  - the farm's own path for a cell: backend.query_fn -> measure.run_timed -> measure.summarize
  - a bare loop: `session.run(None, feeds)` timed with perf_counter, nothing else
and compare the median latencies. Prints the ratio farm/bare (target <= 1.03) and the
per-query overhead in microseconds, for a zoo model (the ratio that matters) and a tiny model
(where a fixed per-query cost would show most).

    .venv/bin/python benchmarks/harness_overhead.py [--model resnet18] [--rounds 7]
    .venv/bin/python benchmarks/harness_overhead.py --quick --cache /tmp/zoo   # seconds; the test suite runs this

--quick runs the same code with 2 rounds of 5 queries (100 on the tiny model) and a short
warm-up: its figures only show that the path works, not what the harness costs.
"""

from __future__ import annotations

import argparse
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


def bare_loop(session, feeds, count: int) -> tuple[list[float], float]:
    """Per-query latencies (ms) of a plain session.run loop, and its mean over the whole loop."""
    clock = time.perf_counter
    session.run(None, feeds)  # never time the first call
    laps = []
    begin = clock()
    for _ in range(count):
        start = clock()
        session.run(None, feeds)
        laps.append((clock() - start) * 1e3)
    return laps, (clock() - begin) * 1e3 / count


def compare(name: str, model_path: Path, spec_inputs, shapes, rounds: int, queries: int, warmup_ms: float,
            work: Path) -> None:
    backend = backend_class("onnxruntime")({})
    feeds = make_feeds(spec_inputs, shapes, seed=1)
    backend.build(standalone_request(model_path, feeds, "fp32", work), feeds)
    query = backend.query_fn(feeds)
    settings = Measurement(warmup_ms=warmup_ms, min_iterations=queries, min_duration_ms=0, repeats=1)

    farm_medians, bare_medians, farm_means, bare_means = [], [], [], []
    for _ in range(rounds):  # alternate, so drift hits both sides alike
        samples = run_timed(query, settings)
        row = summarize(samples, 1, settings)
        farm_medians.append(row["latency_median_ms"])
        farm_means.append(samples.walltime_ms / len(samples))
        laps, loop_mean = bare_loop(backend.session, feeds, queries)
        bare_medians.append(float(np.median(laps)))
        bare_means.append(loop_mean)
    farm_median, bare_median = statistics.median(farm_medians), statistics.median(bare_medians)
    # Paired by round (each farm loop against the bare loop right after it), so slow drift cancels.
    overhead_us = statistics.median(f - b for f, b in zip(farm_means, bare_means)) * 1e3
    print(f"{name}: {rounds} rounds x {queries} queries each side")
    print(f"  farm median latency      {farm_median:10.4f} ms")
    print(f"  bare session.run median  {bare_median:10.4f} ms")
    print(f"  ratio farm / bare        {farm_median / bare_median:10.4f}   (target <= 1.03)")
    print(f"  per-query overhead       {overhead_us:10.2f} us  (median over rounds of the paired difference of loop means)")
    backend.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="resnet18", help="zoo model for the main comparison")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=None, help="default 7, quick 2")
    parser.add_argument("--queries", type=int, default=None,
                        help="per round and side on the zoo model, 20 times that on the tiny one "
                             "(default 200, quick 5)")
    parser.add_argument("--cache", default="results/.cache", help="where zoo models are generated")
    parser.add_argument("--quick", action="store_true", help="few rounds and queries: checks the path (the test suite)")
    args = parser.parse_args(argv)
    rounds = args.rounds if args.rounds is not None else (2 if args.quick else 7)
    queries = args.queries if args.queries is not None else (5 if args.quick else 200)
    warmup_ms = 20 if args.quick else 200

    import onnxruntime

    from tests.conftest import tiny_cnn

    print(f"onnxruntime {onnxruntime.__version__}, CPU execution provider{' (quick mode)' if args.quick else ''}",
          flush=True)
    with tempfile.TemporaryDirectory(prefix="farm-bench-") as tmp:
        work = Path(tmp)
        artifact = resolve_model(ModelSpec(source=f"zoo:{args.model}"), 0, Path("."), Path(args.cache))
        shapes = {i.name: i.concrete_shape(args.batch, artifact.dims) for i in artifact.inputs}
        (work / "zoo").mkdir()
        compare(f"zoo:{args.model} batch {args.batch}", artifact.path, artifact.inputs, shapes, rounds, queries,
                warmup_ms, work / "zoo")

        tiny = tiny_cnn(work / "tiny.onnx")
        tiny_artifact = resolve_model(ModelSpec(source=str(tiny)), 0, Path("."), Path(args.cache))
        tiny_shapes = {i.name: i.concrete_shape(1, tiny_artifact.dims) for i in tiny_artifact.inputs}
        (work / "tiny").mkdir()
        compare("tiny CNN (per-query cost made visible)", tiny, tiny_artifact.inputs, tiny_shapes, rounds,
                queries * 20, warmup_ms, work / "tiny")
    return 0


if __name__ == "__main__":
    sys.exit(main())
