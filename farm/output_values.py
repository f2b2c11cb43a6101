"""Engine outputs that are not numeric tensors, made arrays that compare element-wise (farm.accuracy).

ONNX Runtime gives a sequence as a list, a map as a dict, a sequence of maps (a scikit-learn
classifier's ZipMap) as a list of {label: probability}, and strings as Python str in an object
array: `structured` makes each an array where one holds it (a sequence of maps one column per key,
a sequence of same-shaped tensors stacked, strings as str), and says what it was; `comparable`
wraps an engine's run so that each output comes out so, and an output no array holds comes out
as the one line that says why (`not_compared` reads it back), which the accuracy check reports as
`unjudged`, and the reference's cache keeps.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

Run = Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]
# an output no array holds is stored as a 0-d string array of this prefix and the line that says why
NOT_COMPARED = "farm: not compared: "


def comparable(run: Run, log: Callable[[str], None] = lambda message: None) -> Run:
    """`run` with each output as an array that compares element-wise (`structured`); an output that
    no array holds becomes the one line saying why (`not_compared`). What each output that is not a
    numeric tensor was, and how it is compared, is logged once."""
    said: set[str] = set()

    def arrays(feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        outputs = {}
        for name, value in run(feeds).items():
            array, how = structured(value)
            line = f"output {name!r} is {how}" if how else None
            if line and name not in said:
                said.add(name)
                log(line)
            outputs[name] = array if array is not None else np.array(NOT_COMPARED + line)
        return outputs

    return arrays


def structured(value: Any) -> tuple[np.ndarray | None, str | None]:
    """An output as an array that compares element-wise, and, where it is not a numeric tensor,
    what it is and how it is compared ('a sequence of maps: compared per key ...'); (None, why)
    where no array holds it. ONNX Runtime gives a sequence as a list, a map as a dict, a
    sequence of maps (a scikit-learn classifier's ZipMap) as a list of {label: probability}, and
    strings as Python str in an object array."""
    if isinstance(value, np.ndarray) and value.dtype.kind in "US":
        return value, "a string tensor: compared exactly"
    if isinstance(value, np.ndarray) and value.dtype.kind != "O":
        return value, None
    if isinstance(value, np.ndarray):
        if all(isinstance(v, str) for v in value.flat):
            return value.astype(str), "a string tensor: compared exactly"
        return None, "a tensor of Python objects: not compared"
    if isinstance(value, dict):
        kind, (array, how) = "a map", _per_key([value])
        array = None if array is None else array[0]
    elif isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        kind, (array, how) = "a sequence of maps", _per_key(value)
    elif isinstance(value, list) and value and all(isinstance(v, np.ndarray) for v in value):
        kind, tensors = "a sequence of tensors", [structured(v)[0] for v in value]
        same = all(v is not None for v in tensors) and len({(v.shape, v.dtype.kind in "US") for v in tensors}) == 1
        array, how = (np.stack(tensors), ": compared stacked") if same else (None, " of different shapes: not compared")
    elif isinstance(value, list) and not value:
        return None, "an empty sequence: not compared"
    else:
        return None, f"a {type(value).__name__} from ONNX Runtime: not compared"
    if array is not None and array.dtype.kind == "O":  # maps of sequences, sequences of sequences
        array, how = None, " of nested values: not compared"
    return array, kind + how


def _per_key(maps: list[dict]) -> tuple[np.ndarray | None, str]:
    """Maps of one key set as an array [maps, keys], a column per key in sorted order, and how."""
    keys = sorted(maps[0])  # ONNX map keys are all int64 or all strings
    if any(sorted(m) != keys for m in maps):
        return None, " with different keys: not compared"
    return np.asarray([[m[k] for k in keys] for m in maps]), f": compared per key ({len(keys)} keys, a column each)"


def not_compared(value: Any) -> str | None:
    """The line saying why an output is not compared, where `value` stands for one (`comparable`)."""
    if isinstance(value, np.ndarray) and value.ndim == 0 and value.dtype.kind == "U" and \
            str(value).startswith(NOT_COMPARED):
        return str(value)[len(NOT_COMPARED):]
    return None


def as_bytes(array: Any) -> bytes:
    """An array's values as bytes; strings by their text (an object array's bytes are its pointers)."""
    array = np.asarray(array)
    return np.ascontiguousarray(array.astype(str) if array.dtype.kind == "O" else array).tobytes()
