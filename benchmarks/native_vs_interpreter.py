"""How much does running PyTorch through farm's ONNX interpreter cost against the model's own nn.Module?

A PyTorch source (farm.models.native) is built once, seeded, and exported to ONNX, as a sweep
plans it. Then, on the torch backend's own measurement path (backend.build -> query_fn ->
farm.measure.run_timed -> summarize), in alternating rounds:
  - native: the exported file as a sweep gives it, so the backend runs the factory's nn.Module
    with the saved state_dict;
  - interpreter: a copy of the same ONNX file (no native.json beside it), so the backend runs it
    through farm.onnx_torch, as it runs any ONNX model.
Both run the same weights on the same inputs. Prints both medians and interpreter / native.

    .venv/bin/python benchmarks/native_vs_interpreter.py                      # tiny CNN, CPU, eager, batch 1
    .venv/bin/python benchmarks/native_vs_interpreter.py --source module:torchvision.models:resnet50 \\
        --shape batch,3,224,224 --device cuda --mode eager --precision fp16    # on a GPU machine
    .venv/bin/python benchmarks/native_vs_interpreter.py --quick --cache /tmp/c  # seconds; the test suite runs this

--quick runs the same code with 2 rounds of 5 queries: its figures only show that the path works.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from farm.backends import backend_class  # noqa: E402
from farm.backends.base import standalone_request  # noqa: E402
from farm.config import Measurement, ModelSpec  # noqa: E402
from farm.measure import run_timed, summarize  # noqa: E402
from farm.models import make_feeds, resolve_model  # noqa: E402
from farm.records import MeasurementSettings  # noqa: E402


def cell_inputs(args, warmup_ms: float, queries: int):
    """(the model as a sweep plans it, the cell's seeded feeds, settings of one round of `queries`)
    for `args.source` (with `args.kwargs` where given) at `args.shape` and `args.batch`."""
    shape = [d if not d.isdigit() else int(d) for d in args.shape.split(",")]
    kwargs = json.loads(getattr(args, "kwargs", "{}"))
    spec = ModelSpec.model_validate({"source": args.source, "kwargs": kwargs,
                                     "inputs": {"input": {"shape": shape}}} if not args.source.startswith(
        ("torchvision:", "module:torchvision.models:")) else {"source": args.source, "kwargs": kwargs})
    artifact = resolve_model(spec, 0, ROOT, Path(args.cache))
    shapes = {i.name: i.concrete_shape(args.batch, artifact.dims) for i in artifact.inputs}
    feeds = make_feeds(artifact.inputs, shapes, seed=1)
    settings = MeasurementSettings(**Measurement(warmup_ms=warmup_ms, min_iterations=queries, min_duration_ms=0,
                                                 repeats=1).model_dump())
    return artifact, feeds, settings


def build(path: Path, feeds, args, work: Path):
    """The torch backend built on `path` as a cell builds it; its query and its build row's note."""
    options = {"device": args.device, "mode": args.mode}
    backend = backend_class("torch")(options)
    reason = backend.unavailable_reason()
    if reason:
        raise SystemExit(f"torch backend unavailable: {reason}")
    work.mkdir()
    stats = backend.build(standalone_request(path, feeds, args.precision, work, backend.options.model_dump()), feeds)
    return backend, backend.query_fn(feeds), stats.transform_summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--source", default="module:tests.native_models:tiny_cnn")
    parser.add_argument("--kwargs", default="{}", help="the factory's keyword arguments, as JSON")
    parser.add_argument("--shape", default="batch,3,32,32", help="the input's shape; 'batch' is the batch axis")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--mode", choices=["eager", "compile", "cudagraphs"], default="eager")
    parser.add_argument("--precision", choices=["fp32", "tf32", "fp16", "bf16"], default="fp32")
    parser.add_argument("--rounds", type=int, default=None, help="default 7, quick 2")
    parser.add_argument("--queries", type=int, default=None, help="per round and side (default 300, quick 5)")
    parser.add_argument("--cache", default="results/.cache", help="where the export is cached")
    parser.add_argument("--quick", action="store_true", help="few rounds and queries: checks the path (the test suite)")
    args = parser.parse_args(argv)
    rounds = args.rounds if args.rounds is not None else (2 if args.quick else 7)
    queries = args.queries if args.queries is not None else (5 if args.quick else 300)

    import torch

    artifact, feeds, settings = cell_inputs(args, 20 if args.quick else 500, queries)
    print(f"{args.source} {args.kwargs}: torch {torch.__version__} {args.device} {args.mode} {args.precision} "
          f"batch {args.batch}, {rounds} rounds x {queries} queries each side{' (quick mode)' if args.quick else ''}",
          flush=True)
    with tempfile.TemporaryDirectory(prefix="farm-bench-") as tmp:
        work = Path(tmp)
        interpreted = work / "interpreted.onnx"  # no native.json beside it: the interpreter runs it
        shutil.copyfile(artifact.path, interpreted)
        sides = {"native module": build(artifact.path, feeds, args, work / "native"),
                 "ONNX interpreter": build(interpreted, feeds, args, work / "interpreter")}
        medians: dict[str, list[float]] = {name: [] for name in sides}
        for _ in range(rounds):  # alternate, so drift hits both sides alike
            for name, (_, query, _) in sides.items():
                medians[name].append(summarize(run_timed(query, settings), args.batch, settings)["latency_median_ms"])
        native = statistics.median(medians["native module"])
        interpreter = statistics.median(medians["ONNX interpreter"])
        for name, (backend, _, note) in sides.items():
            print(f"  {name + ' median':28s}{statistics.median(medians[name]):12.4f} ms   (build row: {note})")
            backend.close()
    print(f"  {'ratio interpreter / native':28s}{interpreter / native:12.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
