"""A TensorRT engine from an ONNX file, for one BuildRequest (after Polygraphy's EngineFromOnnx).

ONNX parser (errors surfaced per node) -> network (strongly typed: precision comes from the ONNX
file; on 10.x builder precision flags are an opt-in) -> optimization profiles from the request's
shape ranges -> builder options -> timing cache per GPU and TensorRT version, merged back after
each build -> engine cache keyed by everything that changes the engine.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
from pathlib import Path
from typing import Any

from farm.backends.tensorrt.options import TensorRTOptions
from farm.files import write_atomic
from farm.records import BuildRequest, ProfileShapes

# Names TensorRT 11 removed (weakly typed precision flags, EXPLICIT_BATCH, three tactic sources):
# farm reaches them only on 10.x (behind `major_version` or hasattr). tests/test_tensorrt_bindings.py
# holds every other name farm uses against both versions' real bindings.
TENSORRT_10_ONLY = frozenset({"FP16", "BF16", "INT8", "FP8", "OBEY_PRECISION_CONSTRAINTS", "EXPLICIT_BATCH",
                              "CUBLAS", "CUBLAS_LT", "CUDNN"})


def major_version(trt: Any) -> int:
    return int(str(trt.__version__).split(".")[0])


def engine_profiles(request: BuildRequest, options: TensorRTOptions) -> list[ProfileShapes | None]:
    """The profiles the engine holds: the cell's, or every swept one (`profiles_in_engine`)."""
    if options.profiles_in_engine == "all" and request.all_profiles:
        return list(request.all_profiles)
    return [request.profile]


def profile_index(request: BuildRequest, options: TensorRTOptions) -> int:
    """Which of the engine's profiles the cell runs."""
    profiles = engine_profiles(request, options)
    return profiles.index(request.profile) if request.profile in profiles else 0


class EngineFromOnnx:
    """Builds (or reads from the engine cache) the serialized engine for `request`."""

    def __init__(self, trt: Any, logger: Any, log_lines: list[str], request: BuildRequest,
                 options: TensorRTOptions, device_name: str) -> None:
        self.trt, self.logger, self.log_lines = trt, logger, log_lines
        self.request, self.options, self.device_name = request, options, device_name
        self.major = major_version(trt)

    def __call__(self) -> tuple[bytes, int | None, int]:
        """(serialized engine, layers before fusion (None from the cache), cache hits)."""
        engine_path = self.engine_cache_path()
        if engine_path is not None and engine_path.is_file():
            return engine_path.read_bytes(), None, 1
        plan, layers_before = self.build_plan()
        if engine_path is not None:
            write_atomic(engine_path, lambda tmp: tmp.write_bytes(plan), make_parents=True)
        return plan, layers_before, 0

    def build_plan(self) -> tuple[bytes, int]:
        trt, logger = self.trt, self.logger
        builder = trt.Builder(logger)
        flags = 0
        if self.major == 10 and not self.options.precision_flags:
            flags = 1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED)
        network = builder.create_network(flags)
        parser = trt.OnnxParser(network, logger)
        if not parser.parse_from_file(str(self.request.model_path)):
            errors = [str(parser.get_error(i)) for i in range(parser.num_errors)]
            raise RuntimeError("TensorRT's ONNX parser rejected the model: " + " | ".join(errors))
        config = builder.create_builder_config()
        self.configure(config)
        self.add_profiles(builder, config)
        timing_cache = self.load_timing_cache(config)
        plan = builder.build_serialized_network(network, config)
        if plan is None:
            raise RuntimeError("TensorRT could not build the engine: " + last_errors(self.log_lines))
        if timing_cache is not None:
            self.save_timing_cache(config, timing_cache)
        return bytes(plan), network.num_layers

    def configure(self, config: Any) -> None:
        trt, options, precision = self.trt, self.options, self.request.precision
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

    def add_profiles(self, builder: Any, config: Any) -> None:
        """An optimization profile per engine profile (the cell's own shapes when none was swept),
        where some input is dynamic."""
        request = self.request
        for swept in engine_profiles(request, self.options):
            profile = builder.create_optimization_profile()
            for name, shape in request.input_shapes.items():
                low, opt, high = swept.shapes[name] if swept is not None else (shape, shape, shape)
                profile.set_shape(name, list(low), list(opt), list(high))
            if request.dynamic:
                config.add_optimization_profile(profile)

    def load_timing_cache(self, config: Any) -> Any:
        if not self.options.timing_cache or self.request.cache_dir is None:
            return None
        path = self.timing_cache_path()
        blob = path.read_bytes() if path.is_file() else b""
        cache = config.create_timing_cache(blob)
        config.set_timing_cache(cache, ignore_mismatch=False)
        return cache

    def save_timing_cache(self, config: Any, cache: Any) -> None:
        """Merge this build's cache into the shared file: other actors may have added to it."""
        path = self.timing_cache_path()
        with locked(path.with_suffix(".lock")):
            if path.is_file():
                cache.combine(config.create_timing_cache(path.read_bytes()), False)
            write_atomic(path, bytes(cache.serialize()), make_parents=True)

    def timing_cache_path(self) -> Path:
        device = re.sub(r"[^A-Za-z0-9]+", "-", self.device_name)
        return self.request.cache_dir / "tensorrt" / f"timing-{device}-trt{self.trt.__version__}.cache"

    def engine_cache_path(self) -> Path | None:
        """Engines are not portable across GPUs or TensorRT versions: both are in the key."""
        request = self.request
        if not self.options.engine_cache or request.cache_dir is None:
            return None
        key = json.dumps({"model": request.model_sha256, "precision": request.precision,
                          "shapes": request.input_shapes,
                          "profiles": [p.shapes if p else None for p in engine_profiles(request, self.options)],
                          "options": {k: v for k, v in self.options.model_dump().items()
                                      if k not in ("cuda_graph", "transfers", "engine_cache")},
                          "device": self.device_name, "tensorrt": self.trt.__version__}, sort_keys=True, default=str)
        return request.cache_dir / "tensorrt" / "engines" / f"{hashlib.sha256(key.encode()).hexdigest()[:24]}.plan"


def last_errors(log_lines: list[str]) -> str:
    errors = [line for line in log_lines if line.startswith(("[E]", "[F]"))]
    return " | ".join(errors[-3:]) or "no error message from TensorRT"


def make_logger(trt: Any, lines: list[str]) -> Any:
    """A trt.ILogger that keeps every message (for errors and the builder's peak memory line)."""

    class Logger(trt.ILogger):
        def __init__(self) -> None:
            trt.ILogger.__init__(self)

        def log(self, severity, msg: str) -> None:
            name = getattr(severity, "name", str(severity)).rsplit(".", 1)[-1]
            tag = {"INTERNAL_ERROR": "[F]", "ERROR": "[E]", "WARNING": "[W]"}.get(name, "[I]")
            lines.append(f"{tag} {msg}")

    return Logger()


@contextlib.contextmanager
def locked(path: Path):
    import fcntl

    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
