"""Does a cell's figure depend on what ran before it or beside it? Each ok cell of a sweep, measured
inside the whole sweep, alone in a sweep of its own, and, for PyTorch eager batch-1 cells on CUDA,
beside a bare loop of the same network run between them (benchmarks/torch_bare_loop.py: torchvision,
no farm code, its thread kept on the quickest CPU before each round as farm's GPU cells are), with
the ratios per cell and the host's own speed as each ran (its CPU probe: `host`, in-sweep over
alone, 1.0 where the machine ran as fast both times); written as CSV with the machine and the commit.

    python3 benchmarks/isolation.py configs/resnet.toml --runs 2 --csv benchmarks/results/isolation-h100.csv
    python3 benchmarks/isolation.py --quick            # the suite: a tiny CNN on CPU, in-process cells

Per run: `farm sweep SWEEP` into a fresh warehouse (in-sweep); then, cell by cell in the sweep's
order, `farm sweep SWEEP --cells ID --force` into one other warehouse (alone: a fresh Ray and cell
process that ran nothing before it; the warehouse only keeps the exported models), each host-bound
eager cell followed by the bare loop (--quick: all of these at once, each alone sweep into a
warehouse of its own; its figures only show that the path works). Figures: the cells' median
latency (ms). The steps done are kept under --scratch, so a run stopped by a time limit goes on
where it stopped when started again.
Targets (ok cells, two runs on one machine): in-sweep / alone median <= 1.03, worst <= 1.10 for
host-bound cells (5 % for the rest); eager batch-1 cells within 10 % of the bare loop. Each row's
`verdict` on in-sweep against alone is farm compare's, with the cell's target as the minimum effect
(verdict(), which scaling.py's per-cell figures share): within noise, slower, faster, inconclusive
(the two runs were too noisy to tell) or not judged, with the change and its 95 % interval.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import datetime as dt
import json
import math
import os
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # farm itself, and tests.conftest for --quick
# The targets a cell's figure in one run is held to against another run of it (in-sweep against
# alone here, 2 GPUs against 1 in scaling.py): within 5 %, 10 % for a host-bound cell here.
TOLERANCE = 0.05
HOST_BOUND_TOLERANCE = 0.10
# the share of compute an enqueue takes for a cell to be held to HOST_BOUND_TOLERANCE here: half,
# as the committed isolation tables were classified (farm's own notes use farm.queries.HOST_BOUND_SHARE)
HOST_BOUND_SHARE = 0.5


def interval(cell: dict | None):
    """A cell's median latency and its stored 95 % interval (the measurements row's), as farm
    compare reads a cell without its samples: NaN bounds where the interval is missing (farm
    compare then gives the change but no verdict); None without a median."""
    from farm.compare.stats import MedianInterval

    if not cell or not cell.get("latency_median_ms"):
        return None
    low, high = (math.nan if cell.get(k) is None else cell[k] for k in ("median_ci_low_ms", "median_ci_high_ms"))
    return MedianInterval(cell["latency_median_ms"], low, high, "stored")


def verdict(base: dict | None, new: dict | None, tolerance: float = TOLERANCE) -> str:
    """NEW's figure against BASE's (one cell on two runs), by farm compare's rule with the tolerance as
    the minimum effect (farm.compare.stats: the 95 % interval of the ratio of the medians, from each
    median's own interval, which holds how far the cell's repeats moved): 'within noise' where the
    whole interval lies within the tolerance, 'slower' / 'faster' where it lies wholly beyond it,
    'inconclusive' where it straddles it (the runs were too noisy to tell), 'not judged' where a run
    has no interval; then the change and its interval."""
    from farm.compare.stats import effect_interval

    effect = effect_interval(interval(base), interval(new), 100 * tolerance)
    if math.isnan(effect.low):
        change = "no figure" if math.isnan(effect.effect) else f"{100 * effect.effect:+.1f} %"
        return f"{effect.verdict} ({change}; a run has no interval)"
    return (f"{effect.verdict} ({100 * effect.effect:+.1f} %, 95 % interval {100 * effect.low:+.1f} to "
            f"{100 * effect.high:+.1f} %)")


def tally(verdicts: list[str]) -> str:
    """How many comparisons each verdict took."""
    from farm.compare.stats import FASTER, INCONCLUSIVE, NOT_JUDGED, SLOWER, WITHIN_NOISE

    return ", ".join(f"{word}: {sum(v.startswith(word + ' (') for v in verdicts)}"
                     for word in (WITHIN_NOISE, SLOWER, FASTER, INCONCLUSIVE, NOT_JUDGED))


FIGURES = ("latency_median_ms", "median_ci_low_ms", "median_ci_high_ms", "enqueue_median_ms", "compute_median_ms",
           "repeat_spread_percent", "stable", "host_probe_median_ms")
QUICK_SWEEP = """name = "isolation-quick"
[[models]]
source = "{model}"
[axes]
precisions = ["fp32"]
batch_sizes = [1]
backends = ["onnxruntime", "torch"]
[backends.torch]
device = "cpu"
[measurement]
warmup_ms = 20
min_iterations = 5
min_duration_ms = 50
repeats = 2
layer_iterations = 1
"""


def farm(*args: str) -> str:
    """Runs `farm ARGS`; its output (stdout and stderr together)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, "-m", "farm", *args], env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)
    if done.returncode not in (0, 1):  # 1: a cell failed, which the table leaves out (ok cells only)
        raise SystemExit(f"farm {' '.join(args)} exited {done.returncode}:\n{done.stdout[-3000:]}")
    return done.stdout


