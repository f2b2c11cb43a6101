"""Models whose inputs are of a type numpy lacks (bfloat16, float8: ml_dtypes arrays) run on both CPU
engines and are judged, with seeded values spread over their range; uint32 runs on PyTorch (as
int64); a packed 4-bit input is unsupported on both, saying why, and so is an input that is no
tensor. ONNX Runtime's session.run used to fail such cells ("Numpy_type 256 can't be converted to
MLDataType"), and a float8 input's name could stop the whole plan."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402

from farm.cli import main  # noqa: E402
from farm.models import make_feeds  # noqa: E402
from farm.records import InputSpec  # noqa: E402
from farm.warehouse import Warehouse  # noqa: E402
from tests.conftest import saved_model, write_sweep  # noqa: E402

TYPES = {"f8": TensorProto.FLOAT8E4M3FN, "bf16": TensorProto.BFLOAT16, "u32": TensorProto.UINT32, "i4": TensorProto.INT4}


def cast_model(path: Path, element_type: int) -> None:
    """y = float(x) * 2 + 1: the engines must read x's values as its type says."""
    nodes = [helper.make_node("Cast", ["x"], ["f"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["f", "two"], ["g"]), helper.make_node("Add", ["g", "one"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", element_type, ["batch", 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])],
                              [helper.make_tensor("two", TensorProto.FLOAT, [], [2.0]),
                               helper.make_tensor("one", TensorProto.FLOAT, [], [1.0])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    onnx.save(model, path)


def swept(tmp_path: Path, sweep: str, query: str) -> list[tuple]:
    """Run `sweep` (the suite's quick measurement settings) on this machine; `query`'s rows of its warehouse."""
    assert main(["sweep", str(write_sweep(tmp_path, sweep)), "--results", str(tmp_path / "r"), "--executor", "local"]) == 0
    return Warehouse(tmp_path / "r").connect().execute(query).fetchall()


def test_inputs_of_types_numpy_lacks(tmp_path: Path) -> None:
    models = ""
    for name, element_type in TYPES.items():
        cast_model(tmp_path / f"{name}.onnx", element_type)
        models += f'[[models]]\nsource = "{name}.onnx"\n'
    rows = swept(tmp_path, models + """[axes]
precisions = ["fp32"]
batch_sizes = [2]
backends = ["onnxruntime", "torch"]
[backends.torch]
device = "cpu"
""", "SELECT c.model, c.backend, c.status, c.reason, a.verdict FROM cells c LEFT JOIN accuracy a USING (cell_id)")
    cells = {(m, b): (status, reason, verdict) for m, b, status, reason, verdict in rows}
    for model in ("f8", "bf16"):
        for backend in ("onnxruntime", "torch"):
            assert cells[model, backend][0] == "ok" and cells[model, backend][2] == "pass", cells[model, backend]
    assert cells["u32", "torch"][0] == "ok" and cells["u32", "torch"][2] == "pass", cells["u32", "torch"]
    for backend in ("onnxruntime", "torch"):
        status, reason, _ = cells["i4", backend]
        assert status == "unsupported" and reason.startswith("input 'x' is int4, which ONNX packs"), reason


@pytest.mark.parametrize("dtype", ["bfloat16", "float8_e4m3fn"])
def test_narrow_float_inputs_are_spread_over_their_range(dtype: str) -> None:
    """Drawn as floats, not as the integers of [low, high): numpy calls these types 'V', not 'f'."""
    spec = InputSpec(name="x", dtype=dtype, shape=("batch", 64), low=-1.0, high=1.0)
    values = make_feeds((spec,), {"x": (4, 64)}, seed=0)["x"].astype(np.float32)
    assert values.dtype == np.float32 and len(np.unique(values)) > 10 and values.min() >= -1 and values.max() <= 1


def test_an_input_that_is_not_a_tensor_is_unsupported_and_the_sweep_goes_on(tmp_path: Path) -> None:
    sequence = helper.make_tensor_sequence_value_info("s", TensorProto.FLOAT, None)
    saved_model(helper.make_graph([helper.make_node("SequenceLength", ["s"], ["y"])], "g", [sequence],
                                  [helper.make_tensor_value_info("y", TensorProto.INT64, [])]), tmp_path / "seq.onnx")
    cast_model(tmp_path / "bf16.onnx", TensorProto.BFLOAT16)
    cells = {m: (s, r) for m, s, r in swept(tmp_path, """[[models]]
source = "seq.onnx"
[[models]]
source = "bf16.onnx"
[axes]
precisions = ["fp32"]
batch_sizes = [2]
backends = ["onnxruntime"]
""", "SELECT model, status, reason FROM cells")}
    assert cells["seq"] == ("unsupported", "input 's' is a sequence, not a tensor: farm makes tensor inputs only; "
                                           "give the model tensor inputs"), cells
    assert cells["bf16"][0] == "ok", cells
