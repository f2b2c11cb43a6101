"""No single model stops a sweep or floods the terminal: an integer input whose range the model does
not tell plans with a stated default and a note, a model whose export fails fails only its ONNX
cells; libraries' log records and warnings go to the cell's log, never onto the terminal as
"--- Logging error ---" tracebacks. Real sweeps, real exports, the terminal read through capfd."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from farm.cli import main
from farm.config import load_config
from farm.executor.cell_process import CellDeath, CellProcess
from farm.plan import plan_sweep
from farm.warehouse import Warehouse
from tests.conftest import tiny_cnn, write_sweep
from tests.resilience_models import LIBRARY

QUICK = """
[measurement]
warmup_ms = 2
min_iterations = 3
min_duration_ms = 5
repeats = 1
layer_iterations = 0
"""
TORCH_CPU = '[backends.torch]\ndevice = "cpu"\n'
DECODER_NOTE = ("input_ids: its range could not be read from the model (PyTorch could not export it to ONNX, so there is "
                "no graph to read it from); using [0, 2): set inputs.input_ids.range = [lo, hi] to choose")


@pytest.fixture(autouse=True)
def fresh_library_logging():
    """The test library configures its logging on first use, as transformers does: in each test,
    inside the factory that farm runs under its output capture."""
    def reset() -> None:
        root = logging.getLogger(LIBRARY)
        for handler in list(root.handlers):
            root.removeHandler(handler)
        root.propagate = True
    reset()
    yield
    reset()


def cells(results: Path) -> dict[tuple[str, str], tuple]:
    rows = Warehouse(results).connect().execute(
        "SELECT model, backend, status, reason, notes, traceback, cell_id FROM cells").fetchall()
    return {(r[0], r[1]): r[2:] for r in rows}


# --- planning never stops for one model ---------------------------------------------------------

def test_an_unexportable_decoder_without_a_range_fails_only_its_onnx_cells(tmp_path: Path, capfd) -> None:
    tiny_cnn(tmp_path / "tiny.onnx")
    decoder = ('[[models]]\nsource = "module:tests.resilience_models:unexportable_decoder"\n'
               'inputs = { input_ids = { shape = ["batch", 6], dtype = "int64" } }\n')
    body = (f'name = "resilient"\n{decoder}[[models]]\nsource = "tiny.onnx"\n'
            f'[axes]\nbackends = ["torch", "onnxruntime"]\n{TORCH_CPU}{QUICK}')
    config = write_sweep(tmp_path, body)
    results = tmp_path / "results"
    assert main(["sweep", str(config), "--results", str(results), "--executor", "local"]) == 0
    err = capfd.readouterr().err
    assert f"note: models[0] (unexportable_decoder): {DECODER_NOTE}\n" in err  # one line, as it starts
    rows = cells(results)
    status, reason, notes = rows["unexportable_decoder", "torch"][:3]
    assert (status, reason, notes) == ("ok", None, DECODER_NOTE)  # its PyTorch cell runs, on ids in [0, 2)
    status, reason, notes = rows["unexportable_decoder", "onnxruntime"][:3]
    assert status == "unsupported" and reason.startswith(
        "PyTorch could not export module:tests.resilience_models:unexportable_decoder to ONNX (dynamo: ")
    assert rows["tiny", "onnxruntime"][0] == "ok" and rows["tiny", "onnxruntime"][2] is None  # the others run
    (spec,) = next(m for m in plan_sweep(load_config(config), tmp_path / "cache").models
                   if m.name == "unexportable_decoder").inputs
    assert (spec.low, spec.high) == (0.0, 2.0)

    # the range the note asks for, pasted: used, and no note
    config.write_text(body.replace('dtype = "int64"', 'dtype = "int64", range = [0, 50]'))
    plan = plan_sweep(load_config(config), tmp_path / "cache")
    (spec,) = plan.models[0].inputs
    assert (spec.low, spec.high) == (0.0, 50.0) and plan.notes() == []
    assert all(cell.notes is None for cell in plan.cells if cell.model.name == "unexportable_decoder")


def test_an_integer_input_the_graph_says_nothing_of_takes_the_default_with_a_note(tmp_path: Path) -> None:
    """An ONNX file whose int64 input indexes no table and meets no constant in an Equal."""
    import onnx
    from onnx import TensorProto, helper

    nodes = [helper.make_node("Cast", ["n"], ["nf"], to=TensorProto.FLOAT), helper.make_node("Add", ["x", "nf"], ["y"])]
    graph = helper.make_graph(nodes, "count", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4]),
                                               helper.make_tensor_value_info("n", TensorProto.INT64, ["batch", 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, tmp_path / "count.onnx")
    config = write_sweep(tmp_path, '[[models]]\nsource = "count.onnx"\n[axes]\nbackends = ["onnxruntime"]\n' + QUICK)
    plan = plan_sweep(load_config(config), tmp_path / "cache")
    note = ("n: its range could not be read from the model (the graph neither indexes a table with it nor compares it "
            "with a constant); using [0, 2): set inputs.n.range = [lo, hi] to choose")
    assert plan.notes() == [f"models[0] (count): {note}"]
    assert [cell.notes for cell in plan.cells] == [note]
    assert {i.name: (i.low, i.high) for i in plan.models[0].inputs}["n"] == (0.0, 2.0)


# --- libraries' logging goes to the cell's log ----------------------------------------------------

CHATTY = ('name = "chatty"\n[[models]]\nsource = "module:tests.resilience_models:chatty"\n'
          'inputs = { x = { shape = ["batch", 8] } }\n[axes]\nbackends = ["torch", "onnxruntime"]\n' + TORCH_CPU + QUICK)


def check_chatty_sweep(results: Path, err: str) -> None:
    """No logging traceback on the terminal; each cell's records, warnings included, in its log."""
    assert "Logging error" not in err and "Traceback" not in err, err[:3000]
    # only the planner's own forwards (on its example inputs, outside any cell) may print theirs, as plain lines
    assert err.count("CHATTY-RUN-LOG") <= 4, err[:3000]
    rows = cells(results)
    assert {key: row[0] for key, row in rows.items()} == {("chatty", "torch"): "ok", ("chatty", "onnxruntime"): "ok"}
    log = (results / ".cache" / "cell-logs" / f"{rows['chatty', 'torch'][4]}.log").read_text()
    assert "CHATTY-BUILD-LOG: building the module" in log  # the torch cell builds the module itself
    assert "CHATTY-RUN-LOG: forward called" in log  # a library's own handler, made while output was captured
    assert "WARNING farm_test_other.module: CHATTY-RUN-BARE-LOG: forward called" in log  # no handler of its own
    assert "UserWarning: CHATTY-RUN-WARNING: forward call " in log  # warnings.warn


