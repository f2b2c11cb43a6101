"""Readers for what TensorRT and trtexec write, recognised by content, not by file name.

Each reader returns plain data and reports what it could not read instead of guessing. Formats
(see ../shared/design/tensorrt-reference.md, sections 4 to 6):
- `--exportProfile` JSON: `[{"count": N}, {name, timeMs, averageMs, medianMs?, percentage}, ...]`
- `--exportTimes` JSON: one object per query with h2dMs, computeMs, d2hMs, latencyMs and the
  start/end times of each phase
- `--exportLayerInfo` / engine-inspector JSON: `{"Layers": [...], "Bindings" | "I/O Tensors": ...}`
- trtexec and verbose builder logs: options, device, performance summary, layer counts through
  fusion, per-layer memory lines, builder peak memory, "Engine Layer Information" lines, the
  `--dumpProfile` table.
"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any

from farm.layers.engine import EngineLayer, layers_from_inspector, parse_layer_lines

_STAMP = r"^(?:\S*\]\s*)?(?:\[\w\]\s*)?(?:\[TRT\]\s*)?"  # "[08/20/2023-11:59:45] [I] [TRT] " (first '[' may be cut)


@dataclasses.dataclass
class ProfileRow:
    name: str
    average_ms: float
    median_ms: float | None
    total_ms: float | None
    percentage: float | None


@dataclasses.dataclass
class Profile:
    count: int | None
    rows: list[ProfileRow]


@dataclasses.dataclass
class LogFacts:
    """Everything a trtexec / verbose log said that farm stores."""

    tensorrt_version: str | None = None
    options: dict[str, str] = dataclasses.field(default_factory=dict)
    device: dict[str, Any] = dataclasses.field(default_factory=dict)
    summary: dict[str, dict[str, float]] = dataclasses.field(default_factory=dict)  # metric -> stat -> value
    throughput_qps: float | None = None
    host_walltime_s: float | None = None
    gpu_compute_total_s: float | None = None
    layers_after_parsing: int | None = None
    layers_after_fusion: int | None = None
    layers_after_reformat: int | None = None
    layer_memory: dict[str, dict[str, int]] = dataclasses.field(default_factory=dict)
    host_persistent_bytes: int | None = None
    device_persistent_bytes: int | None = None
    scratch_bytes: int | None = None
    builder_peak_host_bytes: int | None = None
    builder_peak_device_bytes: int | None = None
    build_s: float | None = None
    conv_weight_shapes: dict[str, list[int]] = dataclasses.field(default_factory=dict)
    layers: list[EngineLayer] = dataclasses.field(default_factory=list)
    profile: Profile | None = None


def detect_kind(text: str) -> str | None:
    """'profile', 'times', 'layer_info' (inspector JSON) or 'log'; None if it is none of them."""
    stripped = text.lstrip()
    if stripped.startswith(("[", "{")):
        try:
            document = json.loads(stripped)
        except ValueError:
            document = None
        if isinstance(document, dict) and "Layers" in document:
            return "layer_info"
        if isinstance(document, list) and document:
            if isinstance(document[0], dict) and set(document[0]) == {"count"}:
                return "profile"
            if isinstance(document[0], dict) and {"computeMs", "latencyMs"} <= set(document[0]):
                return "times"
    if re.search(r"Layer\(\w*\): |=== Performance summary ===|\[TRT\]|=== Profile \(|=== Device Information ===",
                 text):
        return "log"
    return None


def read_profile_json(text: str) -> Profile:
    document = json.loads(text)
    count = document[0].get("count") if document and isinstance(document[0], dict) else None
    rows = [ProfileRow(r["name"], float(r["averageMs"]), _float(r.get("medianMs")), _float(r.get("timeMs")),
                       _float(r.get("percentage"))) for r in document[1:] if "name" in r]
    return Profile(count, rows)


def read_times_json(text: str) -> list[dict[str, float]]:
    """Per-query records of `--exportTimes`, in order."""
    return [{k: float(v) for k, v in r.items() if isinstance(v, (int, float))} for r in json.loads(text)]


def read_layer_info_json(text: str) -> list[EngineLayer]:
    return layers_from_inspector(json.loads(text))


_STAT = re.compile(r"(min|max|mean|median|percentile\((\d+(?:\.\d+)?)%\))\s*=\s*([-\d.e+]+)\s*ms")
_SUMMARY_METRICS = {"Latency": "latency", "Enqueue Time": "enqueue", "H2D Latency": "h2d",
                    "GPU Compute Time": "compute", "D2H Latency": "d2h", "End-to-End Host Latency": "end_to_end"}
_SIZE = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}


def read_log(text: str) -> LogFacts:
    """Facts from a trtexec log or a verbose TensorRT builder log (complete or cut)."""
    facts = LogFacts()
    section = None
    counts: list[tuple[str, int]] = []
    profile_rows: list[ProfileRow] = []
    profile_count = None
    for raw in text.splitlines():
        line = re.sub(_STAMP, "", raw).rstrip()
        if m := re.match(r"=== (.+?) ?===$", line.strip()):
            section = m.group(1).strip()
            if pm := re.match(r"Profile \((\d+) iterations", section):
                profile_count = int(pm.group(1))
            continue
        if m := re.search(r"TensorRT v(\d+)\]", line):
            facts.tensorrt_version = _version_from_int(m.group(1))
        elif m := re.search(r"TensorRT version: ([\d.]+)", line):
            facts.tensorrt_version = m.group(1)
        if section and section.endswith("Options") and (m := re.match(r"([^:]+): ?(.*)$", line.strip())):
            facts.options[f"{section.removesuffix(' Options').lower()}.{m.group(1).strip()}"] = m.group(2).strip()
        if section == "Device Information" and (m := re.match(r"([^:]+): (.*)$", line.strip())):
            _device_fact(facts.device, m.group(1).strip(), m.group(2).strip())
        if m := re.match(r"Throughput: ([\d.e+]+) qps", line.strip()):
            facts.throughput_qps = float(m.group(1))
        for label, key in _SUMMARY_METRICS.items():
            if line.strip().startswith(f"{label}: "):
                stats = {}
                for stat, pct, value in _STAT.findall(line):
                    stats[f"p{_pct_key(pct)}" if pct else stat] = float(value)
                if stats:  # not the "=== Explanations ===" line of the same name
                    facts.summary[key] = stats
        if m := re.match(r"Total Host Walltime: ([\d.e+]+) s", line.strip()):
            facts.host_walltime_s = float(m.group(1))
        if m := re.match(r"Total GPU Compute Time: ([\d.e+]+) s", line.strip()):
            facts.gpu_compute_total_s = float(m.group(1))
        if m := re.match(r"After ([\w -]+): (\d+) layers", line.strip()):
            counts.append((m.group(1), int(m.group(2))))
        if m := re.match(r"Layer: (.+?) Host Persistent: (\d+) Device Persistent: (\d+) Scratch Memory: (\d+)",
                         line.strip()):
            facts.layer_memory[m.group(1)] = {"host_persistent_bytes": int(m.group(2)),
                                              "device_persistent_bytes": int(m.group(3)),
                                              "scratch_bytes": int(m.group(4))}
        if m := re.match(r"Total (Host Persistent|Device Persistent|Scratch) Memory: (\d+)", line.strip()):
            attribute = {"Host Persistent": "host_persistent_bytes", "Device Persistent": "device_persistent_bytes",
                         "Scratch": "scratch_bytes"}[m.group(1)]
            setattr(facts, attribute, int(m.group(2)))
        if m := re.search(r"Peak memory usage of TRT CPU/GPU memory allocators: CPU (\d+) (\w+), GPU (\d+) (\w+)", line):
            facts.builder_peak_host_bytes = int(m.group(1)) * _SIZE.get(m.group(2), 1)
            facts.builder_peak_device_bytes = int(m.group(3)) * _SIZE.get(m.group(4), 1)
        if m := re.search(r"Engine generation completed in ([\d.e+]+) seconds", line):
            facts.build_s = float(m.group(1))
        if m := re.match(r"(\S+) \[(?:Conv|ConvTranspose)\] inputs: \[[^\]]*\]\], \[[^\]]* -> \(([\d, ]+)\)\[", line.strip()):
            facts.conv_weight_shapes[m.group(1)] = [int(d) for d in m.group(2).split(",")]
        if section and section.startswith("Profile (") and (row := _profile_table_row(line)):
            profile_rows.append(row)
    facts.layers = parse_layer_lines(text)
    if profile_rows:
        facts.profile = Profile(profile_count, profile_rows)
    _layer_counts(facts, counts)
    return facts


def _layer_counts(facts: LogFacts, counts: list[tuple[str, int]]) -> None:
    """Layers after parsing (the first count the builder logs), after fusion (the last count before
    reformat layers are added) and after reformat layers."""
    if not counts:
        return
    facts.layers_after_parsing = counts[0][1]
    before_reformat = []
    for step, number in counts:
        if step == "reformat layers":
            facts.layers_after_reformat = number
            break
        before_reformat.append(number)
    if before_reformat:
        facts.layers_after_fusion = before_reformat[-1]


def _profile_table_row(line: str) -> ProfileRow | None:
    m = re.match(r"^\s*(?P<name>.*?)\s+(?P<t>[\d.]+)\s+(?P<avg>[\d.]+)\s+(?:(?P<med>[\d.]+)\s+)?(?P<pct>[\d.]+)\s*$",
                 line)
    if not m or m["name"].strip() in ("", "Layer") or m["name"].strip().startswith("Total"):
        return None
    return ProfileRow(m["name"].strip(), float(m["avg"]), _float(m["med"]), float(m["t"]), float(m["pct"]))


def _device_fact(device: dict[str, Any], key: str, value: str) -> None:
    if key == "Selected Device":
        device["name"] = value
    elif key == "Compute Capability":
        device["compute_capability"] = value
    elif key == "SMs":
        device["sm_count"] = int(value)
    elif key == "Device Global Memory" and (m := re.match(r"(\d+) (\w+)", value)):
        device["memory_bytes"] = int(m.group(1)) * _SIZE.get(m.group(2), 1)
    elif key == "Memory Bus Width" and (m := re.match(r"(\d+) bits", value)):
        device["memory_bus_width_bits"] = int(m.group(1))
    elif key == "Application Compute Clock Rate" and (m := re.match(r"([\d.]+) GHz", value)):
        device["clock_graphics_mhz"] = round(float(m.group(1)) * 1000)
    elif key == "Application Memory Clock Rate" and (m := re.match(r"([\d.]+) GHz", value)):
        device["clock_memory_mhz"] = round(float(m.group(1)) * 1000)
    elif key == "UUID":
        device["uuid"] = value


def _pct_key(pct: str) -> str:
    return pct.rstrip("0").rstrip(".") if "." in pct else pct


def _version_from_int(number: str) -> str:
    """trtexec's [TensorRT v8003] -> 8.0.3; v8601 -> 8.6.1; v100100 -> 10.1.0."""
    value = int(number)
    if value >= 100000:
        return f"{value // 10000}.{value // 100 % 100}.{value % 100}"
    return f"{value // 1000}.{value // 100 % 10}.{value % 100}"


def _float(value: Any) -> float | None:
    return None if value is None else float(value)
