"""TensorRT's Q/DQ rules (farm.precision.tensorrt_qdq), checked on what farm's int8 transform really
makes: ONNX Runtime's symmetric int8 Q/DQ meets them but for its int32 biases, which the TensorRT
backends fold back to fp32 (the folded model computes what the int8 one does, on ONNX Runtime);
an asymmetric uint8 model, which TensorRT's parser rejects, makes the cell unsupported naming why."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from farm.errors import EngineUnsupported
from farm.precision.int8 import to_int8
from farm.precision.tensorrt_qdq import for_tensorrt, problems
from tests.conftest import tiny_cnn
from tests.test_trtexec_backend import fake_trtexec, trtexec_cell  # noqa: F401 - its fixture and cell


def batches(n: int = 4) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(0)
    return [{"x": rng.standard_normal((2, 3, 8, 8)).astype(np.float32)} for _ in range(n)]


def run(path: Path, feed: dict[str, np.ndarray]) -> np.ndarray:
    import onnxruntime as ort

    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feed)[0]


def test_int32_biases_are_folded_and_the_rest_meets_the_rules(tmp_path: Path) -> None:
    model = tiny_cnn(tmp_path / "tiny.onnx")
    quantized = tmp_path / "int8.onnx"
    to_int8(model, quantized, batches(), tmp_path)
    assert problems(onnx.load(str(quantized))) == ["2 DequantizeLinear of int32 (a quantized bias)"]  # Conv's and Gemm's
    folded, note = for_tensorrt(quantized, tmp_path)
    assert folded != quantized and note == ("2 int32 bias DequantizeLinear folded to fp32 for TensorRT "
                                            "(its parser takes int8/fp8 Q/DQ only)")
    checked = onnx.load(str(folded))
    onnx.checker.check_model(checked, full_check=True)
    assert problems(checked) == [] and not any(t.data_type == onnx.TensorProto.INT32 for t in checked.graph.initializer)
    feed = {"x": np.random.default_rng(1).standard_normal((2, 3, 8, 8)).astype(np.float32)}
    before, after = run(quantized, feed), run(folded, feed)
    cosine = float((before * after).sum() / np.linalg.norm(before) / np.linalg.norm(after))
    assert cosine > 0.999, cosine
    assert for_tensorrt(folded, tmp_path) == (folded, None)  # a model that meets the rules is used as it is


def test_an_asymmetric_uint8_model_is_refused_saying_why(tmp_path: Path) -> None:
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.items = iter(batches())

        def get_next(self):
            return next(self.items, None)

    model = tiny_cnn(tmp_path / "tiny.onnx")
    quantize_static(str(model), str(tmp_path / "uint8.onnx"), Reader(), quant_format=QuantFormat.QDQ,
                    activation_type=QuantType.QUInt8)  # asymmetric (quantize_static's default), uint8 activations
    found = problems(onnx.load(str(tmp_path / "uint8.onnx")))
    assert any("zero point other than 0" in p for p in found) and any("uint8" in p for p in found), found
    with pytest.raises(EngineUnsupported, match="TensorRT's ONNX parser takes Q/DQ models with int8 or fp8 Q/DQ and "
                                                "zero points of 0 only, and this one has .*uint8"):
        for_tensorrt(tmp_path / "uint8.onnx", tmp_path)


def test_trtexec_builds_an_int8_cell_from_the_folded_model_and_says_so(fake_trtexec, tmp_path: Path,  # noqa: F811
                                                                       monkeypatch) -> None:
    """An int8 trtexec cell (trtexec is the double of tests/doubles/fake_trtexec.py): trtexec is given
    the folded copy of farm's int8 model, and the build row says what was folded after the int8
    transform's own summary."""
    from farm.cell_runner import run_cell

    monkeypatch.setenv("FAKE_TRTEXEC_VERSION", "110100")
    result = run_cell(trtexec_cell(tmp_path, precision="int8"), tmp_path / "cache")
    assert result.status == "ok", result.traceback
    (args,) = fake_trtexec()
    assert next(a for a in args if a.startswith("--onnx=")).endswith("/model.tensorrt-qdq.onnx")  # in the cell's work dir
    assert result.build.transform_summary.startswith("int8: ")
    assert result.build.transform_summary.endswith("; 2 int32 bias DequantizeLinear folded to fp32 for TensorRT "
                                                   "(its parser takes int8/fp8 Q/DQ only)")
