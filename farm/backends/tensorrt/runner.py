"""Running a TensorRT engine: a context per stream with pinned host and device buffers, the
timed query (farm.device_timer's CUDA events around H2D / compute / D2H on the first stream, host
time around execute_async_v3), an optional CUDA graph as trtexec captures it, and the per-layer
profile (an IProfiler in a separate run, layer information from the engine inspector)."""

from __future__ import annotations

import contextlib
import dataclasses
import json
from collections.abc import Callable
from typing import Any

import numpy as np

from farm.device_timer import CudartEvents, DeviceTimer
from farm.records import LayerRecord, PhaseTimes, QueryFn

_NUMPY_TYPES = {"FLOAT": np.float32, "HALF": np.float16, "BF16": np.uint16, "INT8": np.int8, "INT32": np.int32,
                "INT64": np.int64, "BOOL": np.bool_, "UINT8": np.uint8, "FP8": np.uint8}


@dataclasses.dataclass
class Binding:
    """One execution context on its own stream, with its buffers (host views by tensor name)."""

    context: Any
    stream: int
    done: Any  # an event: the stream's work is finished
    inputs: list[tuple[int, int, int]]  # (device, host, bytes) per input
    outputs: list[tuple[int, int, int]]  # (host, device, bytes) per output
    views: dict[str, np.ndarray]  # pinned host memory as numpy, by tensor name
    input_names: list[str]
    output_names: list[str]
    allocations: list[tuple[int, int]]  # (host, device) pointers to free

    def enqueue(self) -> None:
        if not self.context.execute_async_v3(self.stream):
            raise RuntimeError("execute_async_v3 returned False")


def numpy_dtype(trt_dtype: Any) -> np.dtype:
    """Host buffer type for a tensor (bf16 and fp8 as raw bytes of the same width)."""
    name = getattr(trt_dtype, "name", str(trt_dtype)).rsplit(".", 1)[-1]
    if name not in _NUMPY_TYPES:
        raise RuntimeError(f"farm cannot stage tensors of TensorRT type {name}")
    return np.dtype(_NUMPY_TYPES[name])


def has_dynamic_inputs(engine: Any, trt: Any) -> bool:
    names = [engine.get_tensor_name(i) for i in range(engine.num_io_tensors)]
    return any(-1 in tuple(engine.get_tensor_shape(n)) for n in names
               if engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT)


def bind(trt: Any, cuda: Any, engine: Any, feeds: dict[str, np.ndarray], profile: int | None) -> Binding:
    """A context on its own stream with its own pinned and device buffers, shapes set; `profile`:
    the optimization profile to select (None: the engine has none to choose)."""
    stream = cuda.stream()
    context = engine.create_execution_context()
    if (profile is not None or has_dynamic_inputs(engine, trt)) and \
            not context.set_optimization_profile_async(profile or 0, stream):
        raise RuntimeError("TensorRT refused the optimization profile")
    names = [engine.get_tensor_name(i) for i in range(engine.num_io_tensors)]
    inputs = [n for n in names if engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT]
    for name in inputs:
        if not context.set_input_shape(name, tuple(feeds[name].shape)):
            raise RuntimeError(f"input {name} shape {feeds[name].shape} is outside the engine's profile")
    buffers, views, allocations = {}, {}, []
    for name in names:
        shape = tuple(context.get_tensor_shape(name))
        dtype = numpy_dtype(engine.get_tensor_dtype(name))
        nbytes = int(np.prod(shape)) * dtype.itemsize
        host, device = cuda.malloc_host(nbytes), cuda.malloc(nbytes)
        allocations.append((host, device))
        views[name] = cuda.host_array(host, shape, dtype)
        if name in inputs:
            views[name][...] = feeds[name].astype(dtype)
        buffers[name] = (host, device, nbytes)
        if not context.set_tensor_address(name, device):
            raise RuntimeError(f"TensorRT refused the address of tensor {name}")
    missing = context.infer_shapes()
    if missing:
        raise RuntimeError(f"tensors without a shape: {', '.join(missing)}")
    outputs = [n for n in names if n not in inputs]
    return Binding(context, stream, cuda.event(),
                   inputs=[(buffers[n][1], buffers[n][0], buffers[n][2]) for n in inputs],
                   outputs=[buffers[n] for n in outputs], views=views, input_names=inputs,
                   output_names=outputs, allocations=allocations)


def release(cuda: Any, bindings: list[Binding]) -> None:
    for binding in bindings:
        for host, device in binding.allocations:
            with contextlib.suppress(Exception):
                cuda.free(device)
                cuda.free_host(host)


