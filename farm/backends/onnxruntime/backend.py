"""OnnxRuntimeBackend: the session (its build), the timed query on the CPU or through CUDA, outputs
and per-layer rows (the package's docstring says how)."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import numpy as np

from farm.backends import narrow_types
from farm.backends.base import Capabilities, LoopTimedBackend, torch_profile
from farm.backends.onnxruntime import placement
from farm.backends.onnxruntime.options import CUDA_ONLY_OPTIONS, OnnxRuntimeOptions
from farm.backends.onnxruntime.profile import QUERY_RANGE, kernel_layers, layers_from_profile
from farm.errors import EngineUnsupported
from farm.models.opset import ConversionFailed, for_onnxruntime
from farm.records import BuildRequest, BuildStats, LayerRecord, QueryFn

_WARMUP_RUNS = 2  # profiled runs dropped before the counted ones



# ONNX Runtime's own words for an operator it has no kernel for (at that opset, on that provider),
# and for one of a domain it does not implement (training's ai.onnx.preview.training, a custom one)
_NO_KERNEL = re.compile(r"(?:Could not find an implementation for|Failed to find kernel for) (\w+)\((\d+)\)")
# a node no provider took: on CUDA ONNX Runtime says this (its memcpy pass meets the node) where on
# the CPU it says _NO_KERNEL's words (Mul at opset 6 in the onnx wheel's PoissonNLLLoss model)
_NO_PROVIDER = re.compile(r"Provider type for (\w+) node with name '([^']*)' is not set")
_NO_OP = re.compile(r"Fatal error: ([\w.]*):(\w+)\((-?\d+)\) is not a registered function/op")
# an operator the model's own opset does not define yet (a graph stamped with an older opset than it uses)
_NOT_AT_OPSET = re.compile(r"No Op registered for (\w+) with domain_version of (\d+)")
# StringNormalizer's locale (en_US.UTF-8 when the model names none), which the C library must have
_NO_LOCALE = re.compile(r"Failed to construct locale with name:\s*([^\s:]+)")


def _defined(op: str, domain: str) -> bool:
    """Whether ONNX itself defines `op` in `domain` (a custom domain's operator is the model's own:
    without its library the model is not runnable as given, which fails the cell)."""
    import onnx

    return onnx.defs.has(op, domain)


def _node_domain(text: str, op: str) -> str:
    """The domain of the node ONNX Runtime's error names ('In Node, ("name", Op, "domain", -1)'), or ''."""
    match = re.search(rf'\("[^"]*", {re.escape(op)}, "([^"]*)"', text)
    return match[1] if match else ""


def lacking_operator(exc: BaseException, version: str) -> str | None:
    """Why ONNX Runtime cannot run a model at all, where that is an operator ONNX defines and ONNX
    Runtime lacks, or a locale this machine lacks (the cell is unsupported, with what to do), or
    None for any other error of a session's start."""
    text, version = str(exc), f"{version} " if version else ""
    if match := _NO_LOCALE.search(text):
        return (f"the model's StringNormalizer needs the locale {match[1]}, which this machine does not have: "
                f"install it (Debian: locales-all, or locale-gen {match[1]}) or give the node a locale it has")
    if match := _NO_KERNEL.search(text):
        op, opset = match[1], match[2]
        return (f"ONNX Runtime {version}has no kernel for {op} as opset {opset} defines it: convert the model "
                "to a newer opset (onnx.version_converter.convert_version), or run it on another engine")
    if match := _NO_PROVIDER.search(text):
        node = f" (node '{match[2]}')" if match[2] else ""
        return (f"ONNX Runtime {version}placed {match[1]}{node} on none of its providers: none has a kernel for it "
                "at the model's opset; convert the model to a newer opset (onnx.version_converter.convert_version), "
                "or run it on another engine")
    if (match := _NOT_AT_OPSET.search(text)) and _defined(match[1], "") and _node_domain(text, match[1]) in ("", "ai.onnx"):
        return (f"the model uses {match[1]}, which ONNX does not define at the model's opset {match[2]} (its "
                "opset_import is older than its operators): export it again, or stamp it with an opset that defines "
                f"{match[1]}")
    if (match := _NO_OP.search(text)) and _defined(match[2], match[1]):
        domain, op = match[1] or "ai.onnx", match[2]
        return (f"ONNX Runtime {version}does not implement {op} of the domain {domain}: export the model "
                "without it, or run it on an engine that has it")
    return None



