"""Does a sweep come through a busy box? Runs a farm command while other programs load every CPU
(--cpu-load busy processes, default twice the cores) and fill the node's memory in waves: up to
--memory-high of it in use (default 0.96, above Ray's memory monitor's 0.95), held --hold-s seconds,
then down to --memory-low for --rest-s, again and again until the command ends. Never more than
the memory available less 512 MiB is taken, so the kernel's OOM killer is not the one to act.

    .venv/bin/python benchmarks/busy_box.py --results /tmp/busy -- bin/farm sweep configs/resnet.toml --results /tmp/busy
    .venv/bin/python benchmarks/busy_box.py --quick   # the test suite: a small sweep, Ray's threshold set for it alone

--ray-threshold T gives the command's Ray its own memory threshold (RAY_memory_usage_threshold) and
makes the waves cross it (T + 0.02 high, T - 0.10 low), so that the path is taken without filling
the machine: the quick mode sets it 0.14 above the memory in use when it starts (room for Ray and
the sweep's processes). The command is stopped after --timeout seconds.

Prints the command's exit status, how long the node's memory was above the threshold (and in how
many waves), and from the warehouse (--results): the cells by status, those run more than once and
how their earlier runs ended, and any cell that failed for memory.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CHUNK = 64 << 20  # the memory program's step: 64 MiB, every page written
HEADROOM = 512 << 20  # never taken: what the kernel needs to stay out of the way
RISE_S = 120.0  # a wave's longest climb: a virtual machine's fresh pages come at a few hundred MB/s

QUICK_SWEEP = """name = "busy"
[[models]]
name = "tiny"
source = "tiny.onnx"
[axes]
precisions = ["fp32"]
batch_sizes = [1, 2, 4, 8, 16, 32]
[measurement]
warmup_ms = 50
min_iterations = 20
min_duration_ms = 1000
repeats = 3
layer_iterations = 0
"""


def spin(stop) -> None:
    """A CPU-bound program: busy until told to stop."""
    x = 0
    while not stop.is_set():
        for _ in range(100_000):
            x += 1


def fill(stop, high: float, low: float, hold_s: float, rest_s: float, start_s: float, waves) -> None:
    """A memory-hungry program: after `start_s`, its allocation follows the node's use up to `high`
    of it (RISE_S at most to get there) and holds it `hold_s`, then down to `low` for `rest_s`, over
    and over."""
    import psutil

    held: list[bytearray] = []
    stop.wait(start_s)
    while not stop.is_set():
        waves.value += 1
        for target, seconds in ((high, hold_s), (low, rest_s)):
            deadline, reached = time.monotonic() + (RISE_S + seconds if target == high else seconds), False
            while time.monotonic() < deadline and not stop.is_set():
                memory = psutil.virtual_memory()
                used = memory.percent / 100
                if used < target - 0.005 and memory.available > HEADROOM + CHUNK:
                    held.append(bytearray(b"\1") * CHUNK)  # every byte written: resident, not just reserved
                    continue
                if target == high and not reached:  # there: hold it from now
                    reached, deadline = True, min(deadline, time.monotonic() + seconds)
                if used > target + 0.01 and held:
                    held.pop()
                else:
                    time.sleep(0.05)
    held.clear()


def watch(stop: threading.Event, threshold: float, above: list[float]) -> None:
    """Seconds the node's memory spent at or above `threshold` (Ray's monitor's trigger)."""
    import psutil

    while not stop.is_set():
        if psutil.virtual_memory().percent / 100 >= threshold:
            above[0] += 0.25
        time.sleep(0.25)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cpu-load", type=int, default=2 * len(os.sched_getaffinity(0)),
                        help="busy programs (default: twice this process's CPUs)")
    parser.add_argument("--memory-high", type=float, default=0.96)
    parser.add_argument("--memory-low", type=float, default=0.85)
    parser.add_argument("--hold-s", type=float, default=20.0, help="seconds each wave stays high (default 20)")
    parser.add_argument("--rest-s", type=float, default=120.0,
                        help="seconds between waves (default 120: longer than a cell, which a wave stops)")
    parser.add_argument("--start-s", type=float, default=0.0, help="seconds before the first wave (default 0)")
    parser.add_argument("--ray-threshold", type=float, default=None,
                        help="the command's Ray memory threshold; the waves then cross it")
    parser.add_argument("--results", type=Path, default=None, help="the warehouse the command writes")
    parser.add_argument("--timeout", type=float, default=3600.0, help="stop the command after this long (s)")
    parser.add_argument("--quick", action="store_true", help="a small sweep with its own threshold (the test suite)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command (default with --quick)")
    args = parser.parse_args()
    command = [c for c in args.command if c != "--"] if args.command else []
    env = dict(os.environ)
    if args.quick:
        import psutil

        from tests.conftest import tiny_cnn

        work = Path(tempfile.mkdtemp(prefix="farm-busy-"))
        tiny_cnn(work / "tiny.onnx", channels=16, spatial=16)
        (work / "busy.toml").write_text(QUICK_SWEEP)
        args.results = work / "results"
        command = [sys.executable, "-m", "farm", "sweep", str(work / "busy.toml"), "--results", str(args.results),
                   "--executor", "ray"]
        # above what Ray and the sweep's own processes add (a retry waits for 0.05 under it)
        args.ray_threshold = args.ray_threshold or min(0.9, psutil.virtual_memory().percent / 100 + 0.14)
        # a wave from the start (it takes seconds to climb, while Ray starts and the first cells run),
        # then room for the retries to finish
        args.cpu_load, args.hold_s, args.rest_s, args.start_s, args.timeout = min(args.cpu_load, 2), 12.0, 30.0, 0.0, 300.0
    if not command:
        parser.error("give the command after --, or --quick")
    threshold = 0.95
    if args.ray_threshold is not None:
        threshold = args.ray_threshold
        env["RAY_memory_usage_threshold"] = f"{threshold:.3f}"
        args.memory_high, args.memory_low = threshold + 0.02, threshold - 0.10
    env["PYTHONPATH"] = f"{ROOT}{os.pathsep}{env.get('PYTHONPATH', '')}"

    context = multiprocessing.get_context("spawn")
    stop, waves = context.Event(), context.Value("i", 0)
    others = [context.Process(target=spin, args=(stop,), daemon=True) for _ in range(args.cpu_load)]
    others.append(context.Process(target=fill, args=(stop, args.memory_high, args.memory_low, args.hold_s,
                                                     args.rest_s, args.start_s, waves), daemon=True))
    above, watching = [0.0], threading.Event()
    watcher = threading.Thread(target=watch, args=(watching, threshold, above), daemon=True)
    for process in others:
        process.start()
    watcher.start()
    started = time.monotonic()
    try:
        try:
            done = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True, timeout=args.timeout)
        except subprocess.TimeoutExpired as exc:
            done = subprocess.CompletedProcess(command, f"timed out after {args.timeout:.0f} s",
                                               exc.stdout or "", exc.stderr or "")
    finally:
        stop.set()
        watching.set()
        for process in others:
            process.join(10)
    seconds = time.monotonic() - started
    print(f"{' '.join(command[-6:])}: exit {done.returncode} after {seconds:.0f} s, beside {args.cpu_load} busy "
          f"programs and memory in {waves.value} waves up to {args.memory_high:.2f} of the node "
          f"(Ray's threshold {threshold:.2f}: above it {above[0]:.1f} s)")
    if done.returncode not in (0, 1):
        print(str(done.stdout)[-3000:] + str(done.stderr)[-3000:])
    if args.results is not None and args.results.is_dir():
        report(args.results)
    if args.quick:
        import shutil

        shutil.rmtree(args.results.parent, ignore_errors=True)  # the quick mode's own folder
    return 0


def report(results: Path) -> None:
    """The cells by status; those run more than once and how their earlier runs ended; memory failures."""
    from farm.warehouse import WarehouseReader

    warehouse = WarehouseReader(results)
    connection = warehouse.connect()
    _, rows = warehouse.fetch(connection, "SELECT status, count(*) FROM cells GROUP BY status ORDER BY status")
    print("cells: " + ", ".join(f"{status} {n}" for status, n in rows))
    _, rows = warehouse.fetch(connection, "SELECT cell_id, attempts, earlier_attempts FROM cells WHERE attempts > 1 "
                                          "ORDER BY cell_id")
    print(f"run more than once: {len(rows)}")
    for cell_id, attempts, earlier in rows:
        print(f"  {str(cell_id)[:8]}: {attempts} runs; before: {earlier}")
    _, rows = warehouse.fetch(connection, "SELECT cell_id, reason FROM cells WHERE status = 'failed' "
                                          "AND reason ILIKE '%memory%' ORDER BY cell_id")
    print(f"failed for memory: {len(rows)}")
    for cell_id, reason in rows:
        print(f"  {str(cell_id)[:8]}: {reason}")


if __name__ == "__main__":
    sys.exit(main())
