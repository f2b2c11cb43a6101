"""The Ray farm: one long-lived actor per GPU, one per node for CPU cells.

- A GPU actor asks Ray for `num_gpus=1`, so Ray sets its CUDA_VISIBLE_DEVICES to that GPU alone.
- CPU cells run after the GPU cells of the sweep, on one actor per node, so a CPU measurement
  never shares its host with another measurement.
- Cells are built and measured inside the same actor, so an artifact built on one GPU model is
  measured on that model.
- If an actor dies inside a cell (segfault, OOM kill, os._exit), Ray restarts it and the cell is
  retried up to `max_retries` times, then recorded `failed` with the reason.
- Results come back to the driver, which alone writes the warehouse; model bytes travel through
  Ray's object store, so a cluster needs no shared filesystem.
- Progress lines from actors reach the driver through a queue and are shown tagged with the cell.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import os
from pathlib import Path
from typing import Any

from farm.callbacks import Callback
from farm.plan import Cell
from farm.worker import CellResult, now

POLL_S = 0.2


def use_loopback_only() -> None:
    """Make a local Ray listen on 127.0.0.1 only (it otherwise binds the host's address on every
    interface). Ray reads this switch, meant for single-machine use, when it is first imported."""
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")


class CellWorker:
    """The actor: runs cells one at a time on the device Ray gave it."""

    def __init__(self, kind: str, log_queue) -> None:
        self.kind = kind
        self.log_queue = log_queue
        self.cores = _size_thread_pools()

    def describe(self) -> dict[str, Any]:
        import socket

        import ray

        return {
            "kind": self.kind, "pid": os.getpid(), "host": socket.gethostname(),
            "node_id": ray.get_runtime_context().get_node_id(),
            "gpu_ids": [str(g) for g in ray.get_gpu_ids()],
            "visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "cpu_cores": self.cores,
            "omp_threads": os.environ.get("OMP_NUM_THREADS"),
        }

    def run(self, cell: Cell, cache_dir: str, model_ref: list) -> CellResult:
        from farm.worker import run_cell

        cell = _with_local_model(cell, Path(cache_dir), model_ref)

        def log(message: str) -> None:
            try:
                self.log_queue.put_nowait((cell.cell_id, message))
            except Exception:  # a full or gone queue must not fail the cell
                pass

        result = run_cell(cell, Path(cache_dir), log)
        result.worker = self.describe()
        return result


def _size_thread_pools() -> int:
    """Size CPU thread pools to the host's cores before any engine is imported.

    Ray sets OMP_NUM_THREADS=1 in actors that reserve no CPUs, which would make CPU-side
    PyTorch single-threaded. (Splitting the cores between the GPU actors of a node was tried
    and measured slower for compile-heavy sweeps: compilation wants every core.)
    """
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    for variable in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[variable] = str(cores)
    return cores


def _with_local_model(cell: Cell, cache_dir: Path, model_ref: list) -> Cell:
    """Use the driver's model file where this node can see it, else write the shipped bytes."""
    path = cell.model.path
    if cell.model.error or (path.is_file() and path.stat().st_size == cell.model.size_bytes):
        return cell
    import ray

    local = cache_dir / "models" / f"{cell.model.sha256}.onnx"
    if not local.is_file():
        local.parent.mkdir(parents=True, exist_ok=True)
        tmp = local.with_name(f".{local.name}.{os.getpid()}.tmp")
        tmp.write_bytes(ray.get(model_ref[0]))
        os.replace(tmp, local)
    return dataclasses.replace(cell, model=dataclasses.replace(cell.model, path=local))


