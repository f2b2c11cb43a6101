"""Inputs the way exporters write them: a batch axis found by its name (or `batch_dim`), states and
scalars fed as declared, integer inputs that need their values, dims with dotted, `?` or no
names. Each model is real ONNX built here and run by ONNX Runtime on farm's feeds; every
suggestion in an error is parsed as TOML and pasted back into the sweep, which then plans."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from farm.config import load_config
from farm.config.keys import toml_inline_table, toml_key
from farm.errors import ConfigError
from farm.models import BATCH_NAMES, InputSpec, make_feeds
from farm.models.zoo import ZOO, make_bert
from farm.plan import _input_identity, plan_sweep
from tests.conftest import write_sweep

HIDDEN = 128


def save(path: Path, nodes, inputs, outputs, initializers=()) -> Path:
    graph = helper.make_graph(nodes, path.stem, inputs, outputs, list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return path


def lstm_model(path: Path, batch: str = "B") -> Path:
    """x [B, 16] and an LSTM state [2, B, 128] (bidirectional): the batch is axis 1 of the state."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((2, 4 * HIDDEN, 16)).astype(np.float32) * 0.1, "W")
    r = numpy_helper.from_array(rng.standard_normal((2, 4 * HIDDEN, HIDDEN)).astype(np.float32) * 0.1, "R")
    axes = numpy_helper.from_array(np.array([0], np.int64), "axes")
    nodes = [helper.make_node("Unsqueeze", ["x", "axes"], ["seq"]),  # [1, B, 16]: one time step
             helper.make_node("LSTM", ["seq", "W", "R", "", "", "state"], ["", "h"], hidden_size=HIDDEN,
                              direction="bidirectional")]
    return save(path, nodes,
                [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 16]),
                 helper.make_tensor_value_info("state", TensorProto.FLOAT, [2, batch, HIDDEN])],
                [helper.make_tensor_value_info("h", TensorProto.FLOAT, [2, batch, HIDDEN])], [w, r, axes])


def sample_rate_model(path: Path) -> Path:
    """x [batch, 16] scaled by an int64 scalar: y = x * sample_rate / 16000."""
    scale = numpy_helper.from_array(np.array(16000, np.float32), "scale")
    nodes = [helper.make_node("Cast", ["sample_rate"], ["rate"], to=TensorProto.FLOAT),
             helper.make_node("Div", ["rate", "scale"], ["factor"]),
             helper.make_node("Mul", ["x", "factor"], ["y"])]
    return save(path, nodes,
                [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 16]),
                 helper.make_tensor_value_info("sample_rate", TensorProto.INT64, [])],
                [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 16])], [scale])


def relu_model(path: Path, shape: list) -> Path:
    return save(path, [helper.make_node("Relu", ["x"], ["y"])],
                [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)])


