"""A bare ONNX Runtime timing loop, with no farm code: the reference farm's ONNX Runtime CUDA cells
are checked against.

It imports onnxruntime, numpy and (on CUDA) torch, for pinned memory, a stream and CUDA events,
and nothing of farm. It runs one ONNX file as ONNX Runtime's CUDA execution provider documents
for speed: inputs and outputs bound with I/O binding at fixed device addresses, the provider on
the caller's stream (`user_compute_stream`), CUDA graphs (`enable_cuda_graph`) and NHWC kernels
(`prefer_nhwc`) where asked. Each query does what a farm ONNX Runtime CUDA cell's query does:

    event 0, H2D copy of pinned host inputs, event 1, run_with_iobinding (not synchronizing),
    event 2, D2H copy into pinned memory, event 3, synchronize on event 3

latency = event 0 -> 3, compute = event 1 -> 2. Beside it, `sync_ms`: the host time of ONNX
Runtime's plain synchronous `run_with_iobinding` (no copies), the figure its own docs would give.
Medians over `--rounds` x `--queries` queries after `--warmup-s` of warm-up. On CPU (the CPU
provider, host clock) only the path is exercised.

    python3 benchmarks/ort_bare_loop.py --model resnet50.fp16.onnx --label fp16 --batches 1 32 128
    python3 benchmarks/ort_bare_loop.py --model m.onnx --graphs off on --nhwc off on --json bare.json
    python3 benchmarks/ort_bare_loop.py --quick --device cpu      # a tiny model; the test suite

benchmarks/device/farm_vs_bare.sh (stages ort1 ort-bare ort-table) sets it beside a farm sweep of the same
file's cells.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

NUMPY = {"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(int64)": np.int64,
         "tensor(int32)": np.int32, "tensor(bool)": np.bool_}


def tiny_model(path: Path) -> Path:
    """A convolution, a ReLU and a global pool, batch dynamic: --quick runs this."""
    from onnx import TensorProto, helper, numpy_helper, save

    rng = np.random.default_rng(0)
    weight = numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("Conv", ["input", "w"], ["c"], pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c"], ["r"]), helper.make_node("GlobalAveragePool", ["r"], ["output"])],
        "tiny", [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", 3, 16, 16])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["batch", 8, 1, 1])], [weight])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8  # what every ONNX Runtime of the last years reads
    save(model, str(path))
    return path


def shape_of(dims: list, batch: int, batch_name: str | None) -> tuple[int, ...]:
    """A tensor's shape with its symbolic batch dimension (the first input's first) set."""
    out = []
    for d in dims:
        if isinstance(d, int):
            out.append(d)
        elif d == batch_name or batch_name is None:
            out.append(batch)
        else:
            raise SystemExit(f"ort_bare_loop: dimension {d!r} is neither fixed nor the batch: give a model "
                             f"whose other dimensions are fixed")
    return tuple(out)


def session(model: Path, device: str, stream_handle: int | None, graphs: bool, nhwc: bool, tf32: bool = True,
            save_optimized: Path | None = None):
    """An InferenceSession as ONNX Runtime documents for speed. `tf32`: the CUDA EP's `use_tf32`
    (ONNX Runtime's default is on; farm's fp32 cells turn it off, its other cells keep it).
    `save_optimized`: also write the optimized graph there, as a farm cell's session does."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.log_severity_level = 3
    if save_optimized is not None:
        opts.optimized_model_filepath = str(save_optimized)
    if device == "cpu":
        return ort.InferenceSession(str(model), opts, providers=["CPUExecutionProvider"])
    cuda = {"device_id": "0", "user_compute_stream": str(stream_handle), "has_user_compute_stream": "1",
            "cudnn_conv_algo_search": "EXHAUSTIVE", "enable_cuda_graph": "1" if graphs else "0",
            "prefer_nhwc": "1" if nhwc else "0", "use_tf32": "1" if tf32 else "0"}
    sess = ort.InferenceSession(str(model), opts, providers=[("CUDAExecutionProvider", cuda)])
    if "CUDAExecutionProvider" not in sess.get_providers():
        raise SystemExit("ort_bare_loop: ONNX Runtime did not start its CUDA provider here")
    return sess