class RayExecutor:
    """Runs cells on a Ray cluster: local by default, or an existing one through `address`."""

    def __init__(self, address: str | None = None, max_retries: int = 2, gpus: int | None = None) -> None:
        self.address = address
        self.max_retries = max_retries
        self.gpus = gpus  # use at most this many GPUs (None: all)
        self.workers: list[dict[str, Any]] = []  # describe() of every actor started

    def run(self, cells: list[Cell], cache_dir: Path, callbacks: Callback) -> None:
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        if not self.address:
            use_loopback_only()
        import ray

        started_here = not ray.is_initialized()
        if started_here:
            if self.address:
                ray.init(address=self.address, logging_level=logging.WARNING, log_to_driver=False)
            else:
                ray.init(include_dashboard=False, logging_level=logging.WARNING, log_to_driver=False,
                         configure_logging=False)
        actors = []
        try:
            from ray.util.queue import Queue

            log_queue = Queue(actor_options={"num_cpus": 0})
            model_refs = {}
            for cell in cells:
                if not cell.model.error and cell.model.sha256 not in model_refs:
                    model_refs[cell.model.sha256] = ray.put(cell.model.path.read_bytes())
            gpu_cells = [c for c in cells if c.device_kind == "cuda"]
            gpu_actors = self._start_actors("cuda", log_queue) if gpu_cells else []
            actors += [a for a, _ in gpu_actors]
            # Without GPU actors, CUDA cells go to the CPU actors, which record them as skipped.
            cpu_cells = [c for c in cells if c.device_kind != "cuda" or not gpu_actors]
            if gpu_actors and gpu_cells:
                self._run_phase(gpu_cells, gpu_actors, cache_dir, model_refs, log_queue, callbacks)
            if cpu_cells:
                cpu_actors = self._start_actors("cpu", log_queue)
                actors += [a for a, _ in cpu_actors]
                self._run_phase(cpu_cells, cpu_actors, cache_dir, model_refs, log_queue, callbacks)
        finally:
            for actor in actors:
                ray.kill(actor)
            if started_here:
                ray.shutdown()

    def _start_actors(self, kind: str, log_queue) -> list[tuple[Any, dict[str, Any]]]:
        """Start the actors of one kind on every live node; return (actor, its description) pairs."""
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        remote = ray.remote(CellWorker)
        actors = []
        for node in ray.nodes():
            if not node.get("Alive"):
                continue
            options = {"num_cpus": 0, "max_restarts": -1, "max_task_retries": 0,
                       "scheduling_strategy": NodeAffinitySchedulingStrategy(node["NodeID"], soft=False)}
            if kind == "cpu":
                actors.append(remote.options(**options).remote(kind, log_queue))
                continue
            count = int(node.get("Resources", {}).get("GPU", 0))
            if self.gpus is not None:
                count = min(count, self.gpus - len(actors))
            actors += [remote.options(num_gpus=1, **options).remote(kind, log_queue) for _ in range(count)]
        described = ray.get([a.describe.remote() for a in actors])
        self.workers += described
        return list(zip(actors, described))

    def _run_phase(self, cells: list[Cell], workers: list[tuple[Any, dict[str, Any]]], cache_dir: Path,
                   model_refs: dict, log_queue, callbacks: Callback) -> None:
        import ray
        from ray.exceptions import RayActorError, RayTaskError

        by_id = {c.cell_id: c for c in cells}
        queue = collections.deque((cell, 1) for cell in cells)
        idle = list(workers)
        pending: dict[Any, tuple[Cell, tuple[Any, dict[str, Any]], int]] = {}
        while queue or pending:
            while idle and queue:
                worker = idle.pop(0)
                cell, attempt = queue.popleft()
                callbacks.on_cell_start(cell, worker[1])
                ref = worker[0].run.remote(cell, str(cache_dir), [model_refs.get(cell.model.sha256)])
                pending[ref] = (cell, worker, attempt)
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=POLL_S)
            self._drain_logs(log_queue, by_id, callbacks)
            for ref in ready:
                cell, worker, attempt = pending.pop(ref)
                try:
                    result = ray.get(ref)
                    idle.append(worker)
                except RayActorError as exc:
                    # Ray restarts the actor behind the same handle, in a new process.
                    worker = (worker[0], ray.get(worker[0].describe.remote()))
                    idle.append(worker)
                    if attempt <= self.max_retries:
                        callbacks.on_cell_log(cell, f"worker died during the cell (attempt {attempt}); retrying")
                        queue.appendleft((cell, attempt + 1))
                        continue
                    result = _crashed(cell, attempt, exc)
                except RayTaskError as exc:  # run_cell never raises; this is a bug or a pickling error
                    idle.append(worker)
                    result = _crashed(cell, attempt, exc)
                callbacks.on_cell_result(cell, result)
        self._drain_logs(log_queue, by_id, callbacks)

    @staticmethod
    def _drain_logs(log_queue, by_id: dict[str, Cell], callbacks: Callback) -> None:
        while True:
            try:
                batch = log_queue.get_nowait_batch(log_queue.qsize())
            except Exception:
                return
            if not batch:
                return
            for cell_id, message in batch:
                if cell_id in by_id:
                    callbacks.on_cell_log(by_id[cell_id], message)


def _crashed(cell: Cell, attempts: int, exc: BaseException) -> CellResult:
    from farm.provenance import farm_commit, host_info, library_versions

    first = (str(exc).strip().splitlines() or ["(no message)"])[0][:300]
    return CellResult(
        cell.cell_id, "failed",
        reason=(f"the worker process died during this cell {attempts} time(s) (crash, out-of-memory kill or "
                f"signal): {first}"),
        traceback=str(exc), started_at=now(), finished_at=now(), host=host_info(),
        versions=library_versions(), farm_commit=farm_commit(),
    )
