"""ONNX Runtime on an NVIDIA GPU: execution-provider options, what can run here, and the
I/O-bound session a CUDA cell times.

A CUDA cell runs on one non-default stream that farm creates and hands to ONNX Runtime
(`user_compute_stream`, as its CUDA EP documentation describes), so the copies farm queues and
the session's kernels are ordered on that one stream and farm.device_timer's four events bracket
exactly: H2D (pinned host -> the bound input OrtValues), the session's run, D2H (the bound
output OrtValues -> pinned host). The run is told not to synchronize (ONNX Runtime's
`disable_synchronize_execution_providers`), so its host time is the enqueue, as trtexec's.

The copies and events come from cuda-python (`farm[gpu]`) where it is installed, else from
PyTorch: both use the CUDA runtime's primary context, which ONNX Runtime shares.
"""

from __future__ import annotations

import ctypes
import re
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from farm.device_timer import CudaEvents, DeviceTimer
from farm.records import PhaseTimes, QueryFn

GPU_EXTRA = "pip install 'farm[gpu]'"
CUDA_EP, TENSORRT_EP = "CUDAExecutionProvider", "TensorrtExecutionProvider"
GRAPH_ID = "1"  # the CUDA graph annotation of every timed run (0 is ONNX Runtime's own, -1 turns capture off)
_ORT_TYPES = {"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(double)": np.float64,
              "tensor(int64)": np.int64, "tensor(int32)": np.int32, "tensor(int8)": np.int8,
              "tensor(uint8)": np.uint8, "tensor(bool)": np.bool_}


def numpy_type(ort_type: str) -> type:
    if ort_type not in _ORT_TYPES:
        raise TypeError(f"{ort_type}: no numpy type for this ONNX Runtime tensor type")
    return _ORT_TYPES[ort_type]


def device_io_reason(inputs: Any, outputs: Any) -> str | None:
    """Why a CUDA cell cannot bind this session's inputs and outputs to device buffers, or None.
    `inputs`, `outputs`: the session's NodeArgs (get_inputs(), get_outputs()). Sequences, maps (a
    scikit-learn classifier's ZipMap: 'seq(map(int64,tensor(float)))') and strings ('tensor(string)')
    live in host memory only: no OrtValue of them has device memory to copy to or from, so the
    H2D/run/D2H split farm times cannot hold them."""
    host = [f"{kind} {arg.name!r} is {arg.type}" for kind, args in (("input", inputs), ("output", outputs))
            for arg in args if not arg.type.startswith("tensor(") or arg.type == "tensor(string)"]
    if not host:
        return None
    zipmap = any("map(" in arg.type for arg in outputs)
    return (f"onnxruntime on CUDA times queries through device buffers bound to every input and output, and "
            f"{', '.join(host)}, which ONNX Runtime keeps in host memory only: run this model with device = \"cpu\""
            + (", or convert it without ZipMap (skl2onnx: options={'zipmap': False}) to get a probability tensor"
               if zipmap else ", or export it with numeric tensor inputs and outputs only"))


def provider_list(options: Any, precision: str, stream: int, work_dir: Path) -> list:
    """The `providers` argument of a CUDA cell's InferenceSession: its EP with its options."""
    cuda = {"device_id": "0", "user_compute_stream": str(stream), "has_user_compute_stream": "1",
            # fp32 cells are true FP32; every other cell keeps ONNX Runtime's default (TF32 on): with
            # it off, even fp16 ResNet-50 ran 10 % slower on an H200 (use_tf32 also steers its fp16 convolutions)
            "use_tf32": "0" if precision == "fp32" else "1",
            "cudnn_conv_algo_search": options.cudnn_conv_algo_search,
            "prefer_nhwc": "1" if options.prefer_nhwc else "0",
            "enable_cuda_graph": "1" if options.cuda_graph and options.provider == "default" else "0"}
    if options.provider != "tensorrt":
        return [(CUDA_EP, cuda)]
    cache = work_dir / "trt_cache"
    trt = {"device_id": "0", "user_compute_stream": str(stream), "has_user_compute_stream": "1",
           "trt_fp16_enable": "1" if precision == "fp16" else "0",
           "trt_int8_enable": "1" if precision == "int8" else "0",  # QDQ models: explicit quantization
           "trt_builder_optimization_level": str(options.trt_builder_optimization_level),
           "trt_cuda_graph_enable": "1" if options.cuda_graph else "0",
           "trt_engine_cache_enable": "1", "trt_engine_cache_path": str(cache),
           "trt_timing_cache_enable": "1", "trt_timing_cache_path": str(cache)}
    return [(TENSORRT_EP, trt), (CUDA_EP, cuda | {"enable_cuda_graph": "0"})]  # nodes TensorRT leaves


