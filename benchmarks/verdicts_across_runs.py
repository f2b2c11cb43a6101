"""Do identical runs come out "no change", and is a planted change found? A sweep file run RUNS
times into one warehouse, each run a sweep of its own name (farm sweep --sweep run-NN), on this
machine as it is (other work beside it included); with --planted (or --plant), a run of the same
sweep with a planted change after each, each in a warehouse of its own, as a new run compared
against a warehouse's history would be. Then every pair compared as `farm compare` does, two ways:
from the two runs' samples alone, and with the run-to-run spread the warehouses' history gives
(farm.compare.between):
  identical: run i against run i + 1, the same code and model: any "slower" or "faster" is false;
  slower:    run i against planted run i (the planted change, e.g. +11 %): it should be "slower";
  faster:    planted run i against run i + 1 (the change undone): it should be "faster".

    .venv/bin/python benchmarks/verdicts_across_runs.py [--runs 12] [--dir /tmp/farm-verdicts]
    .venv/bin/python benchmarks/verdicts_across_runs.py --model resnet18 --plant 3 --nth 2 --runs 11
    python3 benchmarks/verdicts_across_runs.py --sweep benchmarks/device/verdicts-resnet50.toml \\
        --planted benchmarks/device/verdicts-resnet50-planted.toml --runs 11 --csv pairs.csv   # a GPU
    .venv/bin/python benchmarks/verdicts_across_runs.py --quick   # the suite: 3 short runs, a planted 12x, --confirm 2

The built-in sweep is one ONNX model on ONNX Runtime CPU at b1 and b8 (--model: tests/conftest.py's
tiny CNN or farm's zoo resnet18 / resnet50); --plant FACTOR runs its --nth Conv FACTOR times
(benchmarks/plant_slowdown.py). Prints, per pair kind and configuration, the verdicts of each way,
the median ratio NEW / BASE and its range; --csv keeps every pair.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import csv
import io
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SWEEP = """name = "same"
[[models]]
name = "{name}"
source = "{source}"
[axes]
precisions = ["fp32"]
batch_sizes = [1, 8]
[measurement]
{measurement}
"""
MEASUREMENT = "warmup_ms = 50\nmin_iterations = 50\nmin_duration_ms = 300\nrepeats = 5\nlayer_iterations = 10"
QUICK_MEASUREMENT = "warmup_ms = 20\nmin_iterations = 20\nmin_duration_ms = 100\nrepeats = 3\nlayer_iterations = 0"
CHANGED = ("slower", "faster")
WAYS = (("alone", "from the two runs' samples alone"), ("history", "with the warehouse's run-to-run spread"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=12, help="runs of the sweep (default 12)")
    parser.add_argument("--sweep", type=Path, default=None, help="a sweep file (default: the built-in one)")
    parser.add_argument("--planted", type=Path, default=None,
                        help="the same sweep with a planted change (its models under the same names)")
    parser.add_argument("--model", choices=("tiny", "resnet18", "resnet50"), default="tiny",
                        help="the built-in sweep's model (default tiny)")
    parser.add_argument("--plant", type=int, default=None, metavar="FACTOR",
                        help="built-in sweep: plant a change, its --nth Conv run FACTOR times")
    parser.add_argument("--nth", type=int, default=1, help="which Conv --plant slows (default 1)")
    parser.add_argument("--executor", default="local", help="farm sweep's --executor (default local)")
    parser.add_argument("--dir", type=Path, default=None, help="work folder (default: a temporary one)")
    parser.add_argument("--csv", type=Path, default=None, help="write every pair here")
    parser.add_argument("--confirm", type=int, default=None, metavar="ROUNDS",
                        help="also measure each pair in doubt again as farm compare --confirm does, ROUNDS rounds")
    parser.add_argument("--markdown", nargs="+", type=Path, metavar="CSV",
                        help="print docs/results.md's table of what the --csv files of earlier runs found, and stop")
    parser.add_argument("--judge-only", action="store_true",
                        help="compare the runs an earlier call left in --dir again (with the same --runs), running none")
    parser.add_argument("--quick", action="store_true",
                        help="3 short runs, a planted 12x, --confirm 2: the suite's check that it runs")
    args = parser.parse_args()
    if args.markdown:
        print(markdown(args.markdown), end="")
        return 0
    if args.quick:
        args.runs, args.plant, args.confirm = 3, args.plant or 12, args.confirm or 2
    if args.runs < 2:
        parser.error("--runs: give 2 or more")
    if args.sweep is None and args.planted is not None:
        parser.error("--planted goes with --sweep (the built-in sweep plants with --plant)")
    if args.judge_only and args.dir is None:
        parser.error("--judge-only: give the --dir an earlier call measured into")
    work = args.dir or Path(tempfile.mkdtemp(prefix="farm-verdicts-"))
    if args.judge_only:
        planted = work / "planted" if (work / "planted").is_dir() else None
        pairs = judged_pairs(args.runs, work / "results", planted, args.confirm)
        return finish(args, pairs, 0.0, f"the runs in {work}", work)
    for old in ("results", "planted"):
        shutil.rmtree(work / old, ignore_errors=True)
    work.mkdir(parents=True, exist_ok=True)
    sweep, planted, what = sweep_files(args, work)

    from farm.warehouse.schema import CACHE_DIR_NAME

    results, started = work / "results", time.monotonic()
    for i in range(args.runs):
        run_sweep(sweep, f"run-{i:02d}", results, args.executor)
        if planted is not None and i < args.runs - 1:
            target = work / "planted" / f"{i:02d}"
            if i:  # the planted model's files (a PyTorch export, a zoo model) are made once, not per run
                shutil.copytree(work / "planted" / "00" / CACHE_DIR_NAME, target / CACHE_DIR_NAME,
                                ignore=shutil.ignore_patterns("work", "dashboard"), dirs_exist_ok=True)
            run_sweep(planted, f"planted-{i:02d}", target, args.executor)
    measured_s = time.monotonic() - started
    pairs = judged_pairs(args.runs, results, work / "planted" if planted is not None else None, args.confirm)
    return finish(args, pairs, measured_s, what, work)


def finish(args, pairs: list[dict], measured_s: float, what: str, work: Path) -> int:
    """Print the tables, write the CSV, tidy up."""
    report(pairs, args.runs, measured_s, what, args.confirm)
    if args.csv:
        with open(args.csv, "w", newline="") as out:
            writer = csv.DictWriter(out, fieldnames=list(pairs[0]))
            writer.writeheader()
            writer.writerows(pairs)
    if args.dir is None:
        shutil.rmtree(work, ignore_errors=True)
    return 0


def run_sweep(sweep_file: Path, name: str, results: Path, executor: str = "local") -> None:
    """`farm sweep SWEEP_FILE --sweep NAME`, its table kept quiet; SystemExit with its output where it
    does not end ok."""
    from farm.cli import main as farm

    printed = io.StringIO()
    with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed):  # each sweep's own table
        code = farm(["sweep", str(sweep_file), "--sweep", name, "--results", str(results), "--executor", executor])
    if code != 0:
        raise SystemExit(f"{name} did not end ok (exit {code}):\n{printed.getvalue()[-3000:]}")


def sweep_files(args, work: Path) -> tuple[Path, Path | None, str]:
    """The sweep file, its planted twin (None: identical runs only), and a few words on them."""
    if args.sweep is not None:
        what = f"{args.sweep.name}" + (f" and {args.planted.name}" if args.planted else "")
        return args.sweep.resolve(), args.planted.resolve() if args.planted else None, what
    model = work / f"{args.model}.onnx"
    if args.model == "tiny":
        from tests.conftest import tiny_cnn

        tiny_cnn(model, channels=16, spatial=16)
    else:
        import onnx

        from farm.models.zoo import ZOO

        onnx.save(ZOO[args.model].build(), str(model))
    sweep = work / "same.toml"
    measurement = QUICK_MEASUREMENT if args.quick else MEASUREMENT
    sweep.write_text(SWEEP.format(name=args.model, source=model.name, measurement=measurement))
    what = f"{args.model} on ONNX Runtime CPU, b1 and b8"
    if args.plant is None:
        return sweep, None, what
    from benchmarks.plant_slowdown import plant_file

    node = plant_file(model, work / f"{args.model}-planted.onnx", nth=args.nth, factor=args.plant)
    planted = work / "planted.toml"
    planted.write_text(SWEEP.format(name=args.model, source=f"{args.model}-planted.onnx", measurement=measurement))
    return sweep, planted, f"{what}; planted: node {node} run {args.plant} times"


def judged_pairs(runs: int, results: Path, planted: Path | None, rounds: int | None = None) -> list[dict]:
    """Every pair, judged both ways: farm compare's verdict (with the warehouses' run-to-run spread
    where they hold enough runs) and the samples' alone; with `rounds`, a third: farm compare
    --confirm's (the pairs in doubt measured again, interleaved), and the seconds that took."""
    from farm.compare import compare_sweeps
    from farm.compare.confirm import confirm
    from farm.compare.stats import effect_interval

    plans = [("identical", f"run-{i:02d}", results, f"run-{i + 1:02d}", results) for i in range(runs - 1)]
    if planted is not None:
        plans += [("slower", f"run-{i:02d}", results, f"planted-{i:02d}", planted / f"{i:02d}") for i in range(runs - 1)]
        plans += [("faster", f"planted-{i:02d}", planted / f"{i:02d}", f"run-{i + 1:02d}", results)
                  for i in range(runs - 1)]
    rows = []
    for kind, base, base_results, new, new_results in plans:
        comparison = compare_sweeps(base, new, new_results, base_results=base_results)
        found = [{"pair": kind, "configuration": pair.label, "base": base, "new": new,
                  "ratio": round(1 + pair.effect.effect, 4),
                  "alone": effect_interval(pair.base, pair.new, comparison.min_effect_percent).verdict,
                  "history": pair.verdict} for pair in comparison.pairs]
        if rounds:
            started = time.monotonic()
            measured = {c.label: c for c in confirm(comparison, base_results, new_results, rounds)}
            seconds = time.monotonic() - started
            for row, pair in zip(found, comparison.pairs):
                again = measured.get(pair.label)
                row |= {"confirmed": pair.verdict, "rounds_ratio": round(1 + again.effect, 4) if again else None,
                        "confirm_s": round(seconds / max(len(measured), 1), 1) if again else 0.0}
        rows += found
    return rows


