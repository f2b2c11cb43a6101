"""The reader of trtexec logs and verbose TensorRT builder logs (complete or cut, with or
without log stamps, 7.x to 11.x): options, device, performance summary, layer counts through
fusion, per-layer memory lines, builder peak memory, "Engine Layer Information" lines, the
`--dumpProfile` table, the command line and what it says about the model and input shapes.

A log is read line by line (a verbose build log can be hundreds of MB), split into its trtexec
runs (`LogRunsFromTrtexecLog`) and, within a run, into its builds ("Original: N layers") and their
builder passes (10.x: "Building graph using backend strategy N"): every build figure is the engine's
pass's, the one the builder says it kept ("Chose this engine with backend strategy N"), else the
last; the build time is trtexec's whole build ("Engine built in"), else the sum of the engine's
build's passes. What each version printed and meant: `farm.trt_output.versions`.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable
from typing import Any

from farm.trt_output.engine_layers import EngineLayer, LayerFromLogLine
from farm.trt_output.json_files import FormatError, Profile, ProfileRow
from farm.trt_output.log_lines import UNIT_BYTES, add_model, command_facts, device_fact, input_facts
from farm.trt_output.versions import profile_layout, profile_row, strip_prefix, version_from_int


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
    command: str | None = None  # trtexec's command line, from its `&&&& RUNNING/PASSED/FAILED` line
    outcome: str | None = None  # PASSED or FAILED, as trtexec's last line says
    model_files: list[str] = dataclasses.field(default_factory=list)  # ONNX files the log names
    input_shapes: dict[str, list[int]] = dataclasses.field(default_factory=dict)  # --shapes / inference shapes
    # What the performance figures mean (farm.trt_output.versions): the printed Throughput and "Timing trace has N
    # queries" count `inference_batch` samples per query for an implicit-batch engine (--batch=N;
    # 7.x and 8.x); 0 = explicit batch (7.x then prints those figures as 0); None = not stated.
    inference_batch: int | None = None
    queries_printed: int | None = None  # "Timing trace has N queries over T s", N as printed
    trace_walltime_s: float | None = None  # its T
    layout_major: int | None = None  # the major version the summary's layout belongs to (7, or 8 and later)
    build_passes: int = 0  # builder passes of the engine's build; every build figure is from the kept pass
    initializers: set[str] = dataclasses.field(default_factory=set)  # ONNX initializers the parser imported
    node_inputs: dict[str, list[tuple[str, str, list[int]]]] = dataclasses.field(default_factory=dict)
    # MatMul/Gemm node -> its initializer inputs' shapes
    weight_shapes: dict[str, list[list[int]]] = dataclasses.field(default_factory=dict)


_STAT = re.compile(r"(min|max|mean|median|percentile\((\d+(?:\.\d+)?)%\))\s*=\s*([-\d.e+]+)\s*ms")
_SUMMARY_METRICS = {"Latency": "latency", "Enqueue Time": "enqueue", "H2D Latency": "h2d",
                    "GPU Compute Time": "compute", "D2H Latency": "d2h", "End-to-End Host Latency": "end_to_end"}
# 7.x prints its summary as blocks: a heading line, then `min: X ms (end to end Y ms)` lines.
_BLOCK_7X = {"Host Latency": "latency", "Host latency": "latency", "Enqueue Time": "enqueue",
             "GPU Compute": "compute"}
_NUMBER = r"([-\d.e+]+)"


def LogFactsFromTrtexecLog(text: str | Iterable[str]) -> LogFacts:
    """Facts from a trtexec log or a verbose TensorRT builder log (complete or cut) of one run:
    its text, or its lines as they are read. A log of several trtexec runs is a FormatError here:
    `LogRunsFromTrtexecLog` splits it."""
    runs = LogRunsFromTrtexecLog(text.splitlines() if isinstance(text, str) else text)
    if len(runs) > 1:
        raise FormatError(f"it holds {len(runs)} trtexec runs; read them with LogRunsFromTrtexecLog")
    return runs[0]


def LogRunsFromTrtexecLog(lines: Iterable[str]) -> list[LogFacts]:
    """One LogFacts per trtexec run in the log, in order (a run begins at trtexec's `&&&& RUNNING`
    line, or at a second "=== Model Options ==="); always at least one."""
    reader = _LogReader()
    for raw in lines:
        reader.feed(raw)
    return reader.finish()


class _LogReader:
    """The state of reading one log: the run being read, its section, and its build pass."""

    def __init__(self) -> None:
        self.runs: list[LogFacts] = []
        self._new_run()

    def _new_run(self) -> None:
        self.facts = LogFacts()
        self.runs.append(self.facts)
        self.section: str | None = None
        self.block: str | None = None  # 7.x summary block being read
        self.profile_rows: list[ProfileRow] = []
        self.profile_count: int | None = None
        self.profile_layout: str | None = None
        self.passes: list[dict[str, Any]] = []
        self.build_number = 0  # builds in this run's log so far (a Python builder may log several)
        self.chosen_strategy: int | None = None  # the strategy of the pass the builder kept, as it says
        self.engine_layers: list[EngineLayer] | None = None  # the last "Engine Layer Information" block
        self.original_layers: int | None = None  # "Original: N layers": the parsed network, before any pass
        self.engine_built_s: float | None = None  # trtexec's "Engine built in X sec": the whole build
        self.build_finished = False
        self.seen_model_options = False
        self.seen_running = False
        self._new_pass()

    def _new_pass(self, strategy: int | None = None) -> None:
        """A builder pass: what it logged, its backend strategy (10.x) and which build it is of (a
        log can hold several builds, each starting at "Original: N layers")."""
        self.build = {"counts": [], "layer_memory": {}, "totals": {}, "layers": [], "generation_s": None,
                      "strategy": strategy, "number": self.build_number}
        self.passes.append(self.build)

    def _pass_has_content(self, build: dict[str, Any] | None = None) -> bool:
        build = build or self.build
        return any(build[k] for k in ("counts", "layer_memory", "totals", "layers")) or build["generation_s"] is not None

    def _run_has_content(self) -> bool:
        f = self.facts
        return bool(f.summary or f.throughput_qps is not None or self.profile_rows
                    or any(p[k] for p in self.passes for k in p) or f.build_s is not None)

    def feed(self, raw: str) -> None:
        raw = raw.rstrip("\r\n")
        facts = self.facts
        if layer := LayerFromLogLine(raw):
            self._layer(layer)
            return
        line = strip_prefix(raw)
        if line != raw.strip() and (layer := LayerFromLogLine(line)):  # a layer line with a log stamp
            self._layer(layer)
            return
        # 8.0 on name the version ([TensorRT v8601]); 7.x does not
        if m := re.search(r"&+ (RUNNING|PASSED|FAILED) TensorRT\.trtexec(?: \[TensorRT v(\d+)\])?(?: \[\w+\])? # (.*)$", line):
            if m.group(1) == "RUNNING":
                if self.seen_running or self._run_has_content():
                    self._finish_run()
                    self._new_run()
                    facts = self.facts
                self.seen_running = True
            facts.command = m.group(3).strip()
            if m.group(2):
                facts.tensorrt_version = facts.tensorrt_version or version_from_int(m.group(2))
            facts.outcome = m.group(1) if m.group(1) != "RUNNING" else facts.outcome
            command_facts(facts, facts.command)
            return
        if m := re.match(r"=== (.+?) ?===$", line):
            self.section = m.group(1).strip()
            self.block = None
            if self.section == "Model Options":
                if self.seen_model_options and self._run_has_content():  # no RUNNING line between two runs
                    self._finish_run()
                    self._new_run()
                self.seen_model_options = True
            if pm := re.match(r"Profile \((\d+) iterations", self.section):
                self.profile_count = int(pm.group(1))
                self.profile_rows = []  # a second table (a cut-off first one) replaces it
                self.profile_layout = None
            return
        self._version(line)
        section = self.section
        if section and section.endswith("Options") and (m := re.match(r"([^:]+): ?(.*)$", line)):
            facts.options[f"{section.removesuffix(' Options').lower()}.{m.group(1).strip()}"] = m.group(2).strip()
            if section == "Inference Options" and m.group(1).strip() == "Batch":
                value = m.group(2).strip()
                facts.inference_batch = int(value) if value.isdigit() else (0 if value == "Explicit" else None)
        if section == "Device Information" and (m := re.match(r"([^:]+): (.*)$", line)):
            device_fact(facts.device, m.group(1).strip(), m.group(2).strip())
        input_facts(facts, line)
        self._performance(line)
        self._build(line)
        if section and section.startswith("Profile ("):
            layout = profile_layout(line)
            if layout:
                self.profile_layout = layout
            elif row := profile_row(line, self.profile_layout):
                self.profile_rows.append(ProfileRow(row[0], row[2], row[3], row[1], row[4]))

    def _layer(self, layer: EngineLayer) -> None:
        """A layer line: of the engine's "Engine Layer Information" block (printed once the builder
        kept an engine: the kept pass's layers, which need not be the last pass's), else the pass's."""
        (self.engine_layers if self.engine_layers is not None else self.build["layers"]).append(layer)

    def _version(self, line: str) -> None:
        facts = self.facts
        if m := re.search(r"TensorRT v(\d+)\]", line):
            facts.tensorrt_version = facts.tensorrt_version or version_from_int(m.group(1))
        elif m := re.search(r"TensorRT version: ([\d.]+\d)", line):
            facts.tensorrt_version = m.group(1)

    def _performance(self, line: str) -> None:
        facts = self.facts
        if m := re.match(r"Timing trace has (\d+) queries over " + _NUMBER + " s", line):
            facts.queries_printed, facts.trace_walltime_s = int(m.group(1)), float(m.group(2))
        if m := re.match(r"Throughput: " + _NUMBER + " qps", line):
            facts.throughput_qps = float(m.group(1))
            facts.layout_major = facts.layout_major or 8
        for label, key in _SUMMARY_METRICS.items():
            if line.startswith(f"{label}: "):
                stats = {}
                for stat, pct, value in _STAT.findall(line):
                    stats[f"p{_pct_key(pct)}" if pct else stat] = float(value)
                if stats:  # not the "=== Explanations ===" line of the same name
                    facts.summary[key] = stats
                    if key == "end_to_end":
                        facts.layout_major = 8  # 8.0 to 8.5 print it; 8.6 on do not
        if m := re.match(r"Total Host Walltime: " + _NUMBER + " s", line):
            facts.host_walltime_s = float(m.group(1))
        if m := re.match(r"Total GPU Compute Time: " + _NUMBER + " s", line):
            facts.gpu_compute_total_s = float(m.group(1))
        # 7.x: blocks of `min: X ms` lines under a heading
        if line in _BLOCK_7X:
            self.block = _BLOCK_7X[line]
            facts.layout_major = 7
            return
        if self.block is None:
            return
        if m := re.match(r"(min|max|mean|median): " + _NUMBER + r" ms(?: \(end to end " + _NUMBER + r" ms\))?$", line):
            facts.summary.setdefault(self.block, {})[m.group(1)] = float(m.group(2))
            if m.group(3):
                facts.summary.setdefault("end_to_end", {})[m.group(1)] = float(m.group(3))
        elif m := re.match(r"percentile: " + _NUMBER + r" ms at ([\d.]+)%(?: \(end to end " + _NUMBER + " ms)?", line):
            facts.summary.setdefault(self.block, {})[f"p{_pct_key(m.group(2))}"] = float(m.group(1))
            if m.group(3):
                facts.summary.setdefault("end_to_end", {})[f"p{_pct_key(m.group(2))}"] = float(m.group(3))
        elif m := re.match(r"throughput: " + _NUMBER + " qps", line):
            facts.throughput_qps = float(m.group(1))
        elif m := re.match(r"walltime: " + _NUMBER + " s", line):
            facts.host_walltime_s = float(m.group(1))
        elif m := re.match(r"total compute time: " + _NUMBER + " s", line):
            facts.gpu_compute_total_s = float(m.group(1))
            self.block = None
        else:
            self.block = None

    def _build(self, line: str) -> None:
        facts, build = self.facts, self.build
        if m := re.match(r"After ([\w -]+): (\d+) layers", line):
            first = build["counts"][0][0] if build["counts"] else None
            if (first == m.group(1) and len(build["counts"]) > 1) or (
                    not build["counts"] and self._pass_has_content()):
                self._new_pass()  # another build in the same log (several engines built in one process)
                build = self.build
            build["counts"].append((m.group(1), int(m.group(2))))
        elif m := re.match(r"Original: (\d+) layers", line):  # a build begins: the parsed network
            self.original_layers, self.chosen_strategy = int(m.group(1)), None
            self.build_number += 1
            if self._pass_has_content():
                self._new_pass()
            self.build["number"] = self.build_number
        elif m := re.match(r"Building graph using backend strategy (\d+)", line):  # 10.x: a builder pass
            if build["strategy"] is None:  # the first: the graph optimizations before it are its own
                build["strategy"] = int(m.group(1))
            else:
                self._new_pass(int(m.group(1)))
        elif m := re.match(r"(?:Use backend strategy|Chose this engine with backend strategy) (\d+)", line):
            self.chosen_strategy = int(m.group(1))  # "Skip backend strategy N": the kept one stays
        elif re.match(r"Engine Layer Information:\s*$", line):
            self.engine_layers = []  # a later block (several builds) replaces it
        elif m := re.search(r"Engine built in ([\d.e+]+) sec", line):
            self.engine_built_s = float(m.group(1))
        unit = r"(?: bytes)?"
        if m := re.match(r"Layer: (.+?) Host Persistent: (\d+)" + unit + r" Device Persistent: (\d+)" + unit +
                         r" Scratch Memory: (\d+)" + unit + "$", line):
            self.build["layer_memory"][m.group(1)] = {"host_persistent_bytes": int(m.group(2)),
                                                      "device_persistent_bytes": int(m.group(3)),
                                                      "scratch_bytes": int(m.group(4))}
        if m := re.match(r"(?:Total (Host Persistent|Device Persistent|Scratch)|Max (Scratch)) Memory: (\d+)" + unit + "$",
                         line):
            attribute = {"Host Persistent": "host_persistent_bytes", "Device Persistent": "device_persistent_bytes",
                         "Scratch": "scratch_bytes"}[m.group(1) or m.group(2)]
            self.build["totals"][attribute] = int(m.group(3))
        if m := re.search(r"Peak memory usage of TRT CPU/GPU memory allocators: CPU (\d+) (\w+), GPU (\d+) (\w+)", line):
            facts.builder_peak_host_bytes = int(m.group(1)) * UNIT_BYTES.get(m.group(2), 1)
            facts.builder_peak_device_bytes = int(m.group(3)) * UNIT_BYTES.get(m.group(4), 1)
        if m := re.search(r"Engine generation completed in ([\d.e+]+) seconds", line):
            self.build["generation_s"] = float(m.group(1))
        if m := re.match(r"Importing initializer: (\S+)", line):
            self.facts.initializers.add(m.group(1))
        if m := re.match(r"(\S+) \[(\w+)\] inputs: (.*)$", line):
            inputs = [(n, [int(d) for d in dims.split(",") if d.strip()])
                      for n, dims in re.findall(r"\[(\S+) -> \(([-\d, ]*)\)\[", m.group(3))]
            if m.group(2) in ("Conv", "ConvTranspose") and len(inputs) >= 2:
                facts.conv_weight_shapes[m.group(1)] = inputs[1][1]
            elif m.group(2) in ("MatMul", "Gemm"):
                facts.node_inputs[m.group(1)] = [(m.group(2), n, dims) for n, dims in inputs[:2]]

    def _finish_run(self) -> None:
        facts = self.facts
        if model := facts.options.get("model.Model"):
            add_model(facts, model)
        if self.profile_rows:
            facts.profile = Profile(self.profile_count, self.profile_rows)
        with_content = [p for p in self.passes if self._pass_has_content(p)] or self.passes[-1:]
        passes = [p for p in with_content if p["number"] == with_content[-1]["number"]]  # the last build's
        kept = [p for p in passes if p["strategy"] is not None and p["strategy"] == self.chosen_strategy]
        engine_pass = kept[-1] if kept else passes[-1]
        facts.build_passes = len(passes)
        _layer_counts(facts, engine_pass["counts"], self.original_layers)
        facts.layer_memory = engine_pass["layer_memory"]
        for attribute, value in engine_pass["totals"].items():
            setattr(facts, attribute, value)
        facts.layers = self.engine_layers if self.engine_layers else engine_pass["layers"]
        # the build's time: trtexec's whole build, else the engine's passes (10.x strategies: all of them)
        times = [p["generation_s"] for p in passes if p["generation_s"] is not None]
        facts.build_s = self.engine_built_s if self.engine_built_s is not None else sum(times) if times else None
        facts.weight_shapes = {node: [dims for op, name, dims in inputs if name in facts.initializers]
                               for node, inputs in facts.node_inputs.items()}
        facts.weight_shapes = {k: v for k, v in facts.weight_shapes.items() if v}

    def finish(self) -> list[LogFacts]:
        self._finish_run()
        return self.runs


def _layer_counts(facts: LogFacts, counts: list[tuple[str, int]], original: int | None = None) -> None:
    """Layers after parsing ("Original: N layers", else the first count the builder logs), after
    fusion (the last count before reformat layers are added) and after reformat layers."""
    if not counts:
        facts.layers_after_parsing = original
        return
    facts.layers_after_parsing = original if original is not None else counts[0][1]
    before_reformat = []
    for step, number in counts:
        if step == "reformat layers":
            facts.layers_after_reformat = number
            break
        before_reformat.append(number)
    if before_reformat:
        facts.layers_after_fusion = before_reformat[-1]


def _pct_key(pct: str) -> str:
    return pct.rstrip("0").rstrip(".") if "." in pct else pct


