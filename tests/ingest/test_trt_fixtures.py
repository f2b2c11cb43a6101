"""Every figure of tests/fixtures/trt_seeds/README.md, from the recorded real TensorRT output."""

from __future__ import annotations

from pathlib import Path

from farm.ingest.sniff import detect_kind
from farm.trt_output import LayersFromLogText, LogFactsFromTrtexecLog, ProfileFromProfileJson, fill_weights, join_layers

SEEDS = Path(__file__).resolve().parents[1] / "fixtures" / "trt_seeds"  # real TensorRT output: its README


def text(name: str) -> str:
    return (SEEDS / name).read_text()


def test_fixture_kinds_are_recognised_by_content() -> None:
    assert detect_kind(text("fpn_int8.profile.json")) == "profile"
    assert detect_kind(text("centernet_int8.profile.json")) == "profile"
    for name in ("fpn_int8.build_verbose.log", "centernet_int8.layer_info.log", "mnist_trt80.trtexec_perf_summary.log",
                 "resnet50_trt86.build_verbose_excerpt.log", "resnet50_trt86.dump_profile_table.log"):
        assert detect_kind(text(name)) == "log", name
    assert detect_kind("hello world") is None


def test_fpn_profile() -> None:
    profile = ProfileFromProfileJson(text("fpn_int8.profile.json"))
    assert profile.count == 625 and len(profile.rows) == 113
    assert round(sum(r.average_ms for r in profile.rows), 6) == 4.871083
    assert round(sum(r.percentage for r in profile.rows), 3) == 100.0  # 100.00005 as printed
    slowest = max(profile.rows, key=lambda r: r.average_ms)
    assert slowest.name.startswith("Conv_171 + Relu_172 || Conv_178 + Relu_179 || ")
    assert round(slowest.percentage, 2) == 33.15


def fpn_layers():
    facts = LogFactsFromTrtexecLog(text("fpn_int8.build_verbose.log"))
    fill_weights(facts.layers, facts.conv_weight_shapes)
    return facts, {layer.name: layer for layer in facts.layers}


def test_fpn_conv0_memory() -> None:
    facts, layers = fpn_layers()
    assert len(facts.layers) == 48  # the log is cut after 48 layers
    assert facts.conv_weight_shapes["Conv_0"] == [32, 3, 3, 3]
    conv = layers["Conv_0 + PWN(Clip_3)"]
    assert (conv.input_bytes, conv.weight_bytes, conv.output_bytes) == (1_179_648, 864, 3_145_728)
    assert conv.total_bytes == 4_326_240
    assert conv.macs == 32 * 256 * 384 * 3 * 3 * 3


def test_fpn_add133_memory_and_join_through_pwn() -> None:
    _, layers = fpn_layers()
    add = layers["PWN(Add_133)"]
    assert [t.bytes for t in add.inputs] == [196_608, 196_608] and add.weight_bytes == 0
    assert add.output_bytes == 196_608 and add.total_bytes == 589_824
    profile = ProfileFromProfileJson(text("fpn_int8.profile.json"))
    facts = LogFactsFromTrtexecLog(text("fpn_int8.build_verbose.log"))
    matched, _, unmatched_layers = join_layers(facts.layers, [r.name for r in profile.rows])
    assert facts.layers[matched["Add_133"]].name == "PWN(Add_133)"
    assert not unmatched_layers  # every layer of the (cut) log has its profile row


def test_conv_without_logged_kernel_has_unknown_weights() -> None:
    _, layers = fpn_layers()
    assert layers["Conv_4 + PWN(Clip_7)"].weight_bytes is None  # its ONNX line was elided from the log


