"""Where farm's int8 Q/DQ pairs go, measured: on the inputs of the weighted operators only (farm's
placement, farm.precision.int8.WEIGHTED_OPS) against ONNX Runtime quantize_static's default (every
operator it has a quantized form for: Add, Mul, Reshape, Transpose, Gather, Softmax ...), both made
by farm's own transform (farm.precision.int8.quantize_qdq), same options and calibration otherwise.
For each model: both files' Q/DQ node counts, their lowest cosine against the fp32 model over
seeded inputs, and their latency on ONNX Runtime CPU (one thread) in alternating rounds, as the
median ratio farm / default with its range.

    python3 benchmarks/int8_placement.py model.onnx [more.onnx ...] --batch 1
    python3 benchmarks/int8_placement.py --quick      # a small MatMul model: the suite
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from farm.precision.int8 import WEIGHTED_OPS, quantize_qdq  # noqa: E402


def feeds_for(session, batch: int, rng) -> dict[str, np.ndarray]:
    """Seeded inputs: floats from a normal, integer ids below 100, attention masks of ones."""
    feeds = {}
    for spec in session.get_inputs():
        shape = [d if isinstance(d, int) else batch for d in spec.shape]
        if "int64" in spec.type:
            feeds[spec.name] = np.ones(shape, np.int64) if "mask" in spec.name else rng.integers(0, 100, shape)
        else:
            feeds[spec.name] = rng.standard_normal(shape).astype(np.float32)
    return feeds


def compared(model: Path, batch: int, rounds: int, round_s: float, work: Path) -> dict:
    import onnx
    import onnxruntime as ort

    rng = np.random.default_rng(0)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    fp32 = ort.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])
    calibration = [feeds_for(fp32, batch, rng) for _ in range(8)]
    files = {"farm": work / f"{model.stem}-farm.onnx", "default": work / f"{model.stem}-default.onnx"}
    for name, path in files.items():  # farm's own transform, its placement or quantize_static's default
        quantize_qdq(model, path, calibration, work, WEIGHTED_OPS if name == "farm" else None)
    sessions = {k: ort.InferenceSession(str(p), options, providers=["CPUExecutionProvider"]) for k, p in files.items()}
    tests = [feeds_for(fp32, batch, rng) for _ in range(4)]
    reference = [fp32.run(None, f)[0].ravel() for f in tests]
    found = {"model": model.name, "batch": batch}
    for name, session in sessions.items():
        got = [session.run(None, f)[0].ravel() for f in tests]
        found[f"{name}_cosine"] = min(float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b) or 1.0))
                                      for a, b in zip(reference, got))
        found[f"{name}_qdq_nodes"] = sum(n.op_type in ("QuantizeLinear", "DequantizeLinear")
                                         for n in onnx.load(str(files[name])).graph.node)
    times: dict[str, list[float]] = {"farm": [], "default": []}
    for round_index in range(rounds):  # A B, B A, ...: drift falls on both alike
        for name in ("farm", "default") if round_index % 2 == 0 else ("default", "farm"):
            session, count, start = sessions[name], 0, time.perf_counter()
            while count < 2 or time.perf_counter() - start < round_s:
                session.run(None, tests[0])
                count += 1
            times[name].append((time.perf_counter() - start) * 1000 / count)
    ratios = [a / b for a, b in zip(times["farm"], times["default"])]
    found.update({"farm_ms": statistics.median(times["farm"]), "default_ms": statistics.median(times["default"]),
                  "ratio": statistics.median(ratios), "ratio_low": min(ratios), "ratio_high": max(ratios)})
    return found


def quick_model(path: Path) -> Path:
    """Two MatMuls with an Add and a Relu between: what both placements quantize differently."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(1)
    weights = [numpy_helper.from_array(rng.standard_normal((16, 16)).astype(np.float32), f"w{i}") for i in range(2)]
    bias = numpy_helper.from_array(rng.standard_normal(16).astype(np.float32), "b")
    nodes = [helper.make_node("MatMul", ["x", "w0"], ["h"]), helper.make_node("Add", ["h", "b"], ["a"]),
             helper.make_node("Relu", ["a"], ["r"]), helper.make_node("MatMul", ["r", "w1"], ["y"])]
    graph = helper.make_graph(nodes, "quick", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 16])], [*weights, bias])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    proto.ir_version = 8
    onnx.save(proto, str(path))
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="*", type=Path)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--round-s", type=float, default=0.3)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="int8-placement.") as scratch:
        work = Path(scratch)
        if args.quick:
            args.models, args.rounds, args.round_s = [quick_model(work / "quick.onnx")], 4, 0.02
        if not args.models:
            parser.error("give ONNX model files (or --quick)")
        print(f"placement farm: Q/DQ on the inputs of {', '.join(WEIGHTED_OPS)}; default: quantize_static's own")
        print("model  batch  Q/DQ nodes farm/default  min cosine farm/default  ms farm/default  farm / default (range)")
        for model in args.models:
            r = compared(model, args.batch, args.rounds, args.round_s, work)
            print(f"{r['model']}  {r['batch']}  {r['farm_qdq_nodes']}/{r['default_qdq_nodes']}  "
                  f"{r['farm_cosine']:.5f}/{r['default_cosine']:.5f}  {r['farm_ms']:.3f}/{r['default_ms']:.3f}  "
                  f"{r['ratio']:.3f} ({r['ratio_low']:.3f}-{r['ratio_high']:.3f})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
