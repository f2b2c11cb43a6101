"""What a file is, told from its first bytes: TensorRT output farm reads (`detect_kind`), and in
which encoding, or why it cannot be read. A large file that is not TensorRT output is never read
whole: `HEAD_BYTES` decide."""

from __future__ import annotations

import codecs
import dataclasses
import re

HEAD_BYTES = 1 << 20  # what `sniff` reads: trtexec's options and TensorRT's first lines come well within it
WHAT_FARM_READS = ("farm reads trtexec's --exportProfile, --exportTimes and --exportLayerInfo JSON, "
                   "engine-inspector JSON, trtexec or verbose TensorRT build logs, and --tuningCacheFile JSON lines")
KIND_NAMES = {"profile": "an --exportProfile JSON", "times": "an --exportTimes JSON",
              "layer_info": "an engine-inspector (--exportLayerInfo) JSON", "log": "a trtexec/TensorRT log",
              "tuning_cache": "a trtexec --tuningCacheFile (JSON lines)"}
_TUNING_HEAD = re.compile(r'\A\{[^\n]*"tuner_version"\s*:')  # the header line trtexec 11.1 writes first

_PROFILE_HEAD = re.compile(r'\A\s*\[\s*\{\s*"count"\s*:')
_TIMES_HEAD = re.compile(r'\A\s*\[\s*\{[^{}\[\]]*"(?:startEnqMs|endEnqMs|startH2dMs|endH2dMs|startComputeMs|'
                         r'endComputeMs|startD2hMs|endD2hMs|h2dMs|computeMs|d2hMs|latencyMs|startInMs|endInMs|inMs)"\s*:')
_LOG_MARKERS = re.compile(r"^Layer\(\w*\): |=== Performance summary ===|\[TRT\]|=== Profile \(|\[TensorRT\] [A-Z]+: |"
                          r"Timing trace has \d+ queries over|Average on \d+ runs - GPU latency|Throughput: [\d.e+]+ qps|"
                          r"=== Device Information ===|TensorRT\.trtexec|"
                          r"=== (?:Model|Build|System|Inference|Reporting) Options ?===|"
                          r"TensorRT version: \d+\.\d+\.\d+|Engine Layer Information:\s*$", re.MULTILINE)


def detect_kind(text: str) -> str | None:
    """'profile', 'times', 'layer_info' (inspector JSON), 'log' or 'tuning_cache'; None if it is none of them.

    Decided by how the text begins and by markers only TensorRT prints, so the first part of a
    file (`HEAD_BYTES`) is enough; whether the rest holds what the kind must is the readers' job."""
    stripped = text.lstrip()
    if _PROFILE_HEAD.match(stripped):
        return "profile"
    if _TIMES_HEAD.match(stripped):
        return "times"
    if _TUNING_HEAD.match(stripped):
        return "tuning_cache"
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
        return Sniff(kind=None, problem="empty" if not head else "only blank space")
    encoding = "utf-8"
    if head.startswith(codecs.BOM_UTF8):
        encoding = "utf-8-sig"
    elif head.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        encoding = "utf-16"  # Windows PowerShell's `>` writes a trtexec log so
    elif b"\0" in head:
        return Sniff(kind=None, problem="binary (a serialized engine? farm reads what trtexec writes about an "
                                        "engine, not the engine)")
    try:
        text = codecs.getincrementaldecoder(encoding)().decode(head, final=complete)
    except UnicodeDecodeError as exc:
        where = f"byte 0x{head[exc.start]:02x} at offset {exc.start}"
        kind = detect_kind(head.decode(encoding, errors="replace"))
        if kind is None:
            return Sniff(kind=None, problem=f"not UTF-8 text ({where})")
        return Sniff(kind=kind, problem=f"looks like {KIND_NAMES[kind]} but is not UTF-8 text ({where}); "
                                        "TensorRT writes UTF-8: convert it, e.g. `iconv -f latin1 -t utf-8`")
    return Sniff(kind=detect_kind(text), encoding=encoding)

