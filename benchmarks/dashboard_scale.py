"""Does the dashboard stay responsive on a large warehouse?

Generates a warehouse of 10,000 cells with 100 layers each (1,000,000 layer rows) and 50 raw
samples each, in the warehouse's real layout (one Parquet file per cell per table), then:
  - times the snapshot load (what the dashboard does once per warehouse change);
  - serves it with `farm dashboard` and times every page in headless Chromium (Debian's
    chromium through Playwright), from navigation until the page's last element is drawn and
    Streamlit reports the script run finished: cold (first visit, snapshot included) and warm.

The generated figures are synthetic load-test data (the sweeps say so in their description);
they exist only under the folder given and are never mixed with real results.

    .venv/bin/python benchmarks/dashboard_scale.py [--cells 10000] [--layers 100] [--dir /tmp/farm-scale]
    .venv/bin/python benchmarks/dashboard_scale.py --quick --dir /tmp/farm-scale-quick   # the test suite runs this

--quick runs the same code on 40 cells of 10 layers and 20 samples: its figures only show that
every page still loads. Each dashboard server listens on a free loopback port unless --port names
one, and is stopped (its whole process group) before the benchmark ends, also on SIGTERM.
--no-browser stops after the snapshot figures (for a machine without chromium).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pyarrow as pa

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from farm.measure import SAMPLE_INTERVAL_METHOD  # noqa: E402
from farm.warehouse import SCHEMA_VERSION, SCHEMAS, write_parquet  # noqa: E402

MODELS = [f"model{i:02d}" for i in range(10)]
PRECISIONS = ["fp32", "tf32", "fp16", "bf16", "int8"]
BATCHES = [1, 4, 16, 64, 256]
VARIANTS = 10  # backend option values, e.g. streams=1..10
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
MIN_CELLS = 16  # the cell and diff pages open cells 5 and 15


def write(table: str, sweep_dir: Path, key: str, columns: dict) -> None:
    schema = SCHEMAS[table]
    n = len(next(iter(columns.values())))
    arrays = [pa.array(columns[f.name], f.type) if f.name in columns else pa.nulls(n, f.type) for f in schema]
    directory = sweep_dir / table
    directory.mkdir(parents=True, exist_ok=True)
    data = pa.table(arrays, schema=schema).replace_schema_metadata({"farm.schema_version": str(SCHEMA_VERSION)})
    write_parquet(data, directory / f"{key}.parquet")


def generate(root: Path, cells: int, layers: int, samples: int) -> None:
    rng = np.random.default_rng(0)
    per_sweep = len(MODELS) * len(PRECISIONS) * len(BATCHES) * VARIANTS
    sweeps = max(1, cells // per_sweep)
    start = datetime(2026, 11, 1, tzinfo=timezone.utc)
    device = {"device_id": ["gpu-synthetic"], "kind": ["cuda"], "name": ["Synthetic GPU (load test)"],
              "host": ["load-test"], "cpu_cores": [16]}
    made = 0
    for s in range(sweeps):
        sweep = f"scale{s}"
        sweep_dir = root / sweep
        write("sweeps", sweep_dir, "run0", {
            "run_id": ["run0"], "sweep_id": [sweep], "name": [sweep],
            "description": ["synthetic load-test data for benchmarks/dashboard_scale.py (not a measurement)"],
            "started_at": [start], "finished_at": [start], "cells_planned": [per_sweep]})
        write("devices", sweep_dir, "gpu-synthetic", device)
        for model in MODELS:
            for precision in PRECISIONS:
                for batch in BATCHES:
                    for variant in range(VARIANTS):
                        if made >= cells:
                            return
                        cell_id = f"{made:016x}"
                        made += 1
                        speed = 1.0 + PRECISIONS.index(precision) * 0.4 + variant * 0.05
                        latency = (0.5 + batch * 0.05) / speed
                        lat = latency * (1 + 0.03 * rng.standard_normal(samples)).clip(0.5)
                        write("samples", sweep_dir, cell_id, {
                            "cell_id": [cell_id] * samples, "repeat": np.arange(samples) % 3,
                            "iteration": np.arange(samples) // 3, "start_ms": np.cumsum(lat), "latency_ms": lat,
                            "compute_ms": lat * 0.9, "h2d_ms": lat * 0.06, "d2h_ms": lat * 0.04})
                        median = float(np.median(lat))
                        write("measurements", sweep_dir, cell_id, {
                            "cell_id": [cell_id], "queries": [samples], "throughput_qps": [1000 / lat.mean()],
                            "throughput_samples_per_s": [1000 * batch / lat.mean()],
                            "latency_median_ms": [median], "latency_mean_ms": [float(lat.mean())],
                            "latency_p90_ms": [float(np.quantile(lat, 0.9))],
                            "latency_p95_ms": [float(np.quantile(lat, 0.95))],
                            "latency_p99_ms": [float(np.quantile(lat, 0.99))], "latency_cv_percent": [3.0],
                            "median_ci_low_ms": [median * 0.98], "median_ci_high_ms": [median * 1.02],
                            "median_ci_method": [SAMPLE_INTERVAL_METHOD],  # as farm measures today
                            "stable": [True], "h2d_mean_ms": [median * 0.06], "compute_mean_ms": [median * 0.9],
                            "d2h_mean_ms": [median * 0.04]})
                        times = rng.exponential(latency / layers, layers)
                        write("layers", sweep_dir, cell_id, {
                            "cell_id": [cell_id] * layers, "layer_index": np.arange(layers),
                            "name": [f"layer{i}" for i in range(layers)], "type": ["Conv", "Relu"] * (layers // 2),
                            "input_tensors": [json.dumps([f"t{i}"]) for i in range(layers)],
                            "output_tensors": [json.dumps([f"t{i + 1}"]) for i in range(layers)],
                            "time_avg_ms": times, "time_share_percent": 100 * times / times.sum(),
                            "total_bytes": rng.integers(1_000, 10_000_000, layers), "calls": [10] * layers})
                        write("builds", sweep_dir, cell_id, {"cell_id": [cell_id], "build_s": [1.0]})
                        write("accuracy", sweep_dir, cell_id, {
                            "cell_id": [cell_id], "output_name": ["y"], "cosine_similarity": [0.9999],
                            "verdict": ["fail" if precision == "int8" and variant == 0 else "pass"],
                            "worst_metric": ["cosine_similarity"], "worst_value": [0.9999]})
                        write("cells", sweep_dir, cell_id, {
                            "cell_id": [cell_id], "sweep_id": [sweep], "run_id": ["run0"], "model": [model],
                            "precision": [precision], "batch": [batch], "backend": ["synthetic"],
                            "options": [json.dumps({"streams": variant + 1})], "status": ["ok"],
                            "device_id": ["gpu-synthetic"], "started_at": [start + timedelta(seconds=made)],
                            "finished_at": [start + timedelta(seconds=made + 1)], "duration_s": [1.0]})


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop(server: subprocess.Popen) -> None:
    """End the server's process group: `farm dashboard` and any process it started."""
    for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 10)):
        try:
            os.killpg(server.pid, sig)
        except ProcessLookupError:
            pass
        try:
            server.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue


