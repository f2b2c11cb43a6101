"""The process that runs a worker's cells, and the watch its worker keeps on it.

A worker (a Ray actor, or any long-lived process) never runs a cell itself: it keeps one child
process, `python -m farm.executor.cell_process`, hands it cells over a pipe and waits, checking
on every tick that the child is alive and that the child's process tree stays under the
worker's memory limit. So a cell that segfaults, is SIGKILLed or blows up its memory ends only
its child: the worker sees how it died (the signal, its own memory limit, the kernel's OOM
killer), says so, and starts a fresh child for the next cell. The child is reused from cell to
cell, so in-process caches (CUDA context, compiled kernels) stay warm as before, except after a
cell that ran PyTorch's profiler (per-layer rows of PyTorch cells and of ONNX Runtime CUDA cells):
that leaves the process slower for every later query, so the child says so and the worker ends it;
the next cell starts in a fresh one and is timed as it would be alone (benchmarks/isolation.py).

The child runs in a session of its own (killing its process group ends its helpers too, e.g.
torch.compile's compile workers) and ends itself when its parent disappears. What it prints goes
to a file the worker keeps: a cell whose process dies carries the last lines it printed (an
engine's own message before an abort) in its reason. A cell whose figures were taken before its
process died (in the per-layer profiling that follows them) keeps them: the child sends its result
before that step, and the death costs only the per-layer rows, which the reason says.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection, Pipe
from pathlib import Path
from typing import Any

from farm.cpus import untimed_cpus
from farm.executor.process_memory import ProcessTree, kernel_oom_kills
from farm.layers.memory import format_bytes
from farm.records import Cell, CellResult

POLL_S = 0.25  # how often the worker checks the child's memory
CHILDREN_EVERY = 4  # polls between rescans of the child's process tree (a /proc scan: ~1 ms)
# PSS comes from /proc/PID/smaps_rollup, which walks the child's page tables under its memory-map
# lock: 9-16 ms for a CUDA process of torch, longer as compiled kernels pile up, and host-bound cells
# timed meanwhile stall. While the child times, the worker reads only its resident size (statm, a few
# counters): its last PSS plus what its resident size grew since, beside its descendants' last PSS;
# PSS again once the timed window is over.
PARENT_CHECK_S = 0.5  # how often the child checks that its worker is still there
START_TIMEOUT_S = 120.0
TAIL_LINES, TAIL_BYTES = 40, 16_384  # what a dead cell keeps of its process's last output
OUTPUT_LIMIT = 8 << 20  # the child's output file is emptied before a cell once it holds this much
REASON_LINES = 3  # of which the reason quotes the last few non-empty lines


@dataclasses.dataclass
class CellDeath:
    """The cell's process died before it returned a result."""

    reason: str  # one line: how it died

    @property
    def kind(self) -> str:
        """A short name for how it died, to count deaths of one cell by kind."""
        if self.node_memory:
            return "node low on memory"
        return "out of memory" if self.out_of_memory else "timed out" if self.timed_out else self.signal or "exited"
    signal: str | None = None  # e.g. 'SIGKILL', 'SIGSEGV'
    out_of_memory: bool = False
    peak_memory_bytes: int | None = None
    worker: dict | None = None  # the worker's description after it started a fresh process
    retry: bool = True  # False where a retry would likely end the same way (out of memory, timed out)
    timed_out: bool = False
    output_tail: str | None = None  # the last lines the process printed while running the cell
    node_memory: bool = False  # stopped because the node ran low on memory (other programs), not for its own growth


