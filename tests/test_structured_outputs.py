"""Models whose ONNX graph has inputs or outputs that are not tensors of numbers: a scikit-learn
classifier's ZipMap (a sequence of {label: probability} maps), ONNX sequences, string tensors.
Their accuracy is judged where an array holds them, and said unjudged in one line where none
does; ONNX Runtime on CUDA, which binds every value to device memory, and PyTorch, which has no
strings, say `unsupported` with why instead of failing."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from farm.cli import main
from farm.warehouse import Warehouse
from tests.conftest import tiny_cnn, write_sweep

QUICK = """
[measurement]
warmup_ms = 0
min_iterations = 3
min_duration_ms = 0
repeats = 1
layer_iterations = 0
"""


def onnx_test_model(name: str) -> Path:
    import onnx

    return Path(onnx.__file__).parent / "backend" / "test" / "data" / "simple" / name / "model.onnx"


def forest(path: Path, classes: int = 5) -> Path:
    """A RandomForestClassifier on 4 features through skl2onnx: outputs output_label (int64) and
    output_probability, seq(map(int64,tensor(float))) from ZipMap."""
    pytest.importorskip("sklearn")
    pytest.importorskip("skl2onnx")
    from skl2onnx import to_onnx
    from sklearn.ensemble import RandomForestClassifier

    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (300, 4)).astype(np.float32)
    y = np.digitize(x[:, 0] + x[:, 1], np.linspace(-1.5, 1.5, classes - 1))
    model = RandomForestClassifier(n_estimators=4, max_depth=4, random_state=0).fit(x, y)
    path.write_bytes(to_onnx(model, x[:1], target_opset=17).SerializeToString())
    return path


def split_to_sequence(path: Path, split: list[int]) -> Path:
    """x [batch, 4] -> Relu -> SplitToSequence on axis 1 by `split`: the output is seq(tensor(float))."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("SplitToSequence", ["r", "split"], ["parts"], axis=1)],
        "seq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_sequence_value_info("parts", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.array(split, np.int64), "split")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def string_identity(path: Path) -> Path:
    """x: tensor(string) [batch, 3] -> Identity -> y: an operator the PyTorch interpreter has."""
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])], "strings",
        [helper.make_tensor_value_info("x", TensorProto.STRING, ["batch", 3])],
        [helper.make_tensor_value_info("y", TensorProto.STRING, ["batch", 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def sweep(directory: Path, models: list[str], precisions: str = '["fp32"]', batch: int = 4,
          backends: str = '["onnxruntime"]'):
    body = "".join(f'[[models]]\nsource = "models/{m}"\n' for m in models) + f"""
[axes]
precisions = {precisions}
batch_sizes = [{batch}]
backends = {backends}
[backends.torch]
device = "cpu"
[accuracy]
samples = 6
""" + QUICK
    results = directory / "results"
    assert main(["sweep", str(write_sweep(directory, body)), "--results", str(results), "--executor", "local"]) == 0
    return Warehouse(results).connect()


@pytest.fixture
def models(tmp_path: Path) -> Path:
    (tmp_path / "models").mkdir()
    return tmp_path / "models"


def test_a_classifier_zipmap_output_is_compared_per_key(models: Path) -> None:
    """ZipMap's list of {label: probability} is one column per label: [n, 5], so top-1 agreement
    applies too; fp16 runs the same graph (the trees kept fp32) and is judged the same way."""
    forest(models / "forest.onnx")
    con = sweep(models.parent, ["forest.onnx"], '["fp32", "fp16"]')
    assert con.execute("SELECT precision, status FROM cells ORDER BY precision").fetchall() == [
        ("fp16", "ok"), ("fp32", "ok")]
    rows = con.execute("""SELECT precision, output_name, n, elements, verdict, top1_agreement, cosine_similarity
                          FROM accuracy JOIN cells USING (cell_id) ORDER BY precision, output_name""").fetchall()
    assert [r[:5] for r in rows] == [
        ("fp16", "output_label", 6, 6, "pass"), ("fp16", "output_probability", 6, 30, "pass"),
        ("fp32", "output_label", 6, 6, "pass"), ("fp32", "output_probability", 6, 30, "pass")]
    probability = [r for r in rows if r[1] == "output_probability"]
    assert all(r[5] == 1.0 and r[6] == pytest.approx(1.0) for r in probability)


def test_sequence_outputs_are_compared_stacked_or_said_unjudged_in_one_line(models: Path) -> None:
    """A sequence of equal-shaped tensors is stacked and compared; one of different shapes (a
    split 1 + 3) cannot be: unjudged, with one line that says so, never an exception's text."""
    split_to_sequence(models / "even.onnx", [2, 2])
    split_to_sequence(models / "uneven.onnx", [1, 3])
    con = sweep(models.parent, ["even.onnx", "uneven.onnx"], batch=2)
    rows = con.execute("""SELECT model, status, verdict, worst_metric, elements FROM accuracy JOIN cells USING (cell_id)
                          ORDER BY model""").fetchall()
    assert rows[0][:3] == ("even", "ok", "pass") and rows[0][4] == 6 * 4
    assert rows[1] == ("uneven", "ok", "unjudged", "output 'parts' is a sequence of tensors of different shapes: "
                       "not compared", None)
    from farm.queries import CELL_VERDICTS, VERDICT_TEXT
    texts = con.execute(f"""WITH {CELL_VERDICTS} SELECT c.model, {VERDICT_TEXT} FROM cell_verdicts v
                            JOIN cells c USING (cell_id) ORDER BY c.model""").fetchall()
    assert texts == [("even", "pass"),
                     ("uneven", "unjudged: output 'parts' is a sequence of tensors of different shapes: not compared")]


def test_string_inputs_get_seeded_words_and_string_outputs_compare_exactly(models: Path) -> None:
    """onnx's own StringNormalizer test model (x: tensor(string) [2]): its inputs are seeded
    lowercase words, the same for every cell of the model, and its string output is compared
    exactly (exact_match: the share of equal elements)."""
    from farm.models import make_feeds
    from farm.records import InputSpec

    (models / "strnorm.onnx").write_bytes(onnx_test_model("test_strnorm_model_nostopwords_nochangecase").read_bytes())
    con = sweep(models.parent, ["strnorm.onnx"], batch=2)
    assert con.execute("SELECT status, reason FROM cells").fetchall() == [("ok", None)]
    assert con.execute("SELECT output_name, elements, verdict, worst_metric, worst_value FROM accuracy").fetchall() == [
        ("y", 6 * 2, "pass", "exact_match", 1.0)]

    spec = (InputSpec("x", "object", (2,), 3.0, 9.0, None),)
    words = make_feeds(spec, {"x": (2,)}, seed=1)["x"]
    assert words.dtype == object and all(isinstance(w, str) and w.isalpha() and 3 <= len(w) < 9 for w in words)
    assert list(make_feeds(spec, {"x": (2,)}, seed=1)["x"]) == list(words)


def test_cuda_binding_says_which_values_cannot_live_on_the_device(tmp_path: Path) -> None:
    """The decision ONNX Runtime's CUDA path makes before binding device buffers, from the real
    sessions' NodeArg types: ZipMap and string values make the cell unsupported with what to do;
    sequences used inside the graph (onnx's test_sequence_model1) bind as any tensor model does."""
    import onnxruntime as ort

    from farm.backends.onnxruntime.cuda import device_io_reason

    def reason(path: Path) -> str | None:
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        return device_io_reason(session.get_inputs(), session.get_outputs())

    forest_reason = reason(forest(tmp_path / "forest.onnx"))
    assert forest_reason == (
        "onnxruntime on CUDA times queries through device buffers bound to every input and output, and output "
        "'output_probability' is seq(map(int64,tensor(float))), which ONNX Runtime keeps in host memory only: run "
        "this model with device = \"cpu\", or convert it without ZipMap (skl2onnx: options={'zipmap': False}) to get "
        "a probability tensor")
    strings = reason(onnx_test_model("test_strnorm_model_nostopwords_nochangecase"))
    assert "input 'x' is tensor(string), output 'y' is tensor(string)," in strings and "\n" not in strings
    assert reason(onnx_test_model("test_sequence_model1")) is None
    assert reason(tiny_cnn(tmp_path / "tiny.onnx")) is None


def test_pytorch_says_unsupported_for_values_torch_cannot_hold(models: Path) -> None:
    """The ONNX-to-torch interpreter has Identity, but torch has no strings: unsupported, naming
    the inputs and outputs, not a TypeError at build. A forest's ZipMap output runs (its
    probabilities a column per class) and passes its accuracy check against ONNX Runtime's maps."""
    pytest.importorskip("torch")
    string_identity(models / "strings.onnx")
    forest(models / "forest.onnx")
    con = sweep(models.parent, ["strings.onnx", "forest.onnx"], batch=2, backends='["torch"]')
    rows = dict(con.execute("SELECT model, status || ': ' || coalesce(reason, '') FROM cells").fetchall())
    assert rows["strings"].startswith("unsupported: the PyTorch backend runs tensors of numbers only, and input 'x' "
                                      "is a string tensor, output 'y' is a string tensor: ")
    assert rows["forest"] == "ok: "
    assert con.execute("SELECT a.verdict FROM accuracy a JOIN cells c USING (cell_id) WHERE c.model = 'forest'"
                       ).fetchone()[0] == "pass"


def test_an_output_no_array_holds_is_one_line_whatever_onnx_runtime_gave(tmp_path: Path) -> None:
    """What `comparable` makes of ONNX Runtime's Python values (a real session's, and the shapes
    its sequences and maps take): arrays where they line up, one line where they do not."""
    import onnxruntime as ort

    from farm.accuracy import compare
    from farm.output_values import comparable, structured
    from farm.records import Tolerance

    session = ort.InferenceSession(str(forest(tmp_path / "forest.onnx", classes=3)))
    x = np.random.default_rng(1).uniform(-1, 1, (4, 4)).astype(np.float32)
    label, probability = session.run(None, {"X": x})
    array, how = structured(probability)
    assert array.shape == (4, 3) and how == "a sequence of maps: compared per key (3 keys, a column each)"
    assert np.allclose(array.sum(axis=1), 1.0)
    assert structured(label) == (label, None)
    assert structured([{0: 0.5, 1: 0.5}, {0: 1.0}]) == (None, "a sequence of maps with different keys: not compared")
    assert structured(np.array(["a", "b"], dtype=object))[1] == "a string tensor: compared exactly"

    said: list[str] = []
    run = comparable(lambda feeds: {"p": [{0: 0.5}, {1: 0.5}], "y": np.array([0.5, 2.0], np.float32)}, said.append)
    outputs = run({})
    run({})
    assert said == ["output 'p' is a sequence of maps with different keys: not compared"]  # once
    (p, y) = compare(outputs, outputs, Tolerance())
    assert (p["verdict"], p["worst_metric"]) == ("unjudged", "output 'p' is a sequence of maps with different keys: "
                                                 "not compared")
    assert y["verdict"] == "pass"
