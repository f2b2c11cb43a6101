"""The process a worker runs its cells in: how it dies is the cell's reason, it never outlives
its worker, and a fresh one takes the next cell. Real processes, real signals, no Ray."""

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

from farm.config import load_config
from farm.cpus import TIMING_CPUS_VARIABLE
from farm.executor.cell_process import CellDeath, CellProcess
from farm.plan import plan_sweep
from farm.records import CellResult
from tests.conftest import tiny_cnn, write_sweep

ROOT = Path(__file__).resolve().parent.parent
SLOW = """
[measurement]
warmup_ms = 10
min_iterations = 5
min_duration_ms = 3000
repeats = 1
layer_iterations = 0
"""


def one_cell(tmp_path: Path, measurement: str = "", **model):
    tiny_cnn(tmp_path / "tiny.onnx", **model)
    config = write_sweep(tmp_path, '[[models]]\nsource = "tiny.onnx"\n' + measurement)
    (cell,) = plan_sweep(load_config(config), tmp_path / "cache").cells
    return cell


def kill_when_running(process: CellProcess, sig: int, logs: list[str]) -> threading.Thread:
    """Send `sig` to the cell process once it says it is measuring."""
    def wait_and_kill() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not any("measuring" in m for m in logs):
            time.sleep(0.02)
        os.kill(process.pid, sig)

    thread = threading.Thread(target=wait_and_kill, daemon=True)
    thread.start()
    return thread


def test_a_cell_runs_in_the_child_and_the_child_is_reused(tmp_path: Path) -> None:
    cell = one_cell(tmp_path)
    process = CellProcess()
    try:
        process.start()
        pid = process.pid
        logs: list[str] = []
        first = process.run(cell, tmp_path / "cache", logs.append)
        second = process.run(cell, tmp_path / "cache", logs.append)
        assert isinstance(first, CellResult) and first.status == "ok", first
        assert isinstance(second, CellResult) and second.status == "ok"
        assert process.pid == pid and pid != os.getpid()  # one child, kept warm
        assert "building" in logs  # progress lines come through the pipe
    finally:
        process.stop()
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_a_cell_that_ran_pytorchs_profiler_leaves_the_next_cell_a_fresh_child(tmp_path: Path, monkeypatch) -> None:
    # PyTorch's profiler slows its process for good (benchmarks/carryover.py): the child that ran it
    # (per-layer rows of a PyTorch cell) is ended once its result is in; ONNX Runtime CPU keeps it.
    # With prestart_replacement (GPU workers) the next child is started as the cell sets to work,
    # is stopped while the cell's timed loop runs (it takes no CPU from it) and goes on after, and
    # the next cell runs in it. Where the worker has timing CPUs of its own (farm.cpus), the
    # replacement starts on its other CPUs and gets them all back when it takes over.
    measurement = ('[axes]\nbackends = ["torch"]\n[backends.torch]\ndevice = "cpu"\n[measurement]\nwarmup_ms = 5\n'
                   'min_iterations = 3\nrepeats = 1\nlayer_iterations = 1\n')
    process = CellProcess()
    try:
        process.start()
        profiled = process.pid
        result = process.run(one_cell(tmp_path, measurement + "min_duration_ms = 5\n"), tmp_path / "cache",
                             lambda m: None)
        assert isinstance(result, CellResult) and result.status == "ok" and result.layers, result
        assert not process.alive() and gone(profiled)

        process.prestart_replacement = True
        allowed = os.sched_getaffinity(0)
        timing = {max(allowed)} if len(allowed) > 1 else set()
        monkeypatch.setenv(TIMING_CPUS_VARIABLE, ",".join(map(str, timing)))
        process.start()
        profiled = process.pid
        logs: list[str] = []
        seen: list[str] = []
        watcher = threading.Thread(target=watch_the_spare, args=(process, logs, seen), daemon=True)
        watcher.start()
        (tmp_path / "timed").mkdir()
        result = process.run(one_cell(tmp_path / "timed", measurement + "min_duration_ms = 3000\n"), tmp_path / "cache",
                             logs.append)
        watcher.join()
        replacement = process.pid
        assert isinstance(result, CellResult) and result.status == "ok" and result.layers, result
        assert process.alive() and replacement != profiled and gone(profiled) and process.spare is None
        assert psutil.STATUS_STOPPED in seen[1:], seen  # held while the cell timed
        assert psutil.Process(replacement).status() != psutil.STATUS_STOPPED  # and let go after
        assert psutil.Process(replacement).create_time() < seen[0]  # started before the timed loop
        spare_cpus = [cpus for cpus in seen[1:] if isinstance(cpus, set)]
        assert spare_cpus and all(cpus == (allowed - timing if timing else allowed) for cpus in spare_cpus), spare_cpus
        assert os.sched_getaffinity(replacement) == allowed
        (tmp_path / "ort").mkdir()
        again = process.run(one_cell(tmp_path / "ort"), tmp_path / "cache", lambda m: None)
        assert isinstance(again, CellResult) and again.status == "ok" and process.pid == replacement
    finally:
        process.stop()
    assert process.spare is None and not process.alive()


