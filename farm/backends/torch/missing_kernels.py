"""PyTorch's own word that it has no kernel for what a cell asks (an operator on the tensors' device,
or at the cell's dtype): the torch backend's build turns such an error into `unsupported` with what
to do, where any other error fails the cell."""

import re

from farm.errors import first_line

_NO_KERNEL = re.compile(r"Could not run '([^']+)' with arguments from the '(\w+)' backend")
_KERNEL_LINE = re.compile(r"^(\w+): registered at .*\[kernel\]\s*$", re.M)  # the dispatcher's list of kernels
_NO_DTYPE_KERNEL = re.compile(r"\"(\w+?)(?:_cpu|_cuda)?\" not implemented for '(Half|BFloat16)'")
_LOW_DTYPE = re.compile(r"\b(?:c10::)?(Half|BFloat16|half|bfloat16|float16)\b")
_DTYPE_COMPLAINT = re.compile(r"dtype|scalar type|type \(|should be the same|only works on|not implemented for|"
                              r"[Uu]nsupported|not supported|expected", re.I)
_PRECISION_DTYPE = {"fp16": "fp16 (Half)", "bf16": "bf16 (BFloat16)"}


def _device_of(key: str) -> str:
    """'cuda', 'cpu' or the key itself, of a dispatch key (QuantizedCUDA: cuda)."""
    return "cuda" if key.endswith("CUDA") else "cpu" if key.endswith("CPU") else key.lower()


def _chain(exc: BaseException) -> list[BaseException]:
    """`exc` and the errors it wraps (torch.compile wraps the module's own in its own)."""
    seen: list[BaseException] = []
    while exc is not None and exc not in seen:
        seen.append(exc)
        exc = exc.__cause__ or exc.__context__
    return seen


def _torch_op(exc: BaseException) -> str | None:
    """The torch.nn.functional (or torch.functional) function innermost in the traceback, e.g. grid_sample."""
    found, tb = None, exc.__traceback__
    while tb is not None:
        path = tb.tb_frame.f_code.co_filename.replace("\\", "/")
        if path.endswith(("torch/nn/functional.py", "torch/functional.py")):
            found = tb.tb_frame.f_code.co_name
        tb = tb.tb_next
    return found


def quantized_for_the_cpu(module) -> str | None:
    """The `unsupported` reason for running `module` on CUDA where it holds PyTorch's quantized
    tensors (eager or FX quantization: torch.ao.nn.quantized's convolutions and linears, dynamic
    ones too), whose kernels (quantized::conv2d, quantized::linear, ...) exist for the CPU only; None
    for any other module (torchao's quantized tensors are subclasses, not these). Checked before the
    first call because such a call on CUDA can end the process (SIGSEGV) instead of raising."""
    found: list[tuple[str, object]] = []

    def visit(key: str, value) -> None:
        if isinstance(value, (tuple, list)):
            for item in value:
                visit(key, item)
        elif getattr(value, "is_quantized", False):
            found.append((key, value.dtype))

    for key, value in module.state_dict().items():
        visit(key, value)
    if not found:
        return None
    key, dtype = found[0]
    return (f"the module holds {len(found)} quantized tensor(s) of PyTorch's CPU quantization ({key}: "
            f"{str(dtype).removeprefix('torch.')}), whose operators (quantized::conv2d, quantized::linear, ...) "
            'have CPU kernels only: run this model with backends.torch.device = "cpu", or quantize it for CUDA '
            "(torchao) instead")


def unsupported_kernel(exc: BaseException, precision: str, device: str) -> str | None:
    """The `unsupported` reason where `exc`, raised running a PyTorch module on `device` ('cuda',
    'cpu') at `precision`, is PyTorch saying it has no kernel for it: an operator with no kernel
    for the tensors' device (a quantized model's quantized::conv2d on CUDA), none for the dtype
    ("cdist" not implemented for 'Half'), or fp16/bf16 tensors meeting float32 ones the module
    makes itself (grid_sample's grid); None for any other error (the cell then fails). The reason
    is one line: what PyTorch lacks, its own words, and what to do."""
    for error in _chain(exc):
        text = str(error)
        said = f"{type(error).__name__}: {first_line(error)[:240]}"
        match = _NO_KERNEL.search(text)
        if match:
            op, given = match.groups()
            kernels = _KERNEL_LINE.findall(text)
            devices = {_device_of(key) for key in kernels} & {"cpu", "cuda"}
            where = _device_of(given)
            if devices and where not in devices:
                target = "cpu" if "cpu" in devices else "cuda"
                return (f"PyTorch has no {given} kernel for {op} (its kernels: {', '.join(kernels)}; {said[:160]}): "
                        f'run this model with backends.torch.device = "{target}"')
            if kernels:
                return (f"PyTorch's {op} runs on {', '.join(kernels)} tensors only and this module gives it {given} "
                        f"ones ({said[:160]}): the module does not run on {device} as built")
            return (f"this build of PyTorch has no kernel for {op} on {given} tensors ({said[:160]}): "
                    "run the model where PyTorch has one (another device or build)")
        if precision not in _PRECISION_DTYPE:
            continue
        match = _NO_DTYPE_KERNEL.search(text)
        if match:
            return (f"PyTorch has no {_PRECISION_DTYPE[precision]} kernel for {match.group(1)} on {device} ({said}): "
                    'run this model at precision = "fp32"')
        if isinstance(error, (RuntimeError, NotImplementedError, TypeError)) and _LOW_DTYPE.search(text) \
                and _DTYPE_COMPLAINT.search(text):
            op = _torch_op(error)
            return (f"the module does not run in {precision}{f' at {op}' if op else ''} ({said}): converted to "
                    f"{precision} (its weights and inputs), it makes or keeps float32 tensors of its own, or calls "
                    f'an operator without a {precision} path; run this model at precision = "fp32"')
    return None
