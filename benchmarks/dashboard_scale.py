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
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
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

from farm.warehouse import SCHEMA_VERSION, SCHEMAS, write_atomic  # noqa: E402

MODELS = [f"model{i:02d}" for i in range(10)]
PRECISIONS = ["fp32", "tf32", "fp16", "bf16", "int8"]
BATCHES = [1, 4, 16, 64, 256]
VARIANTS = 10  # backend option values, e.g. streams=1..10


def write(table: str, sweep_dir: Path, key: str, columns: dict) -> None:
    schema = SCHEMAS[table]
    n = len(next(iter(columns.values())))
    arrays = [pa.array(columns[f.name], f.type) if f.name in columns else pa.nulls(n, f.type) for f in schema]
    directory = sweep_dir / table
    directory.mkdir(parents=True, exist_ok=True)
    data = pa.table(arrays, schema=schema).replace_schema_metadata({"farm.schema_version": str(SCHEMA_VERSION)})
    write_atomic(data, directory / f"{key}.parquet")


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


def time_pages(results: Path, port: int, visits: tuple[str, ...]) -> list[tuple[str, str, float]]:
    from playwright.sync_api import sync_playwright

    log = open(results.parent / "dashboard.log", "w")
    server = subprocess.Popen([sys.executable, "-m", "farm", "dashboard", "--results", str(results),
                               "--port", str(port)], env={**os.environ, "PYTHONPATH": str(ROOT)},
                              stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            try:
                urllib.request.urlopen(f"{url}/_stcore/health", timeout=1)
                break
            except OSError:
                time.sleep(0.2)
        pages = [("overview", "/", "Download a warehouse table"),
                 ("compare (one sweep)", "/compare?sweep=scale0", "Table"),
                 ("cell (its layers, graph)", f"/cell?cell={5:016x}", "Provenance"),
                 ("diff (two cells' layers)", f"/diff?a={5:016x}&b={15:016x}", "Matched layers"),
                 ("sql (page)", "/sql", "Row limit")]
        rows = []
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path=shutil.which("chromium") or "/usr/bin/chromium",
                args=["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                      "--disable-component-update", "--disable-sync", "--no-first-run"])
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.set_default_timeout(300_000)
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
        server.terminate()
        server.wait(10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, default=10_000)
    parser.add_argument("--layers", type=int, default=100)
    parser.add_argument("--samples", type=int, default=50)
    parser.add_argument("--dir", type=Path, default=Path("/tmp/farm-scale"))
    parser.add_argument("--port", type=int, default=8599)
    parser.add_argument("--keep", action="store_true", help="reuse a warehouse generated before")
    args = parser.parse_args()
    results = args.dir / "results"
    if not (args.keep and results.is_dir()):
        shutil.rmtree(args.dir, ignore_errors=True)
        started = time.perf_counter()
        generate(results, args.cells, args.layers, args.samples)
        files = sum(1 for _ in results.rglob("*.parquet"))
        print(f"generated {args.cells:,} cells, {args.cells * args.layers:,} layer rows, "
              f"{args.cells * args.samples:,} samples in {files:,} files, {time.perf_counter() - started:.0f} s")

    from farm.dashboard.data import Snapshot

    shutil.rmtree(results / ".cache" / "dashboard", ignore_errors=True)
    for state in ("no consolidated copy", "with the copy"):
        started = time.perf_counter()
        snap = Snapshot(results)
        print(f"snapshot load, {state}: {time.perf_counter() - started:.2f} s for {len(snap.cell_frame):,} cells "
              f"({snap.files_read:,} cell files read)")
    started = time.perf_counter()
    layers = snap.cell_file(f"{5:016x}", "layers")
    print(f"one cell's layers read: {1000 * (time.perf_counter() - started):.1f} ms ({len(layers)} rows)")

    # Pages in a browser: first with no consolidated copy (the first dashboard ever opened on this
    # warehouse), then a new server with the copy in place (every later start).
    shutil.rmtree(results / ".cache" / "dashboard", ignore_errors=True)
    rows = time_pages(results, args.port, ("first", "warm"))
    rows += time_pages(results, args.port, ("cached",))
    print(f"\n{'visit':<7} {'page':<34} {'seconds':>8}")
    for visit, name, seconds in rows:
        print(f"{visit:<7} {name:<34} {seconds:>8.2f}")
    print("first: server just started, no consolidated copy; warm: same server again; cached: a new server "
          "with the copy the first load left")


if __name__ == "__main__":
    main()
