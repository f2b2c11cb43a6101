"""How a sweep scales over GPUs: wall time, speedup, efficiency and idle time per GPU on 1, 2, 4.

    python3 benchmarks/scaling.py configs/gpu-resnet50.toml            # real sweeps, one per GPU count
    python3 benchmarks/scaling.py SWEEP --simulate --durations-from results/   # virtual time
    python3 benchmarks/scaling.py --quick                             # the suite: 18 recorded ResNet-50 cells, simulated

Real: `farm sweep SWEEP --gpus N` into a fresh warehouse per N (under --scratch), timed from
outside; then the warehouse's `cells` (started_at, finished_at, worker: which GPU of which Ray
node) give each GPU's busy time, and idle = the cell phase (first start to last finish) - busy;
the seconds before the first cell (start-up) and after the last are printed beside it. With
--scratch, counts measured in earlier calls join the table (figures.json there). A count given
twice (`--gpus 2,1,2`), or again in the same --scratch, is measured again (`gpus2`, then
`gpus2-run2`): how far a cell's figure moves between two runs of the same setup, the floor under
any comparison across counts. `--report` runs nothing and prints the tables from --scratch's
warehouses.
Per cell (a 1-GPU run and another in the same --scratch): each ok cell's median latency at every
count against 1 GPU, judged against 5 %: within; off by more, on a cell whose repeats agreed (each
run's repeat medians within 5 % of each other); or cannot judge, where the cell's own repeats in one
of the two runs moved more than 5 % (a host-bound cell on a host whose speed moved: its note says so).
Simulated (`--simulate`): the farm's scheduler (farm.scheduler.simulate) over N logical GPUs in
virtual time, each cell lasting its recorded duration (the median of the same model, backend,
options, precision and batch in --durations-from's warehouse; else farm.executor.costs' prior),
plus --startup-s per worker for its first cell; both orders: the plan's (FIFO) and longest first.
Targets (4 GPUs of one host): the 18-cell sweep >= 3.6x of 1 GPU, gpu-resnet50.toml >= 3.7x.

Measured, gpu-resnet50.toml with --cold (docs/running.md has the full tables): on 4
H200s of a 64-core host, before each GPU's worker kept to its share of the cores, 1 / 2 / 4 GPUs
423.3 / 236.6 / 145.2 s (1.79x, 2.91x: 73 %); on 2 H200s of a 32-core host, with the share, 458.2 /
283.8 s (1.61x: 81 %; torch.compile builds 165 -> 210 s on 16 cores instead of 32).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

# 18 ResNet-50 cells measured on an H200 (fp16/bf16 x b1/32/128 x eager/compile/CUDA graphs), seconds
ISSUE_16 = {f"{p} b{b} {mode}": base * scale for p in ("fp16", "bf16")
            for b, scale in ((1, 1.0), (32, 1.3), (128, 1.9))
            for mode, base in (("eager", 5.5), ("compile", 24.0), ("cudagraphs", 6.5))}


class _Named:
    def __init__(self, cell_id: str) -> None:
        self.cell_id = cell_id


def simulated(seconds: dict[str, float], gpus: int, longest_first: bool, startup_s: float) -> tuple[float, list[float]]:
    """(makespan, idle seconds per GPU) of the scheduler in virtual time."""
    from farm.scheduler import simulate

    slots = [f"gpu{i}" for i in range(gpus)]
    first: set[str] = set()

    def duration(cell, slot) -> float:
        extra = startup_s if slot not in first else 0.0
        first.add(slot)
        return seconds[cell.cell_id] + extra

    timeline = simulate([_Named(k) for k in seconds], slots, duration,
                        expected_s=seconds if longest_first else None)
    end = max(e for *_, e in timeline)
    busy = {s: sum(e - b for _, slot, b, e in timeline if slot == s) for s in slots}
    return end, [end - busy[s] for s in slots]


def recorded_seconds(sweep: Path, durations_from: Path | None) -> dict[str, float]:
    """The sweep's cells' expected seconds: recorded durations where the warehouse has them."""
    from farm.config import load_config
    from farm.executor.costs import expected_seconds, history_from_rows
    from farm.plan import plan_sweep
    from farm.sweep import DURATIONS_SQL
    from farm.warehouse import Warehouse

    cache = Path(tempfile.mkdtemp(prefix="scaling-plan-"))
    cells = plan_sweep(load_config(sweep), cache).cells
    history = {}
    if durations_from is not None:
        warehouse = Warehouse(durations_from)
        history = history_from_rows(warehouse.fetch(warehouse.connect(), DURATIONS_SQL)[1])
    seconds = expected_seconds(cells, history)
    print(f"{len(cells)} cells, {len(history)} recorded durations in {durations_from or 'no warehouse (prior only)'}")
    return seconds


def clear_compile_caches() -> None:
    """torch.compile's caches (inductor, triton): each GPU count then starts cold, as the first does."""
    import getpass
    import shutil

    for path in (Path(tempfile.gettempdir()) / f"torchinductor_{getpass.getuser()}", Path.home() / ".triton",
                 Path.home() / ".cache" / "torch" / "inductor"):
        shutil.rmtree(path, ignore_errors=True)


