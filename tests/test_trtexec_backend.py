"""The trtexec backend: its command lines for 10.x and 11.x, and what it reads back."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest

from farm.cell_runner import run_cell
from farm.config import load_config
from farm.plan import plan_sweep
from tests.conftest import stored_timing, tiny_cnn, write_sweep
from tests.ingest.test_trt_fixtures import SEEDS

HERE = Path(__file__).resolve().parent


@pytest.fixture
def fake_trtexec(tmp_path: Path, monkeypatch):
    binary = tmp_path / "bin" / "trtexec"
    binary.parent.mkdir()
    binary.write_text(f"#!/bin/sh\nexec {sys.executable} {HERE / 'doubles' / 'fake_trtexec.py'} \"$@\"\n")
    binary.chmod(binary.stat().st_mode | stat.S_IEXEC)
    args = tmp_path / "args.jsonl"
    monkeypatch.setenv("PATH", f"{binary.parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_TRTEXEC_SEEDS", str(SEEDS))
    monkeypatch.setenv("FAKE_TRTEXEC_ARGS", str(args))

    def calls() -> list[list[str]]:
        return [json.loads(line) for line in args.read_text().splitlines()]

    return calls


def trtexec_cell(tmp_path: Path, options: str = "", precision: str = "fp32"):
    tiny_cnn(tmp_path / "tiny.onnx")
    body = (f'[[models]]\nsource = "tiny.onnx"\n[axes]\nprecisions = ["{precision}"]\nbatch_sizes = [2]\n'
            f'backends = ["trtexec"]\n[profiles.p]\nbatch = "1-2-8"\n[backends.trtexec]\n{options}\n')
    return plan_sweep(load_config(write_sweep(tmp_path, body)), tmp_path / "cache").cells[0]


def test_trtexec_10(fake_trtexec, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("FAKE_TRTEXEC_VERSION", "100100")
    result = run_cell(trtexec_cell(tmp_path), tmp_path / "cache")
    assert result.status == "ok", result.traceback
    (args,) = fake_trtexec()
    assert "--minShapes=x:1x3x8x8" in args and "--optShapes=x:2x3x8x8" in args and "--maxShapes=x:8x3x8x8" in args
    assert "--shapes=x:2x3x8x8" in args and "--noTF32" in args and "--stronglyTyped" in args
    assert "--separateProfileRun" in args and "--profilingVerbosity=detailed" in args and "--infStreams=1" in args
    assert not any(a in args for a in ("--noDataTransfers", "--useCudaGraph", "--includeDataTransfers"))
    assert any(a.startswith("--timingCacheFile=") and "trt10.1.0" in a for a in args)
    m = result.measurement
    assert m["queries"] == 40 and m["h2d_mean_ms"] == pytest.approx(0.07) and m["compute_median_ms"] == pytest.approx(1.82)
    assert len(result.samples) == 40
    assert result.build.build_s == 15.3167 and result.build.layers_after_fusion == 57
    assert result.build.artifact_bytes == 1234
    assert len(result.layers) == 54 and round(sum(layer.time_avg_ms for layer in result.layers), 6) == 2.595678
    assert result.device["name"] == "NVIDIA GeForce RTX 3060 Laptop GPU"
    # the timing definition: the replayed log prints "Inference Streams: 1" (and, an excerpt, no more
    # of its inference options): the rest is what the command line asked of 10.x
    assert (m["latency_includes_transfers"], m["timing_cuda_graph"], m["timing_spin_wait"], m["timing_streams"]) == \
        (True, False, False, 1)
    assert m["timing_engine_version"].startswith("TensorRT ")


def test_trtexec_11_aligns_defaults(fake_trtexec, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("FAKE_TRTEXEC_VERSION", "110100")
    result = run_cell(trtexec_cell(tmp_path, "cuda_graph = false\ntransfers = true"), tmp_path / "cache")
    assert result.status == "ok", result.traceback
    (args,) = fake_trtexec()
    # 11.x turned copies off and CUDA graphs and spin wait on: farm asks for what the options say
    assert {"--includeDataTransfers", "--noCudaGraph", "--noSpinWait", "--infStreams=1",
            "--separateProfileRun"} <= set(args)
    assert "--stronglyTyped" not in args
    m = result.measurement
    assert (m["latency_includes_transfers"], m["timing_cuda_graph"], m["timing_spin_wait"], m["timing_streams"]) == \
        (True, False, False, 1)


def test_trtexec_measurements_rows_carry_the_timing_definition(fake_trtexec, tmp_path: Path, monkeypatch) -> None:

    monkeypatch.setenv("FAKE_TRTEXEC_VERSION", "110100")
    cell = trtexec_cell(tmp_path, "cuda_graph = true\ntransfers = false\nspin_wait = true")
    result = run_cell(cell, tmp_path / "cache")
    assert result.status == "ok", result.traceback
    row = stored_timing(tmp_path / "results", cell, result)
    assert row[:4] == (False, True, True, 1) and row[4].startswith("TensorRT ")


# The flags of each version, as docs/tensorrt-reference.md section 7 lists them.
FLAGS_10 = {"--noDataTransfers", "--useCudaGraph", "--useSpinWait", "--separateProfileRun", "--infStreams"}
FLAGS_11 = {"--includeDataTransfers", "--noCudaGraph", "--noSpinWait", "--infStreams",
            "--noDataTransfers", "--useSpinWait", "--useCudaGraph", "--separateProfileRun"}  # the last four: no-ops
KEY_FLAGS = {"transfers": {"--noDataTransfers", "--includeDataTransfers"},
             "cuda_graph": {"--useCudaGraph", "--noCudaGraph"}, "spin_wait": {"--useSpinWait", "--noSpinWait"}}
OPTION_SETS = [dict(transfers=t, cuda_graph=g, spin_wait=w, streams=n)
               for t in (True, False) for g in (True, False) for w in (True, False) for n in (1, 3)]


@pytest.mark.parametrize("options", OPTION_SETS, ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()))
def test_10_and_11_command_lines_carry_the_same_timing_definition(options: dict) -> None:
    from farm.backends.trtexec import TrtexecOptions, timing_flags
    from farm.trt_output import TIMING_DEFAULTS, TimingFromTrtexecCommand

    opts = TrtexecOptions(**options)
    flags = {major: timing_flags(major, opts) for major in (10, 11)}
    assert all(f.split("=")[0] in FLAGS_10 for f in flags[10]) and all(f.split("=")[0] in FLAGS_11 for f in flags[11])
    # the same explicit flag on both wherever 10.x has one; where it has none, the value is 10.x's default
    for key, named in KEY_FLAGS.items():
        on_10, on_11 = named & set(flags[10]), named & set(flags[11])
        assert len(on_11) == 1 and len(on_10) <= 1  # 11.x always says it; 10.x where it has a flag for it
        if on_10:
            assert on_10 == on_11
        else:
            assert options[key] == TIMING_DEFAULTS[10][key]
    assert f"--infStreams={options['streams']}" in flags[10] and f"--infStreams={options['streams']}" in flags[11]
    # and each version, applying its own defaults, measures what the options say
    expected = {"latency_includes_transfers": options["transfers"], "timing_cuda_graph": options["cuda_graph"],
                "timing_spin_wait": options["spin_wait"], "timing_streams": options["streams"]}
    assert TimingFromTrtexecCommand(flags[10], 10) == expected == TimingFromTrtexecCommand(flags[11], 11)
    # what the defaults alone would have measured differs between the versions: the flags are needed
    assert TimingFromTrtexecCommand([], 10) != TimingFromTrtexecCommand([], 11)


def test_11_no_op_flags_in_extra_args_change_nothing() -> None:
    from farm.trt_output import TimingFromTrtexecCommand

    assert TimingFromTrtexecCommand(["--includeDataTransfers", "--noDataTransfers"], 11)["latency_includes_transfers"]
    assert not TimingFromTrtexecCommand(["--noDataTransfers"], 10)["latency_includes_transfers"]


def test_cross_definition_comparisons_are_flagged() -> None:
    import pandas as pd

    from farm.dashboard.data import with_speedup

    def cell(cell_id, series, transfers, graph, median):
        return dict(cell_id=cell_id, series=series, model="m", batch=1, status="ok", throughput_qps=1000 / median,
                    latency_median_ms=median, median_ci_low_ms=median * 0.99, median_ci_high_ms=median * 1.01,
                    latency_includes_transfers=transfers, timing_cuda_graph=graph, timing_spin_wait=False,
                    timing_streams=1)

    frame = pd.DataFrame([cell("base", "trtexec 10", True, False, 2.0), cell("same", "other", True, False, 1.0),
                          cell("gpu", "trtexec 11", False, True, 1.0), cell("old", "old", None, None, 1.0)])
    out = with_speedup(frame, "trtexec 10").set_index("cell_id")
    assert out.loc["base", "timing_differs"] is None and out.loc["same", "timing_differs"] is None
    assert out.loc["gpu", "timing_differs"] == "different timing: transfers not included vs included; CUDA graph on vs off"
    assert out.loc["gpu", "vs_baseline"] == "faster"  # the verdict stands; the flag sits beside it
    assert out.loc["old", "timing_differs"] == "different timing: transfers unknown vs included; CUDA graph unknown vs off"


def test_trtexec_failure_is_a_failed_cell(fake_trtexec, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("FAKE_TRTEXEC_EXIT", "1")
    result = run_cell(trtexec_cell(tmp_path), tmp_path / "cache")
    assert result.status == "failed" and result.reason.startswith("RuntimeError: trtexec exited with 1")


def test_no_trtexec_is_skipped(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    result = run_cell(trtexec_cell(tmp_path), tmp_path / "cache")
    assert result.status == "skipped" and "no `trtexec` on PATH" in result.reason


def test_profiles_put_the_batch_range_on_the_batch_axis_wherever_it_is(fake_trtexec, tmp_path: Path,
                                                                      monkeypatch) -> None:
    """An LSTM state [2, B, 128]: the profile's batch range goes on axis 1, axis 0 stays 2."""
    from tests.test_inputs import HIDDEN, lstm_model

    monkeypatch.setenv("FAKE_TRTEXEC_VERSION", "100100")
    lstm_model(tmp_path / "lstm.onnx")
    body = ('[[models]]\nsource = "lstm.onnx"\n[axes]\nbatch_sizes = [2]\nbackends = ["trtexec"]\n'
            '[profiles.p]\nbatch = "1-2-8"\n')
    (cell,) = plan_sweep(load_config(write_sweep(tmp_path, body)), tmp_path / "cache").cells
    run_cell(cell, tmp_path / "cache")
    (args,) = fake_trtexec()
    assert f"--minShapes=x:1x16,state:2x1x{HIDDEN}" in args and f"--maxShapes=x:8x16,state:2x8x{HIDDEN}" in args
    assert f"--shapes=x:2x16,state:2x2x{HIDDEN}" in args


def test_trtexec_11_with_precision_flags_is_unsupported_not_failed() -> None:
    """11.0 removed --fp16 and --bf16 (trtexec's option strings of 10.16.1 against 11.0): a cell that
    asks for them on 11 is what the engine cannot do, said with what to do."""
    from farm.backends.trtexec import TrtexecOptions, precision_flags
    from farm.errors import EngineUnsupported

    with pytest.raises(EngineUnsupported, match="removed --fp16 and --bf16"):
        precision_flags(11, TrtexecOptions(precision_flags=True), "fp16")
    assert precision_flags(11, TrtexecOptions(), "fp16") == [] and precision_flags(10, TrtexecOptions(), "fp16") == [
        "--stronglyTyped"]
