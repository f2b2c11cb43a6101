"""TorchBackend: build (the module, its mode, its precision), the timed query, outputs and per-layer
rows (the package's docstring says how)."""

from __future__ import annotations

import collections
import gc
import threading
import time
from typing import Any

import numpy as np

from farm.backends import narrow_types
from farm.backends.base import Capabilities, LoopTimedBackend, torch_profile
from farm.backends.torch.missing_kernels import quantized_for_the_cpu, unsupported_kernel
from farm.backends.torch.options import TorchOptions, set_cpu_threads
from farm.backends.torch.profiler_rows import QUERY_RANGE, device_time_us, kernel_records, node_shapes
from farm.backends.torch.quantize import QUANTIZED, compute_dtype, quantize
from farm.backends.torch.quantize import unsupported as quantized_unsupported
from farm.errors import EngineUnsupported, first_line
from farm.layers.coverage import GRAPH_OP
from farm.models.native import has_conv_4d, torch_module
from farm.records import BuildRequest, BuildStats, LayerRecord, PhaseTimes, QueryFn


def inductor_counts(before: dict[str, int] | None = None) -> collections.Counter:
    """torch.compile's inductor counters (graphs from its cache, pattern rewrites), less `before`."""
    from torch._dynamo.utils import counters

    now = collections.Counter(counters["inductor"])
    now.subtract(before or {})
    return now


def lowering_note(compiled: collections.Counter, cuda: bool) -> str | None:
    """What the build row says of a compile that turned int8 weight-only products into
    aten._weight_int8pack_mm (inductor's pattern for bf16 activations by int8 weights), or None.
    The pattern pass counts each product it rewrites (on torch 2.13 also for a graph then found in
    inductor's cache)."""
    rewritten = compiled["woq_matcher_count"]
    if not rewritten:
        return None
    text = f"torch.compile ran {rewritten} int8 weight-only products as aten._weight_int8pack_mm"
    if cuda:  # on an H200 (docs/precision.md) eager ran 36-41 times its rate at 4,096 rows a product
        text += (" (on CUDA a float32 kernel without tensor cores, made for the few rows of token-by-token "
                 "decoding: with many rows a product, eager mode or int8 dynamic runs far faster)")
    return text