def bound_cuda(sess, batch: int, seed: int):
    """Inputs and outputs as torch CUDA tensors bound at fixed addresses, with pinned host copies."""
    import torch

    binding = sess.io_binding()
    rng = np.random.default_rng(seed)
    first = sess.get_inputs()[0].shape
    batch_name = first[0] if first and isinstance(first[0], str) else None
    inputs, outputs = [], []
    for spec in sess.get_inputs():
        dtype = NUMPY[spec.type]
        shape = shape_of(spec.shape, batch, batch_name)
        data = (rng.standard_normal(shape) if np.issubdtype(dtype, np.floating)
                else rng.integers(0, 100, shape)).astype(dtype)
        host = torch.from_numpy(data).pin_memory()
        device = host.to("cuda")
        binding.bind_input(spec.name, "cuda", 0, dtype, shape, device.data_ptr())
        inputs.append((device, host))
    for spec in sess.get_outputs():
        dtype = NUMPY[spec.type]
        shape = shape_of(spec.shape, batch, batch_name)
        device = torch.empty(shape, dtype=torch.from_numpy(np.zeros(0, dtype)).dtype, device="cuda")
        binding.bind_output(spec.name, "cuda", 0, dtype, shape, device.data_ptr())
        outputs.append((device, torch.empty_like(device, device="cpu").pin_memory()))
    return binding, inputs, outputs


def time_cuda(sess, binding, inputs, outputs, stream, warmup_s: float, rounds: int,
              queries: int, sync: bool = True) -> dict[str, float]:
    import onnxruntime as ort
    import torch

    quiet = ort.RunOptions()
    quiet.add_run_config_entry("disable_synchronize_execution_providers", "1")
    events = [torch.cuda.Event(enable_timing=True) for _ in range(4)]
    run = sess.run_with_iobinding

    def query() -> tuple[float, float]:
        events[0].record(stream)
        for device, host in inputs:
            device.copy_(host, non_blocking=True)
        events[1].record(stream)
        run(binding, quiet)
        events[2].record(stream)
        for device, host in outputs:
            host.copy_(device, non_blocking=True)
        events[3].record(stream)
        events[3].synchronize()
        return events[0].elapsed_time(events[3]), events[1].elapsed_time(events[2])

    with torch.cuda.stream(stream):
        deadline = time.perf_counter() + warmup_s
        while True:  # the first runs capture the CUDA graph where enabled: never timed
            query()
            if time.perf_counter() >= deadline:
                break
        laps = [query() for _ in range(rounds * queries)]
        plain = []
        for _ in range(rounds * queries if sync else 0):
            start = time.perf_counter()
            run(binding)  # ONNX Runtime's default: synchronizes before it returns
            plain.append((time.perf_counter() - start) * 1e3)
    return {"latency_median_ms": statistics.median(a for a, _ in laps),
            "compute_median_ms": statistics.median(b for _, b in laps),
            "sync_median_ms": statistics.median(plain) if plain else None, "queries": len(laps)}


def time_cpu(sess, batch: int, seed: int, warmup_s: float, rounds: int, queries: int) -> dict[str, float]:
    import onnxruntime as ort

    rng = np.random.default_rng(seed)
    first = sess.get_inputs()[0].shape
    batch_name = first[0] if first and isinstance(first[0], str) else None
    binding = sess.io_binding()
    for spec in sess.get_inputs():
        data = rng.standard_normal(shape_of(spec.shape, batch, batch_name)).astype(NUMPY[spec.type])
        binding.bind_ortvalue_input(spec.name, ort.OrtValue.ortvalue_from_numpy(data))
    for spec in sess.get_outputs():
        binding.bind_output(spec.name)
    deadline = time.perf_counter() + warmup_s
    while True:
        sess.run_with_iobinding(binding)
        if time.perf_counter() >= deadline:
            break
    laps = []
    for _ in range(rounds * queries):
        start = time.perf_counter()
        sess.run_with_iobinding(binding)
        laps.append((time.perf_counter() - start) * 1e3)
    median = statistics.median(laps)
    return {"latency_median_ms": median, "compute_median_ms": median, "sync_median_ms": median, "queries": len(laps)}


