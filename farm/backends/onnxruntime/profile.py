"""ONNX Runtime's profiles as per-layer rows.

`layers_from_profile`: one row per graph node from ONNX Runtime's own profiler (its `Node`
events), sized from the optimized graph. On the CPU execution provider a node's event is its
compute. On the CUDA execution provider the same events are host-side intervals around kernels
launched asynchronously (the PyPI build's profile has only `Node` and `Session` events, no GPU
times: checked on an H100), so CUDA cells take their rows from the GPU's own kernel records
instead: `kernel_layers`, one row per CUDA kernel of
the CUPTI trace (through PyTorch's profiler), kind `kernel`. Which provider ran which node:
farm.backends.onnxruntime.placement.
"""

from __future__ import annotations

import bisect
from typing import Any

from farm.layers.coverage import GRAPH_OP, KERNEL
from farm.layers.memory import conv_macs, matmul_macs, tensor_bytes, total_bytes
from farm.records import LayerRecord

# Operators whose third input is a bias, which the memory rule leaves out of the weights.
_BIAS_AT_2 = {"Conv", "FusedConv", "ConvTranspose", "Gemm", "FusedGemm", "QLinearConv"}
_CONV_OPS = {"Conv", "FusedConv", "ConvTranspose", "QLinearConv", "ConvInteger"}
_MATMUL_OPS = {"MatMul", "FusedMatMul", "Gemm", "FusedGemm", "MatMulInteger", "QLinearMatMul"}
_ONNX_DTYPES = {1: "float", 2: "uint8", 3: "int8", 5: "int16", 6: "int32", 7: "int64", 9: "bool",
                10: "float16", 11: "double", 16: "bfloat16"}
QUERY_RANGE = "farm.ort.query"  # the profiler range around each profiled run on CUDA
_COPIES = ("Memcpy", "Memset")  # CUPTI's names of copies and fills in PyTorch's trace


def layers_from_profile(events: list[dict[str, Any]], optimized_model, skip_runs: int) -> list[LayerRecord]:
    """Per-node rows from an ONNX Runtime profile, sized from the optimized graph's initializers.

    Runtime shapes and types of activations come from the profiler (`input_type_shape`,
    `output_type_shape`); weights are the node's initializer inputs in the optimized graph.
    Node events of the first `skip_runs` runs are dropped (they pay for first-run setup).
    """
    graph = optimized_model.graph if optimized_model is not None else None
    nodes = {n.name: n for n in graph.node} if graph is not None else {}
    initializers = {t.name: t for t in graph.initializer} if graph is not None else {}
    per_node = _node_times(events, skip_runs)
    layers = []
    for index, (node_name, entry) in enumerate(sorted(per_node.items(), key=lambda kv: kv[1]["first_ts"])):
        args = entry["args"]
        node = nodes.get(node_name)
        op = args.get("op_name") or (node.op_type if node is not None else "?")
        out_types = [_type_shape(t) for t in args.get("output_type_shape", [])]
        record = LayerRecord(
            index=index, name=node_name, type=op, times_ms=entry["times"], kind=GRAPH_OP,
            tactic=f"{args.get('provider', '?')}:{(node.domain or 'ai.onnx') if node is not None else '?'}",
            output_shapes=[s for _, s in out_types], output_dtypes=[d for d, _ in out_types],
            output_bytes=total_bytes(tensor_bytes(s, d) for d, s in out_types),
        )
        if node is not None:
            _describe_node(record, node, op, args, initializers)
        layers.append(record)
    return layers


def _node_times(events: list[dict[str, Any]], skip_runs: int) -> dict[str, dict[str, Any]]:
    """Per node: its first event's time, its arguments, and one time per counted run (ms)."""
    runs = sorted((e for e in events if e.get("cat") == "Session" and e.get("name") == "model_run"),
                  key=lambda e: e["ts"])
    cutoff = runs[skip_runs - 1]["ts"] + runs[skip_runs - 1]["dur"] if 0 < skip_runs <= len(runs) else -1
    kernel_events = [e for e in events if e.get("cat") == "Node" and e.get("name", "").endswith("_kernel_time")
                     and e["ts"] > cutoff]
    own_us = _own_durations(kernel_events)
    counted = [r for r in runs if r["ts"] > cutoff]
    starts = [r["ts"] for r in counted]
    per_node: dict[str, dict[str, Any]] = {}
    for event, own in zip(kernel_events, own_us):
        node_name = event["name"].removesuffix("_kernel_time")
        entry = per_node.setdefault(node_name, {"first_ts": event["ts"], "runs": {}, "args": event.get("args", {})})
        # one time per run: a node a Loop body runs several times per run counts each time
        run = bisect.bisect_right(starts, event["ts"]) - 1 if counted else len(entry["runs"])
        entry["runs"][run] = entry["runs"].get(run, 0.0) + own / 1000.0  # microseconds -> milliseconds
    for entry in per_node.values():
        entry["times"] = list(entry["runs"].values())
    return per_node


