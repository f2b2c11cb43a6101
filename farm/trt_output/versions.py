"""What trtexec printed, and what it meant, in each TensorRT major version (7.x to 11.x).

Written against trtexec's own source (NVIDIA/TensorRT `samples/common/sampleReporting.cpp`,
`sampleOptions.cpp`, `sampleDevice.h`, `samples/opensource/trtexec/trtexec.cpp`; release tags 7.0.0,
7.1.3, 7.2.1, 8.0.1, 8.2.1, 8.4.3, 8.5.3, 8.6.0, 8.6.1, 10.0.0, 10.16, 11.1), not against one example:

- Performance summary. 7.x prints a block of lines ("Host Latency", then `min: X ms (end to end Y
  ms)`, ..., `percentile: X ms at P%`, `throughput: X qps`, `walltime: X s`, "Enqueue Time" (7.1+),
  "GPU Compute", `total compute time: X s`); 8.0 on print "=== Performance summary ===" with one
  line per metric (`Latency: min = ..., percentile(P%) = ...`), "End-to-End Host Latency" until 8.5.
- Throughput and query counts. Every version prints `batch * queries / walltime` as "Throughput"
  and `queries * batch` as "Timing trace has N queries over T s", where `batch` is the inference
  batch of an implicit-batch engine (`--batch=N`, printed `Batch: N` under Inference Options; 7.x
  and 8.x only) and 1 for an explicit-batch engine in 8.0 on. In 7.x an explicit-batch engine has
  inference batch 0, so its throughput and query counts print as 0: not figures (NVIDIA/TensorRT
  issues 1162 and 2054 show it), stored as null.
- Latency. `Latency` (7.x "Host Latency") = H2D + GPU compute + D2H of one query. 7.0 and 7.1 have
  no way to skip the copies (it always includes them); 7.2 on print "Data transfers: Enabled|Disabled".
- `--dumpProfile` table. 7.x-8.2 `Layer  Time (ms)  Avg. Time (ms)  Time %` (name first, right
  aligned), 8.4-8.6.0 add `Median Time (ms)`, 8.6.1 on `Time(ms)  Avg.(ms)  Median(ms)  Time(%)
  Layer` (name last).
- Device. 7.2-8.5 "Compute Clock Rate", "Memory Clock Rate"; 8.6 on "Application Compute Clock Rate",
  "Application Memory Clock Rate" (the same cudaDeviceProp fields); 10.0 on "Selected Device UUID".
- Builder (TensorRT's own log, not trtexec's): "Total Scratch Memory: N" until 8.6, "Max Scratch
  Memory: N bytes" in 10.x, totals and per-layer memory with or without " bytes".
"""

from __future__ import annotations

import dataclasses
import re

# Log stamps and wrappers put before trtexec's text: trtexec's own `[08/20/2023-11:59:45] [I] [TRT] `
# (its first '[' is sometimes cut), Python's TensorRT logger `[TensorRT] VERBOSE: ` (7.x) and
# `[TRT] [I] `, wrappers' `[INFO] [date] `, `INFO:some.logger:` and glog's `I0511 01:22:37.728144 1 file.cc:52] `.
_SEVERITY = r"(?:I|W|E|V|F|INFO|WARN|WARNING|ERROR|VERBOSE|DEBUG|TRT|TRT-LLM|TensorRT)"
_PREFIX = re.compile(
    r"^(?:"
    r"\s*\[[\d/:.\- ,T]+\]"  # a time stamp
    r"|\s*\[" + _SEVERITY + r"\](?:\s*(?:VERBOSE|INFO|WARNING|ERROR|DEBUG):)?"  # a severity or logger tag
    r"|\s*(?:INFO|WARNING|DEBUG|ERROR|VERBOSE):[\w.]+:"  # Python logging's default format
    r"|\s*[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+\s+\d+ [\w.]+:\d+\]"  # glog
    r"|\d[\d/:.\-]*\]"  # a stamp whose first '[' was cut
    r")")


def strip_prefix(line: str) -> str:
    """A log line without the stamps and wrapper prefixes before trtexec's text."""
    while True:
        m = _PREFIX.match(line)
        if not m or not m.group(0):
            return line.strip()
        line = line[m.end():]


@dataclasses.dataclass(frozen=True)
class VersionRules:
    """What one trtexec version's performance figures mean."""

    major: int | None
    throughput_times_batch: bool  # printed throughput and query counts are multiplied by the inference batch
    explicit_batch_prints_zero: bool  # 7.x: explicit batch is inference batch 0, so those figures print as 0
    transfers_always_included: bool | None  # True: that version cannot skip the copies; None: it says, or unknown


def version_tuple(version: str | None) -> tuple[int, ...] | None:
    if not version:
        return None
    try:
        return tuple(int(p) for p in version.split(".")[:3])
    except ValueError:
        return None


def rules_for(version: str | None, layout_major: int | None) -> VersionRules:
    """The rules of a version (from its banner or version line), else of the layout the log has."""
    parts = version_tuple(version)
    major = parts[0] if parts else layout_major
    if major == 7:
        always = True if parts and parts[:2] < (7, 2) else None
        return VersionRules(7, True, True, always)
    if major is not None and major >= 8:
        return VersionRules(major, True, False, None)
    return VersionRules(None, True, False, None)


def version_from_int(number: str) -> str:
    """trtexec's [TensorRT v8003] -> 8.0.3; v8601 -> 8.6.1; v100100 -> 10.1.0; v7103 -> 7.1.3."""
    value = int(number)
    if value >= 100000:
        return f"{value // 10000}.{value // 100 % 100}.{value % 100}"
    return f"{value // 1000}.{value // 100 % 10}.{value % 100}"


# --- the --dumpProfile table, three layouts ---------------------------------------------------------

_NAME_FIRST = re.compile(r"^\s*(?P<name>.*?)\s+(?P<t>[\d.]+)\s+(?P<avg>[\d.]+)\s+(?:(?P<med>[\d.]+)\s+)?(?P<pct>[\d.]+)\s*$")
_NAME_LAST = re.compile(r"^\s*(?P<t>[\d.]+)\s+(?P<avg>[\d.]+)\s+(?P<med>[\d.]+)\s+(?P<pct>[\d.]+)\s{1,}(?P<name>\S.*?)\s*$")


def profile_layout(header: str) -> str | None:
    """'name_last' (8.6.1 on), 'name_first' (7.x to 8.6.0) or None if `header` is not the table's header."""
    text = header.strip()
    if re.match(r"^Time\s*\(ms\)\s+Avg\.\s*\(ms\)\s+Median\s*\(ms\)\s+Time\s*\(%\)\s+Layer$", text):
        return "name_last"
    if re.match(r"^Layer\s+Time \(ms\)\s+Avg\. Time \(ms\)\s+(?:Median Time \(ms\)\s+)?Time %$", text):
        return "name_first"
    return None


def profile_row(line: str, layout: str | None) -> tuple[str, float, float, float | None, float] | None:
    """(name, total ms, average ms, median ms or None, percent) of one table row; None for others."""
    patterns = {"name_last": [_NAME_LAST], "name_first": [_NAME_FIRST]}.get(layout or "", [_NAME_LAST, _NAME_FIRST])
    m = next((m for m in (p.match(line) for p in patterns) if m), None)
    if not m or m["name"].strip() in ("", "Layer", "Total"):
        return None
    return m["name"].strip(), float(m["t"]), float(m["avg"]), float(m["med"]) if m["med"] else None, float(m["pct"])
