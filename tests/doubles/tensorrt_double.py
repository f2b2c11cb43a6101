"""A recording double of the `tensorrt` Python module (10.x or 11.x) and of cuda-python's runtime.

It knows only the names of docs/tensorrt-reference.md (plus the few listed in
EXTRA_NAMES, each a documented TensorRT API the reference leaves out): using any other name is
an AttributeError, and classes use __slots__ so that setting an unknown builder option fails too.
Every call is recorded in `calls`. It computes nothing TensorRT would: the "engine" is the ONNX
graph's own nodes, and its layer times are fixed placeholders that exist only inside tests.
"""

from __future__ import annotations

import ctypes
import enum
import json
import types
from typing import Any

import onnx

# Documented TensorRT names that tensorrt-reference.md does not list (official Python API docs):
# IBuilderConfig.set_flag (the reference shows its twin clear_flag), IBuilderConfig.set_tactic_sources,
# BuilderFlag.SPARSE_WEIGHTS.
EXTRA_NAMES = {"set_flag", "set_tactic_sources", "SPARSE_WEIGHTS"}


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple, dict]] = []

    def __call__(self, name: str, *args, **kwargs) -> None:
        self.calls.append((name, args, kwargs))

    def names(self) -> list[str]:
        return [c[0] for c in self.calls]

    def find(self, name: str) -> list[tuple]:
        return [c[1] for c in self.calls if c[0] == name]


