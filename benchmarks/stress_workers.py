"""Does a sweep survive its workers dying? Real kills and real memory blow-ups, at random moments.

Runs `farm sweep` (the real command, local Ray) on a sweep of small CNN cells plus cells whose
input alone needs gigabytes, with a worker memory limit, while a killer thread sends SIGKILL or
SIGSEGV at random moments to a random cell process or Ray worker actor of the sweep. Then checks
what a user would: the sweep ended by itself (exit 0 or 1, no traceback), every planned cell is
in the warehouse exactly once, every `ok` cell has its measurement, every failed cell says why;
and that a rerun without kills measures again every cell the kills failed (the blow-ups fail
again), still once each.

    .venv/bin/python benchmarks/stress_workers.py              # >= 20 kills + blow-ups
    .venv/bin/python benchmarks/stress_workers.py --quick      # a few of each, sooner (the test suite runs this)

Prints the kills sent (by target and signal), blow-ups stopped, retries, cells by status, and the
verdict; exits 1 if any check failed.
"""

from __future__ import annotations

import argparse
import collections
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent


def small_cnn(path: Path, spatial: int) -> None:
    """Conv -> Relu -> GlobalAveragePool -> Flatten -> Gemm with a dynamic batch."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name) for name, shape in
               (("w", (8, 3, 3, 3)), ("b", (8,)), ("fw", (5, 8)), ("fb", (5,)))]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]), helper.make_node("GlobalAveragePool", ["r"], ["p"]),
             helper.make_node("Flatten", ["p"], ["f"]), helper.make_node("Gemm", ["f", "fw", "fb"], ["y"], transB=1)]
    graph = helper.make_graph(nodes, "small", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                             ["batch", 3, spatial, spatial])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 5])], weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)


def sweep_file(folder: Path, cells: int, hogs: int, measure_ms: int = 1500) -> Path:
    small_cnn(folder / "small.onnx", 32)
    small_cnn(folder / "wide.onnx", 256)  # at batch 4096 its input alone is 3.2 GB
    batches = ", ".join(str(b) for b in range(1, cells + 1))
    hog_batches = ", ".join(str(4096 + i) for i in range(hogs))
    text = f"""
