"""The torch backend's profiler readers: a compiled module's kernels as per-layer rows."""

from __future__ import annotations

import bisect

from farm.layers.coverage import KERNEL
from farm.records import LayerRecord

QUERY_RANGE = "farm.query"  # the profiler range around each profiled query of a compiled module


def device_time_us(event) -> float:
    for attribute in ("device_time_total", "cuda_time_total"):
        value = getattr(event, attribute, None)
        if value is not None:
            return float(value)
    return 0.0


def kernel_records(prof, cuda: bool, iterations: int) -> list[LayerRecord]:
    """One row per kernel name (CUDA) or operator (CPU) of a compiled module's profile, kind
    'kernel'. A row's time per query is the sum over that query's launches of the kernel (a name
    launched three times per query counts three times); `calls` is the number of queries."""
    from torch.autograd import DeviceType

    queries = sorted((e.time_range.start, e.time_range.end) for e in prof.events()
                     if e.name == QUERY_RANGE and e.device_type == DeviceType.CPU)
    starts = [start for start, _ in queries]
    per_query: dict[str, dict[int, float]] = {}
    for event in prof.events():
        if event.name == QUERY_RANGE:  # the range itself (on CUDA, also as a GPU-side annotation)
            continue
        if cuda and event.device_type == DeviceType.CUDA:
            ms = device_time_us(event) / 1000.0
        elif not cuda and event.name.startswith(("aten::", "triton", "inductor", "cpp_fused")):
            ms = event.self_cpu_time_total / 1000.0
        else:
            continue
        query = bisect.bisect_right(starts, event.time_range.start) - 1
        if queries and not (0 <= query and event.time_range.start <= queries[query][1]):
            continue  # outside every query (compilation, profiler setup)
        times = per_query.setdefault(event.name, {})
        times[query] = times.get(query, 0.0) + ms
    count = len(queries) or iterations
    return [LayerRecord(index=i, name=name, type="kernel", kind=KERNEL, tactic="torch compile", calls=count,
                        times_ms=[t.get(q, 0.0) for q in range(count)] if queries else list(t.values()))
            for i, (name, t) in enumerate(per_query.items())]
