"""Planning a sweep of PyTorch sources, their exports one at a time against several at once
(farm.models.parallel_export): the wall time of each plan, from an empty cache, and whether both
made the same files.

    python3 benchmarks/parallel_exports.py                         # transformers models, workers as farm picks
    python3 benchmarks/parallel_exports.py --torchvision resnet18 mobilenet_v3_small --workers 8
    python3 benchmarks/parallel_exports.py --quick                 # the suite: two tiny modules, 2 workers
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

ENCODER = 'inputs = { input_ids = { shape = ["batch", 128], dtype = "int64" }, ' \
          'attention_mask = { shape = ["batch", 128], dtype = "int64" } }'
DECODER = 'inputs = { input_ids = { shape = ["batch", 128], dtype = "int64" } }'
# the hand-listed corpus's transformers models (benchmarks/corpus_factories.py)
TRANSFORMERS = {"bert": ENCODER, "distilbert": ENCODER, "roberta": ENCODER, "t5_encoder": ENCODER,
                "gpt2": DECODER, "llama": DECODER}
QUICK = {f"tiny-{classes}": ('source = "module:tests.native_models:tiny_cnn"\n'
                             f'kwargs = {{ num_classes = {classes} }}\n'
                             'inputs = { x = { shape = ["batch", 3, 16, 16] } }') for classes in (3, 4)}


def models_table(args) -> dict[str, str]:
    if args.quick:
        return QUICK
    if args.torchvision:
        return {name: f'source = "torchvision:{name}"' for name in args.torchvision}
    return {name: f'source = "module:corpus_factories:{name}"\n{inputs}' for name, inputs in TRANSFORMERS.items()}


def plan(sweep: Path, cache: Path, workers: int) -> tuple[float, dict[str, str]]:
    """Seconds to plan `sweep` into the empty `cache` with `workers` export processes, and each model's sha256."""
    from farm.config import load_config
    from farm.plan import plan_sweep

    os.environ["FARM_EXPORT_WORKERS"] = str(workers)
    started = time.perf_counter()
    planned = plan_sweep(load_config(sweep), cache)
    return time.perf_counter() - started, {m.name: m.sha256 for m in planned.models}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--torchvision", nargs="*", help="torchvision models instead of the transformers ones")
    parser.add_argument("--workers", type=int, help="export processes at once (default: as farm picks for this machine)")
    parser.add_argument("--quick", action="store_true", help="two tiny modules, 2 workers: the test suite")
    args = parser.parse_args()
    from farm.models.parallel_export import export_workers

    models = models_table(args)
    workers = 2 if args.quick else args.workers or export_workers(len(models))
    with tempfile.TemporaryDirectory(prefix="farm-parallel-exports-") as work:
        work = Path(work)
        (work / "corpus_factories.py").symlink_to(ROOT / "benchmarks" / "corpus_factories.py")
        tables = "".join(f'[[models]]\nname = "{name}"\n{table}\n\n' for name, table in models.items())
        sweep = work / "exports.toml"
        sweep.write_text(f'name = "exports"\n{tables}[axes]\nbackends = ["onnxruntime"]\n')
        first = next(iter(models.values()))  # one model, another seed: the libraries imported, nothing cached
        sweep.with_name("warm.toml").write_text(f'name = "warm"\n[[models]]\n{first}\n[axes]\nbackends = '
                                                f'["onnxruntime"]\n[measurement]\nseed = 7\n')
        plan(sweep.with_name("warm.toml"), work / "warm", 1)  # this process's imports, before either is timed
        alone, files_alone = plan(sweep, work / "one-at-a-time", 1)
        together, files_together = plan(sweep, work / "side-by-side", workers)
    same = files_alone == files_together
    print(f"{len(models)} PyTorch models ({', '.join(models)}), {len(os.sched_getaffinity(0))} CPUs")
    print(f"one at a time: {alone:.1f} s;  {workers} at a time: {together:.1f} s;  ratio {alone / together:.2f}x")
    print(f"same files: {'yes' if same else 'NO'}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
