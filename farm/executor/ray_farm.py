"""The Ray farm: one long-lived actor per GPU, one per node for CPU cells.

- A GPU actor asks Ray for `num_gpus=1`, so Ray sets its CUDA_VISIBLE_DEVICES to that GPU alone.
- CPU cells run after the GPU cells of the sweep, on one actor per node, so a CPU measurement
  never shares its host with another measurement.
- Cells are built and measured inside the same actor's cell process (cell_process.py), so an
  artifact built on one GPU model is measured on that model.
- A cell whose process dies (segfault, SIGKILL, the kernel's OOM killer, or the worker's own
  memory limit) is retried on a fresh process up to `max_retries` times, then recorded `failed`
  with how it died. An actor that dies itself (killed, Ray's memory monitor, its node lost) is
  replaced by a fresh actor on the same node and the cell retried the same way. The sweep goes on.
- Results come back to the driver, which alone writes the warehouse; model bytes travel through
  Ray's object store, so a cluster needs no shared filesystem.
- Progress lines from actors reach the driver through a queue and are shown tagged with the cell.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import logging
import os
from pathlib import Path
from typing import Any

from farm.callbacks import Callback
from farm.files import write_atomic
from farm.executor import MemoryLimit
from farm.executor.cell_process import CellDeath, CellProcess
from farm.plan import Cell
from farm.worker import CellResult, now

POLL_S = 0.2
ACTOR_START_TIMEOUT_S = 300.0  # a GPU actor may wait for its predecessor's GPU to be released
ACTOR_START_TRIES = 3


def use_loopback_only() -> None:
    """Make a local Ray listen on 127.0.0.1 only (it otherwise binds the host's address on every
    interface). Ray reads this switch, meant for single-machine use, when it is first imported."""
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")


class CellWorker:
    """The actor: hands cells one at a time to its cell process, on the device Ray gave it."""

    def __init__(self, kind: str, log_queue, memory_limit: MemoryLimit, workers_on_node: int,
                 cell_timeout_s: float | None = None) -> None:
        import psutil

        self.kind = kind
        self.log_queue = log_queue
        self.cores = _size_thread_pools()  # before the cell process starts: it inherits the settings
        self.memory_limit_bytes = memory_limit.for_worker(psutil.virtual_memory().total, workers_on_node)
        self.cells = CellProcess(self.memory_limit_bytes, cell_timeout_s)
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
            "omp_threads": os.environ.get("OMP_NUM_THREADS"),
            "memory_limit_bytes": self.memory_limit_bytes,
        }

    def run(self, cell: Cell, cache_dir: str, model_ref: list) -> CellResult | CellDeath:
        cell = _with_local_model(cell, Path(cache_dir), model_ref)

        def log(message: str) -> None:
            try:
                self.log_queue.put_nowait((cell.cell_id, message))
            except Exception:  # a full or gone queue must not fail the cell
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
            except Exception:  # tried again before the next cell
                pass
            outcome.worker = self.describe()
        return outcome

    def stop(self) -> None:
        self.cells.stop()


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
        write_atomic(local, ray.get(model_ref[0]), make_parents=True)
    return dataclasses.replace(cell, model=dataclasses.replace(cell.model, path=local))


@dataclasses.dataclass
class _Slot:
    """A place for one actor: a GPU of a node, or a node's CPU. Its actor is replaced when it dies."""

    kind: str
    node_id: str
    workers_on_node: int
    actor: Any = None
    description: dict[str, Any] = dataclasses.field(default_factory=dict)
    start_error: str | None = None


@dataclasses.dataclass
class _Attempt:
    cell: Cell
    number: int = 1
    deaths: list[CellDeath] = dataclasses.field(default_factory=list)
    started_at: Any = None  # when the first attempt was handed to a worker
    worker: dict[str, Any] | None = None  # the worker of the latest attempt


