"""Accuracy on a fixed evaluation set: the same n inputs whatever the cell's batch, chunked with
padding, near ties in the reference counted as ties, n stored."""

from __future__ import annotations

import types
from pathlib import Path

import numpy as np
import pytest

from farm.accuracy import compare, evaluate, evaluation_set, top_k_agreement
from farm.cli import main
from farm.config import DEFAULT_TOLERANCES, AppliedTolerance
from farm.models import InputSpec
from farm.precision import Calibration
from farm.warehouse import Warehouse
from tests.conftest import tiny_cnn, write_sweep

SPEC = (InputSpec("x", "float32", ("batch", 3, 8, 8), -1.0, 1.0),)


def near_tie_classifier(path: Path) -> Path:
    """x [batch, 4] in [0.5, 1) -> 5 logits; class 1's weights are class 0's times (1 + 2e-5), so
    class 1 wins in fp32 by a hair that fp16 weights (both round to 1.0) cannot hold."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w = np.zeros((4, 5), np.float32)
    w[:, 0], w[:, 1], w[:, 2], w[:, 3], w[:, 4] = 1.0, 1.00002, 0.5, 0.3, 0.1
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"], name="fc")], "tie",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 5])],
        [numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def run_sweep(directory: Path, body: str):
    config = write_sweep(directory, body)
    results = directory / "results"
    assert main(["sweep", str(config), "--results", str(results), "--executor", "local"]) == 0
    return Warehouse(results).connect()


def test_a_flip_inside_the_reference_near_tie_is_a_tie(tmp_path: Path) -> None:
    (tmp_path / "models").mkdir()
    near_tie_classifier(tmp_path / "models" / "tie.onnx")
    con = run_sweep(tmp_path, """
        [[models]]
        source = "models/tie.onnx"
        [models.inputs.x]
        range = [0.5, 1.0]
        [axes]
        precisions = ["fp16"]
        batch_sizes = [4]
        [accuracy]
        samples = 10
        """)
    row = con.execute("SELECT n, top1_agreement, top1_ties, top5_agreement, verdict FROM accuracy").fetchone()
    assert row == (10, 1.0, 10, 1.0, "pass")  # every input flipped 1 -> 0, each inside the near tie

    # the same flips with no tie margin are misses: the margin is what makes them ties
    reference = {"y": np.tile([1.0, 1.00002, 0.5, 0.3, 0.1], (10, 1))}
    flipped = {"y": np.tile([1.0, 1.0, 0.5, 0.3, 0.1], (10, 1))}
    assert top_k_agreement(flipped["y"], reference["y"], 0.0)["top1_agreement"] == 0.0
    (strict,) = compare(flipped, reference, DEFAULT_TOLERANCES["fp16"], tie_margin=0.0, n=10)
    assert strict["verdict"] == "fail" and strict["worst_metric"] == "top1_agreement"
    # a flip to a class well below the reference's top-1 is a miss whatever the margin
    wrong = {"y": np.tile([0.0, 0.1, 2.0, 0.3, 0.1], (10, 1))}
    assert top_k_agreement(wrong["y"], reference["y"])["top1_agreement"] == 0.0


def test_batch_1_and_batch_8_are_judged_on_the_same_inputs(models_dir: Path) -> None:
    con = run_sweep(models_dir.parent, """
        [[models]]
        source = "models/tiny.onnx"
        [axes]
        precisions = ["fp32", "fp16"]
        batch_sizes = [1, 8]
        [accuracy]
        samples = 20
        """)
    rows = con.execute("""SELECT precision, batch, n, elements, cosine_similarity, max_abs_error, snr_db,
                                 top1_agreement, top1_ties FROM accuracy JOIN cells USING (cell_id)
                          ORDER BY precision, batch""").fetchall()
    assert [(r[0], r[1]) for r in rows] == [("fp16", 1), ("fp16", 8), ("fp32", 1), ("fp32", 8)]
    assert all(r[2] == 20 and r[3] == 20 * 5 for r in rows)  # 20 inputs (8 + 8 + 4 padded to 8), 5 logits each
    for b1, b8 in (rows[0:2], rows[2:4]):
        assert b8[4] == pytest.approx(b1[4], abs=1e-6)  # cosine
        assert b8[5] == pytest.approx(b1[5], abs=1e-4)  # max abs error
        assert b8[7] == b1[7]  # top-1 agreement: same inputs, no longer 0 or 1 at batch 1
    assert rows[0][7] not in (None,) and 0.0 <= rows[0][7] <= 1.0


def test_chunks_with_padding_equal_one_big_batch(tmp_path: Path) -> None:
    import onnxruntime as ort

    model = tiny_cnn(tmp_path / "tiny.onnx")
    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    run = lambda feeds: dict(zip(["y"], session.run(["y"], feeds)))  # noqa: E731
    evaluation = evaluation_set(SPEC, {"x": (8, 3, 8, 8)}, 20, seed=1)
    assert evaluation.n == 20 and evaluation.arrays["x"].shape == (20, 3, 8, 8)
    whole = run({"x": evaluation.arrays["x"]})
    chunks = [feeds["x"].shape[0] for feeds, _ in evaluation.chunks(8)]
    assert chunks == [8, 8, 8]  # the last of 4 real inputs padded to 8
    for batch in (1, 3, 8, 32):
        chunked = evaluate(run, evaluation, batch)
        assert chunked["y"].shape == (20, 5)
        np.testing.assert_allclose(chunked["y"], whole["y"], rtol=0, atol=1e-6)
        reference = evaluate(run, evaluation, 20)
        for a, b in zip(compare(chunked, reference, DEFAULT_TOLERANCES["fp32"], n=20),
                        compare(whole, reference, DEFAULT_TOLERANCES["fp32"], n=20)):
            for key in ("cosine_similarity", "max_abs_error", "mean_abs_error", "top1_agreement", "top5_agreement"):
                assert a[key] == pytest.approx(b[key], abs=1e-6)
            assert a["n"] == 20 and a["verdict"] == "pass"


def test_evaluation_set_is_independent_of_the_batch_and_reads_calibration_data(tmp_path: Path) -> None:
    small = evaluation_set(SPEC, {"x": (1, 3, 8, 8)}, 8, seed=1)
    large = evaluation_set(SPEC, {"x": (32, 3, 8, 8)}, 20, seed=1)
    np.testing.assert_array_equal(small.arrays["x"], large.arrays["x"][:8])  # sample i: its own seed
    data = np.random.default_rng(0).uniform(-1, 1, (10, 3, 8, 8)).astype(np.float32)
    np.savez(tmp_path / "calib.npz", x=data)
    given = evaluation_set(SPEC, {"x": (4, 3, 8, 8)}, 64, 1, Calibration(data="calib.npz", base_dir=str(tmp_path)))
    assert given.n == 10 and given.source == "calib.npz"  # fewer than asked: all of them, n says so
    np.testing.assert_array_equal(given.arrays["x"], data)


def test_a_backend_whose_outputs_ignore_their_inputs_is_judged_on_its_own(tmp_path: Path) -> None:
    """A backend returning what it was built with cannot run the evaluation set: the rows say n = batch."""
    import onnxruntime as ort

    from farm.accuracy import check
    from farm.models import make_feeds

    path = tiny_cnn(tmp_path / "tiny.onnx")
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    feeds = make_feeds(SPEC, {"x": (2, 3, 8, 8)}, 1)
    built = dict(zip(["y"], session.run(["y"], feeds)))
    cell = types.SimpleNamespace(
        tolerance=AppliedTolerance(**DEFAULT_TOLERANCES["fp32"].model_dump(), samples=16), batch=2,
        input_shapes={"x": (2, 3, 8, 8)}, calibration=None, measurement=types.SimpleNamespace(seed=1),
        model=types.SimpleNamespace(inputs=SPEC, path=path, sha256="sha"))
    (stale,) = check(lambda f: built, cell, feeds, tmp_path / "cache")
    assert stale["n"] == 2 and stale["verdict"] == "pass"
    (honest,) = check(lambda f: dict(zip(["y"], session.run(["y"], f))), cell, feeds, tmp_path / "cache")
    assert honest["n"] == 16 and honest["verdict"] == "pass" and honest["elements"] == 16 * 5


def test_a_model_without_a_batch_axis_runs_its_samples_one_at_a_time(tmp_path: Path) -> None:
    import onnxruntime as ort

    path = tiny_cnn(tmp_path / "fixed.onnx", batch=1)
    spec = (InputSpec("x", "float32", (1, 3, 8, 8), -1.0, 1.0, batch_axis=None),)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    evaluation = evaluation_set(spec, {"x": (1, 3, 8, 8)}, 6, seed=1)
    assert not evaluation.batched and evaluation.n == 6 and evaluation.arrays["x"].shape == (6, 1, 3, 8, 8)
    outputs = evaluate(lambda f: {"y": session.run(["y"], f)[0]}, evaluation, batch=4)  # the batch does not apply
    assert outputs["y"].shape == (6, 1, 5)
    np.testing.assert_array_equal(outputs["y"][5], session.run(["y"], {"x": evaluation.arrays["x"][5]})[0])


def test_a_reference_that_is_zero_on_these_inputs_cannot_judge(tmp_path: Path) -> None:
    """Relu(x - 10) on inputs in [-1, 1) is 0 everywhere (a detector's score map on noise): fp16 or
    not, no metric can tell a right engine from a wrong one there. The verdict says unjudged and
    why, never fail, and n counts every input compared (not 1: the model maps every input to the
    same outputs, which is no sign that the engine ignores its inputs)."""
    import onnx
    from onnx import TensorProto, helper

    ten = helper.make_tensor("ten", TensorProto.FLOAT, [], [10.0])
    graph = helper.make_graph(
        [helper.make_node("Sub", ["x", "ten"], ["shifted"]), helper.make_node("Relu", ["shifted"], ["y"])],
        "dark", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 64])], [ten])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    (tmp_path / "models").mkdir()
    onnx.save(model, tmp_path / "models" / "dark.onnx")
    con = run_sweep(tmp_path, '[[models]]\nsource = "models/dark.onnx"\n[axes]\nprecisions = ["fp32", "fp16"]\n'
                              'batch_sizes = [4]\n[accuracy]\nsamples = 12\n')
    rows = con.execute("SELECT verdict, worst_metric, n FROM accuracy").fetchall()
    assert rows == [("unjudged", "reference constant (0) on these inputs", 12)] * 2


def test_degenerate_reference_rule() -> None:
    from farm.accuracy import degenerate_reference

    sparse = np.zeros(10_000, np.float32)
    sparse[:5] = 0.5  # 99.95 % zero
    assert degenerate_reference(sparse) == "reference ~0 on these inputs (100.0 % of elements 0, largest 0.5)"
    sparse[:160] = np.linspace(1e-5, 0.003, 160)  # 98.4 % zero, the largest 0.003: a text detector's map on noise
    assert degenerate_reference(sparse) == "reference ~0 on these inputs (98.4 % of elements 0, largest 0.003)"
    sparse[0] = 0.5  # 98.4 % zero, one clear score: a real, sparse output
    assert degenerate_reference(sparse) is None
    assert degenerate_reference(np.full(4, 2.5, np.float32)) == "reference constant (2.5) on these inputs"
    assert degenerate_reference(np.zeros(8, np.int64)) is None  # indices and counts compare exactly
    assert degenerate_reference(np.array([0.1, 0.2], np.float32)) is None


def test_an_accuracy_check_that_cannot_run_keeps_the_measured_latency(tmp_path: Path) -> None:
    """NonZero: how many values the output holds depends on the data, so chunks do not stack. The
    cell stays ok with its measurement; its accuracy row is unjudged (never fail), saying why it was
    not checked, and so is the cell's verdict as the tables print it."""
    import onnx
    from onnx import TensorProto, helper

    zero = helper.make_tensor("zero", TensorProto.FLOAT, [], [0.0])
    graph = helper.make_graph(
        [helper.make_node("Greater", ["x", "zero"], ["positive"]), helper.make_node("NonZero", ["positive"], ["at"])],
        "nonzero", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("at", TensorProto.INT64, [2, "count"])], [zero])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    (tmp_path / "models").mkdir()
    onnx.save(model, tmp_path / "models" / "nonzero.onnx")
    con = run_sweep(tmp_path, '[[models]]\nsource = "models/nonzero.onnx"\n[axes]\nbatch_sizes = [4]\n')
    assert con.execute("SELECT status FROM cells").fetchall() == [("ok",)]
    assert con.execute("SELECT count(*) FROM measurements WHERE throughput_qps > 0").fetchone() == (1,)
    (verdict, why), = con.execute("SELECT verdict, worst_metric FROM accuracy").fetchall()
    assert verdict == "unjudged" and why.startswith("not checked: ")
    from farm.queries import CELL_VERDICTS, VERDICT_TEXT
    (text,), = con.execute(f"WITH {CELL_VERDICTS} SELECT {VERDICT_TEXT} FROM cell_verdicts v").fetchall()
    assert text.startswith("unjudged: not checked: ")
