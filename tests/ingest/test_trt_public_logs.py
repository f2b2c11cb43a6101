"""Real TensorRT logs from a public repository (tests/fixtures/trt_public, sources in its README):
the kinds farm misread before. A verbose 8.x build's layer counts before and after fusion; a
10.16 run whose batch is stated only by its input binding line; a 10.16 build of several builder
passes whose engine is not the last pass's; a log of several builds."""

from __future__ import annotations

from pathlib import Path

import pytest

from farm.trt_output import LogFactsFromTrtexecLog
from tests.ingest.test_trt_versions import ingest, measurement

PUBLIC = Path(__file__).resolve().parents[1] / "fixtures" / "trt_public"


def facts(name: str):
    return LogFactsFromTrtexecLog((PUBLIC / name).read_text())


@pytest.mark.parametrize(("name", "counts", "memory", "build_s"), [
    # "Original: 26 layers" is the parsed network; fusion ends at 10; reformat layers make 12. The
    # "Local timing cache in use" line after fusion is no new builder pass (farm took 12 and none)
    ("trt8.2.3_trtexec_verbose_layercounts.log", (26, 10, 12), (3712, 214528, 4096), 4.31827),
    ("trt8.4.1_trtexec_verbose_layercounts.log", (24, 10, 12), (5120, 6656, 0), 1.7773),
])
def test_8x_verbose_layer_counts_through_fusion(name: str, counts, memory, build_s) -> None:
    log = facts(name)
    assert (log.layers_after_parsing, log.layers_after_fusion, log.layers_after_reformat) == counts
    assert (log.host_persistent_bytes, log.device_persistent_bytes, log.scratch_bytes) == memory
    assert log.build_s == build_s and log.build_passes == 1


def test_the_engine_of_several_builder_passes_is_the_one_the_builder_kept() -> None:
    """--builderOptimizationLevel=5: passes with backend strategies 4, 3 and 2; the builder kept 3's
    (the second) and skipped 2's. farm took the last pass's memory (21,136 B), its 0.43 s as the
    build time, and matched none of the engine's ForeignNode layers to its memory lines."""
    log = facts("trt10.16.1_trtexec_verbose_multipass_backend_strategies.log")
    assert log.build_passes == 3
    assert (log.layers_after_parsing, log.layers_after_fusion, log.layers_after_reformat) == (24, 5, 6)
    assert (log.host_persistent_bytes, log.device_persistent_bytes, log.scratch_bytes) == (8496, 0, 133120)
    assert log.build_s == 24.4854  # trtexec's "Engine built in": all three passes
    with_memory = [layer.name for layer in log.layers if layer.name in log.layer_memory]
    assert len(with_memory) == 5 and "{ForeignNode[node_conv2d...node_relu]}" in with_memory
    assert log.layer_memory["{ForeignNode[gemm2.bias + ONNXTRT_Broadcast_4...ONNXTRT_castHelper_9]}"] == {
        "host_persistent_bytes": 80, "device_persistent_bytes": 0, "scratch_bytes": 133120}


def test_a_log_of_several_builds_gives_the_last_builds_figures() -> None:
    """TensorRT's Python logger, three builds of one network (two profiles each): the last build's
    figures, its own time, not the three builds' sum."""
    log = facts("trt10.16.2_python_builder_verbose_3builds_2profiles.log")
    assert (log.layers_after_parsing, log.layers_after_fusion, log.layers_after_reformat) == (24, 5, 8)
    assert (log.host_persistent_bytes, log.scratch_bytes, log.build_s, log.build_passes) == (21136, 935424, 12.2193, 1)


def test_a_default_10x_run_states_its_batch_in_its_input_binding(tmp_path: Path) -> None:
    """No --shapes and no layer information: "Input binding for x with dimensions 1x1x28x28 and type
    fp32 is created." is the batch, so samples/s is stated (farm left batch and samples/s empty)."""
    log = facts("trt10.16.1_trtexec_default_model-trained.log")
    assert log.input_shapes == {"x": [1, 1, 28, 28]} and log.throughput_qps == 15374.3 and log.build_s == 8.09138
    code, results = ingest(tmp_path, PUBLIC / "trt10.16.1_trtexec_default_model-trained.log")
    [row] = measurement(results)
    assert code == 0 and row["batch"] == 1
    assert row["throughput_qps"] == pytest.approx(15374.3) and row["throughput_samples_per_s"] == pytest.approx(15374.3)
