"""Shared fixtures: tiny ONNX models made here, and sweep files written on the fly."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import numpy as np
import pytest

from farm.executor.ray_farm import use_loopback_only

# tests that keep a thread on one CPU and check which one it chose
needs_two_cpus = pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
                                    reason="keeping a thread on one CPU needs Linux and two CPUs to choose from")

use_loopback_only()  # before any test imports Ray: every Ray the tests start listens on 127.0.0.1
# pytest-xdist's workers run with COLUMNS=80, which farm takes as a pipe's width (its tables then
# drop columns): the tests see what a pipe without it gets, wherever they run
os.environ.pop("COLUMNS", None)

FAST_MEASUREMENT = """
[measurement]
warmup_ms = 5
min_iterations = 5
min_duration_ms = 30
repeats = 2
layer_iterations = 3
"""


def tiny_cnn(path: Path, channels: int = 4, batch: int | str = "batch", spatial: int = 8) -> Path:
    """Conv -> Relu -> GlobalAveragePool -> Flatten -> Gemm, dynamic batch unless `batch` is an int."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    init = [
        numpy_helper.from_array(rng.standard_normal((channels, 3, 3, 3)).astype(np.float32), "conv.w"),
        numpy_helper.from_array(rng.standard_normal(channels).astype(np.float32), "conv.b"),
        numpy_helper.from_array(rng.standard_normal((5, channels)).astype(np.float32), "fc.w"),
        numpy_helper.from_array(rng.standard_normal(5).astype(np.float32), "fc.b"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "conv.w", "conv.b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("GlobalAveragePool", ["r"], ["p"], name="pool"),
        helper.make_node("Flatten", ["p"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "fc.w", "fc.b"], ["y"], name="fc", transB=1),
    ]
    graph = helper.make_graph(
        nodes, "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, spatial, spatial])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 5])], init)
    return saved_model(graph, path)


def unsupported_op_model(path: Path) -> Path:
    """A valid ONNX file whose operator no runtime knows: building it fails."""
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("NoSuchOperator", ["x"], ["y"], name="mystery", domain="farm.test")], "bad",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("farm.test", 1)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


@pytest.fixture
def models_dir(tmp_path: Path) -> Path:
    d = tmp_path / "models"
    d.mkdir()
    tiny_cnn(d / "tiny.onnx")
    return d


def write_sweep(directory: Path, body: str, name: str = "sweep.toml", fast: bool = True) -> Path:
    """Write a sweep file; `fast` appends quick measurement settings unless the body has its own."""
    text = textwrap.dedent(body)
    if fast and "[measurement]" not in text:
        text += FAST_MEASUREMENT
    path = directory / name
    path.write_text(text)
    return path


def warehouse_without_telemetry(target: Path) -> Path:
    """examples/results' gpu-resnet50 sweep as a farm from before GPU telemetry wrote it: a copy
    under `target` whose measurements lack the telemetry columns. Skips where the checkout has
    no examples."""
    import shutil

    import pyarrow.parquet as pq

    from farm.telemetry import COLUMNS

    source = Path(__file__).resolve().parents[1] / "examples" / "results" / "gpu-resnet50"
    if not any(source.glob("measurements/*.parquet")):
        pytest.skip("examples/results has no per-cell gpu-resnet50 measurements in this checkout")
    shutil.copytree(source, target / "gpu-resnet50")
    for path in (target / "gpu-resnet50" / "measurements").glob("*.parquet"):
        table = pq.read_table(path)
        pq.write_table(table.drop_columns([c for c in COLUMNS if c in table.column_names]), path)
    return target


def plain_cell(cell_id: str, model: str = "m", backend: str = "onnxruntime", options: dict | None = None,
               batch: int = 1, precision: str = "fp32"):
    """A planned cell with nothing behind it (no model file): for what only reads its names."""
    from farm.records import Cell, MeasurementSettings, ModelArtifact

    artifact = ModelArtifact(model, "", Path(f"{model}.onnx"), "", 0, (), {})
    return Cell(cell_id, "s", artifact, precision, batch, None, backend, options or {}, MeasurementSettings(), {})


def tiny_sweep_text(name: str, batch_sizes: tuple[int, ...] = (1, 2), precisions: tuple[str, ...] | None = None,
                    source: str = "models/tiny.onnx", measurement: dict | None = None) -> str:
    """A sweep file of one model (the tiny CNN by default) on the default backends: its name, its
    axes and, where given, its [measurement] table (else write_sweep's quick settings)."""
    import json

    lines = [f'name = "{name}"', "[[models]]", f'source = "{source}"', "[axes]"]
    if precisions:
        lines.append(f"precisions = {json.dumps(list(precisions))}")
    lines.append(f"batch_sizes = {json.dumps(list(batch_sizes))}")
    if measurement:
        lines += ["[measurement]", *(f"{key} = {json.dumps(value)}" for key, value in measurement.items())]
    return "\n".join(lines) + "\n"


def swept_tiny(base: Path, sweep: str, **cnn) -> Path:
    """`base`/models/tiny.onnx (tiny_cnn with `cnn`), `base`/sweep.toml of `sweep`, and the results
    of sweeping it on the local executor, in `base`/results (returned)."""
    from farm.cli import main

    (base / "models").mkdir(exist_ok=True)
    tiny_cnn(base / "models" / "tiny.onnx", **cnn)
    config = write_sweep(base, sweep)
    assert main(["sweep", str(config), "--results", str(base / "results"), "--executor", "local"]) == 0
    return base / "results"


def saved_model(graph, path: Path, opset: int = 17) -> Path:
    """`graph` as a checked ONNX model (IR 8, which every ONNX Runtime here reads) saved at `path`."""
    import onnx
    from onnx import helper

    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return path


def stored_timing(results: Path, cell, result) -> tuple:
    """`result` written as `cell` into the warehouse at `results`, and the timing definition its
    measurements row holds: (transfers, CUDA graph, spin wait, streams, engine version)."""
    from farm.warehouse import Warehouse
    from farm.warehouse.rows import write_cell_result

    warehouse = Warehouse(results)
    write_cell_result(warehouse, cell, result, "run", "")
    return warehouse.connect().execute(
        "SELECT latency_includes_transfers, timing_cuda_graph, timing_spin_wait, timing_streams, "
        "timing_engine_version FROM measurements").fetchone()
