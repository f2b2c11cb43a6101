"""Classes of model found by sweeping the corpus no one picks (benchmarks/corpus_registry.py), each
on a model of it that the onnx wheel ships for its own tests: what an engine lacks (an operator at an
old opset, a training operator) and an input no generated value fits (a shape operand) are
`unsupported` with what to do, never `failed`."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import onnx
import pytest

from farm.cli import main
from farm.config import load_config
from farm.plan import plan_sweep
from farm.warehouse import Warehouse
from tests.conftest import write_sweep

ROOT = Path(__file__).resolve().parent.parent

SHIPPED = Path(onnx.__file__).parent / "backend" / "test" / "data"
TORCH_CPU = '["torch"]\n[backends.torch]\ndevice = "cpu"'
BOTH_CPU = '["onnxruntime", "torch"]\n[backends.torch]\ndevice = "cpu"'


def shipped(tmp_path: Path, case: str) -> str:
    """A copy of one of the onnx wheel's test models (farm writes its notes beside a model file)."""
    target = tmp_path / case.replace("/", "-") / "model.onnx"
    target.parent.mkdir(parents=True)
    shutil.copyfile(SHIPPED / case / "model.onnx", target)
    return str(target)


def sweep_cells(tmp_path: Path, models: list[str], backends: str = '["onnxruntime"]') -> tuple[int, dict]:
    """The sweep's exit code and {(model, backend): (status, reason)} of each model's cells at its own
    batch (a model with a fixed batch is also planned at the sweep's, unsupported there)."""
    tables = "".join(f'[[models]]\nname = "m{i}"\nsource = "{source}"\n' for i, source in enumerate(models))
    config = write_sweep(tmp_path, f'name = "classes"\n{tables}[axes]\nbackends = {backends}\n')
    code = main(["sweep", str(config), "--results", str(tmp_path / "results"), "--executor", "local"])
    rows = Warehouse(tmp_path / "results").connect().execute(
        "SELECT model, backend, status, reason FROM cells WHERE reason IS NULL OR reason NOT LIKE '%fixed batch%' "
        "ORDER BY batch").fetchall()
    return code, {(model, backend): (status, reason) for model, backend, status, reason in rows}


def verdicts(tmp_path: Path, where: str) -> list[tuple]:
    """The distinct accuracy verdicts of the cells `where` picks (SQL over `cells c`)."""
    return Warehouse(tmp_path / "results").connect().execute(
        f"SELECT DISTINCT a.verdict FROM accuracy a JOIN cells c USING (cell_id) WHERE {where}").fetchall()


def test_an_operator_onnx_runtime_lacks_is_unsupported_with_what_to_do(tmp_path: Path) -> None:
    """The training domain's Gradient: the cell is unsupported with the operator named and what to
    do, and the sweep exits 0."""
    code, cells = sweep_cells(tmp_path, [shipped(tmp_path, "simple/test_gradient_of_add")])
    assert code == 0, cells
    status, reason = cells[("m0", "onnxruntime")]
    assert status == "unsupported" and "does not implement Gradient of the domain ai.onnx.preview.training" in reason


@pytest.mark.parametrize("case", ["pytorch-operator/test_operator_add_broadcast", "pytorch-converted/test_Linear",
                                  "pytorch-operator/test_operator_pow", "pytorch-converted/test_PReLU_2d_multiparam"])
def test_a_model_older_than_opset_7_runs_on_onnx_runtime_converted(tmp_path: Path, case: str) -> None:
    """Add and Gemm at opset 6, Pow at opset 1: ONNX Runtime has no kernel for them as defined there
    (these cells were unsupported). ONNX's version converter takes the model to opset 7; ONNX Runtime
    runs that, its build row says so, and its outputs and the interpreter's (which runs the conversion
    too) both pass against the reference, which runs the converted model and says so too. PRelu at
    opset 6 with a slope per channel: the converter keeps the slope's shape, which broadcasts from
    the right at 7; farm reshapes it (both engines' cells had failed)."""
    code, cells = sweep_cells(tmp_path, [shipped(tmp_path, case)], BOTH_CPU)
    assert code == 0 and cells[("m0", "onnxruntime")] == ("ok", None) and cells[("m0", "torch")] == ("ok", None), cells
    con = Warehouse(tmp_path / "results").connect()
    summaries = con.execute("SELECT c.backend, b.transform_summary FROM builds b JOIN cells c USING (cell_id) "
                            "WHERE c.status = 'ok'").fetchall()
    assert {backend for backend, _ in summaries} == {"onnxruntime", "torch"}, summaries
    assert all(re.match(r"opset [16] converted to 7 by onnx.version_converter", s) for _, s in summaries), summaries
    judged = con.execute("SELECT DISTINCT c.backend, a.verdict, a.reference FROM accuracy a JOIN cells c USING (cell_id) "
                         "WHERE c.status = 'ok'").fetchall()
    assert {(backend, verdict) for backend, verdict, _ in judged} == {("onnxruntime", "pass"), ("torch", "pass")}, judged
    assert all("converted to 7 by onnx.version_converter" in reference for _, _, reference in judged), judged


