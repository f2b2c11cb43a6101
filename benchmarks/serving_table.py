"""The serving table of docs/gpu-figures.md: for each engine and max batch, the highest LoadGen Server
rate under the p99 bound in two runs of the same sweep, how far apart they came, and what the
batcher cost beside the offline cell of the same batch, from the `serving` rows and cells that
`farm query` wrote on the GPU machine (benchmarks/device/serving-*.toml, run twice):

    python3 benchmarks/serving_table.py --markdown benchmarks/results/serving-h200-confirmed.csv ...
    python3 benchmarks/serving_table.py --every bert-base onnxruntime 32 benchmarks/results/serving-h200-*.csv

Each SERVING file comes with SERVING's name ending -cells.csv: the cells, their offline latency
and notes. The two runs of a sweep are its sweep names ending -1 and -2."""

from __future__ import annotations

import argparse
import csv
import re
from pathlib import Path

ENGINES = {"onnxruntime": "ONNX Runtime CUDA + CUDA graphs", "torch": "PyTorch CUDA graphs"}
SEARCHES = ("single pass", "confirmed", "confirmed, 4 s tests, warm-up", "confirmed, 10 s tests", "confirmed, 60 s tests")
MODELS = {"resnet50": ("ResNet-50", 10), "bert-base": ("BERT-base (seq 128)", 30)}
# serving-MODEL[-ort][-bN][-confirmed][-Ss][-warm]-RUN: farm's search since the confirmed runs wherever a
# test length is named; -warm: each test after the 0.3 s warm-up (the 60 s and BERT-base's 10 s runs had it too)
RUN = re.compile(r"^serving-(?P<model>resnet50|bert-base)(?:-ort)?(?:-b\d+)?(?P<search>-confirmed)?"
                 r"(?:-(?P<seconds>\d+)s)?(?P<warm>-warm)?-(?P<run>\d+)$")


def _read(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(line for line in f if not line.startswith("#")))  # '#': machine and commit


def answers(serving: Path) -> dict[tuple, dict[str, dict]]:
    """(model, search, backend, batch) -> run ('1', '2') -> the chosen test's row, with the offline
    cell's median latency of that sweep, model, backend and batch as `offline_ms`. The search is
    'single pass', 'confirmed' (4 s tests) or 'confirmed, N s tests' (sweeps named ...-Ns-1, -2)."""
    offline = {(c["sweep_id"], c["backend"], c["batch"]): float(c["latency_median_ms"])
               for c in _read(serving.with_name(serving.stem + "-cells.csv"))
               if not c["scenario"] and c["status"] == "ok" and c["latency_median_ms"]}
    found: dict[tuple, dict[str, dict]] = {}
    for row in _read(serving):
        name = RUN.match(row["sweep_id"])
        if not name or row["chosen"] != "True" or name["model"] not in MODELS:
            continue
        row = {**row, "offline_ms": offline.get((row["sweep_id"], row["backend"], row["batch"]))}
        search = "single pass" if not (name["search"] or name["seconds"]) else "confirmed"
        if name["seconds"]:
            search += f", {name['seconds']} s tests{', warm-up' if name['warm'] else ''}"
        found.setdefault((name["model"], search, row["backend"], int(row["batch"])), {})[name["run"]] = row
    return found


