"""Quantized ONNX files as users make them with ONNX Runtime's own tools (onnxruntime.quantization):
static Q/DQ (the explicit quantization TensorRT builds int8 engines from), dynamic (DynamicQuantizeLinear,
MatMulInteger, ConvInteger) and the QOperator format. farm's interpreter, the torch backend's path for an
ONNX file, gives what ONNX Runtime gives on the same file, or refuses the file saying which operator."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
quantization = pytest.importorskip("onnxruntime.quantization")

from farm.cli import main  # noqa: E402
from farm.errors import EngineUnsupported  # noqa: E402
from farm.onnx_torch import build_module  # noqa: E402
from farm.warehouse import Warehouse  # noqa: E402
from tests.conftest import tiny_cnn, write_sweep  # noqa: E402


class Calibration(quantization.CalibrationDataReader):
    """Seeded inputs for ONNX Runtime's static quantization: the activations' ranges."""

    def __init__(self, shape: tuple[int, ...]) -> None:
        self.batches = iter([{"x": np.random.default_rng(i).standard_normal(shape).astype(np.float32)}
                             for i in range(8)])

    def get_next(self):
        return next(self.batches, None)


@pytest.fixture(scope="module")
def quantized(tmp_path_factory) -> dict[str, Path]:
    """The suite's tiny CNN (Conv, Relu, GlobalAveragePool, Flatten, Gemm) quantized three ways."""
    root = tmp_path_factory.mktemp("quantized")
    plain = tiny_cnn(root / "cnn.onnx", channels=8, spatial=8)
    files = {"qdq": root / "cnn-qdq.onnx", "qoperator": root / "cnn-qop.onnx", "dynamic": root / "cnn-dyn.onnx"}
    quantization.quantize_static(str(plain), str(files["qdq"]), Calibration((1, 3, 8, 8)),
                                 quant_format=quantization.QuantFormat.QDQ, per_channel=True)
    quantization.quantize_static(str(plain), str(files["qoperator"]), Calibration((1, 3, 8, 8)),
                                 quant_format=quantization.QuantFormat.QOperator)
    quantization.quantize_dynamic(str(plain), str(files["dynamic"]), weight_type=quantization.QuantType.QUInt8)
    return files


@pytest.mark.parametrize("kind, ops", [("qdq", {"QuantizeLinear", "DequantizeLinear"}),
                                       ("dynamic", {"DynamicQuantizeLinear", "ConvInteger", "MatMulInteger"})])
def test_a_quantized_file_gives_what_onnx_runtime_gives(quantized: dict, kind: str, ops: set) -> None:
    proto = onnx.load(quantized[kind])
    assert ops <= {n.op_type for n in proto.graph.node}  # the operators this file is about
    x = np.random.default_rng(7).standard_normal((4, 3, 8, 8)).astype(np.float32)
    expected = ort.InferenceSession(str(quantized[kind]), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    with torch.no_grad():
        got = build_module(proto)(torch.from_numpy(x))[0].numpy()
    # both dequantize the same integers: what is left is float32 summation order
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6 * np.abs(expected).max())


def test_the_qoperator_format_names_the_operator_only_onnx_runtime_has(quantized: dict) -> None:
    proto = onnx.load(quantized["qoperator"])
    theirs = sorted({f"{n.domain}.{n.op_type}" for n in proto.graph.node if n.domain == "com.microsoft"})
    assert theirs  # ONNX Runtime's contrib operators (QGemm, QLinearAdd, ...) beside the standard QLinearConv
    with pytest.raises(EngineUnsupported, match=theirs[0].replace(".", r"\.")):
        build_module(proto)


def test_a_sweep_runs_a_qdq_file_on_both_cpu_engines_and_judges_each(quantized: dict, tmp_path: Path) -> None:
    """A user's Q/DQ file in a sweep: ONNX Runtime runs its int8 kernels, PyTorch the same arithmetic
    through the interpreter, and each cell is judged against the fp32 reference of the file."""
    config = write_sweep(tmp_path, f"""
        name = "qdq"
        [[models]]
        source = "{quantized['qdq']}"
        [axes]
        batch_sizes = [2]
        backends = ["onnxruntime", "torch"]
        [backends.torch]
        device = "cpu"
    """)
    assert main(["sweep", str(config), "--results", str(tmp_path / "results"), "--executor", "local"]) == 0
    rows = Warehouse(tmp_path / "results").connect().execute(
        "SELECT c.backend, c.status, c.reason, a.verdict FROM cells c LEFT JOIN accuracy a USING (cell_id) "
        "ORDER BY c.backend").fetchall()
    assert [(r[0], r[1], r[3]) for r in rows] == [("onnxruntime", "ok", "pass"), ("torch", "ok", "pass")], rows
