"""Quantized ONNX operators on the interpreter: the Q/DQ pairs of an explicitly quantized model (what
TensorRT's int8 and ONNX Runtime's QDQ format are made of), ONNX Runtime's dynamic quantization
(DynamicQuantizeLinear, MatMulInteger, ConvInteger) and its QOperator format (QLinearMatMul,
QLinearConv), each as ONNX's reference computes it.

PyTorch has no integer matrix product on CUDA, so the integer products run in float64: exact for
8-bit operands (every partial sum is an integer far below 2**53), on the CPU and the GPU alike. The
figures of such a cell are PyTorch running the model's arithmetic, not an int8 kernel's speed.
Float8 and 4-bit quantized types are refused, as Cast to them is."""

from __future__ import annotations

from farm.onnx_torch.conv_and_pool_ops import convolution
from farm.onnx_torch.ops import UnsupportedOperator, lazy_torch, on_device, tensor_like

# onnx.TensorProto type -> (torch dtype name, smallest, largest). uint16 is held in int32 with its own
# range (farm.onnx_torch.graph_facts), so an int32 zero point of QuantizeLinear is a uint16 one.
_RANGES = {2: ("uint8", 0, 255), 3: ("int8", -128, 127), 4: ("int32", 0, 65535), 5: ("int16", -32768, 32767)}
_BY_DTYPE = {"uint8": 2, "int8": 3, "int32": 4, "int16": 5}


def _onnx_name(elem_type: int) -> str:
    from onnx import TensorProto

    return TensorProto.DataType.Name(elem_type)


def _param(value, x, axis: int, block: int):
    """A scale or zero point shaped to broadcast against `x`: per tensor, per `axis`, or in blocks of
    `block` along it (opset 21), as onnx.reference's reshape_input."""
    torch = lazy_torch()
    value = tensor_like(value, x)  # on x's device (a host constant copied once); a float one in x's float type
    if value.dim() == 0 or value.numel() == 1:
        return value.reshape(())
    axis %= x.dim()
    if not block:
        shape = [1] * x.dim()
        shape[axis] = value.numel()
        return value.reshape(shape)
    return torch.repeat_interleave(value, block, dim=axis).narrow(axis, 0, x.shape[axis])


def _saturated(values, elem_type: int):
    """Round half to even, clip to the type's range, then the type (torch's round is half to even)."""
    torch = lazy_torch()
    name, low, high = _RANGES[elem_type]
    return values.round().clamp(low, high).to(getattr(torch, name))


def _quantize_linear(m, a, x, scale, zero_point=None):
    torch = lazy_torch()
    if a.get("precision") not in (None, 0, 1):  # 0: unset; 1: float32, as here
        raise UnsupportedOperator(f"QuantizeLinear with precision={_onnx_name(a['precision'])}: farm's interpreter "
                                  "divides in float32")
    if zero_point is not None:
        zero = tensor_like(zero_point, x)
        elem_type = _BY_DTYPE.get(str(zero.dtype).removeprefix("torch."))
    else:
        zero, elem_type = None, a.get("output_dtype") or 2  # uint8 where nothing says otherwise
    if elem_type not in _RANGES:
        name = _onnx_name(elem_type) if isinstance(elem_type, int) else str(zero.dtype)
        raise UnsupportedOperator(f"QuantizeLinear to {name}: farm's interpreter has no such tensor type")
    axis, block = a.get("axis", 1), a.get("block_size", 0)
    values = x.to(torch.float32) / _param(scale, x, axis, block).to(torch.float32)
    values = values.round()
    if zero is not None:
        values = values + _param(zero, x, axis, block).to(torch.float32)
    return _saturated(values, elem_type)


def _dequantize_linear(m, a, x, scale, zero_point=None):
    torch = lazy_torch()
    if x.is_floating_point():  # float8 in, which no input of the interpreter can be
        raise UnsupportedOperator(f"DequantizeLinear of {x.dtype}: farm's interpreter has no such tensor type")
    axis, block = a.get("axis", 1), a.get("block_size", 0)
    values = x.to(torch.float32)
    if zero_point is not None:
        values = values - _param(zero_point, x, axis, block).to(torch.float32)
    return (values * _param(scale, values, axis, block).to(torch.float32)).to(m.float_dtype)  # the scale's: every float is


