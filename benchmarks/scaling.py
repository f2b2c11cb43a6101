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
Per cell (any two runs in the same --scratch): each ok cell's median latency on every run against
the first finished 1-GPU run, and a count's later runs against its first, judged by farm compare's
rule with 5 % as the minimum effect (isolation.verdict): within noise, slower, faster or inconclusive
(a host-bound cell on a host whose speed moved: its note says so), with the change and its 95 %
interval; each run's repeat spread and host probe (`host_probe_median_ms`: the host's own speed, which
a host-bound cell follows) beside it.
Simulated (`--simulate`): the farm's scheduler (farm.scheduler.simulate) over N logical GPUs in
virtual time, each cell lasting its recorded duration (the median of the same model, backend,
options, precision and batch in --durations-from's warehouse; else farm.executor.costs' prior),
plus --startup-s per worker for its first cell; both orders: the plan's (FIFO) and longest first.
Targets (4 GPUs of one host): the 18-cell sweep >= 3.6x of 1 GPU, gpu-resnet50.toml >= 3.7x.

Measured, gpu-resnet50.toml with --cold (docs/running.md has the full tables): on 4
H200s of a 64-core host, before each GPU's worker kept to its share of the cores, 1 / 2 / 4 GPUs
423.3 / 236.6 / 145.2 s (1.79x, 2.91x: 73 %); on 2 H200s of a 32-core host, with the share, 458.2 /
283.8 s (1.61x: 81 %; torch.compile builds 165 -> 210 s on 16 cores instead of 32); on 2 H200s of
a 32-core host, each GPU's worker timing on cores of its own and sharing the rest, its next cell's
process started beside each cell (3d0a280), 839.5 / 437.5 s (1.92x: 96 %); on 4 H200s of a 64-core
host (c6c0bf5), 1 / 2 / 4 GPUs 756.5 / 379.5 / 225.8 s (1.99x, 3.35x: 84 %).
--csv also writes NAME-runs.csv (each run's wall time and phases); `--markdown CSV` prints
docs/running.md's scaling tables from the two.
"""

from __future__ import annotations

import argparse
import json
import re
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


RUN_LABEL = re.compile(r"^gpus(\d+)(?:-run(\d+))?$")  # a run's warehouse folder: gpus2, gpus2-run2


def run_key(label: str) -> tuple[int, int] | None:
    """(GPU count, run number) of a run's label; None for a name that is no run's."""
    match = RUN_LABEL.match(label)
    return (int(match[1]), int(match[2] or 1)) if match else None


def gpu_count(label: str) -> int:
    return run_key(label)[0]


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


def runs_in(scratch: Path) -> list[str]:
    """The runs whose warehouses are under `scratch`, by GPU count and run number."""
    labels = [p.name for p in scratch.iterdir() if run_key(p.name) and any(p.glob("*/cells/*.parquet"))] \
        if scratch.is_dir() else []
    return sorted(labels, key=run_key)


def one_gpu_base(labels: list[str], finished: set[str]) -> str | None:
    """The run the others are held to: the first 1-GPU run that finished (figures.json has it: a
    run stopped part-way has its folder only), else the first 1-GPU run."""
    ones = [label for label in labels if gpu_count(label) == 1]
    return next((label for label in ones if label in finished), ones[0] if ones else None)


def table(title: str, figures: dict[str, tuple], base: str | None = "gpus1") -> None:
    """One row per run: figures maps a run's label to (wall, idle per GPU[, phases]); speedup
    against the run `base` (a 1-GPU run)."""
    print(f"\n{title}")
    print(f"{'GPUs':>4} {'wall s':>8} {'speedup':>8} {'efficiency':>10} {'before':>7} {'cells':>7} {'after':>6} "
          f"{'not ok':>6}  idle s per GPU")
    one = figures[base][0] if base in figures else None  # speedup only against a measured 1-GPU run
    for label, (wall, idle, *rest) in sorted(figures.items(), key=lambda kv: run_key(kv[0])):
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
    parser.add_argument("--markdown", type=Path, metavar="CSV",
                        help="print docs/running.md's scaling tables from a per-cell CSV and its -runs.csv")
    parser.add_argument("--note", help="a line to write under the machine's at the top of --csv")
    args = parser.parse_args()
    counts = [int(n) for n in args.gpus.split(",")]
    if args.quick or args.simulate:
        seconds = ISSUE_16 if args.quick or args.sweep is None else recorded_seconds(args.sweep, args.durations_from)
        for name, longest_first in (("plan order (FIFO)", False), ("longest expected first", True)):
            table(f"simulated, {name}: {len(seconds)} cells, {sum(seconds.values()):.1f} s of work",
                  {f"gpus{n}": simulated(seconds, n, longest_first, args.startup_s) for n in counts})
        return
    if args.markdown:
        try:
            print(markdown(args.markdown), end="")
        except (OSError, ValueError, KeyError, StopIteration) as exc:  # not what --csv wrote, or its -runs.csv is missing
            parser.error(f"--markdown {args.markdown}: not a per-cell CSV of scaling.py --csv beside its -runs.csv "
                         f"({type(exc).__name__}: {exc})")
        return
    if args.report:
        if args.scratch is None:
            parser.error("--report reads the warehouses of an earlier run: give its --scratch")
        report(args.scratch, kept_figures(args.scratch), args.csv, args.note)
        return
    if args.sweep is None:
        parser.error("give a sweep file, or --quick")
    scratch = args.scratch or Path(tempfile.mkdtemp(prefix="scaling-"))
    # each run's figures are kept in the scratch folder, so counts run in separate calls (a
    # device's per-call time limit) make one table: the last call prints every run measured
    figures = kept_figures(scratch)
    for label, n in run_labels(counts, {*figures, *(p.name for p in scratch.glob("gpus*"))}):
        figures[label] = real(args.sweep, n, scratch / label, args.cold)
        (scratch / "figures.json").write_text(json.dumps(figures))
    report(scratch, figures, args.csv, args.note, title=f"real sweeps of {args.sweep}")


def kept_figures(scratch: Path) -> dict[str, tuple]:
    """The finished runs' wall times and idle figures kept in figures.json (keys once GPU counts)."""
    kept = scratch / "figures.json"
    return {f"gpus{k}" if k.isdigit() else k: tuple(v)
            for k, v in json.loads(kept.read_text()).items()} if kept.is_file() else {}


def report(scratch: Path, figures: dict[str, tuple], csv_path: Path | None, note: str | None,
           title: str = "real sweeps") -> None:
    """The wall-time table of the finished runs (`figures`, kept in figures.json under `scratch`),
    then each cell's comparison across the runs' warehouses there."""
    labels = runs_in(scratch)
    if not labels and not figures:
        sys.exit(f"no runs' warehouses under {scratch} (folders gpusN, gpusN-runK, each a farm warehouse with cells)")
    base = one_gpu_base(sorted({*labels, *figures}, key=run_key), set(figures))
    if figures:
        table(f"{title} (warehouses under {scratch}; seconds before the first cell, of the cell phase, "
              "after the last)", figures, base)
    rows = per_cell(scratch, labels, base if base in labels else None)
    if csv_path and rows:
        machine = recorded_machine([scratch / label for label in labels])
        write_csv(rows, csv_path, machine, note)
        if figures:
            write_csv(run_rows(figures), runs_csv(csv_path), machine, note)
    elif csv_path:
        print(f"no per-cell figures for {csv_path}: they need two runs in the same --scratch")


def comparisons(labels: list[str], base: str | None) -> list[tuple[str, str]]:
    """(run, against) pairs: every run against the 1-GPU base, and a count's later run against its
    first."""
    pairs = []
    for label in labels:
        if label == base:
            continue
        if base:
            pairs.append((label, base))
        first = next(other for other in labels if gpu_count(other) == gpu_count(label))
        if first not in (label, base):
            pairs.append((label, first))
    return pairs


def per_cell(scratch: Path, labels: list[str], base: str | None) -> list[dict]:
    """Each ok cell of any run: its median latency on every run, against the 1-GPU base and a
    count's later run against its first, judged (isolation.verdict: farm compare's rule) and printed; the rows, for --csv."""
    from isolation import ok_cells, ratio_of, verdict

    from farm.queries import host_bound

    pairs = comparisons(labels, base)
    if not pairs:
        return []
    figures = {label: {c["cell_id"]: c for c in ok_cells(scratch / label)} for label in labels}
    spent = {label: cell_seconds(scratch / label) for label in labels}
    cells: dict[str, dict] = {}
    for label in labels:
        for cell_id, cell in figures[label].items():
            cells.setdefault(cell_id, cell)
    rows = []
    for cell_id, first in cells.items():
        row = {"cell": cell_id[:8], "precision": first["precision"], "batch": first["batch"],
               "options": first["options"]}
        for label in labels:
            cell = figures[label].get(cell_id)
            row[f"{label}_ms"] = cell["latency_median_ms"] if cell else None
            row[f"{label}_repeat_spread_percent"] = cell["repeat_spread_percent"] if cell else None
            # the host's own speed as the cell ran (farm.measure.host_probe_ms): a host-bound cell
            # follows it, so a ratio away from 1 beside a probe that moved too is the machine's doing
            row[f"{label}_host_probe_ms"] = cell["host_probe_median_ms"] if cell else None
            # what the cell cost its GPU (the whole cell, and its build) and whether the GPU waited on
            # the host's launches: the figures a scaling report's where-the-time-went tables need
            row[f"{label}_duration_s"], row[f"{label}_build_s"] = spent[label].get(cell_id, (None, None))
            row[f"{label}_host_bound"] = host_bound(cell["enqueue_median_ms"], cell["compute_median_ms"]) if cell else None
        for label, against in pairs:
            new, old = figures[label].get(cell_id), figures[against].get(cell_id)
            ratio = ratio_of(new["latency_median_ms"], old["latency_median_ms"]) if new and old else None
            row[f"{label}_over_{against}"] = ratio
            row[f"{label}_vs_{against}"] = verdict(old, new) if ratio is not None else "not measured in both"
        rows.append(row)
    for label, against in pairs:
        summarize(rows, label, against)
    return rows


def cell_seconds(results: Path) -> dict[str, tuple[float | None, float | None]]:
    """Each cell's (duration_s, build_s) in a run's warehouse: the whole cell as its GPU spent it, and
    the engine's build within it (None where the cell recorded no build)."""
    from farm.warehouse import Warehouse

    rows = Warehouse(results).connect().execute(
        "SELECT c.cell_id, c.duration_s, b.build_s FROM cells c LEFT JOIN builds b USING (cell_id)").fetchall()
    return {cell_id: (duration, build) for cell_id, duration, build in rows}


def summarize(rows: list[dict], label: str, against: str) -> None:
    """One comparison, per cell: counts by verdict, then the cells furthest off."""
    import statistics

    from isolation import TOLERANCE, ratio_of, tally

    judged = [r for r in rows if r[f"{label}_over_{against}"] is not None]
    if not judged:
        print(f"\n{label} against {against}: no cell ok in both")
        return
    ratios = [r[f"{label}_over_{against}"] for r in judged]
    worst = max(ratios, key=lambda v: abs(v - 1))
    print(f"\n{label} against {against}, per cell (median latency): {len(judged)} cells, median ratio "
          f"{statistics.median(ratios):.3f}, worst {worst:.3f}; farm compare's verdict, minimum effect "
          f"{100 * TOLERANCE:.0f} %: "
          f"{tally([r[f'{label}_vs_{against}'] for r in judged])}")
    for r in sorted(judged, key=lambda r: -abs(r[f"{label}_over_{against}"] - 1))[:12]:
        mode = json.loads(r["options"] or "{}").get("mode", "")
        host = ratio_of(r[f"{label}_host_probe_ms"], r[f"{against}_host_probe_ms"])
        print(f"  {r['cell']} {r['precision']:<5} b{r['batch']:<4} {mode:<11} {r[f'{against}_ms']:>9.3f} ms -> "
              f"{r[f'{label}_ms']:>9.3f} ms  {r[f'{label}_over_{against}']:.3f}  host "
              f"{f'{host:.2f}' if host else '-':>4}  {r[f'{label}_vs_{against}']}")


def recorded_machine(warehouses: list[Path]) -> str:
    """The machine and farm commit the runs recorded (their warehouses, not where this script runs:
    --report may read runs from elsewhere), as isolation.machine() writes them: the GPUs of the run
    that used most, and a remark where the runs used other GPUs between them (another machine)."""
    from isolation import machine_line

    from farm.warehouse import Warehouse

    per_run: list[dict] = []
    cores, commits = set(), set()
    for results in warehouses:
        con = Warehouse(results).connect()
        per_run.append(dict(con.execute("SELECT device_id, name FROM devices WHERE kind = 'cuda'").fetchall()))
        for cpu_cores, commit in con.execute("SELECT DISTINCT cpu_cores, farm_commit FROM cells").fetchall():
            cores.add(cpu_cores)
            # short, but never dropping '+dirty': a tree with local changes is not that commit
            commits.add((commit or "?")[:7] + ("+dirty" if (commit or "").endswith("+dirty") else ""))
    most = max(per_run, key=len, default={})
    every = {k for run in per_run for k in run}
    line = machine_line(list(most.values()), max((c for c in cores if c), default=None), ", ".join(sorted(commits)))
    return line + (f" (the runs used {len(every)} different GPUs between them)" if len(every) > len(most) else "")


def runs_csv(cells_csv: Path) -> Path:
    """Where the runs' wall-time table goes beside a per-cell CSV: NAME-runs.csv."""
    return cells_csv.with_name(f"{cells_csv.stem}-runs.csv")


def run_rows(figures: dict[str, tuple]) -> list[dict]:
    """One row per finished run (figures.json's wall, idle per GPU and phases), for --csv."""
    rows = []
    for label, (wall, idle, *rest) in sorted(figures.items(), key=lambda kv: run_key(kv[0])):
        phases = rest[0] if rest else {}
        rows.append({"run": label, "gpus": gpu_count(label), "wall_s": round(wall, 3),
                     **{k: phases.get(k) for k in ("before_s", "cells_s", "after_s", "cells", "not_ok")},
                     "idle_s_per_gpu": " ".join(f"{i:.3f}" for i in idle)})
    return rows


def read_results(path: Path) -> tuple[list[str], list[dict]]:
    """A CSV written by write_csv: its comment lines (the machine, the note) and its rows."""
    import csv

    lines = path.read_text().splitlines()
    comments = [line[1:].strip() for line in lines if line.startswith("#")]
    return comments, list(csv.DictReader(line for line in lines if not line.startswith("#")))


def markdown(cells_csv: Path) -> str:
    """docs/running.md's scaling tables, from a committed per-cell CSV and its runs CSV (--csv wrote
    both): the runs, where their worker time went, each cell against 1 GPU, and a projection to
    twice the most GPUs measured over that run's own durations and pauses."""
    from isolation import TOLERANCE, tally

    comments, cells = read_results(cells_csv)
    _, runs = read_results(runs_csv(cells_csv))
    number = lambda v: float(v) if v not in (None, "") else None  # noqa: E731
    one = next(r for r in runs if r["run"] == "gpus1")
    out = [f"<!-- made by `python3 benchmarks/scaling.py --markdown {cells_csv.as_posix()}`: edit there -->",
           f"{'; '.join(comments)}.", "",
           "| GPUs | wall | speedup | efficiency | before the first cell | cell phase | after the last | idle per GPU "
           "| worker time |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for run in runs:
        n, wall = int(run["gpus"]), float(run["wall_s"])
        worker = sum(number(c.get(f"{run['run']}_duration_s")) or 0 for c in cells)
        idle = ", ".join(f"{float(i):.1f}" for i in run["idle_s_per_gpu"].split())
        speedup = float(one["wall_s"]) / wall
        out.append(f"| {n} | {wall:.1f} s | {speedup:.2f}× | {100 * speedup / n:.0f} % | {float(run['before_s']):.1f} s "
                   f"| {float(run['cells_s']):.1f} s | {float(run['after_s']):.1f} s | {idle} s | {worker:.1f} s |")
    modes = sorted({json.loads(c["options"] or "{}").get("mode", "") for c in cells})
    out += ["", "Worker time by execution mode (the cells' `duration_s`, their builds' `build_s` within it):", "",
            "| GPUs | " + " | ".join(modes) + " |", "| --- |" + " --- |" * len(modes)]
    for run in runs:
        label, parts = run["run"], []
        for mode in modes:
            mine = [c for c in cells if json.loads(c["options"] or "{}").get("mode", "") == mode]
            spent = sum(number(c.get(f"{label}_duration_s")) or 0 for c in mine)
            built = sum(number(c.get(f"{label}_build_s")) or 0 for c in mine)
            parts.append(f"{spent:.1f} s (build {built:.1f} s)")
        out.append(f"| {run['gpus']} | " + " | ".join(parts) + " |")
    out += ["", f"Each cell's median latency against 1 GPU, judged by farm compare's rule with {100 * TOLERANCE:.0f} % as "
            "the minimum effect; GPU-bound where the host's launches took under 0.8 of the GPU's compute on 1 GPU:", "",
            "| run | cells | ratio, GPU-bound | within 5 % | verdicts | ratio, host-bound | within 5 % | verdicts |",
            "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for run in runs[1:]:
        judged = [c for c in cells if number(c.get(f"{run['run']}_over_gpus1")) is not None]
        part = []
        for bound in ("False", "True"):
            group = [c for c in judged if c.get("gpus1_host_bound") == bound]
            ratios = [float(c[f"{run['run']}_over_gpus1"]) for c in group]
            within = sum(abs(r - 1) <= TOLERANCE for r in ratios)
            part += [f"{min(ratios):.3f}-{max(ratios):.3f} ({len(group)})" if ratios else "-", f"{within}",
                     tally([c[f"{run['run']}_vs_gpus1"] for c in group]) if group else "-"]
        out.append(f"| {run['run']} | {len(judged)} | " + " | ".join(part) + " |")
    widest = max(runs, key=lambda r: int(r["gpus"]))
    label, n = widest["run"], int(widest["gpus"])
    seconds = {c["cell"]: number(c.get(f"{label}_duration_s")) for c in cells}
    seconds = {k: v for k, v in seconds.items() if v is not None}
    idle = [float(i) for i in widest["idle_s_per_gpu"].split()]
    pause = sum(idle) / len(seconds)  # the GPU's wait before each cell (its tail included): measured, per cell
    fixed = float(widest["before_s"]) + float(widest["after_s"])
    out += ["", f"Projected from the {n}-GPU run's own cell durations (its cells beside {n - 1} others) plus its "
            f"measured pause of {pause:.2f} s before each cell, start-up and shutdown ({fixed:.1f} s): the scheduler "
            "in virtual time, longest first (`farm.scheduler.simulate`):", "",
            "| GPUs | wall | speedup over the measured 1 GPU | efficiency |", "| --- | --- | --- | --- |"]
    padded = {k: v + pause for k, v in seconds.items()}
    for gpus in (n, 2 * n):  # n: the model against the run it was taken from
        wall = fixed + simulated(padded, gpus, True, 0.0)[0]
        speedup = float(one["wall_s"]) / wall
        out.append(f"| {gpus} | {wall:.1f} s | {speedup:.2f}× | {100 * speedup / gpus:.0f} % |")
    return "\n".join(out) + "\n"


def write_csv(rows: list[dict], path: Path, machine: str, note: str | None = None) -> None:
    """The per-cell rows as CSV, the machine and farm's commit (and `note`) on comment lines above.
    Columns for every run; a cell a run did not measure has its fields empty."""
    import csv
    import io

    buffer = io.StringIO()
    buffer.write(f"# {machine}\n" + (f"# {' '.join(note.split())}\n" if note else ""))
    writer = csv.DictWriter(buffer, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(buffer.getvalue())
    print(f"per-cell figures written to {path}")


if __name__ == "__main__":
    main()