def variant(graphs: bool, nhwc: bool) -> str:
    """The cell's name for these provider options, as benchmarks/device/farm_vs_bare.py keys farm's cells."""
    return ("graphs" if graphs else "no-graphs") + (" nhwc" if nhwc else "")


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, default=None, help="the ONNX file (required unless --quick)")
    parser.add_argument("--label", default="fp32", help="the precision this file is, for the table (default fp32)")
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--batches", nargs="+", type=int, default=None, help="default 1 32 128 (quick: 1 4)")
    parser.add_argument("--graphs", nargs="+", choices=["off", "on"], default=["off", "on"])
    parser.add_argument("--nhwc", nargs="+", choices=["off", "on"], default=["off"])
    parser.add_argument("--rounds", type=int, default=None, help="default 3 (quick 2)")
    parser.add_argument("--queries", type=int, default=None, help="per round; default 100 (quick 10)")
    parser.add_argument("--warmup-s", type=float, default=None, help="default 1 (quick 0.05)")
    parser.add_argument("--tf32", choices=["auto", "on", "off"], default="auto",
                        help="the CUDA EP's use_tf32; auto (default): as a farm cell of --label sets it, "
                             "off for fp32, on otherwise (ONNX Runtime's own default)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", default=None, help="also write the rows to this JSON file")
    parser.add_argument("--quick", action="store_true", help="a tiny model, few queries: checks the path")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    import onnxruntime as ort

    cuda = args.device == "cuda"
    if cuda:
        import torch

        if hasattr(ort, "preload_dlls"):
            ort.preload_dlls()
        if not torch.cuda.is_available() or "CUDAExecutionProvider" not in ort.get_available_providers():
            print("ort_bare_loop: no CUDA GPU or no CUDA provider here (onnxruntime-gpu); use --device cpu",
                  file=sys.stderr)
            return 2
    if args.model is None and not args.quick:
        print("ort_bare_loop: --model FILE is required (or --quick)", file=sys.stderr)
        return 2
    scratch = tempfile.TemporaryDirectory()
    model = args.model or tiny_model(Path(scratch.name) / "tiny.onnx")
    batches = args.batches or ([1, 4] if args.quick else [1, 32, 128])
    rounds, queries = args.rounds or (2 if args.quick else 3), args.queries or (10 if args.quick else 100)
    warmup_s = args.warmup_s if args.warmup_s is not None else (0.05 if args.quick else 1.0)
    where = torch.cuda.get_device_name(0) if cuda else "CPU"
    print(f"onnxruntime {ort.__version__}, {where}; {model.name} ({args.label}), {rounds} x {queries} queries",
          flush=True)
    print(f"{'precision':>9} {'batch':>5} {'variant':>16} {'latency p50':>12} {'compute p50':>12} {'sync p50':>9}")
    stream = torch.cuda.Stream() if cuda else None
    rows = []
    for batch in batches:
        for graphs in (g == "on" for g in args.graphs):
            for nhwc in (n == "on" for n in args.nhwc):
                name = variant(graphs, nhwc)
                if not cuda and (graphs or nhwc):
                    print(f"{args.label:>9} {batch:>5} {name:>16}  skipped: needs CUDA", flush=True)
                    continue
                start = time.perf_counter()
                sess = session(model, args.device, int(stream.cuda_stream) if cuda else None, graphs, nhwc,
                               tf32=args.tf32 == "on" or (args.tf32 == "auto" and args.label != "fp32"))
                if cuda:
                    binding, inputs, outputs = bound_cuda(sess, batch, args.seed)
                    build_s = time.perf_counter() - start
                    figures = time_cuda(sess, binding, inputs, outputs, stream, warmup_s, rounds, queries)
                else:
                    build_s = time.perf_counter() - start
                    figures = time_cpu(sess, batch, args.seed, warmup_s, rounds, queries)
                rows.append({"precision": args.label, "batch": batch, "mode": name, "build_s": build_s, **figures})
                print(f"{args.label:>9} {batch:>5} {name:>16} {figures['latency_median_ms']:12.4f} "
                      f"{figures['compute_median_ms']:12.4f} {figures['sync_median_ms'] or 0:9.4f}", flush=True)
                del sess
                if cuda:
                    del binding, inputs, outputs
                    torch.cuda.empty_cache()
    if args.json:
        Path(args.json).write_text(json.dumps({"device": where, "onnxruntime": ort.__version__,
                                               "model": str(model), "rows": rows}, indent=1))
    return 0 if rows else 1


if __name__ == "__main__":
    sys.exit(main())