def concat_model(path: Path) -> Path:
    """a [batch, ?] and b [batch, (no name)] of different sizes, joined: y [batch, a + b]."""
    return save(path, [helper.make_node("Concat", ["a", "b"], ["y"], axis=1)],
                [helper.make_tensor_value_info("a", TensorProto.FLOAT, ["batch", "?"]),
                 helper.make_tensor_value_info("b", TensorProto.FLOAT, ["batch", None])],
                [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", None])])


def sweep(directory: Path, model: str, table: str = "", batch_sizes: str = "[1, 4]") -> Path:
    """A sweep file; `table` goes into the model's table (where the suggestions are pasted)."""
    return write_sweep(directory, f'[[models]]\nsource = "{model}"\n{table}\n[axes]\nbatch_sizes = {batch_sizes}\n')


def plan(path: Path):
    return plan_sweep(load_config(path), path.parent / "cache")


def plan_error(path: Path) -> str:
    with pytest.raises(ConfigError) as info:
        plan(path)
    message = str(info.value)
    assert message.startswith(f"{path}: models[0]") and "\n" not in message, message
    return message


def suggestion(message: str) -> str:
    """The TOML line an error suggests, checked to be valid TOML on its own."""
    match = re.search(r" in models\[0\]: (.+)$", message)
    assert match, message
    tomllib.loads(match.group(1))
    return match.group(1)


def run_cells(cells, output: str = "y") -> dict[int, np.ndarray]:
    """Run each supported cell's feeds through ONNX Runtime, as farm's workers do."""
    results = {}
    for cell in cells:
        if cell.unsupported_reason:
            continue
        feeds = make_feeds(cell.model.inputs, cell.input_shapes, cell.measurement.seed)
        assert {k: v.shape for k, v in feeds.items()} == cell.input_shapes
        session = ort.InferenceSession(str(cell.model.path), providers=["CPUExecutionProvider"])
        (results[cell.batch],) = session.run([output], feeds)
    return results


# --- the batch axis is the one its name marks ----------------------------------------------------

@pytest.mark.parametrize("name", ["B", "batch", "N", "batch_size", "bs"])
def test_state_input_is_batched_on_its_own_batch_axis(name: str, tmp_path: Path) -> None:
    lstm_model(tmp_path / "lstm.onnx", batch=name)
    cells = plan(sweep(tmp_path, "lstm.onnx")).cells
    assert [c.unsupported_reason for c in cells] == [None, None]
    assert {c.batch: c.input_shapes for c in cells} == {
        1: {"x": (1, 16), "state": (2, 1, HIDDEN)}, 4: {"x": (4, 16), "state": (2, 4, HIDDEN)}}
    state = cells[0].model.inputs[1]
    assert (state.batch_axis, state.profile_key(0), state.profile_key(1)) == (1, None, "batch")
    outputs = run_cells(cells, "h")
    assert outputs[1].shape == (2, 1, HIDDEN) and outputs[4].shape == (2, 4, HIDDEN)
    assert np.isfinite(outputs[4]).all() and outputs[4].std() > 0


def test_batch_names_are_case_insensitive_and_documented() -> None:
    docs = (Path(__file__).resolve().parent.parent / "docs" / "config.md").read_text()
    for name in BATCH_NAMES:
        assert f"`{name}`" in docs
    assert "b" in BATCH_NAMES and "n" in BATCH_NAMES  # matched case-insensitively: `B`, `N`


def test_batch_dim_names_a_batch_no_name_marks(tmp_path: Path) -> None:
    lstm_model(tmp_path / "lstm.onnx", batch="p2o.DynamicDimension.0")
    path = sweep(tmp_path, "lstm.onnx")
    message = plan_error(path)  # no batch axis: the dimension needs a size, or batch_dim
    assert "'p2o.DynamicDimension.0' (input 'x' axis 0)" in message
    assert 'set batch_dim instead (e.g. batch_dim = "p2o.DynamicDimension.0")' in message
    cells = plan(sweep(tmp_path, "lstm.onnx", 'batch_dim = "p2o.DynamicDimension.0"')).cells
    assert {c.batch: c.input_shapes["state"] for c in cells} == {1: (2, 1, HIDDEN), 4: (2, 4, HIDDEN)}
    assert set(run_cells(cells, "h")) == {1, 4}


def test_unnamed_batch_axis_named_by_input_and_axis(tmp_path: Path) -> None:
    relu_model(tmp_path / "m.onnx", ["?", 16])
    cells = plan(sweep(tmp_path, "m.onnx", 'batch_dim = "x:0"')).cells
    assert {c.batch: c.input_shapes for c in cells} == {1: {"x": (1, 16)}, 4: {"x": (4, 16)}}
    assert {b: y.shape for b, y in run_cells(cells).items()} == {1: (1, 16), 4: (4, 16)}


def test_an_unnamed_first_axis_of_every_input_is_the_batch(tmp_path: Path) -> None:
    """No batch name, but every input starts with the same dynamic axis (an exporter's '?' or
    'unk__612'): that axis is the batch, as it was before batch names were read."""
    relu_model(tmp_path / "m.onnx", ["?", 16])
    cells = plan(sweep(tmp_path, "m.onnx")).cells
    assert {c.batch: c.input_shapes for c in cells} == {1: {"x": (1, 16)}, 4: {"x": (4, 16)}}
    assert {b: y.shape for b, y in run_cells(cells).items()} == {1: (1, 16), 4: (4, 16)}
    relu_model(tmp_path / "t.onnx", ["unk__612", 16])
    assert [c.input_shapes["x"] for c in plan(sweep(tmp_path, "t.onnx")).cells] == [(1, 16), (4, 16)]


def test_model_without_batch_axis_runs_as_declared_at_batch_1_only(tmp_path: Path) -> None:
    lstm_model(tmp_path / "lstm.onnx", batch="p2o.DynamicDimension.0")  # the state's axis 0 is fixed: no batch
    message = plan_error(sweep(tmp_path, "lstm.onnx"))
    cells = plan(sweep(tmp_path, "lstm.onnx", suggestion(message))).cells  # sized as declared
    by_batch = {c.batch: c for c in cells}
    assert by_batch[1].unsupported_reason is None and by_batch[1].input_shapes["x"] == (128, 16)
    assert by_batch[4].unsupported_reason.startswith("model 'lstm' has no batch axis (no input has a dynamic "
                                                     "dimension named batch, batch_size")
    assert 'batch_dim = "NAME" or "INPUT:AXIS"' in by_batch[4].unsupported_reason
    assert run_cells([by_batch[1]], "h")[1].shape == (2, 128, HIDDEN)


def test_batch_dim_empty_list_means_no_batch_axis(tmp_path: Path) -> None:
    relu_model(tmp_path / "m.onnx", ["batch", 16])
    cells = plan(sweep(tmp_path, "m.onnx", 'batch_dim = []\ndims = { batch = 2 }')).cells
    assert [(c.batch, c.input_shapes["x"], c.unsupported_reason is None) for c in cells] == [
        (1, (2, 16), True), (4, (2, 16), False)]


def test_fixed_batch_model_runs_at_its_batch_only(tmp_path: Path) -> None:
    relu_model(tmp_path / "m.onnx", [2, 16])
    cells = plan(sweep(tmp_path, "m.onnx", batch_sizes="[1, 2]")).cells
    assert {c.batch: c.unsupported_reason for c in cells} == {
        1: "model 'm' has a fixed batch of 2 (axis 0 of every input), so it runs at batch 2 only: export it "
           "with a dynamic batch dimension to sweep batch sizes", 2: None}
    assert run_cells(cells)[2].shape == (2, 16)


@pytest.mark.parametrize("table, expected", [
    ('batch_dim = "batchh"', "models[0].batch_dim: model 'lstm' has no dynamic dimension 'batchh'; "
                             "its dynamic dimensions: B (\"INPUT:AXIS\" names one axis of one input)"),
    ('batch_dim = "x:2"', "models[0].batch_dim: input 'x' has no axis 2: its shape is [B, 16]"),
    ('batch_dim = "x:1"', "models[0].batch_dim: axis 1 of input 'x' is fixed (16): the batch must be a "
                          "dynamic dimension"),
    ('batch_dim = ["B", "state:1", "x:0"]', None),
], ids=["unknown name", "no such axis", "fixed axis", "name and locations agree"])
def test_batch_dim_mistakes(table: str, expected: str | None, tmp_path: Path) -> None:
    lstm_model(tmp_path / "lstm.onnx")
    path = sweep(tmp_path, "lstm.onnx", table)
    if expected is None:
        assert len(plan(path).cells) == 2
    else:
        assert plan_error(path) == f"{path}: {expected}"


def test_two_batch_names_are_ambiguous(tmp_path: Path) -> None:
    save(tmp_path / "m.onnx", [helper.make_node("Add", ["x", "z"], ["y"])],
         [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", "M"]),
          helper.make_tensor_value_info("z", TensorProto.FLOAT, ["batch", "M"])],
         [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", "M"])])
    path = sweep(tmp_path, "m.onnx")
    message = plan_error(path)
    assert message == (f"{path}: models[0]: model 'm' has several dimensions named like a batch: 'N' (input 'x' "
                       "axis 0); 'batch' (input 'z' axis 0); say which one is in models[0]: batch_dim = \"N\"")
    message = plan_error(sweep(tmp_path, "m.onnx", suggestion(message)))  # then 'batch' needs a size
    assert "'batch' (input 'z' axis 0)" in message
    path = sweep(tmp_path, "m.onnx", 'batch_dim = ["N", "x:1"]')
    assert plan_error(path) == (f"{path}: models[0].batch_dim: input 'x' would have two batch axes, 0 and 1: "
                                "say which in models[0]: batch_dim = \"x:1\"")


# --- integer inputs need their values ------------------------------------------------------------

def test_integer_input_without_range_takes_a_default_with_a_note(tmp_path: Path) -> None:
    """(issue 45: one model's missing range no longer stops the sweep's planning)"""
    sample_rate_model(tmp_path / "sr.onnx")
    planned = plan(sweep(tmp_path, "sr.onnx"))
    note = ("sample_rate: its range could not be read from the model (the graph neither indexes a table with it nor "
            "compares it with a constant); using [0, 2): set inputs.sample_rate.value = V (or .range = [lo, hi]) "
            "to choose")
    assert planned.notes() == [f"models[0] (sr): {note}"] and {c.notes for c in planned.cells} == {note}
    assert not plan(sweep(tmp_path, "sr.onnx", "inputs.sample_rate.value = 1")).notes()  # set: no note


def token_and_rate_model(path: Path) -> Path:
    """ids [batch, 8] through an embedding table of 100 rows (past a Cast), and an int64 sample rate
    that an If compares with 16000 inside its condition's subgraph-free graph: y = emb[ids] * (sr == 16000)."""
    table = numpy_helper.from_array(np.random.default_rng(0).standard_normal((100, 4)).astype(np.float32), "emb")
    rate = numpy_helper.from_array(np.array(16000, np.int64), "rate")
    nodes = [helper.make_node("Cast", ["ids"], ["ids64"], to=TensorProto.INT64),
             helper.make_node("Gather", ["emb", "ids64"], ["vectors"]),
             helper.make_node("Equal", ["sr", "rate"], ["is16k"]),
             helper.make_node("Cast", ["is16k"], ["gate"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["vectors", "gate"], ["y"])]
    return save(path, nodes,
                [helper.make_tensor_value_info("ids", TensorProto.INT32, ["batch", 8]),
                 helper.make_tensor_value_info("sr", TensorProto.INT64, [])],
                [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 8, 4])], [table, rate])


def test_integer_values_the_graph_tells_are_used(tmp_path: Path) -> None:
    """Token ids take the embedding table's rows, a sample rate the constant it is compared with;
    the model gives non-zero outputs on them; the sweep file's range still wins."""
    token_and_rate_model(tmp_path / "m.onnx")
    cell = plan(sweep(tmp_path, "m.onnx")).cells[0]
    specs = {spec.name: (spec.low, spec.high) for spec in cell.model.inputs}
    assert specs == {"ids": (0.0, 100.0), "sr": (16000.0, 16000.0)}
    feeds = make_feeds(cell.model.inputs, cell.input_shapes, 0)
    assert feeds["ids"].min() >= 0 and feeds["ids"].max() < 100 and len(np.unique(feeds["ids"])) > 1
    (y,) = ort.InferenceSession(str(cell.model.path), providers=["CPUExecutionProvider"]).run(None, feeds)
    assert np.abs(y).sum() > 0  # sr == 16000: the gate is open
    cell = plan(sweep(tmp_path, "m.onnx", "inputs.ids.range = [0, 10]")).cells[0]
    assert {spec.name: spec.high for spec in cell.model.inputs}["ids"] == 10


@pytest.mark.parametrize("table, expected", [
    ("inputs.sample_rate.range = [0.5, 0.7]", "range: [0.5, 0.7) holds no integer"),
    ("inputs.sample_rate.range = [3.2, 3.9]", "range: [3.2, 3.9) holds no integer"),
    ("inputs.sample_rate.range = [0, 1e30]", "range: [0, 1e+30) does not fit the int64 of input 'sample_rate'"),
    ("inputs.sample_rate.value = 1e30", "value: 1e+30 does not fit the int64 of input 'sample_rate'"),
])
def test_integer_values_that_cannot_be_fed_are_errors_at_planning(table: str, expected: str, tmp_path: Path) -> None:
    """Not a numpy error in every cell at run time, nor a silently wrapped value."""
    sample_rate_model(tmp_path / "sr.onnx")
    message = plan_error(sweep(tmp_path, "sr.onnx", table))
    assert f"models[0].inputs.sample_rate.{expected}" in message and "\n" not in message


def test_a_fractional_integer_range_feeds_the_integers_inside_it(tmp_path: Path) -> None:
    sample_rate_model(tmp_path / "sr.onnx")
    cell = plan(sweep(tmp_path, "sr.onnx", "inputs.sample_rate.range = [3, 3.5]")).cells[0]
    assert make_feeds(cell.model.inputs, cell.input_shapes, 0)["sample_rate"] == 3  # [3, 3.5) holds 3 alone


@pytest.mark.parametrize("table", ["[models.inputs.sample_rate]\nvalue = 16000",
                                   "[models.inputs.sample_rate]\nrange = [16000, 16001]",
                                   "inputs.sample_rate.value = 16000"])
def test_scalar_input_is_fed_as_declared_with_its_value(table: str, tmp_path: Path) -> None:
    sample_rate_model(tmp_path / "sr.onnx")
    cells = plan(sweep(tmp_path, "sr.onnx", table)).cells
    assert {c.batch: c.input_shapes for c in cells} == {1: {"x": (1, 16), "sample_rate": ()},
                                                       4: {"x": (4, 16), "sample_rate": ()}}
    spec = cells[1].model.inputs[1]
    assert (spec.batch_axis, spec.low) == (None, 16000.0)
    feeds = make_feeds(cells[1].model.inputs, cells[1].input_shapes, cells[1].measurement.seed)
    assert feeds["sample_rate"].dtype == np.int64 and feeds["sample_rate"].shape == () and feeds["sample_rate"] == 16000
    outputs = run_cells(cells)
    np.testing.assert_allclose(outputs[4], feeds["x"], rtol=1e-6)  # x * 16000 / 16000


@pytest.mark.parametrize("table, expected", [
    ("[models.inputs.sample_rate]\nvalue = 1.5", "models[0].inputs.sample_rate.value: 1.5 is not an integer, "
                                                 "and input 'sample_rate' is int64"),
    ('[models.inputs.sample_rate]\nvalue = 1\nrange = [0, 2]', "models[0].inputs.sample_rate: give either range "
                                                               "or value, not both"),
    ('[models.inputs.sample_rate]\nvalue = "16000"', "models[0].inputs.sample_rate.value: expected a number"),
])
def test_value_mistakes(table: str, expected: str, tmp_path: Path) -> None:
    sample_rate_model(tmp_path / "sr.onnx")
    path = sweep(tmp_path, "sr.onnx", table)
    with pytest.raises(ConfigError) as info:
        plan(path)
    assert str(info.value).startswith(f"{path}: {expected}") and "\n" not in str(info.value)


def test_float_value_and_bool_default(tmp_path: Path) -> None:
    specs = (InputSpec("t", "float32", ("batch",), 0.25, 0.25), InputSpec("m", "bool", ("batch", 3), 0.0, 2.0))
    feeds = make_feeds(specs, {"t": (4,), "m": (4, 3)}, seed=1)
    assert (feeds["t"] == np.float32(0.25)).all() and feeds["m"].dtype == bool


def test_masks_and_type_ids_have_safe_values_token_ids_need_a_range(tmp_path: Path) -> None:
    ids = [helper.make_tensor_value_info(n, TensorProto.INT64, ["batch", "sequence"])
           for n in ("input_ids", "attention_mask", "token_type_ids")]
    nodes = [helper.make_node("Add", ["input_ids", "attention_mask"], ["s"]),
             helper.make_node("Add", ["s", "token_type_ids"], ["y"])]
    save(tmp_path / "enc.onnx", nodes, ids,
         [helper.make_tensor_value_info("y", TensorProto.INT64, ["batch", "sequence"])])
    (note,) = plan(sweep(tmp_path, "enc.onnx", "dims = { sequence = 8 }")).notes()
    assert note.startswith("models[0] (enc): input_ids: its range could not be read from the model")
    cells = plan(sweep(tmp_path, "enc.onnx", "dims = { sequence = 8 }\ninputs.input_ids.range = [0, 30522]")).cells
    feeds = make_feeds(cells[1].model.inputs, cells[1].input_shapes, seed=1)
    assert (feeds["attention_mask"] == 1).all() and (feeds["token_type_ids"] == 0).all()
    assert feeds["input_ids"].max() < 30522 and feeds["input_ids"].shape == (4, 8)
    assert run_cells(cells)[4].shape == (4, 8)


def test_zoo_bert_declares_every_integer_input() -> None:
    """zoo:bert-base keeps working: every one of its inputs has a range that farm knows."""
    model = make_bert(layers=1, hidden=8, heads=2, intermediate=16, vocab=50, max_positions=16, name="bert-tiny")
    assert {i.name for i in model.graph.input} <= set(ZOO["bert-base"].input_ranges)


# --- dims with dotted, `?` or no names ----------------------------------------------------------

def test_dotted_dim_name_suggestion_is_valid_toml_that_plans(tmp_path: Path) -> None:
    relu_model(tmp_path / "m.onnx", ["batch", "p2o.DynamicDimension.1"])
    path = sweep(tmp_path, "m.onnx")
    message = plan_error(path)
    assert message == (f"{path}: models[0].dims: dynamic dimension(s) with no size: 'p2o.DynamicDimension.1' "
                       "(input 'x' axis 1); set in models[0]: dims = { \"p2o.DynamicDimension.1\" = 128 }")
    cells = plan(sweep(tmp_path, "m.onnx", suggestion(message))).cells
    assert cells[1].input_shapes == {"x": (4, 128)} and run_cells(cells)[4].shape == (4, 128)


def test_suggestion_keeps_the_dims_already_set(tmp_path: Path) -> None:
    relu_model(tmp_path / "m.onnx", ["batch", "height", "p2o.W"])
    message = plan_error(sweep(tmp_path, "m.onnx", "dims = { height = 7 }"))
    assert suggestion(message) == 'dims = { height = 7, "p2o.W" = 128 }'
    cells = plan(sweep(tmp_path, "m.onnx", suggestion(message))).cells
    assert cells[0].input_shapes == {"x": (1, 7, 128)}


def test_unnamed_dims_are_sized_by_input_and_axis(tmp_path: Path) -> None:
    concat_model(tmp_path / "cat.onnx")
    path = sweep(tmp_path, "cat.onnx")
    message = plan_error(path)
    assert message == (f"{path}: models[0].dims: dynamic dimension(s) with no size: input 'a' axis 1 (unnamed: "
                       "'?'), input 'b' axis 1 (unnamed: '?'); set in models[0]: dims = { \"a:1\" = 128, "
                       "\"b:1\" = 128 }")
    assert "a_dim1" not in message and "b_dim1" not in message  # no invented names
    assert plan(sweep(tmp_path, "cat.onnx", suggestion(message))).cells
    cells = plan(sweep(tmp_path, "cat.onnx", 'dims = { "a:1" = 3, "b:1" = 5 }')).cells
    assert [i.shape for i in cells[0].model.inputs] == [("batch", "?"), ("batch", "?")]
    assert {c.batch: c.input_shapes for c in cells} == {1: {"a": (1, 3), "b": (1, 5)}, 4: {"a": (4, 3), "b": (4, 5)}}
    assert {b: y.shape for b, y in run_cells(cells).items()} == {1: (1, 8), 4: (4, 8)}


def test_question_mark_is_not_a_dims_key(tmp_path: Path) -> None:
    concat_model(tmp_path / "cat.onnx")
    path = sweep(tmp_path, "cat.onnx", 'dims = { "?" = 3 }')
    message = plan_error(path)
    assert message == (f"{path}: models[0].dims.\"?\": '?' is not a name: the model's unnamed dimensions are sized "
                       "one by one, by input and axis; set in models[0]: dims = { \"a:1\" = 3, \"b:1\" = 3 }")
    assert plan(sweep(tmp_path, "cat.onnx", suggestion(message))).cells


def test_a_location_wins_over_a_shared_name(tmp_path: Path) -> None:
    """Two inputs that share a name the exporter reused for different sizes: size one by location."""
    save(tmp_path / "m.onnx", [helper.make_node("Concat", ["a", "b"], ["y"], axis=1)],
         [helper.make_tensor_value_info("a", TensorProto.FLOAT, ["batch", "d"]),
          helper.make_tensor_value_info("b", TensorProto.FLOAT, ["batch", "d"])],
         [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", None])])
    cells = plan(sweep(tmp_path, "m.onnx", 'dims = { d = 3, "b:1" = 5 }')).cells
    assert cells[1].input_shapes == {"a": (4, 3), "b": (4, 5)} and run_cells(cells)[4].shape == (4, 8)


@pytest.mark.parametrize("dims, expected", [
    ('{ "x:0" = 4 }', "models[0].dims.\"x:0\": axis 0 of input 'x' is the batch: its sizes are axes.batch_sizes"),
    ('{ "x:1" = 4 }', "models[0].dims.\"x:1\": axis 1 of input 'x' is fixed (16)"),
    ('{ "x:5" = 4 }', "models[0].dims.\"x:5\": input 'x' has no axis 5 (its shape is [batch, 16])"),
    ('{ B = 4 }', "models[0].dims.B: model 'm' has no dynamic dimension 'B'; its dynamic dimensions: none"),
    ('{ "p2o.D.1" = 4 }', "models[0].dims.\"p2o.D.1\": model 'm' has no dynamic dimension 'p2o.D.1'"),
])
def test_location_keys_are_checked(dims: str, expected: str, tmp_path: Path) -> None:
    relu_model(tmp_path / "m.onnx", ["batch", 16])
    path = sweep(tmp_path, "m.onnx", f"dims = {dims}")
    assert plan_error(path).startswith(f"{path}: {expected}")


@pytest.mark.parametrize("key", ["p2o.DynamicDimension.1", "?", "", "a b", 'say "hi"', "back\\slash", "tab\t",
                                 "del\x7f", "é", "x:2", "plain_name-1"])
def test_toml_keys_round_trip(key: str) -> None:
    assert tomllib.loads(f"dims = {toml_inline_table({key: 3})}") == {"dims": {key: 3}}
    assert tomllib.loads(f"inputs.{toml_key(key)}.value = 1") == {"inputs": {key: {"value": 1}}}


def test_cell_ids_of_axis_0_batches_do_not_change() -> None:
    """The batch axis is part of a cell's id only where it is not axis 0 (how models were read)."""
    assert "batch_axis" not in _input_identity(InputSpec("x", "float32", ("batch", 3), -1.0, 1.0, 0))
    assert "batch_axis" not in _input_identity(InputSpec("x", "float32", (1, 3), -1.0, 1.0, None))
    assert _input_identity(InputSpec("s", "float32", (2, "B", 8), -1.0, 1.0, 1))["batch_axis"] == 1


# --- end to end: farm's own ONNX Runtime backend measures these models ---------------------------

@pytest.mark.slow
def test_sweep_measures_state_and_scalar_models_at_batch_1_and_4(tmp_path: Path) -> None:
    from farm.cli import main
    from farm.warehouse import Warehouse

    lstm_model(tmp_path / "lstm.onnx")
    sample_rate_model(tmp_path / "sr.onnx")
    relu_model(tmp_path / "fixed.onnx", [1, 16])
    path = write_sweep(tmp_path, '[[models]]\nsource = "lstm.onnx"\n[[models]]\nsource = "sr.onnx"\n'
                                 'inputs.sample_rate.value = 16000\n[[models]]\nsource = "fixed.onnx"\n'
                                 '[axes]\nbatch_sizes = [1, 4]\n')
    results = tmp_path / "results"
    assert main(["sweep", str(path), "--results", str(results), "--executor", "local"]) == 0
    rows = Warehouse(results).connect().execute(
        "SELECT model, batch, status, reason FROM cells ORDER BY model, batch").fetchall()
    statuses = {(model, batch): status for model, batch, status, _ in rows}
    assert statuses == {("fixed", 1): "ok", ("fixed", 4): "unsupported", ("lstm", 1): "ok", ("lstm", 4): "ok",
                        ("sr", 1): "ok", ("sr", 4): "ok"}, rows


def test_cli_integer_input_without_range_runs_and_says_its_default(tmp_path: Path, capsys) -> None:
    from farm.cli import main

    sample_rate_model(tmp_path / "sr.onnx")
    path = sweep(tmp_path, "sr.onnx")
    results = tmp_path / "results"
    assert main(["sweep", str(path), "--results", str(results), "--executor", "local"]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert "note: models[0] (sr): sample_rate: its range could not be read from the model" in err
