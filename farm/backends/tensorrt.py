"""TensorRT through its Python API (10.x and 11.x), written from the documented API
(../shared/design/tensorrt-reference.md): TensorRT cannot be installed where farm is developed,
so this module is verified against a recording double that knows only the documented names and
against recorded real TensorRT output, and runs for real only where TensorRT and a GPU exist
(`pytest -m tensorrt`).

Build: ONNX parser (errors surfaced per node) -> network (strongly typed: precision comes from
the ONNX file; on 10.x builder precision flags are an opt-in) -> optimization profiles from the
sweep's profiles -> builder options -> timing cache per GPU and TensorRT version, merged back
after each build -> engine cache keyed by everything that changes the engine.
Run: pinned host buffers, device buffers, one stream, CUDA events around H2D / compute / D2H,
host time around execute_async_v3 (enqueue); optional CUDA graph as trtexec captures it.
Per-layer: an IProfiler in a separate run, layer information from the engine inspector.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import numpy as np
from pydantic import Field, field_validator

from farm.files import write_atomic
from farm.backends.base import Backend, BackendOptions, BuildStats, LayerRecord, PhaseTimes, QueryFn

if TYPE_CHECKING:
    from farm.plan import Cell

INSTALL_HINT = ("install TensorRT 10 or 11 for your CUDA (pip install tensorrt-cu12 or tensorrt-cu13, from "
                "NVIDIA's package index) on a machine with an NVIDIA GPU")
TACTIC_SOURCES = ("CUBLAS", "CUBLAS_LT", "CUDNN", "EDGE_MASK_CONVOLUTIONS", "JIT_CONVOLUTIONS")


class TensorRTOptions(BackendOptions):
    """`[backends.tensorrt]`: each may be a list, which makes it another sweep axis."""

    builder_optimization_level: Annotated[int, Field(ge=0, le=5)] = 3
    workspace_mib: Annotated[int, Field(ge=1)] | None = None
    tactic_sources: str | None = None  # comma-separated, e.g. "CUBLAS_LT,JIT_CONVOLUTIONS"
    hardware_compatibility: Literal["none", "ampere_plus"] = "none"
    version_compatible: bool = False
    sparsity: bool = False
    max_aux_streams: Annotated[int, Field(ge=0)] | None = None
    avg_timing_iterations: Annotated[int, Field(ge=1)] | None = None
    precision_flags: bool = False
    profiles_in_engine: Literal["one", "all"] = "one"
    streams: Annotated[int, Field(ge=1)] = 1
    cuda_graph: bool = False
    transfers: bool = True
    timing_cache: bool = True
    engine_cache: bool = True


    @field_validator("tactic_sources")
    @classmethod
    def _known_sources(cls, value: str | None) -> str | None:
        if value is None:
            return None
        names = [n.strip() for n in value.split(",") if n.strip()]
        unknown = [n for n in names if n not in TACTIC_SOURCES]
        if unknown:
            raise ValueError(f"unknown tactic source(s) {', '.join(unknown)}; known: {', '.join(TACTIC_SOURCES)}")
        return ",".join(names)


class TensorRTBackend(Backend):
    name = "tensorrt"
    Options = TensorRTOptions
    precisions = frozenset({"fp32", "tf32", "fp16", "bf16", "int8", "fp8"})
    supports_profiles = True

    def __init__(self, options: dict[str, Any]) -> None:
        super().__init__(options)
        self.cell: Cell | None = None
        self.cache_dir: Path | None = None
        self.buffers: dict[str, dict[str, Any]] = {}
        self.bindings: list[dict[str, Any]] = []
        self.context = self.engine = self.graph_exec = None
        self.log_lines: list[str] = []
        self.trt = None
        self.graph_used = False  # every stream's enqueue captured as a CUDA graph (timing_cuda_graph)

    @classmethod
    def device_kind(cls, options: dict[str, Any]) -> str:
        return "cuda"

    @classmethod
    def unsupported_reason(cls, precision: str, options: dict[str, Any]) -> str | None:
        if precision in ("fp32", "tf32", "fp16", "int8"):
            return None  # fp16 and int8 come from farm's ONNX transforms
        if options.get("precision_flags") and precision == "bf16":
            return None  # TensorRT 10 builder flag; a build error on 11, which says so
        return (f"TensorRT networks are strongly typed: {precision} must come from the ONNX file, and farm has "
                f"no {precision} transform (docs/precision.md); on TensorRT 10, precision_flags = true builds bf16")

    def unavailable_reason(self) -> str | None:
        try:
            import tensorrt as trt
        except ImportError:
            return f"TensorRT is not installed here: {INSTALL_HINT}"
        try:
            from farm.backends.cuda_runtime import CudaRuntime

            if CudaRuntime().device_count() < 1:
                return "no CUDA GPU is visible: TensorRT needs an NVIDIA GPU"
        except Exception as exc:  # no cuda-python, no driver
            return f"CUDA is not usable here ({type(exc).__name__}: {exc}); pip install cuda-python on a GPU machine"
        major = _major(trt)
        if major < 10:
            return f"TensorRT {trt.__version__} is too old: farm drives TensorRT 10 and 11"
        return None

    def prepare(self, cell: Cell, cache_dir: Path) -> None:
        self.cell, self.cache_dir = cell, cache_dir

    # --- build ------------------------------------------------------------------------------------

    def build(self, model_path: Path, feeds: dict[str, np.ndarray], precision: str, work_dir: Path) -> BuildStats:
        import tensorrt as trt

        from farm.backends.cuda_runtime import CudaRuntime

        self.trt, self.cuda = trt, CudaRuntime()
        self.major = _major(trt)
        logger = _logger(trt, self.log_lines)
        self.logger = logger
        start = time.perf_counter()
        engine_path = self._engine_cache_path(model_path, precision)
        cache_hits = 0
        if engine_path is not None and engine_path.is_file():
            plan = engine_path.read_bytes()
            cache_hits, layers_before = 1, None
        else:
            plan, layers_before = self._build_plan(trt, logger, model_path, precision, work_dir)
            if engine_path is not None:
                write_atomic(engine_path, lambda tmp: tmp.write_bytes(plan), make_parents=True)
        build_s = time.perf_counter() - start
        runtime = trt.Runtime(logger)
        self.engine = runtime.deserialize_cuda_engine(plan)
        if self.engine is None:
            raise RuntimeError("TensorRT could not deserialize the engine it built: " + self._last_errors())
        peak = _peak_device_bytes(self.log_lines)
        return BuildStats(build_s=build_s, artifact_bytes=len(plan), cache_hits=cache_hits,
                          builder_peak_memory_bytes=peak, layers_before_fusion=layers_before,
                          layers_after_fusion=self.engine.num_layers)

    def _build_plan(self, trt, logger, model_path: Path, precision: str, work_dir: Path) -> tuple[bytes, int]:
        builder = trt.Builder(logger)
        flags = 0
        if self.major == 10 and not self.options.precision_flags:
            flags = 1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED)
        network = builder.create_network(flags)
        parser = trt.OnnxParser(network, logger)
        if not parser.parse_from_file(str(model_path)):
            errors = [str(parser.get_error(i)) for i in range(parser.num_errors)]
            raise RuntimeError("TensorRT's ONNX parser rejected the model: " + " | ".join(errors))
        config = builder.create_builder_config()
        self._configure(trt, config, precision)
        self._add_profiles(builder, config, network)
        timing_cache = self._load_timing_cache(config)
        plan = builder.build_serialized_network(network, config)
        if plan is None:
            raise RuntimeError("TensorRT could not build the engine: " + self._last_errors())
        if timing_cache is not None:
            self._save_timing_cache(config, timing_cache)
        return bytes(plan), network.num_layers

    def _configure(self, trt, config, precision: str) -> None:
        options = self.options
        config.profiling_verbosity = trt.ProfilingVerbosity.DETAILED  # the inspector's layer information
        config.builder_optimization_level = options.builder_optimization_level
        if options.workspace_mib:
            config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, options.workspace_mib * 2**20)
        if options.avg_timing_iterations:
            config.avg_timing_iterations = options.avg_timing_iterations
        if options.max_aux_streams is not None:
            config.max_aux_streams = options.max_aux_streams
        if options.hardware_compatibility == "ampere_plus":
            config.hardware_compatibility_level = trt.HardwareCompatibilityLevel.AMPERE_PLUS
        if options.version_compatible:
            config.set_flag(trt.BuilderFlag.VERSION_COMPATIBLE)
        if options.sparsity:
            config.set_flag(trt.BuilderFlag.SPARSE_WEIGHTS)
        if options.tactic_sources is not None:
            mask = 0
            for source in options.tactic_sources.split(","):
                if not hasattr(trt.TacticSource, source):  # 11.x dropped CUBLAS, CUBLAS_LT, CUDNN
                    raise RuntimeError(f"tactic source {source} does not exist in TensorRT {trt.__version__}")
                mask |= 1 << int(getattr(trt.TacticSource, source))
            config.set_tactic_sources(mask)
        if precision == "fp32":
            config.clear_flag(trt.BuilderFlag.TF32)  # TF32 is on by default: fp32 cells are true FP32
        if options.precision_flags and precision in ("fp16", "bf16"):
            if self.major >= 11:
                raise RuntimeError("TensorRT 11 has no precision flags: the precision must come from the ONNX file")
            config.set_flag(trt.BuilderFlag.FP16 if precision == "fp16" else trt.BuilderFlag.BF16)

    def _engine_profiles(self) -> list:
        """The profiles the engine holds: the cell's, or every swept one (`profiles_in_engine`)."""
        cell = self.cell
        if self.options.profiles_in_engine == "all" and cell.all_profiles:
            return list(cell.all_profiles)
        return [cell.profile]

    def profile_index(self) -> int:
        """Which of the engine's profiles this cell runs."""
        profiles = self._engine_profiles()
        return profiles.index(self.cell.profile) if self.cell.profile in profiles else 0

    def _add_profiles(self, builder, config, network) -> None:
        """An optimization profile per engine profile (the cell's own shapes when it has none)."""
        cell = self.cell
        for swept in self._engine_profiles():
            profile = builder.create_optimization_profile()
            dynamic = False
            for spec in cell.model.inputs:
                low, opt, high = [], [], []
                for axis, dim in enumerate(spec.shape):
                    key = spec.profile_key(axis)  # 'batch' on the model's batch axis, wherever it is
                    size = cell.input_shapes[spec.name][axis]
                    rng = swept.ranges.get(key) if swept is not None and key is not None else None
                    if isinstance(dim, str) or axis == spec.batch_axis:
                        dynamic = True
                    lo, op, hi = rng if rng else (size, size, size)
                    low.append(lo), opt.append(op), high.append(hi)
                profile.set_shape(spec.name, low, opt, high)
            if dynamic:
                config.add_optimization_profile(profile)

    def _load_timing_cache(self, config):
        if not self.options.timing_cache or self.cache_dir is None:
            return None
        path = self._timing_cache_path()
        blob = path.read_bytes() if path.is_file() else b""
        cache = config.create_timing_cache(blob)
        config.set_timing_cache(cache, ignore_mismatch=False)
        return cache

    def _save_timing_cache(self, config, cache) -> None:
        """Merge this build's cache into the shared file: other actors may have added to it."""
        path = self._timing_cache_path()
        with _locked(path.with_suffix(".lock")):
            if path.is_file():
                cache.combine(config.create_timing_cache(path.read_bytes()), False)
            write_atomic(path, bytes(cache.serialize()), make_parents=True)

    def _timing_cache_path(self) -> Path:
        device = re.sub(r"[^A-Za-z0-9]+", "-", self._device_name())
        return self.cache_dir / "tensorrt" / f"timing-{device}-trt{self.trt.__version__}.cache"

    def _engine_cache_path(self, model_path: Path, precision: str) -> Path | None:
        """Engines are not portable across GPUs or TensorRT versions: both are in the key."""
        if not self.options.engine_cache or self.cache_dir is None or self.cell is None:
            return None
        cell = self.cell
        key = json.dumps({"model": cell.model.sha256, "precision": precision, "shapes": cell.input_shapes,
                          "profiles": [p.ranges if p else None for p in self._engine_profiles()],
                          "options": {k: v for k, v in self.options.model_dump().items()
                                      if k not in ("cuda_graph", "transfers", "engine_cache")},
                          "device": self._device_name(), "tensorrt": self.trt.__version__}, sort_keys=True, default=str)
        return self.cache_dir / "tensorrt" / "engines" / f"{hashlib.sha256(key.encode()).hexdigest()[:24]}.plan"

    def _device_name(self) -> str:
        from farm.provenance import cuda_device_row_from_runtime

        return cuda_device_row_from_runtime(self.cuda)["name"]

    def _last_errors(self) -> str:
        errors = [line for line in self.log_lines if line.startswith(("[E]", "[F]"))]
        return " | ".join(errors[-3:]) or "no error message from TensorRT"

    # --- run -------------------------------------------------------------------------------------

    def _bind(self, feeds: dict[str, np.ndarray]) -> dict[str, Any]:
        """A context on its own stream with its own pinned and device buffers, shapes set."""
        trt, cuda, engine = self.trt, self.cuda, self.engine
        stream = cuda.stream()
        context = engine.create_execution_context()
        if self.cell is not None and self.cell.profile is not None or _has_dynamic(engine, trt):
            if not context.set_optimization_profile_async(self.profile_index(), stream):
                raise RuntimeError("TensorRT refused the optimization profile")
        names = [engine.get_tensor_name(i) for i in range(engine.num_io_tensors)]
        inputs = [n for n in names if engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT]
        for name in inputs:
            if not context.set_input_shape(name, tuple(feeds[name].shape)):
                raise RuntimeError(f"input {name} shape {feeds[name].shape} is outside the engine's profile")
        buffers = {}
        for name in names:
            shape = tuple(context.get_tensor_shape(name))
            dtype = _numpy_dtype(engine.get_tensor_dtype(name))
            nbytes = int(np.prod(shape)) * dtype.itemsize
            host, device = cuda.malloc_host(nbytes), cuda.malloc(nbytes)
            view = cuda.host_array(host, shape, dtype)
            if name in inputs:
                view[...] = feeds[name].astype(dtype)
            buffers[name] = {"host": host, "device": device, "nbytes": nbytes, "view": view}
            if not context.set_tensor_address(name, device):
                raise RuntimeError(f"TensorRT refused the address of tensor {name}")
        missing = context.infer_shapes()
        if missing:
            raise RuntimeError(f"tensors without a shape: {', '.join(missing)}")
        self.buffers.update({f"{len(self.bindings)}:{n}": b for n, b in buffers.items()})
        return {"stream": stream, "context": context, "done": cuda.event(),
                "in": [(buffers[n]["device"], buffers[n]["host"], buffers[n]["nbytes"]) for n in inputs],
                "in_names": list(inputs),
                "out": [(buffers[n]["host"], buffers[n]["device"], buffers[n]["nbytes"]) for n in names
                        if n not in inputs],
                "out_names": [n for n in names if n not in inputs]}

    @property
    def inferences_per_query(self) -> int:
        return self.options.streams

    def query_fn(self, feeds: dict[str, np.ndarray]) -> QueryFn:
        """One query: H2D, enqueue and D2H on every stream (trtexec's --infStreams); the phases are
        timed with events on the first stream, and the query ends when every stream is done."""
        cuda = self.cuda
        self.bindings: list[dict[str, Any]] = []
        for _ in range(self.options.streams):
            self.bindings.append(self._bind(feeds))
        first, others = self.bindings[0], self.bindings[1:]
        self.stream, self.context = first["stream"], first["context"]
        h2d_start, h2d_end, compute_end, d2h_end = (cuda.event() for _ in range(4))
        launches = [self._graph_launcher(b["context"], b["stream"]) if self.options.cuda_graph else None
                    for b in self.bindings]
        self.graph_used = all(launch is not None for launch in launches)  # a failed capture runs without
        clock = time.perf_counter
        transfers = self.options.transfers

        def enqueue(binding: dict[str, Any], launch) -> None:
            if launch is not None:
                launch()
            elif not binding["context"].execute_async_v3(binding["stream"]):
                raise RuntimeError("execute_async_v3 returned False")

        def query() -> PhaseTimes:
            stream = first["stream"]
            cuda.record(h2d_start, stream)
            if transfers:
                for binding in self.bindings:
                    for device, host, nbytes in binding["in"]:
                        cuda.copy_h2d(device, host, nbytes, binding["stream"])
            cuda.record(h2d_end, stream)
            start = clock()
            for binding, launch in zip(self.bindings, launches):
                enqueue(binding, launch)
            enqueue_s = clock() - start
            cuda.record(compute_end, stream)
            if transfers:
                for binding in self.bindings:
                    for host, device, nbytes in binding["out"]:
                        cuda.copy_d2h(host, device, nbytes, binding["stream"])
            cuda.record(d2h_end, stream)
            for binding in others:
                cuda.record(binding["done"], binding["stream"])
            cuda.wait(d2h_end)
            for binding in others:
                cuda.wait(binding["done"])
            return PhaseTimes(enqueue_ms=enqueue_s * 1e3,
                              h2d_ms=cuda.elapsed_ms(h2d_start, h2d_end) if transfers else None,
                              compute_ms=cuda.elapsed_ms(h2d_end, compute_end),
                              d2h_ms=cuda.elapsed_ms(compute_end, d2h_end) if transfers else None)

        return query

    def _graph_launcher(self, context, stream):
        """As trtexec: run once, capture one enqueue, instantiate, then launch per query; if capture
        fails, end it, clear the error and run without a graph."""
        cuda = self.cuda
        if not context.execute_async_v3(stream):
            raise RuntimeError("execute_async_v3 returned False")
        try:
            cuda.begin_capture(stream)
            ok = context.execute_async_v3(stream)
            graph = cuda.end_capture(stream)
            if not ok:
                raise RuntimeError("enqueue during capture returned False")
            self.graph_exec = cuda.instantiate(graph)
        except Exception as exc:
            cuda.clear_error()
            self.log_lines.append(f"[W] CUDA graph capture failed ({exc}); running without a graph")
            return None
        graph_exec = self.graph_exec
        return lambda: cuda.launch(graph_exec, stream)

    def outputs(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Outputs for `feeds` (of the cell's shapes) from the first context: copied into its input
        buffers, one more enqueue, copied back."""
        cuda, binding = self.cuda, self.bindings[0]
        for name in binding["in_names"]:
            view = self.buffers[f"0:{name}"]["view"]
            if tuple(feeds[name].shape) != tuple(view.shape):
                raise ValueError(f"input {name}: shape {tuple(feeds[name].shape)}, the engine runs {tuple(view.shape)}")
            view[...] = feeds[name].astype(view.dtype)
        for device, host, nbytes in binding["in"]:
            cuda.copy_h2d(device, host, nbytes, binding["stream"])
        if not binding["context"].execute_async_v3(binding["stream"]):
            raise RuntimeError("execute_async_v3 returned False")
        for host, device, nbytes in binding["out"]:
            cuda.copy_d2h(host, device, nbytes, binding["stream"])
        cuda.record(binding["done"], binding["stream"])
        cuda.wait(binding["done"])
        return {name: np.array(self.buffers[f"0:{name}"]["view"]) for name in binding["out_names"]}

    def runtime_stats(self) -> dict[str, Any]:
        """Peak device memory and the timing definition: copies as `transfers` says, a CUDA graph only
        where every capture succeeded, spin wait (farm waits on default-flag events, which is what
        trtexec's --useSpinWait does; its blocking sync uses cudaEventBlockingSync ones), streams."""
        size = getattr(self.engine, "device_memory_size_v2", None)
        stats: dict[str, Any] = {"peak_memory_bytes": int(size)} if size is not None else {}
        return stats | {"latency_includes_transfers": self.options.transfers,
                        "timing_cuda_graph": bool(self.options.cuda_graph and self.graph_used),
                        "timing_spin_wait": True, "timing_streams": self.options.streams,
                        "timing_engine_version": f"TensorRT {self.trt.__version__}" if self.trt else None}

    # --- per-layer -------------------------------------------------------------------------------

    def profile_layers(self, feeds: dict[str, np.ndarray], iterations: int) -> list[LayerRecord]:
        from farm.layers.engine import join_layers, layers_from_inspector

        trt, context, engine, cuda = self.trt, self.context, self.engine, self.cuda

        class LayerTimes(trt.IProfiler):
            def __init__(self) -> None:
                trt.IProfiler.__init__(self)
                self.times: dict[str, list[float]] = {}

            def report_layer_time(self, layer_name: str, ms: float) -> None:
                self.times.setdefault(layer_name, []).append(ms)

        profiler = LayerTimes()
        context.profiler = profiler
        context.enqueue_emits_profile = False
        done = cuda.event()
        for _ in range(iterations):
            if not context.execute_async_v3(self.stream):
                raise RuntimeError("execute_async_v3 returned False while profiling")
            cuda.record(done, self.stream)
            cuda.wait(done)
            context.report_to_profiler()
        inspector = engine.create_engine_inspector()
        inspector.execution_context = context
        infos = [json.loads(inspector.get_layer_information(i, trt.LayerInformationFormat.JSON))
                 for i in range(engine.num_layers)]
        layers = layers_from_inspector({"Layers": infos})
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

    def device_row(self) -> dict[str, Any]:
        from farm.provenance import cuda_device_row_from_runtime

        return cuda_device_row_from_runtime(self.cuda)

    def close(self) -> None:
        cuda = getattr(self, "cuda", None)
        for buffer in self.buffers.values():
            with contextlib.suppress(Exception):
                cuda.free(buffer["device"])
                cuda.free_host(buffer["host"])
        self.buffers = {}
        self.context = self.engine = self.graph_exec = None


def _major(trt) -> int:
    return int(str(trt.__version__).split(".")[0])


_NUMPY_TYPES = {"FLOAT": np.float32, "HALF": np.float16, "BF16": np.uint16, "INT8": np.int8, "INT32": np.int32,
                "INT64": np.int64, "BOOL": np.bool_, "UINT8": np.uint8, "FP8": np.uint8}


def _numpy_dtype(trt_dtype) -> np.dtype:
    """Host buffer type for a tensor (bf16 and fp8 as raw bytes of the same width)."""
    name = getattr(trt_dtype, "name", str(trt_dtype)).rsplit(".", 1)[-1]
    if name not in _NUMPY_TYPES:
        raise RuntimeError(f"farm cannot stage tensors of TensorRT type {name}")
    return np.dtype(_NUMPY_TYPES[name])


def _has_dynamic(engine, trt) -> bool:
    names = [engine.get_tensor_name(i) for i in range(engine.num_io_tensors)]
    return any(-1 in tuple(engine.get_tensor_shape(n)) for n in names
               if engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT)


def _logger(trt, lines: list[str]):
    """A trt.ILogger that keeps every message (for errors and the builder's peak memory line)."""

    class Logger(trt.ILogger):
        def __init__(self) -> None:
            trt.ILogger.__init__(self)

        def log(self, severity, msg: str) -> None:
            name = getattr(severity, "name", str(severity)).rsplit(".", 1)[-1]
            tag = {"INTERNAL_ERROR": "[F]", "ERROR": "[E]", "WARNING": "[W]"}.get(name, "[I]")
            lines.append(f"{tag} {msg}")

    return Logger()


def _peak_device_bytes(lines: list[str]) -> int | None:
    from farm.ingest.trt_files import read_log

    return read_log("\n".join(line[4:] for line in lines)).builder_peak_device_bytes


@contextlib.contextmanager
def _locked(path: Path):
    import fcntl

    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