def report(pairs: list[dict], runs: int, measured_s: float, what: str, rounds: int | None = None) -> None:
    kinds = collections.Counter(p["pair"] for p in pairs)
    print(f"{runs} runs ({what}) in {measured_s:.0f} s; pairs compared as farm compare does: "
          + ", ".join(f"{n} {kind}" for kind, n in kinds.items()))
    for kind in kinds:
        mine = [p for p in pairs if p["pair"] == kind]
        print(f"{kind} pairs ({len(mine)}):")
        ways = WAYS + ((("confirmed", f"measured again interleaved ({rounds} rounds) where in doubt"),) if rounds else ())
        for way, words in ways:
            counts = collections.Counter(p[way] for p in mine)
            shown = ", ".join(f"{verdict} {n}" for verdict, n in sorted(counts.items()))
            right = sum(counts[v] for v in CHANGED) if kind == "identical" else counts[kind]
            said = "false changes" if kind == "identical" else f"found {kind}"
            print(f"  {words}: {shown}; {said} {right} of {len(mine)} ({100 * right / len(mine):.0f} %)")
        if rounds:
            again = [p["confirm_s"] for p in mine if p["confirm_s"]]
            print(f"  measured again: {len(again)} of {len(mine)} pairs, {sum(again):.0f} s in all "
                  f"({statistics.mean(again) if again else 0:.1f} s a pair)")
        for configuration in sorted({p["configuration"] for p in mine}):
            theirs = [p for p in mine if p["configuration"] == configuration]
            ratios = [p["ratio"] for p in theirs]
            verdicts = collections.Counter(p["confirmed" if rounds else "history"] for p in theirs)
            print(f"    {configuration}: ratio median {statistics.median(ratios):.3f} ({min(ratios):.3f}-"
                  f"{max(ratios):.3f}); " + ", ".join(f"{v} {n}" for v, n in sorted(verdicts.items())))



