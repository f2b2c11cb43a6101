"""`farm ingest` is honest: what it cannot read it names, files of different engines it refuses,
empty files are errors, provenance comes from the files, and a failed ingest writes nothing."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from farm import __version__
from farm.cli import main
from farm.warehouse import Warehouse
from farm.warehouse.rows import write_cell_result
from tests.ingest.test_trt_fixtures import SEEDS

FPN = [SEEDS / "fpn_int8.profile.json", SEEDS / "fpn_int8.build_verbose.log"]
CENTERNET = [SEEDS / "centernet_int8.layer_info.log", SEEDS / "centernet_int8.profile.json"]
RESNET = [SEEDS / "resnet50_trt86.build_verbose_excerpt.log", SEEDS / "resnet50_trt86.dump_profile_table.log"]
MNIST = SEEDS / "mnist_trt80.trtexec_perf_summary.log"


def ingest(*args: object) -> int:
    return main(["ingest", *map(str, args)])


def written(results: Path) -> list[Path]:
    return sorted(results.rglob("*.parquet")) if results.exists() else []


def cells(results: Path) -> dict[str, str]:
    return dict(Warehouse(results).connect().execute("SELECT model, status FROM cells").fetchall())


def error_lines(capsys) -> list[str]:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err.strip().splitlines()


def times_records(n: int = 50, compute: float = 1.1) -> list[dict[str, float]]:
    records, t = [], 0.0
    for i in range(n):
        c = compute + 0.001 * (i % 7)
        records.append({"startEnqMs": t, "endEnqMs": t + 0.02, "startH2dMs": t, "endH2dMs": t + 0.05,
                        "startComputeMs": t + 0.05, "endComputeMs": t + 0.05 + c, "startD2hMs": t + 0.05 + c,
                        "endD2hMs": t + 0.06 + c, "h2dMs": 0.05, "computeMs": c, "d2hMs": 0.01,
                        "latencyMs": 0.06 + c})
        t += c + 0.2
    return records


# --- 1. files that are not TensorRT output ---------------------------------------------------------

def test_a_file_that_is_not_tensorrt_output_is_named_and_nothing_is_written(tmp_path: Path, capsys) -> None:
    junk = tmp_path / "notes.txt"
    junk.write_text("some notes about an engine\n")
    results = tmp_path / "results"
    assert ingest(junk, "--results", results) == 2
    (line,) = error_lines(capsys)
    assert str(junk) in line and "not TensorRT output" in line and "--exportProfile" in line  # what farm reads
    assert written(results) == []


@pytest.mark.parametrize("separate", [False, True])
def test_unrecognised_files_are_skipped_beside_real_ones(tmp_path: Path, capsys, separate: bool) -> None:
    junk = tmp_path / "notes.txt"
    junk.write_text("some notes about an engine\n")
    plan = tmp_path / "model.plan"
    plan.write_bytes(bytes(range(256)) * 64)  # a serialized engine is binary
    results = tmp_path / "results"
    assert ingest(junk, MNIST, plan, "--results", results, *(["--separate"] if separate else [])) == 1
    lines = error_lines(capsys)
    assert len(lines) == 2 and str(junk) in lines[0] and str(plan) in lines[1] and "binary" in lines[1]
    assert all("farm reads" in line for line in lines)
    assert cells(results) == {"mnist_trt80": "ok"}  # named after the first file it read, no `failed` junk cell


def test_several_unrecognised_files_are_each_named(tmp_path: Path, capsys) -> None:
    (tmp_path / "a.txt").write_text("hello\n")
    (tmp_path / "b.csv").write_text("x,y\n1,2\n")
    (tmp_path / "empty.log").write_text("")
    results = tmp_path / "results"
    assert ingest(tmp_path / "a.txt", tmp_path / "b.csv", tmp_path / "empty.log", "--results", results) == 2
    lines = error_lines(capsys)
    assert [("a.txt" in line, "b.csv" in line, "empty.log" in line) for line in lines[:3]] == [
        (True, False, False), (False, True, False), (False, False, True)]
    assert "empty" in lines[2] and "none of the 3 files" in lines[3]
    assert written(results) == []


def test_a_large_unrelated_file_is_sniffed_not_read(tmp_path: Path, monkeypatch) -> None:
    import farm.ingest.files
    from farm.ingest.sniff import HEAD_BYTES

    big = tmp_path / "capture.txt"
    with big.open("w") as handle:
        for _ in range(3 * HEAD_BYTES // 64):
            handle.write("x" * 63 + "\n")
    read_sizes: list[int] = []

    class Counting:
        def __init__(self, handle) -> None:
            self.handle = handle

        def read(self, size: int = -1) -> bytes:
            data = self.handle.read(size)
            read_sizes.append(len(data))
            return data

        def __enter__(self):
            return self

        def __exit__(self, *exc) -> None:
            self.handle.close()

        def __getattr__(self, name: str):
            return getattr(self.handle, name)

    monkeypatch.setattr(farm.ingest.files, "open", lambda path, mode="r": Counting(open(path, mode)), raising=False)
    read = farm.ingest.files.read_file(big)
    assert read.kind is None and not read.error
    assert sum(read_sizes) <= HEAD_BYTES + 1


# --- 2. files of different engines ------------------------------------------------------------------

def test_all_the_recorded_files_as_one_engine_are_refused(tmp_path: Path, capsys) -> None:
    everything = sorted(SEEDS.iterdir())  # `farm ingest tests/fixtures/trt_seeds/*`
    results = tmp_path / "results"
    assert ingest(*everything, "--results", results) == 2
    lines = error_lines(capsys)
    assert "README.md" in lines[0] and "not TensorRT output" in lines[0]  # skipped, and said so
    conflict = lines[-1]
    assert len(lines) == 2 and "not of one engine" in conflict and "--separate" in conflict
    assert "model.onnx (mnist_trt80.trtexec_perf_summary.log)" in conflict
    assert "resnet50_bs_dynamic.onnx (resnet50_trt86.build_verbose_excerpt.log)" in conflict
    assert "6430.89 qps" in conflict and "502.107 qps" in conflict  # two performance summaries
    assert "different per-layer profiles" in conflict and "different layers" in conflict
    assert written(results) == []
    # --separate still works: each file its own engine, README.md skipped
    assert ingest(*everything, "--separate", "--results", results) == 1
    con = Warehouse(results).connect()
    assert con.execute("SELECT count(*), count(*) FILTER (status = 'ok') FROM cells").fetchone() == (7, 7)


@pytest.mark.parametrize("files", [FPN, CENTERNET, RESNET, [MNIST], [*FPN, FPN[0]], [MNIST, MNIST]],
                         ids=["fpn", "centernet", "resnet50", "mnist", "a-file-twice", "the-same-path-twice"])
def test_files_of_one_engine_are_one_cell(tmp_path: Path, files: list[Path]) -> None:
    if files == [*FPN, FPN[0]]:  # the same profile under another name: not a second profile
        copy = tmp_path / "copy.profile.json"
        copy.write_bytes(FPN[0].read_bytes())
        files = [*FPN, copy]
    results = tmp_path / "results"
    assert ingest(*files, "--results", results) == 0
    assert len(cells(results)) == 1


def variant(tmp_path: Path, source: Path, name: str, old: str, new: str) -> Path:
    """A copy of a recorded file with one thing it says changed: the same file of another run."""
    text = source.read_text()
    assert old in text
    path = tmp_path / name
    path.write_text(text.replace(old, new))
    return path


@pytest.mark.parametrize("case", ["models", "profiles", "layers-vs-profile", "kernels", "devices", "versions",
                                  "shapes", "times-vs-summary", "times-vs-profile"])
def test_files_of_different_engines_or_runs_are_refused(tmp_path: Path, capsys, case: str) -> None:
    if case == "models":
        files, expected = [MNIST, RESNET[0]], ["different models", "model.onnx", "resnet50_bs_dynamic.onnx"]
    elif case == "profiles":
        files, expected = [CENTERNET[1], FPN[0]], ["different per-layer profiles", "54 layers over 961 iterations",
                                                   "113 layers over 625 iterations"]
    elif case == "layers-vs-profile":
        files, expected = [FPN[0], CENTERNET[0]], ["different layers",
                                                   "of the 113 profile rows of fpn_int8.profile.json",
                                                   "54 layers of centernet_int8.layer_info.log"]
    elif case == "kernels":
        files, expected = [FPN[1], RESNET[0]], ["Conv_0 32x3x3x3 (fpn_int8.build_verbose.log)",
                                                "Conv_0 64x3x7x7 (resnet50_trt86.build_verbose_excerpt.log)"]
    elif case == "devices":
        other = variant(tmp_path, RESNET[0], "other_gpu.log", "NVIDIA GeForce RTX 3060 Laptop GPU",
                        "NVIDIA A100-SXM4-40GB")
        files, expected = [RESNET[0], other], ["different devices", "NVIDIA A100-SXM4-40GB (other_gpu.log)"]
    elif case == "versions":
        other = variant(tmp_path, MNIST, "other_trt.log", "[TensorRT v8003]", "[TensorRT v8601]")
        files, expected = [MNIST, other], ["different TensorRT versions", "8.0.3 (mnist", "8.6.1 (other_trt.log)"]
    elif case == "shapes":
        layers = tmp_path / "engine.layers.json"
        layers.write_text(json.dumps({"Layers": [{
            "Name": "conv", "LayerType": "CaskConvolution",
            "Inputs": [{"Name": "x", "Dimensions": [1, 1, 28, 28], "Format/Datatype": "Row major linear FP32"}],
            "Outputs": [{"Name": "y", "Dimensions": [1, 10], "Format/Datatype": "Row major linear FP32"}]}]}))
        run = variant(tmp_path, MNIST, "batch8.log", "--minShapes=x:0:1x1x28", "--shapes=x:8x1x28x28")
        files, expected = [layers, run], ["different tensor shapes", "x 1x1x28x28", "x 8x1x28x28"]
    elif case == "times-vs-profile":  # the layers of another engine: 4.4x the queries' compute time
        times = tmp_path / "run.times.json"
        times.write_text(json.dumps(times_records()))
        files, expected = [times, FPN[0]], ["not one engine", "layers of fpn_int8.profile.json add up to 4.871 ms",
                                            "4.4x the median compute time of run.times.json"]
    else:
        times = tmp_path / "run.times.json"
        times.write_text(json.dumps(times_records()))
        files, expected = [times, MNIST], ["not one run", "run.times.json", "0.159668 ms"]
    results = tmp_path / "results"
    assert ingest(*files, "--results", results) == 2
    (line,) = error_lines(capsys)
    assert "not of one engine" in line and "--separate" in line
    for text in expected:
        assert text in line
    assert written(results) == []
    assert ingest(*files, "--separate", "--results", results) == 0  # each on its own is fine
    assert len(cells(results)) == 2


def test_engine_and_separate_together_are_a_mistake(tmp_path: Path, capsys) -> None:
    assert ingest(*FPN, "--engine", "fpn", "--separate", "--results", tmp_path / "r") == 2
    (line,) = error_lines(capsys)
    assert "--engine" in line and "--separate" in line


# --- 3. recognised, but nothing farm could use --------------------------------------------------------

@pytest.mark.parametrize("name, content, kind", [
    ("empty.profile.json", '[{"count": 10}]', "--exportProfile JSON"),
    ("empty.layers.json", '{"Layers": [], "Bindings": []}', "engine-inspector"),
    ("noise.log", "[11/22/2025-10:00:00] [V] [TRT] Tactic: 0x0000000000000000 Time: 0.1\n" * 1000, "log"),
])
def test_a_recognised_file_with_nothing_in_it_is_an_error(tmp_path: Path, capsys, name: str, content: str,
                                                          kind: str) -> None:
    path = tmp_path / name
    path.write_text(content)
    results = tmp_path / "results"
    assert ingest(path, "--results", results) == 2
    (line,) = error_lines(capsys)
    assert str(path) in line and "recognised as" in line and kind in line and "nothing farm could use" in line
    assert written(results) == []


def test_a_log_with_only_a_device_is_nothing_to_store(tmp_path: Path, capsys) -> None:
    text = RESNET[0].read_text()
    device_only = tmp_path / "device.log"
    device_only.write_text(text[text.index("[08/20/2023-11:59:46] [I] === Device Information ==="):
                                text.index("[08/20/2023-11:59:52] [I] [TRT] ------")])
    assert ingest(device_only, "--results", tmp_path / "results") == 2
    (line,) = error_lines(capsys)
    assert "device.log" in line and "nothing farm could use" in line and "NVIDIA GeForce RTX 3060" in line
    assert written(tmp_path / "results") == []


# --- 4. provenance from the files ---------------------------------------------------------------------

def test_host_device_and_versions_come_from_the_files(tmp_path: Path) -> None:
    results = tmp_path / "results"
    assert ingest(*RESNET, "--engine", "resnet50", "--results", results) == 0
    assert ingest(MNIST, "--results", results) == 0
    con = Warehouse(results).connect()
    rows = con.execute("""SELECT model, host, cpu_model, cpu_cores, versions, farm_version, farm_commit, started_at,
                                 worker, ingested_on FROM cells ORDER BY model""").fetchall()
    here = f"{socket.gethostname()} (farm {__version__})"
    assert rows == [("mnist_trt80", None, None, None, '{"tensorrt": "8.0.3"}', None, None, None, None, here),
                    ("resnet50", None, None, None, "{}", None, None, None, None, here)]  # the excerpt names no version
    assert con.execute("""SELECT d.name, d.host, d.compute_capability FROM cells c JOIN devices d USING (device_id)
                          """).fetchall() == [("NVIDIA GeForce RTX 3060 Laptop GPU", None, "8.6")]


def test_the_device_uuid_trtexec_prints_is_the_device(tmp_path: Path) -> None:
    log = variant(tmp_path, RESNET[0], "uuid.log", "[08/20/2023-11:59:46] [I] Compute Capability: 8.6",
                  "[08/20/2023-11:59:46] [I] Selected Device UUID: GPU-0b2c4e1a-0000-4c7e-9d1e-0123456789ab\n"
                  "[08/20/2023-11:59:46] [I] Compute Capability: 8.6")
    results = tmp_path / "results"
    assert ingest(log, "--results", results) == 0
    assert Warehouse(results).connect().execute("SELECT device_id, uuid FROM devices").fetchone() == (
        "gpu-GPU-0b2c4e1a-0000-4c7e-9d1e-0123456789ab", "GPU-0b2c4e1a-0000-4c7e-9d1e-0123456789ab")


def test_cells_not_ingested_have_no_ingested_on(tmp_path: Path) -> None:
    from farm.ingest import IngestWarehouse, combine, read_file

    engine = combine("mnist", [read_file(MNIST)], "plain")
    write_cell_result(Warehouse(tmp_path / "plain"), engine.cell, engine.result, "run", "")  # how farm writes measured cells
    IngestWarehouse(tmp_path / "ingested", "lab-3 (farm 9)").write_engine(engine)
    assert Warehouse(tmp_path / "plain").connect().execute("SELECT ingested_on FROM cells").fetchone() == (None,)
    assert Warehouse(tmp_path / "ingested").connect().execute("SELECT ingested_on FROM cells").fetchone() == (
        "lab-3 (farm 9)",)


# --- 5. format and environment errors: one line each, nothing written ------------------------------------

def bad_files(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    records = times_records(5)
    no_latency = [dict(r) for r in records]
    del no_latency[2]["latencyMs"]
    strings = [dict(r) for r in records]
    strings[0]["latencyMs"] = "1.2"
    negative = [dict(r) for r in records]
    negative[3]["computeMs"] = -0.5
    layers = {"Layers": [{"Name": 7, "LayerType": "CaskConvolution"}], "Bindings": []}
    files = {
        "times-without-latency": ("no_latency.times.json", json.dumps(no_latency), "query 3 has no `latencyMs`"),
        "times-with-strings": ("strings.times.json", json.dumps(strings),
                               'query 1 has `latencyMs` "1.2", not a number'),
        "times-negative": ("negative.times.json", json.dumps(negative),
                           "query 4 has `computeMs` -0.5: a time taken is a finite number, never negative"),
        "inspector-name-number": ("names.layers.json", json.dumps(layers), "layer 1 has `Name` 7, not a string"),
        "profile-cut-short": ("cut.profile.json", FPN[0].read_text()[:5000], "not valid JSON"),
        "non-utf8-log": ("latin1.log", MNIST.read_text().replace("Throughput", "Throughput \xb5"), "not UTF-8"),
    }
    out = {}
    for case, (name, text, message) in files.items():
        path = tmp_path / name
        path.write_bytes(text.encode("latin-1") if case == "non-utf8-log" else text.encode())
        out[case] = (path, message)
    (tmp_path / "folder").mkdir()
    out["directory"] = (tmp_path / "folder", "is a folder")
    out["missing"] = (tmp_path / "missing.json", "no such file")
    return out


@pytest.mark.parametrize("case", ["times-without-latency", "times-with-strings", "inspector-name-number",
                                  "profile-cut-short", "non-utf8-log", "directory", "missing"])
def test_a_broken_file_is_one_line(tmp_path: Path, capsys, case: str) -> None:
    path, message = bad_files(tmp_path)[case]
    results = tmp_path / "results"
    assert ingest(path, "--results", results) == 2
    (line,) = error_lines(capsys)
    assert line.startswith(f"farm: error: {path}: ") and message in line
    assert written(results) == []


def test_with_several_files_every_broken_one_is_reported_and_nothing_written(tmp_path: Path, capsys) -> None:
    bad = bad_files(tmp_path)
    results = tmp_path / "results"
    assert ingest(bad["times-with-strings"][0], MNIST, bad["inspector-name-number"][0], "--separate",
                  "--results", results) == 2
    lines = error_lines(capsys)
    assert len(lines) == 2 and "strings.times.json" in lines[0] and "names.layers.json" in lines[1]
    assert "nothing was written" in lines[1]
    assert written(results) == []  # not even the good mnist file: fix or leave out the broken ones, then rerun


def test_a_utf16_log_is_read(tmp_path: Path) -> None:
    """Windows PowerShell's `>` writes UTF-16 with a byte-order mark."""
    path = tmp_path / "mnist_utf16.log"
    path.write_bytes(MNIST.read_text().encode("utf-16"))
    results = tmp_path / "results"
    assert ingest(path, "--results", results) == 0
    assert Warehouse(results).connect().execute("SELECT throughput_qps FROM measurements").fetchone() == (6430.89,)