def _dynamic_quantize_linear(m, a, x):
    """uint8 with a scale and zero point from the input's own range (0 always inside it): read on
    the device, so the step stays a part of a CUDA graph."""
    torch = lazy_torch()
    values = x.to(torch.float32)
    high, low = values.max().clamp(min=0), values.min().clamp(max=0)
    scale = torch.where(high == low, torch.ones_like(high), high - low) / 255
    zero = (0 - low / scale).clamp(0, 255).round()
    quantized = ((values / scale).round() + zero).clamp(0, 255).to(torch.uint8)
    return quantized, scale.to(x.dtype), zero.to(torch.uint8)


def _exact(value, like, zero_point=None, per_row: bool = False):
    """An 8-bit operand (on `like`'s device) less its zero point, in float64: exact products (see the
    module's docstring). A per-row zero point (MatMulInteger's A, [M]) broadcasts down the rows."""
    torch = lazy_torch()
    values = tensor_like(value, like).to(torch.float64)
    if zero_point is not None:
        zero = tensor_like(zero_point, like).to(torch.float64)
        if per_row and zero.dim() == 1 and zero.numel() > 1:
            zero = zero.reshape(-1, 1)
        values = values - zero
    return values


def _per_channel(value, like):
    """A weight's zero point or scale per output channel ([C_out]) shaped for a conv weight or output."""
    value = tensor_like(value, like).to(lazy_torch().float64)
    return value.reshape(-1, *[1] * (like.dim() - 1)) if value.dim() == 1 and value.numel() > 1 else value


def _weights(w, w_zero, like):
    """A conv weight less its zero point (per tensor, or per output channel), in float64."""
    return _exact(w, like) - (_per_channel(w_zero, like) if w_zero is not None else 0)


def _matmul_integer(m, a, x, w, x_zero=None, w_zero=None):
    return (_exact(x, x, x_zero, per_row=True) @ _exact(w, x, w_zero)).to(lazy_torch().int32)


def _conv_integer(m, a, x, w, x_zero=None, w_zero=None):
    return convolution(m, a, _exact(x, x, x_zero), _weights(w, w_zero, x)).to(lazy_torch().int32)


def _requantized(accumulated, factor, y_zero, like_dtype):
    """ONNX's reference: the integer result times x_scale * w_scale / y_scale (float32), plus the
    output's zero point, rounded half to even and clipped to the output's type (its zero point's)."""
    torch = lazy_torch()
    values = accumulated * factor.to(torch.float64)
    zero = tensor_like(y_zero, values) if y_zero is not None else None
    if zero is not None:
        values = values + zero.to(torch.float64)
    dtype = zero.dtype if zero is not None else like_dtype
    return _saturated(values, _BY_DTYPE.get(str(dtype).removeprefix("torch."), 2))


def _scale(value, like):
    return tensor_like(value, like).to(lazy_torch().float32)


def _qlinear_matmul(m, a, x, x_scale, x_zero, w, w_scale, w_zero, y_scale, y_zero=None):
    accumulated = _exact(x, x, x_zero) @ _exact(w, x, w_zero)
    factor = _scale(x_scale, x) * _scale(w_scale, x) / _scale(y_scale, x)
    return _requantized(accumulated, factor, y_zero, x.dtype)


def _qlinear_conv(m, a, x, x_scale, x_zero, w, w_scale, w_zero, y_scale, y_zero=None, bias=None):
    bias = tensor_like(bias, x).to(lazy_torch().float64) if bias is not None else None
    accumulated = convolution(m, a, _exact(x, x, x_zero), _weights(w, w_zero, x), bias)
    w_scale = _scale(w_scale, x)
    if w_scale.dim() == 1 and w_scale.numel() > 1:
        w_scale = w_scale.reshape(1, -1, *[1] * (accumulated.dim() - 2))
    factor = _scale(x_scale, x) * w_scale / _scale(y_scale, x)
    return _requantized(accumulated, factor, y_zero, x.dtype)


QUANTIZE_OPS = {name: on_device(fn) for name, fn in {
    "QuantizeLinear": _quantize_linear,
    "DequantizeLinear": _dequantize_linear,
    "DynamicQuantizeLinear": _dynamic_quantize_linear,
    "MatMulInteger": _matmul_integer,
    "ConvInteger": _conv_integer,
    "QLinearMatMul": _qlinear_matmul,
    "QLinearConv": _qlinear_conv,
}.items()}
