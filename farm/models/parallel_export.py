"""Planning's PyTorch exports, several at once: each in a process of its own.

Exporting a PyTorch source (farm.models.native) takes seconds to minutes of one core, mostly
Python, and planning did them one after another: 24 models took 8.5 minutes on a 16-core GPU host
before its GPU ran a cell. Where a machine has the cores and the memory for two or more, planning
first makes the exports the cache lacks in parallel processes, then resolves every model as before,
now from the cache. Each process writes the same cache entry the planner would have written (torch
is seeded per model, so the weights do not depend on where they were made).

A process that dies (a factory that kills it, the machine's memory) costs its model only: it is
exported again alone, and where it dies again its model's cells fail with how it ended and its last
output; a factory that raises or hangs fails its model's cells as in the planner's own process.
`FARM_EXPORT_WORKERS` sets how many run at once (1: one after another, in the planner's process).
"""

from __future__ import annotations

import faulthandler
import json
import os
import pickle
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import psutil

from farm.config import NATIVE_PREFIXES, ModelSpec
from farm.errors import ConfigError
from farm.files import TEMP_DIR_NAME, write_atomic

WORKERS_VARIABLE = "FARM_EXPORT_WORKERS"
MEMORY_PER_EXPORT = 4 << 30  # what one export process may take (torch, the module, the exporter's copies)
EXPORT_DEADLINE_S = 1800.0  # an export process still running after this fails its model's cells
POLL_S = 0.2
LAST_OUTPUT_LINES = 20  # of a dead process's output, in its model's reason