def test_library_logging_goes_to_the_cell_log_locally(tmp_path: Path, capfd) -> None:
    config = write_sweep(tmp_path, CHATTY)
    assert main(["sweep", str(config), "--results", str(tmp_path / "results"), "--executor", "local"]) == 0
    check_chatty_sweep(tmp_path / "results", capfd.readouterr().err)


@pytest.mark.slow
def test_library_logging_goes_to_the_cell_log_through_ray(tmp_path: Path, capfd) -> None:
    pytest.importorskip("ray")
    config = write_sweep(tmp_path, CHATTY)
    assert main(["sweep", str(config), "--results", str(tmp_path / "results")]) == 0
    check_chatty_sweep(tmp_path / "results", capfd.readouterr().err)


def test_a_dead_cell_quotes_the_library_records_it_last_printed(tmp_path: Path) -> None:
    """The library's handler, made inside the cell process's capture of the factory's output, still
    writes there after it: the reason of the cell whose process aborted quotes its record, not
    the lines of a logging traceback."""
    config = write_sweep(tmp_path, '[[models]]\nsource = "module:tests.resilience_models:chatty_then_aborts"\n'
                                   'inputs = { x = { shape = ["batch", 8] } }\n[axes]\nbackends = ["torch"]\n'
                                   + TORCH_CPU + QUICK)
    (cell,) = plan_sweep(load_config(config), tmp_path / "cache").cells
    process = CellProcess()
    try:
        death = process.run(cell, tmp_path / "cache", lambda message: None)
    finally:
        process.stop()
    assert isinstance(death, CellDeath) and death.signal == "SIGABRT", death
    assert "CHATTY-LAST-WORDS: about to abort" in death.reason, death.reason
    assert "Logging error" not in (death.output_tail or ""), death.output_tail
