"""Plant a known slowdown in an ONNX model: one layer does FACTOR times the work, the outputs stay
the same (mathematically exact; see below for rounding). For checking that `farm compare` finds a
regression, and the layer it is in.

The chosen node (by --layer NAME, else the N-th Conv/MatMul/Gemm, 1 = the first) is run
FACTOR - 1 more times, each copy on its first input scaled by a different constant (1 + k/64: no
two copies are the same computation, so common-subexpression elimination cannot merge them), and
their sum, multiplied by zero, is added to the node's output:

    y = node(x)   ->   y = node(x) + 0 * (node(1.0156 x) + node(1.0312 x) + ...)

Every copy depends on the model's input, so no runtime can fold it into a constant, and ONNX
Runtime's optimizers remove `Add 0` and `Mul 1`, not a product with zero (the outputs equal the
original's up to the runtime's rounding: ONNX Runtime CPU lays the convolution out differently
once an Add follows it, 1e-5 at most on tests/conftest.py's tiny CNN). The copies are named
`<node>_planted<k>` (their outputs `<output>_planted<k>`), so per-layer rows name them; the node
keeps its name and its output's consumers read the sum's result, under the output's old name.

    .venv/bin/python benchmarks/plant_slowdown.py model.onnx planted.onnx [--layer conv] [--nth 1] [--factor 4]

A sweep of the planted file under the same model name (and the same settings) as a sweep of the
original is then slower at that layer: `farm compare ORIGINAL PLANTED` should say 'slower' and
list the planted copies among the layers that explain it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

HEAVY_OPS = ("Conv", "MatMul", "Gemm")


def pick_node(graph, layer: str | None, nth: int):
    """The node named `layer`, else the `nth` (1-based) Conv/MatMul/Gemm; ValueError naming the
    candidates where there is none."""
    heavy = [n for n in graph.node if n.op_type in HEAVY_OPS]
    if layer is not None:
        found = [n for n in graph.node if n.name == layer]
        if not found:
            raise ValueError(f"no node named {layer!r}; Conv/MatMul/Gemm nodes: {', '.join(n.name for n in heavy)}")
        return found[0]
    if not 1 <= nth <= len(heavy):
        raise ValueError(f"--nth {nth}: the model has {len(heavy)} Conv/MatMul/Gemm nodes")
    return heavy[nth - 1]


def input_type(graph, name: str) -> int:
    """The element type of tensor `name` (graph input, value info or initializer); float if unknown."""
    from onnx import TensorProto

    for info in (*graph.input, *graph.value_info, *graph.output):
        if info.name == name and info.type.tensor_type.elem_type:
            return info.type.tensor_type.elem_type
    for init in graph.initializer:
        if init.name == name:
            return init.data_type
    return TensorProto.FLOAT


def plant(model, layer: str | None = None, nth: int = 1, factor: int = 4) -> str:
    """Plant the slowdown in `model` (an onnx ModelProto, changed in place); the planted node's name."""
    import numpy as np
    from onnx import helper, numpy_helper
    from onnx.helper import tensor_dtype_to_np_dtype

    if factor < 2:
        raise ValueError(f"--factor {factor}: give 2 or more (the work of the layer is multiplied by it)")
    graph = model.graph
    node = pick_node(graph, layer, nth)
    name, output, first = node.name or node.output[0], node.output[0], node.input[0]
    dtype = tensor_dtype_to_np_dtype(input_type(graph, first))
    kept = f"{output}_unplanted"
    node.output[0] = kept
    added, copies = [], []
    for k in range(1, factor):
        scale = f"{name}_planted_scale{k}"
        graph.initializer.append(numpy_helper.from_array(np.array(1 + k / 64, dtype=dtype), scale))
        added.append(helper.make_node("Mul", [first, scale], [f"{first}_planted_in{k}"], name=f"{name}_planted_in{k}"))
        copy = helper.make_node(node.op_type, [f"{first}_planted_in{k}", *node.input[1:]], [f"{output}_planted{k}"],
                                name=f"{name}_planted{k}", domain=node.domain)
        copy.attribute.extend(node.attribute)
        added.append(copy)
        copies.append(copy.output[0])
    graph.initializer.append(numpy_helper.from_array(np.array(0, dtype=dtype), f"{name}_planted_zero"))
    added += [helper.make_node("Sum", copies, [f"{output}_planted_sum"], name=f"{name}_planted_sum"),
              helper.make_node("Mul", [f"{output}_planted_sum", f"{name}_planted_zero"], [f"{output}_planted_zeroed"],
                               name=f"{name}_planted_zeroed"),
              helper.make_node("Add", [kept, f"{output}_planted_zeroed"], [output], name=f"{name}_planted_add")]
    position = list(graph.node).index(node) + 1
    for offset, new in enumerate(added):
        graph.node.insert(position + offset, new)
    return name


def plant_file(source: Path, target: Path, layer: str | None = None, nth: int = 1, factor: int = 4) -> str:
    """Write `target`: `source` with the slowdown planted (checked by onnx.checker); the node's name."""
    import onnx

    from farm.files import write_atomic

    model = onnx.load(str(source))
    name = plant(model, layer, nth, factor)
    onnx.checker.check_model(model)
    write_atomic(Path(target), lambda tmp: onnx.save(model, str(tmp)))
    return name


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("source", type=Path, help="ONNX model")
    parser.add_argument("target", type=Path, help="where to write the planted copy")
    parser.add_argument("--layer", default=None, help="node to slow down (default: the --nth Conv/MatMul/Gemm)")
    parser.add_argument("--nth", type=int, default=1, help="which Conv/MatMul/Gemm, 1 = the first (default 1)")
    parser.add_argument("--factor", type=int, default=4, help="times the layer's work (default 4)")
    args = parser.parse_args(argv)
    try:
        name = plant_file(args.source, args.target, args.layer, args.nth, args.factor)
    except (ValueError, OSError) as exc:
        print(f"plant_slowdown: {exc}", file=sys.stderr)
        return 2
    print(f"{args.target}: node {name!r} runs {args.factor} times (copies {name}_planted1..{args.factor - 1}), "
          "outputs unchanged")
    return 0


if __name__ == "__main__":
    sys.exit(main())