def ok_cells(results: Path, only: set[str] | None = None) -> list[dict]:
    """The ok cells of a warehouse with their figures, in the order they started."""
    from farm.warehouse import Warehouse

    con = Warehouse(results).connect()
    rows = con.execute(f"SELECT c.cell_id, c.model, c.backend, CAST(c.options AS VARCHAR), c.precision, c.batch, "
                       f"{', '.join('m.' + k for k in FIGURES)} FROM cells c JOIN measurements m USING (cell_id) "
                       "WHERE c.status = 'ok' ORDER BY c.started_at").fetchall()
    names = ("cell_id", "model", "backend", "options", "precision", "batch", *FIGURES)
    cells = [dict(zip(names, row)) for row in rows]
    return [c for c in cells if only is None or c["cell_id"] in only]


def eager_batch1(cell: dict, device: str) -> bool:
    options = json.loads(cell["options"] or "{}")
    return (cell["backend"] == "torch" and options.get("mode", "eager") == "eager" and int(cell["batch"]) == 1
            and options.get("device", "cuda") == device)


def bare_loop(cell: dict, quick: bool, out: Path) -> float | None:
    """The bare loop's median latency for a PyTorch eager batch-1 cell's network, precision and batch
    (on CUDA; --quick: its tiny CNN on CPU beside the CPU cells); None for every other cell."""
    if not eager_batch1(cell, "cpu" if quick else "cuda"):
        return None
    args = (["--quick", "--device", "cpu", "--precisions", "fp32"] if quick else
            ["--model", cell["model"], "--precisions", cell["precision"], "--modes", "eager", "--quickest-cpu"])
    subprocess.run([sys.executable, str(ROOT / "benchmarks" / "torch_bare_loop.py"), *args, "--batches", "1",
                    "--json", str(out)], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    rows = json.loads(out.read_text())["rows"]
    return statistics.median(r["latency_median_ms"] for r in rows)


@contextlib.contextmanager
def alone_cluster(shared: bool):
    """The extra `farm sweep` arguments of the alone sweeps: none (each starts its own Ray), or, with
    --shared-ray, `--address auto` to one local cluster started here for the alone phase only
    (farm's sweeps without --address start a Ray of their own beside it; `ray stop` after it ends
    every Ray of this user on the machine)."""
    if not shared:
        yield ()
        return
    ray = [sys.executable, "-m", "ray.scripts.scripts"]  # the `ray` command of this Python
    from farm.executor.ray_farm import RAY_SYSTEM_CONFIG  # as farm starts its own

    subprocess.run([*ray, "start", "--head", "--disable-usage-stats", f"--system-config={json.dumps(RAY_SYSTEM_CONFIG)}"],
                   check=True, stdout=subprocess.DEVNULL)
    try:
        yield ("--address", "auto")
    finally:
        subprocess.run([*ray, "stop"], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)


def one_run(sweep: Path, scratch: Path, run: int, quick: bool, executor: str, shared_ray: bool = False,
            deadline: float = float("inf")) -> list[dict]:
    """One run's rows; the steps already done (kept in --scratch) are not taken again, and none is
    started after `deadline` (time.monotonic()): its cells' figures stay empty."""
    state_path = scratch / f"run{run}.json"
    state = json.loads(state_path.read_text()) if state_path.exists() else {"alone": {}, "bare": {}}
    in_sweep = scratch / f"run{run}-sweep"
    if not state.get("swept") and time.monotonic() > deadline:
        return []
    if not state.get("swept"):
        output = farm("sweep", str(sweep), "--results", str(in_sweep), "--executor", executor, "--force")
        (scratch / f"run{run}-sweep.log").write_text(output)  # the main job's output as a user sees it
        state["swept"] = True
        state_path.write_text(json.dumps(state))
    cells = ok_cells(in_sweep)
    alone = scratch / "alone"
    todo = [cell for cell in cells if cell["cell_id"] not in state["alone"]]
    if quick and todo and time.monotonic() < deadline:
        _side_by_side(todo, sweep, executor, state, state_path, scratch, run)
        todo = []
    with alone_cluster(shared_ray and bool(todo) and time.monotonic() < deadline) as alone_args:
        for cell in todo:
            if time.monotonic() > deadline:
                break
            _alone(cell, sweep, alone, executor, alone_args, state, state_path, quick, scratch, run)
    return [_row(cell, state, run) for cell in cells]


def _row(cell: dict, state: dict, run: int) -> dict:
    """One ok cell's figures in the sweep, alone and beside the bare loop, and the verdict on the
    in-sweep figure against the alone one."""
    from farm.queries import host_bound as is_host_bound

    options = json.loads(cell["options"] or "{}")
    cid = cell["cell_id"]
    host_bound = is_host_bound(cell["enqueue_median_ms"], cell["compute_median_ms"], HOST_BOUND_SHARE)
    alone = state["alone"].get(cid) or {}
    if not isinstance(alone, dict):  # a step kept by an older isolation.py: the median alone
        alone = {"latency_median_ms": alone}
    alone_ms, bare_ms = alone.get("latency_median_ms"), state["bare"].get(cid)
    ratio = ratio_of(cell["latency_median_ms"], alone_ms)
    return {"run": run, "cell": cid[:8], "model": cell["model"], "backend": cell["backend"],
            "variant": options.get("mode") or ("graphs" if options.get("cuda_graph") else "no-graphs"),
            "options": json.dumps(options, sort_keys=True),
            "precision": cell["precision"], "batch": cell["batch"], "host_bound": host_bound,
            "in_sweep_ms": cell["latency_median_ms"], "alone_ms": alone_ms, "bare_ms": bare_ms,
            "in_sweep_over_alone": ratio, "in_sweep_over_bare": ratio_of(cell["latency_median_ms"], bare_ms),
            "stable": cell["stable"], "repeat_spread_percent": cell["repeat_spread_percent"],
            "alone_repeat_spread_percent": alone.get("repeat_spread_percent"),
            "in_sweep_host_probe_ms": cell["host_probe_median_ms"],
            "alone_host_probe_ms": alone.get("host_probe_median_ms"),
            "verdict": (verdict(alone, cell, HOST_BOUND_TOLERANCE if host_bound else TOLERANCE)
                        if ratio is not None else "not measured alone")}


def _alone(cell: dict, sweep: Path, alone: Path, executor: str, alone_args: tuple[str, ...], state: dict,
           state_path: Path, quick: bool, scratch: Path, run: int) -> None:
    """The cell in a sweep of its own, then (eager batch 1) the bare loop; kept in the state file."""
    cid = cell["cell_id"]
    farm("sweep", str(sweep), "--results", str(alone), "--executor", executor, "--cells", cid, "--force", *alone_args)
    figures = ok_cells(alone, {cid})
    bare = state["bare"][cid] if cid in state["bare"] else bare_loop(cell, quick, scratch / f"bare-{run}-{cid}.json")
    _record(state, state_path, cid, figures, bare)


def _side_by_side(todo: list[dict], sweep: Path, executor: str, state: dict, state_path: Path, scratch: Path,
                  run: int) -> None:
    """--quick: every cell's alone sweep (each into a warehouse of its own: one writer each) and bare
    loop at once, tiny CPU cells whose figures only show that the path works; kept in the state file."""
    def alone(cell: dict) -> list[dict]:
        cid, warehouse = cell["cell_id"], scratch / f"alone-{cell['cell_id'][:8]}"
        farm("sweep", str(sweep), "--results", str(warehouse), "--executor", executor, "--cells", cid, "--force")
        return ok_cells(warehouse, {cid})

    with ThreadPoolExecutor(2 * len(todo)) as pool:
        figures = [pool.submit(alone, cell) for cell in todo]
        bare = [pool.submit(bare_loop, cell, True, scratch / f"bare-{run}-{cell['cell_id']}.json") for cell in todo]
    for cell, found, loop in zip(todo, figures, bare):
        _record(state, state_path, cell["cell_id"], found.result(), loop.result())


def _record(state: dict, state_path: Path, cid: str, figures: list[dict], bare: float | None) -> None:
    """The alone cell's figures (its median and interval, repeat spread, and the host's speed as it
    ran, farm.measure.host_probe_ms: a ratio away from 1 beside a host that ran at another speed is
    the machine's doing; None where it was not ok) and the bare loop's, kept in the state file."""
    state["alone"][cid] = {key: figures[0][key] for key in FIGURES} if figures else None
    state["bare"][cid] = bare
    state_path.write_text(json.dumps(state))


def ratio_of(a, b) -> float | None:
    return a / b if a and b else None


def machine(commit: str | None = None) -> str:
    """This machine's GPUs, CPUs and farm's commit, as the CSVs' first line gives them."""
    try:
        gpus = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                              text=True, timeout=30).stdout.strip().splitlines()
    except (OSError, subprocess.SubprocessError):
        gpus = []
    commit = commit or subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                      text=True).stdout
    return machine_line(gpus, os.cpu_count(), commit)


