"""The trtexec backend: its command lines for 10.x and 11.x, and what it reads back."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest

from farm.config import load_config
from farm.plan import plan_sweep
from farm.worker import run_cell
from tests.conftest import tiny_cnn, write_sweep
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
    assert "--separateProfileRun" in args and "--profilingVerbosity=detailed" in args
    assert not any(a in args for a in ("--noDataTransfers", "--useCudaGraph", "--includeDataTransfers"))
    assert any(a.startswith("--timingCacheFile=") and "trt10.1.0" in a for a in args)
    m = result.measurement
    assert m["queries"] == 40 and m["h2d_mean_ms"] == pytest.approx(0.07) and m["compute_median_ms"] == pytest.approx(1.82)
    assert len(result.samples) == 40
    assert result.build.build_s == 15.3167 and result.build.layers_after_fusion == 57
    assert result.build.artifact_bytes == 1234
    assert len(result.layers) == 54 and round(sum(layer.time_avg_ms for layer in result.layers), 6) == 2.595678
    assert result.device["name"] == "NVIDIA GeForce RTX 3060 Laptop GPU"


def test_trtexec_11_aligns_defaults(fake_trtexec, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("FAKE_TRTEXEC_VERSION", "110100")
    result = run_cell(trtexec_cell(tmp_path, "cuda_graph = false\ntransfers = true"), tmp_path / "cache")
    assert result.status == "ok", result.traceback
    (args,) = fake_trtexec()
    # 11.x turned copies off and CUDA graphs and spin wait on: farm asks for what the options say
    assert {"--includeDataTransfers", "--noCudaGraph", "--noSpinWait"} <= set(args)
    assert "--stronglyTyped" not in args and "--separateProfileRun" not in args


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