class OnnxRuntimeBackend(LoopTimedBackend):
    name = "onnxruntime"
    Options = OnnxRuntimeOptions
    # with its default options (the CPU); on CUDA `unsupported_reason` adds tf32 (see there)
    capabilities = Capabilities(precisions=frozenset({"fp32", "fp16", "int8"}))
    libraries = ("onnxruntime", "onnx")

    @classmethod
    def build_cost(cls, options: dict[str, Any]) -> float:
        return 6.0 if str(options.get("provider", "")).lower().startswith("tensorrt") else 1.0  # an engine build

    @classmethod
    def transform_note(cls, options: dict[str, Any], transformed: Any) -> str | None:
        """How the CPU execution provider runs the transformed model (fp32 kernels between Casts...)."""
        return transformed.onnxruntime_cpu if options.get("device", "cpu") == "cpu" else None

    def __init__(self, options: dict[str, Any]) -> None:
        super().__init__(options)
        self.session = None
        self.model_path: Path | None = None
        self.work_dir: Path | None = None
        self.optimized = None
        self.precision = "fp32"
        self.conversion_refused: str | None = None  # why a model older than opset 7 runs as given (farm.models.opset)
        self.memory = None  # CUDA: farm.backends.onnxruntime.cuda.DeviceMemory
        self.bound = None  # CUDA: farm.backends.onnxruntime.cuda.BoundSession

    @property
    def cuda(self) -> bool:
        return self.options.device == "cuda"

    @classmethod
    def resolve_options(cls, options: dict[str, Any]) -> dict[str, Any]:
        if options.get("device") != "auto":
            return options
        from farm.cuda import visible_gpu_count

        return options | {"device": "cuda" if visible_gpu_count() else "cpu"}

    @classmethod
    def device_kind(cls, options: dict[str, Any]) -> str:
        return options.get("device", "cpu")

    @classmethod
    def unsupported_reason(cls, precision: str, options: dict[str, Any]) -> str | None:
        if options.get("device", "cpu") == "cpu":
            wrong = [k for k, default in CUDA_ONLY_OPTIONS.items() if options.get(k, default) != default]
            if wrong:
                return f"onnxruntime: {', '.join(wrong)} apply to device = \"cuda\" only"
            if precision in cls.capabilities.precisions:
                return None
            if precision == "tf32":
                return "onnxruntime: tf32 is a CUDA tensor-core mode; device = \"cpu\" cannot run it"
            return f"onnxruntime (CPU) runs fp32, fp16 and int8; {precision} is not supported"
        if options.get("provider", "default") == "tensorrt":
            if precision == "fp32":
                return ("onnxruntime's TensorRT EP builds with TensorRT's TF32 on and has no option to turn it "
                        "off: run its fp32 as tf32 (or fp32 on the CUDA EP)")
            if precision in ("tf32", "fp16", "int8"):
                return None
            return f"onnxruntime's TensorRT EP runs tf32, fp16 and int8 here; {precision} is not supported"
        if precision in ("fp32", "tf32", "fp16", "int8"):  # int8: the Q/DQ model, as far as its kernels go
            return None
        return f"onnxruntime's CUDA EP runs fp32, tf32, fp16 and int8 (Q/DQ) here; {precision} is not supported"

    def unavailable_reason(self) -> str | None:
        try:
            import onnxruntime as ort
        except ImportError as exc:
            return f"onnxruntime is not importable ({exc}): pip install onnxruntime"
        if not self.cuda:
            return None
        from farm.backends.onnxruntime import cuda as ort_cuda

        if ort_cuda.CUDA_EP not in ort.get_available_providers():
            return (f"this onnxruntime ({ort.__version__}) has no CUDA execution provider: "
                    f"pip uninstall -y onnxruntime && {ort_cuda.GPU_EXTRA} (onnxruntime-gpu)")
        try:
            gpus = ort_cuda.visible_gpus()
        except ImportError as exc:
            return f"onnxruntime on CUDA needs cuda-python or torch for its copies and events ({exc}): " \
                   f"{ort_cuda.GPU_EXTRA}"
        if gpus == 0:
            return "no CUDA GPU is visible here: run on a GPU node, or set backends.onnxruntime.device = \"cpu\""
        if self.options.provider == "tensorrt":
            return ort_cuda.tensorrt_ep_reason()
        return None

    # --- build --------------------------------------------------------------------------------

    def _providers(self, cuda_graph: bool | None = None) -> list:
        if not self.cuda:
            return ["CPUExecutionProvider"]
        from farm.backends.onnxruntime.cuda import provider_list

        options = self.options if cuda_graph is None else self.options.model_copy(update={"cuda_graph": cuda_graph})
        return provider_list(options, self.precision, self.memory.stream_handle, self.work_dir)

    def _new_session(self, opts, cuda_graph: bool | None = None):
        import onnxruntime as ort

        try:
            session = ort.InferenceSession(str(self.model_path), opts, providers=self._providers(cuda_graph))
        except Exception as exc:
            if cuda_graph is not False and self.options.cuda_graph:
                from farm.backends.onnxruntime.cuda import NOT_PARTITIONED, raise_if_uncapturable

                raise_if_uncapturable(exc, self._on_cpu_without_graph(opts) if NOT_PARTITIONED in str(exc) else None)
            reason = lacking_operator(exc, ort.__version__)
            if reason:
                raise EngineUnsupported("; ".join(filter(None, [reason, self.conversion_refused]))) from exc
            raise
        if self.cuda:
            wanted = self._providers()[0][0]
            if wanted not in session.get_providers():  # ONNX Runtime falls back silently: not here
                raise RuntimeError(f"onnxruntime did not start {wanted} (the session runs on "
                                   f"{', '.join(session.get_providers())}): see ONNX Runtime's log above")
        return session

    def _on_cpu_without_graph(self, opts) -> str | None:
        """'2 of 318 nodes (QuantizeLinear ×2)': what the CPU provider takes in a session of the
        model without CUDA graphs, for the reason a capture was refused; None where it cannot say."""
        try:
            placed = placement.assignment(self._new_session(opts, cuda_graph=False))
        except Exception:  # noqa: BLE001 - the refusal is said without it
            return None
        facts = placement.build_facts(placed, device=True) if placed else {}
        if not facts.get("cpu_provider_nodes"):
            return None
        total = sum(sum(ops.values()) for ops in placed.values())
        return f"{facts['cpu_provider_nodes']} of {total} nodes ({facts['cpu_provider_ops']})"

    def build_impl(self, request: BuildRequest, feeds: dict[str, np.ndarray]) -> BuildStats:
        import onnx

        self.model_path, self.work_dir, self.precision = request.model_path, request.work_dir, request.precision
        if why := narrow_types.refusal(feeds, "ONNX Runtime", "farm binds numpy-typed device buffers on ONNX "
                                       "Runtime's CUDA path; run it with device = \"cpu\"" if self.cuda else None):
            raise EngineUnsupported(why)
        try:
            self.model_path, converted = for_onnxruntime(self.model_path, request.cache_dir or self.work_dir)
        except ConversionFailed as exc:  # the file as given, which ONNX Runtime may still run
            converted, self.conversion_refused = None, str(exc)
        optimized_path = self.work_dir / "optimized.onnx"
        opts = self.options.session_options()
        if self.options.provider == "default":  # a TensorRT EP session holds compiled nodes: nothing to save
            opts.optimized_model_filepath = str(optimized_path)
        recorded = placement.record(opts)
        if self.cuda:
            self._start_cuda()
        start = time.perf_counter()
        self.session = self._new_session(opts)
        placed = placement.assignment(self.session) if recorded else None
        if self.cuda:
            from farm.backends.onnxruntime.cuda import device_io_reason

            reason = (placed and placement.all_on_cpu_reason(placed, self._providers()[0][0])) or \
                device_io_reason(self.session.get_inputs(), self.session.get_outputs())
            if reason is not None:
                raise EngineUnsupported(reason)
            try:
                self._bind(feeds)
            except Exception as exc:
                if self.options.cuda_graph:
                    from farm.backends.onnxruntime.cuda import raise_if_uncapturable

                    raise_if_uncapturable(exc)
                raise
        build_s = time.perf_counter() - start
        original = onnx.load(str(self.model_path), load_external_data=False)
        saved = optimized_path.exists()
        self.optimized = onnx.load(str(optimized_path), load_external_data=False) if saved else None
        # kept: the per-layer run adds the CPU provider's time per run to it (cpu_provider_node_ms)
        ran_as = None
        if self.cuda and saved and self.precision == "int8":  # the CPU EP's own: the transform's check says it
            from farm.precision.checks import census, quantized_run_note

            ran_as = quantized_run_note("ONNX Runtime CUDA", census(original).quantized_nodes, self.optimized)
        self.build_stats = BuildStats(
            build_s=build_s,
            artifact_bytes=optimized_path.stat().st_size if saved else None,
            layers_before_fusion=len(original.graph.node),
            layers_after_fusion=len(self.optimized.graph.node) if saved else None,
            transform_summary="; ".join(filter(None, [converted, ran_as])) or None,
            **(placement.build_facts(placed, self.cuda) if placed else {}),
        )
        return self.build_stats

    def _start_cuda(self) -> None:
        import onnxruntime as ort

        from farm.backends.onnxruntime.cuda import cuda_memory

        if hasattr(ort, "preload_dlls"):  # CUDA and cuDNN from their pip packages, where installed
            ort.preload_dlls()
        self.memory = cuda_memory()

    def _bind(self, feeds: dict[str, np.ndarray]) -> None:
        """Bind device inputs and outputs; with CUDA graphs, run until ONNX Runtime has captured."""
        import onnxruntime as ort

        from farm.backends.onnxruntime.cuda import GRAPH_ID, BoundSession

        run_options = ort.RunOptions()
        run_options.add_run_config_entry("disable_synchronize_execution_providers", "1")
        first = None
        if self.options.cuda_graph and self.options.provider == "default":
            first = ort.RunOptions()  # the run that sizes the outputs is never captured
            first.add_run_config_entry("disable_synchronize_execution_providers", "1")
            first.add_run_config_entry("gpu_graph_id", "-1")
            run_options.add_run_config_entry("gpu_graph_id", GRAPH_ID)
        self.bound = BoundSession(self.session, self.memory, feeds, run_options, first)
        for _ in range(3 if self.options.cuda_graph else 1):  # regular runs, then the capture (CUDA EP: 2 + 1)
            self.bound.run()
        self.memory.synchronize()

    # --- timing -------------------------------------------------------------------------------

    def query_fn(self, feeds: dict[str, np.ndarray]) -> QueryFn:
        if self.cuda:
            return self.bound.query_fn(self.options.transfers)
        run, feeds = self.session.run, narrow_types.ort_feeds(feeds)  # typed once, outside the timed loop

        def query() -> None:
            run(None, feeds)

        return query

    def outputs_impl(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self.cuda:
            return self.bound.outputs_for(feeds)
        names = [o.name for o in self.session.get_outputs()]
        return dict(zip(names, self.session.run(names, narrow_types.ort_feeds(feeds))))

    def runtime_stats(self) -> dict[str, Any]:
        """What the latency includes: host inputs to host outputs on the CPU; on CUDA the copies
        when `transfers`, the graph when `cuda_graph`; CUDA events are waited on by polling."""
        if not self.cuda:
            return {"latency_includes_transfers": True, "timing_cuda_graph": False}
        return {"latency_includes_transfers": self.options.transfers, "timing_cuda_graph": self.options.cuda_graph,
                "timing_spin_wait": True}

    # --- per-layer ------------------------------------------------------------------------------

    def layers_impl(self, feeds: dict[str, np.ndarray], iterations: int) -> list[LayerRecord]:
        """CPU: one row per node from ONNX Runtime's profile. CUDA: one row per GPU kernel from the
        CUPTI trace (a node's profile event times only its launch), in a session without CUDA graphs;
        no rows where PyTorch's profiler is not installed."""
        opts = self.options.session_options()
        opts.enable_profiling = True
        opts.profile_file_prefix = str(self.work_dir / "ort_profile")
        session = self._new_session(opts, cuda_graph=False)
        if self.cuda:
            return self._kernel_rows(session, feeds, iterations)
        feeds = narrow_types.ort_feeds(feeds)
        for _ in range(_WARMUP_RUNS + iterations):
            session.run(None, feeds)
        return layers_from_profile(self._read_profile(session), self.optimized, _WARMUP_RUNS)

    def _kernel_rows(self, session, feeds: dict[str, np.ndarray], iterations: int) -> list[LayerRecord]:
        for _ in range(_WARMUP_RUNS):
            session.run(None, feeds)
        try:
            import torch
        except ImportError:
            self._cpu_time(self._read_profile(session))
            return []
        with torch_profile(cuda=True) as prof:
            for _ in range(iterations):
                with torch.profiler.record_function(QUERY_RANGE):
                    session.run(None, feeds)  # synchronizes at its end: the run's kernels lie in its range
        self._cpu_time(self._read_profile(session))
        return kernel_layers(prof, self._providers()[0][0], iterations)

    def _cpu_time(self, events: list[dict[str, Any]]) -> None:
        """The CPU provider's nodes' time per run of a device session, on its build row (a node's
        event on the CPU times its work; on CUDA only its launch, so no share of the two is taken)."""
        if self.build_stats.cpu_provider_nodes:
            self.build_stats.cpu_provider_node_ms = placement.cpu_node_ms(events)

    def _read_profile(self, session) -> list[dict[str, Any]]:
        profile_path = Path(session.end_profiling())
        try:
            return json.loads(profile_path.read_text())
        finally:
            profile_path.unlink(missing_ok=True)

    def device_row(self) -> dict[str, Any]:
        if not self.cuda:
            return super().device_row()
        from farm.backends.onnxruntime.cuda import CudartMemory
        from farm.provenance import cuda_device_row, cuda_device_row_from_runtime

        if isinstance(self.memory, CudartMemory):
            return cuda_device_row_from_runtime(self.memory.runtime, 0)
        return cuda_device_row(0)

    def close_impl(self) -> None:
        if self.bound is not None:
            self.bound.close()
        self.session = self.bound = self.optimized = None
        if self.memory is not None:
            self.memory.close()
            self.memory = None