class CellProcess:
    """A child process that runs cells one at a time, under a memory limit (bytes, None: none)."""

    def __init__(self, memory_limit_bytes: int | None = None, timeout_s: float | None = None,
                 warm_up: str | None = None, prestart_replacement: bool = False) -> None:
        self.memory_limit_bytes = memory_limit_bytes
        self.warm_up = warm_up  # a device kind ('cuda') the child prepares as it starts (farm.cell_runner.warm_up)
        self.timeout_s = timeout_s  # a cell still running after this long is stopped (None: never)
        # GPU workers, whose every cell ends its process (PyTorch's profiler runs in it for the
        # per-layer rows), start the replacement as each cell sets to work (its first progress line;
        # skipped and unsupported cells have none), on the worker's CPUs other than its timing cores
        # (farm.cpus): its start and warm-up (imports, CUDA context: ~5 s on an H100's host) run
        # beside the cell's build, accuracy check and per-layer run, and it is stopped (SIGSTOP)
        # while the cell times, so neither its CPU work nor its opening a CUDA context on the same
        # GPU overlaps the timed loop. A CPU worker starts it after the result: its cells' work is
        # all CPU time.
        self.prestart_replacement = prestart_replacement
        # the CPUs a replacement's main thread gets back when it takes over (it warms up without the
        # timing cores; the threads it started meanwhile stay off them)
        self.cpus = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set()
        self.proc: subprocess.Popen | None = None
        self.conn: Connection | None = None
        self.output = None  # the file the child's stdout and stderr go to
        self.ready = False  # the child has answered
        self.spare: tuple | None = None  # (proc, conn, output) of a replacement started ahead
        self.spare_held = False  # that replacement is stopped (SIGSTOP) while a cell times

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> None:
        """Start a fresh child (ending the old one, if any; taking the replacement started ahead,
        if there is one) and wait until it answers."""
        if self.spare is not None:
            self._take_spare()
        else:
            self.stop()
            self.proc, self.conn, self.output = self._spawn()
        self._await_ready()

    def _spawn(self) -> tuple:
        ours, theirs = Pipe(duplex=True)
        fd = theirs.fileno()
        output = tempfile.TemporaryFile(mode="a+b")  # appends: emptying it never leaves a hole
        try:
            proc = subprocess.Popen([sys.executable, "-m", "farm.executor.cell_process", str(fd),
                                     str(os.getpid()), self.warm_up or ""], pass_fds=[fd], start_new_session=True,
                                    stdin=subprocess.DEVNULL, stdout=output, stderr=output)
        except OSError as exc:
            ours.close()
            output.close()
            raise RuntimeError(f"cannot start a process: {exc}") from None
        finally:
            theirs.close()
        return proc, ours, output

    def _await_ready(self) -> None:
        """Wait for the child's "ready" (after its warm-up), past the "alive" it sends first."""
        assert self.proc is not None and self.conn is not None
        deadline = time.monotonic() + START_TIMEOUT_S
        hello: Any = ("alive", self.proc.pid)
        try:
            while hello == ("alive", self.proc.pid):
                hello = self.conn.recv() if self.conn.poll(max(0.0, deadline - time.monotonic())) else "no answer"
        except (EOFError, OSError):  # it died while starting
            hello = f"exit status {self.proc.wait()}"
        if hello != ("ready", self.proc.pid):
            self.stop()
            raise RuntimeError(f"the cell process did not start ({hello})")
        self.ready = True

    def _start_spare(self) -> None:
        if self.prestart_replacement and self.spare is None:
            try:
                self.spare = self._spawn()
            except RuntimeError:  # the next cell starts one, and says so if it cannot
                self.spare = None
            self.spare_held = False
            untimed = untimed_cpus()
            if self.spare is not None and untimed:  # set before its interpreter starts a thread: all of them
                with contextlib.suppress(OSError):
                    os.sched_setaffinity(self.spare[0].pid, untimed)

    def _hold_spare(self, hold: bool) -> None:
        """Stop (hold) or continue the replacement started ahead, all of its process group. Held only
        once it has said it is alive (its first message, before its warm-up): from then on the
        kernel kills it with its worker even while it is stopped (child_main), which its own watch
        on the worker could not do; until then it is tried again on each tick."""
        if self.spare is None or hold == self.spare_held or (hold and not self.spare[1].poll()):
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.spare[0].pid, signal.SIGSTOP if hold else signal.SIGCONT)
        self.spare_held = hold

    def _take_spare(self) -> None:
        """End the current child; the replacement started ahead takes its place (answering later)."""
        self._hold_spare(False)
        spare, self.spare = self.spare, None
        self.stop()
        self.proc, self.conn, self.output = spare
        if self.cpus:  # its main thread, which runs the cells, may use them all again
            with contextlib.suppress(OSError):
                os.sched_setaffinity(self.proc.pid, self.cpus)
        self.ready = False

    def stop(self) -> None:
        """End the child and everything it started (and a replacement started ahead)."""
        for proc, conn, output in filter(None, [(self.proc, self.conn, self.output), self.spare]):
            if proc is not None:
                _kill_group(proc)
            if conn is not None:
                conn.close()
            if output is not None:
                output.close()
        self.proc, self.conn, self.output, self.spare, self.ready = None, None, None, None, False
        self.spare_held = False

    def _output_since(self, offset: int) -> str | None:
        """The last TAIL_LINES lines the child printed after `offset` (None: nothing)."""
        if self.output is None:
            return None
        size = os.fstat(self.output.fileno()).st_size
        start = max(offset, size - TAIL_BYTES)
        data = os.pread(self.output.fileno(), size - start, start) if size > start else b""
        lines = data.decode(errors="replace").splitlines()[-TAIL_LINES:]
        return "\n".join(lines) if any(line.strip() for line in lines) else None

    def run(self, cell: Cell, cache_dir: Path, log: Callable[[str], None]) -> CellResult | CellDeath:
        """Run one cell in the child; its result, or how the child died (a fresh one is then started)."""
        self._ensure_started()
        assert self.proc is not None and self.conn is not None
        proc, conn = self.proc, self.conn
        oom_kills = kernel_oom_kills()
        tree = ProcessTree(proc.pid)
        peak = 0
        offset = self._output_offset()
        partial: CellResult | None = None  # the result as it stood before per-layer profiling
        retire = False  # the child ran something that would slow the cells after it (farm.backends.base)
        conn.send((cell, str(cache_dir)))
        deadline = time.monotonic() + self.timeout_s if self.timeout_s else None
        tick = 0
        timing = False
        while True:
            try:
                if conn.poll(POLL_S):
                    kind, payload = conn.recv()
                    if kind == "log":  # the cell is at work (a skipped cell says nothing): on a GPU
                        self._start_spare()  # worker the next process starts beside it, held while it times
                        log(payload)
                        continue
                    if kind == "timing":
                        timing = payload
                        self._hold_spare(timing)
                        continue
                    if kind == "partial":
                        partial = payload
                        continue
                    if kind == "retire":  # PyTorch's profiler starts: its figures are in
                        retire = True
                        continue
                    if retire:  # the next cell gets a fresh process, as it would alone
                        self._take_spare() if self.spare is not None else self.stop()
                    return payload
            except (EOFError, OSError):  # the child is gone; its exit status says how
                pass
            code = proc.poll()
            if code is not None:
                tail = self._output_since(offset)
                return salvaged(partial, self._died(code, oom_kills, peak, tail))
            tick += 1
            if timing:
                self._hold_spare(True)  # a replacement that had not yet answered when the loop began
            rss = tree.memory_while_timing() if timing else tree.memory(rescan=tick % CHILDREN_EVERY == 0)
            peak = max(peak, rss)
            if deadline is not None and time.monotonic() > deadline:
                tail = self._output_since(offset)
                self.stop()
                return salvaged(partial, CellDeath(
                    f"timed out: the cell was still running after {self.timeout_s:g} s (--cell-timeout); stopped",
                    signal="SIGKILL", peak_memory_bytes=peak or None, retry=False, timed_out=True, output_tail=tail))
            if self.memory_limit_bytes and rss > self.memory_limit_bytes:
                tail = self._output_since(offset)
                self.stop()
                return salvaged(partial, CellDeath(
                    f"out of memory: the cell's processes used {format_bytes(rss)}, over this worker's limit of "
                    f"{format_bytes(self.memory_limit_bytes)} (--worker-memory); try a smaller batch size",
                    signal="SIGKILL", out_of_memory=True, peak_memory_bytes=rss, retry=False, output_tail=tail))

    def _ensure_started(self) -> None:
        if self.alive() and not self.ready:  # a replacement started ahead: its answer is due now
            with contextlib.suppress(RuntimeError):  # it did not start: a fresh one below
                self._await_ready()
        if not self.alive():
            self.start()

    def _output_offset(self) -> int:
        """Where the next cell's output starts in the child's output file."""
        offset = os.fstat(self.output.fileno()).st_size if self.output is not None else 0
        if offset > OUTPUT_LIMIT:  # only the running cell's output is ever read
            self.output.truncate(0)
            offset = 0
        return offset

    def _died(self, code: int, oom_kills_before: int | None, peak: int, tail: str | None = None) -> CellDeath:
        self.stop()
        death = self._death(code, oom_kills_before, peak)
        death.output_tail = tail
        if tail:
            last = [line.strip() for line in tail.splitlines() if line.strip()][-REASON_LINES:]
            death.reason += "; it last printed: " + " | ".join(line[:200] for line in last)
        return death

    def _death(self, code: int, oom_kills_before: int | None, peak: int) -> CellDeath:
        peak_text = f"; its processes had used {format_bytes(peak)}" if peak else ""
        if code < 0:
            name = _signal_name(-code)
            after = kernel_oom_kills()
            if name == "SIGKILL" and oom_kills_before is not None and after is not None and after > oom_kills_before:
                # The counter is the host's: a SIGKILL while the kernel killed some process for memory.
                # Not retried: a retry would push the host back into the same corner.
                return CellDeath(f"out of memory: killed by SIGKILL while the kernel's out-of-memory killer was "
                                 f"at work on this host{peak_text}; lower --worker-memory or the batch size",
                                 name, True, peak or None, retry=False)
            return CellDeath(f"the cell's process was killed by {name}{peak_text}", name, False, peak or None)
        return CellDeath(f"the cell's process exited with status {code} before returning a result{peak_text}",
                         None, False, peak or None)