def machine_line(gpus: list[str], cpus: int | None, commit: str) -> str:
    """"2x NVIDIA H100 80GB HBM3, 32 CPUs; farm 8e8c983": GPU names, one per GPU."""
    names = ", ".join(sorted(set(gpus)))
    return ((f"{len(gpus)}x {names}" if gpus else "no GPU") + (f", {cpus} CPUs" if cpus else "")
            + f"; farm {commit.strip() or '?'}")


def report(rows: list[dict]) -> None:
    print(f"{'run':>3} {'cell':<8} {'model':<9} {'backend':<11} {'variant':<10} {'prec':<5} {'b':>3} "
          f"{'in-sweep':>9} {'alone':>9} {'ratio':>6} {'bare':>8} {'/bare':>6} {'host':>6}  host-bound  verdict")
    for r in rows:
        print(f"{r['run']:>3} {r['cell']:<8} {r['model'][:9]:<9} {r['backend']:<11} {r['variant']:<10} "
              f"{r['precision']:<5} {r['batch']:>3} {r['in_sweep_ms']:>9.3f} {_num(r['alone_ms'], 9)} "
              f"{_num(r['in_sweep_over_alone'], 6)} {_num(r['bare_ms'], 8)} {_num(r['in_sweep_over_bare'], 6)} "
              f"{_num(ratio_of(r['in_sweep_host_probe_ms'], r['alone_host_probe_ms']), 6)}  "
              f"{'yes' if r['host_bound'] else 'no':<10}  {r['verdict']}")
    ratios = [r["in_sweep_over_alone"] for r in rows if r["in_sweep_over_alone"]]
    if ratios:
        verdicts = [r["verdict"] for r in rows if r["in_sweep_over_alone"]]
        print(f"in-sweep / alone over {len(ratios)} cells: median {statistics.median(ratios):.3f}, "
              f"worst {max(ratios, key=lambda v: abs(v - 1)):.3f} (targets: median <= 1.03, worst <= 1.10); "
              f"targets per cell {100 * TOLERANCE:.0f} %, {100 * HOST_BOUND_TOLERANCE:.0f} % host-bound: {tally(verdicts)}")
    bare = [r["in_sweep_over_bare"] for r in rows if r["in_sweep_over_bare"]]
    if bare:
        print(f"in-sweep / bare loop over {len(bare)} eager batch-1 cells: worst {max(bare):.3f} (target <= 1.10)")


