"""PyTorch factories of the model corpus (benchmarks/model_corpus.py): Hugging Face `transformers`
architectures built from a config with random weights (no hub download), each wrapped so that its
forward takes tensors by position and returns tensors. The architectures are the libraries'; only
the sizes are chosen here (small enough for a CPU run, the layers as the library builds them).
"""

from __future__ import annotations

import torch
from torch import nn

# transformers configs shrunk to a few small layers: every spelling the library's configs use
# for width, depth and heads (a config ignores the names it does not have)
SMALL_CONFIG = {
    "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1,
    "intermediate_size": 64, "vocab_size": 1024, "d_model": 32, "d_ff": 64, "d_kv": 16, "num_layers": 2,
    "num_heads": 2, "encoder_layers": 2, "decoder_layers": 2, "encoder_attention_heads": 2,
    "decoder_attention_heads": 2, "encoder_ffn_dim": 64, "decoder_ffn_dim": 64, "n_embd": 32, "n_layer": 2,
    "n_head": 2, "n_positions": 128, "max_position_embeddings": 128,
}


class Positional(nn.Module):
    """A Hugging Face model called with its inputs by name, returning its tensors in order."""

    def __init__(self, model: nn.Module, names: list[str]) -> None:
        super().__init__()
        self.model, self.names = model, names

    def forward(self, *inputs: torch.Tensor):
        out = self.model(**dict(zip(self.names, inputs)), return_dict=True)
        return tuple(v for v in out.values() if isinstance(v, torch.Tensor))


def _text_config(cls, **sizes):
    import transformers

    return getattr(transformers, cls)(**sizes)


def bert(layers: int = 4, hidden: int = 256, heads: int = 4) -> nn.Module:
    from transformers import BertModel

    config = _text_config("BertConfig", vocab_size=30522, hidden_size=hidden, num_hidden_layers=layers,
                          num_attention_heads=heads, intermediate_size=4 * hidden)
    return Positional(BertModel(config), ["input_ids", "attention_mask"])


def distilbert(layers: int = 4, hidden: int = 256) -> nn.Module:
    from transformers import DistilBertModel

    config = _text_config("DistilBertConfig", vocab_size=30522, dim=hidden, n_layers=layers, n_heads=4,
                          hidden_dim=4 * hidden)
    return Positional(DistilBertModel(config), ["input_ids", "attention_mask"])


def roberta(layers: int = 4, hidden: int = 256) -> nn.Module:
    from transformers import RobertaModel

    config = _text_config("RobertaConfig", vocab_size=50265, hidden_size=hidden, num_hidden_layers=layers,
                          num_attention_heads=4, intermediate_size=4 * hidden)
    return Positional(RobertaModel(config), ["input_ids", "attention_mask"])


def gpt2(layers: int = 4, hidden: int = 256) -> nn.Module:
    from transformers import GPT2LMHeadModel

    config = _text_config("GPT2Config", vocab_size=50257, n_embd=hidden, n_layer=layers, n_head=4, use_cache=False)
    return Positional(GPT2LMHeadModel(config), ["input_ids"])


def llama(layers: int = 4, hidden: int = 256, heads: int = 4, kv_heads: int = 2) -> nn.Module:
    from transformers import LlamaForCausalLM

    config = _text_config("LlamaConfig", vocab_size=32000, hidden_size=hidden, intermediate_size=3 * hidden,
                          num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv_heads,
                          use_cache=False)
    return Positional(LlamaForCausalLM(config), ["input_ids"])


def t5_encoder(layers: int = 4, hidden: int = 256) -> nn.Module:
    from transformers import T5EncoderModel

    config = _text_config("T5Config", vocab_size=32128, d_model=hidden, d_kv=64, d_ff=4 * hidden,
                          num_layers=layers, num_heads=4, use_cache=False)
    return Positional(T5EncoderModel(config), ["input_ids", "attention_mask"])


def vit(layers: int = 4, hidden: int = 256, heads: int = 4) -> nn.Module:
    from transformers import ViTModel

    config = _text_config("ViTConfig", hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                          intermediate_size=4 * hidden, image_size=224, patch_size=16)
    return Positional(ViTModel(config), ["pixel_values"])


def wav2vec2(layers: int = 4, hidden: int = 256) -> nn.Module:
    from transformers import Wav2Vec2Model

    config = _text_config("Wav2Vec2Config", hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=4,
                          intermediate_size=4 * hidden)
    return Positional(Wav2Vec2Model(config), ["input_values"])


def whisper_encoder(layers: int = 2, hidden: int = 256) -> nn.Module:
    from transformers import WhisperConfig
    from transformers.models.whisper.modeling_whisper import WhisperEncoder

    config = WhisperConfig(d_model=hidden, encoder_layers=layers, encoder_attention_heads=4,
                           encoder_ffn_dim=4 * hidden, num_mel_bins=80, max_source_positions=1500)
    return Positional(WhisperEncoder(config), ["input_features"])


def lraspp() -> nn.Module:
    """torchvision's LR-ASPP segmentation model with no weights to download (its default fetches
    ImageNet weights for the backbone)."""
    from torchvision.models.segmentation import lraspp_mobilenet_v3_large

    return lraspp_mobilenet_v3_large(weights=None, weights_backbone=None)


class Named(nn.Module):
    """A model called with its inputs by name, as its own forward() names them, its output left as
    the model returns it (a ModelOutput, a cache, a dict): how a user's glue code calls it."""

    def __init__(self, model: nn.Module, names: list[str]) -> None:
        super().__init__()
        self.model, self.names = model, names

    def forward(self, *inputs: torch.Tensor):
        return self.model(**dict(zip(self.names, inputs)))


def hf_small(model_type: str, class_name: str, names: list[str]) -> nn.Module:
    """A transformers model of `model_type` (the registry corpus: benchmarks/corpus_registry.py) from
    its own config shrunk to a few small layers, random weights; the config's other settings (its
    cache among them) as the library sets them."""
    import transformers

    config = transformers.AutoConfig.for_model(model_type, **SMALL_CONFIG)
    for name in getattr(config, "sub_configs", {}):  # a multimodal model's text, vision, audio parts: small too
        part = getattr(config, name, None)
        if isinstance(part, transformers.PretrainedConfig):
            setattr(config, name, type(part)(**SMALL_CONFIG))
    return Named(getattr(transformers, class_name)._from_config(config), names)


def torchvision_model(name: str, quantize: bool = False) -> nn.Module:
    """Any model torchvision lists, by its registry name, with random weights (no download)."""
    import inspect

    from torchvision import models

    builder = models.get_model_builder(name)
    kwargs = {"quantize": True} if quantize else {}
    if "weights_backbone" in inspect.signature(builder).parameters:  # its default fetches ImageNet weights
        kwargs["weights_backbone"] = None
    return builder(weights=None, **kwargs)
