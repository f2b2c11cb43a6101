"""The engine explorer's per-layer memory rule, on the figures of the recorded TensorRT output."""

from __future__ import annotations

from farm.layers.memory import conv_macs, element_bytes, matmul_macs, tensor_bytes, total_bytes


def test_fpn_conv0_figures() -> None:
    # Conv_0 + PWN(Clip_3) of fpn_int8 (tests/fixtures/trt_seeds/README.md)
    input_bytes = tensor_bytes([1, 3, 512, 768], "Int8")
    weight_bytes = tensor_bytes([32, 3, 3, 3], "Int8")  # K*C*R*S / G, groups 1
    output_bytes = tensor_bytes([1, 32, 256, 384], "Int8")
    assert (input_bytes, weight_bytes, output_bytes) == (1_179_648, 864, 3_145_728)
    assert total_bytes([input_bytes, weight_bytes, output_bytes]) == 4_326_240


def test_fpn_add133_figures() -> None:
    one = tensor_bytes([1, 128, 32, 48], "Int8")
    assert one == 196_608
    assert total_bytes([one + one, 0, one]) == 589_824


def test_dynamic_dimensions_are_unknown_not_sizes() -> None:
    assert tensor_bytes([1, 3, -17, -18], "Int8") is None
    assert total_bytes([10, None, 5]) is None
    assert conv_macs([1, 8, -1, 4], [8, 3, 3, 3]) is None


def test_type_names_from_every_source() -> None:
    assert element_bytes("float") == 4 and element_bytes("Half") == 2 and element_bytes("Int8 NC/32HW32") == 1
    assert element_bytes("bfloat16") == 2 and element_bytes("int64") == 8 and element_bytes("mystery") is None
    assert tensor_bytes([2, 3], "mystery") is None


def test_macs() -> None:
    assert conv_macs([1, 64, 112, 112], [64, 3, 7, 7]) == 64 * 112 * 112 * 3 * 7 * 7
    assert matmul_macs([1, 1000], 2048) == 2_048_000