def _describe_node(record: LayerRecord, node, op: str, args: dict[str, Any], initializers: dict) -> None:
    """Fill a row's fused ops, tensors, bytes and MACs from its node in the optimized graph."""
    in_types = [_type_shape(t) for t in args.get("input_type_shape", [])]
    activation = next((a.s.decode() for a in node.attribute if a.name == "activation"), None)
    record.fused_ops = f"{op.removeprefix('Fused')}+{activation}" if activation else None
    names = [n for n in node.input if n]
    record.input_tensors = [n for n in names if n not in initializers]
    record.output_tensors = [n for n in node.output if n]
    weight_sizes, weight_shapes, activation_types = [], [], []
    aligned = len(names) == len(in_types)
    for position, input_name in enumerate(names):
        tensor = initializers.get(input_name)
        if tensor is not None:
            if not (position == 2 and op in _BIAS_AT_2):
                dims = list(tensor.dims)
                weight_sizes.append(tensor_bytes(dims, _ONNX_DTYPES.get(tensor.data_type, "?")))
                weight_shapes.append(dims)
        elif aligned:
            activation_types.append(in_types[position])
    record.weight_bytes = total_bytes(weight_sizes)
    if aligned:
        record.input_shapes = [s for _, s in activation_types]
        record.input_dtypes = [d for d, _ in activation_types]
        record.input_bytes = total_bytes(tensor_bytes(s, d) for d, s in activation_types)
    else:
        record.input_bytes = int(args["activation_size"]) if "activation_size" in args else None
    record.macs = _macs(op, node, record, weight_shapes, in_types)


def _own_durations(events: list[dict[str, Any]]) -> list[float]:
    """Each node event's duration less that of the node events inside it (µs).

    A control-flow node (If, Loop, Scan) runs its subgraph's nodes within its own event, and ONNX
    Runtime times those nodes too: the outer row keeps only its own overhead, so Σ over the rows
    counts each microsecond once. Inside = on the same thread, starting and ending within it;
    nested control flow subtracts level by level (only the directly enclosed events)."""
    order = sorted(range(len(events)), key=lambda i: (events[i].get("tid"), events[i]["ts"], -events[i]["dur"]))
    own = [float(e["dur"]) for e in events]
    stack: list[int] = []  # enclosing events, outermost first
    for i in order:
        event = events[i]
        while stack and (events[stack[-1]].get("tid") != event.get("tid")
                         or event["ts"] + event["dur"] > events[stack[-1]]["ts"] + events[stack[-1]]["dur"]
                         or event["ts"] < events[stack[-1]]["ts"]):
            stack.pop()
        if stack:
            own[stack[-1]] -= event["dur"]
        stack.append(i)
    return [max(t, 0.0) for t in own]


def _type_shape(entry: dict[str, list[int]]) -> tuple[str, list[int]]:
    ((dtype, shape),) = entry.items()
    return dtype, list(shape)


def _macs(op: str, node, record: LayerRecord, weight_shapes: list[list[int]],
          in_types: list[tuple[str, list[int]]]) -> int | None:
    out = record.output_shapes[0] if record.output_shapes else None
    if op in _CONV_OPS and weight_shapes:
        return conv_macs(out, weight_shapes[0])
    if op in _MATMUL_OPS and in_types:
        a_shape = in_types[0][1]
        trans_a = any(a.name == "transA" and a.i for a in node.attribute)
        if not a_shape:
            return None
        return matmul_macs(out, a_shape[0] if trans_a and len(a_shape) == 2 else a_shape[-1])
    return None


def kernel_layers(prof, provider: str, iterations: int) -> list[LayerRecord]:
    """One row per CUDA kernel name of a PyTorch profiler (CUPTI) trace taken around ONNX Runtime
    runs, kind 'kernel'. Each run lies in a `QUERY_RANGE` range and ends synchronized, so a kernel
    belongs to the run whose range holds its GPU start; a row's time per run is the sum over that
    run's launches (`calls`: the runs)."""
    from torch.autograd import DeviceType

    runs = sorted((e.time_range.start, e.time_range.end) for e in prof.events()
                  if e.name == QUERY_RANGE and e.device_type == DeviceType.CPU)
    starts = [start for start, _ in runs]
    per_kernel: dict[str, dict[int, float]] = {}
    for event in prof.events():
        if event.device_type != DeviceType.CUDA or event.name == QUERY_RANGE or event.name.startswith(_COPIES):
            continue  # the runs' own input and output copies are not the model's kernels
        run = bisect.bisect_right(starts, event.time_range.start) - 1
        if not (0 <= run and event.time_range.start <= runs[run][1]):
            continue  # outside every run (session set-up, the profiler's own work)
        micros = next((float(v) for a in ("device_time_total", "cuda_time_total")
                       if (v := getattr(event, a, None)) is not None), 0.0)
        times = per_kernel.setdefault(event.name, {})
        times[run] = times.get(run, 0.0) + micros / 1000.0
    count = len(runs) or iterations
    return [LayerRecord(index=i, name=name, type="kernel", kind=KERNEL, tactic=f"{provider} kernel", calls=count,
                        times_ms=[t.get(run, 0.0) for run in range(count)])
            for i, (name, t) in enumerate(per_kernel.items())]
