"""Readers for the JSON files trtexec writes (see docs/tensorrt-reference.md, sections
4 to 6). Each returns plain data and raises `FormatError` with one line saying where a file does
not hold what its kind must (a record without `latencyMs`, a layer whose `Name` is not a string,
JSON cut short) instead of guessing:
- `--exportProfile`: `[{"count": N}, {name, timeMs, averageMs, medianMs?, percentage}, ...]`
- `--exportTimes`: one object per query with h2dMs, computeMs, d2hMs, latencyMs and the start/end
  times of each phase (7.x names the copies "in" and "out")
- `--exportLayerInfo` / engine-inspector JSON: `{"Layers": [...], "Bindings" | "I/O Tensors": ...}`
  (10.x `"Bindings": [names]`; 11.x `"I/O Tensors": [{Name, IOMode, DataType, Dimensions, Location,
  IsShapeInferenceIO, ProfileInfo}]`; both read)
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

from farm.trt_output.engine_layers import EngineLayer, LayersFromInspector, dtype_from_format


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


def ProfileFromProfileJson(text: str) -> Profile:
    """The per-layer profile of an `--exportProfile` JSON: its iteration count and one row per layer."""
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


def TimesFromTimesJson(text: str) -> list[dict[str, float]]:
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
        for key in DURATION_KEYS:
            if key in record and not (_is_number(record[key]) and record[key] >= 0):
                raise FormatError(f"query {number} has `{key}` {_shown(record[key])}: a time taken is a finite "
                                  "number, never negative (the file is damaged or was edited)")
        values = {k: float(v) for k, v in record.items() if _is_number(v)}
        for old, new in _TIMES_7X.items():  # 7.x names the copies "in" and "out"
            if old in values and new not in values:
                values[new] = values.pop(old)
        records.append(values)
    return records


# the keys that are durations (the rest are instants on trtexec's clock, which may be anything)
DURATION_KEYS = ("h2dMs", "computeMs", "d2hMs", "latencyMs", "inMs", "outMs")

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


@dataclasses.dataclass
class EngineInfo:
    """What an engine-inspector JSON says of an engine: its layers and its inputs and outputs."""

    layers: list[EngineLayer]
    io_tensors: list[IOTensor]


def LayersFromInspectorJson(text: str) -> list[EngineLayer]:
    """The layers of an engine-inspector JSON (trtexec --exportLayerInfo)."""
    return EngineInfoFromInspectorJson(text).layers


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


def EngineInfoFromInspectorJson(text: str) -> EngineInfo:
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
    return EngineInfo(layers=LayersFromInspector(document), io_tensors=_io_tensors(document))


def _float(value: Any) -> float | None:
    return None if value is None else float(value)
