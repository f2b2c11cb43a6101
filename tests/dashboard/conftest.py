"""A small real warehouse for the dashboard tests: a tiny CNN on ONNX Runtime at three
precisions and three batch sizes, one model that fails to build, and an unsupported precision."""

from __future__ import annotations

from pathlib import Path

import pytest

from farm.cli import main
from tests.conftest import tiny_cnn, unsupported_op_model, write_sweep
from tests.ingest.test_trt_fixtures import SEEDS

SWEEP = """
name = "dash"
description = "dashboard test sweep"
[[models]]
source = "models/tiny.onnx"
[[models]]
source = "models/bad.onnx"
[axes]
precisions = ["fp32", "fp16", "bf16"]
batch_sizes = [1, 2, 4]
"""


@pytest.fixture(scope="session")
def warehouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """results/ with sweep 'dash' (tiny ok at fp32/fp16: 6 cells; bad failed: 6; bf16 unsupported:
    6) and sweep 'trt' (two ingested TensorRT engines)."""
    base = tmp_path_factory.mktemp("dashboard")
    models = base / "models"
    models.mkdir()
    tiny_cnn(models / "tiny.onnx", channels=8, spatial=16)
    unsupported_op_model(models / "bad.onnx")
    config = write_sweep(base, SWEEP)
    results = base / "results"
    assert main(["sweep", str(config), "--results", str(results), "--executor", "local"]) == 1  # bad fails
    # Real TensorRT output, ingested: a per-layer profile with engine layers (fpn), a trtexec
    # summary with no layers (mnist).
    fpn = [str(SEEDS / "fpn_int8.profile.json"), str(SEEDS / "fpn_int8.build_verbose.log")]
    assert main(["ingest", *fpn, "--sweep", "trt", "--results", str(results)]) == 0
    mnist = str(SEEDS / "mnist_trt80.trtexec_perf_summary.log")
    assert main(["ingest", mnist, "--sweep", "trt", "--results", str(results)]) == 0
    return results
