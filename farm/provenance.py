"""Where and with what a cell ran: host, CPU, library versions, farm version and commit."""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import importlib.util
import os
import platform
import re
import socket
import subprocess
from pathlib import Path
from typing import Any

from farm import __version__

LIBRARIES = ("numpy", "onnx", "pyarrow", "duckdb", "ray")  # farm's own; each backend adds its engine's (Backend.libraries)


@functools.lru_cache(maxsize=1)
def farm_commit() -> str | None:
    """The git commit of the farm source tree, with '+dirty' when it has local changes."""
    root = Path(__file__).resolve().parent.parent
    if not (root / ".git").exists():
        return None
    try:
        commit = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True,
                                text=True, timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return commit + ("+dirty" if dirty else "")


@functools.lru_cache(maxsize=1)
def library_versions(engines: tuple[str, ...] = ()) -> dict[str, str]:
    """Installed versions of farm's libraries and of `engines` (the backends' own, from
    farm.backends.registry.engine_libraries) that can change a result; absent ones left out. The
    version the package's own files state comes first: two distributions can install one module
    (onnxruntime and onnxruntime-gpu both install `onnxruntime`, the last one installed owning its
    files), and the distribution's record would name the other. Those distributions are listed too."""
    versions = {"python": platform.python_version(), "farm": __version__}
    for name in dict.fromkeys([*LIBRARIES, *engines]):
        found = _stated_version(name) or _distribution_version(name)
        if found:
            versions[name] = found
        for other in SHARED_MODULE.get(name, ()):
            if other_version := _distribution_version(other):
                versions[other] = other_version
    return versions


# distributions that install a module of another's name (the GPU build of an engine)
SHARED_MODULE = {"onnxruntime": ("onnxruntime-gpu",)}
_STATED = re.compile(r"^__version__\s*=\s*[\"']([^\"']+)[\"']", re.MULTILINE)


def _distribution_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _stated_version(module: str) -> str | None:
    """`__version__` as the package's __init__.py assigns it, read without importing it; None where
    it assigns none literally (the distribution's record then stands)."""
    try:
        spec = importlib.util.find_spec(module)
        origin = spec.origin if spec else None
        text = Path(origin).read_text(encoding="utf-8", errors="replace")[:100_000] if origin else ""
    except (ImportError, ValueError, OSError):
        return None
    match = _STATED.search(text)
    return match.group(1) if match else None


@functools.lru_cache(maxsize=1)
def host_info() -> dict[str, Any]:
    """Host name, CPU model and core counts, memory."""
    import cpuinfo

    info = cpuinfo.get_cpu_info()
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        memory = None
    return {
        "host": socket.gethostname(),
        "cpu_model": info.get("brand_raw") or platform.processor() or platform.machine(),
        "cpu_cores": os.cpu_count(),
        "cpu_arch": info.get("arch_string_raw") or platform.machine(),
        "memory_bytes": memory,
        "os": platform.platform(),
    }


def cpu_device_row() -> dict[str, Any]:
    """The `devices` row of this host's CPU, for cells measured on it."""
    host = host_info()
    ident = hashlib.sha256(f"{host['host']}|{host['cpu_model']}|{host['cpu_cores']}".encode()).hexdigest()[:16]
    return {
        "device_id": f"cpu-{ident}",
        "kind": "cpu",
        "name": host["cpu_model"],
        "host": host["host"],
        "cpu_cores": host["cpu_cores"],
        "memory_bytes": host["memory_bytes"],
        "os": host["os"],
    }


def cuda_device_row(index: int = 0) -> dict[str, Any]:
    """The `devices` row of a CUDA GPU, from PyTorch and, where importable, NVML.

    `index` is the device as this process sees it (after CUDA_VISIBLE_DEVICES); NVML is asked
    by UUID, which does not depend on that remapping.
    """
    import torch

    props = torch.cuda.get_device_properties(index)
    uuid = str(getattr(props, "uuid", "") or "")
    uuid = uuid if not uuid or uuid.startswith("GPU-") else f"GPU-{uuid}"
    row: dict[str, Any] = {
        "device_id": f"gpu-{uuid.removeprefix('GPU-')}" if uuid else f"gpu-{host_info()['host']}-{index}",
        "kind": "cuda",
        "name": props.name,
        "host": host_info()["host"],
        "uuid": uuid or None,
        "compute_capability": f"{props.major}.{props.minor}",
        "sm_count": props.multi_processor_count,
        "memory_bytes": int(props.total_memory),
        "cuda_version": torch.version.cuda,
        "cpu_cores": host_info()["cpu_cores"],
        "os": host_info()["os"],
        "visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
    }
    _add_nvml_facts(row, uuid, index)
    return row


def cuda_device_row_from_runtime(cuda, index: int = 0) -> dict[str, Any]:
    """The `devices` row of a CUDA GPU from cuda-python's device properties (and NVML)."""
    props = cuda.properties(index)
    name = props.name.decode(errors="replace").rstrip("\x00") if isinstance(props.name, bytes) else str(props.name)
    raw_uuid = bytes(getattr(getattr(props, "uuid", None), "bytes", b"") or b"")
    uuid = ""
    if len(raw_uuid) == 16:
        h = raw_uuid.hex()
        uuid = f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
    row: dict[str, Any] = {
        "device_id": f"gpu-{uuid.removeprefix('GPU-')}" if uuid else f"gpu-{host_info()['host']}-{index}",
        "kind": "cuda", "name": name, "host": host_info()["host"], "uuid": uuid or None,
        "compute_capability": f"{props.major}.{props.minor}", "sm_count": int(props.multiProcessorCount),
        "memory_bytes": int(props.totalGlobalMem), "cpu_cores": host_info()["cpu_cores"], "os": host_info()["os"],
        "visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
    }
    bus = getattr(props, "memoryBusWidth", None)
    if bus:
        row["memory_bus_width_bits"] = int(bus)
    _add_nvml_facts(row, uuid, index)
    return row


def _add_nvml_facts(row: dict[str, Any], uuid: str, index: int) -> None:
    try:
        import pynvml

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByUUID(uuid) if uuid else pynvml.nvmlDeviceGetHandleByIndex(index)
        row["memory_bus_width_bits"] = int(pynvml.nvmlDeviceGetMemoryBusWidth(handle))
        row["clock_graphics_mhz"] = int(pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_GRAPHICS))
        row["clock_memory_mhz"] = int(pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_MEM))
        driver = pynvml.nvmlSystemGetDriverVersion()
        row["driver_version"] = driver.decode() if isinstance(driver, bytes) else driver
    except Exception:  # noqa: BLE001 - NVML is optional: the figures above stand without it
        pass
