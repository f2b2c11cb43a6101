"""The Ray farm without hardware: logical GPUs, a real worker crash, the driver killed."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

ray = pytest.importorskip("ray")

from farm.callbacks import Callback  # noqa: E402
from farm.cli import main  # noqa: E402
from farm.config import load_config  # noqa: E402
from farm.cpus import parse_cpu_list  # noqa: E402
from farm.executor import MemoryLimit, parse_memory_limit  # noqa: E402
from farm.executor.ray_actor import with_local_model  # noqa: E402
from farm.executor.ray_farm import RayExecutor  # noqa: E402
from farm.plan import plan_sweep  # noqa: E402
from farm.warehouse import Warehouse  # noqa: E402
from tests.conftest import tiny_cnn, tiny_sweep_text, write_sweep  # noqa: E402

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def ray_two_gpus():
    """A local Ray whose two GPUs are logical resources: placement is real, the GPUs are not."""
    ray.init(address="local", num_cpus=2, num_gpus=2, include_dashboard=False, log_to_driver=False,
             configure_logging=False)
    assert ray.get_runtime_context().gcs_address.startswith("127.0.0.1:")
    yield
    ray.shutdown()


class Recorder(Callback):
    def __init__(self) -> None:
        self.events: list[tuple[str, str, object]] = []
        self.results = {}

    def on_cell_start(self, cell, worker=None) -> None:
        self.events.append(("start", cell.cell_id, worker))

    def on_cell_log(self, cell, message) -> None:
        self.events.append(("log", cell.cell_id, message))

    def on_cell_result(self, cell, result) -> None:
        self.events.append(("result", cell.cell_id, result))
        assert cell.cell_id not in self.results, "a cell reported twice"
        self.results[cell.cell_id] = result


def make_plan(tmp_path: Path, body: str):
    tiny_cnn(tmp_path / "tiny.onnx")
    return plan_sweep(load_config(write_sweep(tmp_path, body)), tmp_path / "cache")


MIXED = """
name = "mixed"
[[models]]
source = "tiny.onnx"
[axes]
batch_sizes = [1, 2, 3, 4]
backends = ["torch", "onnxruntime"]
[backends.torch]
device = "cuda"
"""


def test_one_actor_per_gpu_each_sees_only_its_gpu(ray_two_gpus, tmp_path: Path) -> None:
    plan = make_plan(tmp_path, MIXED)
    cuda = {c.cell_id for c in plan.cells if c.device_kind == "cuda"}
    assert len(cuda) == 4 and len(plan.cells) == 8
    recorder = Recorder()
    executor = RayExecutor()
    executor.run(plan.cells, tmp_path / "cache", recorder)

    assert set(recorder.results) == {c.cell_id for c in plan.cells}
    gpu_workers = [w for w in executor.workers if w["kind"] == "cuda"]
    assert len(gpu_workers) == 2
    assert sorted(w["visible_devices"] for w in gpu_workers) == ["0", "1"]  # one GPU each, not both
    assert all(len(w["gpu_ids"]) == 1 for w in gpu_workers)
    # the node's cores split between its GPU workers (farm.cpus): each times on CPUs of its own, none
    # shared with the other, and may use the rest of the node; the CPU worker has every core and no
    # timing CPUs. Thread pools sized to each set, not Ray's OMP_NUM_THREADS=1 for actors that
    # reserve no CPUs.
    host = set(os.sched_getaffinity(0))
    sets = [parse_cpu_list(w["cpu_set"]) for w in gpu_workers]
    assert set().union(*sets) == host and all(sets)
    assert all(w["omp_threads"] == str(len(parse_cpu_list(w["cpu_set"]))) for w in executor.workers)
    assert [parse_cpu_list(w["cpu_set"]) for w in executor.workers if w["kind"] == "cpu"] == [host]
    assert [w["timing_cpus"] for w in executor.workers if w["kind"] == "cpu"] == [None]
    if len(host) > 1:
        timing = [parse_cpu_list(w["timing_cpus"]) for w in gpu_workers]
        assert all(own and own <= cpus for own, cpus in zip(timing, sets))
        assert not timing[0] & sets[1] and not timing[1] & sets[0]  # the other worker never runs there
    used = {recorder.results[c].worker["pid"] for c in cuda}
    assert used == {w["pid"] for w in gpu_workers}  # both GPU actors ran cells
    # no GPU here: PyTorch says so, and the cell is skipped, not crashed
    assert all(recorder.results[c].status == "skipped" for c in cuda)
    assert all(r.status == "ok" for k, r in recorder.results.items() if k not in cuda)
    # CPU cells start only after every GPU cell is done: no measurement shares the host
    order = [(kind, cell_id) for kind, cell_id, _ in recorder.events if kind in ("start", "result")]
    last_gpu_result = max(i for i, (k, c) in enumerate(order) if k == "result" and c in cuda)
    first_cpu_start = min(i for i, (k, c) in enumerate(order) if k == "start" and c not in cuda)
    assert last_gpu_result < first_cpu_start
    # actor progress lines reached the driver, tagged with their cell
    logs = [(c, m) for kind, c, m in recorder.events if kind == "log"]
    assert any(m == "building" for c, m in logs if c not in cuda)


def test_gpu_limit(ray_two_gpus, tmp_path: Path) -> None:
    plan = make_plan(tmp_path, MIXED)
    executor = RayExecutor(gpus=1)
    executor.run([c for c in plan.cells if c.device_kind == "cuda"], tmp_path / "cache", Recorder())
    assert [w["kind"] for w in executor.workers] == ["cuda"]



def test_gpu_workers_started_early_run_the_cells_and_unused_ones_are_stopped(ray_two_gpus, tmp_path: Path) -> None:
    """farm.sweep starts the GPU workers while it plans (start_gpu_workers): run() uses those
    actors rather than starting others, and a run with no GPU cell stops them before its CPU phase."""
    plan = make_plan(tmp_path, MIXED)
    cuda = [c for c in plan.cells if c.device_kind == "cuda"]
    executor = RayExecutor()
    executor.start_gpu_workers()
    early = [w["pid"] for w in executor.workers]
    assert len(early) == 2 and ray.available_resources().get("GPU", 0) == 0  # both GPUs held, before any cell
    recorder = Recorder()
    executor.run(cuda, tmp_path / "cache", recorder)
    assert [w["pid"] for w in executor.workers] == early  # no second set of GPU actors
    assert {recorder.results[c.cell_id].worker["pid"] for c in cuda} == set(early)
    # a cell process started early was prepared for CUDA (here: no GPU, so the cells are skipped as before)
    assert all(recorder.results[c.cell_id].status == "skipped" for c in cuda)

    cpu_only = RayExecutor()
    cpu_only.start_gpu_workers()
    cpu_cells = [c for c in plan.cells if c.device_kind != "cuda"]
    cpu_only.run(cpu_cells, tmp_path / "cache", Recorder())
    assert [w["kind"] for w in cpu_only.workers] == ["cuda", "cuda", "cpu"]
    _wait_for(lambda: ray.available_resources().get("GPU", 0) == 2)  # the early GPU actors were stopped
    cpu_only.close()  # idempotent



def test_a_sweep_file_mistake_found_while_gpu_workers_start_leaves_none_running(ray_two_gpus, tmp_path: Path) -> None:
    from farm.config import ConfigError
    from farm.sweep import plan_while_workers_start
    from farm.warehouse import Warehouse

    tiny_cnn(tmp_path / "tiny.onnx")  # a model-aware mistake: found by planning, not by loading the file
    loaded = load_config(write_sweep(tmp_path, 'name = "typo"\n[[models]]\nsource = "tiny.onnx"\n'
                                               'dims = { no_such_dim = 3 }\n'))
    runner = RayExecutor()
    with pytest.raises(ConfigError, match="no_such_dim"):
        plan_while_workers_start(loaded, Warehouse(tmp_path / "results"), runner, early=True)
    assert runner.workers  # the GPU workers had started meanwhile ...
    _wait_for(lambda: ray.available_resources().get("GPU", 0) == 2)  # ... and were stopped


def _wait_for(condition, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.2)


SLOW = """
name = "slow"
[[models]]
source = "tiny.onnx"
[measurement]
warmup_ms = 10
min_iterations = 5
min_duration_ms = 4000
repeats = 1
layer_iterations = 0
"""


class Killer(Recorder):
    """Sends `sig` to the cell's process (`target="cell_pid"`) or to its Ray actor (`"pid"`)
    shortly after a cell starts, `times` times."""

    def __init__(self, times: int, target: str = "cell_pid", sig: int = signal.SIGKILL) -> None:
        super().__init__()
        self.times, self.target, self.sig = times, target, sig

    def on_cell_start(self, cell, worker=None) -> None:
        super().on_cell_start(cell, worker)
        if self.times > 0:
            self.times -= 1
            threading.Timer(1.5, _kill, (worker[self.target], self.sig)).start()


def _kill(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _retry_logs(recorder: Recorder) -> list[str]:
    return [m for k, _, m in recorder.events if k == "log" and m.startswith("worker died during the cell")]


@pytest.mark.parametrize("target", ["cell_pid", "pid"])
def test_worker_killed_mid_cell_is_retried(ray_two_gpus, tmp_path: Path, target: str) -> None:
    """SIGKILL of the cell's process, or of the Ray actor around it: the cell runs again on a fresh
    process and is reported once."""
    plan = make_plan(tmp_path, SLOW)
    killer = Killer(times=1, target=target)
    RayExecutor(max_retries=2).run(plan.cells, tmp_path / "cache", killer)
    (result,) = killer.results.values()
    assert result.status == "ok", result.reason
    starts = [w for kind, _, w in killer.events if kind == "start"]
    assert len(starts) == 2 and starts[0]["cell_pid"] != starts[1]["cell_pid"]  # a fresh process
    if target == "pid":
        assert starts[0]["pid"] != starts[1]["pid"]  # a fresh actor, too
    assert result.worker["cell_pid"] == starts[1]["cell_pid"]
    (log,) = _retry_logs(killer)
    assert log.startswith("worker died during the cell (attempt 1: ")
    assert ("killed by SIGKILL" in log) if target == "cell_pid" else ("the worker actor died" in log)
    assert result.attempts == 2 and len(result.earlier_attempts) == 1 and result.earlier_attempts[0] in log


def test_worker_that_keeps_dying_fails_the_cell_once(ray_two_gpus, tmp_path: Path) -> None:
    plan = make_plan(tmp_path, SLOW)
    killer = Killer(times=2, sig=signal.SIGSEGV)
    RayExecutor(max_retries=1).run(plan.cells, tmp_path / "cache", killer)
    (result,) = killer.results.values()
    assert result.status == "failed"
    assert result.reason.startswith("the cell's worker died 2 time(s); last: the cell's process was killed by SIGSEGV")
    assert len(_retry_logs(killer)) == 1
    (earlier,) = result.earlier_attempts
    assert result.attempts == 2 and earlier.startswith("the cell's process was killed by SIGSEGV")
    # where it died, not where the driver runs: the last attempt's worker and host
    assert result.worker["kind"] == "cpu" and result.host["host"] == result.worker["host"]
    assert result.started_at < result.finished_at


def test_memory_blow_up_fails_its_cell_and_the_sweep_goes_on(ray_two_gpus, tmp_path: Path) -> None:
    """A cell whose input alone needs 3.2 GB, under a 1 GiB worker limit: stopped, failed as out of
    memory without a retry (it would grow as far again); the cell after it runs on a fresh process."""
    tiny_cnn(tmp_path / "tiny.onnx", spatial=256)
    config = write_sweep(tmp_path, """
        name = "oom"
        [[models]]
        source = "tiny.onnx"
        [axes]
        batch_sizes = [4096, 1]
        [measurement]
        warmup_ms = 5
        min_iterations = 5
        min_duration_ms = 30
        repeats = 1
        layer_iterations = 0
        """)
    plan = plan_sweep(load_config(config), tmp_path / "cache")
    recorder = Recorder()
    RayExecutor(max_retries=1, memory_limit=MemoryLimit(size_bytes=2**30)).run(plan.cells, tmp_path / "cache",
                                                                               recorder)
    by_batch = {c.batch: recorder.results[c.cell_id] for c in plan.cells}
    assert by_batch[4096].status == "failed"
    assert by_batch[4096].reason.startswith("out of memory: the cell's processes used ")
    assert by_batch[4096].reason.endswith("over this worker's limit of 1.00 GiB (--worker-memory); try a smaller "
                                          "batch size (not retried: it would grow as far again)")
    assert not _retry_logs(recorder)
    assert by_batch[1].status == "ok", by_batch[1].reason


@pytest.mark.parametrize("text, expected", [
    ("80%", MemoryLimit(fraction=0.8)), ("12GiB", MemoryLimit(size_bytes=12 * 2**30)),
    ("512MB", MemoryLimit(size_bytes=512_000_000)), ("none", MemoryLimit()), ("1.5g", MemoryLimit(size_bytes=1_500_000_000)),
])
def test_worker_memory_values(text: str, expected: MemoryLimit) -> None:
    assert parse_memory_limit(text) == expected
    assert MemoryLimit(fraction=0.8).for_worker(10_000, 4) == 2_000  # a node's share, split between its workers


@pytest.mark.parametrize("text", ["", "lots", "0%", "150%", "-1GiB", "12 parsecs", "0.5", "16", "100MiB"])
def test_worker_memory_mistakes_are_one_line(text: str, tmp_path: Path, capsys) -> None:
    tiny_cnn(tmp_path / "tiny.onnx")
    config = write_sweep(tmp_path, '[[models]]\nsource = "tiny.onnx"\n')
    assert main(["sweep", str(config), "--results", str(tmp_path / "r"), f"--worker-memory={text}"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"farm: error: --worker-memory {text!r}: ") and "\n" not in err
    assert "give a share" in err or "give at least 256MiB" in err
    assert not (tmp_path / "r").exists()


def test_sweep_through_ray_writes_the_warehouse(ray_two_gpus, tmp_path: Path, capsys) -> None:
    """Cells run on the workers; a cell planning already knows cannot run (a fixed batch) is said
    first, before any measured cell (queued longest-first it came last), and runs on no worker."""
    tiny_cnn(tmp_path / "tiny.onnx")
    tiny_cnn(tmp_path / "fixed.onnx", batch=1)
    config = write_sweep(tmp_path, '[[models]]\nsource = "tiny.onnx"\n[[models]]\nsource = "fixed.onnx"\n'
                                   '[axes]\nbatch_sizes = [1, 2]\n')
    assert main(["sweep", str(config), "--results", str(tmp_path / "results")]) == 0
    con = Warehouse(tmp_path / "results").connect()
    rows = con.execute("SELECT status, worker FROM cells ORDER BY status").fetchall()
    assert len(rows) == 4 and all(s == "ok" and w.startswith("cpu worker pid") for s, w in rows[:3])
    assert rows[3] == ("unsupported", None)
    assert con.execute("SELECT executor FROM sweeps").fetchone() == ("ray",)
    captured = capsys.readouterr()
    out = captured.err + captured.out
    said = [line.split()[0] for line in out.splitlines() if line.startswith(("ok ", "unsupported "))]
    assert said[:2] == ["unsupported", "ok"] and said.count("ok") == 3, out


def test_model_bytes_travel_to_nodes_without_the_file(ray_two_gpus, tmp_path: Path) -> None:
    plan = make_plan(tmp_path, SLOW)
    cell = plan.cells[0]
    ref = ray.put(cell.model.path.read_bytes())
    (tmp_path / "tiny.onnx").unlink()  # as on a node that never saw the driver's folder
    local = with_local_model(cell, tmp_path / "node-cache", [ref])
    assert local.model.path == tmp_path / "node-cache" / "models" / f"{cell.model.sha256}.onnx"
    assert local.model.path.stat().st_size == cell.model.size_bytes


def test_a_model_file_gone_before_its_cells_are_sent_fails_them_and_the_sweep_goes_on(ray_two_gpus,
                                                                                     tmp_path: Path) -> None:
    """A model file deleted after planning (a careless clean-up while the sweep starts): its cells
    fail with what happened and what to do, the other model's cells run, the driver does not crash."""
    tiny_cnn(tmp_path / "kept.onnx", channels=6)  # other bytes than tiny.onnx's: another model
    plan = make_plan(tmp_path, '[[models]]\nsource = "tiny.onnx"\n[[models]]\nsource = "kept.onnx"\n'
                               '[axes]\nbatch_sizes = [1, 2]\n')
    (tmp_path / "tiny.onnx").unlink()
    recorder = Recorder()
    RayExecutor().run(plan.cells, tmp_path / "cache", recorder)
    by_model = {}
    for cell in plan.cells:
        by_model.setdefault(cell.model.path.name, []).append(recorder.results[cell.cell_id])
    assert [r.status for r in by_model["kept.onnx"]] == ["ok", "ok"], [r.reason for r in by_model["kept.onnx"]]
    assert [r.status for r in by_model["tiny.onnx"]] == ["failed", "failed"]
    assert all(r.reason.startswith(f"the model file {tmp_path / 'tiny.onnx'} could not be read when its cells were sent")
               and r.reason.endswith("Restore it and run the sweep again") for r in by_model["tiny.onnx"])