def test_centernet_layers_and_profile() -> None:
    layers = LayersFromLogText(text("centernet_int8.layer_info.log"))
    profile = ProfileFromProfileJson(text("centernet_int8.profile.json"))
    assert profile.count == 961 and len(layers) == 54 and len(profile.rows) == 54
    assert [layer.name for layer in layers] == [r.name for r in profile.rows]
    assert round(sum(r.average_ms for r in profile.rows), 6) == 2.595678
    slowest = max(profile.rows, key=lambda r: r.average_ms)
    assert slowest.name == "deconv_layers.8.weight + QuantizeLinear_593_quantize_scale_node + ConvTranspose_595"
    assert round(slowest.percentage, 2) == 15.28
    first = layers[0]
    assert first.inputs[0].raw_dims == "1,3,-17,-18" and first.inputs[0].dims is None  # dynamic, not a size
    assert first.input_bytes is None and first.output_bytes is None and first.total_bytes is None
    matched, missing, unmatched = join_layers(layers, [r.name for r in profile.rows])
    assert len(matched) == 54 and not missing and not unmatched


def test_mnist_performance_summary() -> None:
    facts = LogFactsFromTrtexecLog(text("mnist_trt80.trtexec_perf_summary.log"))
    assert facts.throughput_qps == 6430.89
    latency = facts.summary["latency"]
    assert (latency["mean"], latency["median"], latency["p99"]) == (0.160129, 0.159668, 0.165771)
    assert facts.summary["compute"]["mean"] == 0.15368
    assert facts.host_walltime_s == 3.00036
    assert facts.tensorrt_version == "8.0.3"


def test_resnet50_build_log() -> None:
    facts = LogFactsFromTrtexecLog(text("resnet50_trt86.build_verbose_excerpt.log"))
    assert facts.device == {"name": "NVIDIA GeForce RTX 3060 Laptop GPU", "compute_capability": "8.6", "sm_count": 30,
                            "memory_bytes": 6143 * 2**20, "memory_bus_width_bits": 192,
                            "clock_graphics_mhz": 1702, "clock_memory_mhz": 7001}
    assert (facts.layers_after_parsing, facts.layers_after_fusion, facts.layers_after_reformat) == (126, 57, 82)
    assert (facts.host_persistent_bytes, facts.device_persistent_bytes, facts.scratch_bytes) == (331_696, 22_016, 4_608)
    assert facts.builder_peak_device_bytes == 107 * 2**20 and facts.builder_peak_host_bytes == 18 * 2**20
    assert facts.build_s == 15.3167
    assert facts.throughput_qps == 502.107
    latency = facts.summary["latency"]
    assert (latency["p90"], latency["p95"], latency["p99"]) == (1.9592, 1.98364, 2.34845)
    assert facts.layer_memory["Gemm_121"] == {"host_persistent_bytes": 6944, "device_persistent_bytes": 0,
                                              "scratch_bytes": 0}
    assert facts.options["build.Precision"] == "FP32" and facts.options["inference.Duration"] == "3s (+ 200ms warm up)"
    # the 8.6 layer-line format: `name (Float[1,3:4,224,224])`, vectorized channels read as logical sizes
    conv = next(layer for layer in facts.layers if layer.name == "Conv_0 + Relu_1")
    assert conv.inputs[0].dims == [1, 3, 224, 224] and conv.inputs[0].raw_dims == "1,3:4,224,224"
    assert conv.outputs[0].name == "onnx::MaxPool_323" and conv.outputs[0].dims == [1, 64, 112, 112]
    assert facts.conv_weight_shapes["Conv_0"] == [64, 3, 7, 7]


def test_resnet50_dump_profile_table() -> None:
    facts = LogFactsFromTrtexecLog(text("resnet50_trt86.dump_profile_table.log"))  # its first line lost its '['
    assert facts.profile.count == 32
    assert [(r.name, r.total_ms, r.average_ms, r.median_ms, r.percentage) for r in facts.profile.rows] == [
        ("Reformatting CopyNode for Input Tensor 0 to Conv_0 + Relu_1", 18.53, 0.5790, 0.5765, 0.6),
        ("Conv_0 + Relu_1", 116.65, 3.6453, 3.6336, 3.6),
        ("MaxPool_2", 51.21, 1.6004, 1.6005, 1.6),
    ]