def graph_launcher(cuda: Any, binding: Binding, log_lines: list[str]) -> Callable[[], None] | None:
    """As trtexec: run once, capture one enqueue, instantiate, then launch per query; if capture
    fails, end it, clear the error and run without a graph (None)."""
    binding.enqueue()
    try:
        cuda.begin_capture(binding.stream)
        ok = binding.context.execute_async_v3(binding.stream)
        graph = cuda.end_capture(binding.stream)
        if not ok:
            raise RuntimeError("enqueue during capture returned False")
        graph_exec = cuda.instantiate(graph)
    except Exception as exc:  # noqa: BLE001 - any capture failure: run without a graph, and say so
        cuda.clear_error()
        log_lines.append(f"[W] CUDA graph capture failed ({exc}); running without a graph")
        return None
    return lambda: cuda.launch(graph_exec, binding.stream)


def timed_query(cuda: Any, bindings: list[Binding], launches: list[Callable[[], None] | None],
                transfers: bool) -> QueryFn:
    """One query: H2D, enqueue and D2H on every stream (trtexec's --infStreams); the phases are
    timed on the first stream, and the query ends when every stream is done."""
    first, others = bindings[0], bindings[1:]
    timer = DeviceTimer(CudartEvents(cuda), first.stream, transfers)
    pairs = list(zip(bindings, launches))

    def enqueue_all() -> None:
        for binding, launch in pairs:
            launch() if launch is not None else binding.enqueue()

    def query() -> PhaseTimes:
        timer.inputs_start()
        if transfers:
            for binding in bindings:
                for device, host, nbytes in binding.inputs:
                    cuda.copy_h2d(device, host, nbytes, binding.stream)
        timer.inputs_done()
        timer.enqueue(enqueue_all)
        timer.compute_done()
        if transfers:
            for binding in bindings:
                for host, device, nbytes in binding.outputs:
                    cuda.copy_d2h(host, device, nbytes, binding.stream)
        timer.outputs_done()
        for binding in others:
            cuda.record(binding.done, binding.stream)
        phases = timer.phases()
        for binding in others:
            cuda.wait(binding.done)
        return phases

    return query


def run_once(cuda: Any, binding: Binding, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Outputs for `feeds` (of the cell's shapes): copied into the input buffers, one enqueue, copied back."""
    for name in binding.input_names:
        view = binding.views[name]
        if tuple(feeds[name].shape) != tuple(view.shape):
            raise ValueError(f"input {name}: shape {tuple(feeds[name].shape)}, the engine runs {tuple(view.shape)}")
        view[...] = feeds[name].astype(view.dtype)
    for device, host, nbytes in binding.inputs:
        cuda.copy_h2d(device, host, nbytes, binding.stream)
    binding.enqueue()
    for host, device, nbytes in binding.outputs:
        cuda.copy_d2h(host, device, nbytes, binding.stream)
    cuda.record(binding.done, binding.stream)
    cuda.wait(binding.done)
    return {name: np.array(binding.views[name]) for name in binding.output_names}


def profile_layers(trt: Any, cuda: Any, engine: Any, binding: Binding, iterations: int) -> list[LayerRecord]:
    """Per-layer times from an IProfiler over `iterations` runs, joined by name to the inspector's layers."""
    from farm.trt_output import LayersFromInspector, join_layers

    class LayerTimes(trt.IProfiler):
        def __init__(self) -> None:
            trt.IProfiler.__init__(self)
            self.times: dict[str, list[float]] = {}

        def report_layer_time(self, layer_name: str, ms: float) -> None:
            self.times.setdefault(layer_name, []).append(ms)

    context = binding.context
    profiler = LayerTimes()
    context.profiler = profiler
    context.enqueue_emits_profile = False
    for _ in range(iterations):
        if not context.execute_async_v3(binding.stream):
            raise RuntimeError("execute_async_v3 returned False while profiling")
        cuda.record(binding.done, binding.stream)
        cuda.wait(binding.done)
        context.report_to_profiler()
    inspector = engine.create_engine_inspector()
    inspector.execution_context = context
    infos = [json.loads(inspector.get_layer_information(i, trt.LayerInformationFormat.JSON))
             for i in range(engine.num_layers)]
    layers = LayersFromInspector({"Layers": infos})
    matched, _, _ = join_layers(layers, list(profiler.times))
    times_of = {index: profiler.times[name] for name, index in matched.items()}
    return [LayerRecord(index=i, name=layer.name, type=layer.type or "?", times_ms=times_of.get(i, []),
                        tactic=layer.tactic, input_tensors=[t.name for t in layer.inputs],
                        output_tensors=[t.name for t in layer.outputs],
                        input_shapes=[t.dims for t in layer.inputs], input_dtypes=[t.dtype or "?" for t in layer.inputs],
                        output_shapes=[t.dims for t in layer.outputs],
                        output_dtypes=[t.dtype or "?" for t in layer.outputs], input_bytes=layer.input_bytes,
                        weight_bytes=layer.weight_bytes, output_bytes=layer.output_bytes)
            for i, layer in enumerate(layers)]
