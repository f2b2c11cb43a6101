"""ONNX Runtime on the CPU: the baseline that runs everywhere.

Build = creating the InferenceSession (graph optimization included), timed; the optimized graph
is saved so per-layer rows describe what actually runs. Per-layer times come from ONNX
Runtime's own profiler in a second session, never during the timed run.
"""

from __future__ import annotations

import bisect
import json
import time
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import Field

from farm.backends.base import BackendOptions, Capabilities, LoopTimedBackend
from farm.records import BuildRequest, BuildStats, LayerRecord, QueryFn
from farm.layers.coverage import GRAPH_OP
from farm.layers.memory import conv_macs, matmul_macs, tensor_bytes, total_bytes

_OPTIMIZATION_LEVELS = {
    "disable": "ORT_DISABLE_ALL", "basic": "ORT_ENABLE_BASIC",
    "extended": "ORT_ENABLE_EXTENDED", "all": "ORT_ENABLE_ALL",
}
# Operators whose third input is a bias, which the memory rule leaves out of the weights.
_BIAS_AT_2 = {"Conv", "FusedConv", "ConvTranspose", "Gemm", "FusedGemm", "QLinearConv"}
_CONV_OPS = {"Conv", "FusedConv", "ConvTranspose", "QLinearConv", "ConvInteger"}
_MATMUL_OPS = {"MatMul", "FusedMatMul", "Gemm", "FusedGemm", "MatMulInteger", "QLinearMatMul"}
_ONNX_DTYPES = {1: "float", 2: "uint8", 3: "int8", 5: "int16", 6: "int32", 7: "int64", 9: "bool",
                10: "float16", 11: "double", 16: "bfloat16"}


class OnnxRuntimeOptions(BackendOptions):
    """`[backends.onnxruntime]`: each may be a list, which makes it another sweep axis."""

    intra_op_threads: Annotated[int, Field(ge=0)] = 0
    inter_op_threads: Annotated[int, Field(ge=0)] = 0
    graph_optimization: Literal["disable", "basic", "extended", "all"] = "all"
    execution_mode: Literal["sequential", "parallel"] = "sequential"


class OnnxRuntimeBackend(LoopTimedBackend):
    name = "onnxruntime"
    Options = OnnxRuntimeOptions
    capabilities = Capabilities(precisions=frozenset({"fp32", "fp16", "int8"}))

    def __init__(self, options: dict[str, Any]) -> None:
        super().__init__(options)
        self.session = None
        self.model_path: Path | None = None
        self.work_dir: Path | None = None
        self.optimized = None

    def unavailable_reason(self) -> str | None:
        try:
            import onnxruntime  # noqa: F401
        except ImportError as exc:
            return f"onnxruntime is not importable ({exc}): pip install onnxruntime"
        return None

    @classmethod
    def unsupported_reason(cls, precision: str, options: dict[str, Any]) -> str | None:
        if precision in cls.capabilities.precisions:
            return None
        return f"onnxruntime (CPU) runs fp32, fp16 and int8; {precision} is not supported"

    def _session_options(self):
        import onnxruntime as ort

        opts = ort.SessionOptions()
        opts.intra_op_num_threads = self.options.intra_op_threads
        opts.inter_op_num_threads = self.options.inter_op_threads
        opts.graph_optimization_level = getattr(ort.GraphOptimizationLevel,
                                                _OPTIMIZATION_LEVELS[self.options.graph_optimization])
        opts.execution_mode = (ort.ExecutionMode.ORT_PARALLEL if self.options.execution_mode == "parallel"
                               else ort.ExecutionMode.ORT_SEQUENTIAL)
        opts.log_severity_level = 3  # errors only: the NCHWc "hardware specific" warning is expected
        return opts

    def build_impl(self, request: BuildRequest, feeds: dict[str, np.ndarray]) -> BuildStats:
        import onnx
        import onnxruntime as ort

        model_path, work_dir = request.model_path, request.work_dir
        self.model_path, self.work_dir = model_path, work_dir
        optimized_path = work_dir / "optimized.onnx"
        opts = self._session_options()
        opts.optimized_model_filepath = str(optimized_path)
        start = time.perf_counter()
        self.session = ort.InferenceSession(str(model_path), opts, providers=["CPUExecutionProvider"])
        build_s = time.perf_counter() - start
        original = onnx.load(str(model_path), load_external_data=False)
        self.optimized = onnx.load(str(optimized_path), load_external_data=False)
        return BuildStats(
            build_s=build_s,
            artifact_bytes=optimized_path.stat().st_size,
            layers_before_fusion=len(original.graph.node),
            layers_after_fusion=len(self.optimized.graph.node),
        )

    def query_fn(self, feeds: dict[str, np.ndarray]) -> QueryFn:
        run = self.session.run

        def query() -> None:
            run(None, feeds)

        return query

    def outputs_impl(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        names = [o.name for o in self.session.get_outputs()]
        return dict(zip(names, self.session.run(names, feeds)))

    def layers_impl(self, feeds: dict[str, np.ndarray], iterations: int) -> list[LayerRecord]:
        import onnxruntime as ort

        warmup_runs = 2
        opts = self._session_options()
        opts.enable_profiling = True
        opts.profile_file_prefix = str(self.work_dir / "ort_profile")
        session = ort.InferenceSession(str(self.model_path), opts, providers=["CPUExecutionProvider"])
        for _ in range(warmup_runs + iterations):
            session.run(None, feeds)
        profile_path = Path(session.end_profiling())
        try:
            events = json.loads(profile_path.read_text())
        finally:
            profile_path.unlink(missing_ok=True)
        return layers_from_profile(events, self.optimized, warmup_runs)

    def runtime_stats(self) -> dict[str, Any]:
        """What the latency includes: host inputs to host outputs (CPU), no graph."""
        return {"latency_includes_transfers": True, "timing_cuda_graph": False}

    def close_impl(self) -> None:
        self.session = None
        self.optimized = None


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