def markdown(files: list[Path]) -> str:
    """docs/gpu-figures.md's table of committed runs (--csv files): per machine and run, in-sweep over
    alone: the median, the GPU-bound cells' span, the host-bound cells within HOST_BOUND_TOLERANCE,
    the furthest cell, and the eager batch-1 cells over the bare loop."""
    import re

    def span(values: list[float]) -> str:
        return f"{min(values):.3f} to {max(values):.3f}" if values else "-"

    out = [f"<!-- made by `python3 benchmarks/isolation.py --markdown {' '.join(f.as_posix() for f in files)}`: "
           "edit there -->",
           "| machine, run | cells | median | GPU-bound cells | host-bound cells within "
           f"{100 * HOST_BOUND_TOLERANCE:.0f} % | furthest | in-sweep / bare loop |",
           "| --- | --- | --- | --- | --- | --- | --- |"]
    for path in files:
        text = path.read_text()
        gpu = re.search(r"NVIDIA (\w+)", text.splitlines()[0])
        rows = list(csv.DictReader(line for line in text.splitlines() if not line.startswith("#")))
        for run in sorted({r["run"] for r in rows}, key=int):
            done = [r for r in rows if r["run"] == run and r["in_sweep_over_alone"]]
            ratios = [float(r["in_sweep_over_alone"]) for r in done]
            gpu_bound = [float(r["in_sweep_over_alone"]) for r in done if r["host_bound"] != "True"]
            host = [float(r["in_sweep_over_alone"]) for r in done if r["host_bound"] == "True"]
            within = sum(abs(v - 1) <= HOST_BOUND_TOLERANCE for v in host)
            bare = [float(r["in_sweep_over_bare"]) for r in done if r["in_sweep_over_bare"]]
            out.append(f"| {gpu[1] if gpu else path.stem}, run {run} | {len(done)} | {statistics.median(ratios):.3f} | "
                       f"{span(gpu_bound)} ({len(gpu_bound)}) | {within} of {len(host)} | "
                       f"{max(ratios, key=lambda v: abs(math.log(v))):.3f} | {span(bare)} |")
    return "\n".join(out) + "\n"