def test_a_node_no_provider_took_on_cuda_is_an_operator_onnx_runtime_lacks() -> None:
    """On CUDA ONNX Runtime words a kernel it lacks (Mul at opset 6, the onnx wheel's PoissonNLLLoss
    model) otherwise: "Provider type for Mul node with name '' is not set", which failed two H200
    cells. Its words as recorded there give the same reason as the CPU's."""
    from farm.backends.onnxruntime import lacking_operator

    log = (ROOT / "benchmarks/results/corpus-registry-h200-072a880.log").read_text()
    said = re.search(r"^\[\d+\] (Fail: .*Provider type for Mul node with name '' is not set\.)$", log, re.M)
    assert said, "the recorded message is gone from the results file"
    reason = lacking_operator(RuntimeError(said[1]), "1.31.1")
    assert reason == ("ONNX Runtime 1.31.1 placed Mul on none of its providers: none has a kernel for it at the "
                      "model's opset; convert the model to a newer opset (onnx.version_converter.convert_version), "
                      "or run it on another engine")
    assert lacking_operator(RuntimeError("Provider type for Add node with name 'plus' is not set."), "") \
        .startswith("ONNX Runtime placed Add (node 'plus') on none")


def test_an_input_that_is_a_shape_operand_is_refused_until_the_sweep_gives_its_values(tmp_path: Path) -> None:
    """onnx's expand_shape_model1 takes Expand's target shape as an int64 input: no generated values
    fit it, so its cells say so (on every engine) instead of failing on what farm made up; given a
    value in the sweep file, it runs."""
    source = shipped(tmp_path, "simple/test_expand_shape_model1")
    code, cells = sweep_cells(tmp_path, [source], BOTH_CPU)
    assert code == 0, cells
    for backend in ("onnxruntime", "torch"):
        status, reason = cells[("m0", backend)]
        assert status == "unsupported" and reason.startswith("input 'shape' is Expand's shape: its values decide the "
                                                             "shapes the model computes"), reason
        assert "set inputs.shape.value = V" in reason
    given = write_sweep(tmp_path, f'[[models]]\nsource = "{source}"\ninputs.shape.value = 1\n', name="given.toml")
    [cell] = plan_sweep(load_config(given), tmp_path / "cache").cells
    assert cell.unsupported_reason is None and cell.model.unsupported is None


def test_slice_of_opset_1_runs_on_the_interpreter(tmp_path: Path) -> None:
    """Slice took its starts and ends as attributes before opset 10 (onnx's operator_index model):
    farm's ONNX-to-torch interpreter reads them there, and the cell matches ONNX Runtime."""
    source = shipped(tmp_path, "pytorch-operator/test_operator_index")
    code, cells = sweep_cells(tmp_path, [source], BOTH_CPU)
    assert code == 0 and cells[("m0", "torch")] == ("ok", None), cells
    assert verdicts(tmp_path, "c.backend = 'torch'") == [("pass",)]


