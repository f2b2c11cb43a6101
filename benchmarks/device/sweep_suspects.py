"""What in a sweep slows a host-bound torch cell that farm's own timing path alone does not?

One process, torchvision ResNet-50 built by farm's torch backend (native source), timed by
farm.measure.run_timed in alternating rounds under each condition:
  plain      - the timing path alone (what benchmarks/torch_harness_overhead.py measures)
  telemetry  - farm.telemetry's NVML window open around the round, as a cell's
  progress   - a rich Progress running (the sweep's display; console to a file, as on the device)
  both       - telemetry and progress
Prints each condition's median of round medians and its ratio to plain.

    python3 benchmarks/device/sweep_suspects.py [--mode compile] [--batch 1] [--rounds 7]
"""
import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from farm.backends import backend_class
from farm.backends.base import standalone_request
from farm.config import Measurement, ModelSpec
from farm.measure import run_timed, summarize
from farm.models import make_feeds, resolve_model
from farm.records import MeasurementSettings
from farm.telemetry import cell_window

parser = argparse.ArgumentParser()
parser.add_argument("--mode", default="compile")
parser.add_argument("--batch", type=int, default=1)
parser.add_argument("--precision", default="fp16")
parser.add_argument("--rounds", type=int, default=7)
parser.add_argument("--queries", type=int, default=200)
parser.add_argument("--cache", default="/tmp/suspects-cache")
args = parser.parse_args()

from rich.console import Console  # noqa: E402
from rich.progress import Progress  # noqa: E402

spec = ModelSpec.model_validate({"source": "torchvision:resnet50"})
artifact = resolve_model(spec, 0, Path.cwd(), Path(args.cache))
shapes = {i.name: i.concrete_shape(args.batch, artifact.dims) for i in artifact.inputs}
feeds = make_feeds(artifact.inputs, shapes, seed=1)
settings = MeasurementSettings(**Measurement(warmup_ms=300, min_iterations=args.queries, min_duration_ms=0,
                                             repeats=1).model_dump())
backend = backend_class("torch")({"device": "cuda", "mode": args.mode})
tmp = tempfile.mkdtemp()
backend.build(standalone_request(artifact.path, feeds, args.precision, Path(tmp), backend.options.model_dump()), feeds)
query = backend.query_fn(feeds)
sink = open(Path(tmp) / "progress.txt", "w")


def one_round(telemetry: bool, progress: bool) -> float:
    window = cell_window("cuda", True, None)[0] if telemetry else None
    display = None
    if progress:
        display = Progress(console=Console(file=sink), transient=True)
        display.start()
        display.add_task("cell", total=10)
    try:
        return summarize(run_timed(query, settings, window), args.batch, settings)["latency_median_ms"]
    finally:
        if display is not None:
            display.stop()
        if window is not None:
            window.close()


conditions = {"plain": (False, False), "telemetry": (True, False), "progress": (False, True), "both": (True, True)}
medians = {name: [] for name in conditions}
for _ in range(args.rounds):
    for name, (telemetry, progress) in conditions.items():
        medians[name].append(one_round(telemetry, progress))
plain = statistics.median(medians["plain"])
print(f"torchvision resnet50 {args.mode} {args.precision} b{args.batch}, {args.rounds} rounds x {args.queries} queries")
for name, values in medians.items():
    m = statistics.median(values)
    print(f"  {name:10s} {m:8.4f} ms  x{m / plain:6.3f}   rounds " + " ".join(f"{v:.3f}" for v in values))