def tensorrt_ep_reason() -> str | None:
    """Why ONNX Runtime's TensorRT EP cannot load here (its provider library or TensorRT's), or None."""
    import onnxruntime

    capi = Path(onnxruntime.__file__).parent / "capi"
    library = next(iter(sorted(capi.glob("libonnxruntime_providers_tensorrt.*"))), None)
    if library is None:
        return (f"this onnxruntime ({onnxruntime.__version__}) has no TensorRT execution provider: "
                f"{GPU_EXTRA} (onnxruntime-gpu)")
    try:
        ctypes.CDLL(str(capi / "libonnxruntime_providers_shared.so"), mode=ctypes.RTLD_GLOBAL)
        ctypes.CDLL(str(library))
    except OSError as exc:
        return (f"ONNX Runtime's TensorRT execution provider cannot load TensorRT's libraries ({exc}): "
                "install TensorRT 10 (pip install tensorrt) so that libnvinfer is found")
    return None


class DeviceMemory(Protocol):
    """Copies between pinned host arrays and OrtValues' device memory, queued on one stream."""

    device_type: str  # where the bound OrtValues live ('cuda')
    stream: Any  # what the DeviceTimer records events on
    stream_handle: int  # the same stream, as ONNX Runtime's user_compute_stream
    events: CudaEvents

    def pinned(self, array: np.ndarray) -> np.ndarray: ...

    def h2d(self, value: Any, host: np.ndarray) -> None: ...

    def d2h(self, host: np.ndarray, value: Any) -> None: ...

    def synchronize(self) -> None: ...

    def close(self) -> None: ...


class CudartMemory:
    """cuda-python: cudaMallocHost buffers and cudaMemcpyAsync on a stream of its own."""

    device_type = "cuda"

    def __init__(self) -> None:
        from farm.cuda import CudaRuntime
        from farm.device_timer import CudartEvents

        self.runtime = CudaRuntime()
        self.stream = self.stream_handle = self.runtime.stream()
        self.events = CudartEvents(self.runtime)
        self._host: list[int] = []

    def pinned(self, array: np.ndarray) -> np.ndarray:
        pointer = self.runtime.malloc_host(array.nbytes)
        self._host.append(pointer)
        view = self.runtime.host_array(pointer, array.shape, array.dtype)
        view[...] = array
        return view

    def h2d(self, value: Any, host: np.ndarray) -> None:
        self.runtime.copy_h2d(value.data_ptr(), host.ctypes.data, host.nbytes, self.stream)

    def d2h(self, host: np.ndarray, value: Any) -> None:
        self.runtime.copy_d2h(host.ctypes.data, value.data_ptr(), host.nbytes, self.stream)

    def synchronize(self) -> None:
        self.runtime.check(self.runtime.rt.cudaStreamSynchronize(self.stream), "cudaStreamSynchronize")

    def close(self) -> None:
        self.synchronize()
        for pointer in self._host:
            self.runtime.free_host(pointer)
        self._host = []
        self.runtime.check(self.runtime.rt.cudaStreamDestroy(self.stream), "cudaStreamDestroy")


class _DeviceView:
    """An OrtValue's device memory as PyTorch reads it (the CUDA array interface, no copy)."""

    def __init__(self, value: Any) -> None:
        dtype = np.dtype(numpy_type(value.data_type()))
        self.__cuda_array_interface__ = {"data": (value.data_ptr(), False), "shape": tuple(value.shape()),
                                         "typestr": dtype.str, "version": 3, "strides": None, "stream": None}


class TorchMemory:
    """PyTorch: pinned tensors, copies on a torch.cuda.Stream into OrtValues' memory."""

    device_type = "cuda"

    def __init__(self) -> None:
        import torch

        from farm.device_timer import TorchEvents

        self.torch = torch
        self.stream = torch.cuda.Stream()
        self.stream_handle = int(self.stream.cuda_stream)
        self.events = TorchEvents()
        self._host: dict[int, Any] = {}  # host pointer -> its pinned tensor
        self._device: dict[tuple, Any] = {}  # (device pointer, shape, type) -> a tensor over it

    def pinned(self, array: np.ndarray) -> np.ndarray:
        tensor = self.torch.from_numpy(np.asarray(array).copy(order="C")).pin_memory()  # a 0-d array stays 0-d
        view = tensor.numpy()
        self._host[view.ctypes.data] = tensor
        return view

    def _on_device(self, value: Any) -> Any:
        # keyed by shape and type too: a loose output is allocated afresh on each run, and a later
        # buffer may start where an earlier one of another size did
        key = (value.data_ptr(), tuple(value.shape()), value.data_type())
        if key not in self._device:
            self._device[key] = self.torch.as_tensor(_DeviceView(value), device="cuda")
        return self._device[key]

    def h2d(self, value: Any, host: np.ndarray) -> None:
        with self.torch.cuda.stream(self.stream):
            self._on_device(value).copy_(self._host[host.ctypes.data], non_blocking=True)

    def d2h(self, host: np.ndarray, value: Any) -> None:
        with self.torch.cuda.stream(self.stream):
            self._host[host.ctypes.data].copy_(self._on_device(value), non_blocking=True)

    def synchronize(self) -> None:
        self.stream.synchronize()

    def close(self) -> None:
        self.synchronize()
        self._host, self._device = {}, {}


