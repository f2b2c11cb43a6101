"""Farm against the bare loop: two farm sweeps of the same GPU cells beside a bare loop.

    python3 benchmarks/device/farm_vs_bare.py summarize RESULTS_DIR run1.json   # a warehouse -> rows
    python3 benchmarks/device/farm_vs_bare.py table run1.json run2.json bare.json [more-bare.json ...]
    python3 benchmarks/device/farm_vs_bare.py table run1.json - bare.json        # one farm run only

Torch cells are keyed by their mode (benchmarks/torch_bare_loop.py), ONNX Runtime CUDA cells by
their provider options, `graphs` / `no-graphs` and ` nhwc` (benchmarks/ort_bare_loop.py).

`summarize` reads the cells, measurements and builds tables of a warehouse folder, per-cell and
compacted files alike (pyarrow; no farm import, so it reads any farm version's warehouse).
`table` prints, per (precision, batch, mode): both runs' median latency, their difference, the bare
loop's median (benchmarks/torch_bare_loop.py or ort_bare_loop.py --json; the median of several bare
runs, with their spread as `bare %`) and farm / bare, with the targets: runs within 3 %
(5 % for host-bound cells), farm
within 5 % of the bare loop. A cell is host-bound when its run-1 enqueue (host time around the
launch) is at least half its GPU compute time: its latency then follows the CPU.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

RUN_TARGET, HOST_RUN_TARGET, BARE_TARGET = 3.0, 5.0, 5.0
KEYS = ("latency_median_ms", "compute_median_ms", "enqueue_median_ms", "h2d_median_ms", "d2h_median_ms",
        "repeat_spread_percent", "latency_cv_percent", "stable", "sm_clock_median_mhz", "power_mean_w",
        "throttle_reasons")


def _table(results: Path, table: str) -> dict[str, dict]:
    """Every row of one table of a warehouse folder (a sweep's, or a root of sweeps), by cell id:
    compacted part files first, so that a cell's own later file wins."""
    import pyarrow.parquet as pq

    files = sorted(list(results.glob(f"{table}/*.parquet")) + list(results.glob(f"*/{table}/*.parquet")),
                   key=lambda f: (not f.name.startswith("part-"), str(f)))
    return {row["cell_id"]: row for f in files for row in pq.read_table(f).to_pylist()}


def summarize(results: Path, out: Path) -> None:
    measured, builds = _table(results, "measurements"), _table(results, "builds")
    rows = []
    for cell_id, cell in sorted(_table(results, "cells").items()):
        options = json.loads(cell["options"]) if isinstance(cell["options"], str) else cell["options"]
        row = {"cell_id": cell_id, "precision": cell["precision"], "batch": cell["batch"],
               "mode": variant(options), "status": cell["status"], "reason": cell.get("reason"),
               "duration_s": cell.get("duration_s")}
        row.update({k: measured.get(cell_id, {}).get(k) for k in KEYS})
        row["build_s"] = builds.get(cell_id, {}).get("build_s")
        rows.append(row)
    out.write_text(json.dumps(rows, indent=1))
    print(f"{len(rows)} cells from {results} -> {out}")


def variant(options: dict) -> str:
    """A torch cell's mode; an ONNX Runtime cell's CUDA graphs and NHWC options, as ort_bare_loop names them."""
    if "mode" in options:
        return options["mode"]
    return ("graphs" if options.get("cuda_graph") else "no-graphs") + (" nhwc" if options.get("prefer_nhwc") else "")


def _key(row: dict) -> tuple:
    return row["precision"], int(row["batch"]), row["mode"]


def _fmt(value, spec: str = "8.3f") -> str:
    return format(value, spec) if isinstance(value, (int, float)) else format("-", ">" + spec.split(".")[0])


def table(run1: Path, run2: Path, bares: list[Path]) -> int:
    first = {_key(r): r for r in json.loads(run1.read_text())}
    second = {_key(r): r for r in json.loads(run2.read_text())} if str(run2) != "-" else {}
    bare: dict[tuple, list[float]] = {}  # every bare run's median of a cell: the host drifts between runs
    device = set()
    for path in bares:
        data = json.loads(path.read_text())
        device.add(data.get("device"))
        for r in data["rows"]:
            if r.get("latency_median_ms"):
                bare.setdefault(_key(r), []).append(r["latency_median_ms"])
    print(f"bare loop: {', '.join(sorted(str(d) for d in device))}; medians in ms; * host-bound "
          f"(enqueue >= compute / 2): run target {HOST_RUN_TARGET:g} %, else {RUN_TARGET:g} %; "
          f"farm / bare target within {BARE_TARGET:g} %")
    print(f"{'cell':<26} {'run 1':>8} {'run 2':>8} {'run %':>6} {'bare':>8} {'bare %':>6} {'farm/bare':>9} "
          f"{'enqueue':>8} {'compute':>8}  verdict")
    order = {"eager": 0, "compile": 1, "cudagraphs": 2, "no-graphs": 3, "graphs": 4, "no-graphs nhwc": 5,
             "graphs nhwc": 6}
    failures = 0
    for key in sorted(set(first) | set(second), key=lambda k: (k[0], k[1], order.get(k[2], 9))):
        a, b, runs = first.get(key, {}), second.get(key, {}), bare.get(key, [])
        la, lb = a.get("latency_median_ms"), b.get("latency_median_ms")
        lc = statistics.median(runs) if runs else None  # several bare runs: their median, and their spread
        bare_pct = (max(runs) - min(runs)) / min(runs) * 100 if len(runs) > 1 else None
        host = bool(a.get("enqueue_median_ms") and a.get("compute_median_ms")
                    and a["enqueue_median_ms"] >= a["compute_median_ms"] / 2)
        name = f"{key[0]} b{key[1]} {key[2]}{' *' if host else ''}"[:26]
        run_pct = abs(la - lb) / min(la, lb) * 100 if la and lb else None
        farm = (la + lb) / 2 if la and lb else (la if not second else None)
        ratio = farm / lc if farm and lc else None
        verdicts = []
        if not second:
            pass  # one run: nothing to compare it with
        elif run_pct is None or run_pct > (HOST_RUN_TARGET if host else RUN_TARGET):
            verdicts.append("runs differ" if run_pct is not None else f"missing ({a.get('status')}/{b.get('status')})")
        if ratio is None or abs(ratio - 1) * 100 > BARE_TARGET:
            verdicts.append("off the bare loop" if ratio is not None else "no bare figure")
        failures += bool(verdicts)
        print(f"{name:<26} {_fmt(la)} {_fmt(lb)} {_fmt(run_pct, '6.1f')} {_fmt(lc)} {_fmt(bare_pct, '6.1f')} "
              f"{_fmt(ratio, '9.3f')} "
              f"{_fmt(a.get('enqueue_median_ms'))} {_fmt(a.get('compute_median_ms'))}  "
              f"{'; '.join(verdicts) or 'ok'}")
    print(f"{failures} cell(s) miss a target")
    return 0


def main(argv: list[str]) -> int:
    if len(argv) == 3 and argv[0] == "summarize":
        summarize(Path(argv[1]), Path(argv[2]))
        return 0
    if len(argv) >= 4 and argv[0] == "table":
        return table(Path(argv[1]), Path(argv[2]), [Path(p) for p in argv[3:]])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
