"""ONNX's Attention operator (opset 23 on: what PyTorch's exporter makes of scaled_dot_product_attention
at those opsets) on the interpreter, as ONNX's reference computes it: 3-D or 4-D inputs, grouped
key/value heads, a past key and value (the present ones are their concatenation with this step's),
a boolean or additive mask (a shorter one padded as masked), causal masking aligned to the end of
the cache, `scale`, `softcap` and the four `qk_matmul_output_mode`s; a row with nothing to attend
gives zeros. Refused: `nonpad_kv_seqlen` (opset 24's external cache) and sliding windows."""

from __future__ import annotations

import math

from farm.onnx_torch.ops import UnsupportedOperator, lazy_torch, tensor_like


def _heads(x, heads: int):
    """[batch, sequence, heads * size] -> [batch, heads, sequence, size]."""
    return x.reshape(x.shape[0], x.shape[1], heads, -1).transpose(1, 2)


def _additive(mask, dtype):
    """A boolean mask (true: attend) as 0 / -inf; an additive one as it is."""
    torch = lazy_torch()
    if mask.dtype != torch.bool:
        return mask.to(dtype)
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(~mask, -math.inf)


def _bias(q_len: int, kv_len: int, mask, causal: bool, offset: int, like):
    """The additive bias of the scores, [.., q_len, kv_len]: the mask (padded to kv_len as masked) and
    the causal frontier, a query at i seeing keys up to i + offset (the cache's length)."""
    torch = lazy_torch()
    bias = torch.zeros((q_len, kv_len), dtype=like.dtype, device=like.device)
    if mask is not None:
        mask = tensor_like(mask, like)
        if mask.shape[-1] < kv_len:
            fill = False if mask.dtype == torch.bool else -math.inf
            mask = torch.nn.functional.pad(mask, (0, kv_len - mask.shape[-1]), value=fill)
        bias = bias + _additive(mask, like.dtype)
    if causal:
        rows = torch.arange(q_len, device=like.device).unsqueeze(1)
        allowed = torch.arange(kv_len, device=like.device).unsqueeze(0) <= rows + offset
        bias = bias.masked_fill(~allowed, -math.inf)
    return bias


def _softmax(scores, bias):
    """Softmax over the last axis that gives 0, not NaN, where every score of a row is masked."""
    torch = lazy_torch()
    top = scores.amax(-1, keepdim=True)
    exp = (scores - torch.where(top.isneginf(), torch.zeros_like(top), top)).exp()
    total = exp.sum(-1, keepdim=True)
    weights = exp / torch.where(total == 0, torch.ones_like(total), total)
    return weights.masked_fill(bias.amax(-1, keepdim=True).isneginf(), 0.0)


def _attention(m, a, q, k, v, mask=None, past_key=None, past_value=None, nonpad_kv_seqlen=None):
    torch = lazy_torch()
    if nonpad_kv_seqlen is not None:
        raise UnsupportedOperator("Attention with nonpad_kv_seqlen (an external cache)")
    if a.get("left_window_size", -1) >= 0 or a.get("right_window_size", -1) >= 0:
        raise UnsupportedOperator("Attention with a sliding window")
    three_d = q.dim() == 3
    if three_d:
        q, k, v = _heads(q, a["q_num_heads"]), _heads(k, a["kv_num_heads"]), _heads(v, a["kv_num_heads"])
    root = math.sqrt(a.get("scale") or 1 / math.sqrt(q.shape[3]))  # the reference scales both sides
    present_key = k if past_key is None else torch.cat([tensor_like(past_key, k), k], dim=2)
    present_value = v if past_value is None else torch.cat([tensor_like(past_value, v), v], dim=2)
    offset = 0 if past_key is None else past_key.shape[2]
    bias = _bias(q.shape[2], present_key.shape[2], mask, bool(a.get("is_causal", 0)), offset, q)
    keys, values = present_key, present_value
    if q.shape[1] != keys.shape[1] and q.shape[1] % keys.shape[1] == 0:  # grouped heads
        keys = keys.repeat_interleave(q.shape[1] // keys.shape[1], dim=1)
        values = values.repeat_interleave(q.shape[1] // values.shape[1], dim=1)
    scores = (q * root) @ (keys * root).transpose(-1, -2)
    if a.get("softcap", 0.0) > 0:
        scores = (scores / a["softcap"]).tanh() * a["softcap"]
    with_bias = scores + bias
    mode = a.get("qk_matmul_output_mode", 0)
    weights = _softmax(with_bias.float(), bias)  # in float32, at least the softmax_precision asked
    qk = weights if mode == 3 else with_bias if mode == 2 else scores
    y = weights.to(q.dtype) @ values
    if three_d:
        y = y.transpose(1, 2).reshape(y.shape[0], y.shape[2], -1)
    if a.get("_outputs", 1) == 1:
        return y
    return y, present_key, present_value, qk.to(q.dtype)


ATTENTION_OPS = {"Attention": _attention}
