"""Model sources: the zoo generates real, deterministic ONNX; files are hashed and read."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from farm.config import ModelSpec
from farm.models import make_feeds, resolve_model, zoo_model_path
from farm.models.zoo import ZOO, make_bert, make_resnet
from farm.records import InputSpec


def test_resnet18_is_deterministic_and_runs(tmp_path: Path) -> None:
    first = zoo_model_path("resnet18", tmp_path / "a")
    second = make_resnet(18).SerializeToString()
    assert hashlib.sha256(first.read_bytes()).digest() == hashlib.sha256(second).digest()
    model = onnx.load(first)
    onnx.checker.check_model(model)
    params = sum(int(np.prod(t.dims)) for t in model.graph.initializer)
    assert 11_600_000 < params < 11_800_000  # ResNet-18: 11.7 M (BatchNorm statistics included)
    session = ort.InferenceSession(str(first), providers=["CPUExecutionProvider"])
    x = np.random.default_rng(0).uniform(-1, 1, (2, 3, 224, 224)).astype(np.float32)
    (logits,) = session.run(None, {"input": x})
    assert logits.shape == (2, 1000) and np.isfinite(logits).all() and logits.std() > 0


def test_resnet50_parameter_count() -> None:
    model = make_resnet(50, image=32)
    weights = sum(int(np.prod(t.dims)) for t in model.graph.initializer
                  if not t.name.endswith(("running_mean", "running_var")))
    assert 25_500_000 < weights < 25_600_000  # torchvision's resnet50: 25,557,032


def test_small_bert_runs_with_dynamic_batch_and_sequence() -> None:
    model = make_bert(layers=2, hidden=32, heads=4, intermediate=64, vocab=100, max_positions=64, name="bert-tiny")
    onnx.checker.check_model(model)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for batch, seq in [(1, 8), (3, 17)]:
        ids = np.random.default_rng(1).integers(0, 100, (batch, seq))
        hidden, pooled = session.run(None, {"input_ids": ids, "token_type_ids": np.zeros_like(ids),
                                            "attention_mask": np.ones_like(ids)})
        assert hidden.shape == (batch, seq, 32) and pooled.shape == (batch, 32)
        assert np.isfinite(hidden).all()


def test_bert_base_zoo_entry_declares_its_inputs() -> None:
    entry = ZOO["bert-base"]
    assert entry.default_dims == {"sequence": 128}
    assert entry.input_ranges["input_ids"] == (0, 30522)


def test_resolve_file_reads_inputs_and_hash(models_dir: Path) -> None:
    artifact = resolve_model(ModelSpec(source="tiny.onnx"), 0, models_dir, models_dir / "cache")
    assert artifact.name == "tiny" and artifact.error is None
    assert artifact.sha256 == hashlib.sha256((models_dir / "tiny.onnx").read_bytes()).hexdigest()
    assert artifact.inputs == (InputSpec("x", "float32", ("batch", 3, 8, 8), -1.0, 1.0),)
    assert (models_dir / "tiny.onnx.farm.json").exists()  # cached for the next plan


def test_resolve_corrupt_file_is_an_error_not_a_crash(tmp_path: Path) -> None:
    (tmp_path / "broken.onnx").write_bytes(b"\x08\x07this is not a protobuf" * 10)
    artifact = resolve_model(ModelSpec(source="broken.onnx"), 0, tmp_path, tmp_path / "cache")
    assert artifact.error.startswith("cannot read broken.onnx as an ONNX model")
    assert artifact.inputs == ()


def test_feeds_are_seeded_in_range_and_never_zero() -> None:
    specs = (InputSpec("x", "float32", ("batch", 4), -1.0, 1.0), InputSpec("ids", "int64", ("batch", 6), 5, 9))
    shapes = {"x": (3, 4), "ids": (3, 6)}
    a, b = make_feeds(specs, shapes, seed=7), make_feeds(specs, shapes, seed=7)
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert not np.array_equal(a["x"], make_feeds(specs, shapes, seed=8)["x"])
    assert a["x"].dtype == np.float32 and (np.abs(a["x"]) <= 1).all() and np.count_nonzero(a["x"]) == a["x"].size
    assert a["ids"].dtype == np.int64 and a["ids"].min() >= 5 and a["ids"].max() < 9


@pytest.mark.parametrize("batch", [1, 5])
def test_concrete_shape(batch: int) -> None:
    spec = InputSpec("ids", "int64", ("batch", "sequence"), 0, 2)
    assert spec.concrete_shape(batch, {"sequence": 64}) == (batch, 64)


def test_unnamed_dims_are_read_as_question_marks_not_invented_names(tmp_path: Path) -> None:
    """No dim_param, an empty or "?" one, and a dim_value of -1 are all unnamed: "?" (sized by location)."""
    from onnx import TensorProto, helper

    value = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", None, "?", "p2o.DynamicDimension.1", 4])
    value.type.tensor_type.shape.dim[1].dim_value = -1
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [value],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, tmp_path / "m.onnx")
    artifact = resolve_model(ModelSpec(source="m.onnx", dims={"x:1": 2, "x:2": 3, "p2o.DynamicDimension.1": 5}),
                             0, tmp_path, tmp_path / "cache")
    (spec,) = artifact.inputs
    assert spec.shape == ("batch", "?", "?", "p2o.DynamicDimension.1", 4) and spec.batch_axis == 0
    assert artifact.dynamic_dims() == {"p2o.DynamicDimension.1"} and artifact.unnamed_dims() == ["x:1", "x:2"]
    assert spec.concrete_shape(6, artifact.dims) == (6, 2, 3, 5, 4)
    assert [spec.profile_key(axis) for axis in range(5)] == ["batch", None, None, "p2o.DynamicDimension.1", None]


def test_batch_axis_anywhere_and_none(tmp_path: Path) -> None:
    state = InputSpec("state", "float32", (2, "B", 8), -1.0, 1.0, batch_axis=1)
    scalar = InputSpec("rate", "int64", (), 16000.0, 16000.0, batch_axis=None)
    assert state.concrete_shape(4, {}) == (2, 4, 8) and scalar.concrete_shape(4, {}) == ()
    feeds = make_feeds((state, scalar), {"state": (2, 4, 8), "rate": ()}, seed=1)
    assert feeds["state"].shape == (2, 4, 8) and feeds["rate"] == 16000 and feeds["rate"].dtype == np.int64


def test_the_same_file_under_two_names_is_two_models(tmp_path: Path) -> None:
    """Two [[models]] of one file (or byte-identical copies) under two names keep a cell each."""
    from farm.config import load_config
    from farm.plan import plan_sweep
    from tests.conftest import tiny_cnn, write_sweep

    tiny_cnn(tmp_path / "a.onnx")
    (tmp_path / "copy.onnx").write_bytes((tmp_path / "a.onnx").read_bytes())
    config = write_sweep(tmp_path, '[[models]]\nsource = "a.onnx"\nname = "first"\n'
                                   '[[models]]\nsource = "a.onnx"\nname = "second"\n'
                                   '[[models]]\nsource = "copy.onnx"\nname = "third"\n')
    cells = plan_sweep(load_config(config), tmp_path / "cache").cells
    assert sorted(c.model.name for c in cells) == ["first", "second", "third"]
    assert len({c.cell_id for c in cells}) == 3
    alone = write_sweep(tmp_path, '[[models]]\nsource = "a.onnx"\nname = "first"\n', name="alone.toml")
    (only,) = plan_sweep(load_config(alone), tmp_path / "cache").cells
    assert only.cell_id not in {c.cell_id for c in cells}  # alone, its id is the usual one: no name in it


def test_new_external_weights_are_a_new_model(tmp_path: Path) -> None:
    """An ONNX file whose weights lie in an external data file: new weights (the .onnx untouched)
    are a new hash, so new cell ids and a new fp32 reference, never the old cell resumed."""
    from farm.config import load_config
    from farm.plan import plan_sweep
    from tests.conftest import tiny_cnn, write_sweep

    model = onnx.load(tiny_cnn(tmp_path / "inline.onnx"))
    onnx.save_model(model, tmp_path / "tiny.onnx", save_as_external_data=True, all_tensors_to_one_file=True,
                    location="w.bin", size_threshold=0)
    config = write_sweep(tmp_path, '[[models]]\nsource = "tiny.onnx"\n')
    (first,) = plan_sweep(load_config(config), tmp_path / "cache").cells
    onnx_bytes = (tmp_path / "tiny.onnx").read_bytes()
    weights = bytearray((tmp_path / "w.bin").read_bytes())
    weights[:4] = bytes(4)  # other weights, the same size
    (tmp_path / "w.bin").write_bytes(bytes(weights))
    (second,) = plan_sweep(load_config(config), tmp_path / "cache").cells
    assert (tmp_path / "tiny.onnx").read_bytes() == onnx_bytes
    assert second.model.sha256 != first.model.sha256 and second.cell_id != first.cell_id
    assert second.model.sha256 != hashlib.sha256(onnx_bytes).hexdigest()
    (third,) = plan_sweep(load_config(config), tmp_path / "cache").cells  # from the sidecar: the same
    assert third.model.sha256 == second.model.sha256


def test_the_config_knows_the_zoo_by_name() -> None:
    """A sweep file's `zoo:NAME` is checked against farm.config's ZOO_NAMES without importing the
    generators: the names must be the zoo's own."""
    from farm.config import ZOO_NAMES
    from farm.models.zoo import ZOO

    assert tuple(ZOO) == ZOO_NAMES