def test_a_failed_write_leaves_no_partial_cell(tmp_path: Path, capsys, monkeypatch) -> None:
    import farm.warehouse.store

    real = farm.warehouse.store.write_parquet

    def failing(table, path: Path) -> None:
        if path.parent.name == "cells":
            raise OSError(28, "No space left on device")
        real(table, path)

    monkeypatch.setattr(farm.warehouse.store, "write_parquet", failing)
    results = tmp_path / "results"
    assert ingest(*RESNET, "--results", results) == 2  # builds, measurements, layers and devices went first
    (line,) = error_lines(capsys)
    assert "No space left on device" in line
    assert written(results) == [] and not list(results.rglob("*.tmp"))


def test_brackets_in_names_and_paths_are_printed_as_text_and_the_ingest_is_whole(tmp_path: Path, capsys) -> None:
    """A path or engine name holding rich markup (`[/b]`, `[b]`) is printed as it is, not read as
    markup: no MarkupError after the write, no bracket eaten."""
    import shutil

    from farm.cli import main

    (tmp_path / "run[").mkdir()
    log = tmp_path / "run[" / "b].log"
    shutil.copyfile(MNIST, log)
    results = tmp_path / "r[" / "x]"
    assert main(["ingest", str(log), "--results", str(results), "--engine", "e[b]x[/b]"]) == 0
    out = capsys.readouterr().out
    assert "e[b]x[/b] -> sweep ingested" in out and "run[/b].log: log: performance summary" in out
    assert Warehouse(results).connect().execute("SELECT count(*) FROM cells").fetchall() == [(1,)]