name = "stress"
[[models]]
source = "small.onnx"
[[models]]
source = "wide.onnx"
[axes]
batch_sizes = [{batches}, {hog_batches}]
[measurement]
warmup_ms = 50
min_iterations = 10
min_duration_ms = {measure_ms}
repeats = 1
layer_iterations = 2
[accuracy]
enabled = false
"""
    path = folder / "stress.toml"
    path.write_text(text)
    return path


def farm_processes(sweep_pid: int) -> dict[int, str]:
    """pid -> 'cell' (a cell process) or 'actor' (a Ray worker actor) of the sweep `sweep_pid`
    (its local Ray runs under it, so they are its descendants: other sweeps are left alone)."""
    import psutil

    found = {}
    try:
        descendants = psutil.Process(sweep_pid).children(recursive=True)
    except psutil.Error:
        return found
    for process in descendants:
        try:
            cmdline = " ".join(process.cmdline())
        except psutil.Error:
            continue
        if "farm.executor.cell_process" in cmdline:
            found[process.pid] = "cell"
        elif cmdline.startswith("ray::CellWorker"):
            found[process.pid] = "actor"
    return found


class KillerThread(threading.Thread):
    def __init__(self, kills: int, seed: int, pause_s: tuple[float, float] = (0.5, 3.0)) -> None:
        super().__init__(daemon=True)
        self.kills, self.rng, self.pause_s = kills, random.Random(seed), pause_s
        self.sweep_pid = 0  # set before start()
        self.sent: collections.Counter = collections.Counter()
        self.done = threading.Event()

    def run(self) -> None:
        while sum(self.sent.values()) < self.kills and not self.done.wait(self.rng.uniform(*self.pause_s)):
            targets = farm_processes(self.sweep_pid)
            if not targets:
                continue
            # mostly cell processes (where a segfault or an OOM kill lands), sometimes the actor itself
            kind = "actor" if self.rng.random() < 0.25 else "cell"
            pids = [p for p, k in targets.items() if k == kind] or list(targets)
            pid = self.rng.choice(pids)
            sig = signal.SIGSEGV if self.rng.random() < 0.2 else signal.SIGKILL
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                continue
            self.sent[(targets[pid], sig.name)] += 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a few kills and blow-ups (for the test suite)")
    parser.add_argument("--kills", type=int, default=None, help="kills to send (default 24, quick 3)")
    parser.add_argument("--cells", type=int, default=None, help="small-model batch sizes (default 14, quick 3)")
    parser.add_argument("--hogs", type=int, default=None, help="cells that blow up memory (default 2, quick 1)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--results", type=Path, default=None, help="warehouse folder (default: a temporary one)")
    args = parser.parse_args()
    kills = args.kills if args.kills is not None else (3 if args.quick else 24)
    cells = args.cells if args.cells is not None else (3 if args.quick else 14)
    hogs = args.hogs if args.hogs is not None else (1 if args.quick else 2)
    # --quick: shorter cells and kills closer together (the blow-ups take as long either way)
    measure_ms, pause_s = (300, (0.2, 1.0)) if args.quick else (1500, (0.5, 3.0))
    retries = 3

    with tempfile.TemporaryDirectory(prefix="farm-stress-") as tmp:
        folder = Path(tmp)
        results = args.results or folder / "results"
        config = sweep_file(folder, cells, hogs, measure_ms)
        killer = KillerThread(kills, args.seed, pause_s)
        command = [sys.executable, "-m", "farm", "sweep", str(config), "--results", str(results),
                   "--retries", str(retries), "--worker-memory", "1GiB"]
        begin = time.monotonic()
        proc = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env={**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "500"})  # no folded lines
        killer.sweep_pid = proc.pid
        killer.start()
        out, err = proc.communicate()
        killer.done.set()
        killer.join()
        seconds = time.monotonic() - begin

        from farm.warehouse import Warehouse

        con = Warehouse(results).connect()
        planned = 2 * (cells + hogs)
        rows, distinct = con.execute("SELECT count(*), count(DISTINCT cell_id) FROM cells").fetchone()
        statuses = dict(con.execute("SELECT status, count(*) FROM cells GROUP BY status").fetchall())
        unmeasured = con.execute("SELECT count(*) FROM cells LEFT JOIN measurements m USING (cell_id) "
                                 "WHERE status = 'ok' AND m.cell_id IS NULL").fetchone()[0]
        reasonless = con.execute("SELECT count(*) FROM cells WHERE status = 'failed' "
                                 "AND coalesce(reason, '') = ''").fetchone()[0]
        reasons = [r for (r,) in con.execute("SELECT reason FROM cells WHERE status = 'failed'").fetchall()]
        text = out + err
        retry_lines = [line for line in text.splitlines() if "worker died during the cell" in line]
        retried = len(retry_lines)
        # each blow-up is either retried (a log line) or the last death of a failed cell
        blowups = sum("out of memory: the cell's processes used" in line for line in retry_lines) + \
            sum(r.startswith("out of memory: the cell's processes used") for r in reasons)
        sent = sum(killer.sent.values())

        print(f"farm sweep: exit {proc.returncode} in {seconds:.0f} s; {planned} cells planned, "
              f"{retries} retries per cell, worker memory limit 1 GiB")
        targets = {"actor": "a Ray worker actor", "cell": "a cell process"}
        sent_text = ", ".join(f"{n} {sig} to {targets[k]}" for (k, sig), n in sorted(killer.sent.items()))
        print(f"kills sent: {sent} ({sent_text})")
        print(f"memory blow-ups stopped by the limit: {blowups}; deaths retried: {retried}")
        print(f"warehouse: {rows} cell rows, {distinct} distinct; by status: {dict(sorted(statuses.items()))}")
        for reason in sorted(set(reasons)):
            print(f"  failed: {reason}")
        # The rerun, in peace: cells that failed from kills are measured again, blow-ups fail again,
        # and still every cell is there once.
        rerun = subprocess.run(command, cwd=ROOT, capture_output=True, text=True,
                               env={**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "500"})
        con = Warehouse(results).connect()
        after = dict(con.execute("SELECT status, count(*) FROM cells GROUP BY status").fetchall())
        rows_after, distinct_after = con.execute("SELECT count(*), count(DISTINCT cell_id) FROM cells").fetchone()
        print(f"rerun without kills: exit {rerun.returncode}; by status: {dict(sorted(after.items()))}")
        checks = {
            "the sweep ended by itself (exit 0 or 1)": proc.returncode in (0, 1),
            "no traceback": "Traceback" not in text,
            "every planned cell recorded exactly once": rows == distinct == planned,
            "every ok cell has its measurement": unmeasured == 0,
            "every failed cell says why": reasonless == 0,
            f"at least {kills} kills and blow-ups together": sent + blowups >= kills,
            "the rerun measured every cell but the blow-ups": after == {"ok": planned - hogs, "failed": hogs},
            "the rerun kept every cell exactly once": rows_after == distinct_after == planned,
        }
        for name, passed in checks.items():
            print(f"{'PASS' if passed else 'FAIL'}  {name}")
        if "Traceback" in text or proc.returncode not in (0, 1):
            print(text[-4000:])
        return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
