"""A small real warehouse for the dashboard tests: a tiny CNN on ONNX Runtime at three
precisions and three batch sizes, one model that fails to build, and an unsupported precision;
`farm dashboard` servers that end with the test; Streamlit's caches released at the end."""

from __future__ import annotations

import http.client
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from farm.cli import main
from tests.conftest import tiny_cnn, unsupported_op_model, write_sweep
from tests.ingest.test_trt_fixtures import SEEDS

ROOT = Path(__file__).resolve().parents[2]

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


@pytest.fixture(scope="session", autouse=True)
def release_streamlit_caches():
    """AppTest runs the pages in this process, and st.cache_resource keeps every warehouse Snapshot
    it loaded (each with an open DuckDB connection) for the life of the process. They are released
    here, at the end of the session: left to interpreter shutdown, DuckDB's nanobind bindings can
    be torn down before them (whether they are depends on what else was imported: torch, for one)
    and print some 40 `nanobind: leaked ...` lines under pytest's summary."""
    yield
    if "streamlit" in sys.modules:
        import streamlit as st

        st.cache_resource.clear()
        st.cache_data.clear()


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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Dashboard:
    """`farm dashboard` in a child process, on a free loopback port; `stop()` ends it (the
    `dashboard` fixture stops every one it started, whatever the test did)."""

    def __init__(self, results: Path, hangup: signal.Handlers = signal.SIG_DFL) -> None:
        self.results = results
        # SIGHUP's disposition as the server inherits it: default (started from a terminal),
        # whatever the test run itself inherited (CI under nohup ignores it), or SIG_IGN (nohup)
        self.hangup = hangup
        self.process: subprocess.Popen | None = None
        self.port = 0
        self.log = results.parent / "dashboard.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, attempts: int = 5) -> Dashboard:
        """Start it and wait until it serves. A port another process took between free_port() and
        the server's bind is tried again with another one."""
        for _ in range(attempts):
            self.port = free_port()
            self.log = self.results.parent / f"dashboard-{self.port}.log"
            with self.log.open("w") as log:
                self.process = subprocess.Popen(
                    [sys.executable, "-m", "farm", "dashboard", "--results", str(self.results), "--port",
                     str(self.port)], env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=log,
                    stderr=subprocess.STDOUT, preexec_fn=lambda: signal.signal(signal.SIGHUP, self.hangup))
            if self._wait_until_it_serves():
                return self
            if "is not available" not in self.log.read_text():
                break
        self.stop()
        raise RuntimeError(f"farm dashboard did not serve: {self.log.read_text()[-2000:]}")

    def _wait_until_it_serves(self, timeout_s: float = 180) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                return False
            try:
                with urllib.request.urlopen(f"{self.url}/_stcore/health", timeout=5) as response:
                    if response.read() == b"ok":
                        return True
            except (OSError, http.client.HTTPException):  # not up yet, or another program answered on the port
                time.sleep(0.3)
        return False

    def stop(self) -> int | None:
        """SIGTERM, and SIGKILL if it has not ended a minute later; returns its exit status."""
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode


@pytest.fixture
def dashboard():
    """dashboard(results) starts `farm dashboard` on `results` and returns its Dashboard; every
    one started is stopped when the test ends."""
    started: list[Dashboard] = []

    def start(results: Path, **options) -> Dashboard:
        server = Dashboard(results, **options)
        started.append(server)
        return server.start()

    yield start
    for server in started:
        server.stop()
