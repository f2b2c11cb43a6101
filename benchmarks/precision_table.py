"""The H200 precision tables of docs/precision.md: bf16, int8 (torchao's dynamic scheme, and
weight-only where a file has it) and fp8 on PyTorch (torchao) per model, batch and mode, or fp16 and
int8 (farm's Q/DQ model) on ONNX Runtime CUDA without and with CUDA graphs, each with its samples/s,
the ratio to the half-precision cell (bf16, else fp16) and the accuracy verdict against fp32, from a
results CSV of benchmarks/device/quantized-*.toml's cells on one H200 ('#' lines: how it was made):

    python3 benchmarks/precision_table.py --markdown benchmarks/results/quantized-torch-h200.csv"""

from __future__ import annotations

import argparse
import csv
import re
from pathlib import Path

COLUMNS = ("bf16", "fp16", "int8", "int8 weight-only", "fp8")
CPU_NODES = re.compile(r"(\d+) of (\d+) nodes \(([^)]*)\) run on the CPU provider")


def column(row: dict) -> str:
    """The table's column of a cell: its precision, int8's weight-only scheme a column of its own."""
    return "int8 weight-only" if row["precision"] == "int8" and row.get("int8") == "weight_only" else row["precision"]


def markdown(path: Path) -> str:
    with path.open(newline="") as f:
        rows = list(csv.DictReader(line for line in f if not line.startswith("#")))
    cells = {(r["model"], r["mode"], int(r["batch"]), column(r)): r for r in rows}
    precisions = [c for c in COLUMNS if any(k[3] == c for k in cells)]
    lines = [f"<!-- made by `python3 benchmarks/precision_table.py --markdown {path}`: edit there -->",
             "| model | mode | batch | " + " | ".join(precisions) + " |",
             "| --- | --- | --- | " + " | ".join("---" for _ in precisions) + " |"]
    for model, mode, batch in sorted({k[:3] for k in cells}, key=lambda k: (k[0], k[1] != "cudagraphs", k[1], k[2])):
        # what the row's other precisions are held against: its bf16 cell, else its fp16 one
        half = next((c for c in ("bf16", "fp16") if (model, mode, batch, c) in cells), None)
        base = cells.get((model, mode, batch, half))
        shown = []
        for precision in precisions:
            cell = cells.get((model, mode, batch, precision))
            if cell is None:
                shown.append("not run")
            elif cell["status"] != "ok":
                shown.append(f"{cell['status']}: {refusal(cell['reason'])}")
            else:
                rate = float(cell["samples_per_s"])
                ratio = f" ({rate / float(base['samples_per_s']):.2f}× {half})" if base and precision != half else ""
                judged = cell["min_cosine"] and cell["verdict"] in ("pass", "fail")  # unjudged: no figure decided it
                accuracy = cell["verdict"] + (f", cosine {float(cell['min_cosine']):.4f}" if judged else "")
                shown.append(f"{rate:,.0f}/s{ratio}, {accuracy}")
        lines.append(f"| {model} | {mode} | {batch} | " + " | ".join(shown) + " |")
    return "\n".join(lines) + "\n"


def refusal(reason: str) -> str:
    """A cell's reason in a few words: a CUDA graph that could not hold the model, and why."""
    nodes = CPU_NODES.search(reason)
    if nodes:
        return f"CUDA graph refused: {nodes[1]} of {nodes[2]} nodes on the CPU provider ({nodes[3]})"
    return "CUDA graph capture failed" if "CUDA graph" in reason else reason.split(":")[0][:80]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--markdown", type=Path, required=True, metavar="CSV")
    print(markdown(parser.parse_args().markdown), end="")


if __name__ == "__main__":
    main()