def test_a_gpu_workers_process_answers_once_it_is_warm(tmp_path: Path) -> None:
    """A GPU worker's process says it is ready only after its warm-up (PyTorch imported), so a cell is
    never handed to a process still importing (it said it is alive before, so that it may be held)."""
    pytest.importorskip("torch")
    if not Path("/proc/self/maps").exists():
        pytest.skip("a process's loaded libraries are read from Linux's /proc")
    process = CellProcess(warm_up="cuda")
    try:
        process.start()
        assert "libtorch" in Path(f"/proc/{process.pid}/maps").read_text()
        result = process.run(one_cell(tmp_path), tmp_path / "cache", lambda m: None)
        assert isinstance(result, CellResult) and result.status == "ok"
    finally:
        process.stop()


def test_torch_compiles_modules_are_imported_ahead_only_while_no_cell_waits(tmp_path: Path) -> None:
    """After answering, a GPU worker's process imports torch.compile's modules step by step, and
    stops as soon as a cell is waiting (here: after the first step, before dynamo itself), so a
    cell waits at most for one step; a step this torch lacks is skipped, the rest still come; a
    step that fails on something it needs ends the warm-up (the cell meets that itself)."""
    pytest.importorskip("torch")
    (tmp_path / "farm_broken_step.py").write_text("import farm_no_such_dependency\n")
    code = ("import sys; import farm.cell_runner as runner; asked = []; steps = runner.COMPILER_IMPORT_STEPS\n"
            f"sys.path.insert(0, {str(tmp_path)!r}); print(steps[0] in sys.modules)\n"
            "runner.warm_up_compiler('cuda', lambda: (asked.append(1), len(asked) < 2)[1])\n"
            "print(steps[0] in sys.modules, 'torch._dynamo' in sys.modules)\n"
            "runner.warm_up_compiler('cpu', lambda: True); print('torch._inductor.compile_fx' in sys.modules)\n"
            "runner.COMPILER_IMPORT_STEPS = ('farm_no_such_module', 'farm_broken_step', 'tabnanny')\n"
            "runner.warm_up_compiler('cuda', lambda: True); print('tabnanny' in sys.modules)\n"
            "runner.COMPILER_IMPORT_STEPS = ('farm_no_such_module',) + steps\n"
            "runner.warm_up_compiler('cuda', lambda: True)\n"
            "print('torch._dynamo' in sys.modules, 'torch._inductor.compile_fx' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.stdout.split() == ["False", "True", "False", "False", "False", "True", "True"], done.stderr[-2000:]


def watch_the_spare(process: CellProcess, logs: list[str], seen: list) -> None:
    """Once the cell says it is measuring: the time then, and the replacement's states and CPUs
    over 2.5 s of its 3 s timed loop (until one is `stopped`)."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not any("measuring" in m for m in logs):
        time.sleep(0.02)
    seen.append(time.time())
    until = time.monotonic() + 2.5
    while time.monotonic() < until and psutil.STATUS_STOPPED not in seen:
        spare = process.spare
        if spare is not None:
            with contextlib.suppress(psutil.Error, OSError):
                seen.append(psutil.Process(spare[0].pid).status())
                seen.append(os.sched_getaffinity(spare[0].pid))
        time.sleep(0.02)


def gone(pid: int) -> bool:
    return not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def ended(pid: int, timeout_s: float) -> bool:
    """`gone(pid)` once it ended, or `timeout_s` passed (psutil.TimeoutExpired: it did not end)."""
    with contextlib.suppress(psutil.NoSuchProcess):
        psutil.Process(pid).wait(timeout=timeout_s)
    return gone(pid)


def doomed_worker(script: str) -> tuple[subprocess.Popen, list[str]]:
    """A worker process running `script` (with farm importable), and the words of its first line."""
    worker = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    return worker, worker.stdout.readline().split()


@pytest.mark.parametrize("sig", [signal.SIGSEGV, signal.SIGKILL])
def test_a_signal_mid_cell_is_the_reason_and_the_next_cell_gets_a_fresh_child(tmp_path: Path, sig: int) -> None:
    cell = one_cell(tmp_path, SLOW)
    process = CellProcess()
    try:
        logs: list[str] = []
        process.start()
        killed = process.pid
        kill_when_running(process, sig, logs)
        death = process.run(cell, tmp_path / "cache", logs.append)
        assert isinstance(death, CellDeath)
        assert death.signal == signal.Signals(sig).name and death.retry and not death.out_of_memory
        assert death.reason.startswith(f"the cell's process was killed by {signal.Signals(sig).name}")
        result = process.run(cell, tmp_path / "cache", lambda m: None)
        assert isinstance(result, CellResult) and result.status == "ok"
        assert process.pid != killed
    finally:
        process.stop()


def test_an_idle_child_that_died_is_replaced_before_the_next_cell(tmp_path: Path) -> None:
    cell = one_cell(tmp_path)
    process = CellProcess()
    try:
        process.start()
        os.kill(process.pid, signal.SIGKILL)
        process.proc.wait()
        result = process.run(cell, tmp_path / "cache", lambda m: None)
        assert isinstance(result, CellResult) and result.status == "ok"
    finally:
        process.stop()


def test_the_memory_limit_stops_the_cell_without_a_retry(tmp_path: Path) -> None:
    # batch 2048 of 3x256x256 floats: 1.6 GB of input alone, against a 512 MiB limit
    tiny_cnn(tmp_path / "tiny.onnx", spatial=256)
    config = write_sweep(tmp_path, '[[models]]\nsource = "tiny.onnx"\n[axes]\nbatch_sizes = [2048]\n')
    (cell,) = plan_sweep(load_config(config), tmp_path / "cache").cells
    process = CellProcess(memory_limit_bytes=512 * 2**20)
    try:
        death = process.run(cell, tmp_path / "cache", lambda m: None)
        assert isinstance(death, CellDeath) and death.out_of_memory and not death.retry
        assert death.peak_memory_bytes > 512 * 2**20
        assert "over this worker's limit of 512.00 MiB (--worker-memory)" in death.reason
    finally:
        process.stop()


def test_the_worker_leaves_the_childs_page_tables_alone_while_it_times(tmp_path: Path, monkeypatch) -> None:
    """While the child times (3 s here) the worker reads its resident size only: a PSS read walks
    the child's page tables under its memory-map lock, which slowed host-bound cells 1.5x on a GPU.
    Before and after the timed window, PSS as before; the memory limit is watched throughout."""
    from farm.executor import process_memory

    calls: list[tuple[str, float]] = []
    full, cheap = process_memory.ProcessTree.memory, process_memory.ProcessTree.memory_while_timing
    monkeypatch.setattr(process_memory.ProcessTree, "memory",
                        lambda self, rescan: calls.append(("pss", time.monotonic())) or full(self, rescan))
    monkeypatch.setattr(process_memory.ProcessTree, "memory_while_timing",
                        lambda self: calls.append(("rss", time.monotonic())) or cheap(self))
    cell = one_cell(tmp_path, SLOW)
    process = CellProcess(memory_limit_bytes=64 * 2**30)
    try:
        result = process.run(cell, tmp_path / "cache", lambda m: None)
    finally:
        process.stop()
    assert isinstance(result, CellResult) and result.status == "ok", result
    kinds = [kind for kind, _ in calls]
    assert kinds.count("rss") >= 3, kinds  # a 3 s timed window, a reading every 0.25 s
    first, last = kinds.index("rss"), len(kinds) - 1 - kinds[::-1].index("rss")
    assert "pss" not in kinds[first:last + 1], kinds  # one window, no PSS read inside it
    assert "pss" in kinds[:first], kinds  # the build, watched as before
    here = process_memory.ProcessTree(os.getpid())
    full_reading = here.memory(rescan=False)
    grown = bytearray(b"\x01") * (256 * 2**20)  # written: resident
    assert here.memory_while_timing() >= full_reading + 200 * 2**20  # growth while timing still counts
    del grown


CHILD_OF_A_DOOMED_WORKER = """
import sys
from farm.executor.cell_process import CellProcess
p = CellProcess()
p.start()
print(p.pid, flush=True)
sys.stdin.read()
"""


def test_the_child_ends_when_its_worker_is_killed(tmp_path: Path) -> None:
    worker, (child,) = doomed_worker(CHILD_OF_A_DOOMED_WORKER)
    assert psutil.pid_exists(int(child))
    worker.send_signal(signal.SIGKILL)
    worker.wait()
    assert ended(int(child), 60)  # it notices its parent is gone and ends itself


SPARE_OF_A_DOOMED_WORKER = """
import sys
from farm.executor.cell_process import CellProcess
p = CellProcess(prestart_replacement=True)
p.start()
p._start_spare()
p.spare[1].poll(120)  # it said it is alive
p._hold_spare(True)  # stopped, as while a cell times
print(p.pid, p.spare[0].pid, p.spare_held, flush=True)
sys.stdin.read()
"""


def test_a_held_replacement_ends_when_its_worker_is_killed(tmp_path: Path) -> None:
    # A stopped process cannot notice that its worker is gone; the kernel ends it (PR_SET_PDEATHSIG).
    worker, (child, spare, held) = doomed_worker(SPARE_OF_A_DOOMED_WORKER)
    deadline = time.monotonic() + 30  # SIGSTOP takes effect as the running process is next interrupted
    while psutil.Process(int(spare)).status() != psutil.STATUS_STOPPED and time.monotonic() < deadline:
        time.sleep(0.01)
    assert held == "True" and psutil.Process(int(spare)).status() == psutil.STATUS_STOPPED
    worker.send_signal(signal.SIGKILL)
    worker.wait()
    assert ended(int(child), 60) and ended(int(spare), 60)


SPARE_OF_A_WORKER_KILLED_AT_ONCE = """
import sys
from farm.executor.cell_process import CellProcess
p = CellProcess(prestart_replacement=True)
p.start()
p._start_spare()
p._hold_spare(True)  # not held: it has not said it is alive yet (still importing)
print(p.pid, p.spare[0].pid, p.spare_held, bool(p.spare[1].poll()), flush=True)
sys.stdin.read()
"""


def test_a_replacement_ends_when_its_worker_is_killed_before_it_said_it_is_alive(tmp_path: Path) -> None:
    # Killed before its PR_SET_PDEATHSIG (set after its imports), the kernel does not end it: its own
    # watch on the worker (the pid it was given) or its first message to the closed pipe does.
    worker, (child, spare, held, answered) = doomed_worker(SPARE_OF_A_WORKER_KILLED_AT_ONCE)
    worker.send_signal(signal.SIGKILL)
    worker.wait()
    assert (held, answered) == ("False", "False")
    assert ended(int(child), 120) and ended(int(spare), 120)


def test_a_cell_past_its_timeout_is_stopped_without_a_retry(tmp_path: Path) -> None:
    cell = one_cell(tmp_path, SLOW)  # measures for 3 s at least
    process = CellProcess(timeout_s=1.0)
    try:
        process.start()
        child = process.pid
        death = process.run(cell, tmp_path / "cache", lambda m: None)
        assert isinstance(death, CellDeath) and death.timed_out and not death.retry
        assert death.reason.startswith("timed out: the cell was still running after 1 s (--cell-timeout)")
        assert not psutil.pid_exists(child) or psutil.Process(child).status() == psutil.STATUS_ZOMBIE
    finally:
        process.stop()


def native_cell(tmp_path: Path, stage: str, layer_iterations: int):
    config = write_sweep(tmp_path, f"""
[[models]]
source = "module:tests.native_models:aborts_in_cell_process"
kwargs = {{ stage = "{stage}" }}
inputs = {{ x = {{ shape = ["batch", 16] }} }}
[axes]
backends = ["torch"]
[backends.torch]
device = "cpu"
[measurement]
warmup_ms = 10
min_iterations = 5
min_duration_ms = 50
repeats = 1
layer_iterations = {layer_iterations}
""")
    (cell,) = plan_sweep(load_config(config), tmp_path / "cache").cells
    return cell


def test_a_dead_cell_keeps_what_its_process_printed_last(tmp_path: Path) -> None:
    """An engine that aborts says why on stderr first: that line is in the reason (one line), the
    last lines of its output in the death's tail; the next cell's process starts clean."""
    process = CellProcess()
    try:
        death = process.run(native_cell(tmp_path, "measuring", 0), tmp_path / "cache", lambda message: None)
        assert isinstance(death, CellDeath) and death.signal == "SIGABRT", death
        assert death.reason.startswith("the cell's process was killed by SIGABRT")
        assert "; it last printed: " in death.reason and "CUDA failure 800: operation not permitted" in death.reason
        assert "\n" not in death.reason and "cudaFreeHost" in death.output_tail
        (tmp_path / "other").mkdir()
        healthy = process.run(one_cell(tmp_path / "other"), tmp_path / "cache", lambda message: None)
        assert isinstance(healthy, CellResult) and healthy.status == "ok"
    finally:
        process.stop()


def test_a_death_in_per_layer_profiling_keeps_the_figures(tmp_path: Path) -> None:
    """The process dies after the cell was measured (in per-layer profiling, as ONNX Runtime did
    beside PyTorch's profiler): the cell is ok with its samples and accuracy, no per-layer rows,
    and the reason says which step died and how."""
    process = CellProcess()
    try:
        result = process.run(native_cell(tmp_path, "profiling", 2), tmp_path / "cache", lambda message: None)
    finally:
        process.stop()
    assert isinstance(result, CellResult) and result.status == "ok", result
    assert result.samples is not None and len(result.samples) >= 5 and result.accuracy
    assert result.layers == []
    assert result.reason.startswith("per-layer profiling did not finish, so this cell has no per-layer rows "
                                    "(the cell's process was killed by SIGABRT")
    assert "CUDA failure 800" in result.reason and "cudaFreeHost" in result.traceback
