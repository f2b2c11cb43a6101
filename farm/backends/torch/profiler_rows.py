"""The torch backend's per-layer readers: a compiled module's kernels from the profiler as rows, and
the tensors of each node of farm's ONNX interpreter."""

from __future__ import annotations

import bisect
from typing import Any

from farm.layers.coverage import KERNEL
from farm.layers.memory import conv_macs, matmul_macs, tensor_bytes, total_bytes
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


def node_shapes(module: Any, inputs: list, dtype: Any) -> dict[str, dict[str, Any]]:
    """Run farm's ONNX interpreter (`module`) once on `inputs`, recording each node's tensors; size
    them by the engine explorer's rule (`dtype`: the cell's, for the weights)."""
    import torch

    weight_shapes = module.weight_shapes
    dtype_name = str(dtype).removeprefix("torch.")
    nodes: dict[str, dict[str, Any]] = {}
    ops = {name: op for name, op, *_ in module.nodes}
    output_names = {name: outs for name, _, _, outs, _ in module.nodes}

    def describe(value) -> tuple[list[int], str] | None:
        if isinstance(value, torch.Tensor):
            return list(value.shape), str(value.dtype).removeprefix("torch.")
        return None

    def record(name: str, input_names: list[str], args: list, outputs: list) -> None:
        op = ops[name]
        ins = [(n, describe(a)) for n, a in zip(input_names, args)]
        acts = [d for n, d in ins if d is not None and n not in weight_shapes]
        weights = [weight_shapes[n] for n, d in ins[:2 if op in ("Conv", "Gemm") else None]
                   if n in weight_shapes and d is not None]
        outs = [d for d in (describe(o) for o in outputs) if d is not None]
        out_shape = outs[0][0] if outs else None
        macs = None
        if op == "Conv" and weights:
            macs = conv_macs(out_shape, weights[0])
        elif op in ("MatMul", "Gemm") and acts:
            macs = matmul_macs(out_shape, acts[0][0][-1] if acts[0][0] else None)
        nodes[name] = {"op": op, "memory": {
            "input_tensors": [n for n, d in ins if d is not None and n not in weight_shapes],
            "output_tensors": list(output_names[name]),
            "input_shapes": [s for s, _ in acts], "input_dtypes": [d for _, d in acts],
            "output_shapes": [s for s, _ in outs], "output_dtypes": [d for _, d in outs],
            "input_bytes": total_bytes(tensor_bytes(s, d) for s, d in acts),
            "weight_bytes": total_bytes(tensor_bytes(w, dtype_name) for w in weights),
            "output_bytes": total_bytes(tensor_bytes(s, d) for s, d in outs),
            "macs": macs,
        }}

    module.record = record
    try:
        module(*inputs)
    finally:
        module.record = None
    return nodes
