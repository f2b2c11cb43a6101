"""PyTorch-native model sources (`module:PKG.MOD:FACTORY`, `torchvision:NAME`): the torch backend
runs the factory's own nn.Module, ONNX Runtime the ONNX file farm exported from it, with the same
weights; real torch and real ONNX Runtime on the CPU."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

torch = pytest.importorskip("torch")

from farm.cli import main  # noqa: E402
from farm.config import ModelSpec, load_config  # noqa: E402
from farm.errors import ConfigError  # noqa: E402
from farm.models import resolve_model  # noqa: E402
from farm.models.native import native_module, read_native  # noqa: E402
from farm.plan import plan_sweep  # noqa: E402
from farm.warehouse import Warehouse  # noqa: E402
from tests.conftest import tiny_cnn, write_sweep  # noqa: E402
from tests.test_imports import run_bare  # noqa: E402

NATIVE = 'source = "module:tests.native_models:tiny_cnn"\nkwargs = { num_classes = 5 }\n' \
         'inputs = { x = { shape = ["batch", 3, 16, 16] } }\n'


def sweep_on_torch_and_onnxruntime(tmp_path: Path, name: str, models: str) -> tuple[int, Path]:
    """Run a sweep of `models` (their [[models]] tables) on PyTorch CPU and ONNX Runtime at batch 2:
    (exit status, the warehouse)."""
    config = write_sweep(tmp_path, f'name = "{name}"\n{models}\n[axes]\nbackends = ["torch", "onnxruntime"]\n'
                                   'batch_sizes = [2]\n[backends.torch]\ndevice = "cpu"\n')
    results = tmp_path / "results"
    return main(["sweep", str(config), "--results", str(results), "--executor", "local"]), results


def tiny_spec(**changes) -> ModelSpec:
    fields = {"source": "module:tests.native_models:tiny_cnn", "kwargs": {"num_classes": 5},
              "inputs": {"x": {"shape": ["batch", 3, 16, 16]}}, **changes}
    return ModelSpec.model_validate(fields)


def test_torch_runs_the_module_and_onnxruntime_the_export(tmp_path: Path, capsys) -> None:
    """One sweep, both backends: torch cells say they ran the native module (an ONNX file's torch
    cell says interpreter, and its note says whose figure it is and how to get PyTorch's own), ONNX
    Runtime cells ran the export, and every cell passes accuracy against the FP32 reference of the
    exported file."""
    tiny_cnn(tmp_path / "tiny.onnx", channels=8, spatial=16)
    status, results = sweep_on_torch_and_onnxruntime(
        tmp_path, "native", f'[[models]]\n{NATIVE}\n[[models]]\nsource = "tiny.onnx"\n')
    assert status == 0
    capsys.readouterr()
    assert main(["show", "native", "--results", str(results), "--format", "json"]) == 0
    notes = {(row["model"], row["backend"]): row["note"] or "" for row in json.loads(capsys.readouterr().out)}
    assert "PyTorch ran farm's ONNX interpreter over the ONNX file" in notes["tiny", "torch"]
    assert "a module: or torchvision: source gives PyTorch's own" in notes["tiny", "torch"]
    assert not any("interpreter" in note for key, note in notes.items() if key != ("tiny", "torch")), notes
    con = Warehouse(results).connect()
    rows = con.execute("SELECT c.model, c.backend, c.status, b.transform_summary, c.model_sha256 FROM cells c "
                       "JOIN builds b USING (cell_id) ORDER BY c.model, c.backend").fetchall()
    assert [(m, b, s) for m, b, s, _, _ in rows] == [("tiny", "onnxruntime", "ok"), ("tiny", "torch", "ok"),
                                                     ("tiny_cnn", "onnxruntime", "ok"), ("tiny_cnn", "torch", "ok")]
    summaries = {(m, b): t for m, b, _, t, _ in rows}
    assert summaries["tiny_cnn", "torch"] == "PyTorch: native module (module:tests.native_models:tiny_cnn)"
    assert summaries["tiny", "torch"] == "PyTorch: ONNX interpreter (farm.onnx_torch)"
    native_sha = {sha for m, _, _, _, sha in rows if m == "tiny_cnn"}
    export = next((tmp_path / "results").rglob("native/tiny_cnn-*/model.onnx"))
    assert native_sha == {hashlib.sha256(export.read_bytes()).hexdigest()}
    verdicts = con.execute("SELECT c.model, c.backend, a.verdict, a.cosine_similarity FROM accuracy a "
                           "JOIN cells c USING (cell_id) WHERE c.model = 'tiny_cnn'").fetchall()
    assert sorted((b, v) for _, b, v, _ in verdicts) == [("onnxruntime", "pass"), ("torch", "pass")]
    assert all(cos > 0.99999 for *_, cos in verdicts)
    layers = con.execute("SELECT count(*) FROM layers l JOIN cells c USING (cell_id) "
                         "WHERE c.model = 'tiny_cnn' AND c.backend = 'torch'").fetchone()[0]
    assert layers > 0  # per-operator rows from the profiler


def test_native_module_matches_the_exported_file(tmp_path: Path) -> None:
    model = resolve_model(tiny_spec(), 0, tmp_path, tmp_path / "cache")
    meta = read_native(model.path)
    assert meta["input_names"] == ["x"] and meta["output_names"] == ["output"] and meta["kwargs"] == {"num_classes": 5}
    x = np.random.default_rng(0).uniform(-1, 1, (3, 3, 16, 16)).astype(np.float32)  # batch 3: the axis is dynamic
    (expected,) = ort.InferenceSession(str(model.path), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    with torch.no_grad():
        (got,) = native_module(model.path, meta).eval()(torch.from_numpy(x))
    assert expected.shape == (3, 5)
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-4, atol=1e-5)
    assert [(i.name, i.shape, i.dtype, i.batch_axis) for i in model.inputs] == [("x", ("batch", 3, 16, 16),
                                                                                "float32", 0)]


def test_tuple_outputs_become_numbered_onnx_outputs(tmp_path: Path) -> None:
    spec = ModelSpec.model_validate({"source": "module:tests.native_models:two_outputs",
                                     "inputs": {"x": {"shape": ["batch", 16]}}})
    model = resolve_model(spec, 0, tmp_path, tmp_path / "cache")
    assert read_native(model.path)["output_names"] == ["output_0", "output_1"]
    session = ort.InferenceSession(str(model.path), providers=["CPUExecutionProvider"])
    assert [o.name for o in session.get_outputs()] == ["output_0", "output_1"]


def test_same_source_same_sha_and_cached(tmp_path: Path) -> None:
    first = resolve_model(tiny_spec(), 0, tmp_path, tmp_path / "cache")
    mtime = first.path.stat().st_mtime_ns
    again = resolve_model(tiny_spec(), 0, tmp_path, tmp_path / "cache")
    elsewhere = resolve_model(tiny_spec(), 0, tmp_path, tmp_path / "other-cache")  # built and exported again
    assert first.sha256 == again.sha256 == elsewhere.sha256
    assert again.path == first.path and again.path.stat().st_mtime_ns == mtime  # not exported twice
    assert resolve_model(tiny_spec(kwargs={"num_classes": 6}), 0, tmp_path, tmp_path / "cache").sha256 != first.sha256
    assert resolve_model(tiny_spec(), 0, tmp_path, tmp_path / "cache", seed=2).sha256 != first.sha256
    assert not list((tmp_path / "cache").rglob("*.tmp"))


BAD_SOURCES = {
    "no such module": ('source = "module:no_such_pkg.models:net"', "cannot import 'no_such_pkg.models'"),
    "no such factory": ('source = "module:tests.native_models:nope"',
                        "module 'tests.native_models' has no factory 'nope'; its callables include:"),
    "bad kwargs key": ('source = "module:tests.native_models:tiny_cnn"\nkwargs = { num_clases = 5 }',
                       "models[0].kwargs: tests.native_models.tiny_cnn() does not take ['num_clases']"),
    "no inputs": ('source = "module:tests.native_models:tiny_cnn"', "a PyTorch source needs its inputs' shapes"),
    "malformed": ('source = "module:tests.native_models"', "is not a PyTorch source: write 'module:PKG.MOD:FACTORY'"),
    "kwargs on a file": ('source = "tiny.onnx"\nkwargs = { a = 1 }', "kwargs are a PyTorch factory's arguments"),
}


@pytest.mark.parametrize("case", BAD_SOURCES)
def test_bad_source_is_one_line(tmp_path: Path, case: str, capsys) -> None:
    model, expected = BAD_SOURCES[case]
    tiny_cnn(tmp_path / "tiny.onnx")
    inputs = "" if case in ("no inputs", "malformed", "kwargs on a file") else \
        '\ninputs = { x = { shape = ["batch", 3, 16, 16] } }'
    config = write_sweep(tmp_path, f'name = "bad"\n[[models]]\n{model}{inputs}\n')
    assert main(["sweep", str(config), "--results", str(tmp_path / "results"), "--executor", "local"]) == 2
    err = capsys.readouterr().err.strip()
    assert expected in err and len(err.splitlines()) == 1, err


def test_one_model_that_cannot_be_built_or_exported_stops_nothing(tmp_path: Path, capfd) -> None:
    """A factory that raises fails its own cells; a module no exporter takes keeps its PyTorch cells
    (ONNX Runtime's say `unsupported`, with why and what to do); the good model runs; what the
    exporters printed is in export.log, not on the terminal."""
    width16 = 'inputs = { x = { shape = ["batch", 16] } }'
    models = "".join(f'[[models]]\nsource = "module:tests.native_models:{factory}"\n{width16}\n'
                     for factory in ("broken", "not_a_module", "not_exportable"))
    status, results = sweep_on_torch_and_onnxruntime(tmp_path, "mixed", f"{models}[[models]]\n{NATIVE}\n")
    assert status == 1
    out, err = capfd.readouterr()
    assert "torch.onnx" not in out + err and "TorchScript" not in out + err
    rows = {(m, b): (s, r) for m, b, s, r in Warehouse(results).connect().execute(
        "SELECT model, backend, status, reason FROM cells").fetchall()}
    assert rows["broken", "torch"] == rows["broken", "onnxruntime"] == (
        "failed", "tests.native_models.broken(**kwargs) raised RuntimeError: this factory always fails")
    assert rows["not_a_module", "torch"][1] == "tests.native_models.not_a_module() returned a int, not a torch.nn.Module"
    assert rows["not_exportable", "torch"] == ("ok", None)
    status, reason = rows["not_exportable", "onnxruntime"]
    assert status == "unsupported" and reason.startswith(
        "PyTorch could not export module:tests.native_models:not_exportable to ONNX (dynamo: ")
    assert "torchscript: RuntimeError: this module cannot be exported" in reason
    assert reason.endswith("engines that run ONNX need a file: export it yourself and give its path as the source")
    assert rows["tiny_cnn", "torch"][0] == rows["tiny_cnn", "onnxruntime"][0] == "ok"
    log = next(results.rglob("native/not_exportable-*/export.log")).read_text()
    assert "--- torch.onnx.export, dynamo ---" in log and "--- torch.onnx.export, torchscript ---" in log
    meta = read_native(next(results.rglob("native/tiny_cnn-*/model.onnx")))
    assert meta["exporter"] == "torch.onnx.export(dynamo=True)"
    summaries = dict(Warehouse(results).connect().execute(
        "SELECT c.backend, b.transform_summary FROM cells c JOIN builds b USING (cell_id) "
        "WHERE c.model = 'tiny_cnn'").fetchall())
    assert summaries["onnxruntime"].startswith("ONNX by torch.onnx.export(dynamo=True)")  # on the build row
    assert summaries["torch"] == "PyTorch: native module (module:tests.native_models:tiny_cnn)"
    verdict = Warehouse(results).connect().execute(
        "SELECT a.verdict, a.worst_metric FROM accuracy a JOIN cells c USING (cell_id) "
        "WHERE c.model = 'not_exportable'").fetchone()
    assert verdict[0] == "unjudged" and "no fp32 reference" in verdict[1]


def test_torchvision_absent_says_how_to_install(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    try:
        import torchvision  # noqa: F401
        pytest.skip("torchvision is installed here")
    except ImportError:
        pass
    config = write_sweep(tmp_path, 'name = "tv"\n[[models]]\nsource = "torchvision:resnet18"\n')
    with pytest.raises(ConfigError, match=r"models\[0\]\.source: torchvision is not installed: pip install torchvision"):
        plan_sweep(load_config(config), tmp_path / "cache")


def test_native_source_without_torch_is_one_line(tmp_path: Path) -> None:
    """Planning imports torch only for PyTorch sources, and says so when it is absent."""
    write_sweep(tmp_path, 'name = "tv"\n[[models]]\nsource = "torchvision:resnet18"\n')
    result = run_bare("""
        from pathlib import Path
        from farm.config import load_config
        from farm.errors import ConfigError
        from farm.plan import plan_sweep
        try:
            plan_sweep(load_config("sweep.toml"), Path("cache"))
        except ConfigError as exc:
            print("error:", exc)
    """, tmp_path)
    assert result.returncode == 0, result.stderr
    assert "PyTorch sources need torch" in result.stdout and "pip install torch" in result.stdout


def test_torchvision_default_inputs_and_names(tmp_path: Path) -> None:
    from farm.config import model_display_name
    from farm.models.native import TORCHVISION_INPUTS, factory_ref

    assert factory_ref("torchvision:resnet50") == ("torchvision.models", "resnet50")
    assert factory_ref("module:torchvision.models:resnet50") == ("torchvision.models", "resnet50")
    assert model_display_name(ModelSpec(source="torchvision:resnet50")) == "resnet50"
    assert model_display_name(ModelSpec(source="module:mypkg.models:make_net")) == "make_net"
    assert TORCHVISION_INPUTS == {"input": (("batch", 3, 224, 224), "float32")}


def test_a_factory_that_exits_or_hangs_fails_its_own_cells(tmp_path: Path, monkeypatch, capfd) -> None:
    """Factories run at plan time in farm's process: one that calls exit() ended `farm sweep` with no
    word, one that never returns blocked it. Now each fails its own model's cells with what it did,
    planning says while it waits, and the other model runs."""
    from farm.models import native

    monkeypatch.setattr(native, "FACTORY_DEADLINE_S", 3.0)
    monkeypatch.setattr(native, "FACTORY_NOTE_AFTER_S", 1.0)
    width16 = 'inputs = { x = { shape = ["batch", 16] } }'
    models = "".join(f'[[models]]\nsource = "module:tests.native_models:{factory}"\n{width16}\n'
                     for factory in ("exits", "hangs", "exits_hard", "hangs_in_forward"))
    status, results = sweep_on_torch_and_onnxruntime(tmp_path, "rude", f"{models}[[models]]\n{NATIVE}\n")
    assert status == 1
    rows = {(m, b): (s, r) for m, b, s, r in Warehouse(results).connect().execute(
        "SELECT model, backend, status, reason FROM cells").fetchall()}
    assert rows["exits", "torch"] == ("failed", "tests.native_models.exits(**kwargs) called exit(3)")
    status_, reason = rows["hangs", "onnxruntime"]
    assert status_ == "failed" and reason.startswith("tests.native_models.hangs(**kwargs) did not return within 3 s")
    assert rows["exits_hard", "torch"] == ("failed", "tests.native_models.exits_hard(**kwargs) called os._exit(0)")
    status_, reason = rows["hangs_in_forward", "torch"]
    assert status_ == "failed" and reason.startswith("module:tests.native_models:hangs_in_forward: forward() on the "
                                                     "example inputs did not return within 3 s"), reason
    assert rows["tiny_cnn", "torch"][0] == rows["tiny_cnn", "onnxruntime"][0] == "ok"
    assert "farm: waiting for tests.native_models.hangs(**kwargs)" in capfd.readouterr().err


def test_a_message_of_100000_characters_is_kept_whole_and_printed_cut(tmp_path: Path, capsys) -> None:
    """An engine's or a model's own message can be megabytes: the warehouse keeps it, the terminal
    gets its first 2,000 characters and how many more there are."""
    width16 = 'inputs = { x = { shape = ["batch", 16] } }'
    status, results = sweep_on_torch_and_onnxruntime(
        tmp_path, "long", f'[[models]]\nsource = "module:tests.native_models:says_too_much"\n{width16}\n')
    assert status == 1
    said = capsys.readouterr()
    assert "more characters: farm query reads the whole text" in said.err and "x" * 2001 not in said.err
    (reason,) = {r for (r,) in Warehouse(results).connect().execute("SELECT reason FROM cells").fetchall()}
    assert reason.count("x") == 100_000
    assert main(["show", "long", "--results", str(results)]) == 0
    out = capsys.readouterr().out
    assert "more characters: farm query reads the whole text" in out and "x" * 2001 not in out


def test_exports_run_side_by_side_and_a_process_that_dies_costs_its_model_only(tmp_path: Path, monkeypatch,
                                                                                  capfd) -> None:
    """With FARM_EXPORT_WORKERS=3, planning exports the PyTorch sources in processes of their own, three
    at a time: the files are those a one-at-a-time plan makes; a factory that raises or hangs fails its
    model's cells as before (the planner's notes reach the terminal); one whose process is killed is
    tried again alone, then fails its cells with how it ended and its last output; the rest run."""
    from farm.models import native

    monkeypatch.setattr(native, "FACTORY_DEADLINE_S", 3.0)
    monkeypatch.setattr(native, "FACTORY_NOTE_AFTER_S", 1.0)
    monkeypatch.setenv("FARM_EXPORT_WORKERS", "3")
    width16 = 'inputs = { x = { shape = ["batch", 16] } }'
    models = "".join(f'[[models]]\nsource = "module:tests.native_models:{factory}"\n{width16}\n'
                     for factory in ("broken", "hangs", "kills_its_process", "not_exportable"))
    status, results = sweep_on_torch_and_onnxruntime(tmp_path, "side-by-side", f"{models}[[models]]\n{NATIVE}\n")
    assert status == 1
    err = capfd.readouterr().err
    assert "farm: exporting 5 PyTorch models to ONNX, 3 at a time" in err
    assert "farm: waiting for tests.native_models.hangs(**kwargs)" in err
    rows = {(m, b): (s, r) for m, b, s, r in Warehouse(results).connect().execute(
        "SELECT model, backend, status, reason FROM cells").fetchall()}
    assert rows["broken", "torch"] == ("failed", "tests.native_models.broken(**kwargs) raised RuntimeError: this "
                                                 "factory always fails")
    assert rows["hangs", "onnxruntime"][1].startswith("tests.native_models.hangs(**kwargs) did not return within 3 s")
    status_, reason = rows["kills_its_process", "torch"]
    assert status_ == "failed" and reason.startswith(
        "exporting module:tests.native_models:kills_its_process to ONNX ended its process twice, beside other "
        "exports and alone: signal SIGKILL; its last output: "), reason
    assert "building the model that is killed" in reason
    assert rows["not_exportable", "torch"] == ("ok", None) and rows["not_exportable", "onnxruntime"][0] == "unsupported"
    assert rows["tiny_cnn", "torch"][0] == rows["tiny_cnn", "onnxruntime"][0] == "ok"
    monkeypatch.setenv("FARM_EXPORT_WORKERS", "1")  # the planner's own export, into another cache: the same file
    alone = resolve_model(tiny_spec(), 4, tmp_path, tmp_path / "alone")
    side_by_side = next(results.rglob("native/tiny_cnn-*/model.onnx"))
    assert hashlib.sha256(side_by_side.read_bytes()).hexdigest() == alone.sha256
    assert not list(results.rglob("exports-*"))  # its work files are gone


def test_ctrl_c_while_exports_run_side_by_side_stops_planning(tmp_path: Path) -> None:
    """Ctrl-C at the terminal reaches the planner and its export processes alike: planning stops
    and no export is tried again alone or left running, though it plans on a thread that gets no
    KeyboardInterrupt of its own; factories that hang would otherwise hold it for their deadline."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from tests.test_concurrency import as_from_a_terminal

    models = "".join(f'[[models]]\nname = "m{width}"\nsource = "module:tests.native_models:hangs"\n'
                     f'inputs = {{ x = {{ shape = ["batch", {width}] }} }}\n' for width in (16, 17))  # two exports
    config = write_sweep(tmp_path, f'name = "interrupted"\n{models}[axes]\nbackends = ["onnxruntime"]\n')
    root = Path(__file__).resolve().parent.parent
    process = subprocess.Popen(
        # planned on a thread of its own, as `farm sweep` plans while GPU workers start: the main
        # thread gets the KeyboardInterrupt, and the planning thread must end by itself
        [sys.executable, "-c", "from concurrent.futures import ThreadPoolExecutor\nfrom pathlib import Path\n"
                               "from farm.config import load_config\nfrom farm.plan import plan_sweep\n"
                               "with ThreadPoolExecutor(1) as pool:\n"
                               f"    pool.submit(plan_sweep, load_config({str(config)!r}), "
                               f"Path({str(tmp_path / 'cache')!r})).result()"],
        cwd=root, env={**os.environ, "FARM_EXPORT_WORKERS": "2", "PYTHONPATH": str(root)},
        stderr=subprocess.PIPE, text=True, start_new_session=True,  # its own group: the terminal's Ctrl-C
        preexec_fn=as_from_a_terminal)  # Ctrl-C not ignored where the tests run in the background
    try:
        assert "farm: exporting 2 PyTorch models to ONNX, 2 at a time" in process.stderr.readline()
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and len(_children(process.pid)) < 2:
            time.sleep(0.2)
        time.sleep(1.0)  # the export processes inside the factories
        exports = _children(process.pid)
        os.killpg(process.pid, signal.SIGINT)
        _, err = process.communicate(timeout=60)  # not the factories' 600 s deadline
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert process.returncode != 0 and "KeyboardInterrupt" in err, err[-2000:]
    assert "ended its process twice" not in err
    import psutil

    assert len(exports) >= 2 and not [pid for pid in exports if psutil.pid_exists(pid)
                                      and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]


def _children(pid: int) -> list[int]:
    import psutil

    try:
        return [c.pid for c in psutil.Process(pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return []