def cuda_memory() -> DeviceMemory:
    """cuda-python's CUDA runtime where installed, else PyTorch's (ImportError when neither is)."""
    try:
        import cuda.bindings.runtime  # noqa: F401
    except ImportError:
        import torch  # noqa: F401  (raises the ImportError the caller reports)

        return TorchMemory()
    return CudartMemory()


def visible_gpus() -> int:
    """CUDA devices this process sees, through whichever API cuda_memory would use."""
    try:
        from farm.cuda import CudaError, CudaRuntime

        try:
            return CudaRuntime().device_count()
        except CudaError:
            return 0
    except ImportError:
        import torch

        return torch.cuda.device_count()


class BoundSession:
    """A session whose inputs and outputs are bound OrtValues at fixed device addresses (what a
    CUDA graph replays), with pinned host copies of the feeds and of the outputs."""

    def __init__(self, session: Any, memory: DeviceMemory, feeds: dict[str, np.ndarray], run_options: Any,
                 first_run_options: Any | None = None) -> None:
        import onnxruntime as ort

        self.session, self.memory, self.run_options = session, memory, run_options
        self.graph = first_run_options is not None  # its runs replay a CUDA graph (captured on the second)
        self.binding = session.io_binding()
        self.inputs: list[tuple[str, Any, np.ndarray]] = []  # name, bound OrtValue, pinned host copy
        for spec in session.get_inputs():
            # np.asarray, not np.ascontiguousarray: that makes a scalar input (a sample rate) 1-D
            host = np.asarray(feeds[spec.name], dtype=numpy_type(spec.type)).copy(order="C")
            value = ort.OrtValue.ortvalue_from_shape_and_type(host.shape, host.dtype, memory.device_type, 0)
            self.inputs.append((spec.name, value, memory.pinned(host)))
            self.binding.bind_ortvalue_input(spec.name, value)
        self.copy_inputs()
        # one run with outputs that ONNX Runtime allocates tells their shapes (not captured: -1)
        names = [o.name for o in session.get_outputs()]
        for name in names:
            self.binding.bind_output(name, memory.device_type, 0)
        session.run_with_iobinding(self.binding, first_run_options or run_options)
        memory.synchronize()
        self.outputs: list[tuple[str, Any, np.ndarray]] = []
        declared = {o.name: o.shape for o in session.get_outputs()}
        # Outputs produced at another rank than the model declares (a malformed model: ONNX Runtime
        # refuses a bound buffer of the produced rank) stay allocated by ONNX Runtime on each run,
        # and are copied from where it put them; every other output is bound once.
        self.loose: list[int] = []
        for index, (name, produced) in enumerate(zip(names, self.binding.get_outputs())):
            dtype = numpy_type(produced.data_type())
            rank_differs = declared[name] is not None and len(declared[name]) != len(produced.shape())
            value = None if rank_differs else ort.OrtValue.ortvalue_from_shape_and_type(
                produced.shape(), dtype, memory.device_type, 0)
            if rank_differs:
                self.loose.append(index)
            self.outputs.append((name, value, memory.pinned(np.zeros(produced.shape(), dtype))))
        self.binding.clear_binding_outputs()
        for name, value, _ in self.outputs:
            if value is None:
                self.binding.bind_output(name, memory.device_type, 0)
            else:
                self.binding.bind_ortvalue_output(name, value)

    def copy_inputs(self) -> None:
        for _, value, host in self.inputs:
            self.memory.h2d(value, host)

    def copy_outputs(self) -> None:
        for host, value in self._output_values():
            self.memory.d2h(host, value)

    def _output_values(self) -> list[tuple[np.ndarray, Any]]:
        """(pinned host copy, device OrtValue) per output: the bound ones, and where ONNX Runtime
        put the loose ones on its last run."""
        produced = self.binding.get_outputs() if self.loose else None
        return [(host, produced[index] if value is None else value)
                for index, (_, value, host) in enumerate(self.outputs)]

    def run(self) -> None:
        # A run leaves what it produced in the binding, and the next run takes that as a buffer
        # given to it, which ONNX Runtime's CUDA EP checks against the declared rank ("Invalid rank
        # for output"): a loose output is bound afresh, to be allocated again, before every run.
        for index in self.loose:
            self.binding.bind_output(self.outputs[index][0], self.memory.device_type, 0)
        # ONNX Runtime copies a bound input that a node on another device reads (a node it left on
        # the CPU) when it is bound, not when it runs: bound again, each query copies it, as a
        # user's session.run does, instead of reading the first query's input forever. A session
        # that replays a CUDA graph has every node on the GPU (capture refuses any other) and keeps
        # its binding as captured.
        if not self.graph:
            for name, value, _ in self.inputs:
                self.binding.bind_ortvalue_input(name, value)
        self.session.run_with_iobinding(self.binding, self.run_options)
        if self.loose:
            # ONNX Runtime may finish a loose output on a stream of its own (a copy from a node left
            # on the CPU): wait for it, or the copy out reads the buffer before it is written (an
            # H200 run: the same outputs for two different inputs)
            self.binding.synchronize_outputs()

    def query_fn(self, transfers: bool) -> QueryFn:
        """One query: H2D, run, D2H on the one stream, split by farm.device_timer's events."""
        memory = self.memory
        timer = DeviceTimer(memory.events, memory.stream, transfers)
        inputs = [(value, host) for _, value, host in self.inputs] if transfers else []
        outputs = [(host, value) for _, value, host in self.outputs] if transfers and not self.loose else []
        loose = transfers and bool(self.loose)
        output_values = self._output_values
        h2d, d2h, run = memory.h2d, memory.d2h, self.run

        def query() -> PhaseTimes:
            timer.inputs_start()
            for value, host in inputs:
                h2d(value, host)
            timer.inputs_done()
            timer.enqueue(run)
            timer.compute_done()
            for host, value in output_values() if loose else outputs:
                d2h(host, value)
            timer.outputs_done()
            return timer.phases()

        return query

    def outputs_for(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The outputs for `feeds` (the cell's shapes) from the cell's session: through ONNX
        Runtime's own copies (`session.run`), except where the session replays a CUDA graph, which
        runs only on its bound buffers (every node is then on the GPU). With nodes left on the
        CPU, ONNX Runtime copies bound buffers across devices outside farm's stream, and reading
        them back gave ddddocr's OCR model on an H200 the first input's outputs for every later
        input, where `session.run` agreed with the CPU."""
        arrays = {}
        for name, _value, host in self.inputs:
            arrays[name] = given = np.asarray(feeds[name], dtype=host.dtype)
            if given.shape != host.shape:
                raise ValueError(f"input {name}: shape {given.shape}, the cell runs {host.shape}")
        if not self.graph:
            names = [name for name, _, _ in self.outputs]
            return dict(zip(names, self.session.run(names, arrays)))
        for name, _value, host in self.inputs:
            host[...] = arrays[name]
        self.copy_inputs()
        self.memory.synchronize()
        self.run()
        self.copy_outputs()
        self.memory.synchronize()
        return {name: host.copy() for name, _, host in self.outputs}

    def close(self) -> None:
        self.binding = None
        self.inputs, self.outputs = [], []


# How ONNX Runtime says a session cannot be captured in a CUDA graph (1.17 to 1.22 wordings): a node
# left on the CPU, control flow, or a dynamic-shape node the capture cannot hold.
_UNCAPTURABLE = re.compile(r"cannot use the (CUDA Graph|graph capture) feature|CUDA graph capture|"
                           r"cudaStreamBeginCapture|graph capture is not supported", re.IGNORECASE)


NOT_PARTITIONED = "have not been partitioned"  # ONNX Runtime's words where some nodes went to another provider


def raise_if_uncapturable(exc: BaseException, on_cpu: str | None = None) -> None:
    """EngineUnsupported where `exc` is ONNX Runtime refusing to capture the model in a CUDA graph:
    a limit of the engine for this model, not an accident; the cell without CUDA graphs runs.
    `on_cpu`: the nodes the CPU provider took, where a session without the graph could say."""
    from farm.errors import EngineUnsupported

    text = str(exc)
    if _UNCAPTURABLE.search(text):
        first = next((line.strip() for line in text.splitlines() if _UNCAPTURABLE.search(line)), text.strip())
        which = f"; {on_cpu} run on the CPU provider, which a CUDA graph cannot hold" if on_cpu else ""
        raise EngineUnsupported(f"ONNX Runtime cannot capture this model in a CUDA graph ({first[:300]}){which}: "
                                "run it with cuda_graph = false") from exc
