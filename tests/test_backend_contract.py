"""The contract every backend in the registry passes (after Polygraphy's base-runner tests):
declarations that agree with each other, public methods that check state, and one cell's life
(build, measure, outputs, layers, close) on a tiny model. ONNX Runtime and PyTorch run for real on
the CPU; TensorRT and trtexec run through their doubles in tests/doubles (documented API only).

A new backend gets this test by its one line in farm.backends.registry.BACKENDS; `LIVE` below
says how to run it here.
"""

from __future__ import annotations

import sys
import types
from pathlib import Path

import numpy as np
import pytest

from farm.backends.base import PRECISION_ORDER, Backend, BackendOptions, Capabilities
from farm.backends.registry import BACKENDS, backend_class, layer_kind
from farm.cell_runner import build_request
from farm.config import load_config
from farm.layers.coverage import KINDS
from farm.models import make_feeds
from farm.plan import plan_sweep
from farm.records import ENGINE_LAYER, GRAPH_OP, BuildStats, LayerRecord, Samples
from tests.conftest import tiny_cnn, write_sweep

NAMES = list(BACKENDS)
# Options that make each backend runnable here (torch on the CPU; the doubles need nothing more).
LIVE = {"onnxruntime": {}, "torch": {"device": "cpu"}, "tensorrt": {}, "trtexec": {}}
DOUBLED = ("tensorrt", "trtexec")  # run through tests/doubles (never beside a real torch import's checks)
FAST = "[measurement]\nwarmup_ms = 0\nmin_iterations = 3\nmin_duration_ms = 0\nrepeats = 1\nlayer_iterations = 2\n"


def test_every_registered_backend_is_covered_here() -> None:
    assert set(LIVE) == set(BACKENDS), "add the new backend's runnable options to LIVE"


@pytest.mark.parametrize("name", NAMES)
def test_declarations_agree(name: str) -> None:
    cls = backend_class(name)
    assert issubclass(cls, Backend) and cls.name == name
    assert issubclass(cls.Options, BackendOptions) and isinstance(cls.capabilities, Capabilities)
    assert cls.capabilities.precisions <= set(PRECISION_ORDER)
    defaults = cls.Options().model_dump(mode="json")
    for precision in PRECISION_ORDER:  # what it declares it runs is what it does not refuse
        refused = cls.unsupported_reason(precision, defaults)
        assert (refused is None) == (precision in cls.capabilities.precisions), (precision, refused)
        assert refused is None or name in refused or "TensorRT" in refused  # the reason says who refuses
    assert cls.device_kind(defaults) in ("cpu", "cuda")
    assert (cls.profile_note() is None) == cls.capabilities.profiles
    # what the rest of farm knows of it is declared on the class: provenance, row kinds, the prior
    assert all(isinstance(lib, str) and lib for lib in cls.libraries)
    assert cls.layer_kind in KINDS
    assert 1.0 <= cls.build_cost(defaults) < 100


def test_what_farm_knows_of_each_backend_is_the_backends_own() -> None:
    """The scheduler's prior, provenance's libraries and the row kinds come from the backend
    classes (no table elsewhere names backends): a compile or an engine build is expected to take
    longer than an eager run, and each engine's library is among the versions a cell records."""
    from farm.backends.registry import engine_libraries
    from farm.provenance import library_versions

    torch_cls, trt = backend_class("torch"), backend_class("tensorrt")
    assert torch_cls.build_cost({"mode": "compile"}) > torch_cls.build_cost({"mode": "eager"}) == 1.0
    assert trt.build_cost({}) > 1.0 and trt.layer_kind == ENGINE_LAYER
    assert backend_class("onnxruntime").build_cost({"provider": "tensorrt"}) > 1.0
    versions = library_versions(engine_libraries())
    assert {"onnxruntime", "torch"} <= set(versions)  # installed here, and named by their backends only
    assert layer_kind("tensorrt") == ENGINE_LAYER and layer_kind("onnxruntime") == GRAPH_OP
    assert layer_kind("no-such-engine") is None and layer_kind(float("nan")) is None


@pytest.mark.parametrize("name", NAMES)
def test_public_methods_check_state(name: str) -> None:
    backend = backend_class(name)(LIVE[name])
    feeds = {"x": np.zeros((1, 3, 8, 8), np.float32)}
    for call in (lambda: backend.measure(feeds), lambda: backend.outputs(feeds),
                 lambda: backend.profile_layers(feeds, 1)):
        with pytest.raises(RuntimeError, match="not built"):
            call()
    backend.close()  # closing what was never built is harmless


