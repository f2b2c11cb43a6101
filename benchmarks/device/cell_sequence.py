"""Run a sweep's cells through farm.cell_runner.run_cell in this one process, in the order the Ray
executor gives them (farm.executor.costs), printing each; then compile fp16 batch 1 by farm's path
beside a bare loop, interleaved (benchmarks/torch_harness_overhead.py's sides). No warehouse, no
display, no Ray: what a cell process does, alone.

    python3 benchmarks/device/cell_sequence.py benchmarks/device/torch-repro.toml
"""
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch_harness_overhead as tho

from farm.backends import backend_class
from farm.cell_runner import build_request, run_cell, warm_up
from farm.config import Measurement, load_config
from farm.executor.costs import expected_seconds
from farm.measure import run_timed, summarize
from farm.models import make_feeds
from farm.plan import plan_sweep
from farm.records import MeasurementSettings

cache = Path("/tmp/sequence-cache")
plan = plan_sweep(load_config(sys.argv[1]), cache)
expected = expected_seconds(plan.cells, {})
order = sorted(plan.cells, key=lambda c: -expected.get(c.cell_id, 0.0))
warm_up("cuda")
for cell in order:
    result = run_cell(cell, cache)
    m = result.measurement or {}
    print(f"{cell.label:60s} {result.status:8s} p50 {m.get('latency_median_ms', float('nan')):.3f} ms", flush=True)

compile_b1 = next(c for c in plan.cells if c.batch == 1 and c.options.get("mode") == "compile" and c.precision == "fp16")

backend = backend_class("torch")(compile_b1.options)
feeds = make_feeds(compile_b1.model.inputs, compile_b1.input_shapes, 1)
backend.build(build_request(compile_b1, compile_b1.model.path, Path(tempfile.mkdtemp()), cache), feeds)
farm_query, bare_query = backend.query_fn(feeds), tho.bare_side(backend, feeds, "compile", True)
farm, bare = [], []
short = MeasurementSettings(**Measurement(warmup_ms=300, min_iterations=200, min_duration_ms=0, repeats=1).model_dump())
for _ in range(5):
    farm.append(summarize(run_timed(farm_query, short), 1, short)["latency_median_ms"])
    bare.append(tho.bare_round(bare_query, 0.3, 200))
print(f"after the sequence, compile fp16 b1: farm {statistics.median(farm):.3f} ms, bare {statistics.median(bare):.3f} ms")
