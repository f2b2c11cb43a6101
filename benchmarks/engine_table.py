"""The engine table of docs/gpu-figures.md: inferences/s and energy per inference of every engine of
a sweep at one precision, a column per model and batch, the best of each column in bold, made from
the warehouse that holds the cells (examples/results):

    python3 benchmarks/engine_table.py --markdown examples/results

prints the table with the line docs/gpu-figures.md keeps above it (benchmarks/docs_tables.py
checks every generated table of the docs against its command)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from farm.warehouse import WarehouseReader

# (label, backend, options key, value): the table's rows, in order
ENGINES = (("PyTorch eager", "torch", "mode", "eager"),
           ("PyTorch `torch.compile`", "torch", "mode", "compile"),
           ("PyTorch CUDA graphs", "torch", "mode", "cudagraphs"),
           ("ONNX Runtime CUDA", "onnxruntime", "cuda_graph", "false"),
           ("ONNX Runtime CUDA + CUDA graphs", "onnxruntime", "cuda_graph", "true"))
MODELS = {"resnet50": "ResNet-50", "bert-base": "BERT-base"}

QUERY = """SELECT c.model, c.batch, c.backend, c.options, m.throughput_samples_per_s, m.energy_per_sample_mj
FROM cells c JOIN measurements m USING (cell_id)
WHERE c.sweep_id = ? AND c.precision = ? AND c.status = 'ok'"""


def markdown(results: Path, sweep: str = "gpu-engines", precision: str = "fp16",
             batches: tuple[int, ...] = (1, 128)) -> str:
    """The table (with its made-by line) of `sweep`'s `precision` cells in the warehouse `results`."""
    import json

    reader = WarehouseReader(results)
    rows = reader.connect().execute(QUERY, [sweep, precision]).fetchall()
    figures: dict[tuple, tuple[float, float]] = {}
    for model, batch, backend, options, per_s, mj in rows:
        opts = options if isinstance(options, dict) else json.loads(options or "{}")
        for label, engine, key, value in ENGINES:
            if backend == engine and str(opts.get(key, "")).lower() == value:
                figures[(label, model, batch)] = (per_s, mj)
    columns = [(model, batch) for model in MODELS for batch in batches]
    best = {column: max((f[0], label) for (label, *c), f in figures.items() if tuple(c) == column)[1]
            for column in columns if any(tuple(k[1:]) == column for k in figures)}
    command = f"python3 benchmarks/engine_table.py --markdown {results.as_posix()}"
    out = [f"<!-- made by `{command}`: edit there -->",
           f"| {precision}, H200 | " + " | ".join(f"{MODELS[m]} b{b}" for m, b in columns) + " |",
           "| --- |" + " --- |" * len(columns)]
    for label, *_ in ENGINES:
        cells = []
        for column in columns:
            if (label, *column) not in figures:
                cells.append("-")
                continue
            per_s, mj = figures[(label, *column)]
            text = f"{per_s:,.0f}/s, {mj:,.0f} mJ"
            cells.append(f"**{text}**" if best.get(column) == label else text)
        out.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--markdown", type=Path, required=True, metavar="RESULTS", help="the warehouse folder")
    parser.add_argument("--sweep", default="gpu-engines")
    parser.add_argument("--precision", default="fp16")
    args = parser.parse_args()
    sys.stdout.write(markdown(args.markdown, args.sweep, args.precision))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
