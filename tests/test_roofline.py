"""Roofline: FLOPs and bytes per ONNX node against hand-computed values and ResNet-50's known
~4.1 GMACs, the datasheet peak table, the roofline figures, and the dashboard's per-cell frame."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from farm.layers.flops import map_layer, node_costs
from farm.layers.roofline import PEAKS, device_peak, roofline
from tests.conftest import tiny_cnn


def model_of(nodes, inputs, outputs, initializers=()):
    from onnx import helper

    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_conv_matmul_gemm_by_hand() -> None:
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    weights = [numpy_helper.from_array(np.zeros((4, 3, 3, 3), np.float32), "w"),
               numpy_helper.from_array(np.zeros((6, 5), np.float32), "fc")]
    model = model_of(
        [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),  # 1x3x8x8 -> 1x4x8x8
         helper.make_node("MatMul", ["a", "b"], ["m"], name="matmul"),  # [2,3,4] x [4,5] -> [2,3,5]
         helper.make_node("Gemm", ["m2", "fc"], ["g"], name="gemm", transB=1)],  # [2,5] x [6,5]^T -> [2,6]
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3, 8, 8]),
         helper.make_tensor_value_info("a", TensorProto.FLOAT, [2, 3, 4]),
         helper.make_tensor_value_info("b", TensorProto.FLOAT, [4, 5]),
         helper.make_tensor_value_info("m2", TensorProto.FLOAT, [2, 5])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("c", "m", "g")], weights)
    conv, matmul, gemm = node_costs(model, {"x": [1, 3, 8, 8]})
    assert conv.flops == 2 * (4 * 8 * 8) * (3 * 3 * 3)  # each output element: C*R*S MACs
    assert matmul.flops == 2 * (2 * 3 * 5) * 4
    assert gemm.flops == 2 * (2 * 6) * 5
    assert conv.bytes_at(4) == 4 * (4 * 3 * 3 * 3 + 3 * 64 + 4 * 64) and conv.weight_bytes_at(2) == 2 * 108
    assert matmul.bytes_at(2) == 2 * (24 + 20 + 30)
    batch4 = node_costs(model, {"x": [4, 3, 8, 8]})[0]
    assert batch4.flops == 4 * conv.flops  # the cell's shapes, not the file's


def test_tiny_cnn_totals(tmp_path: Path) -> None:
    import onnx

    model = onnx.load(tiny_cnn(tmp_path / "tiny.onnx", channels=8, spatial=16))
    costs = {c.name: c for c in node_costs(model, {"x": [2, 3, 16, 16]})}
    assert costs["conv"].flops == 2 * 2 * 8 * 256 * 27 and costs["relu"].flops == 2 * 2048
    assert costs["pool"].flops == 2 * 2048 and costs["flatten"].flops == 0 and costs["fc"].flops == 2 * 2 * 5 * 8
    assert sum(c.bytes_at(4) for c in costs.values()) == 4 * (269 + 2 * 8997)  # weights + activations, unfused


def test_resnet50_is_about_4_1_gmacs() -> None:
    from farm.models.zoo import ZOO

    costs = node_costs(ZOO["resnet50"].build(), {"input": [1, 3, 224, 224]})
    macs = sum(c.flops for c in costs if c.op_type in ("Conv", "Gemm")) // 2
    assert macs == 4_089_184_256  # the figure usually quoted as ~4.1 GMACs at 224x224
    assert sum(c.op_type == "Conv" for c in costs) == 53 and all(c.flops is not None for c in costs)
    weights = sum(c.weight_float_elements for c in costs if c.op_type in ("Conv", "Gemm"))
    assert 25.0e6 < weights < 25.6e6  # ResNet-50's ~25.5 M parameters (batch-norm ones aside)


def test_unknown_dimensions_are_unknown_not_guessed() -> None:
    from onnx import TensorProto, helper

    model = model_of([helper.make_node("Relu", ["x"], ["y"], name="relu")],
                     [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])],
                     [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4])])
    (relu,) = node_costs(model, {})
    assert relu.flops is None and relu.bytes_at(4) is None
    (relu,) = node_costs(model, {"x": [3, 4]})
    assert relu.flops == 12 and relu.bytes_at(2) == 2 * 24


def test_peak_table() -> None:
    assert device_peak("NVIDIA H200").name == "H200 SXM" and device_peak("NVIDIA H200 NVL").name == "H200 NVL"
    assert device_peak("NVIDIA H100 80GB HBM3").name == "H100 SXM5"
    assert device_peak("NVIDIA H100 PCIe").name == "H100 PCIe"
    assert device_peak("NVIDIA A100-SXM4-80GB").bandwidth_gbps == 2039
    assert device_peak("Tesla T4").tflops == {"fp32": 8.1, "fp16": 65, "int8": 130}  # no TF32, no BF16 on Turing
    assert device_peak("NVIDIA L4").name == "L4" and device_peak("NVIDIA L40S").name == "L40S"
    assert device_peak("NVIDIA GeForce RTX 4090").name == "GeForce RTX 4090"
    assert device_peak("NVIDIA GeForce RTX 3060 Laptop GPU") is None  # not in the table: no peak invented
    assert device_peak("Intel(R) Xeon(R)", "cpu") is None and device_peak(None) is None
    assert device_peak("NVIDIA H100 80GB HBM3").tflops["fp16"] == 989.4  # dense: 1,979 with sparsity
    for peak in PEAKS:  # dense figures: tensor cores above plain FP32, never the sparse (doubled) ones
        assert all(v >= peak.tflops["fp32"] for v in peak.tflops.values()), peak.name


def test_roofline_figures() -> None:
    h200 = device_peak("NVIDIA H200")
    # 1e12 FLOPs and 1e10 bytes in 10 ms: 100 TFLOP/s and 1000 GB/s at 100 FLOPs per byte
    figures = roofline(1e12, 1e10, 10.0, h200, "bf16")
    assert figures.achieved_tflops == pytest.approx(100) and figures.achieved_gbps == pytest.approx(1000)
    assert figures.intensity == pytest.approx(100)
    assert figures.pct_peak_compute == pytest.approx(100 * 100 / 989.4)
    assert figures.pct_peak_bandwidth == pytest.approx(100 * 1000 / 4800)
    assert figures.bound == "memory"  # the ridge: 989.4e12 / 4.8e12 = 206 FLOPs per byte
    assert roofline(1e12, 1e9, 10.0, h200, "bf16").bound == "compute"  # 1000 FLOPs per byte
    cpu = roofline(1e12, 1e10, 10.0, None, "fp32")
    assert cpu.achieved_tflops == pytest.approx(100) and cpu.pct_peak_compute is None and cpu.bound is None
    assert roofline(1e12, 1e10, 10.0, device_peak("Tesla T4"), "bf16").pct_peak_compute is None


def test_layers_map_to_onnx_nodes() -> None:
    nodes = dict.fromkeys(["Conv_0", "Clip_3", "Add_133", "Conv_171", "Relu_172", "Conv_178", "stem.conv"])
    assert map_layer("stem.conv", nodes) == (["stem.conv"], "yes")
    assert map_layer("Conv_0 + PWN(Clip_3)", nodes) == (["Conv_0", "Clip_3"], "yes")
    assert map_layer("PWN(Add_133)", nodes) == (["Add_133"], "yes")
    assert map_layer("Conv_171 + Relu_172 || Conv_178 + Relu_179", nodes) == (
        ["Conv_171", "Relu_172", "Conv_178"], "partly")
    assert map_layer("Reformatting CopyNode for Input Tensor 0 to Conv_0 + PWN(Clip_3)", nodes)[1] == "partly"
    assert map_layer("triton_poi_fused_convolution_0", nodes) == ([], "no")


def test_cell_roofline_of_a_measured_cpu_cell(models_dir: Path, tmp_path: Path) -> None:
    from farm.cli import main
    from farm.dashboard.data import Snapshot
    from farm.dashboard.roofline import cell_roofline, layer_roofline
    from tests.conftest import write_sweep

    config = write_sweep(models_dir.parent, '[[models]]\nsource = "models/tiny.onnx"\n[axes]\nbatch_sizes = [2]\n')
    results = tmp_path / "results"
    assert main(["sweep", str(config), "--results", str(results), "--executor", "local"]) == 0
    snap = Snapshot(results)
    cell = snap.cell_frame.iloc[0]
    frame = cell_roofline(snap, [cell.cell_id]).iloc[0]
    flops = 2 * (2 * 4 * 64 * 27) + 2 * 4 * 64 + 2 * 4 * 64 + 2 * (2 * 5 * 4)  # tiny_cnn: 4 channels, 8x8, batch 2
    assert frame.flops == flops and frame.time_ms == pytest.approx(cell.compute_mean_ms)
    assert frame.achieved_tflops == pytest.approx(flops / (cell.compute_mean_ms / 1e3) / 1e12)
    assert pd.isna(frame.pct_peak_compute) and frame.bound is None and "no peak known" in frame.note
    layers = layer_roofline(snap, cell.cell_id, snap.cell_file(cell.cell_id, "layers"))
    mapped = layers.set_index("name")  # ONNX Runtime's optimizer fused conv+relu (r_nchwc) and added a reorder
    assert mapped.mapped.to_dict() == {"r_nchwc": "no", "ReorderOutput": "no", "pool": "yes", "flatten": "yes",
                                       "fc": "yes"}
    assert mapped.flops.to_dict()["fc"] == 2 * (2 * 5 * 4) and mapped.flops.to_dict()["pool"] == 2 * 4 * 64
    fc = mapped.loc["fc"]
    assert fc.achieved_tflops == pytest.approx(fc.flops / (fc.time_avg_ms / 1e3) / 1e12)


@pytest.mark.parametrize(("name", "shapes"), [
    ("resnet50", {"input": [8, 3, 224, 224]}),
    ("bert-base", {"input_ids": [8, 128], "token_type_ids": [8, 128], "attention_mask": [8, 128]}),
    ("resnet18", {"input": [2, 3, 224, 224]})])
def test_zoo_structure_counts_as_the_full_model(name: str, shapes: dict, tmp_path: Path) -> None:
    """The dashboard counts a zoo cell's FLOPs on the zoo's graph without weights when the cell's
    hash is the one recorded for the model: the recorded hash is the full build's, and the counts
    (every node's FLOPs, bytes and weights) are the full model's."""
    import hashlib

    from farm.dashboard.roofline import NoModel, load_model
    from farm.layers.flops import light_model
    from farm.models.zoo import ZOO, ZOO_SHA256, ZOO_VERSION, structure

    full = ZOO[name].build()
    sha256 = hashlib.sha256(full.SerializeToString()).hexdigest()
    assert ZOO_SHA256[(name, ZOO_VERSION)] == sha256  # a changed generator needs a new ZOO_VERSION and hash
    fast = structure(name)
    assert fast.ByteSize() < 200_000 < full.ByteSize()
    assert node_costs(fast, shapes) == node_costs(light_model(full), shapes)
    found = load_model(f"zoo:{name}", sha256, tmp_path / "no-cache", ())  # no zoo file cached: the fast path
    assert node_costs(found, shapes) == node_costs(full, shapes)
    with pytest.raises(NoModel, match="not the model this cell measured"):  # another hash is still refused
        load_model(f"zoo:{name}", "0" * 64, tmp_path / "no-cache", ())