def real(sweep: Path, gpus: int, results: Path, cold: bool = False) -> tuple[float, list[float], dict]:
    """(wall seconds, idle seconds per GPU, phases) of `farm sweep SWEEP --gpus N` into the fresh
    warehouse `results`; phases: seconds before the first cell started (start-up: Ray, workers, planning),
    the cell phase (first start to last finish), after the last finished (summary, shutdown)."""
    import datetime as dt

    from farm.warehouse import Warehouse

    if cold:
        clear_compile_caches()
    began = dt.datetime.now(dt.UTC)
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "farm", "sweep", str(sweep), "--results", str(results),
                    "--gpus", str(gpus), "--force"], cwd=ROOT, check=False)
    wall = time.perf_counter() - start
    rows = Warehouse(results).connect().execute(
        "SELECT started_at, finished_at, worker, status FROM cells WHERE worker LIKE 'cuda worker%'").fetchall()
    if not rows:
        return wall, [], {}
    first, last = min(r[0] for r in rows), max(r[1] for r in rows)
    phase = (last - first).total_seconds()
    phases = {"before_s": (first - began).total_seconds(), "cells_s": phase,
              "after_s": wall - (last - began).total_seconds(), "cells": len(rows),
              "not_ok": sum(1 for r in rows if r[3] != "ok")}
    busy: dict[str, float] = {}
    for started, finished, worker, _status in rows:  # a GPU: its Ray GPU id on its node (actors come and go)
        gpu = worker.split(", Ray GPU ", 1)[-1].split(",")[0] + " " + worker.rsplit("Ray node ", 1)[-1]
        busy[gpu] = busy.get(gpu, 0.0) + (finished - started).total_seconds()
    return wall, [phase - b for b in busy.values()], phases


def run_labels(counts: list[int], taken: set[str]) -> list[tuple[str, int]]:
    """(label, GPU count) per run, in order; the label names the run's warehouse under --scratch:
    gpusN, and gpusN-run2, -run3 for a count given again or measured there before (`taken`)."""
    labels: list[tuple[str, int]] = []
    for n in counts:
        run = 1
        while (label := f"gpus{n}" if run == 1 else f"gpus{n}-run{run}") in taken | {t for t, _ in labels}:
            run += 1
        labels.append((label, n))
    return labels


def gpu_count(label: str) -> int:
    return int(label.removeprefix("gpus").split("-", 1)[0])