def salvaged(partial: CellResult | None, death: CellDeath) -> CellResult | CellDeath:
    """The death as it is, or, where the cell's figures had come back before it (the process died
    in per-layer profiling), the cell's result without per-layer rows, saying why they are missing."""
    if partial is None:
        return death
    partial.layers = []
    partial.reason = (f"per-layer profiling did not finish, so this cell has no per-layer rows "
                      f"({death.reason}); its figures were taken before it")[:1000]
    partial.traceback = "\n".join(filter(None, [partial.traceback, death.output_tail]))
    return partial


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL the child's process group (it leads its own session) and reap the child."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.kill()
    except ProcessLookupError:
        pass
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        pass


# --- the child ----------------------------------------------------------------------------------

def _watch_parent(parent: int) -> None:
    """End this process group when the worker that started it is gone (killed, crashed)."""
    while True:
        time.sleep(PARENT_CHECK_S)
        if os.getppid() != parent:
            try:
                os.killpg(0, signal.SIGKILL)
            finally:
                os._exit(1)


def _die_with_parent() -> None:
    """Linux: the kernel SIGKILLs this process when its worker dies (PR_SET_PDEATHSIG), even while
    it is stopped, as a replacement started ahead is while a cell times; _watch_parent covers the
    rest (its process group, other systems)."""
    if sys.platform.startswith("linux"):
        import ctypes

        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1: PR_SET_PDEATHSIG


