"""Does the dashboard stay responsive on a large warehouse?

Generates a warehouse of 10,000 cells with 100 layers each (1,000,000 layer rows) and 50 raw
samples each, in the warehouse's real layout (one Parquet file per cell per table), then:
  - times the snapshot load (what the dashboard does once per warehouse change);
  - times every page (each script in farm/dashboard/views, pages added later included) through
    Streamlit's AppTest in this process: the page script's data work and the elements it makes,
    no browser (`apptest` rows: first visit and the next, the snapshot already loaded);
  - the same on a larger warehouse, 100,000 cells in sweeps of 25,000 (--big-cells,
    --big-per-sweep), generated straight into compacted blocks (the layout `farm compact` leaves):
    a minute to write, not the hour 700,000 per-cell files would take;
  - serves the first with `farm dashboard` and times every page in headless Chromium (Debian's
    chromium through Playwright), from navigation until the page's last element is drawn and
    Streamlit reports the script run finished: cold (first visit, snapshot included) and warm.

The generated figures are synthetic load-test data (the sweeps say so in their description);
they exist only under the folder given and are never mixed with real results.

    .venv/bin/python benchmarks/dashboard_scale.py [--cells 10000] [--layers 100] [--dir /tmp/farm-scale]
    .venv/bin/python benchmarks/dashboard_scale.py --quick --dir /tmp/farm-scale-quick   # the test suite runs this

--quick runs the same code on 40 cells of 10 layers and 20 samples (and 600 compacted cells in
sweeps of 300 as the larger warehouse; one browser visit of it, not two): its figures only show
that every page still loads. Then (quick or not) every page of the shipped example
(examples/results), deep links to a cell and to a diff included, is timed in the browser on a
first and a second visit: the figures a new user meets, a target of 2 s each on 2 cores (--quick:
from the start, beside the rest, with a server and browser of its own). Each
dashboard server listens on a free loopback port unless --port names one, and is stopped (its
whole process group) before the benchmark ends, also on SIGTERM.
--no-browser stops after the snapshot and AppTest figures (for a machine without chromium);
--pages overview compare ... times only those pages through AppTest; --existing examples/results
times the pages of a warehouse as it is (nothing generated).
"""

from __future__ import annotations

import argparse
import atexit
import itertools
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from concurrent.futures import Future
from datetime import UTC, datetime, timedelta
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
EXAMPLE = ROOT / "examples" / "results"  # the GPU sweeps shipped with farm
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
    start = datetime(2026, 11, 1, tzinfo=UTC)
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


