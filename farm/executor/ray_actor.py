"""The Ray actor of the farm: one per GPU or per node's CPU, running its cells in a cell process.

It runs on the worker's node: it sizes the thread pools to the node's cores, writes the model
the driver shipped where the node cannot see the driver's file, and reports how each cell
ended (a CellResult, or a CellDeath with a fresh cell process ready for the next cell).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from farm.cpus import TIMING_CPUS_VARIABLE, cpu_list, timing_and_shared_cores
from farm.errors import describe
from farm.executor import MemoryLimit
from farm.executor.cell_process import CellDeath, CellProcess
from farm.files import write_atomic
from farm.records import Cell, CellResult


class CellWorker:
    """The actor: hands cells one at a time to its cell process, on the device Ray gave it."""

    def __init__(self, kind: str, log_queue, memory_limit: MemoryLimit, workers_on_node: int,
                 cell_timeout_s: float | None = None, warm_up: bool = False,
                 core_share: tuple[int, int] = (0, 1)) -> None:
        import psutil

        self.kind = kind
        self.log_queue = log_queue
        self.core_set = _take_cores(*core_share, timing_cores=kind == "cuda")  # before the cell process starts
        self.cores = len(self.core_set)
        self.memory_limit_bytes = memory_limit.for_worker(psutil.virtual_memory().total, workers_on_node)
        # warm_up: each cell process opens the GPU and imports the engines as it starts (before its
        # first cell arrives), so a GPU's first cell is not seconds slower than the others
        self.cells = CellProcess(self.memory_limit_bytes, cell_timeout_s, warm_up=kind if warm_up else None,
                                 prestart_replacement=kind == "cuda")
        try:
            self.cells.start()  # now, so the first cell does not wait for it
        except RuntimeError:  # killed while starting: run() starts another
            pass

    def describe(self) -> dict[str, Any]:
        import socket

        import ray

        return {
            "kind": self.kind, "pid": os.getpid(), "cell_pid": self.cells.pid, "host": socket.gethostname(),
            "node_id": ray.get_runtime_context().get_node_id(),
            "gpu_ids": [str(g) for g in ray.get_gpu_ids()],
            "visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "cpu_cores": self.cores,
            "cpu_set": cpu_list(self.core_set),
            "timing_cpus": os.environ.get(TIMING_CPUS_VARIABLE),
            "omp_threads": os.environ.get("OMP_NUM_THREADS"),
            "memory_limit_bytes": self.memory_limit_bytes,
        }

    def run(self, cell: Cell, cache_dir: str, model_ref: list) -> CellResult | CellDeath:
        cell = with_local_model(cell, Path(cache_dir), model_ref)

        def log(message: str) -> None:
            try:
                self.log_queue.put_nowait((cell.cell_id, message))
            except Exception:  # noqa: BLE001 - a full or gone queue must not fail the cell
                pass

        if not self.cells.alive():
            for tries_left in reversed(range(3)):
                try:
                    self.cells.start()
                    break
                except RuntimeError as exc:
                    if not tries_left:
                        return CellDeath(f"the cell process could not be started: {exc}", worker=self.describe())
        description = self.describe()  # before the cell: which process runs it
        outcome = self.cells.run(cell, Path(cache_dir), log)
        if isinstance(outcome, CellResult):
            outcome.worker = description
        else:  # ready for the next cell, and the driver learns the new process's pid
            try:
                self.cells.start()
            except Exception:  # noqa: BLE001 - tried again before the next cell
                pass
            outcome.worker = self.describe()
        return outcome

    def stop(self) -> None:
        self.cells.stop()


def _take_cores(index: int, workers: int, timing_cores: bool = False) -> list[int]:
    """Split the node's cores between its `workers` workers of a kind before any engine is imported,
    and size CPU thread pools to what this one (worker `index`) may use; returns its cores.

    `timing_cores` (GPU workers): the worker gets a few cores of its own (whole physical cores),
    where its cells' timed loops run (farm.measure keeps the timing thread there, through
    TIMING_CPUS_VARIABLE), and shares the rest of the node with the node's other workers for what
    is not timed: torch.compile's and engine builds' workers, imports, the replacement process
    warming up, layer profiling, accuracy runs. So neither another GPU's compile nor this worker's
    own untimed work runs on the cores a measurement is taken on, and a compile running alone has
    most of the host. FARM_CORE_SPLIT=slices gives each worker a contiguous slice of its own instead,
    as farm did before (to measure the two against each other: docs/running.md). CPU workers keep
    every core: their engine's threads are the measurement.

    Why split at all: on 4 H200s of one host (64 cores), cells measured while another GPU's
    torch.compile filled every core were slower wherever the host sets the pace (ResNet-50 fp16 b1
    compile 2.42 -> 7.03 ms, b32 eager +16-20 %) than the same cells on one GPU alone.
    Ray sets OMP_NUM_THREADS=1 in actors that reserve no CPUs, which would make CPU-side PyTorch
    single-threaded: the pools are sized to the cores instead.
    """
    os.environ.pop(TIMING_CPUS_VARIABLE, None)
    if not hasattr(os, "sched_setaffinity"):  # not Linux: no affinity to set; every core
        cores = list(range(os.cpu_count() or 1))
    else:
        cores = sorted(os.sched_getaffinity(0))
        if os.environ.get("FARM_CORE_SPLIT") == "slices":
            if workers > 1 and len(cores) >= workers:
                size = len(cores) / workers
                cores = cores[round(index * size):round((index + 1) * size)]
        elif timing_cores and len(cores) > 1:
            timing, shared = timing_and_shared_cores(cores, index, workers)
            os.environ[TIMING_CPUS_VARIABLE] = cpu_list(timing)
            cores = sorted(set(timing + shared))
        os.sched_setaffinity(0, cores)
    for variable in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "TORCHINDUCTOR_COMPILE_THREADS"):
        os.environ[variable] = str(len(cores))
    return cores


def shipped_models(cells: list[Cell], put: Callable[[bytes], Any]) -> tuple[list[Cell], dict[str, Any]]:
    """(the cells, each model's bytes put in Ray's object store by sha256): what with_local_model
    writes on a node that cannot see the driver's file. A model file that cannot be read any more
    (moved or deleted since planning) fails its cells with why; the sweep goes on."""
    refs: dict[str, Any] = {}
    unreadable: dict[str, str] = {}  # by sha256, until another file of the same bytes is read
    tried: set[Path] = set()
    for cell in cells:
        model = cell.model
        if model.error or model.onnx_error or model.sha256 in refs or model.path in tried:
            continue
        tried.add(model.path)
        try:
            refs[model.sha256] = put(model.path.read_bytes())
            unreadable.pop(model.sha256, None)
        except OSError as exc:
            unreadable.setdefault(model.sha256, f"the model file {model.path} could not be read when its cells were "
                                                f"sent to the workers ({describe(exc)}): was it moved or deleted during "
                                                "the sweep? Restore it and run the sweep again")
    cells = [dataclasses.replace(c, model=dataclasses.replace(c.model, error=unreadable[c.model.sha256]))
             if c.model.sha256 in unreadable else c for c in cells]
    return cells, refs


def with_local_model(cell: Cell, cache_dir: Path, model_ref: list) -> Cell:
    """Use the driver's model file where this node can see it, else write the shipped bytes."""
    path = cell.model.path
    if cell.model.error or cell.model.onnx_error or (path.is_file() and path.stat().st_size == cell.model.size_bytes):
        return cell
    import ray

    local = cache_dir / "models" / f"{cell.model.sha256}.onnx"
    if not local.is_file():
        write_atomic(local, ray.get(model_ref[0]), make_parents=True)
    return dataclasses.replace(cell, model=dataclasses.replace(cell.model, path=local))
