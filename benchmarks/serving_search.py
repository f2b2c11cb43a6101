"""What rate does an engine serve under a latency bound, through farm's serving batcher and MLPerf
LoadGen's Server scenario, and what does the batcher add to the engine's own query? For each max
batch: the engine's query back to back (its ceiling: no arrival process serves more), then
farm.serving.search's bisection for the highest Poisson rate whose p99 stays under --slo-ms,
--attempts times (does the found rate come out again?), with the engine's time and the batcher's
own per batch at every rate tried.

    python3 benchmarks/serving_search.py --model zoo:resnet50 --backend torch \\
        --options '{"device": "cuda", "mode": "cudagraphs"}' --precision fp16 --batches 16 32 --slo-ms 10
    python3 benchmarks/serving_search.py --quick      # a tiny CNN on ONNX Runtime CPU: the suite
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from farm.backends import backend_class  # noqa: E402
from farm.backends.base import standalone_request  # noqa: E402
from farm.models import zoo_model_path  # noqa: E402
from farm.serving.cell import back_to_back  # noqa: E402
from farm.serving.loadgen import run_scenario  # noqa: E402
from farm.serving.search import below_the_engine, highest_rate  # noqa: E402


def model_file(source: str, work: Path) -> Path:
    if source.startswith("zoo:"):
        return zoo_model_path(source[4:], work)
    return Path(source)


def input_feeds(model: Path, batch: int) -> dict[str, np.ndarray]:
    """Seeded inputs of `batch` for every input of `model` (its other dims as the file fixes them)."""
    import onnx

    graph = onnx.load(str(model), load_external_data=False).graph
    initializers = {t.name for t in graph.initializer}
    rng, feeds = np.random.default_rng(0), {}
    for value in graph.input:
        if value.name in initializers:
            continue
        dims = [d.dim_value or batch for d in value.type.tensor_type.shape.dim]
        feeds[value.name] = rng.standard_normal([batch, *dims[1:]]).astype(np.float32)
    return feeds


def searched(args: argparse.Namespace, model: Path, batch: int, logs: Path) -> list[dict]:
    feeds = input_feeds(model, batch)
    backend = backend_class(args.backend)(json.loads(args.options))
    (logs / "work").mkdir(parents=True, exist_ok=True)
    backend.build(standalone_request(model, feeds, args.precision, logs / "work"), feeds)
    rows = []
    try:
        query = backend.query_fn(feeds)
        back_to_back(query, 0, at_least=max(2, args.queries // 4))  # the warm-up
        engine_ms = back_to_back(query, 0, at_least=args.queries)
        ceiling = batch / engine_ms * 1000
        print(f"max batch {batch}: the engine's query {engine_ms:.3f} ms back to back, ceiling {ceiling:,.0f}/s",
              flush=True)
        if why := below_the_engine(args.slo_ms, engine_ms, batch):
            print(f"  {why}")
            return [{"batch": batch, "engine_ms": engine_ms, "ceiling_per_s": ceiling, "why_none": why}]
        for attempt in range(1, args.attempts + 1):
            search = highest_rate(lambda rate, a=attempt: run_scenario(
                query, batch, "server", logs / f"b{batch}-a{a}-r{rate:.0f}", max_delay_ms=args.delay_ms,
                target_qps=rate, latency_bound_ms=args.slo_ms, min_duration_ms=args.duration_ms,
                min_query_count=args.min_queries), args.slo_ms, ceiling, max_tests=args.max_tests)
            tried = [{"rate": r.target_qps, "valid": r.valid, "p99_ms": r.latency("99.00"),
                      "completed_per_s": r.samples_per_s, "engine_ms": r.engine_ms_median,
                      "batcher_ms": r.overhead_ms_median, "queue_ms_p50": r.queue_ms_p50,
                      "why_invalid": r.why_invalid} for r in search.tried]
            best = search.best
            row = {"batch": batch, "attempt": attempt, "engine_ms": engine_ms, "ceiling_per_s": ceiling,
                   "best_rate": best and best.target_qps, "best_completed_per_s": best and best.samples_per_s,
                   "best_p99_ms": best and best.latency("99.00"), "best_batch_sizes": best and best.batch_sizes,
                   "best_engine_ms": best and best.engine_ms_median, "best_batcher_ms": best and best.overhead_ms_median,
                   "tried": tried, "why_none": search.why_none}
            rows.append(row)
            for t in tried:
                print(f"  attempt {attempt}: {t['rate']:,.0f}/s {'VALID' if t['valid'] else 'INVALID'} "
                      f"p99 {t['p99_ms'] or float('nan'):.3f} ms, engine {t['engine_ms'] or float('nan'):.3f} ms, "
                      f"batcher {t['batcher_ms'] or float('nan'):.4f} ms a batch", flush=True)
            if best:
                print(f"  attempt {attempt}: {best.target_qps:,.0f} queries/s under p99 {args.slo_ms:g} ms "
                      f"(p99 {best.latency('99.00'):.3f} ms; the batcher {best.overhead_ms_median:.4f} ms a batch, "
                      f"{100 * best.overhead_ms_median / best.engine_ms_median:.1f} % of the engine's "
                      f"{best.engine_ms_median:.3f} ms)")
            else:
                print(f"  attempt {attempt}: {search.why_none}")
    finally:
        backend.close()
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="zoo:resnet50", help="zoo:NAME or an ONNX file")
    parser.add_argument("--backend", default="onnxruntime")
    parser.add_argument("--options", default="{}", help="the backend's options, as JSON")
    parser.add_argument("--precision", default="fp32")
    parser.add_argument("--batches", type=int, nargs="+", default=[8])
    parser.add_argument("--slo-ms", type=float, default=10.0, help="the p99 latency bound")
    parser.add_argument("--delay-ms", type=float, default=2.0, help="the batcher's max queue delay")
    parser.add_argument("--attempts", type=int, default=2)
    parser.add_argument("--duration-ms", type=float, default=4000, help="LoadGen's minimum duration of a test")
    parser.add_argument("--min-queries", type=int, default=1000, help="LoadGen's minimum query count of a test")
    parser.add_argument("--max-tests", type=int, default=6, help="LoadGen tests a search runs at most")
    parser.add_argument("--queries", type=int, default=200, help="queries of the back-to-back ceiling")
    parser.add_argument("--json", type=Path, help="write every attempt and rate tried here")
    parser.add_argument("--quick", action="store_true", help="a tiny CNN on ONNX Runtime CPU, short tests: the suite")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        logs = Path(scratch)
        if args.quick:
            from tests.conftest import tiny_cnn

            args.model, args.backend, args.options, args.batches = str(tiny_cnn(logs / "tiny.onnx")), "onnxruntime", \
                '{"intra_op_threads": 1}', [4]
            args.slo_ms, args.attempts, args.duration_ms, args.min_queries, args.max_tests, args.queries = \
                1000.0, 1, 300, 50, 2, 20
        model = model_file(args.model, logs)
        rows = [row for batch in args.batches for row in searched(args, model, batch, logs)]
    if args.json:
        args.json.write_text(json.dumps({"command": " ".join(sys.argv), "rows": rows}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
