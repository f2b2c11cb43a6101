"""Readers for what TensorRT and trtexec write, recognised by content, not by file name.

Each reader returns plain data and reports what it could not read instead of guessing: a file
that is recognised but does not hold what its kind must (a `--exportTimes` record without
`latencyMs`, a layer whose `Name` is not a string, JSON cut short) raises `FormatError` with one
line saying where. Formats (see ../shared/design/tensorrt-reference.md, sections 4 to 6):
- `--exportProfile` JSON: `[{"count": N}, {name, timeMs, averageMs, medianMs?, percentage}, ...]`
- `--exportTimes` JSON: one object per query with h2dMs, computeMs, d2hMs, latencyMs and the
  start/end times of each phase
- `--exportLayerInfo` / engine-inspector JSON: `{"Layers": [...], "Bindings" | "I/O Tensors": ...}`
  (10.x `"Bindings": [names]`; 11.x `"I/O Tensors": [{Name, IOMode, DataType, Dimensions, Location,
  IsShapeInferenceIO, ProfileInfo}]`; both read, `read_inspector_json`)
- trtexec and verbose builder logs: options, device, performance summary, layer counts through
  fusion, per-layer memory lines, builder peak memory, "Engine Layer Information" lines, the
  `--dumpProfile` table, the command line and what it says about the model and input shapes.

`sniff` tells a file's kind from its first bytes, so that a large file that is not TensorRT
output is never read whole; logs are read line by line (`read_log_lines`).
"""

from __future__ import annotations

import codecs
import dataclasses
import json
import math
import re
from typing import Any, Iterable

from farm.ingest.trt_versions import profile_layout, profile_row, rules_for, strip_prefix, version_from_int
from farm.layers.engine import EngineLayer, dtype_from_format, layers_from_inspector, parse_layer_line

HEAD_BYTES = 1 << 20  # what `sniff` reads: trtexec's options and TensorRT's first lines come well within it
WHAT_FARM_READS = ("farm reads trtexec's --exportProfile, --exportTimes and --exportLayerInfo JSON, "
                   "engine-inspector JSON, and trtexec or verbose TensorRT build logs")
KIND_NAMES = {"profile": "an --exportProfile JSON", "times": "an --exportTimes JSON",
              "layer_info": "an engine-inspector (--exportLayerInfo) JSON", "log": "a trtexec/TensorRT log"}


class FormatError(ValueError):
    """A file recognised as TensorRT output that does not hold what its kind must (one line)."""


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
    command: str | None = None  # trtexec's command line, from its `&&&& RUNNING/PASSED/FAILED` line
    outcome: str | None = None  # PASSED or FAILED, as trtexec's last line says
    model_files: list[str] = dataclasses.field(default_factory=list)  # ONNX files the log names
    input_shapes: dict[str, list[int]] = dataclasses.field(default_factory=dict)  # --shapes / inference shapes
    # What the performance figures mean (trt_versions): the printed Throughput and "Timing trace has N
    # queries" count `inference_batch` samples per query for an implicit-batch engine (--batch=N;
    # 7.x and 8.x); 0 = explicit batch (7.x then prints those figures as 0); None = not stated.
    inference_batch: int | None = None
    queries_printed: int | None = None  # "Timing trace has N queries over T s", N as printed
    trace_walltime_s: float | None = None  # its T
    layout_major: int | None = None  # the major version the summary's layout belongs to (7, or 8 and later)
    build_passes: int = 0  # builder passes the log holds; every build figure is from the last (the engine's)
    initializers: set[str] = dataclasses.field(default_factory=set)  # ONNX initializers the parser imported
    node_inputs: dict[str, list[tuple[str, str, list[int]]]] = dataclasses.field(default_factory=dict)
    weight_shapes: dict[str, list[list[int]]] = dataclasses.field(default_factory=dict)  # MatMul/Gemm node -> its initializer inputs' shapes


_PROFILE_HEAD = re.compile(r'\A\s*\[\s*\{\s*"count"\s*:')
_TIMES_HEAD = re.compile(r'\A\s*\[\s*\{[^{}\[\]]*"(?:startEnqMs|endEnqMs|startH2dMs|endH2dMs|startComputeMs|'
                         r'endComputeMs|startD2hMs|endD2hMs|h2dMs|computeMs|d2hMs|latencyMs|startInMs|endInMs|inMs)"\s*:')
