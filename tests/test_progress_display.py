"""The sweep's progress lines: one line per cell, a reason said once, an ETA paced by measured cells."""

from __future__ import annotations

from rich.console import Console

from farm.display import ProgressDisplay
from farm.records import CellResult
from tests.conftest import plain_cell

ADVICE = ("TensorRT is not installed here: install TensorRT 10 or 11 for your CUDA (pip install tensorrt-cu12 or "
          "tensorrt-cu13, from NVIDIA's package index) on a machine with an NVIDIA GPU")


def test_a_reason_is_said_once_and_cells_not_run_leave_the_etas_count() -> None:
    console = Console(record=True, width=100, force_terminal=False)
    display = ProgressDisplay(console)
    cells = [plain_cell(f"{i:016x}", backend="tensorrt", batch=i) for i in range(4)]
    display.on_sweep_start(cells)
    for cell in cells[:3]:
        display.on_cell_result(cell, CellResult(cell.cell_id, "skipped", reason=ADVICE))
    task = display.progress.tasks[display.task]
    assert (task.total, task.completed) == (1, 0)  # three cells done at once: not in the pace
    display.on_cell_result(cells[3], CellResult(cells[3].cell_id, "ok", measurement={
        "throughput_qps": 100.0, "latency_median_ms": 10.0, "latency_p99_ms": 12.0}))
    display.on_sweep_end()
    text = console.export_text()
    assert text.count("TensorRT is not installed here") == 1, text
    assert text.count("as 00000000") == 2, text  # the later cells name the first one with that reason
    assert (task.total, task.completed) == (1, 1)


def test_cells_that_differ_only_in_an_option_read_apart() -> None:
    """Two cells of one model, precision and batch on one backend, one in eager mode and one in CUDA
    graphs, print as the end-of-sweep table names them, not as one label twice."""
    console = Console(record=True, width=120, force_terminal=False)
    display = ProgressDisplay(console)
    cells = [plain_cell(f"{i:016x}", "resnet50", "torch", {"device": "cuda", "mode": mode})
             for i, mode in enumerate(("eager", "cudagraphs"))] + [
        plain_cell("f" * 16, "resnet50", "onnxruntime", {"device": "cuda"})]
    display.on_sweep_start(cells)
    for cell in cells:
        display.on_cell_result(cell, CellResult(cell.cell_id, "ok", measurement={
            "throughput_qps": 100.0, "latency_median_ms": 10.0, "latency_p99_ms": 12.0}))
    display.on_sweep_end()
    lines = [line for line in console.export_text().splitlines() if line.startswith("ok")]
    assert [line[len("ok"):].strip().split("  ")[0] for line in lines] == [
        "resnet50 fp32 b1 torch mode=eager", "resnet50 fp32 b1 torch mode=cudagraphs", "resnet50 fp32 b1 onnxruntime"], lines