@pytest.fixture
def doubles(monkeypatch, tmp_path: Path):
    """TensorRT and cuda-python as the recording double; trtexec as the replaying fake binary."""
    from tests.doubles.tensorrt_double import Recorder, make_cudart, make_tensorrt

    recorder = Recorder()
    runtime = make_cudart(recorder)
    cuda, bindings = types.ModuleType("cuda"), types.ModuleType("cuda.bindings")
    bindings.runtime, cuda.bindings = runtime, bindings
    for module_name, module in {"tensorrt": make_tensorrt("10.13.0", recorder), "cuda": cuda,
                                "cuda.bindings": bindings, "cuda.bindings.runtime": runtime}.items():
        monkeypatch.setitem(sys.modules, module_name, module)
    _install_fake_trtexec(tmp_path, monkeypatch)


def _install_fake_trtexec(tmp_path: Path, monkeypatch) -> None:
    import os
    import stat

    from tests.ingest.test_trt_fixtures import SEEDS

    binary = tmp_path / "bin" / "trtexec"
    binary.parent.mkdir()
    fake = Path(__file__).resolve().parent / "doubles" / "fake_trtexec.py"
    binary.write_text(f"#!/bin/sh\nexec {sys.executable} {fake} \"$@\"\n")
    binary.chmod(binary.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{binary.parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_TRTEXEC_SEEDS", str(SEEDS))
    monkeypatch.setenv("FAKE_TRTEXEC_ARGS", str(tmp_path / "args.jsonl"))


def _cell(tmp_path: Path, name: str):
    tiny_cnn(tmp_path / "tiny.onnx")
    options = "".join(f"{key} = {value!r}\n".replace("'", '"') for key, value in LIVE[name].items())
    body = (f'[[models]]\nsource = "tiny.onnx"\n[axes]\nbatch_sizes = [2]\nbackends = ["{name}"]\n'
            f"[backends.{name}]\n{options}{FAST}")
    return plan_sweep(load_config(write_sweep(tmp_path, body)), tmp_path / "cache").cells[0]


@pytest.mark.parametrize("name", NAMES)
def test_one_cell_through_the_public_methods(name: str, request, tmp_path: Path) -> None:
    if name in DOUBLED:
        request.getfixturevalue("doubles")
    cell = _cell(tmp_path, name)
    backend = backend_class(name)(cell.options)
    assert backend.unavailable_reason() is None
    feeds = make_feeds(cell.model.inputs, cell.input_shapes, cell.measurement.seed)
    work = tmp_path / "work"
    work.mkdir()
    request = build_request(cell, cell.model.path, work, tmp_path / "cache")
    try:
        stats = backend.build(request, feeds)
        assert isinstance(stats, BuildStats) and backend.request is request
        with pytest.raises(RuntimeError, match="already built"):
            backend.build(request, feeds)
        samples, row = backend.measure(feeds)
        assert samples is None or (isinstance(samples, Samples) and len(samples) == row["queries"])
        assert row["queries"] > 0 and row["latency_median_ms"] > 0
        if backend.capabilities.outputs:
            outputs = backend.outputs(feeds)
            assert outputs and all(isinstance(value, np.ndarray) for value in outputs.values())
        else:
            with pytest.raises(RuntimeError, match="does not return outputs"):
                backend.outputs(feeds)
        layers = backend.profile_layers(feeds, 2)
        assert layers and all(isinstance(layer, LayerRecord) for layer in layers)
        assert backend.device_row() is None or "device_id" in backend.device_row()
    finally:
        backend.close()


def test_a_failure_reason_names_where_a_heading_message_points() -> None:
    """torch.compile's errors begin with "from user code:" above the frames it traced: the reason a
    failed cell records names the innermost of them, not the heading alone."""
    from farm.errors import describe, first_line

    dynamo = AssertionError('\n\nfrom user code:\n   File "<forward>", line 4, in forward\n    v2 = op_Slice(self)\n'
                            '  File "ops.py", line 130, in _slice\n    starts = ints(starts)\n\n'
                            'Set TORCHDYNAMO_VERBOSE=1 for the internal stack trace')
    assert first_line(dynamo) == "from user code: starts = ints(starts) (the traceback has the rest)"
    assert first_line(ValueError("bad shape: 3\nmore")) == "bad shape: 3" and first_line(ValueError()) == "ValueError"
    assert describe(ValueError("bad shape: 3\nmore")) == "ValueError: bad shape: 3" and describe(OSError()) == "OSError"
