"""The sweep's progress lines: one line per cell, a reason said once, an ETA paced by measured cells."""

from __future__ import annotations

from types import SimpleNamespace

from rich.console import Console

from farm.display import ProgressDisplay
from farm.records import CellResult

ADVICE = ("TensorRT is not installed here: install TensorRT 10 or 11 for your CUDA (pip install tensorrt-cu12 or "
          "tensorrt-cu13, from NVIDIA's package index) on a machine with an NVIDIA GPU")


def test_a_reason_is_said_once_and_cells_not_run_leave_the_etas_count() -> None:
    console = Console(record=True, width=100, force_terminal=False)
    display = ProgressDisplay(console)
    cells = [SimpleNamespace(cell_id=f"{i:016x}", label=f"m fp32 b{i} tensorrt") for i in range(4)]
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
