"""Facts single lines of a trtexec log state, whatever the section or builder pass they are in:
the command line's model and shapes, the inputs' shapes, the device (farm.trt_output.log reads
the log and calls these; `facts` is its LogFacts)."""

from __future__ import annotations

import re
from typing import Any

UNIT_BYTES = {"B": 1, "bytes": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}  # the units TensorRT prints sizes in


def command_facts(facts: Any, command: str) -> None:
    """The model and input shapes named on trtexec's command line."""
    for arg in command.split():
        name, _, value = arg.partition("=")
        if name in ("--onnx", "--deploy", "--uff", "--model") and value:
            add_model(facts, value)
        elif name == "--batch" and value.isdigit() and facts.inference_batch is None:
            facts.inference_batch = int(value)  # implicit batch (7.x, 8.x); "Batch: N" says the same
        elif name == "--shapes":
            for spec in value.split(","):
                tensor, _, dims = spec.rpartition(":")
                if tensor and re.fullmatch(r"\d+(?:x\d+)*", dims):
                    facts.input_shapes.setdefault(tensor.strip("'\""), [int(d) for d in dims.split("x")])


def input_facts(facts: Any, line: str) -> None:
    """The model file and the input shapes a line names: the inference shapes, and the engine's
    input as created ("Input binding for x with dimensions 1x1x28x28 [and type fp32] is created."
    from 10.x, "Created input binding for x with dimensions 4x1x28x28" in 8.x)."""
    if m := re.match(r"Input inference shape\s*(?:\(profile \d+\))?\s*: (.+)=([\dx]+)$", line):
        facts.input_shapes[m.group(1).strip()] = [int(d) for d in m.group(2).split("x")]
    if m := re.match(r"(?:Created input binding for (\S+) with dimensions ([\dx]+)|"
                     r"Input binding for (\S+) with dimensions ([\dx]+)(?: and type \w+)? is created)", line):
        name, dims = (m.group(1), m.group(2)) if m.group(1) else (m.group(3), m.group(4))
        facts.input_shapes.setdefault(name, [int(d) for d in dims.split("x")])
    if m := re.search(r"Input filename:\s+(\S.*)$", line):
        add_model(facts, m.group(1).strip())


def add_model(facts: Any, path: str) -> None:
    if path and path not in facts.model_files:
        facts.model_files.append(path)


def device_fact(device: dict[str, Any], key: str, value: str) -> None:
    if key == "Selected Device":
        device["name"] = value
    elif key == "Compute Capability":
        device["compute_capability"] = value
    elif key == "SMs":
        device["sm_count"] = int(value)
    elif key == "Device Global Memory" and (m := re.match(r"(\d+) (\w+)", value)):
        device["memory_bytes"] = int(m.group(1)) * UNIT_BYTES.get(m.group(2), 1)
    elif key == "Memory Bus Width" and (m := re.match(r"(\d+) bits", value)):
        device["memory_bus_width_bits"] = int(m.group(1))
    elif key in ("Application Compute Clock Rate", "Compute Clock Rate") and (m := re.match(r"([\d.]+) GHz", value)):
        device["clock_graphics_mhz"] = round(float(m.group(1)) * 1000)
    elif key in ("Application Memory Clock Rate", "Memory Clock Rate") and (m := re.match(r"([\d.]+) GHz", value)):
        device["clock_memory_mhz"] = round(float(m.group(1)) * 1000)
    elif key in ("UUID", "Selected Device UUID"):
        device["uuid"] = value