def markdown(files: list[Path]) -> str:
    lines = [f"<!-- made by `python3 benchmarks/serving_table.py --markdown {' '.join(map(str, files))}`: edit there -->",
             "| model, p99 bound | engine | max batch | search | run 1 /s | run 2 /s | apart | p99 at the answer, ms "
             "| batcher ÷ offline query | engine in serving ÷ offline | energy a sample, mJ |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    found: dict[tuple, dict[str, dict]] = {}
    for path in files:
        found.update(answers(path))
    order = list(MODELS)
    for (model, search, backend, batch), runs in sorted(found.items(), key=lambda kv: (
            order.index(kv[0][0]), kv[0][2], kv[0][3], SEARCHES.index(kv[0][1]))):
        if not {"1", "2"} <= set(runs):  # runs 3 on: the --every table
            continue
        one, two = runs["1"], runs["2"]
        rates = [float(one["target_qps"]), float(two["target_qps"])]
        apart = abs(rates[0] - rates[1]) / max(rates) * 100
        name, bound = MODELS[model]

        def share(key: str, run: dict) -> str:
            return f"{float(run[key]) / run['offline_ms'] * 100:.1f} %" if run["offline_ms"] and run[key] else "n/a"

        def ratio(run: dict) -> str:
            return f"{float(run['engine_ms']) / run['offline_ms']:.3f}" if run["offline_ms"] else "n/a"

        lines.append(
            f"| {name}, {bound} ms | {ENGINES[backend]} | {batch} | {search} | {rates[0]:,.0f} | {rates[1]:,.0f} "
            f"| {'**' if apart > 5 else ''}{apart:.1f} %{'**' if apart > 5 else ''} "
            f"| {float(one['latency_p99_ms']):.1f} / {float(two['latency_p99_ms']):.1f} "
            f"| {share('batcher_ms', one)} / {share('batcher_ms', two)} | {ratio(one)} / {ratio(two)} "
            f"| {float(one['energy_per_sample_mj']):.0f} / {float(two['energy_per_sample_mj']):.0f} |")
    return "\n".join(lines) + "\n"


def every_answer(files: list[Path], model: str, backend: str, batch: int) -> str:
    """One row per sweep of `files` that searched `model` on `backend` at max `batch`: its answer, p99
    there, the offline query of the same sweep, the answer as a share of what that query serves back
    to back, how many tests the search ran, and the rates above the answer that passed a test."""
    lines = [f"<!-- made by `python3 benchmarks/serving_table.py --every {model} {backend} {batch} "
             f"{' '.join(map(str, files))}`: edit there -->",
             "| sweep | test length, s | answer /s | p99 there, ms | offline query, ms | answer ÷ back to back | tests "
             "| above the answer, passed a test |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for path in files:
        offline = {c["sweep_id"]: float(c["latency_median_ms"]) for c in _read(path.with_name(path.stem + "-cells.csv"))
                   if not c["scenario"] and c["status"] == "ok" and c["latency_median_ms"]
                   and (c["model"], c["backend"], int(c["batch"])) == (model, backend, batch)}
        tests: dict[str, list[dict]] = {}
        for row in _read(path):
            if (row["model"], row["backend"], int(row["batch"])) == (model, backend, batch):
                tests.setdefault(row["sweep_id"], []).append(row)
        for sweep, rows in tests.items():
            chosen = next((r for r in rows if r["chosen"] == "True"), None)
            if chosen is None:
                continue
            answer = float(chosen["target_qps"])
            above = sorted({round(float(r["target_qps"])) for r in rows
                            if r["valid"] == "True" and float(r["target_qps"]) > answer})
            query = offline.get(sweep)
            share = f"{answer / (batch * 1000 / query) * 100:.0f} %" if query else "n/a"
            lines.append(f"| {sweep} | {float(chosen['duration_s']):.0f} | {answer:,.0f} "
                         f"| {float(chosen['latency_p99_ms']):.1f} "
                         f"| {f'{query:.2f}' if query else 'n/a'} | {share} | {len(rows)} "
                         f"| {', '.join(f'{r:,}' for r in above) or 'none'} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--markdown", nargs="+", type=Path, metavar="SERVING",
                        help="serving-rows CSV files (each beside its -cells.csv)")
    parser.add_argument("--every", nargs="+", metavar=("MODEL BACKEND BATCH", "SERVING"),
                        help="every sweep's answer for one model, backend and max batch, from these files")
    args = parser.parse_args()
    if args.every:
        model, backend, batch, *files = args.every
        print(every_answer([Path(f) for f in files], model, backend, int(batch)), end="")
    elif args.markdown:
        print(markdown(args.markdown), end="")
    else:
        parser.error("give --markdown SERVING... or --every MODEL BACKEND BATCH SERVING...")


if __name__ == "__main__":
    main()
