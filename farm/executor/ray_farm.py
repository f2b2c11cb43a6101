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
- Cells start longest expected first (`expected_s`, farm.executor.costs). A cell pinned to a GPU
  model (`accelerator_type`) runs only on a GPU of a node that offers Ray's resource
  `accelerator_type:<MODEL>` (Ray sets it from the GPU's name; `ray start --resources` can too).

Which cell runs where, and what each outcome means (retries), is farm.scheduler's to decide;
this module starts the actors (ray_actor.py), submits cells, waits, and reports outcomes.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
from pathlib import Path
from typing import Any

from farm.errors import first_line
from farm.executor import CellEvents, MemoryLimit
from farm.executor.cell_process import CellDeath
from farm.executor.deaths import LOW_MEMORY_WORDS, actor_death, await_node_memory, node_memory_threshold
from farm.executor.ray_actor import CellWorker, shipped_models
from farm.records import Cell, CellResult, now
from farm.scheduler import (
    Attempt,
    CellScheduler,
    Died,
    Failed,
    Finished,
    Raised,
    Retry,
    Returned,
    Start,
    Stranded,
    failure_reason,
)

POLL_S = 0.2
ACTOR_START_TIMEOUT_S = 300.0  # a GPU actor may wait for its predecessor's GPU to be released
ACTOR_START_TRIES = 3
ACCELERATOR_PREFIX = "accelerator_type:"  # Ray's node resource naming the GPU model, e.g. accelerator_type:H100
# The local Ray farm starts: no idle task workers started ahead for the driver (Ray starts one per CPU, which import
# Ray and wake every few seconds: ~16 processes beside the timed cell on a 16-core host); farm runs only actors.
RAY_SYSTEM_CONFIG = {"prestart_worker_first_driver": False}


def use_loopback_only() -> None:
    """A local Ray on 127.0.0.1 only (not the host's address on every interface), with token authentication (its
    default for a new local cluster, asked for by name: no notice on every sweep). Ray reads both when first imported."""
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    os.environ.setdefault("RAY_AUTH_MODE", "token")


@dataclasses.dataclass(eq=False)  # hashed by identity: the scheduler's slot keys
class _Slot:
    """A place for one actor: a GPU of a node, or a node's CPU. Its actor is replaced when it dies."""

    kind: str
    node_id: str
    workers_on_node: int
    accelerators: frozenset[str] = frozenset()  # the node's `accelerator_type:<MODEL>` resources
    index_on_node: int = 0  # which of the node's slots of its kind: which share of the node's cores
    actor: Any = None
    description: dict[str, Any] = dataclasses.field(default_factory=dict)
    start_error: str | None = None


class RayExecutor:
    """Runs cells on a Ray cluster: local by default, or an existing one through `address`."""

    def __init__(self, address: str | None = None, max_retries: int = 2, gpus: int | None = None,
                 memory_limit: MemoryLimit | None = None, cell_timeout_s: float | None = None,
                 expected_s: dict[str, float] | None = None) -> None:
        self.address = address
        self.expected_s = expected_s  # per cell id, for the longest-first order (None: the plan's order)
        self.max_retries = max_retries
        self.gpus = gpus  # use at most this many GPUs (None: all)
        self.memory_limit = memory_limit or MemoryLimit()
        self.cell_timeout_s = cell_timeout_s
        self.start_errors: list[str] = []  # why actors that never started did not
        self.workers: list[dict[str, Any]] = []  # describe() of every actor started
        self._slots: list[_Slot] = []  # every slot started, for close()
        self._gpu_slots: list[_Slot] | None = None  # None: not started yet
        self._log_queue: Any = None
        self._started_ray = False

    def start_gpu_workers(self) -> None:
        """Start Ray and the GPU actors now, before the cells are known (farm.sweep calls this while
        it plans): each actor's cell process then imports the engines and opens its GPU's CUDA
        context while the driver generates models, instead of inside every GPU's first cell.
        Nothing else changes: `run` uses these actors, and stops them like its own."""
        self._ensure_ray()
        if self._gpu_slots is None:
            self._gpu_slots = self._start_slots("cuda", self._log_queue)

    def run(self, cells: list[Cell], cache_dir: Path, callbacks: CellEvents) -> None:
        try:
            self._ensure_ray()
            import ray

            cells, model_refs = shipped_models(cells, ray.put)
            gpu_cells = [c for c in cells if c.device_kind == "cuda"]
            if gpu_cells and self._gpu_slots is None:
                self._gpu_slots = self._start_slots("cuda", self._log_queue)
            gpu_slots = self._gpu_slots or []
            if not gpu_cells and gpu_slots:  # started early, and no cell wants them: free the GPUs
                self._stop_slots(gpu_slots)
                gpu_slots = []
            # Without GPU actors, CUDA cells go to the CPU actors, which record them as skipped.
            cpu_cells = [c for c in cells if c.device_kind != "cuda" or not gpu_slots]
            if gpu_slots and gpu_cells:
                self._run_phase(gpu_cells, gpu_slots, cache_dir, model_refs, self._log_queue, callbacks)
            if cpu_cells:
                cpu_slots = self._start_slots("cpu", self._log_queue)
                self._run_phase(cpu_cells, cpu_slots, cache_dir, model_refs, self._log_queue, callbacks)
        finally:
            self.close()

    def close(self) -> None:
        """Stop every actor started, and Ray where this executor started it. Idempotent."""
        self._stop_slots(self._slots)
        self._slots, self._gpu_slots = [], None
        if self._started_ray:
            import ray

            self._started_ray = False
            ray.shutdown()

    def _ensure_ray(self) -> None:
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        joining = self.address not in (None, "", "local")  # else a Ray of its own ("local": the same)
        if not joining:
            use_loopback_only()
        import ray

        if self._log_queue is not None:
            return
        if not ray.is_initialized():
            self._started_ray = True
            # "local": its own Ray even beside a `ray start` cluster (Ray would join that, refusing these)
            own = {} if joining else {"include_dashboard": False, "configure_logging": False,
                                      "_system_config": RAY_SYSTEM_CONFIG}
            ray.init(address=self.address if joining else "local", logging_level=logging.WARNING, log_to_driver=False, **own)
        _terminate_like_ctrl_c()
        from ray.util.queue import Queue

        self._log_queue = Queue(actor_options={"num_cpus": 0})

    @staticmethod
    def _stop_slots(slots: list[_Slot]) -> None:
        import ray

        stopping = [s.actor.stop.remote() for s in slots if s.actor is not None]
        if stopping:
            ray.wait(stopping, num_returns=len(stopping), timeout=10)  # cell processes end with their group
        for slot in slots:
            if slot.actor is not None:
                ray.kill(slot.actor)
                slot.actor = None

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
            accelerators = frozenset(k.split(":", 1)[1] for k in node.get("Resources", {})
                                     if k.startswith(ACCELERATOR_PREFIX) and kind == "cuda")
            slots += [_Slot(kind, node["NodeID"], count, accelerators, index_on_node=i) for i in range(count)]
        for slot in slots:
            self._launch(slot, log_queue)
        self._slots += slots
        self._await_started(slots, log_queue)
        return [s for s in slots if s.actor is not None]

    def _launch(self, slot: _Slot, log_queue) -> None:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        # No restarts by Ray: a dead actor is replaced by a fresh one here (_replace), so the
        # driver never talks to an actor that is half restarted.
        options = {"num_cpus": 0, "max_restarts": 0, "max_task_retries": 0,
                   "scheduling_strategy": NodeAffinitySchedulingStrategy(slot.node_id, soft=False)}
        if slot.kind == "cuda":
            options["num_gpus"] = 1
        slot.actor = _remote_worker().options(**options).remote(
            slot.kind, log_queue, self.memory_limit, slot.workers_on_node, self.cell_timeout_s,
            warm_up=slot.kind == "cuda", core_share=(slot.index_on_node, slot.workers_on_node))

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
                except Exception as exc:  # noqa: BLE001 - died while starting, or never scheduled
                    slot.start_error = first_line(exc)[:300]
                    _kill_quietly(slot.actor)
                    failed.append(slot)
            if not failed:
                return
            waiting = failed
            if attempt + 1 < ACTOR_START_TRIES:
                if any(words in (s.start_error or "") for s in waiting for words in LOW_MEMORY_WORDS):
                    await_node_memory(node_memory_threshold())  # Ray stopped it for the node's memory: wait
                for slot in waiting:
                    self._launch(slot, log_queue)
        for slot in waiting:
            slot.actor = None  # gone for good; the phase goes on with the others
            self.start_errors.append(f"a {slot.kind} worker could not be started: {slot.start_error}")

    def _replace(self, slot: _Slot, log_queue) -> None:
        """A fresh actor in place of one that died; none where its node is gone (the slot is lost,
        its cells go to the other nodes' slots)."""
        import ray

        _kill_quietly(slot.actor)
        if not any(n.get("Alive") and n["NodeID"] == slot.node_id for n in ray.nodes()):
            slot.actor = None
            self.start_errors.append(f"a {slot.kind} worker's node left the cluster")
            return
        self._launch(slot, log_queue)
        self._await_started([slot], log_queue)

    # --- cells ------------------------------------------------------------------------------------

    def _run_phase(self, cells: list[Cell], slots: list[_Slot], cache_dir: Path,
                   model_refs: dict, log_queue, callbacks: CellEvents) -> None:
        """Hand the scheduler's cells to the slots' actors and their outcomes back, until every cell ended."""
        import ray

        by_id = {c.cell_id: c for c in cells}
        scheduler = CellScheduler(cells, slots, self.max_retries, expected_s=self.expected_s, fits=_fits)
        pending: dict[Any, _Slot] = {}
        while not scheduler.done:
            for decision in scheduler.step():
                if isinstance(decision, Stranded):
                    reason = failure_reason(decision.attempt.deaths, self._stranded_reason(decision.attempt.cell, slots))
                    callbacks.on_cell_result(decision.attempt.cell, _crashed(decision.attempt, reason))
                else:
                    pending[self._start(decision, cache_dir, model_refs, callbacks)] = decision.slot
            if not pending:
                continue  # the queue was stranded: every cell has ended
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=POLL_S)
            self._drain_logs(log_queue, by_id, callbacks)
            for ref in ready:
                slot = pending.pop(ref)
                decision = scheduler.report(slot, self._outcome(ref, slot, log_queue))
                _tell(decision, callbacks)
                if isinstance(decision, Retry) and getattr(decision.death, "node_memory", False):
                    # the node ran low on memory: the retry waits for it to recover (this node's
                    # memory; Ray kills at RAY_memory_usage_threshold, 0.95 by default)
                    await_node_memory(node_memory_threshold())
        self._drain_logs(log_queue, by_id, callbacks)

    def _stranded_reason(self, cell: Cell, slots: list[_Slot]) -> str:
        if cell.accelerator_type and not any(_fits(cell, slot) for slot in slots):
            offered = sorted({a for slot in slots for a in slot.accelerators})
            return (f"no GPU of type {cell.accelerator_type} in the cluster (no node offers Ray's resource "
                    f"{ACCELERATOR_PREFIX}{cell.accelerator_type}; GPU types here: {', '.join(offered) or 'none named'})")
        why = "; ".join(sorted(set(self.start_errors)) or ["every worker failed to start"])
        return f"no worker left to run this cell: {why}"

    @staticmethod
    def _start(start: Start, cache_dir: Path, model_refs: dict, callbacks: CellEvents) -> Any:
        """Submit the cell to the slot's actor; the reference its outcome will come through."""
        attempt, slot = start.attempt, start.slot
        attempt.started_at = attempt.started_at or now()
        attempt.worker = slot.description
        callbacks.on_cell_start(attempt.cell, slot.description)
        return slot.actor.run.remote(attempt.cell, str(cache_dir), [model_refs.get(attempt.cell.model.sha256)])

    def _outcome(self, ref: Any, slot: _Slot, log_queue) -> Returned | Died | Raised:
        """What came back through `ref`; a dead actor is replaced first (the slot is lost if that fails)."""
        import ray
        from ray.exceptions import RayError, RayTaskError

        try:
            outcome = ray.get(ref)
        except RayTaskError as exc:  # run_cell never raises: a bug, or a result that cannot travel
            return Raised(f"the worker failed: {first_line(exc)[:300]}", traceback=str(exc))
        except RayError as exc:  # the actor itself died: killed, Ray OOM, node lost
            outcome = actor_death(exc, slot.description.get("memory_limit_bytes"))
            self._replace(slot, log_queue)
        if slot.actor is not None and getattr(outcome, "worker", None):
            slot.description = outcome.worker  # the fresh cell process's pid
        if isinstance(outcome, CellDeath):
            return Died(outcome, worker_lost=slot.actor is None)
        return Returned(outcome)

    @staticmethod
    def _drain_logs(log_queue, by_id: dict[str, Cell], callbacks: CellEvents) -> None:
        while True:
            try:
                batch = log_queue.get_nowait_batch(log_queue.qsize())
            except Exception:  # noqa: BLE001 - the log queue is gone: nothing more to print
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


