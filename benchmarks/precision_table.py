"""The H200 precision table of docs/precision.md: bf16, int8 and fp8 on PyTorch (torchao) per model,
batch and mode, each with its samples/s, the ratio to bf16 and the accuracy verdict against fp32,
from benchmarks/results/quantized-torch-h200.csv (benchmarks/device/quantized-torch.toml on one H200):

    python3 benchmarks/precision_table.py --markdown benchmarks/results/quantized-torch-h200.csv"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

PRECISIONS = ("bf16", "int8", "fp8")


def markdown(path: Path) -> str:
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    cells = {(r["model"], r["mode"], int(r["batch"]), r["precision"]): r for r in rows}
    lines = [f"<!-- made by `python3 benchmarks/precision_table.py --markdown {path}`: edit there -->",
             "| model | mode | batch | " + " | ".join(PRECISIONS) + " |",
             "| --- | --- | --- | " + " | ".join("---" for _ in PRECISIONS) + " |"]
    for model, mode, batch in sorted({k[:3] for k in cells}, key=lambda k: (k[0], k[1] != "cudagraphs", k[2])):
        base = cells.get((model, mode, batch, "bf16"))
        shown = []
        for precision in PRECISIONS:
            cell = cells.get((model, mode, batch, precision))
            if cell is None:
                shown.append("not run")
            elif cell["status"] != "ok":
                shown.append(f"{cell['status']}: CUDA graph capture failed" if "CUDA graph" in cell["reason"]
                             else cell["status"])
            else:
                rate = float(cell["samples_per_s"])
                ratio = f" ({rate / float(base['samples_per_s']):.2f}× bf16)" if base and precision != "bf16" else ""
                judged = cell["min_cosine"] and cell["verdict"] in ("pass", "fail")  # unjudged: no figure decided it
                accuracy = cell["verdict"] + (f", cosine {float(cell['min_cosine']):.4f}" if judged else "")
                shown.append(f"{rate:,.0f}/s{ratio}, {accuracy}")
        lines.append(f"| {model} | {mode} | {batch} | " + " | ".join(shown) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--markdown", type=Path, required=True, metavar="CSV")
    print(markdown(parser.parse_args().markdown), end="")


if __name__ == "__main__":
    main()