_LOG_MARKERS = re.compile(r"^Layer\(\w*\): |=== Performance summary ===|\[TRT\]|=== Profile \(|\[TensorRT\] [A-Z]+: |"
                          r"Timing trace has \d+ queries over|Average on \d+ runs - GPU latency|Throughput: [\d.e+]+ qps|"
                          r"=== Device Information ===|TensorRT\.trtexec|=== (?:Model|Build|System|Inference|Reporting) Options ?===|"
                          r"TensorRT version: \d+\.\d+\.\d+|Engine Layer Information:\s*$", re.MULTILINE)


def detect_kind(text: str) -> str | None:
    """'profile', 'times', 'layer_info' (inspector JSON) or 'log'; None if it is none of them.

    Decided by how the text begins and by markers only TensorRT prints, so the first part of a
    file (`HEAD_BYTES`) is enough; whether the rest holds what the kind must is the readers' job."""
    stripped = text.lstrip()
    if _PROFILE_HEAD.match(stripped):
        return "profile"
    if _TIMES_HEAD.match(stripped):
        return "times"
    if stripped.startswith("{") and re.search(r'"Layers"\s*:', stripped):
        return "layer_info"
    if _LOG_MARKERS.search(text):
        return "log"
    return None


@dataclasses.dataclass
class Sniff:
    kind: str | None  # as detect_kind; None: not recognised
    encoding: str | None = None  # codec to read the whole file with
    problem: str | None = None  # why it cannot be read (with `kind`: recognised, but unreadable)