class TorchBackend(LoopTimedBackend):
    name = "torch"
    Options = TorchOptions
    # converts the module (weights and activations) itself: no transformed ONNX
    capabilities = Capabilities(precisions=frozenset({"fp32", "tf32", "fp16", "bf16", "int8", "fp8"}), onnx_precision=False,
                                native_modules=True)
    libraries = ("torch",)

    @classmethod
    def build_cost(cls, options: dict[str, Any]) -> float:
        """torch.compile's build (x4, x3 more when it autotunes), a CUDA graph's capture (x1.5)."""
        autotune = options.get("mode") == "compile" and str(options.get("compile_mode")).startswith("max-autotune")
        return {"compile": 4.0, "cudagraphs": 1.5}.get(str(options.get("mode")), 1.0) * (3.0 if autotune else 1.0)

    def __init__(self, options: dict[str, Any]) -> None:
        super().__init__(options)
        self.module = None
        self.run = None  # the callable a query launches (module, compiled module or graph replay)
        self.input_names: list[str] = []
        self.device_inputs: list = []
        self.graph_outputs = None
        self.precision = "fp32"
        self.channels_last = False
        self.native = False  # the model's own nn.Module (a PyTorch source), not the ONNX interpreter

    @classmethod
    def device_kind(cls, options: dict[str, Any]) -> str:
        return options.get("device", "cuda")

    @classmethod
    def unsupported_reason(cls, precision: str, options: dict[str, Any]) -> str | None:
        reason = super().unsupported_reason(precision, options)
        if reason:
            return reason
        if options.get("device") == "cpu":
            if precision == "fp8":
                return quantized_unsupported(precision, "cpu")
            if precision == "tf32":
                return "tf32 is a CUDA tensor-core mode; the torch backend on device = \"cpu\" cannot run it"
            if options.get("mode") == "cudagraphs":
                return "CUDA graphs need device = \"cuda\""
        return None

    def unavailable_reason(self) -> str | None:
        try:
            import torch
        except ImportError as exc:
            return f"torch is not importable ({exc}): pip install torch"
        if self.options.device == "cuda" and not torch.cuda.is_available():
            return ("no CUDA GPU is visible to PyTorch here: run on a GPU node, or set "
                    "backends.torch.device = \"cpu\"")
        return None

    # --- build --------------------------------------------------------------------------------

    def build_impl(self, request: BuildRequest, feeds: dict[str, np.ndarray]) -> BuildStats:
        try:
            return self._build(request, feeds)
        except EngineUnsupported:
            raise
        except Exception as exc:
            reason = unsupported_kernel(exc, request.precision, self.options.device)
            if reason:  # PyTorch has no kernel for this device or dtype: not an accident of the cell
                raise EngineUnsupported(reason) from exc
            raise

    def _build(self, request: BuildRequest, feeds: dict[str, np.ndarray]) -> BuildStats:
        import torch

        precision, model_path = request.precision, request.model_path
        self.precision = precision
        self.dtype = getattr(torch, compute_dtype(precision, self.options.device))
        self.dev = torch.device("cuda" if self.options.device == "cuda" else "cpu")
        capability = torch.cuda.get_device_capability() if self.dev.type == "cuda" else None
        if reason := quantized_unsupported(precision, self.options.device, capability) or \
                narrow_types.refusal(feeds, "PyTorch"):  # int8, fp8: torchao; a packed 4-bit input
            raise EngineUnsupported(reason)
        cuda = self.dev.type == "cuda"
        if cuda:
            # TF32 only where asked: fp32 cells are true FP32.
            torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
            torch.backends.cudnn.allow_tf32 = precision == "tf32"
            torch.backends.cudnn.benchmark = self.options.cudnn_benchmark
            torch.cuda.reset_peak_memory_stats()
            self.stream = torch.cuda.Stream()
        else:
            set_cpu_threads(torch, self.options.threads, self.options.interop_threads)
        start = time.perf_counter()
        module, stats, self.native = torch_module(model_path, self.dtype, request.cache_dir or request.work_dir)
        if cuda and (reason := quantized_for_the_cpu(module)):
            raise EngineUnsupported(reason)
        module = module.to(self.dev).to(self.dtype).eval()
        if precision in QUANTIZED:
            summary, stats.transform_tool, stats.transform_layers = quantize(
                module, precision, self.options.int8, self.native)
            stats.transform_summary = "; ".join(filter(None, [stats.transform_summary, summary]))
        self.channels_last = self.memory_format(module) == "channels_last"
        if self.channels_last:  # 4-D weights too, so convolutions run NHWC kernels without conversions
            module = module.to(memory_format=torch.channels_last)
        torch.set_grad_enabled(False)
        self.module = module
        self.input_names = module.input_names
        self.device_inputs = [self._to_device(feeds[n]) for n in self.input_names]
        if self.native:
            # One eager call, outside the build's time: the names of the module's output tensors at
            # this cell's shapes (a detector returns one dict per image), and any kernel PyTorch
            # lacks here met now, while the cell can still say `unsupported`.
            described = time.perf_counter()
            module.output_names, dropped = module.describe(*self.device_inputs)
            stats.transform_summary = "; ".join([stats.transform_summary or "", *dropped])[:1000]
            if cuda:
                torch.cuda.synchronize()
            start += time.perf_counter() - described
        if self.options.mode == "eager":
            self.run = module
        elif self.options.mode == "compile":
            self._compile(torch, module, stats)
        else:
            self.run = self._capture_graph(torch)
        if cuda:
            torch.cuda.synchronize()
        stats.build_s = time.perf_counter() - start
        return stats

    def _to_device(self, array: np.ndarray):
        import torch

        # a copy: on CPU the tensor would otherwise share the caller's array, and outputs() writes
        # later inputs into the bound tensors
        tensor = narrow_types.torch_tensor(np.array(array, order="C"))  # bfloat16, float8: PyTorch's own
        if tensor.is_floating_point():
            tensor = tensor.to(self.dtype)
        tensor = tensor.to(self.dev)
        if self.channels_last and tensor.dim() == 4 and tensor.is_floating_point():
            tensor = tensor.contiguous(memory_format=torch.channels_last)  # pinned copies keep it (.cpu())
        return tensor

    def memory_format(self, module) -> str:
        """The layout this cell runs: `auto` is channels_last on CUDA for a model whose
        convolutions take 4-D inputs (their weights are 4-D), contiguous otherwise."""
        wanted = self.options.memory_format
        if wanted != "auto":
            return wanted
        if self.native:
            conv_4d = has_conv_4d(module)
        else:
            conv_4d = any(op == "Conv" and len(ins) > 1 and len(module.weight_shapes.get(ins[1], ())) == 4
                          for _, op, ins, _, _ in module.nodes)
        return "channels_last" if conv_4d and self.dev.type == "cuda" else "contiguous"

    def _compile(self, torch, module, stats: BuildStats) -> None:
        """torch.compile the module and call it once (the compile happens then: part of the build);
        the build row counts the graphs inductor took from its cache and says what it lowered."""
        # Every cell compiles the same forward code object; without a reset, dynamo's per-code
        # cache limit would quietly send later cells of this worker back to eager.
        torch._dynamo.reset()
        self.run = torch.compile(module, mode=self.options.compile_mode, dynamic=False)
        before = inductor_counts()
        self._call_once()
        compiled = inductor_counts(before)
        stats.cache_hits = compiled["fxgraph_cache_hit"]
        note = lowering_note(compiled, self.dev.type == "cuda")
        stats.transform_summary = "; ".join(filter(None, [stats.transform_summary, note])) or None

    def _call_once(self) -> None:
        import torch

        if self.dev.type == "cuda":
            with torch.cuda.stream(self.stream):
                self.run(*self.device_inputs)
            self.stream.synchronize()
        else:
            self.run(*self.device_inputs)

    def _capture_graph(self, torch):
        """Capture one forward pass in a CUDA graph; a query then replays it on static buffers."""
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):  # warm up outside the capture, as PyTorch's docs ask
                self.module(*self.device_inputs)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph):
                self.graph_outputs = self.module(*self.device_inputs)
        except Exception as exc:  # a limit of CUDA graphs for this model: the eager cell runs it
            from farm.errors import EngineUnsupported

            what = ("the module" if self.native else "farm's ONNX interpreter (shape arithmetic, control flow)") + \
                (" reads or copies host values during a query" if self.precision not in QUANTIZED else
                 f" at {self.precision} runs torchao's quantization kernels, which did not capture")
            raise EngineUnsupported(f"PyTorch cannot capture this model in a CUDA graph ({type(exc).__name__}: "
                                    f"{first_line(exc)[:200]}): {what}; run it with mode = \"eager\" or \"compile\"") from exc
        self.graph = graph

        def replay(*_inputs):  # inputs are the captured static buffers; the query copies into them
            graph.replay()
            return self.graph_outputs

        return replay

    # --- timing -------------------------------------------------------------------------------

    def query_fn(self, feeds: dict[str, np.ndarray]) -> QueryFn:
        # The build's garbage collected now, and what is alive frozen, so that a collection during
        # the timed loop walks only what the queries allocate (undone in close).
        gc.collect()
        gc.freeze()
        if self.dev.type != "cuda":
            run, inputs = self.run, self.device_inputs

            def cpu_query() -> None:
                run(*inputs)

            return cpu_query
        return self._cuda_query(feeds)

    def _cuda_query(self, feeds: dict[str, np.ndarray]) -> QueryFn:
        import torch

        from farm.device_timer import DeviceTimer, TorchEvents

        stream = self.stream
        torch.cuda.set_stream(stream)  # eager and compiled launches go to the current stream
        run, device_inputs = self.run, self.device_inputs
        host_inputs = [self._to_device(feeds[n]).cpu().pin_memory() for n in self.input_names]
        outputs = run(*device_inputs)
        stream.synchronize()
        host_outputs = [o.cpu().pin_memory() for o in outputs]
        transfers = self.options.transfers
        timer = DeviceTimer(TorchEvents(), stream, transfers)
        pairs_in = list(zip(device_inputs, host_inputs)) if transfers else []

        # launches and copies go to the calling thread's current stream: a query called from another
        # thread (a serving batcher's) makes this one current there first (thread-local, as the
        # current stream is: a thread's id is reused once it ends)
        bound = threading.local()
        bound.stream = True

        def query() -> PhaseTimes:
            if not getattr(bound, "stream", False):
                torch.cuda.set_stream(stream)
                bound.stream = True
            timer.inputs_start()
            for device, host in pairs_in:
                device.copy_(host, non_blocking=True)
            timer.inputs_done()
            outs = timer.enqueue(lambda: run(*device_inputs))
            timer.compute_done()
            if transfers:
                for host, out in zip(host_outputs, outs):
                    host.copy_(out, non_blocking=True)
            timer.outputs_done()
            return timer.phases()

        return query

    def outputs_impl(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Outputs for `feeds` (of the cell's shapes), copied into the bound inputs: a CUDA graph or a
        compiled module reads those very tensors."""
        for name, bound in zip(self.input_names, self.device_inputs):
            given = self._to_device(feeds[name])
            if tuple(given.shape) != tuple(bound.shape):
                raise ValueError(f"input {name}: shape {tuple(given.shape)}, the cell runs {tuple(bound.shape)}")
            bound.copy_(given)
        outs = self.run(*self.device_inputs)
        if self.dev.type == "cuda":
            self.stream.synchronize()
        # copies: on CPU .numpy() would share memory with tensors the next run may reuse
        return {name: (o.float() if o.is_floating_point() else o).cpu().numpy().copy()
                for name, o in zip(self.module.output_names, outs)}

    def runtime_stats(self) -> dict[str, Any]:
        if self.dev.type != "cuda":  # host in, host out: an end-to-end latency, no graph
            return {"latency_includes_transfers": True, "timing_cuda_graph": False}
        import torch

        graphs = self.options.mode == "cudagraphs" or (
            self.options.mode == "compile" and self.options.compile_mode in ("reduce-overhead", "max-autotune"))
        # torch.cuda.Event without blocking=True is synchronized by polling: trtexec's spin-wait
        return {"peak_memory_bytes": int(torch.cuda.max_memory_allocated(self.dev)),
                "latency_includes_transfers": self.options.transfers, "timing_cuda_graph": graphs,
                "timing_spin_wait": True}

    # --- per-layer ------------------------------------------------------------------------------

    def layers_impl(self, feeds: dict[str, np.ndarray], iterations: int) -> list[LayerRecord]:
        """Per ONNX node for eager and CUDA-graph cells of the interpreter (an eager run, each node a
        profiler range); per kernel (CPU: per operator) for torch.compile cells, whose nodes no longer
        exist, and for native modules, which have no ONNX nodes."""
        import torch

        cuda = self.dev.type == "cuda"
        if self.options.mode == "compile" or self.native:
            with torch_profile(cuda) as prof:
                for _ in range(iterations):
                    with torch.profiler.record_function(QUERY_RANGE):  # a query's kernels lie within it
                        self.run(*self.device_inputs)
                        if cuda:
                            torch.cuda.synchronize()
            return kernel_records(prof, cuda, iterations)

        shapes = node_shapes(self.module, self.device_inputs, self.dtype)
        self.module.annotate = True
        try:
            for _ in range(2):
                self.module(*self.device_inputs)
            with torch_profile(cuda) as prof:
                for _ in range(iterations):
                    self.module(*self.device_inputs)
                if cuda:
                    torch.cuda.synchronize()
        finally:
            self.module.annotate = False
        times: dict[str, list[float]] = {}
        for event in prof.events():
            if event.name in shapes:
                total = device_time_us(event) if cuda else event.cpu_time_total
                times.setdefault(event.name, []).append(total / 1000.0)
        records = []
        for index, (name, info) in enumerate(shapes.items()):
            records.append(LayerRecord(index=index, name=name, type=info["op"], times_ms=times.get(name, []),
                                       tactic=f"torch {self.options.mode}", kind=GRAPH_OP, **info["memory"]))
        return records

    # --- devices ------------------------------------------------------------------------------

    def device_row(self) -> dict[str, Any]:
        if self.dev.type != "cuda":
            return super().device_row()
        from farm.provenance import cuda_device_row

        return cuda_device_row(self.dev.index or 0)

    def close_impl(self) -> None:
        gc.unfreeze()
        self.module = self.run = self.graph_outputs = None
        self.graph = None
        self.device_inputs = []
        if getattr(self, "dev", None) is not None and self.dev.type == "cuda":
            import torch

            torch.cuda.set_stream(torch.cuda.default_stream())
            torch.cuda.empty_cache()
