"""Which BASE cell each NEW cell is compared with: the cell of the same configuration (model name,
precision, batch, shape profile, backend and its options), on the same kind of device, whatever
the two cells' ids (ids hash the sweep's name and the model file, so they never agree across
sweeps). What differs between matched cells that makes their latencies different quantities
(timing definitions, device models) is found here, for the caller to refuse or note."""

from __future__ import annotations

import json
import math
from collections.abc import Hashable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

# What a latency includes (measurements' timing columns): (column, label, words for true/false).
TIMING = (("latency_includes_transfers", "transfers", ("included", "not included")),
          ("timing_cuda_graph", "CUDA graph", ("on", "off")), ("timing_spin_wait", "spin-wait", ("on", "off")),
          ("timing_streams", "streams", None))


@dataclass
class Pair:
    """A BASE cell and the NEW cell of the same configuration; `device_differs`/`timing_differs`:
    what makes their latencies not the same quantity, in words (None: nothing)."""

    base: dict[str, Any]
    new: dict[str, Any]
    device_differs: str | None = None
    timing_differs: str | None = None
    notes: list[str] = field(default_factory=list)


def options_text(options: Any, backend: Any = None) -> str:
    """A cell's backend options as canonical JSON (keys sorted), whatever order they were stored in,
    with the options `backend` added later at their default where the cell predates them
    (farm.plan.with_later_defaults): the same configuration before and after an option existed."""
    return _canonical(options, backend if isinstance(backend, str) else None) if isinstance(options, str) else "{}"


@lru_cache(maxsize=4096)
def _canonical(options: str, backend: str | None) -> str:
    """options_text of stored text (a sweep's cells share a few option sets: parsed once each)."""
    from farm.plan import with_later_defaults

    try:
        values = json.loads(options)
    except ValueError:
        return options
    if isinstance(values, dict):
        values = with_later_defaults(backend, values)
    return json.dumps(values, sort_keys=True)


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def config_key(cell: dict[str, Any]) -> tuple[Hashable, ...]:
    """What makes two cells the same configuration."""
    values = tuple(map(cell.get, _CONFIG_FIELDS))
    if float in map(type, values):  # NaN (a float among these text and integer fields): missing, as None is
        values = tuple(None if _missing(v) else v for v in values)
    return values + (options_text(cell.get("options"), cell.get("backend")),)


_CONFIG_FIELDS = ("model", "precision", "batch", "profile", "backend", "scenario")  # scenario: None offline


def device_text(cell: dict[str, Any]) -> str:
    return _device_text(cell.get("device_kind"), cell.get("device_name"))


@lru_cache(maxsize=1024)
def _device_text(kind: Any, name: Any) -> str:
    return " ".join(str(p) for p in (kind, name) if not _missing(p)) or "no device recorded"


def at_precision(cell: dict[str, Any], precision: str) -> dict[str, Any]:
    """The cell's configuration as if measured at `precision`: its backend's options as that
    precision reads them (Options.at_precision: an int8 cell's int8 scheme is no option of a bf16
    cell), for pairing cells across precisions."""
    from farm.plan import options_at

    options = cell.get("options")
    try:
        values = json.loads(options) if isinstance(options, str) else None
    except ValueError:
        values = None
    if isinstance(values, dict):
        options = json.dumps(options_at(cell.get("backend"), values, precision))
    return {**cell, "precision": precision, "options": options}


