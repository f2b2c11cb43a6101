"""Do identical runs come out "no change"? The same sweep file run RUNS times into one warehouse,
each run a sweep of its own name (farm sweep --sweep run-NN), on this machine as it is (other work
beside it included); then every pair of consecutive runs compared as `farm compare` does, twice:
from the two runs' samples alone, and with the run-to-run spread the warehouse's history gives
(farm.compare.between). Every pair is of identical code and model: any "slower" or "faster" is a
false change.

    .venv/bin/python benchmarks/verdicts_across_runs.py [--runs 12] [--dir /tmp/farm-verdicts]
    .venv/bin/python benchmarks/verdicts_across_runs.py --quick   # the test suite: 5 runs

Prints the verdicts of each way per pair kind, and the false-change rate.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import io
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SWEEP = """name = "same"
[[models]]
name = "tiny"
source = "tiny.onnx"
[axes]
precisions = ["fp32"]
batch_sizes = [1, 8]
[measurement]
warmup_ms = 50
min_iterations = 50
min_duration_ms = 300
repeats = 5
layer_iterations = 10
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=12)
    parser.add_argument("--dir", type=Path, default=None, help="work folder (default: a temporary one)")
    parser.add_argument("--quick", action="store_true", help="5 runs: the suite's check that it runs")
    args = parser.parse_args()
    runs = 5 if args.quick else args.runs
    work = args.dir or Path(tempfile.mkdtemp(prefix="farm-verdicts-"))
    shutil.rmtree(work / "results", ignore_errors=True)
    work.mkdir(parents=True, exist_ok=True)
    from farm.cli import main as farm
    from farm.compare import compare_sweeps
    from farm.compare.stats import effect_interval
    from tests.conftest import tiny_cnn

    tiny_cnn(work / "tiny.onnx", channels=16, spatial=16)
    (work / "same.toml").write_text(SWEEP)
    results = work / "results"
    started = time.monotonic()
    for run in range(runs):
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed):  # each sweep's own table
            code = farm(["sweep", str(work / "same.toml"), "--sweep", f"run-{run:02d}", "--results", str(results),
                         "--executor", "local"])
        if code != 0:
            print(f"run {run} did not end ok:\n{printed.getvalue()[-2000:]}", file=sys.stderr)
            return 1
    measured_s = time.monotonic() - started
    alone, history = collections.Counter(), collections.Counter()
    for run in range(1, runs):
        comparison = compare_sweeps(f"run-{run - 1:02d}", f"run-{run:02d}", results)
        for pair in comparison.pairs:
            history[pair.verdict] += 1
            alone[effect_interval(pair.base, pair.new, comparison.min_effect_percent).verdict] += 1
    pairs = sum(history.values())
    print(f"{runs} identical runs of 2 cells (tiny CNN, ONNX Runtime CPU, b1 and b8) in {measured_s:.0f} s; "
          f"{pairs} pairs of consecutive runs, each compared as farm compare does:")
    for name, counts in (("from the two runs' samples alone", alone), ("with the warehouse's run-to-run spread", history)):
        changed = counts["slower"] + counts["faster"]
        shown = ", ".join(f"{verdict} {n}" for verdict, n in sorted(counts.items()))
        print(f"  {name}: {shown}; false changes {changed} of {pairs} ({100 * changed / max(pairs, 1):.0f} %)")
    if args.dir is None:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
