"""Does a cell process's history slow a later host-bound cell, and whom: farm's path or any code?

One process: torchvision ResNet-50 (native source) compiled at fp16 batch 1, timed by farm's path and
by a bare loop over a copy of the module in alternating rounds (benchmarks/torch_harness_overhead.py's
two sides); then other cells run through farm's torch backend as a cell process would run them
(build, time, close); then the same compiled cell again, both sides built afresh.

    python3 benchmarks/device/history.py [--history cudagraphs:fp16:128 eager:bf16:32 compile:bf16:128]
"""
import argparse
import gc
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch_harness_overhead as tho

from farm.backends import backend_class
from farm.backends.base import standalone_request
from farm.config import Measurement, ModelSpec
from farm.measure import run_timed, summarize
from farm.models import make_feeds, resolve_model
from farm.records import MeasurementSettings

parser = argparse.ArgumentParser()
parser.add_argument("--history", nargs="+", default=["cudagraphs:fp16:128", "eager:bf16:32", "compile:bf16:128"])
parser.add_argument("--rounds", type=int, default=5)
parser.add_argument("--queries", type=int, default=200)
args = parser.parse_args()

artifact = resolve_model(ModelSpec.model_validate({"source": "torchvision:resnet50"}), 0, Path.cwd(),
                         Path("/tmp/history-cache"))
settings = MeasurementSettings(**Measurement(warmup_ms=300, min_iterations=args.queries, min_duration_ms=0,
                                             repeats=1).model_dump())


def built(mode: str, precision: str, batch: int):
    shapes = {i.name: i.concrete_shape(batch, artifact.dims) for i in artifact.inputs}
    feeds = make_feeds(artifact.inputs, shapes, seed=1)
    backend = backend_class("torch")({"device": "cuda", "mode": mode})
    backend.build(standalone_request(artifact.path, feeds, precision, Path(tempfile.mkdtemp()),
                                     backend.options.model_dump()), feeds)
    return backend, feeds


def compare(label: str) -> None:
    backend, feeds = built("compile", "fp16", 1)
    farm_query = backend.query_fn(feeds)
    bare_query = tho.bare_side(backend, feeds, "compile", True)
    farm, bare = [], []
    for _ in range(args.rounds):
        farm.append(summarize(run_timed(farm_query, settings), 1, settings)["latency_median_ms"])
        bare.append(tho.bare_round(bare_query, 0.3, args.queries))
    backend.close()
    del bare_query
    gc.collect()
    f, b = statistics.median(farm), statistics.median(bare)
    print(f"{label:34s} farm {f:.3f} ms  bare {b:.3f} ms  farm/bare {f / b:.3f}   farm rounds "
          + " ".join(f"{v:.2f}" for v in farm) + "  bare rounds " + " ".join(f"{v:.2f}" for v in bare), flush=True)


compare("fresh process")
compare("again (one compiled cell before)")
for item in args.history:
    mode, precision, batch = item.split(":")
    start = time.perf_counter()
    backend, feeds = built(mode, precision, int(batch))
    latency = summarize(run_timed(backend.query_fn(feeds), settings), int(batch), settings)["latency_median_ms"]
    backend.close()
    del backend
    gc.collect()
    print(f"  history cell {item}: {latency:.3f} ms ({time.perf_counter() - start:.1f} s)", flush=True)
compare("after the history cells")
compare("again")