def wait_healthy(server: subprocess.Popen, url: str, log: Path, seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"farm dashboard exited ({server.returncode}): {log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as response:
                if response.read() == b"ok":
                    return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"farm dashboard did not answer in {seconds:.0f} s: {log.read_text()[-2000:]}")


def time_pages(results: Path, port: int | None, visits: tuple[str, ...],
               timeout_ms: int = 300_000) -> list[tuple[str, str, float]]:
    from playwright.sync_api import sync_playwright

    port = port or free_port()
    log_path = results.parent / f"dashboard-{port}.log"
    with open(log_path, "w") as log:
        # A session of its own, so that stop() ends every process of the server, children too.
        server = subprocess.Popen([sys.executable, "-m", "farm", "dashboard", "--results", str(results),
                                   "--address", "127.0.0.1", "--port", str(port)],
                                  env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=log,
                                  stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(server, url, log_path)
        pages = [("overview", "/", "Download a warehouse table"),
                 ("compare (one sweep)", "/compare?sweep=scale0", "Table"),
                 ("cell (its layers, graph)", f"/cell?cell={5:016x}", "Provenance"),
                 ("diff (two cells' layers)", f"/diff?a={5:016x}&b={15:016x}", "Matched layers"),
                 ("sql (page)", "/sql", "Row limit")]
        rows = []
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path=CHROMIUM,
                args=["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                      "--disable-component-update", "--disable-sync", "--no-first-run"])
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.set_default_timeout(timeout_ms)
            for visit in visits:
                for name, path, marker in pages:
                    started = time.perf_counter()
                    page.goto(url + path)
                    page.get_by_text(marker, exact=True).first.wait_for()
                    page.wait_for_timeout(100)
                    page.locator('[data-testid="stStatusWidget"]').wait_for(state="detached")
                    rows.append((visit, name, time.perf_counter() - started - 0.1))
            if visits[-1] == "cached":
                browser.close()
                return rows
            # A query over every layer row, through the read-only console.
            page.get_by_label("Query").fill("SELECT type, count(*) AS layers, sum(time_avg_ms) AS ms FROM layers "
                                            "GROUP BY type ORDER BY type")
            page.get_by_label("Query").press("Control+Enter")
            page.wait_for_timeout(500)
            started = time.perf_counter()
            page.get_by_role("button", name="Run").click()
            page.get_by_text("row(s) in").wait_for()
            rows.append(("query", "sql: GROUP BY over all layer rows", time.perf_counter() - started))
            browser.close()
        return rows
    finally:
        stop(server)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, default=None, help=f"default 10,000, quick 40 (at least {MIN_CELLS})")
    parser.add_argument("--layers", type=int, default=None, help="per cell (default 100, quick 10)")
    parser.add_argument("--samples", type=int, default=None, help="per cell (default 50, quick 20)")
    parser.add_argument("--dir", type=Path, default=Path("/tmp/farm-scale"),
                        help="the warehouse goes to DIR/results (replaced), server logs to DIR")
    parser.add_argument("--port", type=int, default=None, help="dashboard port (default: a free loopback port)")
    parser.add_argument("--keep", action="store_true", help="reuse a warehouse generated before")
    parser.add_argument("--quick", action="store_true", help="a few dozen cells: checks the path (the test suite)")
    parser.add_argument("--no-browser", action="store_true", help="stop after the snapshot figures")
    args = parser.parse_args(argv)
    args.cells = args.cells if args.cells is not None else (40 if args.quick else 10_000)
    args.layers = args.layers if args.layers is not None else (10 if args.quick else 100)
    args.samples = args.samples if args.samples is not None else (20 if args.quick else 50)
    if args.cells < MIN_CELLS or args.layers < 2 or args.samples < 1:
        parser.error(f"--cells must be at least {MIN_CELLS}, --layers at least 2, --samples at least 1")
    if not args.no_browser and not Path(CHROMIUM).exists():
        print("dashboard_scale: no chromium here (apt-get install chromium), so the pages cannot be timed; "
              "--no-browser times the snapshot alone", file=sys.stderr)
        return 2
    # A SIGTERM (a test's timeout, say) unwinds through the finally that stops the dashboard server.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    results = args.dir / "results"
    if not (args.keep and results.is_dir()):
        shutil.rmtree(results, ignore_errors=True)
        started = time.perf_counter()
        generate(results, args.cells, args.layers, args.samples)
        files = sum(1 for _ in results.rglob("*.parquet"))
        print(f"generated {args.cells:,} cells, {args.cells * args.layers:,} layer rows, "
              f"{args.cells * args.samples:,} samples in {files:,} files, {time.perf_counter() - started:.0f} s")

    from farm.dashboard.data import Snapshot

    from farm.warehouse import Warehouse

    shutil.rmtree(results / ".cache" / "dashboard", ignore_errors=True)
    for state in ("no consolidated copy", "with the copy"):
        if state == "with the copy":  # what `farm sweep` and `farm ingest` leave (the dashboard writes none)
            for sweep in Warehouse(results).sweeps():
                Warehouse(results).consolidate(sweep)
        started = time.perf_counter()
        snap = Snapshot(results)
        print(f"snapshot load, {state}: {time.perf_counter() - started:.2f} s for {len(snap.cell_frame):,} cells "
              f"({snap.files_read:,} cell files read)")
    started = time.perf_counter()
    layers = snap.cell_file(f"{5:016x}", "layers")
    print(f"one cell's layers read: {1000 * (time.perf_counter() - started):.1f} ms ({len(layers)} rows)", flush=True)
    if args.no_browser:
        return 0

    # Pages in a browser: first with no consolidated copy (the first dashboard ever opened on this
    # warehouse), then a new server with the copy in place (every later start).
    shutil.rmtree(results / ".cache" / "dashboard", ignore_errors=True)
    timeout_ms = 120_000 if args.quick else 300_000
    rows = time_pages(results, args.port, ("first", "warm"), timeout_ms)
    for sweep in Warehouse(results).sweeps():  # as a sweep or ingest leaves it
        Warehouse(results).consolidate(sweep)
    rows += time_pages(results, args.port, ("cached",), timeout_ms)
    print(f"\n{'visit':<7} {'page':<34} {'seconds':>8}")
    for visit, name, seconds in rows:
        print(f"{visit:<7} {name:<34} {seconds:>8.2f}")
    print("first: server just started, no consolidated copy; warm: same server again; cached: a new server "
          "with the copy that `farm sweep` / `farm ingest` leave")
    return 0


if __name__ == "__main__":
    sys.exit(main())