def sniff(head: bytes, complete: bool) -> Sniff:
    """A file's kind from its first bytes (`complete`: they are the whole file)."""
    if not head.strip():
        return Sniff(None, problem="empty" if not head else "only blank space")
    encoding = "utf-8"
    if head.startswith(codecs.BOM_UTF8):
        encoding = "utf-8-sig"
    elif head.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        encoding = "utf-16"  # Windows PowerShell's `>` writes a trtexec log so
    elif b"\0" in head:
        return Sniff(None, problem="binary (a serialized engine? farm reads what trtexec writes about an engine, "
                                   "not the engine)")
    try:
        text = codecs.getincrementaldecoder(encoding)().decode(head, final=complete)
    except UnicodeDecodeError as exc:
        where = f"byte 0x{head[exc.start]:02x} at offset {exc.start}"
        kind = detect_kind(head.decode(encoding, errors="replace"))
        if kind is None:
            return Sniff(None, problem=f"not UTF-8 text ({where})")
        return Sniff(kind, problem=f"looks like {KIND_NAMES[kind]} but is not UTF-8 text ({where}); TensorRT "
                                   "writes UTF-8: convert it, e.g. `iconv -f latin1 -t utf-8`")
    return Sniff(detect_kind(text), encoding)


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise FormatError(f"not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno}): "
                          "cut short or edited?") from None
    except (ValueError, RecursionError) as exc:
        raise FormatError(f"not valid JSON ({exc})") from None


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _shown(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."


def read_profile_json(text: str) -> Profile:
    document = _json(text)
    if not isinstance(document, list) or not document or not isinstance(document[0], dict) \
            or "count" not in document[0]:
        raise FormatError('an --exportProfile JSON is a list that begins with {"count": N}; this one does not')
    count = document[0]["count"]
    if not (_is_number(count) and count == int(count) and count >= 0):
        raise FormatError(f"its `count` is {_shown(count)}, not a number of iterations")
    rows = []
    for number, row in enumerate(document[1:], 1):
        if not isinstance(row, dict):
            raise FormatError(f"layer row {number} is {_shown(row)}, not an object")
        if not isinstance(row.get("name"), str):
            raise FormatError(f"layer row {number} has " + (f"`name` {_shown(row['name'])}, not a string"
                                                           if "name" in row else "no `name`"))
        for key in ("averageMs", "medianMs", "timeMs", "percentage"):
            if (key in row or key == "averageMs") and not _is_number(row.get(key)):
                raise FormatError(f"layer row {number} ({row['name'][:40]}) has " +
                                  (f"`{key}` {_shown(row[key])}, not a number" if key in row else f"no `{key}`"))
        rows.append(ProfileRow(row["name"], float(row["averageMs"]), _float(row.get("medianMs")),
                               _float(row.get("timeMs")), _float(row.get("percentage"))))
    return Profile(int(count), rows)


TIMES_KEYS = ("startEnqMs", "endEnqMs", "startH2dMs", "endH2dMs", "startComputeMs", "endComputeMs", "startD2hMs",
              "endD2hMs", "h2dMs", "computeMs", "d2hMs", "latencyMs")


def read_times_json(text: str) -> list[dict[str, float]]:
    """Per-query records of `--exportTimes`, in order: every record has a number `latencyMs`, and
    any other timing it has is a number too."""
    document = _json(text)
    if not isinstance(document, list):
        raise FormatError("an --exportTimes JSON is a list of per-query objects; this one is not a list")
    records = []
    for number, record in enumerate(document, 1):
        if not isinstance(record, dict):
            raise FormatError(f"query {number} is {_shown(record)}, not an object")
        if "latencyMs" not in record:
            raise FormatError(f"query {number} has no `latencyMs`: farm needs every query's latency")
        for key in TIMES_KEYS:
            if key in record and not _is_number(record[key]):
                raise FormatError(f"query {number} has `{key}` {_shown(record[key])}, not a number")
        values = {k: float(v) for k, v in record.items() if _is_number(v)}
        for old, new in _TIMES_7X.items():  # 7.x names the copies "in" and "out"
            if old in values and new not in values:
                values[new] = values.pop(old)
        records.append(values)
    return records


# 7.x `--exportTimes` keys (sampleReporting.cpp exportJSONTrace, 7.0 to 7.2) and their 8.0-on names
_TIMES_7X = {"startInMs": "startH2dMs", "endInMs": "endH2dMs", "startOutMs": "startD2hMs", "endOutMs": "endD2hMs",
             "inMs": "h2dMs", "outMs": "d2hMs"}


@dataclasses.dataclass
class IOTensor:
    """An engine input or output as the inspector lists it: 10.x "Bindings" give the name only,
    11.x "I/O Tensors" also its mode, type and dimensions (-1: dynamic)."""

    name: str
    mode: str | None = None  # IOMode as printed
    dtype: str | None = None
    dims: list[int] | None = None  # None: not given or dynamic

    @property
    def is_input(self) -> bool:
        return (self.mode or "").strip().lower().startswith("in")


def read_layer_info_json(text: str) -> list[EngineLayer]:
    return read_inspector_json(text)[0]


def _io_tensors(document: dict) -> list[IOTensor]:
    """10.x "Bindings" (names) or 11.x "I/O Tensors" (objects); FormatError where they are neither."""
    if "I/O Tensors" in document:
        key, entries = "I/O Tensors", document["I/O Tensors"]
    else:
        key, entries = "Bindings", document.get("Bindings", [])
    if not isinstance(entries, list):
        raise FormatError(f'its "{key}" is {_shown(entries)}, not a list')
    tensors = []
    for number, entry in enumerate(entries, 1):
        if isinstance(entry, str):
            tensors.append(IOTensor(entry))
            continue
        if not isinstance(entry, dict) or not isinstance(entry.get("Name"), str):
            raise FormatError(f'"{key}" entry {number} is {_shown(entry)}, neither a name nor an object with a `Name`')
        where = f'"{key}" entry {number} ({entry["Name"][:40]})'
        for field in ("IOMode", "DataType", "Datatype", "Location"):
            if entry.get(field) is not None and not isinstance(entry[field], str):
                raise FormatError(f"{where} has `{field}` {_shown(entry[field])}, not a string")
        dims = entry.get("Dimensions")
        if dims is not None and not (isinstance(dims, list) and all(_is_number(d) for d in dims)):
            raise FormatError(f"{where} has `Dimensions` {_shown(dims)}, not a list of sizes")
        known = [int(d) for d in dims] if dims is not None and all(d >= 0 for d in dims) else None
        tensors.append(IOTensor(entry["Name"], entry.get("IOMode"),
                                dtype_from_format(entry.get("DataType") or entry.get("Datatype")), known))
    return tensors


def read_inspector_json(text: str) -> tuple[list[EngineLayer], list[IOTensor]]:
    """Layers and I/O tensors of engine-inspector JSON (trtexec --exportLayerInfo), 10.x or 11.x keys."""
    document = _json(text)
    if not isinstance(document, dict) or not isinstance(document.get("Layers"), list):
        raise FormatError('an engine-inspector JSON is an object with a "Layers" list; this one has none')
    for number, entry in enumerate(document["Layers"], 1):
        if isinstance(entry, str):
            continue
        if not isinstance(entry, dict):
            raise FormatError(f"layer {number} is {_shown(entry)}, neither a name nor an object")
        where = f"layer {number}"
        if not isinstance(entry.get("Name"), str):
            raise FormatError(f"{where} has " + (f"`Name` {_shown(entry['Name'])}, not a string"
                                                 if "Name" in entry else "no `Name`"))
        where = f"layer {number} ({entry['Name'][:40]})"
        for key in ("LayerType", "TacticName"):
            if entry.get(key) is not None and not isinstance(entry[key], str):
                raise FormatError(f"{where} has `{key}` {_shown(entry[key])}, not a string")
        for key in ("Inputs", "Outputs"):
            tensors = entry.get(key)
            if tensors is None:
                continue
            if not isinstance(tensors, list):
                raise FormatError(f"{where} has `{key}` {_shown(tensors)}, not a list of tensors")
            for tensor in tensors:
                if not isinstance(tensor, dict):
                    raise FormatError(f"{where} has an {key[:-1].lower()} {_shown(tensor)}, not an object")
                for field in ("Name", "Datatype", "Format/Datatype", "Format"):
                    if tensor.get(field) is not None and not isinstance(tensor[field], str):
                        raise FormatError(f"{where} has a tensor `{field}` {_shown(tensor[field])}, not a string")
                dims = tensor.get("Dimensions")
                if dims is not None and not (isinstance(dims, list) and all(_is_number(d) or isinstance(d, str)
                                                                            for d in dims)):
                    raise FormatError(f"{where} has tensor `Dimensions` {_shown(dims)}, not a list of sizes")
        weights = entry.get("Weights")
        if weights is not None and not (isinstance(weights, dict) and _is_number(weights.get("Count", 0))
                                        and isinstance(weights.get("Type", ""), str)):
            raise FormatError(f"{where} has `Weights` {_shown(weights)}: not an object with a number `Count` "
                              "and a `Type` name")
    return layers_from_inspector(document), _io_tensors(document)


_STAT = re.compile(r"(min|max|mean|median|percentile\((\d+(?:\.\d+)?)%\))\s*=\s*([-\d.e+]+)\s*ms")
_SUMMARY_METRICS = {"Latency": "latency", "Enqueue Time": "enqueue", "H2D Latency": "h2d",
                    "GPU Compute Time": "compute", "D2H Latency": "d2h", "End-to-End Host Latency": "end_to_end"}
# 7.x prints its summary as blocks: a heading line, then `min: X ms (end to end Y ms)` lines.
_BLOCK_7X = {"Host Latency": "latency", "Host latency": "latency", "Enqueue Time": "enqueue",
             "GPU Compute": "compute"}
_SIZE = {"B": 1, "bytes": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}
_BUILD_PASS_FIELDS = ("layers_after_parsing", "layers_after_fusion", "layers_after_reformat", "host_persistent_bytes",
                      "device_persistent_bytes", "scratch_bytes")
_NUMBER = r"([-\d.e+]+)"


def read_log(text: str) -> LogFacts:
    """Facts from a trtexec log or a verbose TensorRT builder log (complete or cut) of one run."""
    return read_log_lines(text.splitlines())


def read_log_lines(lines: Iterable[str]) -> LogFacts:
    """`read_log` over lines as they are read (a verbose build log can be hundreds of MB).
    A log of several trtexec runs is a FormatError here: `read_log_runs` splits it."""
    runs = read_log_runs(lines)
    if len(runs) > 1:
        raise FormatError(f"it holds {len(runs)} trtexec runs; read them with read_log_runs")
    return runs[0]


def read_log_runs(lines: Iterable[str]) -> list[LogFacts]:
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
        self.build_finished = False
        self.seen_model_options = False
        self.seen_running = False
        self._new_pass()

    def _new_pass(self) -> None:
        self.build = {"counts": [], "layer_memory": {}, "totals": {}, "layers": []}
        self.passes.append(self.build)

    def _pass_has_content(self) -> bool:
        return any(self.build.values())

    def _run_has_content(self) -> bool:
        f = self.facts
        return bool(f.summary or f.throughput_qps is not None or self.profile_rows
                    or any(p[k] for p in self.passes for k in p) or f.build_s is not None)

    def feed(self, raw: str) -> None:
        raw = raw.rstrip("\r\n")
        facts = self.facts
        if layer := parse_layer_line(raw):
            self.build["layers"].append(layer)
            return
        line = strip_prefix(raw)
        if line != raw.strip() and (layer := parse_layer_line(line)):  # a layer line with a log stamp
            self.build["layers"].append(layer)
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
            _from_command(facts, facts.command)
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
            _device_fact(facts.device, m.group(1).strip(), m.group(2).strip())
        if m := re.match(r"Input inference shape\s*(?:\(profile \d+\))?\s*: (.+)=([\dx]+)$", line):
            facts.input_shapes[m.group(1).strip()] = [int(d) for d in m.group(2).split("x")]
        if m := re.search(r"Input filename:\s+(\S.*)$", line):
            _add_model(facts, m.group(1).strip())
        self._performance(line)
        self._build(line)
        if section and section.startswith("Profile ("):
            layout = profile_layout(line)
            if layout:
                self.profile_layout = layout
            elif row := profile_row(line, self.profile_layout):
                self.profile_rows.append(ProfileRow(row[0], row[2], row[3], row[1], row[4]))

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
                self._new_pass()  # the builder's next pass (builder optimization level 5 runs several)
                build = self.build
            build["counts"].append((m.group(1), int(m.group(2))))
        elif re.search(r"(?:Local|Global) timing cache in use", line) and self._pass_has_content():
            self._new_pass()
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
            facts.builder_peak_host_bytes = int(m.group(1)) * _SIZE.get(m.group(2), 1)
            facts.builder_peak_device_bytes = int(m.group(3)) * _SIZE.get(m.group(4), 1)
        if m := re.search(r"Engine generation completed in ([\d.e+]+) seconds", line):
            facts.build_s = float(m.group(1))
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
            _add_model(facts, model)
        if self.profile_rows:
            facts.profile = Profile(self.profile_count, self.profile_rows)
        engine_pass = next((p for p in reversed(self.passes) if any(p.values())), self.passes[-1])
        facts.build_passes = sum(1 for p in self.passes if any(p.values()))
        _layer_counts(facts, engine_pass["counts"])
        facts.layer_memory = engine_pass["layer_memory"]
        for attribute, value in engine_pass["totals"].items():
            setattr(facts, attribute, value)
        facts.layers = engine_pass["layers"]
        facts.weight_shapes = {node: [dims for op, name, dims in inputs if name in facts.initializers]
                               for node, inputs in facts.node_inputs.items()}
        facts.weight_shapes = {k: v for k, v in facts.weight_shapes.items() if v}

    def finish(self) -> list[LogFacts]:
        self._finish_run()
        return self.runs


# Timing flags per major version (../shared/design/tensorrt-reference.md, section 7): 10.x has
# --noDataTransfers, --useCudaGraph and --useSpinWait, and no flag naming its defaults (copies on, no
# graph, blocking sync); 11.x turned those defaults around (copies off, graph and spin wait on), keeps
# the 10.x flags as no-ops and adds --includeDataTransfers, --noCudaGraph and --noSpinWait. None: the
# version has no flag for that value (it is that version's default, so nothing needs saying).
TIMING_FLAGS: dict[int, dict[str, dict[bool, str | None]]] = {
    10: {"transfers": {True: None, False: "--noDataTransfers"},
         "cuda_graph": {True: "--useCudaGraph", False: None},
         "spin_wait": {True: "--useSpinWait", False: None}},
    11: {"transfers": {True: "--includeDataTransfers", False: "--noDataTransfers"},
         "cuda_graph": {True: "--useCudaGraph", False: "--noCudaGraph"},
         "spin_wait": {True: "--useSpinWait", False: "--noSpinWait"}},
}
TIMING_DEFAULTS = {10: {"transfers": True, "cuda_graph": False, "spin_wait": False},
                   11: {"transfers": False, "cuda_graph": True, "spin_wait": True}}
_TIMING_COLUMNS = {"transfers": "latency_includes_transfers", "cuda_graph": "timing_cuda_graph",
                   "spin_wait": "timing_spin_wait"}


def flag_table(major: int) -> int:
    return 11 if major >= 11 else 10  # farm drives 10 and 11 (older trtexec: not documented here)


def timing_from_command(command: list[str], major: int) -> dict[str, Any]:
    """The timing definition a trtexec command line asks for: the version's defaults, then its
    flags in order (extra_args included); on 11.x the 10.x flags are no-ops and change nothing.
    Columns of `measurements`."""
    table = flag_table(major)
    value = dict(TIMING_DEFAULTS[table])
    no_ops = {flag for by in TIMING_FLAGS[10].values() for flag in by.values() if flag} if table == 11 else set()
    flag_values = {flag: (key, on) for key, by in TIMING_FLAGS[table].items() for on, flag in by.items()
                   if flag and flag not in no_ops}
    streams = 1
    for arg in command:
        name, _, rest = arg.partition("=")
        if name in flag_values:
            key, on = flag_values[name]
            value[key] = on
        elif name == "--infStreams" and rest.isdigit():
            streams = int(rest)
    return {_TIMING_COLUMNS[k]: v for k, v in value.items()} | {"timing_streams": streams}


# trtexec prints its inference options under "=== Inference Options ===" (TensorRT OSS,
# samples/common/sampleOptions.cpp: `"Data transfers: " << boolToEnabled(!skipTransfers)`, "Spin-wait: ",
# "CUDA Graph: ", "Inference Streams: " (older: "Streams: ")); read_log_lines keeps them as
# `inference.<label>`.
_TIMING_LABELS = {"latency_includes_transfers": "Data transfers", "timing_cuda_graph": "CUDA Graph",
                  "timing_spin_wait": "Spin-wait"}


def timing_from_log(facts: LogFacts, command: list[str] | None = None) -> dict[str, Any]:
    """The `measurements` timing-definition columns as a trtexec log states them: its "Inference
    Options" where it prints them, else, for a 10.x or 11.x trtexec whose command line is known
    (`command`, or the log's `&&&& RUNNING` line), that version's defaults and the flags on it
    (`timing_from_command`). None where neither says (an excerpt, an older version, a builder log)."""
    row: dict[str, Any] = {}
    for column, label in _TIMING_LABELS.items():
        row[column] = {"Enabled": True, "Disabled": False}.get(facts.options.get(f"inference.{label}", ""))
    streams = facts.options.get("inference.Inference Streams") or facts.options.get("inference.Streams") or ""
    row["timing_streams"] = int(streams) if streams.isdigit() else None
    major = int(facts.tensorrt_version.split(".")[0]) if facts.tensorrt_version else None
    rules = rules_for(facts.tensorrt_version, facts.layout_major)
    printed_inference = any(k.startswith("inference.") for k in facts.options)
    if row["latency_includes_transfers"] is None and (rules.transfers_always_included or (
            rules.major == 7 and printed_inference and "inference.Data transfers" not in facts.options)):
        row["latency_includes_transfers"] = True  # 7.0 and 7.1 always copy (no --noDataTransfers yet)
    command = command if command is not None else (facts.command.split() if facts.command else None)
    if command and major in (10, 11):
        asked = timing_from_command(command, major)
        row = {k: asked[k] if v is None and k in asked else v for k, v in row.items()}
    row["timing_engine_version"] = f"TensorRT {facts.tensorrt_version}" if facts.tensorrt_version else None
    return row


def _from_command(facts: LogFacts, command: str) -> None:
    """The model and input shapes named on trtexec's command line."""
    for arg in command.split():
        name, _, value = arg.partition("=")
        if name in ("--onnx", "--deploy", "--uff", "--model") and value:
            _add_model(facts, value)
        elif name == "--batch" and value.isdigit() and facts.inference_batch is None:
            facts.inference_batch = int(value)  # implicit batch (7.x, 8.x); "Batch: N" says the same
        elif name == "--shapes":
            for spec in value.split(","):
                tensor, _, dims = spec.rpartition(":")
                if tensor and re.fullmatch(r"\d+(?:x\d+)*", dims):
                    facts.input_shapes.setdefault(tensor.strip("'\""), [int(d) for d in dims.split("x")])


def _add_model(facts: LogFacts, path: str) -> None:
    if path and path not in facts.model_files:
        facts.model_files.append(path)


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
    elif key in ("Application Compute Clock Rate", "Compute Clock Rate") and (m := re.match(r"([\d.]+) GHz", value)):
        device["clock_graphics_mhz"] = round(float(m.group(1)) * 1000)
    elif key in ("Application Memory Clock Rate", "Memory Clock Rate") and (m := re.match(r"([\d.]+) GHz", value)):
        device["clock_memory_mhz"] = round(float(m.group(1)) * 1000)
    elif key in ("UUID", "Selected Device UUID"):
        device["uuid"] = value


def _pct_key(pct: str) -> str:
    return pct.rstrip("0").rstrip(".") if "." in pct else pct


_version_from_int = version_from_int  # the trtexec backend's name for it


def _float(value: Any) -> float | None:
    return None if value is None else float(value)