def table(title: str, figures: dict[str, tuple]) -> None:
    """One row per run: figures maps a run's label to (wall, idle per GPU[, phases])."""
    print(f"\n{title}")
    print(f"{'GPUs':>4} {'wall s':>8} {'speedup':>8} {'efficiency':>10} {'before':>7} {'cells':>7} {'after':>6} "
          f"{'not ok':>6}  idle s per GPU")
    one = figures["gpus1"][0] if "gpus1" in figures else None  # speedup only against a measured 1-GPU run
    for label, (wall, idle, *rest) in sorted(figures.items(), key=lambda kv: (gpu_count(kv[0]), kv[0])):
        n = gpu_count(label)
        speedup = f"{one / wall:>7.2f}x {100 * one / wall / n:>9.0f}%" if one else f"{'-':>8} {'-':>10}"
        phases = rest[0] if rest else {}
        split = (f"{phases['before_s']:>7.1f} {phases['cells_s']:>7.1f} {phases['after_s']:>6.1f} "
                 f"{phases['not_ok']:>6}" if phases else f"{'':>7} {'':>7} {'':>6} {'':>6}")
        again = f"  ({label.split('-', 1)[1]})" if "-" in label else ""
        print(f"{n:>4} {wall:>8.1f} {speedup} {split}  " + " ".join(f"{i:.1f}" for i in idle) + again)
    if one is None:
        print("(no 1-GPU run among these: speedup and efficiency need --gpus 1 in the same call)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweep", nargs="?", type=Path, help="the sweep file (none with --quick)")
    parser.add_argument("--gpus", default="1,2,4", help="GPU counts, comma-separated (default 1,2,4)")
    parser.add_argument("--simulate", action="store_true", help="the scheduler in virtual time, no GPU")
    parser.add_argument("--durations-from", type=Path, help="a warehouse with earlier runs of these cells")
    parser.add_argument("--startup-s", type=float, default=0.0, help="simulated: each worker's first-cell overhead")
    parser.add_argument("--scratch", type=Path, help="real: where the warehouses go (default: a temporary folder)")
    parser.add_argument("--quick", action="store_true", help="18 recorded ResNet-50 cells, simulated")
    parser.add_argument("--cold", action="store_true", help="real: clear torch.compile's caches before each count")
    parser.add_argument("--csv", type=Path, help="real: each cell's figure at every count against 1 GPU, as CSV")
    parser.add_argument("--report", action="store_true", help="real: run nothing, print the tables from --scratch")
    args = parser.parse_args()
    counts = [int(n) for n in args.gpus.split(",")]
    if args.quick or args.simulate:
        seconds = ISSUE_16 if args.quick or args.sweep is None else recorded_seconds(args.sweep, args.durations_from)
        for name, longest_first in (("plan order (FIFO)", False), ("longest expected first", True)):
            table(f"simulated, {name}: {len(seconds)} cells, {sum(seconds.values()):.1f} s of work",
                  {f"gpus{n}": simulated(seconds, n, longest_first, args.startup_s) for n in counts})
        return
    if args.sweep is None:
        parser.error("give a sweep file, or --quick")
    if args.report and args.scratch is None:
        parser.error("--report reads the warehouses of an earlier run: give its --scratch")
    scratch = args.scratch or Path(tempfile.mkdtemp(prefix="scaling-"))
    # each run's figures are kept in the scratch folder, so counts run in separate calls (a
    # device's per-call time limit) make one table: the last call prints every run measured
    kept = scratch / "figures.json"
    figures = {f"gpus{k}" if k.isdigit() else k: tuple(v)
               for k, v in json.loads(kept.read_text()).items()} if kept.is_file() else {}
    for label, n in [] if args.report else run_labels(counts, {*figures, *(p.name for p in scratch.glob('gpus*'))}):
        figures[label] = real(args.sweep, n, scratch / label, args.cold)
        kept.write_text(json.dumps(figures))
    if figures:
        table(f"real sweeps of {args.sweep} (warehouses under {scratch}; seconds before the first cell, "
              "of the cell phase, after the last)", figures)
    measured = sorted({*figures, *(p.name for p in scratch.glob("gpus*") if p.is_dir())},
                      key=lambda label: (gpu_count(label), label))
    rows = per_cell(scratch, measured)
    if args.csv and rows:
        write_csv(rows, args.csv, recorded_machine([scratch / label for label in measured]))
    elif args.csv:
        print(f"no per-cell figures for {args.csv}: they need a 1-GPU count and another in the same --scratch")


def comparisons(labels: list[str]) -> list[tuple[str, str]]:
    """(run, base) pairs: every run against 1 GPU, and a count's later run against its first."""
    pairs = []
    for label in labels[1:]:
        first = label.split("-", 1)[0]
        pairs.append((label, "gpus1"))
        if first != label and first != "gpus1" and first in labels:
            pairs.append((label, first))
    return pairs