def _fits(cell: Cell, slot: _Slot) -> bool:
    """A cell pinned to a GPU model runs only on a GPU of that model; any other cell anywhere."""
    return not cell.accelerator_type or cell.accelerator_type in slot.accelerators


def _kill_quietly(actor) -> None:
    import ray

    if actor is None:
        return
    try:
        ray.kill(actor, no_restart=True)
    except Exception:  # noqa: BLE001 - already gone
        pass


def _tell(decision: Finished | Retry | Failed, callbacks: CellEvents) -> None:
    cell = decision.attempt.cell
    if isinstance(decision, Retry):
        callbacks.on_cell_log(cell, f"worker died during the cell (attempt {decision.attempt.number}: "
                                    f"{decision.death.reason}); retrying on a fresh process")
    elif isinstance(decision, Failed):
        callbacks.on_cell_result(cell, _crashed(decision.attempt, decision.reason, decision.traceback))
    else:
        callbacks.on_cell_result(cell, decision.result)


def _crashed(attempt: Attempt, reason: str, traceback: str | None = None) -> CellResult:
    """The failed result of a cell no attempt of which returned one. Host and worker are those of
    its last attempt; library versions are unknown (the process that would have said is gone)."""
    from farm.provenance import farm_commit

    deaths = attempt.deaths
    worker = attempt.worker or next((d.worker for d in reversed(deaths) if d.worker), None)
    return CellResult(
        attempt.cell.cell_id, "failed", reason=reason, attempts=attempt.number,
        earlier_attempts=[d.reason for d in deaths[:-1]], traceback=traceback or "\n".join(
            f"attempt {i}: {d.reason}" + (f"\n{tail}" if (tail := getattr(d, "output_tail", None)) else "")
            for i, d in enumerate(deaths, 1)) or None,
        started_at=attempt.started_at or now(), finished_at=now(), worker=worker,
        host={"host": worker["host"]} if worker and worker.get("host") else {}, farm_commit=farm_commit(),
    )
