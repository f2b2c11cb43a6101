"""Does `farm history` find the run where a configuration changed, and none where nothing did? Two
measured series on this machine as it is (other work beside it included), each run a sweep of its
own name into one warehouse: IDENTICAL runs of tests/conftest.py's tiny CNN on ONNX Runtime CPU (b1
and b8), and BEFORE runs of it followed by AFTER runs of the same model with a planted change (its
convolution run FACTOR times: benchmarks/plant_slowdown.py). Then farm history's change points
(Apache Otava, farm.history) of each configuration of each series.

    .venv/bin/python benchmarks/history_series.py [--identical 30] [--before 20] [--after 10] [--factor 2]
    .venv/bin/python benchmarks/history_series.py --quick   # the test suite: 6 identical, 5 + 5 stepped, short runs

Prints each configuration's series: its runs, the change points found (the run each starts at, the
mean latency before and after, the p-value), and whether the stepped series' change point is at
its first planted run and the identical series has none.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.verdicts_across_runs import MEASUREMENT, QUICK_MEASUREMENT, SWEEP, run_sweep  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--identical", type=int, default=30, help="runs of the identical series (default 30)")
    parser.add_argument("--before", type=int, default=20, help="runs before the change (default 20)")
    parser.add_argument("--after", type=int, default=10, help="runs after it (default 10)")
    parser.add_argument("--factor", type=int, default=2, help="the planted convolution's work, times (default 2)")
    parser.add_argument("--dir", type=Path, default=None, help="work folder (default: a temporary one)")
    parser.add_argument("--quick", action="store_true", help="6 identical, 5 + 5 stepped (factor 12), short runs")
    args = parser.parse_args()
    if args.quick:
        args.identical, args.before, args.after, args.factor = 6, 5, 5, 12
    if min(args.before, args.after) < 3 or args.identical < 6:
        parser.error("give 6 or more identical runs and 3 or more before and after the change (farm history's minimum)")
    from benchmarks.plant_slowdown import plant_file
    from farm.history import history
    from tests.conftest import tiny_cnn

    work = args.dir or Path(tempfile.mkdtemp(prefix="farm-history-"))
    for old in ("identical", "stepped"):
        shutil.rmtree(work / old, ignore_errors=True)
    work.mkdir(parents=True, exist_ok=True)
    tiny_cnn(work / "tiny.onnx", channels=16, spatial=16)
    plant_file(work / "tiny.onnx", work / "planted.onnx", factor=args.factor)
    measurement = QUICK_MEASUREMENT if args.quick else MEASUREMENT
    for name in ("tiny", "planted"):
        (work / f"{name}.toml").write_text(SWEEP.format(name="tiny", source=f"{name}.onnx", measurement=measurement))
    started = time.monotonic()
    for i in range(args.identical):
        run_sweep(work / "tiny.toml", f"run-{i:02d}", work / "identical")
    for i in range(args.before + args.after):
        run_sweep(work / ("tiny.toml" if i < args.before else "planted.toml"), f"run-{i:02d}", work / "stepped")
    print(f"{args.identical} identical runs, then {args.before} + {args.after} runs with the convolution run "
          f"{args.factor} times from run-{args.before:02d} (tiny CNN, ONNX Runtime CPU, b1 and b8), "
          f"in {time.monotonic() - started:.0f} s; farm history's change points:")
    right = True
    for series_name, expected in (("identical", None), ("stepped", f"run-{args.before:02d}")):
        for series in history(work / series_name, explain_layers=False):
            found = [f"at {c.sweep} {c.before_ms:.4g} -> {c.after_ms:.4g} ms ({100 * c.change:+.1f} %, p {c.pvalue:.1g})"
                     for c in series.changes]
            contended = sum(bool(p.contended) for p in series.points)
            print(f"  {series_name} {series.label}: {len(series.points)} runs ({contended} contended); "
                  + ("; ".join(found) if found else "no change point"))
            if expected is None:
                right &= not series.changes
            else:
                right &= bool(series.changes) and max(series.changes, key=lambda c: abs(c.change)).sweep == expected
    print(f"change points where they belong: {'yes' if right else 'no'}")
    if args.dir is None:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
