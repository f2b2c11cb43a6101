"""int8 and fp8 on PyTorch, through torchao's quantization configs (`quantize_`): the module's
`nn.Linear` layers get quantized weights and quantize their activations per call (dynamic), the
rest of the module runs in the compute dtype (bf16 on CUDA, fp32 on the CPU, whose bf16 kernels
are slow or missing). torchao's configs quantize Linear layers only: convolutions, embeddings and
norms stay in the compute dtype, which the build row says (`transform_summary`).

- `int8`: `Int8DynamicActivationInt8WeightConfig` (int8 weights per channel, activations per
  token, int8 matrix products: `torch._int_mm`), or with `backends.torch.int8 = "weight_only"`
  `Int8WeightOnlyConfig` (int8 weights dequantized into the compute dtype).
- `fp8`: `Float8DynamicActivationFloat8WeightConfig` with per-row scales (e4m3 weights and
  activations, `torch._scaled_mm` on Hopper's fp8 tensor cores): CUDA with compute capability 8.9
  or newer only.

No calibration: dynamic quantization measures each activation as it comes, so
`[models.calibration]` is for the ONNX engines' static Q/DQ models (docs/precision.md)."""

from __future__ import annotations

import collections
import json
from typing import Any

QUANTIZED = frozenset({"int8", "fp8"})
FP8_CAPABILITY = (8, 9)  # Ada (8.9) and Hopper (9.0) have fp8 tensor cores; Ampere (8.0, 8.6) does not


def compute_dtype(precision: str, device: str) -> str:
    """The dtype the module's unquantized layers and activations run in (torch's name)."""
    if precision in QUANTIZED:
        return "bfloat16" if device == "cuda" else "float32"
    return {"fp32": "float32", "tf32": "float32", "fp16": "float16", "bf16": "bfloat16"}[precision]


def unsupported(precision: str, device: str, capability: tuple[int, int] | None = None) -> str | None:
    """Why this precision cannot run here (no torchao; fp8 off CUDA or below compute capability
    8.9), or None."""
    if precision not in QUANTIZED:
        return None
    if precision == "fp8" and device != "cuda":
        return ('fp8 on PyTorch runs on the fp8 tensor cores of CUDA GPUs (compute capability 8.9 or newer: '
                'Ada, Hopper, Blackwell): set backends.torch.device = "cuda" on such a GPU')
    if precision == "fp8" and capability is not None and capability < FP8_CAPABILITY:
        return (f"fp8 needs a GPU with compute capability 8.9 or newer (Ada, Hopper, Blackwell) for its fp8 "
                f"tensor cores; this one is {capability[0]}.{capability[1]}: run int8 or bf16 on it")
    try:
        import torchao  # noqa: F401
    except ImportError as exc:
        return f"{precision} on PyTorch goes through torchao, which is not importable here ({exc}): pip install torchao"
    return None


def config_for(precision: str, int8_scheme: str = "dynamic") -> Any:
    """torchao's config object for `precision`."""
    import torchao.quantization as q

    if precision == "fp8":
        return q.Float8DynamicActivationFloat8WeightConfig(granularity=q.PerRow())
    if int8_scheme == "weight_only":
        return q.Int8WeightOnlyConfig()
    return q.Int8DynamicActivationInt8WeightConfig()


def _is_quantized(weight: Any) -> bool:
    return type(weight).__module__.startswith("torchao")


def quantize(module: Any, precision: str, int8_scheme: str = "dynamic", native: bool = True) -> tuple[str, str, str]:
    """Quantize `module`'s Linear layers in place for `precision`: (the build row's summary, the
    tool, the precision of each layer as JSON: `builds.transform_layers`). Raises EngineUnsupported
    where nothing could be quantized."""
    import torch
    import torchao
    from torchao.quantization import quantize_

    from farm.errors import EngineUnsupported

    config = config_for(precision, int8_scheme)
    linears = [m for m in module.modules() if isinstance(m, torch.nn.Linear)]
    if not linears:
        where = ("its module" if native else "farm's ONNX interpreter, which runs MatMul and Gemm as functions, "
                 "not Linear layers: give a module: or torchvision: source of the model")
        raise EngineUnsupported(f"{precision} through torchao quantizes nn.Linear layers, and {where} has none: "
                                "nothing would run in " + precision)
    quantize_(module, config)
    done = sum(1 for m in linears if _is_quantized(m.weight))
    if not done:
        raise EngineUnsupported(f"{precision} through torchao {torchao.__version__} ({type(config).__name__}) "
                                f"quantized none of the model's {len(linears)} Linear layers")
    layers = layer_precisions(module, precision, int8_scheme)
    left = collections.Counter(row["type"] for row in layers if row["precision"] == row["weights"])  # not torchao's
    kept = ", ".join(f"{n} {name}" for name, n in sorted(left.items(), key=lambda kv: -kv[1]))
    compute = next((p.dtype for p in module.parameters() if not _is_quantized(p)), torch.float32)
    dtype = {torch.bfloat16: "bf16", torch.float16: "fp16"}.get(compute, "fp32")
    how = (f"weights only, activations in {dtype}" if precision == "int8" and int8_scheme == "weight_only"
           else f"activations quantized per call, {dtype} between")
    summary = (f"{precision}: {done} of {len(linears)} Linear layers quantized"
               + (f"; left in {dtype}: {kept}" if kept else "") + f" ({how})")
    return summary, f"torchao {torchao.__version__} {type(config).__name__}", json.dumps(layers)


def layer_precisions(module: Any, precision: str, int8_scheme: str) -> list[dict[str, str]]:
    """Each layer that holds weights (Linear, convolution, embedding) and the precision it runs in, as
    rows {"layer", "type", "precision", "weights"}: a quantized layer's precision is the cell's
    (`int8 weight-only` for that scheme), its weights torchao's tensor type; every other layer runs in
    the compute dtype of its weights. What a kernel profile cannot say under a CUDA graph."""
    import torch

    names = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}
    rows = []
    root = getattr(module, "net", module)  # the user's module inside farm's wrapper: its own layer names
    for name, layer in root.named_modules():
        if not isinstance(layer, (torch.nn.Linear, torch.nn.modules.conv._ConvNd, torch.nn.Embedding)):
            continue
        weight = layer.weight
        if _is_quantized(weight):
            runs = "int8 weight-only" if precision == "int8" and int8_scheme == "weight_only" else precision
            rows.append({"layer": name, "type": type(layer).__name__, "precision": runs, "weights": type(weight).__name__})
        else:
            dtype = names.get(weight.dtype, str(weight.dtype).removeprefix("torch."))
            rows.append({"layer": name, "type": type(layer).__name__, "precision": dtype, "weights": dtype})
    return rows