STARTS_RAY = """
import time
from farm.executor.ray_farm import RayExecutor
executor = RayExecutor()
executor._ensure_ray()
executor._log_queue.qsize()  # its one actor (the log queue) is up: a worker still starting reads as IDLE
print("up", flush=True)
time.sleep(60)
"""


def test_the_ray_farm_starts_no_idle_workers_ahead(tmp_path: Path) -> None:
    """Ray starts an idle task worker per CPU for a new driver (here 2 of them within 10 s): farm
    runs only actors, so its own Ray starts none, and no idle process wakes beside a timed cell."""
    driver = subprocess.Popen([sys.executable, "-c", STARTS_RAY], cwd=ROOT, stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert driver.stdout.readline().strip() == "up"
        time.sleep(10)  # Ray's idle workers, where it starts them, are up by now
        idle = [p.pid for p in psutil.Process(driver.pid).children(recursive=True) if _idle_ray_worker(p)]
        assert psutil.Process(driver.pid).children(recursive=True)  # its Ray is there
    finally:
        for child in psutil.Process(driver.pid).children(recursive=True):
            with contextlib.suppress(psutil.Error):
                child.kill()
        driver.kill()
        driver.wait()
    assert idle == []


def _idle_ray_worker(process: psutil.Process) -> bool:
    try:
        return "ray::IDLE" in " ".join(process.cmdline())
    except psutil.Error:
        return False


def test_driver_killed_then_rerun_resumes(tmp_path: Path) -> None:
    tiny_cnn(tmp_path / "tiny.onnx")
    config = write_sweep(tmp_path, tiny_sweep_text("driver", tuple(range(1, 7)), source="tiny.onnx", measurement={
        "warmup_ms": 10, "min_iterations": 5, "min_duration_ms": 700, "repeats": 1, "layer_iterations": 2}))
    results = tmp_path / "results"
    cells_dir = results / "driver" / "cells"
    err = (tmp_path / "driver.err").open("w+")
    proc = subprocess.Popen([sys.executable, "-m", "farm", "sweep", str(config), "--results", str(results)],
                            stdout=subprocess.DEVNULL, stderr=err, text=True)
    left: list[psutil.Process] = []
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and len(list(cells_dir.glob("*.parquet"))) < 2 and proc.poll() is None:
            time.sleep(0.05)
        assert proc.poll() is None, (tmp_path / "driver.err").read_text()[-3000:]
        left = psutil.Process(proc.pid).children(recursive=True)  # its Ray, which outlives it
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        done = len(list(cells_dir.glob("*.parquet")))
        assert 2 <= done < 6
        assert main(["sweep", str(config), "--results", str(results)]) == 0
    finally:
        for process in left:  # that driver's Ray only: other Rays on this machine are not this test's
            with contextlib.suppress(psutil.Error):
                process.kill()
        err.close()
    con = Warehouse(results).connect()
    assert con.execute("SELECT count(*), count(DISTINCT cell_id) FROM cells").fetchone() == (6, 6)
    assert con.execute("SELECT count(*) FROM measurements").fetchone() == (6,)
    runs = con.execute("SELECT cells_to_run, cells_resumed FROM sweeps ORDER BY started_at").fetchall()
    assert runs[-1] == (6 - done, done)


@pytest.mark.parametrize("flags", [["--worker-memory", "2GiB"], ["--retries", "1"], ["--cell-timeout", "60"],
                                   ["--gpus", "1"]])
def test_ray_only_flags_are_refused_with_the_local_executor(flags: list[str], tmp_path: Path, capsys) -> None:
    tiny_cnn(tmp_path / "tiny.onnx")
    config = write_sweep(tmp_path, '[[models]]\nsource = "tiny.onnx"\n')
    assert main(["sweep", str(config), "--results", str(tmp_path / "r"), "--executor", "local", *flags]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"farm: error: {flags[0]}: for --executor ray only") and "\n" not in err
    assert not (tmp_path / "r").exists()


def test_an_address_where_nothing_answers_is_one_line(tmp_path: Path, capsys) -> None:
    import socket

    with socket.socket() as free:  # a loopback port nobody listens on
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    tiny_cnn(tmp_path / "tiny.onnx")
    config = write_sweep(tmp_path, '[[models]]\nsource = "tiny.onnx"\n')
    assert main(["sweep", str(config), "--results", str(tmp_path / "r"), "--address", f"127.0.0.1:{port}"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"farm: error: --address 127.0.0.1:{port}: nothing answers there") and "\n" not in err
    assert not (tmp_path / "r").exists()


STARTS_AND_ENDS = """
import os
from farm.executor.ray_farm import RayExecutor
executor = RayExecutor()
executor._ensure_ray()
print(os.environ.get("RAY_AUTH_MODE"), flush=True)
executor.close()
"""


def test_farms_own_ray_keeps_token_authentication_without_a_notice_on_every_sweep(tmp_path: Path) -> None:
    """Ray turns token authentication on for a new local cluster and says so on every start; farm
    asks for it (RAY_AUTH_MODE=token) so that it stays on and the sweep's terminal stays quiet."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_AUTH_MODE"} | {"PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", STARTS_AND_ENDS], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "token"
    assert "Token authentication" not in done.stderr, done.stderr[-2000:]


# Ray's memory monitor's message, as Ray prints it (ray-project/ray#30312; newer Rays say "actual memory used")
RAY_OOM = ("Task was killed due to the node running low on memory.\nMemory on the node (IP: 172.17.0.2, ID: 8c5a14) "
           "where the task (actor ID: f9cc34, name=CellWorker.run, pid=548, {used}memory used={worker}GB) was running "
           "was 24.05GB / 25.30GB (0.950593), which exceeds the memory usage threshold of 0.95. Ray killed this worker "
           "(ID: 0f7695) because it was the most recently scheduled task; to see more information about memory usage "
           "on this node, use `ray logs raylet.out -ip 172.17.0.2`. Top 10 memory users:\nPID\tMEM(GB)\tCOMMAND\n")


@pytest.mark.parametrize("prefix", ["", "actual "])
def test_a_worker_stopped_for_the_nodes_memory_is_retried_and_one_that_grew_is_not(prefix: str) -> None:
    """On a busy box Ray's memory monitor stopped workers because other programs filled the node:
    farm called each the cell's own "out of memory, not retried". A worker using under half its
    limit was stopped for the node's trouble: retried (after the node's memory recovers), saying so;
    one near its limit grew, and is not retried."""
    from farm.executor.deaths import actor_death as _actor_death
    from farm.scheduler import CellScheduler, Died, Failed, Retry

    limit = 4 * 2 ** 30
    node = _actor_death(RuntimeError(RAY_OOM.format(used=prefix, worker="0.21")), limit)
    assert node.node_memory and node.retry and not node.out_of_memory and node.kind == "node low on memory"
    assert node.reason.startswith("the node ran low on memory (24.05 of 25.30 GB in use)") and "0.21 GB" in node.reason
    grew = _actor_death(RuntimeError(RAY_OOM.format(used=prefix, worker="3.90")), limit)
    assert grew.out_of_memory and not grew.retry and not grew.node_memory
    scheduler = CellScheduler(["c0"], ["w"], max_retries=2)
    scheduler.step()
    assert isinstance(scheduler.report("w", Died(node)), Retry)
    scheduler.step()
    failed = scheduler.report("w", Died(grew))
    assert isinstance(failed, Failed) and "1x node low on memory" in failed.reason, failed.reason
    assert _actor_death(RuntimeError("low on memory, no figures"), limit).out_of_memory  # unknown: as before


# Ray 2.60's words (its raylet's format strings): the node's memory first, the worker's after, if at all
RAY_260_OOM = ("1 worker(s) were killed due to the node running low on memory. Memory on the node (IP: 127.0.0.1, "
               "ID: 5cc235) was {node}GB used / 23.54GB limit (0.172049). {worker}")
RAY_260_WORKER = ("(job ID=01000000, lease ID=ab12, task name=CellWorker.run, required resources={{}}, pid=5722, "
                  "actual memory used={used}GB, worker ID=0f7695)")


def test_ray_260s_words_for_a_worker_it_stopped_are_read_too() -> None:
    """Ray 2.60 names the node's memory before the worker's (and may leave the worker's out): a
    worker under half its limit is the node's trouble; without the worker's figure, a node whose
    whole use is under half the limit cannot have had the worker near it; otherwise, as before."""
    from farm.executor.deaths import actor_death as _actor_death

    limit = 4 * 2 ** 30
    node = _actor_death(RuntimeError(RAY_260_OOM.format(node="4.05", worker=RAY_260_WORKER.format(used="0.06"))),
                        limit)
    assert node.node_memory and node.retry, node.reason
    assert node.reason.startswith("the node ran low on memory (4.05 of 23.54 GB in use)") and "0.06 GB" in node.reason
    grew = _actor_death(RuntimeError(RAY_260_OOM.format(node="22.90", worker=RAY_260_WORKER.format(used="3.90"))),
                        limit)
    assert grew.out_of_memory and not grew.retry
    unnamed = _actor_death(RuntimeError(RAY_260_OOM.format(node="1.20", worker="")), limit)
    assert unnamed.node_memory and "far under its memory limit" in unnamed.reason, unnamed.reason
    assert _actor_death(RuntimeError(RAY_260_OOM.format(node="22.90", worker="")), limit).out_of_memory


def test_a_retry_after_the_node_ran_low_waits_for_memory() -> None:
    from farm.executor.deaths import await_node_memory

    assert await_node_memory(1.01, timeout_s=5) is True  # memory in use is always under 101 %
    started = time.monotonic()
    assert await_node_memory(0.0, timeout_s=0.3, poll_s=0.05) is False  # never under 0 %: gives up in time
    assert time.monotonic() - started < 5
