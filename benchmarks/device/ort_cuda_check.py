"""ONNX Runtime on CUDA, checked on a GPU machine through farm's own cell runner.

zoo:resnet50 at fp32 and fp16, batch 1 and 32, with and without CUDA graphs, on the CUDA EP
(`[backends.onnxruntime] device = "cuda"`): each cell's median latency, throughput, H2D / compute /
D2H (CUDA events), its accuracy verdict against the CPU fp32 reference, and its kernel rows'
coverage. Before the cells, one session is opened directly to show what ONNX Runtime started
(providers, the CUDA-event API, where the nodes ran, what its profile's events are). A TensorRT
EP cell and a CUDA EP int8 cell show how they are refused here. Run from the repository root:

    python3 benchmarks/device/ort_cuda_check.py --out $OUT
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

SWEEP = """name = "ort-cuda-check"
[[models]]
source = "zoo:resnet50"
[axes]
precisions = ["fp32", "fp16", "int8", "tf32"]
batch_sizes = [1, 32]
backends = ["onnxruntime"]
[backends.onnxruntime]
device = "cuda"
provider = ["default", "tensorrt"]
cuda_graph = [false, true]
[measurement]
warmup_ms = 300
min_iterations = 50
min_duration_ms = 1000
repeats = 3
layer_iterations = 10
"""


def probe(plan, cache: Path) -> dict:
    """One fp32 b1 session opened by hand: providers, copies API, node placement, profile events."""
    import numpy as np

    from farm.backends.registry import backend_class
    from farm.cell_runner import build_request
    from farm.models import make_feeds

    cell = next(c for c in plan.cells if c.precision == "fp32" and c.batch == 1 and not c.options["cuda_graph"]
                and c.options["provider"] == "default")
    backend = backend_class("onnxruntime")(cell.options)
    feeds = make_feeds(cell.model.inputs, cell.input_shapes, 0)
    work = cache / "probe"
    work.mkdir(parents=True, exist_ok=True)
    facts: dict = {}
    try:
        backend.build(build_request(cell, cell.model.path, work, cache), feeds)
        facts["providers"] = backend.session.get_providers()
        facts["copies_and_events"] = type(backend.memory).__name__
        opts = backend._session_options()
        opts.enable_profiling, opts.profile_file_prefix = True, str(work / "p")
        session = backend._new_session(opts, cuda_graph=False)
        for _ in range(5):
            session.run(None, feeds)
        events = backend._read_profile(session)
        facts["profile_event_categories"] = dict(Counter(e.get("cat") for e in events))
        nodes = [e for e in events if e.get("cat") == "Node" and e["name"].endswith("_kernel_time")]
        runs = [e for e in events if e.get("cat") == "Session" and e.get("name") == "model_run"]
        facts["node_event_args_example"] = nodes[-1].get("args") if nodes else None
        facts["last_run_us"] = runs[-1]["dur"] if runs else None
        facts["last_run_node_events_sum_us"] = sum(e["dur"] for e in nodes if runs and e["ts"] >= runs[-1]["ts"])
        from farm.backends.ort_profile import node_providers

        facts["node_placement"] = node_providers(events)
        out = backend.outputs(feeds)
        facts["output_finite"] = bool(all(np.isfinite(v).all() for v in out.values()))
    finally:
        backend.close()
    return facts


def row(cell, result) -> dict:
    m = result.measurement or {}
    verdicts = sorted({a.get("verdict") for a in result.accuracy}) if result.accuracy else []
    layer_ms = sum(sum(layer.times_ms) / len(layer.times_ms) for layer in result.layers if layer.times_ms)
    kinds = sorted({layer.kind for layer in result.layers})
    compute = m.get("compute_median_ms")
    return {"precision": cell.precision, "batch": cell.batch, "provider": cell.options["provider"],
            "cuda_graph": cell.options["cuda_graph"], "status": result.status, "reason": result.reason,
            "latency_median_ms": m.get("latency_median_ms"),
            "throughput_samples_per_s": m.get("throughput_samples_per_s"), "h2d_median_ms": m.get("h2d_median_ms"),
            "compute_median_ms": compute, "d2h_median_ms": m.get("d2h_median_ms"),
            "enqueue_median_ms": m.get("enqueue_median_ms"), "accuracy": ",".join(v for v in verdicts if v),
            "worst": "; ".join(str(a.get("worst_metric")) for a in result.accuracy if a.get("verdict") != "pass")[:160],
            "layer_rows": len(result.layers), "layer_kinds": kinds,
            "layer_coverage_percent": round(100 * layer_ms / compute, 1) if compute and result.layers else None,
            "build_s": result.build.build_s if result.build else None,
            "device": (result.device or {}).get("name"), "traceback_tail": (result.traceback or "")[-600:]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--only", default="", help="cells to run, e.g. 'fp32:32:false,fp16:1:true' "
                        "(precision:batch:cuda_graph, the CUDA EP); default: every cell")
    parser.add_argument("--copies", choices=("auto", "torch"), default="auto",
                        help="torch: PyTorch's copies and events even where cuda-python is installed")
    args = parser.parse_args()
    import onnxruntime as ort

    from farm.cell_runner import run_cell
    from farm.config import load_config
    from farm.plan import plan_sweep

    args.out.mkdir(parents=True, exist_ok=True)
    if args.copies == "torch":
        from farm.backends import ort_cuda

        ort_cuda.cuda_memory = ort_cuda.TorchMemory  # the other real path, chosen by hand
    cache = args.out / "cache"
    sweep = args.out / "ort-cuda-check.toml"
    sweep.write_text(SWEEP)
    plan = plan_sweep(load_config(sweep), cache)
    print(f"onnxruntime {ort.__version__}; available providers {ort.get_available_providers()}", flush=True)
    try:
        facts = probe(plan, cache)
    except Exception as exc:  # noqa: BLE001 - the cells below still say what happened, each with its reason
        facts = {"probe_error": f"{type(exc).__name__}: {exc}"}
    print(json.dumps(facts, indent=1, default=str), flush=True)
    rows = []
    for cell in plan.cells:
        if cell.options["provider"] == "tensorrt" and cell.options["cuda_graph"]:
            continue  # one TensorRT EP cell per precision and batch says enough
        if cell.precision == "tf32" and cell.options["provider"] == "default" and not args.only:
            continue  # tf32 on the CUDA EP: not in this check's table
        key = f"{cell.precision}:{cell.batch}:{str(cell.options['cuda_graph']).lower()}"
        if args.only and (cell.options["provider"] != "default" or key not in args.only.split(",")):
            continue
        start = time.perf_counter()
        result = run_cell(cell, cache)
        rows.append(row(cell, result) | {"cell_s": round(time.perf_counter() - start, 1)})
        r = rows[-1]
        print(f"{r['precision']:5} b{r['batch']:<3} {r['provider']:8} graph={str(r['cuda_graph']):5} {r['status']:11} "
              f"lat={r['latency_median_ms']} thr={r['throughput_samples_per_s']} h2d={r['h2d_median_ms']} "
              f"compute={r['compute_median_ms']} d2h={r['d2h_median_ms']} acc={r['accuracy']} "
              f"layers={r['layer_rows']}{r['layer_kinds']} cov={r['layer_coverage_percent']} "
              f"({r['cell_s']} s) {r['reason'] or ''}", flush=True)
    (args.out / "ort_cuda_check.json").write_text(json.dumps({"facts": facts, "cells": rows}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