class RayExecutor:
    """Runs cells on a Ray cluster: local by default, or an existing one through `address`."""

    def __init__(self, address: str | None = None, max_retries: int = 2, gpus: int | None = None,
                 memory_limit: MemoryLimit | None = None, cell_timeout_s: float | None = None) -> None:
        self.address = address
        self.max_retries = max_retries
        self.gpus = gpus  # use at most this many GPUs (None: all)
        self.memory_limit = memory_limit or MemoryLimit()
        self.cell_timeout_s = cell_timeout_s
        self.start_errors: list[str] = []  # why actors that never started did not
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
        _terminate_like_ctrl_c()
        slots: list[_Slot] = []
        try:
            from ray.util.queue import Queue

            log_queue = Queue(actor_options={"num_cpus": 0})
            model_refs = {}
            for cell in cells:
                if not cell.model.error and cell.model.sha256 not in model_refs:
                    model_refs[cell.model.sha256] = ray.put(cell.model.path.read_bytes())
            gpu_cells = [c for c in cells if c.device_kind == "cuda"]
            gpu_slots = self._start_slots("cuda", log_queue) if gpu_cells else []
            slots += gpu_slots
            # Without GPU actors, CUDA cells go to the CPU actors, which record them as skipped.
            cpu_cells = [c for c in cells if c.device_kind != "cuda" or not gpu_slots]
            if gpu_slots and gpu_cells:
                self._run_phase(gpu_cells, gpu_slots, cache_dir, model_refs, log_queue, callbacks)
            if cpu_cells:
                cpu_slots = self._start_slots("cpu", log_queue)
                slots += cpu_slots
                self._run_phase(cpu_cells, cpu_slots, cache_dir, model_refs, log_queue, callbacks)
        finally:
            stopping = [s.actor.stop.remote() for s in slots if s.actor is not None]
            if stopping:
                ray.wait(stopping, num_returns=len(stopping), timeout=10)  # cell processes end with their group
            for slot in slots:
                if slot.actor is not None:
                    ray.kill(slot.actor)
            if started_here:
                ray.shutdown()

    # --- actors -----------------------------------------------------------------------------------

    def _start_slots(self, kind: str, log_queue) -> list[_Slot]:
        """One slot per GPU (kind 'cuda') or per node ('cpu') of every live node, each with a started actor."""
        import ray

        slots = []
        for node in ray.nodes():
            if not node.get("Alive"):
                continue
            count = 1 if kind == "cpu" else int(node.get("Resources", {}).get("GPU", 0))
            if kind == "cuda" and self.gpus is not None:
                count = min(count, self.gpus - len(slots))
            slots += [_Slot(kind, node["NodeID"], count) for _ in range(count)]
        for slot in slots:
            self._launch(slot, log_queue)
        self._await_started(slots, log_queue)
        return [s for s in slots if s.actor is not None]

    def _launch(self, slot: _Slot, log_queue) -> None:
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        # No restarts by Ray: a dead actor is replaced by a fresh one here (_replace), so the
        # driver never talks to an actor that is half restarted.
        options = {"num_cpus": 0, "max_restarts": 0, "max_task_retries": 0,
                   "scheduling_strategy": NodeAffinitySchedulingStrategy(slot.node_id, soft=False)}
        if slot.kind == "cuda":
            options["num_gpus"] = 1
        slot.actor = _remote_worker().options(**options).remote(
            slot.kind, log_queue, self.memory_limit, slot.workers_on_node, self.cell_timeout_s)

    def _await_started(self, slots: list[_Slot], log_queue) -> None:
        """Wait for the actors to describe themselves; relaunch those that fail, a few times."""
        import ray

        waiting = list(slots)
        for attempt in range(ACTOR_START_TRIES):
            refs = {s.actor.describe.remote(): s for s in waiting}
            ready, _ = ray.wait(list(refs), num_returns=len(refs), timeout=ACTOR_START_TIMEOUT_S)
            failed = []
            for ref, slot in refs.items():
                try:
                    if ref not in ready:
                        raise TimeoutError(f"no answer within {ACTOR_START_TIMEOUT_S:.0f} s")
                    slot.description = ray.get(ref)
                    slot.start_error = None
                    self.workers.append(slot.description)
                except Exception as exc:  # died while starting, or never scheduled
                    slot.start_error = _first_line(exc)
                    _kill_quietly(slot.actor)
                    failed.append(slot)
            if not failed:
                return
            waiting = failed
            if attempt + 1 < ACTOR_START_TRIES:
                for slot in waiting:
                    self._launch(slot, log_queue)
        for slot in waiting:
            slot.actor = None  # gone for good; the phase goes on with the others
            self.start_errors.append(f"a {slot.kind} worker could not be started: {slot.start_error}")

    def _replace(self, slot: _Slot, log_queue) -> None:
        """A fresh actor in place of one that died."""
        _kill_quietly(slot.actor)
        self._launch(slot, log_queue)
        self._await_started([slot], log_queue)

    # --- cells ------------------------------------------------------------------------------------

    def _run_phase(self, cells: list[Cell], slots: list[_Slot], cache_dir: Path,
                   model_refs: dict, log_queue, callbacks: Callback) -> None:
        import ray
        from ray.exceptions import RayActorError, RayError, RayTaskError

        by_id = {c.cell_id: c for c in cells}
        queue = collections.deque(_Attempt(cell) for cell in cells)
        idle = list(slots)
        pending: dict[Any, tuple[_Attempt, _Slot]] = {}
        while queue or pending:
            while idle and queue:
                slot = idle.pop(0)
                attempt = queue.popleft()
                attempt.started_at = attempt.started_at or now()
                attempt.worker = slot.description
                callbacks.on_cell_start(attempt.cell, slot.description)
                ref = slot.actor.run.remote(attempt.cell, str(cache_dir), [model_refs.get(attempt.cell.model.sha256)])
                pending[ref] = (attempt, slot)
            if not pending:  # cells left, no worker left to run them
                reason = "no worker left to run this cell: " + "; ".join(
                    sorted(set(self.start_errors)) or ["every worker failed to start"])
                while queue:
                    attempt = queue.popleft()
                    callbacks.on_cell_result(attempt.cell, _crashed(attempt, reason))
                break
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=POLL_S)
            self._drain_logs(log_queue, by_id, callbacks)
            for ref in ready:
                attempt, slot = pending.pop(ref)
                try:
                    outcome = ray.get(ref)
                except RayTaskError as exc:  # run_cell never raises: a bug, or a result that cannot travel
                    callbacks.on_cell_result(attempt.cell, _crashed(attempt, f"the worker failed: {_first_line(exc)}",
                                                                    traceback=str(exc)))
                    idle.append(slot)
                    continue
                except (RayActorError, RayError) as exc:  # the actor itself died: killed, Ray OOM, node lost
                    outcome = _actor_death(exc)
                    self._replace(slot, log_queue)
                if slot.actor is not None:
                    if getattr(outcome, "worker", None):
                        slot.description = outcome.worker
                    idle.append(slot)
                if isinstance(outcome, CellDeath):
                    attempt.deaths.append(outcome)
                    if attempt.number <= self.max_retries and outcome.retry:
                        callbacks.on_cell_log(attempt.cell, f"worker died during the cell (attempt {attempt.number}: "
                                                            f"{outcome.reason}); retrying on a fresh process")
                        queue.appendleft(_Attempt(attempt.cell, attempt.number + 1, attempt.deaths, attempt.started_at))
                        continue
                    outcome = _crashed(attempt, "")
                else:
                    outcome.attempts = attempt.number
                    outcome.earlier_attempts = [d.reason for d in attempt.deaths]
                callbacks.on_cell_result(attempt.cell, outcome)
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


