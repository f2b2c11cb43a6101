"""What a trtexec run's latency includes and how it was timed: its timing definition, the
`measurements` columns `latency_includes_transfers`, `timing_cuda_graph`, `timing_spin_wait`,
`timing_streams` and `timing_engine_version`, read from a log's "Inference Options" or worked out
from a command line and the version's defaults (`TIMING_FLAGS`, which the trtexec backend also
uses to pin the definition on the command lines it writes).
"""

from __future__ import annotations

from typing import Any

from farm.trt_output.log import LogFacts
from farm.trt_output.versions import rules_for

# Timing flags per major version (docs/tensorrt-reference.md, section 7): 10.x has
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


def TimingFromTrtexecCommand(command: list[str], major: int) -> dict[str, Any]:
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
# "CUDA Graph: ", "Inference Streams: " (older: "Streams: ")); the log reader keeps them as
# `inference.<label>`.
_TIMING_LABELS = {"latency_includes_transfers": "Data transfers", "timing_cuda_graph": "CUDA Graph",
                  "timing_spin_wait": "Spin-wait"}


def TimingFromLog(facts: LogFacts, command: list[str] | None = None) -> dict[str, Any]:
    """The `measurements` timing-definition columns as a trtexec log states them: its "Inference
    Options" where it prints them, else, for a 10.x or 11.x trtexec whose command line is known
    (`command`, or the log's `&&&& RUNNING` line), that version's defaults and the flags on it
    (`TimingFromTrtexecCommand`). None where neither says (an excerpt, an older version, a builder log)."""
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
        asked = TimingFromTrtexecCommand(command, major)
        row = {k: asked[k] if v is None and k in asked else v for k, v in row.items()}
    row["timing_engine_version"] = f"TensorRT {facts.tensorrt_version}" if facts.tensorrt_version else None
    return row