def export_workers(missing: int) -> int:
    """How many exports to run at once: `FARM_EXPORT_WORKERS`, else half the CPUs this process may
    use (an export is one busy core and its helper threads), no more than the memory holds."""
    given = os.environ.get(WORKERS_VARIABLE, "").strip()
    if given:
        try:
            return max(1, min(missing, int(given)))
        except ValueError:
            raise ConfigError(f"{WORKERS_VARIABLE}={given!r}: expected a whole number of export processes, "
                              "e.g. 4 (1: one after another)") from None
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    memory = psutil.virtual_memory().available // MEMORY_PER_EXPORT
    return max(1, min(missing, cpus // 2, memory))


def export_in_parallel(specs: Sequence[ModelSpec], base_dir: Path, cache_dir: Path, seed: int,
                       print_note=None) -> dict[int, str]:
    """Export the PyTorch sources among `specs` that the cache lacks, several at once where
    export_workers allows two or more (else nothing: the planner exports them itself). Returns, per
    index into `specs`, the reason its model's cells fail (its factory raised or hung, or its export
    ended its process twice); every other export is in the cache, or left for the planner to report
    (a mistake in the sweep file is its to name)."""
    from farm.models import native

    natives = [index for index, spec in enumerate(specs) if spec.source.startswith(NATIVE_PREFIXES)]
    # a machine that would export one at a time even if none were cached (2 cores): the planner
    # exports them itself, and each model's cache key is worked out once, there
    if len(natives) < 2 or (not os.environ.get(WORKERS_VARIABLE, "").strip() and export_workers(len(natives)) < 2):
        return {}
    missing, folders = [], set()
    for index in natives:
        spec = specs[index]
        try:
            folder = native.export_folder(spec, f"models[{index}]", base_dir, cache_dir, seed)
        except ConfigError:
            continue  # the planner says it, with the sweep file's name
        if native.exported(folder) is None and folder not in folders:  # the same model twice: exported once
            missing.append(index)
            folders.add(folder)
    workers = export_workers(len(missing)) if len(missing) > 1 else 1
    if workers < 2:
        return {}
    note = print_note or (lambda text: print(text, file=sys.stderr, flush=True))
    note(f"farm: exporting {len(missing)} PyTorch models to ONNX, {workers} at a time")
    work = cache_dir / TEMP_DIR_NAME / f"exports-{os.getpid()}"
    work.mkdir(parents=True, exist_ok=True)
    try:
        failures, died = _run(specs, missing, base_dir, cache_dir, seed, workers, work, note)
        if died:  # beside the others it may have lacked memory: once more, alone
            again, still = _run(specs, list(died), base_dir, cache_dir, seed, 1, work, note)
            failures |= again
            for index, how in still.items():
                failures[index] = (f"exporting {specs[index].source} to ONNX ended its process twice, beside other "
                                   f"exports and alone: {how}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return failures


def _run(specs: Sequence[ModelSpec], indices: list[int], base_dir: Path, cache_dir: Path, seed: int, workers: int,
         work: Path, note) -> tuple[dict[int, str], dict[int, str]]:
    """Export `indices` in up to `workers` processes at once: (the reasons of the models that failed,
    how each process that died without an outcome ended, with its last output)."""
    from farm.models import native

    deadlines = (native.FACTORY_DEADLINE_S, native.FACTORY_NOTE_AFTER_S)
    threads = max(1, (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1) // workers)
    waiting = list(indices)
    running: dict[int, tuple[subprocess.Popen, float, Path, Path, list[int]]] = {}
    failures: dict[int, str] = {}
    died: dict[int, str] = {}
    try:
        while waiting or running:
            while waiting and len(running) < workers:
                index = waiting.pop(0)
                shutil.rmtree(work / str(index), ignore_errors=True)  # a first attempt's files
                (work / str(index) / "captured").mkdir(parents=True)
                payload, outcome, log = (work / str(index) / name for name in ("payload", "outcome.json", "log"))
                payload.write_bytes(pickle.dumps((specs[index], f"models[{index}]", base_dir, cache_dir, seed,
                                                  list(sys.path), deadlines, threads)))
                with open(log, "wb") as out:
                    process = subprocess.Popen([sys.executable, "-m", "farm.models.parallel_export", str(payload),
                                                str(outcome)], stdin=subprocess.DEVNULL, stdout=out,
                                               stderr=subprocess.STDOUT)
                running[index] = (process, time.monotonic(), outcome, log, [0])
            time.sleep(POLL_S)
            for index, (process, started, outcome, log, relayed) in list(running.items()):
                relayed[0] = _relay_notes(log, relayed[0], note)
                code = process.poll()
                if code is None and time.monotonic() - started < EXPORT_DEADLINE_S:
                    continue
                del running[index]
                if code == -signal.SIGINT:  # Ctrl-C reached the export processes too: planning stops
                    raise KeyboardInterrupt
                if code is None:
                    process.kill()
                    process.wait()
                    failures[index] = (f"exporting {specs[index].source} to ONNX did not end within "
                                       f"{EXPORT_DEADLINE_S:.0f} s (farm.models.parallel_export.EXPORT_DEADLINE_S)")
                    continue
                result = json.loads(outcome.read_text()) if outcome.exists() else None
                if result is None:
                    died[index] = f"{_how(code)}; its last output: {_tail(log) or 'none'}"
                elif result.get("failed"):
                    failures[index] = result["failed"]
    finally:
        for process, *_ in running.values():  # interrupted: no export outlives the planner
            process.kill()
            process.wait()
    return failures, died


def _how(code: int) -> str:
    if code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"


def _tail(log: Path) -> str:
    """The last lines a dead export process wrote: its own output, then what the exporter or the
    model's code printed while farm captured it (left on disk where the process was killed)."""
    captured = sorted((log.parent / "captured").iterdir(), key=lambda path: path.stat().st_mtime)
    lines = [line for path in [log, *captured] for line in path.read_text(errors="replace").splitlines() if line.strip()]
    return " | ".join(lines[-LAST_OUTPUT_LINES:])[-2000:]


def _relay_notes(log: Path, offset: int, note) -> int:
    """Print the planner's own notes (lines starting 'farm: ') an export process has written since
    `offset`; the new offset."""
    try:
        with open(log, "rb") as handle:
            handle.seek(offset)
            chunk = handle.read()
    except OSError:
        return offset
    complete = chunk.rfind(b"\n") + 1
    for line in chunk[:complete].decode(errors="replace").splitlines():
        if line.startswith("farm: "):
            note(line)
    return offset + complete


def _export_one(payload: Path, outcome: Path) -> None:
    """In an export process: export one model into the cache and write how it went to `outcome`."""
    spec, where, base_dir, cache_dir, seed, path, deadlines, threads = pickle.loads(payload.read_bytes())
    sys.path[:] = path
    from farm.models import native

    native.FACTORY_DEADLINE_S, native.FACTORY_NOTE_AFTER_S = deadlines
    from farm.models import export

    export.CAPTURE_DIR = outcome.parent / "captured"
    import torch

    torch.set_num_threads(threads)
    try:
        native.native_model(spec, where, base_dir, cache_dir, seed)
        result: dict[str, str | bool] = {"done": True}
    except native.ModelFailed as exc:
        result = {"failed": exc.reason}
    except ConfigError as exc:  # the planner names it, with the sweep file
        result = {"config_error": str(exc)}
    write_atomic(outcome, json.dumps(result), tmp_dir=outcome.parent)


if __name__ == "__main__":
    faulthandler.enable()  # a crash in native code leaves its stack in the log its reason quotes
    _export_one(Path(sys.argv[1]), Path(sys.argv[2]))
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # a factory's thread still hanging (it failed its deadline) must not keep the process