def markdown(files: list[Path]) -> str:
    """docs/results.md's table: per --csv file and configuration, how many identical pairs each way
    of judging called changed and how many planted changes it found (alone: the two runs' samples;
    history: with the warehouse's run-to-run spread, as `farm compare` judges; confirm: measured
    again interleaved, `--confirm`; "-" where a file has no such verdicts), and the median time a
    pair was measured again."""
    out = [f"<!-- made by `python3 benchmarks/verdicts_across_runs.py --markdown {' '.join(f.as_posix() for f in files)}`: "
           "edit there -->",
           "| results file | configuration | pairs | identical called changed (alone / history / confirm) | "
           "planted slower found | planted faster found | measured again, a pair |",
           "| --- | --- | --- | --- | --- | --- | --- |"]
    for path in files:
        rows = list(csv.DictReader(line for line in path.read_text().splitlines() if not line.startswith("#")))
        for configuration in dict.fromkeys(r["configuration"] for r in rows):
            mine = [r for r in rows if r["configuration"] == configuration]
            kinds = {kind: [r for r in mine if r["pair"] == kind] for kind in ("identical", "slower", "faster")}
            seconds = [float(r["confirm_s"]) for r in mine if r.get("confirm_s")]
            out.append(f"| `{path.name}` | {configuration} | {len(kinds['identical'])} + {len(kinds['slower'])} + "
                       f"{len(kinds['faster'])} | {_counts(mine, kinds['identical'], CHANGED)} | "
                       f"{_counts(mine, kinds['slower'], ('slower',))} | {_counts(mine, kinds['faster'], ('faster',))} | "
                       f"{f'{statistics.median(seconds):.1f} s' if seconds else '-'} |")
    return "\n".join(out) + "\n"


def _counts(rows: list[dict], pairs: list[dict], hits: tuple[str, ...]) -> str:
    """How many of `pairs` each way called one of `hits`: "alone / history / confirm", "-" for a way
    the rows have no verdicts of."""
    return " / ".join(str(sum(r[way] in hits for r in pairs)) if any(r.get(way) for r in rows) else "-"
                      for way in ("alone", "history", "confirmed"))


if __name__ == "__main__":
    sys.exit(main())
