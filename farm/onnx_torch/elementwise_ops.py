"""Elementwise operators and normalizations beyond the common ones (farm.onnx_torch.ops): inverse and
hyperbolic trigonometry, Softsign, Celu, ThresholdedRelu, Shrink, IsInf, BitwiseAnd/Or/Xor, LRN
(the local response normalization of AlexNet-era CNNs) and LpNormalization, as ONNX defines them. Not
BitwiseNot: a uint16 or uint32 value is held in the signed type above it, whose complement differs."""

from __future__ import annotations

import numpy as np

from farm.onnx_torch.ops import UnsupportedOperator, binary, lazy_torch, unary


def _shrink(m, a, x):
    bias, lambd = a.get("bias", 0.0), a.get("lambd", 0.5)
    torch = lazy_torch()
    return torch.where(x < -lambd, x + bias, torch.where(x > lambd, x - bias, torch.zeros_like(x)))


def _is_inf(m, a, x):
    inf = x.isinf()
    if not a.get("detect_negative", 1):
        inf = inf & (x > 0)
    if not a.get("detect_positive", 1):
        inf = inf & (x < 0)
    return inf


def _lrn(m, a, x):
    """Each channel over the sum of squares of the `size` channels centred on it. An even size, whose
    window ONNX Runtime refuses and ONNX's own reference evaluator places apart from its spec, is refused."""
    size = a["size"]
    if size % 2 == 0:
        raise UnsupportedOperator(f"LRN with an even size ({size}): ONNX Runtime refuses it, and where its window "
                                  "lies is not settled")
    alpha, beta, bias = a.get("alpha", 1e-4), a.get("beta", 0.75), a.get("bias", 1.0)
    before = (size - 1) // 2
    squares = lazy_torch().nn.functional.pad(x.square(), [0, 0] * (x.dim() - 2) + [before, size - 1 - before])
    window = sum(squares[:, i:i + x.shape[1]] for i in range(size))
    return x / (bias + alpha / size * window) ** beta


def _lp_normalization(m, a, x):
    p, axis = a.get("p", 2), a.get("axis", -1)
    norm = x.abs().sum(axis, keepdim=True) if p == 1 else x.norm(2, axis, keepdim=True)
    return x / lazy_torch().where(norm == 0, 1, norm)  # a zero vector stays zero


ELEMENTWISE_OPS = {
    "Tan": unary(lambda t, x: x.tan(), np.tan),
    "Acos": unary(lambda t, x: x.acos(), np.arccos),
    "Asin": unary(lambda t, x: x.asin(), np.arcsin),
    "Atan": unary(lambda t, x: x.atan(), np.arctan),
    "Cosh": unary(lambda t, x: x.cosh(), np.cosh),
    "Sinh": unary(lambda t, x: x.sinh(), np.sinh),
    "Acosh": unary(lambda t, x: x.acosh(), np.arccosh),
    "Asinh": unary(lambda t, x: x.asinh(), np.arcsinh),
    "Atanh": unary(lambda t, x: x.atanh(), np.arctanh),
    "Softsign": unary(lambda t, x: x / (1 + x.abs())),
    "Celu": lambda m, a, x: lazy_torch().nn.functional.celu(x, a.get("alpha", 1.0)),
    "ThresholdedRelu": lambda m, a, x: lazy_torch().where(x > a.get("alpha", 1.0), x, lazy_torch().zeros_like(x)),
    "Shrink": _shrink,
    "IsInf": _is_inf,
    "BitwiseAnd": binary(lambda x, y: x & y),
    "BitwiseOr": binary(lambda x, y: x | y),
    "BitwiseXor": binary(lambda x, y: x ^ y),
    "LRN": _lrn,
    "LpNormalization": _lp_normalization,
}