def _num(value, width: int) -> str:
    return f"{value:>{width}.3f}" if isinstance(value, (int, float)) else f"{'-':>{width}}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sweep", nargs="?", type=Path, default=ROOT / "configs" / "resnet.toml")
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--scratch", type=Path, default=Path("/tmp/farm-isolation"),
                        help="warehouses and the steps done (a stopped run resumes from here)")
    parser.add_argument("--csv", type=Path, help="write the rows here, the machine and commit in its first lines")
    parser.add_argument("--quick", action="store_true",
                        help="a tiny CNN on CPU, cells in-process, the alone steps side by side: the suite")
    parser.add_argument("--commit", help="the farm commit to write (default: git's, where this is a checkout)")
    parser.add_argument("--shared-ray", action="store_true",
                        help="the alone sweeps join one local Ray cluster started here (`ray start --head`) "
                             "instead of each starting its own: ~10 s less per cell; each still gets fresh workers")
    parser.add_argument("--budget-s", type=float, default=float("inf"),
                        help="take no new step after this many seconds: the CSV then holds what is done "
                             "(marked PARTIAL) and a later call with the same --scratch goes on")
    parser.add_argument("--markdown", type=Path, nargs="+", metavar="CSV",
                        help="print docs/gpu-figures.md's table of these committed runs, and nothing else")
    args = parser.parse_args()
    if args.markdown:
        sys.stdout.write(markdown(args.markdown))
        return 0
    deadline = time.monotonic() + args.budget_s
    args.scratch.mkdir(parents=True, exist_ok=True)
    sweep, executor = args.sweep, "ray"
    if args.quick:
        from tests.conftest import tiny_cnn

        model = tiny_cnn(args.scratch / "tiny.onnx")
        sweep = args.scratch / "quick.toml"
        sweep.write_text(QUICK_SWEEP.format(model=model.as_posix()))
        executor = "local"
    runs = 1 if args.quick else args.runs
    rows = [row for run in range(1, runs + 1)
            for row in one_run(sweep, args.scratch, run, args.quick, executor, args.shared_ray and not args.quick,
                               deadline)]
    report(rows)
    if args.csv and rows:
        args.csv.parent.mkdir(parents=True, exist_ok=True)
        with args.csv.open("w", newline="") as f:
            f.write(f"# benchmarks/isolation.py {sweep.name}, {machine(args.commit)}, {dt.date.today()}\n")
            undone = sum(r["alone_ms"] is None for r in rows)
            if undone or len({r["run"] for r in rows}) < runs:
                f.write(f"# PARTIAL: {len({r['run'] for r in rows})} of {runs} runs, "
                        f"{undone} ok cell(s) not yet measured alone\n")
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
        print(f"wrote {args.csv}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
