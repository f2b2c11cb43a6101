"""The TensorRT backend: builds with farm.backends.tensorrt.engine_build, runs with .runner."""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from farm.backends.base import Capabilities, LoopTimedBackend
from farm.backends.tensorrt import engine_build, runner
from farm.backends.tensorrt.options import INSTALL_HINT, PRECISIONS, BuildsTensorRTEngines, TensorRTOptions
from farm.records import BuildRequest, BuildStats, LayerRecord, QueryFn


class TensorRTBackend(BuildsTensorRTEngines, LoopTimedBackend):
    name = "tensorrt"
    Options = TensorRTOptions
    capabilities = Capabilities(precisions=PRECISIONS, profiles=True)
    options: TensorRTOptions

    def __init__(self, options: dict[str, Any]) -> None:
        super().__init__(options)
        self.trt: Any = None
        self.cuda: Any = None
        self.engine: Any = None
        self.bindings: list[runner.Binding] = []  # one per stream, made on first use
        self.log_lines: list[str] = []
        self.graph_used = False  # every stream's enqueue captured as a CUDA graph (timing_cuda_graph)

    def unavailable_reason(self) -> str | None:
        try:
            import tensorrt as trt
        except ImportError:
            return f"TensorRT is not installed here: {INSTALL_HINT}"
        try:
            from farm.cuda import CudaRuntime

            if CudaRuntime().device_count() < 1:
                return "no CUDA GPU is visible: TensorRT needs an NVIDIA GPU"
        except Exception as exc:  # noqa: BLE001 - no cuda-python, no driver
            return f"CUDA is not usable here ({type(exc).__name__}: {exc}); pip install cuda-python on a GPU machine"
        if engine_build.major_version(trt) < 10:
            return f"TensorRT {trt.__version__} is too old: farm drives TensorRT 10 and 11"
        return None

    def build_impl(self, request: BuildRequest, feeds: dict[str, np.ndarray]) -> BuildStats:
        import tensorrt as trt

        from farm.cuda import CudaRuntime
        from farm.precision.tensorrt_qdq import tensorrt_request
        from farm.trt_output import LogFactsFromTrtexecLog

        request, qdq_note = tensorrt_request(request)  # int8/fp8: a Q/DQ model its parser takes
        self.trt, self.cuda = trt, CudaRuntime()
        logger = engine_build.make_logger(trt, self.log_lines)
        start = time.perf_counter()
        build = engine_build.EngineFromOnnx(trt, logger, self.log_lines, request, self.options, self._device_name())
        plan, layers_before, cache_hits = build()
        build_s = time.perf_counter() - start
        self.engine = trt.Runtime(logger).deserialize_cuda_engine(plan)
        if self.engine is None:
            raise RuntimeError("TensorRT could not deserialize the engine it built: "
                               + engine_build.last_errors(self.log_lines))
        peak = LogFactsFromTrtexecLog("\n".join(line[4:] for line in self.log_lines)).builder_peak_device_bytes
        return BuildStats(build_s=build_s, artifact_bytes=len(plan), cache_hits=cache_hits,
                          builder_peak_memory_bytes=peak, layers_before_fusion=layers_before,
                          layers_after_fusion=self.engine.num_layers, transform_summary=qdq_note)

    def _bound(self, feeds: dict[str, np.ndarray]) -> list[runner.Binding]:
        """A context per stream (trtexec's --infStreams), made once per backend, whoever asks first."""
        if not self.bindings:
            request = self.request
            profile = engine_build.profile_index(request, self.options) if request.profile is not None else None
            self.bindings = [runner.bind(self.trt, self.cuda, self.engine, feeds, profile)
                             for _ in range(self.options.streams)]
        return self.bindings

    @property
    def inferences_per_query(self) -> int:
        return self.options.streams

    def query_fn(self, feeds: dict[str, np.ndarray]) -> QueryFn:
        bindings = self._bound(feeds)
        launches = [runner.graph_launcher(self.cuda, b, self.log_lines) if self.options.cuda_graph else None
                    for b in bindings]
        self.graph_used = all(launch is not None for launch in launches)  # a failed capture runs without
        return runner.timed_query(self.cuda, bindings, launches, self.options.transfers)

    def outputs_impl(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Outputs for `feeds` (of the cell's shapes) from the first context."""
        return runner.run_once(self.cuda, self._bound(feeds)[0], feeds)

    def layers_impl(self, feeds: dict[str, np.ndarray], iterations: int) -> list[LayerRecord]:
        binding = self._bound(feeds)[0]
        return runner.profile_layers(self.trt, self.cuda, self.engine, binding, iterations)

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

    def _device_name(self) -> str:
        return self.device_row()["name"]

    def device_row(self) -> dict[str, Any]:
        from farm.provenance import cuda_device_row_from_runtime

        return cuda_device_row_from_runtime(self.cuda)

    def close_impl(self) -> None:
        if self.cuda is not None:
            runner.release(self.cuda, self.bindings)
        self.bindings = []
        self.engine = None
