"""What `farm compare --confirm`'s rounds see, kept whole, and which way of reading them to trust.
A sweep file's cell and its planted twin's are built side by side as --confirm builds them and timed
for a fixed number of alternating block rounds (--rounds x --looks, never stopping early), each
block's latencies summarised in a CSV; then every pair is judged from those blocks as --confirm
would have judged it, stopping where it would (farm.compare.confirm.rounds_timed and judged), and by
other readings of the same blocks, so that a change of reading is chosen on measured pairs:
  identical: the sweep's cell against itself built twice: any "slower" or "faster" is false;
  slower:    the cell against the planted one: it should be "slower";
  faster:    the planted one against the cell: it should be "faster".

    python3 benchmarks/confirm_rounds.py --sweep benchmarks/device/verdicts-resnet50-b1.toml \\
        --planted benchmarks/device/verdicts-resnet50-b1-planted.toml --pairs 30 --csv blocks.csv   # a GPU
    python3 benchmarks/confirm_rounds.py --judge blocks.csv [more.csv ...]   # several runs' pairs together
    .venv/bin/python benchmarks/confirm_rounds.py --quick   # the suite: a tiny CNN and a 12x planted twin, CPU
"""

from __future__ import annotations

import argparse
import collections
import csv
import itertools
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

KINDS = ("identical", "slower", "faster")
WANTED = {"identical": (), "slower": ("slower",), "faster": ("faster",)}  # the right answers that call a change
STATS = ("median", "mean", "p10")
QUICK_SWEEP = """name = "{name}"
[[models]]
name = "tiny"
source = "{source}"
[axes]
precisions = ["fp32"]
batch_sizes = [1]
[measurement]
warmup_ms = 20
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sweep", type=Path, help="a sweep file of one cell")
    parser.add_argument("--planted", type=Path, help="the same sweep with a planted change")
    parser.add_argument("--pairs", type=int, default=30, help="pairs, the kinds taking turns (default 30)")
    parser.add_argument("--rounds", type=int, default=None, help="rounds a look (default: --confirm's, 20)")
    parser.add_argument("--looks", type=int, default=None, help="looks timed whole (default: --confirm's most)")
    parser.add_argument("--csv", type=Path, help="write every round's blocks here")
    parser.add_argument("--judge", type=Path, nargs="+", help="judge CSVs this wrote, their pairs together; measure nothing")
    parser.add_argument("--markdown", action="store_true", help="with --judge: the table docs/results.md holds")
    parser.add_argument("--min-effect", type=float, default=3.0, help="percent (default: farm compare's, 3)")
    parser.add_argument("--quick", action="store_true", help="the suite's check that it runs: a tiny CNN, CPU")
    args = parser.parse_args()
    from farm.compare.confirm import LOOK_CONFIDENCES, ROUNDS

    rounds, looks = args.rounds or ROUNDS, args.looks or len(LOOK_CONFIDENCES)
    if args.judge:
        rows, rounds = recorded(args.judge, args.rounds)
        if args.markdown:
            print(markdown(args.judge, rows, rounds, args.min_effect), end="")
        else:
            print(report(rows, rounds, args.min_effect))
        return 0
    with tempfile.TemporaryDirectory(prefix="confirm-rounds.") as scratch:
        if args.quick:
            args.sweep, args.planted = quick_sweeps(Path(scratch))
            args.pairs, rounds, looks = 3, 4, 2
        if not (args.sweep and args.planted):
            parser.error("give --sweep and --planted (or --judge FILE, or --quick)")
        rows = measure(args.sweep, args.planted, args.pairs, rounds * looks, Path(scratch) / "cache")
    if args.csv:
        with args.csv.open("w", newline="") as out:
            out.write(f"# {' '.join(sys.argv[1:])}: rounds={rounds} looks={looks}\n")
            writer = csv.DictWriter(out, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    print(report(rows, rounds, args.min_effect))
    return 0


def recorded(paths: list[Path], rounds: int | None) -> tuple[list[dict], int]:
    """The blocks of every file, their pairs numbered on from the file before, and the rounds a look
    they were recorded with (files recorded with different looks cannot be judged as one)."""
    from farm.compare.confirm import ROUNDS

    rows: list[dict] = []
    rounds_seen = set()
    for path in paths:
        if not path.is_file():
            sys.exit(f"confirm_rounds.py: no such file {path}: give the CSVs --csv wrote")
        text = path.read_text().splitlines()
        if not any(line.startswith("pair,kind,round,") for line in text):
            sys.exit(f"confirm_rounds.py: {path} has no blocks (no 'pair,kind,round,...' header): give a CSV --csv wrote")
        rounds_seen.add(int(next((line.split("rounds=")[1].split()[0] for line in text if "rounds=" in line), ROUNDS)))
        first = 1 + max((int(row["pair"]) for row in rows), default=-1)
        for row in csv.DictReader(line for line in text if not line.startswith("#")):
            rows.append({**row, "pair": str(first + int(row["pair"]))})
    if rounds is None and len(rounds_seen) > 1:
        sys.exit(f"confirm_rounds.py: the files were recorded with {sorted(rounds_seen)} rounds a look; give --rounds")
    return rows, rounds or rounds_seen.pop()


def quick_sweeps(folder: Path) -> tuple[Path, Path]:
    from benchmarks.plant_slowdown import plant_file
    from tests.conftest import tiny_cnn

    tiny_cnn(folder / "tiny.onnx", channels=16, spatial=16)
    plant_file(folder / "tiny.onnx", folder / "planted.onnx", nth=1, factor=12)
    for name, source in (("same", "tiny.onnx"), ("planted", "planted.onnx")):
        (folder / f"{name}.toml").write_text(QUICK_SWEEP.format(name=name, source=source))
    return folder / "same.toml", folder / "planted.toml"


def planned_cell(sweep: Path, cache_dir: Path):
    from farm.config import load_config
    from farm.plan import plan_sweep

    cells = [c for c in plan_sweep(load_config(sweep), cache_dir).cells if not c.unsupported_reason]
    if len(cells) != 1:
        raise SystemExit(f"{sweep}: give a sweep file of one runnable cell (it plans {len(cells)})")
    return cells[0]


def measure(sweep: Path, planted: Path, pairs: int, total_rounds: int, cache_dir: Path) -> list[dict]:
    """Each pair built side by side and timed for `total_rounds` rounds: a row per round."""
    from farm.compare.confirm import block_rounds, side_by_side

    plain, twin = planned_cell(sweep, cache_dir), planned_cell(planted, cache_dir)
    sides = {"identical": (plain, plain), "slower": (plain, twin), "faster": (twin, plain)}
    rows = []
    for number, kind in zip(range(pairs), itertools.cycle(KINDS)):
        start = time.perf_counter()
        with side_by_side(*sides[kind], cache_dir) as queries:
            built = time.perf_counter()
            for index, (base_ms, new_ms) in zip(range(total_rounds), block_rounds(queries)):
                row = {"pair": number, "kind": kind, "round": index, "base_first": int(index % 2 == 0)}
                for side, values in (("base", base_ms), ("new", new_ms)):
                    row |= {f"{side}_{name}": round(value, 5) for name, value in summary(values).items()}
                    row[f"{side}_n"] = len(values)
                row["s"] = round(time.perf_counter() - built, 3)
                rows.append(row)
        print(f"pair {number} {kind}: built in {built - start:.1f} s, {total_rounds} rounds in "
              f"{time.perf_counter() - built:.1f} s", flush=True)
    return rows


def summary(latencies: list[float]) -> dict[str, float]:
    ordered = sorted(latencies)
    return {"median": statistics.median(ordered), "mean": statistics.fmean(ordered),
            "p10": ordered[int(0.1 * (len(ordered) - 1))]}


def readings(rows: list[dict], rounds: int) -> dict[str, tuple[list[float], int]]:
    """Each way of reading one pair's rounds: (the series judged, rounds a look in it). 'farm' is
    what --confirm does (each round's log ratio of the block medians); 'ABBA' averages each two
    rounds (A B then B A), so that the order within a round cancels in every value, not only in the
    mean; 'mean' and 'p10' read the blocks' mean or tenth percentile instead of their median."""
    ratio = {name: [math.log(float(r[f"new_{name}"]) / float(r[f"base_{name}"])) for r in rows] for name in STATS}
    paired = [(a + b) / 2 for a, b in zip(ratio["median"][::2], ratio["median"][1::2])]
    return {"farm": (ratio["median"], rounds), "ABBA": (paired, max(rounds // 2, 2)),
            "mean": (ratio["mean"], rounds), "p10": (ratio["p10"], rounds)}


def judged_readings(rows: list[dict], rounds: int, min_effect: float) -> list[dict]:
    """Per kind and reading: the pairs, the right verdicts (a change found; 'within noise' for
    identical pairs), the wrong ones (a change the wrong way, or any on identical pairs), the
    inconclusive ones, as --confirm would stop; the mean rounds timed, the median change, and the
    pooled standard deviation of one value of the series (%)."""
    from farm.compare.confirm import judged, look_of, rounds_timed

    by_pair: dict[tuple[int, str], list[dict]] = collections.defaultdict(list)
    for row in rows:
        by_pair[(int(row["pair"]), row["kind"])].append(row)
    found = []
    for kind in KINDS:
        pairs = [mine for (_, k), mine in sorted(by_pair.items()) if k == kind]
        for reading in ("farm", "ABBA", "mean", "p10") if pairs else ():
            verdicts, timed, effects, variances = collections.Counter(), [], [], []
            for mine in pairs:
                series, per_look = readings(mine, rounds)[reading]
                variances.append(statistics.variance(series))
                used = rounds_timed(series, per_look, min_effect)
                verdict, effect, _, _ = judged(series[:used], min_effect, look_of(used, per_look))
                verdicts[verdict] += 1
                timed.append(used * (2 if reading == "ABBA" else 1))
                effects.append(effect)
            found.append({
                "kind": kind, "reading": reading, "pairs": len(pairs),
                "right": sum(verdicts[v] for v in WANTED[kind]) if WANTED[kind] else verdicts["within noise"],
                "wrong": sum(n for v, n in verdicts.items() if v in ("slower", "faster") and v not in WANTED[kind]),
                "inconclusive": verdicts["inconclusive"], "rounds": statistics.fmean(timed),
                "effect": 100 * statistics.median(effects), "spread": 100 * math.sqrt(statistics.fmean(variances))})
    return found


def report(rows: list[dict], rounds: int, min_effect: float) -> str:
    """Per kind and reading: the verdicts, as --confirm would stop, and the rounds that took."""
    lines = [f"rounds a look: {rounds}; minimum effect {min_effect:g} %",
             "kind       reading  pairs  right  wrong direction/false  inconclusive  rounds timed (mean)  effect (median)"
             "  spread of a value (pooled sd, %)"]
    for r in judged_readings(rows, rounds, min_effect):
        lines.append(f"{r['kind']:10} {r['reading']:8} {r['pairs']:5}  {r['right']:5}  {r['wrong']:21}  "
                     f"{r['inconclusive']:12}  {r['rounds']:19.1f}  {r['effect']:+14.1f} %  {r['spread']:32.2f}")
    return "\n".join(lines)


def markdown(paths: list[Path], rows: list[dict], rounds: int, min_effect: float) -> str:
    """The table docs/results.md holds: each kind and reading of the results files' pairs."""
    names = " ".join(str(p.resolve().relative_to(ROOT) if p.resolve().is_relative_to(ROOT) else p) for p in paths)
    lines = [f"<!-- made by `python3 benchmarks/confirm_rounds.py --judge {names} --markdown`: edit there -->",
             "| pairs | reading | right | wrong | inconclusive | rounds timed, mean | change, median | a value's spread |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in judged_readings(rows, rounds, min_effect):
        lines.append(f"| {r['kind']} | {r['reading']} | {r['right']} of {r['pairs']} | {r['wrong']} | "
                     f"{r['inconclusive']} | {r['rounds']:.1f} | {r['effect']:+.1f} % | {r['spread']:.1f} % |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
