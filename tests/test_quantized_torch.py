"""int8 and fp8 on the PyTorch backend through torchao (farm.backends.torch.quantize): on the CPU,
int8 (dynamic and weight-only) quantizes a module's Linear layers, leaves its convolution, says
both on the build row (in one line, and layer by layer, which the dashboard's cell page shows) and
is judged against fp32; fp8, which needs fp8 tensor cores, is
`unsupported` with why; a model that reaches PyTorch as an ONNX file (farm's interpreter, no Linear
layers) is `unsupported` at int8 saying what to give instead."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("torch")
torchao = pytest.importorskip("torchao")

from farm.backends.torch.quantize import compute_dtype, unsupported  # noqa: E402
from farm.cli import main  # noqa: E402
from farm.warehouse import Warehouse  # noqa: E402
from tests.conftest import tiny_cnn, write_sweep  # noqa: E402
from tests.dashboard.test_app import open_page  # noqa: E402

SWEEP = """name = "quantized"
[[models]]
name = "linear-and-conv"
source = "module:tests.structured_models:linear_and_conv"
inputs = { x = { shape = ["batch", 4, 16] } }
[[models]]
name = "onnx-file"
source = "tiny.onnx"
[axes]
precisions = ["fp32", "int8", "fp8"]
batch_sizes = [4]
backends = ["torch"]
[backends.torch]
device = "cpu"
int8 = ["dynamic", "weight_only"]
[measurement]
warmup_ms = 10
min_iterations = 5
min_duration_ms = 50
repeats = 1
layer_iterations = 0
"""


def test_int8_and_fp8_cells_say_what_torchao_did_or_why_not(monkeypatch, tmp_path: Path) -> None:
    tiny_cnn(tmp_path / "tiny.onnx")
    status = main(["sweep", str(write_sweep(tmp_path, SWEEP)), "--results", str(tmp_path / "results"),
                   "--executor", "local"])
    assert status == 0
    con = Warehouse(tmp_path / "results").connect()
    rows = con.execute("""
        SELECT c.model, c.precision, json_extract_string(c.options, '$.int8'), c.status, c.reason,
               b.transform_summary, b.transform_tool, v.verdict
        FROM cells c LEFT JOIN builds b USING (cell_id) LEFT JOIN accuracy v USING (cell_id)""").fetchall()
    cells = {(m, p, scheme): rest for m, p, scheme, *rest in rows}
    version = torchao.__version__
    dynamic = cells["linear-and-conv", "int8", "dynamic"]
    assert dynamic[0] == "ok" and dynamic[4] == "pass", dynamic
    assert dynamic[2].endswith("; int8: 2 of 2 Linear layers quantized; left in fp32: 1 Conv1d "
                               "(activations quantized per call, fp32 between)")
    assert dynamic[3] == f"torchao {version} Int8DynamicActivationInt8WeightConfig"
    weight_only = cells["linear-and-conv", "int8", "weight_only"]
    assert weight_only[0] == "ok" and weight_only[4] == "pass", weight_only
    assert weight_only[2].endswith("(weights only, activations in fp32)")
    assert weight_only[3] == f"torchao {version} Int8WeightOnlyConfig"
    fp8 = cells["linear-and-conv", "fp8", "dynamic"]
    assert fp8[0] == "unsupported" and fp8[1].startswith("fp8 on PyTorch runs on the fp8 tensor cores of CUDA GPUs")
    for scheme in ("dynamic", "weight_only"):
        onnx = cells["onnx-file", "int8", scheme]
        assert onnx[0] == "unsupported" and "farm's ONNX interpreter" in onnx[1] and "module: or torchvision:" in onnx[1]
    # each layer with weights and the precision it ran in: what a kernel profile cannot say under a CUDA graph
    by_layer = dict(con.execute("""SELECT json_extract_string(c.options, '$.int8'), b.transform_layers FROM cells c
        JOIN builds b USING (cell_id) WHERE c.model = 'linear-and-conv' AND c.precision = 'int8'""").fetchall())
    for scheme, runs in (("dynamic", "int8"), ("weight_only", "int8 weight-only")):
        layers = json.loads(by_layer[scheme])
        assert [(r["layer"], r["type"], r["precision"]) for r in layers] == [
            ("0", "Conv1d", "fp32"), ("3", "Linear", runs), ("5", "Linear", runs)], layers
        assert layers[0]["weights"] == "fp32" and layers[1]["weights"].startswith(("Int8", "Affine")), layers
    assert con.execute("SELECT count(transform_layers) FROM builds b JOIN cells c USING (cell_id) "
                       "WHERE c.precision = 'fp32'").fetchone()[0] == 0  # nothing quantized: no listing
    # the dashboard's cell page shows it
    cell = con.execute("SELECT cell_id FROM cells WHERE model = 'linear-and-conv' AND precision = 'int8' "
                       "AND json_extract_string(options, '$.int8') = 'dynamic'").fetchone()[0]
    at = open_page(monkeypatch, tmp_path / "results", "cell", cell=cell)
    expander = [e for e in at.expander if e.label.startswith("Precision by layer")]
    assert [e.label for e in expander] == ["Precision by layer: 2 int8, 1 fp32"]
    table = expander[0].table[0].value
    assert table["precision"].tolist() == ["fp32", "int8", "int8"] and table["type"].tolist()[0] == "Conv1d"
    # the int8 scheme is an axis of the int8 cells only: one fp32 cell and one fp8 cell per model, not two
    counts = dict(con.execute("SELECT precision, count(*) FROM cells WHERE model = 'linear-and-conv' "
                              "GROUP BY ALL").fetchall())
    assert counts == {"fp32": 1, "int8": 2, "fp8": 1} and cells["linear-and-conv", "fp32", "dynamic"][0] == "ok"


def test_fp8_needs_compute_capability_8_9() -> None:
    assert unsupported("fp8", "cuda", (8, 0)) == (
        "fp8 needs a GPU with compute capability 8.9 or newer (Ada, Hopper, Blackwell) for its fp8 tensor cores; "
        "this one is 8.0: run int8 or bf16 on it")
    assert unsupported("fp8", "cuda", (9, 0)) is None and unsupported("int8", "cuda", (8, 0)) is None
    assert unsupported("bf16", "cpu") is None
    assert compute_dtype("fp8", "cuda") == "bfloat16" and compute_dtype("int8", "cpu") == "float32"


def test_compare_across_precisions_pairs_each_int8_scheme_with_its_fp32_cell(tmp_path: Path, capsys) -> None:
    """`farm compare q q --precisions fp32:int8`: each int8 cell (dynamic, weight-only) against the
    fp32 cell of its model and batch, with a latency verdict and the accuracy change; no fp8 cell on
    either side; precisions the sweep did not run are a one-line usage error."""
    from farm.compare import compare_sweeps

    tiny_cnn(tmp_path / "tiny.onnx")
    results = tmp_path / "results"
    assert main(["sweep", str(write_sweep(tmp_path, SWEEP)), "--results", str(results), "--executor", "local"]) == 0
    comparison = compare_sweeps("quantized", "quantized", results, precisions=("fp32", "int8"))
    cells = {cell_id: rest for cell_id, *rest in Warehouse(results).connect().execute(
        "SELECT cell_id, model, precision, json_extract_string(options, '$.int8') FROM cells").fetchall()}
    pairs = {(*cells[p.base_id][:2], *cells[p.new_id][1:]): p for p in comparison.pairs}
    assert set(pairs) == {("linear-and-conv", "fp32", "int8", scheme) for scheme in ("dynamic", "weight_only")} | \
        {("onnx-file", "fp32", "int8", scheme) for scheme in ("dynamic", "weight_only")}
    ours = [p for key, p in pairs.items() if key[0] == "linear-and-conv"]
    assert len({p.base_id for p in ours}) == 1  # one fp32 cell against both int8 schemes
    assert all(p.verdict in ("slower", "faster", "within noise", "inconclusive") and p.accuracy["new"] == "pass"
               for p in ours), [(p.verdict, p.accuracy) for p in ours]
    assert not comparison.only_base and not comparison.only_new  # the fp8 cells are on neither side
    refused = [p for key, p in pairs.items() if key[0] == "onnx-file"]  # the reason whole, to what it says to do
    assert all(any(n.startswith("NEW unsupported: ") and "module: or torchvision:" in n for n in p.notes) for p in refused)
    assert main(["compare", "quantized", "quantized", "--results", str(results), "--precisions", "fp32:int8"]) in (0, 1)
    assert "quantized at int8 against quantized at fp32" in capsys.readouterr().out
    assert main(["compare", "quantized", "quantized", "--results", str(results), "--precisions", "fp16:int8"]) == 2
    assert "--precisions BASE:NEW names precisions both sweeps ran" in capsys.readouterr().err


def test_labels_name_the_int8_scheme_on_int8_cells_only() -> None:
    """A bf16 cell reads no int8 scheme: where a sweep lists two, only its int8 cells' labels name one."""
    from farm.compare.core import cell_labels

    options = '{{"device": "cuda", "mode": "eager", "int8": "{}"}}'
    cells = [{"cell_id": cell_id, "model": "m", "precision": precision, "batch": 8, "backend": "torch",
              "options": options.format(scheme)}
             for cell_id, precision, scheme in (("a", "bf16", "dynamic"), ("b", "int8", "dynamic"),
                                                ("c", "int8", "weight_only"))]
    assert cell_labels(cells) == {"a": "m · bf16 · b8 · torch", "b": "m · int8 · b8 · torch int8=dynamic",
                                  "c": "m · int8 · b8 · torch int8=weight_only"}
