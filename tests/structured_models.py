"""PyTorch factories for tests/test_model_classes.py: modules of the kinds users point farm at whose
outputs are not one tensor (a transformers decoder and its cache, dicts, lists of dicts), whose export
fixes the batch, or whose kernels a device or a precision lacks. `module:tests.structured_models:FACTORY`
sources, importable by the planner and by cell processes."""

from __future__ import annotations

import torch
from torch import nn

VOCAB = 128


def tiny_decoder(use_cache: bool | None = None, layers: int = 2):
    """A transformers causal LM (Qwen2) from a config, no download: left at the config's default,
    `use_cache` is True and forward() returns a DynamicCache beside the logits."""
    from transformers import AutoConfig, AutoModelForCausalLM

    changes = {} if use_cache is None else {"use_cache": use_cache}
    config = AutoConfig.for_model("qwen2", hidden_size=32, intermediate_size=64, num_hidden_layers=layers,
                                  num_attention_heads=2, num_key_value_heads=1, vocab_size=VOCAB, **changes)
    return AutoModelForCausalLM.from_config(config)


def tiny_moe(layers: int = 2):
    """A transformers mixture-of-experts causal LM (Mixtral) from a config, no download: its experts
    run through transformers' grouped_mm, a custom operator no ONNX exporter converts."""
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.for_model("mixtral", hidden_size=32, intermediate_size=64, num_hidden_layers=layers,
                                  num_attention_heads=4, num_key_value_heads=2, num_local_experts=4,
                                  num_experts_per_tok=2, vocab_size=VOCAB, max_position_embeddings=64)
    return AutoModelForCausalLM.from_config(config)


class _Structured(nn.Module):
    """Outputs as a pytree: a dict holding a nested list, a tuple, None and a Python int."""

    def __init__(self, width: int = 8) -> None:
        super().__init__()
        self.body = nn.Linear(width, width)

    def forward(self, x: torch.Tensor):
        y = self.body(x)
        return {"logits": y, "parts": [torch.relu(y), (y.sum(dim=1), None)], "count": 3,
                "extra": {"scale": y * 2}}


def structured(width: int = 8) -> nn.Module:
    return _Structured(width)


class _PerImage(nn.Module):
    """Like torchvision's detectors: a list with one dict per image of the batch."""

    def __init__(self, width: int = 8) -> None:
        super().__init__()
        self.body = nn.Linear(width, 4)

    def forward(self, x: torch.Tensor):
        boxes = self.body(x)
        return [{"boxes": boxes[i], "scores": boxes[i].sigmoid()} for i in range(x.shape[0])]


def per_image(width: int = 8) -> nn.Module:
    return _PerImage(width)


class _FixedBatch(nn.Module):
    """Reshapes to a constant: whatever the exporter is told, the graph holds the batch it was traced at."""

    def __init__(self, width: int = 8) -> None:
        super().__init__()
        self.body = nn.Linear(width, width)
        self.width = width

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.body(x)
        return y.reshape(int(x.shape[0]), self.width) * 2  # int(): the batch a Python constant


def fixed_batch(width: int = 8) -> nn.Module:
    return _FixedBatch(width)


class _QuantizedConv(nn.Module):
    """A quantized convolution (quantized::conv2d): kernels for the CPU only."""

    def __init__(self) -> None:
        super().__init__()
        self.quant = torch.ao.nn.quantized.Quantize(scale=0.05, zero_point=64, dtype=torch.quint8)
        self.conv = torch.ao.nn.quantized.Conv2d(3, 4, 3, padding=1)
        self.dequant = torch.ao.nn.quantized.DeQuantize()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dequant(self.conv(self.quant(x)))


def quantized_conv() -> nn.Module:
    return _QuantizedConv()


class _Distances(nn.Module):
    """Distances to learned prototypes (torch.cdist): no fp16 kernel on the CPU."""

    def __init__(self, width: int = 8, prototypes: int = 4) -> None:
        super().__init__()
        self.prototypes = nn.Parameter(torch.randn(prototypes, width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cdist(x, self.prototypes)


def distances(width: int = 8) -> nn.Module:
    return _Distances(width)


class _Warp(nn.Module):
    """Samples its input at a grid it builds itself in float32, as RAFT's coordinate grid: converted
    to fp16, the input is half and the grid is not (grid_sample refuses the pair)."""

    def __init__(self, channels: int = 2) -> None:
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, _, h, w = x.shape
        ys, xs = torch.meshgrid(torch.linspace(-1, 1, h), torch.linspace(-1, 1, w), indexing="ij")
        grid = torch.stack([xs, ys], dim=-1).unsqueeze(0).expand(n, h, w, 2).to(x.device)
        return nn.functional.grid_sample(self.conv(x), grid * 0.9, align_corners=False)


def warp(channels: int = 2) -> nn.Module:
    return _Warp(channels)


def linear_and_conv(width: int = 16) -> nn.Module:
    """A convolution, then Linear layers: what torchao's int8 and fp8 configs quantize (the Linear
    layers) and what they leave (the convolution). Takes x [batch, 4, 16]."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv1d(4, 8, 3), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 14, width), nn.ReLU(),
                         nn.Linear(width, 10)).eval()