def child_main(fd: int, parent: int, warm_up_kind: str = "") -> None:
    from farm.backends.base import when_torch_profiler_starts
    from farm.cell_runner import run_cell, warm_up, warm_up_compiler
    from farm.executor.library_logs import cell_log, install, keep

    install()  # libraries' records never fail on a closed stream (a capture's): the cell's log has them

    _die_with_parent()  # before "alive": the worker holds (stops) a replacement only once it said so
    threading.Thread(target=_watch_parent, args=(parent,), daemon=True, name="watch-parent").start()
    conn = Connection(fd)
    when_torch_profiler_starts(lambda: conn.send(("retire", "PyTorch's profiler ran here")))
    conn.send(("alive", os.getpid()))  # from now on it may be held while a cell times, warm-up and all
    if warm_up_kind:  # before "ready": the worker does not give it a cell half-warm
        warm_up(warm_up_kind)
    conn.send(("ready", os.getpid()))
    if warm_up_kind:  # after: the next cell need not wait for what only torch.compile cells use
        warm_up_compiler(warm_up_kind, lambda: not conn.poll(0))
    while True:
        try:
            cell, cache_dir = conn.recv()
        except (EOFError, OSError):  # the worker closed the pipe: done
            return
        with cell_log(echo=True) as log:  # echoed into this process's output: a dead cell's reason quotes it
            result = run_cell(cell, Path(cache_dir), lambda message: conn.send(("log", message)),
                              lambda on: conn.send(("timing", on)), lambda partial: conn.send(("partial", partial)))
        conn.send(("result", keep(result, log.getvalue(), Path(cache_dir))))


if __name__ == "__main__":
    child_main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] if len(sys.argv) > 3 else "")
