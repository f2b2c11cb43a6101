"""Classes of PyTorch model users point farm at, each run as a class (issue 45): modules whose
outputs are structures (a transformers decoder and its cache, dicts, lists of dicts), whose export
fixes the batch, and whose kernels the device or the precision lacks. Real torch modules, real
exports, real sweeps on the CPU (tests/structured_models.py has the factories)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from farm.backends.torch.missing_kernels import quantized_for_the_cpu, unsupported_kernel  # noqa: E402
from farm.cli import main  # noqa: E402
from farm.config import ModelSpec  # noqa: E402
from farm.models.outputs import output_names  # noqa: E402
from farm.warehouse import Warehouse  # noqa: E402
from tests.conftest import write_sweep  # noqa: E402

QUICK = """
[measurement]
warmup_ms = 2
min_iterations = 2
min_duration_ms = 5
repeats = 1
layer_iterations = 0
"""
X8 = 'inputs = { x = { shape = ["batch", 8] } }'


def sweep(tmp_path: Path, models: dict[str, str], backends: str, batches: str, precisions: str = '["fp32"]'):
    """Run a sweep of `module:tests.structured_models:FACTORY` models (factory: its inputs line) on
    the CPU: (exit status, {(model, backend, precision, batch): (status, reason, transform_summary)},
    accuracy rows (model, backend, batch, output, verdict))."""
    tables = "".join(f'[[models]]\nsource = "module:tests.structured_models:{factory}"\n{inputs}\n'
                     for factory, inputs in models.items())
    config = write_sweep(tmp_path, f'name = "classes"\n{tables}\n[axes]\nbackends = {backends}\nbatch_sizes = {batches}\n'
                                   f'precisions = {precisions}\n[backends.torch]\ndevice = "cpu"\n{QUICK}')
    results = tmp_path / "results"
    status = main(["sweep", str(config), "--results", str(results), "--executor", "local"])
    con = Warehouse(results).connect()
    cells = {(m, be, p, b): (s, r, t) for m, be, p, b, s, r, t in con.execute(
        "SELECT c.model, c.backend, c.precision, c.batch, c.status, c.reason, b.transform_summary "
        "FROM cells c LEFT JOIN builds b USING (cell_id)").fetchall()}
    accuracy = sorted(con.execute("SELECT c.model, c.backend, c.batch, a.output_name, a.verdict FROM accuracy a "
                                  "JOIN cells c USING (cell_id)").fetchall())
    return status, cells, accuracy


def test_structured_outputs_are_named_tensors_and_a_cache_is_turned_off(tmp_path: Path) -> None:
    """A transformers decoder left at use_cache=True (forward() returns a DynamicCache beside the
    logits: `'DynamicCache' object has no attribute 'cpu'` on CUDA, no export at all) and a module
    returning a dict with nested lists, a None and an int: both export, run on torch and ONNX Runtime,
    and pass accuracy output by output, named by path; the build rows say what was turned off or dropped."""
    status, cells, accuracy = sweep(tmp_path, {
        "tiny_decoder": 'inputs = { input_ids = { shape = ["batch", 8], dtype = "int64", range = [0, 128] } }',
        "structured": X8}, '["torch", "onnxruntime"]', "[2]")
    assert status == 0
    assert {key: s for key, (s, _, _) in cells.items()} == {
        (m, b, "fp32", 2): "ok" for m in ("tiny_decoder", "structured") for b in ("torch", "onnxruntime")}
    for backend in ("torch", "onnxruntime"):
        assert "use_cache turned off (config.use_cache = False)" in cells["tiny_decoder", backend, "fp32", 2][2]
        assert "outputs that are not tensors dropped: parts.1.1 (NoneType), count (int)" in \
            cells["structured", backend, "fp32", 2][2]
    assert accuracy == sorted(
        [("tiny_decoder", b, 2, "logits", "pass") for b in ("torch", "onnxruntime")]
        + [("structured", b, 2, name, "pass") for b in ("torch", "onnxruntime")
           for name in ("logits", "parts.0", "parts.1.0", "extra.scale")])


def test_a_mixture_of_experts_exports_through_an_implementation_onnx_can_hold(tmp_path: Path) -> None:
    """A transformers mixture of experts (Mixtral, as Qwen2-MoE, OLMoE and the rest) runs its experts
    through grouped_mm, which no exporter converts: its ONNX engines' cells were unsupported. The
    export is made again with transformers' batched_mm experts (the same products); both engines'
    cells run and pass, the ONNX cell's build row says so and the PyTorch cell runs the model's own."""
    status, cells, accuracy = sweep(tmp_path, {
        "tiny_moe": 'inputs = { input_ids = { shape = ["batch", 8], dtype = "int64", range = [0, 128] } }'},
        '["torch", "onnxruntime"]', "[3]")
    assert status == 0
    assert {key: s for key, (s, _, _) in cells.items()} == {("tiny_moe", b, "fp32", 3): "ok" for b in ("torch", "onnxruntime")}
    note = "experts exported as transformers' batched_mm (the model's grouped_mm has no ONNX form)"
    assert note in cells["tiny_moe", "onnxruntime", "fp32", 3][2]
    assert "experts" not in cells["tiny_moe", "torch", "fp32", 3][2]
    assert accuracy == [("tiny_moe", b, 3, "logits", "pass") for b in ("onnxruntime", "torch")]


def test_a_model_without_experts_is_not_exported_again() -> None:
    """Every transformers config names an experts implementation ("eager" on a dense decoder), and
    setting one on a model without experts changes nothing: no second export, no note."""
    from farm.models.export import exportable_experts
    from tests.structured_models import tiny_decoder, tiny_moe

    dense = tiny_decoder()
    assert exportable_experts(dense) is None and dense.config._experts_implementation != "batched_mm"
    moe = tiny_moe()
    assert exportable_experts(moe).startswith("experts exported as transformers' batched_mm")
    assert moe.config._experts_implementation == "batched_mm"


def test_a_cache_that_cannot_be_opened_is_dropped_with_a_note() -> None:
    """A real transformers Cache object among the outputs (pytree cannot open it): the tensors are
    named, the cache is named in the note, nothing raises."""
    from transformers import DynamicCache

    names, notes = output_names((torch.zeros(2, 3), DynamicCache(), {"scores": torch.ones(2)}))
    assert names == ["output_0", "output_2.scores"]
    assert notes == ["outputs that are not tensors dropped: output_1 (DynamicCache)"]


def test_an_export_that_fixes_the_batch_leaves_onnx_cells_at_other_batches_unsupported(tmp_path: Path) -> None:
    """A module that reshapes to its batch as a Python number, and one that returns one dict per
    image (as torchvision's detectors): torch.onnx.export fixes the batch at 2, where it traced them.
    Checked at batch 1 before any cell relies on it: the ONNX Runtime cells at batch 1 are
    `unsupported` with that reason, not failed; batch 2 runs, and the torch cells run both."""
    status, cells, accuracy = sweep(tmp_path, {"fixed_batch": X8, "per_image": X8}, '["torch", "onnxruntime"]', "[1, 2]")
    assert status == 0
    for model in ("fixed_batch", "per_image"):
        state, reason, _ = cells[model, "onnxruntime", "fp32", 1]
        assert state == "unsupported"
        assert reason.startswith("the ONNX export fixed the batch at 2: ")
        assert reason.endswith("engines that run the export run batch 2 only (the torch backend runs the module "
                               "itself at any batch)")
        assert cells[model, "onnxruntime", "fp32", 2][0] == "ok"
        assert cells[model, "torch", "fp32", 1][0] == cells[model, "torch", "fp32", 2][0] == "ok"
    assert {(m, b, o, v) for m, b, batch, o, v in accuracy if batch == 2 and m == "per_image"} == {
        ("per_image", backend, name, "pass") for backend in ("torch", "onnxruntime")
        for name in ("output_0.boxes", "output_0.scores", "output_1.boxes", "output_1.scores")}


def test_an_export_that_fixes_the_batch_is_said_in_its_model(tmp_path: Path) -> None:
    """The exporter's fixed batch is found from the file itself (its input's batch axis a constant)."""
    from farm.models.native import native_model

    spec = ModelSpec.model_validate({"source": "module:tests.structured_models:fixed_batch",
                                     "inputs": {"x": {"shape": ["batch", 8]}}})
    native = native_model(spec, "models[0]", Path(__file__).parents[1], tmp_path, 1)
    assert native.onnx_error is None
    assert native.onnx_fixed_batch is not None and native.onnx_fixed_batch[0] == 2
    assert re.search(r"input 'x' axis 0 is the constant 2|ONNX Runtime cannot run it at batch 1",
                     native.onnx_fixed_batch[1])


def test_kernels_the_precision_lacks_are_unsupported_with_what_to_do(tmp_path: Path) -> None:
    """fp16 on the CPU: torch.cdist has no Half kernel, grid_sample meets the float32 grid the module
    builds itself (RAFT's case), a quantized model's Quantize takes float only. Each such torch cell
    is `unsupported` with PyTorch's words and precision = "fp32"; the fp32 cells run."""
    status, cells, _ = sweep(tmp_path, {"distances": X8, "warp": 'inputs = { x = { shape = ["batch", 2, 4, 4] } }',
                                        "quantized_conv": 'inputs = { x = { shape = ["batch", 3, 8, 8] } }'},
                             '["torch"]', "[1]", '["fp32", "fp16"]')
    assert status == 0
    for model in ("distances", "warp", "quantized_conv"):
        assert cells[model, "torch", "fp32", 1][0] == "ok"
        assert cells[model, "torch", "fp16", 1][0] == "unsupported"
        assert cells[model, "torch", "fp16", 1][1].endswith('run this model at precision = "fp32"')
    assert cells["distances", "torch", "fp16", 1][1] == (
        "PyTorch has no fp16 (Half) kernel for cdist on cpu (NotImplementedError: \"cdist\" not implemented for "
        "'Half'): run this model at precision = \"fp32\"")
    assert cells["warp", "torch", "fp16", 1][1].startswith(
        "the module does not run in fp16 at grid_sample (RuntimeError: expected scalar type Half but found Float)")
    assert "Quantize only works on Float Tensor, got Half" in cells["quantized_conv", "torch", "fp16", 1][1]


def _quantized_conv_on_float_error() -> NotImplementedError:
    """PyTorch's own error for a quantized convolution given float CPU tensors."""
    from tests.structured_models import quantized_conv

    packed = quantized_conv().conv._packed_params
    with pytest.raises(NotImplementedError) as raised:
        torch.ops.quantized.conv2d.new(torch.zeros(1, 3, 8, 8), packed, 0.1, 0)
    return raised.value


def test_an_operator_without_a_kernel_for_the_tensors_is_named() -> None:
    """The dispatcher's "Could not run 'quantized::conv2d.new' with arguments from the 'CPU' backend",
    raised for real: the op, the kernels it has, and what was given, in one line."""
    reason = unsupported_kernel(_quantized_conv_on_float_error(), "fp32", "cpu")
    assert reason is not None and "\n" not in reason
    assert reason.startswith("PyTorch's quantized::conv2d.new runs on QuantizedCPU tensors only and this module "
                             "gives it CPU ones (NotImplementedError: Could not run 'quantized::conv2d.new'")


def test_a_quantized_model_on_cuda_is_sent_to_the_cpu() -> None:
    """On CUDA (issue 45: torchvision's quantized mobilenet_v2) the dispatcher says the same with
    'CUDA' for 'CPU': the reason says to run it on the CPU. The message is PyTorch's own from the
    CPU, that one word changed (no CUDA here to raise it)."""
    real = _quantized_conv_on_float_error()
    on_cuda = NotImplementedError(str(real).replace("from the 'CPU' backend", "from the 'CUDA' backend", 1))
    reason = unsupported_kernel(on_cuda, "fp32", "cuda")
    assert reason is not None and reason.startswith(
        "PyTorch has no CUDA kernel for quantized::conv2d.new (its kernels: QuantizedCPU; ")
    assert reason.endswith('run this model with backends.torch.device = "cpu"')


def test_a_module_of_cpu_quantized_tensors_is_refused_on_cuda_before_it_runs() -> None:
    """torchvision's quantized resnet18 ended its CUDA process with SIGSEGV on an H200 instead of
    raising (benchmarks/results/corpus-registry-h200-072a880.log): the build now refuses, before the
    first call, a module holding PyTorch's quantized tensors (static and dynamic quantization, real
    modules here), and lets a float module of the same family (FloatFunctional) through."""
    import warnings

    from tests.structured_models import quantized_conv

    reason = quantized_for_the_cpu(quantized_conv())
    assert reason is not None and "\n" not in reason
    assert reason.startswith("the module holds 1 quantized tensor(s) of PyTorch's CPU quantization (conv.weight: "
                             "quint8") or reason.startswith("the module holds 1 quantized tensor(s) of PyTorch's CPU "
                                                             "quantization (conv.weight: qint8"), reason
    assert 'run this model with backends.torch.device = "cpu"' in reason
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.ao.quantization's deprecation
        dynamic = torch.ao.quantization.quantize_dynamic(torch.nn.Sequential(torch.nn.Linear(4, 4)),
                                                         {torch.nn.Linear}, dtype=torch.qint8)
    assert "(0._packed_params._packed_params: qint8)" in quantized_for_the_cpu(dynamic)

    class FloatAdd(torch.nn.Module):  # the float form of a quantizable block: runs on any device
        def __init__(self) -> None:
            super().__init__()
            self.add = torch.ao.nn.quantized.FloatFunctional()
            self.conv = torch.nn.Conv2d(3, 3, 1)

        def forward(self, x):
            return self.add.add(self.conv(x), x)

    assert quantized_for_the_cpu(FloatAdd()) is None


def test_other_errors_are_not_kernels() -> None:
    """A module's own error, and a dtype complaint at fp32, stay failures (None)."""
    with pytest.raises(RuntimeError) as raised:
        torch.zeros(2, 3) @ torch.zeros(2, 3)
    assert unsupported_kernel(raised.value, "fp32", "cpu") is None
    with pytest.raises(RuntimeError) as mixed:
        torch.zeros(2, 3, dtype=torch.float16) @ torch.zeros(3, 2)
    assert unsupported_kernel(mixed.value, "fp32", "cpu") is None
    assert unsupported_kernel(mixed.value, "fp16", "cpu") is not None