@functools.cache
def _remote_worker():
    import ray

    return ray.remote(CellWorker)


def _terminate_like_ctrl_c() -> None:
    """SIGTERM ends the sweep as Ctrl-C does (the cleanup below runs, one line, resumable), rather
    than through the crash handler Ray's core installs, which prints a C++ stack."""
    import signal
    import threading

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, interrupt)


def _first_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    return (lines[0] if lines else type(exc).__name__)[:300]


def _actor_death(exc: BaseException) -> CellDeath:
    """Ray's account of an actor's death, as one line."""
    text = str(exc)
    if "memory monitor" in text or "OutOfMemoryError" in text or "low on memory" in text:
        return CellDeath("out of memory: Ray's memory monitor killed the worker (the node ran low on memory); "
                         "lower --worker-memory or the batch size", out_of_memory=True, retry=False)
    return CellDeath(f"the worker actor died ({_first_line(exc)})", signal="actor died")


def _kill_quietly(actor) -> None:
    import ray

    if actor is None:
        return
    try:
        ray.kill(actor, no_restart=True)
    except Exception:  # already gone
        pass


def _crashed(attempt: _Attempt, reason: str, traceback: str | None = None) -> CellResult:
    """The failed result of a cell no attempt of which returned one. Host and worker are those of
    its last attempt; library versions are unknown (the process that would have said is gone)."""
    from farm.provenance import farm_commit

    deaths = attempt.deaths
    worker = attempt.worker or next((d.worker for d in reversed(deaths) if d.worker), None)
    if deaths:
        kinds = collections.Counter(d.kind for d in deaths)
        reason = deaths[0].reason if len(deaths) == 1 else f"the cell's worker died {len(deaths)} time(s)"
        if len(kinds) > 1:
            reason += " (" + ", ".join(f"{n}x {kind}" for kind, n in kinds.most_common()) + ")"
        if len(deaths) > 1:
            reason += f"; last: {deaths[-1].reason}"
        if not deaths[-1].retry:
            reason += (" (not retried: it would grow as far again)" if deaths[-1].out_of_memory else
                       " (not retried: it would likely time out again)" if deaths[-1].timed_out else " (not retried)")
    return CellResult(
        attempt.cell.cell_id, "failed", reason=reason[:1000], attempts=attempt.number,
        earlier_attempts=[d.reason for d in deaths[:-1]],
        traceback=traceback or "\n".join(f"attempt {i}: {d.reason}" for i, d in enumerate(deaths, 1)) or None,
        started_at=attempt.started_at or now(), finished_at=now(), worker=worker,
        host={"host": worker["host"]} if worker and worker.get("host") else {}, farm_commit=farm_commit(),
    )