def generate_compacted(root: Path, cells: int, per_sweep: int, layers: int, samples: int) -> None:
    """The same synthetic cells, written straight into compacted blocks (the layout `farm compact`
    leaves: BLOCK_CELLS cells per file per table, listed in each sweep's compaction.json), so that
    100,000 cells take a minute, not the hour that 700,000 per-cell files would."""
    from farm.warehouse import Warehouse
    from farm.warehouse.compact import BLOCK_CELLS
    from farm.warehouse.layout import Block, Compaction, part_name

    rng = np.random.default_rng(0)
    start = datetime(2026, 11, 1, tzinfo=UTC)
    warehouse = Warehouse(root)
    variants = max(1, per_sweep // (len(MODELS) * len(PRECISIONS) * len(BATCHES)))
    for s, first in enumerate(range(0, cells, per_sweep)):
        sweep, size = f"scale{s}", min(per_sweep, cells - first)
        sweep_dir = root / sweep
        write("sweeps", sweep_dir, "run0", {
            "run_id": ["run0"], "sweep_id": [sweep], "name": [sweep], "started_at": [start], "finished_at": [start],
            "description": ["synthetic load-test data for benchmarks/dashboard_scale.py (not a measurement)"],
            "cells_planned": [size]})
        write("devices", sweep_dir, "gpu-synthetic", {"device_id": ["gpu-synthetic"], "kind": ["cuda"],
                                                      "name": ["Synthetic GPU (load test)"], "host": ["load-test"]})
        blocks = []
        for number, low in enumerate(range(0, size, BLOCK_CELLS)):
            index = np.arange(low, min(low + BLOCK_CELLS, size))
            tables = block_columns(sweep, s, index, variants, layers, samples, rng, start)
            name = part_name(1, number)
            for table, columns in tables.items():
                write(table, sweep_dir, name.removesuffix(".parquet"), columns)
            ids = tables["cells"]["cell_id"]
            blocks.append(Block(1, number, len(ids), ids[0], ids[-1], tuple(tables)))
        warehouse.write_compaction(sweep, Compaction(1, tuple(blocks)))


def block_columns(sweep: str, sweep_index: int, index: np.ndarray, variants: int, layers: int, samples: int,
                  rng, start: datetime) -> dict[str, dict]:
    """The rows of cells `index` of one sweep, table by table, the pattern of `generate` (variant
    fastest, then batch, precision, model), sorted by cell id as a compacted block is."""
    n = len(index)
    variant = index % variants
    batch = np.array(BATCHES)[(index // variants) % len(BATCHES)]
    precision = (index // (variants * len(BATCHES))) % len(PRECISIONS)
    model = (index // (variants * len(BATCHES) * len(PRECISIONS))) % len(MODELS)
    ids = [f"{sweep_index:04x}{i:012x}" for i in index]
    latency = (0.5 + batch * 0.05) / (1.0 + precision * 0.4 + variant * 0.05)
    lat = latency[:, None] * (1 + 0.03 * rng.standard_normal((n, samples))).clip(0.5)
    median = np.median(lat, axis=1)
    times = rng.exponential(1.0, (n, layers)) * (latency / layers)[:, None]
    each = {"samples": samples, "layers": layers}
    rows = {table: np.repeat(ids, count).tolist() for table, count in each.items()}
    return {
        "cells": {"cell_id": ids, "sweep_id": [sweep] * n, "run_id": ["run0"] * n,
                  "model": [MODELS[m] for m in model], "precision": [PRECISIONS[p] for p in precision],
                  "batch": batch, "backend": ["synthetic"] * n,
                  "options": [json.dumps({"streams": int(v) + 1}) for v in variant], "status": ["ok"] * n,
                  "device_id": ["gpu-synthetic"] * n, "started_at": [start + timedelta(seconds=int(i)) for i in index],
                  "finished_at": [start + timedelta(seconds=int(i) + 1) for i in index], "duration_s": np.ones(n)},
        "measurements": {"cell_id": ids, "queries": np.full(n, samples), "throughput_qps": 1000 / lat.mean(axis=1),
                         "throughput_samples_per_s": 1000 * batch / lat.mean(axis=1), "latency_median_ms": median,
                         "latency_mean_ms": lat.mean(axis=1), "latency_p90_ms": np.quantile(lat, 0.9, axis=1),
                         "latency_p95_ms": np.quantile(lat, 0.95, axis=1),
                         "latency_p99_ms": np.quantile(lat, 0.99, axis=1), "latency_cv_percent": np.full(n, 3.0),
                         "median_ci_low_ms": median * 0.98, "median_ci_high_ms": median * 1.02,
                         "median_ci_method": [SAMPLE_INTERVAL_METHOD] * n, "stable": np.ones(n, bool),
                         "peak_memory_bytes": (batch * 6_000_000 + 100_000_000).astype(np.int64)},
        "samples": {"cell_id": rows["samples"], "repeat": np.tile(np.arange(samples) % 3, n),
                    "iteration": np.tile(np.arange(samples) // 3, n), "latency_ms": lat.ravel()},
        "layers": {"cell_id": rows["layers"], "layer_index": np.tile(np.arange(layers), n),
                   "name": [f"layer{i}" for i in range(layers)] * n, "type": np.resize(["Conv", "Relu"], n * layers),
                   "time_avg_ms": times.ravel(), "calls": np.full(n * layers, 10)},
        "builds": {"cell_id": ids, "build_s": np.ones(n)},
        "accuracy": {"cell_id": ids, "output_name": ["y"] * n, "n": np.full(n, 32),
                     "cosine_similarity": np.full(n, 0.9999),
                     "verdict": np.where((precision == PRECISIONS.index("int8")) & (variant == 0), "fail", "pass"),
                     "worst_metric": ["cosine_similarity"] * n, "worst_value": np.full(n, 0.9999)},
    }


def time_pages_apptest(results: Path, params: dict[str, str], only: list[str] | None = None):
    """Every page (each script in farm/dashboard/views, so pages added later count too) through
    Streamlit's AppTest in this process: the page script's data work and the elements it makes,
    without a browser drawing them. Per page: (name, first visit, next visit), the warehouse's
    snapshot already loaded (it loads once per warehouse change: `snapshot load` above); first
    visits fill the page's own caches. The first row is the snapshot load with the landing page.
    Rows come as they are measured; `only` names the pages to time (default: all)."""
    os.environ["FARM_RESULTS"] = str(results)
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "farm" / "dashboard" / "app.py"), default_timeout=600)
    for key, value in params.items():
        at.query_params[key] = value
    started = time.perf_counter()
    at.run()
    yield "snapshot load + overview", time.perf_counter() - started, float("nan")
    pages = [p.stem for p in (ROOT / "farm" / "dashboard" / "views").glob("*.py") if not only or p.stem in only]
    for page in sorted(pages, key=lambda p: (p != "overview", p)):
        times = []
        for _ in range(2):
            at.switch_page(f"views/{page}.py")
            started = time.perf_counter()
            at.run()
            times.append(time.perf_counter() - started)
            if at.exception:
                raise RuntimeError(f"page {page}: {at.exception[0].message}")
        yield page, *times


def print_apptest(results: Path, cells: int, params: dict[str, str], only: list[str] | None = None) -> None:
    print(f"\npages through Streamlit's AppTest (script run: data work + elements, no browser), {cells:,} cells, "
          f"{os.cpu_count()} cores:\n{'apptest':<8} {'cells':>8} {'page':<26} {'first':>8} {'again':>8}")
    for page, first, again in time_pages_apptest(results, params, only):
        again_text = "–" if again != again else f"{again:.2f}"  # the snapshot load has no second visit
        print(f"{'apptest':<8} {cells:>8,} {page:<26} {first:8.2f} {again_text:>8}", flush=True)


def time_roofline_toggle(results: Path, sweeps: list[str]) -> None:
    """The Compare page's "Roofline columns" toggle, first use in this process (every model of the
    sweep counted), per sweep: what a user waits for the first time the columns are asked for."""
    os.environ["FARM_RESULTS"] = str(results)
    from streamlit.testing.v1 import AppTest

    for sweep in sweeps:
        at = AppTest.from_file(str(ROOT / "farm" / "dashboard" / "app.py"), default_timeout=600)
        at.query_params["sweep"] = sweep
        at.run()
        at.switch_page("views/compare.py").run()
        started = time.perf_counter()
        at.toggle(key="roofline").set_value(True).run()
        if at.exception:
            raise RuntimeError(f"roofline columns: {at.exception[0].message}")
        print(f"{'apptest':<8} {sweep:<35} roofline columns, first use {time.perf_counter() - started:8.2f}",
              flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


SERVERS: set[subprocess.Popen] = set()  # the dashboard servers running, stopped at exit whatever happens


@atexit.register
def stop_servers() -> None:
    for server in list(SERVERS):
        stop(server)


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


# (name, path, a text the page shows once drawn) of the generated warehouse
SCALE_PAGES = [("overview", "/", "Download a warehouse table"),
               ("compare (one sweep)", "/compare?sweep=scale0", "Table"),
               ("cell (its layers, graph)", f"/cell?cell={5:016x}", "Provenance"),
               ("diff (two cells' layers)", f"/diff?a={5:016x}&b={15:016x}", "Matched layers"),
               ("sql (page)", "/sql", "Row limit")]


def existing_pages(results: Path) -> list[tuple[str, str, str]]:
    """Every page of a real warehouse, with deep links to its first sweep, to its first ok cell with
    layer rows and (Diff) to the next such cell of the same model."""
    from farm.dashboard.data import Snapshot

    snap = Snapshot(results)
    cells = snap.cell_frame
    ok = cells[(cells.status == "ok")]
    with_layers = list(itertools.islice((c for c in ok.cell_id if len(snap.cell_file(c, "layers"))), 40))
    a = with_layers[0] if with_layers else None
    model = cells.set_index("cell_id").model
    b = next((c for c in with_layers[1:] if model[c] == model[a]), None) if a else None
    pages = [("overview", "/", "Download a warehouse table"),
             ("compare", f"/compare?sweep={snap.sweep_names[0]}", "Table")]
    if a:
        pages.append(("cell (deep link)", f"/cell?cell={a}", "Provenance"))
    if a and b:
        pages.append(("diff (deep link)", f"/diff?a={a}&b={b}", "Matched layers"))
    return pages + [("regressions", "/regressions", "Regressions"), ("sql (page)", "/sql", "Row limit")]


def time_pages(results: Path, port: int | None, visits: tuple[str, ...],
               timeout_ms: int = 300_000, pages: list[tuple[str, str, str]] = SCALE_PAGES,
               console: bool = True, log_dir: Path | None = None) -> list[tuple[str, str, float]]:
    from playwright.sync_api import sync_playwright

    port = port or free_port()
    log_path = (log_dir or results.parent) / f"dashboard-{port}.log"
    with open(log_path, "w") as log:
        # A session of its own, so that stop() ends every process of the server, children too.
        server = subprocess.Popen([sys.executable, "-m", "farm", "dashboard", "--results", str(results),
                                   "--address", "127.0.0.1", "--port", str(port)],
                                  env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=log,
                                  stderr=subprocess.STDOUT, start_new_session=True)
    SERVERS.add(server)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(server, url, log_path)
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
            if visits[-1] == "cached" or not console:
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
        SERVERS.discard(server)


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
    parser.add_argument("--no-browser", action="store_true", help="stop after the snapshot and AppTest figures")
    parser.add_argument("--big-cells", type=int, default=None,
                        help="also time the pages on this many cells, generated compacted (default 100,000; quick 600; "
                             "0: not)")
    parser.add_argument("--pages", nargs="+", default=None, metavar="PAGE",
                        help="time only these pages through AppTest (names of farm/dashboard/views/*.py; default all)")
    parser.add_argument("--big-per-sweep", type=int, default=None, help="cells per sweep there (default 25,000, "
                                                                        "quick 300)")
    parser.add_argument("--existing", type=Path, default=None, metavar="RESULTS",
                        help="only time the pages of this warehouse through AppTest (e.g. examples/results)")
    args = parser.parse_args(argv)
    if args.existing:  # a real warehouse, as it is: each page with its defaults
        from farm.dashboard.data import Snapshot

        started = time.perf_counter()
        cells = len(Snapshot(args.existing).cell_frame)
        print(f"snapshot load: {time.perf_counter() - started:.2f} s for {cells:,} cells of {args.existing}")
        print_apptest(args.existing, cells, {}, args.pages)
        if not args.pages or "compare" in args.pages:
            time_roofline_toggle(args.existing, Snapshot(args.existing).sweep_names)
        if not args.no_browser:
            args.dir.mkdir(parents=True, exist_ok=True)
            print_browser(time_pages(args.existing, args.port, ("first", "warm"), 120_000,
                                     existing_pages(args.existing), console=False, log_dir=args.dir))
        return 0
    args.cells = args.cells if args.cells is not None else (40 if args.quick else 10_000)
    args.layers = args.layers if args.layers is not None else (10 if args.quick else 100)
    args.samples = args.samples if args.samples is not None else (20 if args.quick else 50)
    args.big_cells = args.big_cells if args.big_cells is not None else (600 if args.quick else 100_000)
    args.big_per_sweep = args.big_per_sweep or (300 if args.quick else 25_000)
    if args.cells < MIN_CELLS or args.layers < 2 or args.samples < 1:
        parser.error(f"--cells must be at least {MIN_CELLS}, --layers at least 2, --samples at least 1")
    if not args.no_browser and not Path(CHROMIUM).exists():
        print("dashboard_scale: no chromium here (apt-get install chromium), so the pages cannot be timed; "
              "--no-browser times the snapshot alone", file=sys.stderr)
        return 2
    # A SIGTERM (a test's timeout, say) unwinds through the finally that stops the dashboard server.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    example = None
    if args.quick and not args.no_browser and args.port is None:  # a server and browser of its own, meanwhile
        args.dir.mkdir(parents=True, exist_ok=True)
        example = in_background(time_example, None, 120_000, args.dir)
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
    params = {"sweep": "scale0", "cell": f"{5:016x}", "a": f"{5:016x}", "b": f"{15:016x}"}
    print_apptest(results, args.cells, params, args.pages)
    if args.big_cells:  # the same pages on a larger warehouse, generated compacted
        big = args.dir / "results-big"
        if not (args.keep and big.is_dir()):
            shutil.rmtree(big, ignore_errors=True)
            started = time.perf_counter()
            generate_compacted(big, args.big_cells, args.big_per_sweep, 10, 20)
            print(f"\ngenerated {args.big_cells:,} cells compacted ({args.big_per_sweep:,} per sweep, 10 layers and "
                  f"20 samples each) in {time.perf_counter() - started:.0f} s", flush=True)
        started = time.perf_counter()
        snap = Snapshot(big)
        print(f"larger warehouse, snapshot load (compacted): {time.perf_counter() - started:.2f} s for "
              f"{len(snap.cell_frame):,} cells")
        print_apptest(big, args.big_cells, {"sweep": "scale0", "cell": f"{0:04x}{5:012x}", "a": f"{0:04x}{5:012x}",
                                            "b": f"{0:04x}{15:012x}"}, args.pages)
    if args.no_browser:
        return 0

    # Pages in a browser: first with no consolidated copy (the first dashboard ever opened on this
    # warehouse), then a new server with the copy in place (every later start).
    shutil.rmtree(results / ".cache" / "dashboard", ignore_errors=True)
    timeout_ms = 120_000 if args.quick else 300_000
    rows = time_pages(results, args.port, ("first",) if args.quick else ("first", "warm"), timeout_ms)
    for sweep in Warehouse(results).sweeps():  # as a sweep or ingest leaves it
        Warehouse(results).consolidate(sweep)
    rows += time_pages(results, args.port, ("cached",), timeout_ms)
    rows += example.result() if example else time_example(args.port, timeout_ms, args.dir)
    print_browser(rows)
    return 0


def time_example(port: int | None, timeout_ms: int, log_dir: Path) -> list[tuple[str, str, float]]:
    """The shipped example's pages, its deep links included, on a first and a second visit: the
    figures a new user meets (none where there is no example)."""
    if not EXAMPLE.is_dir():
        return []
    return [(f"example {visit}", name, seconds) for visit, name, seconds in
            time_pages(EXAMPLE, port, ("first", "warm"), timeout_ms, existing_pages(EXAMPLE), console=False,
                       log_dir=log_dir)]


def in_background(work, *args) -> Future:
    """work(*args) in a thread of its own: a daemon, whose server stop_servers ends at exit."""
    future: Future = Future()

    def run() -> None:
        try:
            future.set_result(work(*args))
        except BaseException as exc:  # noqa: BLE001 - raised again by future.result()
            future.set_exception(exc)

    threading.Thread(target=run, daemon=True).start()
    return future


def print_browser(rows: list[tuple[str, str, float]]) -> None:
    print(f"\n{'visit':<13} {'page':<34} {'seconds':>8}")
    for visit, name, seconds in rows:
        print(f"{visit:<13} {name:<34} {seconds:>8.2f}")
    print("first: server just started, no consolidated copy; warm: same server again; cached: a new server "
          "with the copy that `farm sweep` / `farm ingest` leave; example: examples/results, a server of its own")


if __name__ == "__main__":
    sys.exit(main())
