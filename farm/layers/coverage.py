"""What a cell's per-layer rows are and how much of its compute time they account for.

A row's `kind` says what was timed: a `graph op` (an ONNX node, as ONNX Runtime and eager
PyTorch run them), a `kernel` (what torch.compile generated, or a CUDA kernel) or an `engine
layer` (a TensorRT layer, built here or ingested). Rows of different kinds are not the same
units of work: they are never summed together, and two cells whose rows differ in kind are not
layer-diffed. `layer_coverage_percent` = Σ per-query layer time ÷ per-query compute time: well
under 100 % means the rows leave much of the time out, and their per-layer times are partial.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from farm.records import ENGINE_LAYER, GRAPH_OP, KERNEL

KINDS = (GRAPH_OP, KERNEL, ENGINE_LAYER)
COVERAGE_WARN_PERCENT = 80.0  # under this, per-layer times are said to be partial
COVERAGE_OVER_PERCENT = 110.0  # over this, the per-layer run's own cost is said to be in them


def row_kind(kind: Any, backend_kind: str | None, type_: Any = None) -> str | None:
    """A stored row's kind; rows written before the column existed get `backend_kind`, the kind of
    their cell's backend (farm.backends.registry.layer_kind), or `kernel` for torch.compile's rows
    (type 'kernel')."""
    if isinstance(kind, str) and kind:
        return kind
    if type_ == "kernel":
        return KERNEL
    return backend_kind


def per_query_ms(layer) -> float | None:
    """A LayerRecord's mean time per query (its `time_avg_ms`, else the mean of its times)."""
    if layer.time_avg_ms is not None:
        return float(layer.time_avg_ms)
    return float(np.mean(layer.times_ms)) if layer.times_ms else None


def compute_ms(measurement: dict[str, Any] | None) -> float | None:
    """A measurements row's per-query compute time: `compute_median_ms`, else `latency_median_ms`."""
    if not measurement:
        return None
    for key in ("compute_median_ms", "latency_median_ms"):
        value = measurement.get(key)
        if value is not None and np.isfinite(value) and value > 0:
            return float(value)
    return None


def coverage_percent(layer_ms: Iterable[float | None], compute: float | None) -> float | None:
    """Σ layer time ÷ compute time, in percent; None without both."""
    times = [t for t in layer_ms if t is not None and np.isfinite(t)]
    if not times or compute is None or not compute > 0:
        return None
    return 100.0 * sum(times) / compute


def layer_coverage_percent(layers: list, measurement: dict[str, Any] | None) -> float | None:
    """The `measurements.layer_coverage_percent` of a cell's LayerRecords."""
    return coverage_percent((per_query_ms(layer) for layer in layers), compute_ms(measurement))


def coverage_note(percent: Any) -> str | None:
    """The warning shown wherever a cell's layers are shown or summed: under 80 % they are partial;
    over 110 % the per-layer run's own cost is in them; None between."""
    if percent is None or not np.isfinite(percent):
        return None
    if percent < COVERAGE_WARN_PERCENT:
        return f"layers cover {percent:.0f} % of compute: per-layer times are partial"
    if percent > COVERAGE_OVER_PERCENT:
        return (f"layers sum to {percent:.0f} % of compute: the per-layer run times each layer on its own (the "
                "profiler's synchronization and launch in each), so read them as a split of the time, not as "
                "times that add up to a query")
    return None


def not_comparable(kinds_a: Iterable[Any], kinds_b: Iterable[Any]) -> str | None:
    """Why two cells' layers cannot be diffed (their rows are of different kinds), or None."""
    a, b = sorted({k for k in kinds_a if isinstance(k, str)}), sorted({k for k in kinds_b if isinstance(k, str)})
    if a == b and len(a) <= 1:
        return None
    what = {GRAPH_OP: "ONNX graph ops", KERNEL: "generated or CUDA kernels", ENGINE_LAYER: "TensorRT engine layers"}
    describe = lambda kinds: " and ".join(what.get(k, k) for k in kinds) or "rows of no kind"  # noqa: E731
    if len(a) > 1 or len(b) > 1:
        return (f"the layers are not comparable: a cell mixes kinds of rows (A: {describe(a)}; B: {describe(b)}), "
                "which are not the same units of work")
    return (f"the layers are not comparable: A's rows are {describe(a)}, B's are {describe(b)}; one is not a "
            "part of the other, so neither their sums nor their rows can be set against each other")