def match_cells(base: list[dict[str, Any]], new: list[dict[str, Any]],
                precisions: tuple[str, str] | None = None) -> tuple[list[Pair], list[dict], list[dict]]:
    """(pairs, BASE cells with no match, NEW cells with no match). Cells pair on configuration and
    device (kind and model) first; cells left over pair on configuration alone, marked
    `device_differs`. Where a side holds several cells of one key, they pair in id order. With
    `precisions` (BASE's, NEW's): BASE's cells at the first pair with NEW's at the second, the
    rest of their configuration the same (other precisions' cells are left out of both sides)."""
    if precisions is not None:
        base = [c for c in base if c.get("precision") == precisions[0]]
        new = [c for c in new if c.get("precision") == precisions[1]]
        config = {id(c): config_key(at_precision(c, precisions[0])) for c in (*base, *new)}
    else:
        config = {id(c): config_key(c) for c in (*base, *new)}  # each cell's keys once
    device = {id(c): device_text(c) for c in (*base, *new)}
    pairs: list[Pair] = []
    left_base, left_new = list(base), list(new)
    for key in (lambda c: (config[id(c)], device[id(c)]), lambda c: config[id(c)]):
        if precisions is None:
            found, left_base, left_new = _pair_by(left_base, left_new, key)
        else:  # one BASE cell for each NEW variant of it (int8 dynamic and weight-only against one bf16)
            found, left_new = _each_with_its_base(base, left_new, key)
            paired = {id(p.base) for p in found}
            left_base = [c for c in left_base if id(c) not in paired]
        pairs += found
    for pair in pairs:
        if pair.base.get("status") != "ok" or pair.new.get("status") != "ok":
            # no two latencies to set side by side (a side skipped, unsupported or failed): nothing
            # measured differently; the pair shows as not measured, failed or fixed
            continue
        a, b = device[id(pair.base)], device[id(pair.new)]
        pair.device_differs = None if a == b else f"device {a} vs {b}"
        pair.timing_differs = timing_difference(pair.base, pair.new)
    for pair in pairs:
        if pair.base.get("model_sha256") != pair.new.get("model_sha256"):
            pair.notes.append("model file differs")
        if pair.base.get("status") == pair.new.get("status") == "ok" and \
                _missing(pair.base.get("worker")) != _missing(pair.new.get("worker")):
            pair.notes.append(EXECUTORS_DIFFER.format(*("the sweep's own process (--executor local)" if _missing(
                cell.get("worker")) else "a Ray worker's cell process" for cell in (pair.base, pair.new))))
    return pairs, left_base, left_new


# A host-bound cell times slower in the sweep's own process than in a Ray worker's cell process
# (docs/gpu-figures.md: compiled batch-1 cells at 2.6-4.2 ms in-process, 1.7 ms in a cell process):
# a change between them can be the executor's.
EXECUTORS_DIFFER = "timed by different executors (BASE: {}; NEW: {}): a host-bound latency moves with that"


def _pair_by(base: list[dict], new: list[dict], key) -> tuple[list[Pair], list[dict], list[dict]]:
    by_key: dict[Hashable, list[dict]] = {}
    for cell in new:
        by_key.setdefault(key(cell), []).append(cell)
    pairs, unmatched = [], []
    for cell in base:
        candidates = by_key.get(key(cell))
        if candidates:
            pairs.append(Pair(cell, candidates.pop(0)))
        else:
            unmatched.append(cell)
    return pairs, unmatched, [c for group in by_key.values() for c in group]


def _each_with_its_base(base: list[dict], new: list[dict], key) -> tuple[list[Pair], list[dict]]:
    """Each NEW cell paired with the first BASE cell of its key (a BASE cell may pair more than once)."""
    first: dict[Hashable, dict] = {}
    for cell in base:
        first.setdefault(key(cell), cell)
    pairs = [Pair(first[key(cell)], cell) for cell in new if key(cell) in first]
    return pairs, [cell for cell in new if key(cell) not in first]


def timing_difference(base: dict[str, Any], new: dict[str, Any]) -> str | None:
    """'timing: transfers included vs not included; ...' (BASE vs NEW) where the two cells' timing
    definitions differ, one side unknown counting as different; None where they agree or neither
    says."""
    if all(base.get(column) == new.get(column) for column, _, _ in TIMING):  # the usual: the same (NaN never is)
        return None
    parts = timing_parts(base, new)
    return "timing: " + "; ".join(parts) if parts else None


def timing_parts(a_row: dict[str, Any], b_row: dict[str, Any]) -> list[str]:
    """Each timing definition the two rows state differently, as 'transfers included vs not
    included' (a_row's first); a missing value (None, NaN) reads 'unknown'. The one rule behind
    `farm compare`'s refusal and the dashboard's speedup note (farm.dashboard.data.timing_difference)."""
    parts = []
    for column, label, words in TIMING:
        a, b = (None if _missing(row.get(column)) else row[column] for row in (a_row, b_row))
        if a == b:
            continue
        if words is None:
            shown = ["unknown" if v is None else str(int(v)) for v in (a, b)]
        else:
            shown = ["unknown" if v is None else words[0] if bool(v) else words[1] for v in (a, b)]
        parts.append(f"{label} {shown[0]} vs {shown[1]}")
    return parts