def test_the_precision_transforms_of_a_model_older_than_opset_7_start_from_its_conversion(tmp_path: Path) -> None:
    """Gemm at opset 6 at fp16 and int8 on ONNX Runtime: the transforms run ONNX Runtime (fp16's range
    probe, int8's calibration), which cannot open the file as given, so they start from its
    conversion (at IR version 4, where the quantizer's initializers need not be graph inputs): both
    run and pass, and their build rows say the model was converted."""
    source = shipped(tmp_path, "pytorch-converted/test_Linear")
    config = write_sweep(tmp_path, f'name = "old"\n[[models]]\nsource = "{source}"\n[axes]\nprecisions = ["fp16", "int8"]\n'
                                   'backends = ["onnxruntime"]\n')
    assert main(["sweep", str(config), "--results", str(tmp_path / "results"), "--executor", "local"]) == 0
    con = Warehouse(tmp_path / "results").connect()
    rows = {precision: (status, verdict, summary) for precision, status, verdict, summary in con.execute(
        "SELECT c.precision, c.status, a.verdict, coalesce(b.transform_summary, c.reason) FROM cells c "
        "LEFT JOIN accuracy a USING (cell_id) LEFT JOIN builds b USING (cell_id) WHERE c.batch = 4").fetchall()}
    for precision in ("fp16", "int8"):
        status, verdict, summary = rows[precision]
        assert (status, verdict) == ("ok", "pass") and summary.startswith("opset 6 converted to 7"), rows


def test_a_reference_onnx_runtime_cannot_run_says_why_in_the_accuracy_row(tmp_path: Path) -> None:
    """A graph stamped opset 6 that uses Mish (an operator of opset 18), as a hand-edited model can be:
    ONNX's converter refuses to take it to opset 7, and ONNX Runtime refuses it as given, so neither
    its cell nor the fp32 reference can run. PyTorch's interpreter runs it: the torch cell is ok and
    its accuracy row is unjudged saying why, not with a raw error; ONNX Runtime's cell is unsupported
    with that reason and the converter's, and the sweep exits 0."""
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Mish", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])])
    source = tmp_path / "mish" / "model.onnx"
    source.parent.mkdir()
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 6)]), str(source))
    code, cells = sweep_cells(tmp_path, [str(source)], BOTH_CPU)
    assert code == 0 and cells[("m0", "torch")] == ("ok", None), cells
    lacks = ("the model uses Mish, which ONNX does not define at the model's opset 6 (its opset_import is older "
             "than its operators): export it again, or stamp it with an opset that defines Mish")
    refused = ("the model is at opset 6, older than ONNX Runtime guarantees (7), and ONNX's version converter "
               "could not convert it: No Op registered for Mish with domain_version of 7")
    assert cells[("m0", "onnxruntime")] == ("unsupported", f"{lacks}; {refused}"), cells
    [(verdict, metric)] = Warehouse(tmp_path / "results").connect().execute(
        "SELECT verdict, worst_metric FROM accuracy").fetchall()
    assert verdict == "unjudged" and metric == f"not checked: the fp32 reference cannot run: {lacks}", metric
    # the same words for a node of another domain (ai.onnx.ml's opset 3) are not about the model's opset
    from farm.backends.onnxruntime import lacking_operator

    other = RuntimeError('[ONNXRuntimeError] : 10 : INVALID_GRAPH : This is an invalid model. In Node, ("", Relu, '
                         '"ai.onnx.ml", -1) : ("x": tensor(float),) -> ("y": tensor(float),) , Error No Op registered '
                         'for Relu with domain_version of 3')
    assert "does not define" not in (lacking_operator(other, "") or "")


def test_pad_of_opset_2_fills_with_its_value_attribute(tmp_path: Path) -> None:
    """Pad took its fill value as an attribute before opset 11 (onnx's ConstantPad2d model, value 2):
    the interpreter's cell agrees with ONNX Runtime instead of padding with zeros."""
    source = shipped(tmp_path, "pytorch-converted/test_ConstantPad2d")
    code, cells = sweep_cells(tmp_path, [source], TORCH_CPU)
    assert code == 0 and cells[("m0", "torch")] == ("ok", None), cells
    assert verdicts(tmp_path, "c.batch = 2") == [("pass",)]


def test_a_locale_the_machine_lacks_is_unsupported_with_what_to_do(tmp_path: Path) -> None:
    """onnx's StringNormalizer model names no locale, so ONNX Runtime asks the C library for
    en_US.UTF-8: where the machine has it the cell runs; where it does not (this project's machines
    have only C and C.utf8) the cell is unsupported with the locale and how to install it. Never failed."""
    code, cells = sweep_cells(tmp_path, [shipped(tmp_path, "simple/test_strnorm_model_nostopwords_nochangecase")])
    assert code == 0, cells
    status, reason = cells[("m0", "onnxruntime")]
    assert status == "ok" or (status == "unsupported" and "needs the locale en_US.UTF-8, which this machine does "
                              "not have: install it (Debian: locales-all" in reason), (status, reason)