def per_cell(scratch: Path, labels: list[str]) -> list[dict]:
    """Each ok cell's median latency on every run against its figure on 1 GPU, and a count's
    second run against its first, judged (verdict) and printed; the rows, for --csv."""
    from isolation import ok_cells, verdict

    if "gpus1" not in labels or len(labels) < 2:
        return []
    figures = {label: {c["cell_id"]: c for c in ok_cells(scratch / label)} for label in labels}
    pairs = comparisons(labels)
    rows = []
    for cell_id, one in figures["gpus1"].items():
        row = {"cell": cell_id[:8], "precision": one["precision"], "batch": one["batch"], "options": one["options"]}
        for label in labels:
            cell = figures[label].get(cell_id)
            row[f"{label}_ms"] = cell["latency_median_ms"] if cell else None
            row[f"{label}_repeat_spread_percent"] = cell["repeat_spread_percent"] if cell else None
        for label, base in pairs:
            new, old = figures[label].get(cell_id), figures[base].get(cell_id)
            ratio = new["latency_median_ms"] / old["latency_median_ms"] if new and old else None
            row[f"{label}_over_{base}"] = ratio
            row[f"{label}_vs_{base}"] = (verdict(ratio, [old["repeat_spread_percent"], new["repeat_spread_percent"]])
                                         if ratio is not None else "not measured")
        rows.append(row)
    for label, base in pairs:
        summarize(rows, label, base)
    return rows


def summarize(rows: list[dict], label: str, base: str) -> None:
    """One comparison, per cell: counts by verdict, then the cells furthest off."""
    import statistics

    from isolation import TOLERANCE

    judged = [r for r in rows if r[f"{label}_over_{base}"] is not None]
    if not judged:
        return
    ratios = [r[f"{label}_over_{base}"] for r in judged]
    worst = max(ratios, key=lambda v: abs(v - 1))
    verdicts = [r[f"{label}_vs_{base}"] for r in judged]
    print(f"\n{label} against {base}, per cell (median latency): {len(judged)} cells, median ratio "
          f"{statistics.median(ratios):.3f}, worst {worst:.3f}; within {100 * TOLERANCE:.0f} %: "
          f"{verdicts.count('within')}, off by more on steady repeats: {sum(v.startswith('off') for v in verdicts)}, "
          f"cannot judge (the cell's own repeats moved more): {sum(v.startswith('cannot') for v in verdicts)}")
    for r in sorted(judged, key=lambda r: -abs(r[f"{label}_over_{base}"] - 1))[:12]:
        mode = json.loads(r["options"] or "{}").get("mode", "")
        print(f"  {r['cell']} {r['precision']:<5} b{r['batch']:<4} {mode:<11} {r[f'{base}_ms']:>9.3f} ms -> "
              f"{r[f'{label}_ms']:>9.3f} ms  {r[f'{label}_over_{base}']:.3f}  {r[f'{label}_vs_{base}']}")


def recorded_machine(warehouses: list[Path]) -> str:
    """The machine and farm commit the runs recorded (their warehouses, not where this script runs:
    --report may read runs from elsewhere), as isolation.machine() writes them."""
    from farm.warehouse import Warehouse

    gpus, cores, commits = {}, set(), set()
    for results in warehouses:
        con = Warehouse(results).connect()
        gpus.update(con.execute("SELECT device_id, name FROM devices WHERE kind = 'cuda'").fetchall())
        for cpu_cores, commit in con.execute("SELECT DISTINCT cpu_cores, farm_commit FROM cells").fetchall():
            cores.add(cpu_cores)
            commits.add((commit or "?")[:7])
    names = sorted(set(gpus.values()))
    return (f"{len(gpus)}x {', '.join(names)}" if gpus else "no GPU") + \
        f", {'/'.join(map(str, sorted(c for c in cores if c)))} CPUs; farm {', '.join(sorted(commits))}"


def write_csv(rows: list[dict], path: Path, machine: str) -> None:
    """The per-cell rows as CSV, with the machine and farm's commit on a comment line above."""
    import csv
    import io

    buffer = io.StringIO()
    buffer.write(f"# {machine}\n")
    writer = csv.DictWriter(buffer, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(buffer.getvalue())
    print(f"per-cell figures written to {path}")


if __name__ == "__main__":
    main()