def make_tensorrt(version: str = "10.13.0", recorder: Recorder | None = None) -> types.ModuleType:
    rec = recorder or Recorder()
    major = int(version.split(".")[0])
    trt = types.ModuleType("tensorrt")
    trt.__version__ = version
    trt.calls = rec

    flags = ["STRONGLY_TYPED"] + (["EXPLICIT_BATCH"] if major == 10 else [])
    trt.NetworkDefinitionCreationFlag = enum.IntEnum("NetworkDefinitionCreationFlag", flags, start=0)
    builder_flags = ["TF32", "VERSION_COMPATIBLE", "SPARSE_WEIGHTS"] + (
        ["FP16", "BF16", "INT8", "FP8", "OBEY_PRECISION_CONSTRAINTS"] if major == 10 else [])
    trt.BuilderFlag = enum.IntEnum("BuilderFlag", builder_flags, start=0)
    sources = (["CUBLAS", "CUBLAS_LT", "CUDNN"] if major == 10 else []) + ["EDGE_MASK_CONVOLUTIONS", "JIT_CONVOLUTIONS"]
    trt.TacticSource = enum.IntEnum("TacticSource", sources, start=0)
    trt.MemoryPoolType = enum.Enum("MemoryPoolType", ["WORKSPACE"])
    trt.ProfilingVerbosity = enum.Enum("ProfilingVerbosity", ["LAYER_NAMES_ONLY", "DETAILED"])
    trt.HardwareCompatibilityLevel = enum.Enum("HardwareCompatibilityLevel", ["NONE", "AMPERE_PLUS"])
    trt.TensorIOMode = enum.Enum("TensorIOMode", ["INPUT", "OUTPUT"])
    trt.LayerInformationFormat = enum.Enum("LayerInformationFormat", ["ONELINE", "JSON"])
    trt.DataType = enum.Enum("DataType", ["FLOAT", "HALF", "INT8", "INT32", "INT64", "BOOL", "BF16"])
    severity = enum.Enum("Severity", ["INTERNAL_ERROR", "ERROR", "WARNING", "INFO", "VERBOSE"])

    class ILogger:
        __slots__ = ()
        Severity = severity

    class Logger(ILogger):
        __slots__ = ("min_severity",)
        WARNING = severity.WARNING

        def __init__(self, min_severity=severity.WARNING) -> None:
            self.min_severity = min_severity

    class IProfiler:
        __slots__ = ("__dict__",)

    class Network:
        __slots__ = ("flags", "model", "num_layers")

        def __init__(self, flags: int) -> None:
            self.flags, self.model, self.num_layers = flags, None, 0

    class OnnxParser:
        __slots__ = ("network", "logger", "errors")

        def __init__(self, network: Network, logger) -> None:
            self.network, self.logger, self.errors = network, logger, []

        def parse_from_file(self, path: str) -> bool:
            rec("parse_from_file", path)
            model = onnx.load(path)
            for node in model.graph.node:
                if node.domain not in ("", "ai.onnx"):
                    self.errors.append(f"In node {len(self.errors)} ({node.name}): UNSUPPORTED_NODE: "
                                       f"No importer registered for op: {node.op_type}")
            self.network.model, self.network.num_layers = model, len(model.graph.node)
            return not self.errors

        @property
        def num_errors(self) -> int:
            return len(self.errors)

        def get_error(self, index: int) -> str:
            return self.errors[index]

    class TimingCache:
        __slots__ = ("blob",)

        def __init__(self, blob: bytes) -> None:
            self.blob = blob

        def combine(self, other: TimingCache, ignore_mismatch: bool) -> bool:
            rec("combine", other.blob, ignore_mismatch)
            self.blob = self.blob + b"+" + other.blob if other.blob else self.blob
            return True

        def serialize(self) -> bytes:
            return self.blob or b"timing-cache"

    class OptimizationProfile:
        __slots__ = ("shapes",)

        def __init__(self) -> None:
            self.shapes: dict[str, tuple] = {}

        def set_shape(self, name: str, min, opt, max) -> None:
            rec("set_shape", name, tuple(min), tuple(opt), tuple(max))
            self.shapes[name] = (tuple(min), tuple(opt), tuple(max))

    class BuilderConfig:
        __slots__ = ("builder_optimization_level", "profiling_verbosity", "avg_timing_iterations", "max_aux_streams",
                     "hardware_compatibility_level", "flags", "profiles", "timing_cache")

        def __init__(self) -> None:
            self.flags = {trt.BuilderFlag.TF32}  # TF32 is on by default
            self.profiles, self.timing_cache = [], None

        def set_memory_pool_limit(self, pool, size: int) -> None:
            rec("set_memory_pool_limit", pool, size)

        def set_flag(self, flag) -> None:
            rec("set_flag", flag)
            self.flags.add(flag)

        def clear_flag(self, flag) -> None:
            rec("clear_flag", flag)
            self.flags.discard(flag)

        def set_tactic_sources(self, mask: int) -> bool:
            rec("set_tactic_sources", mask)
            return True

        def add_optimization_profile(self, profile: OptimizationProfile) -> int:
            rec("add_optimization_profile", dict(profile.shapes))
            self.profiles.append(profile)
            return len(self.profiles) - 1

        def create_timing_cache(self, blob: bytes) -> TimingCache:
            rec("create_timing_cache", bytes(blob))
            return TimingCache(bytes(blob))

        def set_timing_cache(self, cache: TimingCache, ignore_mismatch: bool) -> bool:
            rec("set_timing_cache", cache.blob, ignore_mismatch)
            self.timing_cache = cache
            return True

    class Builder:
        __slots__ = ("logger",)

        def __init__(self, logger) -> None:
            self.logger = logger

        def create_network(self, flags: int) -> Network:
            rec("create_network", flags)
            return Network(flags)

        def create_builder_config(self) -> BuilderConfig:
            return BuilderConfig()

        def create_optimization_profile(self) -> OptimizationProfile:
            return OptimizationProfile()

        def build_serialized_network(self, network: Network, config: BuilderConfig):
            rec("build_serialized_network", sorted(f.name for f in config.flags))
            strongly = network.flags & (1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED))
            if strongly and config.flags & {getattr(trt.BuilderFlag, n, None) for n in ("FP16", "BF16", "INT8")}:
                self.logger.log(severity.ERROR, "precision flags are not allowed on a strongly typed network")
                return None
            self.logger.log(severity.INFO, "[MemUsageStats] Peak memory usage of TRT CPU/GPU memory allocators: "
                                           "CPU 3 MiB, GPU 42 MiB")
            graph = network.model.graph
            inits = {t.name for t in graph.initializer}
            plan = {"inputs": [_value(v) for v in graph.input if v.name not in inits],
                    "outputs": [_value(v) for v in graph.output],
                    "profiles": [{k: v for k, v in p.shapes.items()} for p in config.profiles],
                    "layers": [{"name": n.name, "type": n.op_type, "inputs": [i for i in n.input if i not in inits],
                                "outputs": list(n.output)} for n in graph.node]}
            return json.dumps(plan).encode()

    class Engine:
        __slots__ = ("plan", "names")

        def __init__(self, plan: dict) -> None:
            self.plan = plan
            self.names = [v["name"] for v in plan["inputs"]] + [v["name"] for v in plan["outputs"]]

        num_io_tensors = property(lambda self: len(self.names))
        num_layers = property(lambda self: len(self.plan["layers"]))
        device_memory_size_v2 = property(lambda self: 1 << 20)

        def get_tensor_name(self, index: int) -> str:
            return self.names[index]

        def get_tensor_mode(self, name: str):
            inputs = [v["name"] for v in self.plan["inputs"]]
            return trt.TensorIOMode.INPUT if name in inputs else trt.TensorIOMode.OUTPUT

        def get_tensor_dtype(self, name: str):
            return trt.DataType.FLOAT

        def get_tensor_shape(self, name: str) -> tuple:
            value = next(v for v in self.plan["inputs"] + self.plan["outputs"] if v["name"] == name)
            return tuple(d if isinstance(d, int) else -1 for d in value["shape"])

        def create_execution_context(self, *strategy) -> Context:
            rec("create_execution_context")
            return Context(self)

        def create_engine_inspector(self) -> Inspector:
            return Inspector(self)

    class Context:
        __slots__ = ("engine", "shapes", "addresses", "profiler", "enqueue_emits_profile", "runs", "profile")

        def __init__(self, engine: Engine) -> None:
            self.engine, self.shapes, self.addresses, self.runs = engine, {}, {}, 0
            self.profiler, self.enqueue_emits_profile, self.profile = None, True, 0

        def set_optimization_profile_async(self, index: int, stream: int) -> bool:
            rec("set_optimization_profile_async", index, stream)
            self.profile = index
            return index < max(len(self.engine.plan["profiles"]), 1)

        def set_input_shape(self, name: str, shape) -> bool:
            rec("set_input_shape", name, tuple(shape))
            profiles = self.engine.plan["profiles"]
            if profiles:
                low, _, high = profiles[self.profile][name]
                if any(not lo <= s <= hi for s, lo, hi in zip(shape, low, high)):
                    return False
            self.shapes[name] = tuple(shape)
            return True

        def get_tensor_shape(self, name: str) -> tuple:
            if name in self.shapes:
                return self.shapes[name]
            batch = next(iter(self.shapes.values()))[0]
            return tuple(batch if d == -1 else d for d in self.engine.get_tensor_shape(name))

        def set_tensor_address(self, name: str, address: int) -> bool:
            self.addresses[name] = address
            return True

        def infer_shapes(self) -> list:
            return [n for n in self.engine.names if n not in self.shapes and self.engine.get_tensor_mode(n).name == "INPUT"]

        def execute_async_v3(self, stream: int) -> bool:
            rec("execute_async_v3", stream)
            self.runs += 1
            return len(self.addresses) == len(self.engine.names)

        def report_to_profiler(self) -> None:
            for i, layer in enumerate(self.engine.plan["layers"]):
                self.profiler.report_layer_time(layer["name"], 0.001 * (i + 1))  # placeholders, tests only

    class Inspector:
        __slots__ = ("engine", "execution_context")

        def __init__(self, engine: Engine) -> None:
            self.engine, self.execution_context = engine, None

        def get_layer_information(self, index: int, fmt) -> str:
            layer = self.engine.plan["layers"][index]
            return json.dumps({"Name": layer["name"], "LayerType": layer["type"],
                               "Inputs": [{"Name": n, "Dimensions": [-1], "Format/Datatype": "Row major linear FP32"}
                                          for n in layer["inputs"]],
                               "Outputs": [{"Name": n, "Dimensions": [-1], "Format/Datatype": "Row major linear FP32"}
                                           for n in layer["outputs"]]})

    class Runtime:
        __slots__ = ("logger",)

        def __init__(self, logger) -> None:
            self.logger = logger

        def deserialize_cuda_engine(self, plan: bytes) -> Engine:
            rec("deserialize_cuda_engine", len(plan))
            return Engine(json.loads(bytes(plan)))

    for cls in (ILogger, Logger, IProfiler, OnnxParser, Builder, Runtime):
        setattr(trt, cls.__name__, cls)
    return trt


def _value(value) -> dict:
    dims = [d.dim_value if d.HasField("dim_value") else d.dim_param for d in value.type.tensor_type.shape.dim]
    return {"name": value.name, "shape": dims}


def make_cudart(recorder: Recorder) -> types.ModuleType:
    """cuda.bindings.runtime: (err, *out) returns; pinned host memory is real memory."""
    rt = types.ModuleType("cuda.bindings.runtime")
    rt.cudaError_t = enum.Enum("cudaError_t", ["cudaSuccess", "cudaErrorMemoryAllocation"])
    rt.cudaMemcpyKind = enum.Enum("cudaMemcpyKind", ["cudaMemcpyHostToDevice", "cudaMemcpyDeviceToHost"])
    rt.cudaStreamCaptureMode = enum.Enum("cudaStreamCaptureMode", ["cudaStreamCaptureModeThreadLocal"])
    ok = rt.cudaError_t.cudaSuccess
    host_buffers: dict[int, Any] = {}
    counter = iter(range(0x1000, 1 << 40, 0x1000))

    def call(name: str, result: Any = None):
        def fn(*args):
            recorder(name, *args)
            value = result(*args) if callable(result) else result
            return (ok,) if value is None else (ok, value)
        return fn

    def malloc_host(nbytes: int) -> int:
        buffer = ctypes.create_string_buffer(nbytes)
        host_buffers[ctypes.addressof(buffer)] = buffer
        return ctypes.addressof(buffer)

    props = types.SimpleNamespace(name=b"Double GPU", major=9, minor=0, multiProcessorCount=132,
                                  totalGlobalMem=80 * 2**30, memoryBusWidth=5120,
                                  uuid=types.SimpleNamespace(bytes=bytes(range(16))))
    for name, result in {
        "cudaGetDeviceCount": 1, "cudaGetDeviceProperties": props, "cudaMalloc": lambda n: next(counter),
        "cudaMallocHost": malloc_host, "cudaFree": None, "cudaFreeHost": None, "cudaStreamCreate": 7,
        "cudaEventCreate": lambda: object(), "cudaEventRecord": None, "cudaEventSynchronize": None,
        "cudaEventElapsedTime": 0.25, "cudaMemcpyAsync": None, "cudaStreamBeginCapture": None,
        "cudaStreamEndCapture": "graph", "cudaGraphInstantiate": "graph-exec", "cudaGraphLaunch": None,
        "cudaMemGetInfo": (1, 2),
    }.items():
        setattr(rt, name, call(name, result))
    rt.cudaGetLastError = lambda: (ok,)
    return rt
