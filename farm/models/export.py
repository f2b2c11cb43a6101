"""ONNX export of a PyTorch module, as farm.models.native makes it: torch.onnx's dynamo exporter
first (what PyTorch recommends; it needs onnxscript), the TorchScript exporter where that fails.
What the exporters print (a graph dump of thousands of lines on some failures) is captured for
the model's `export.log`, never shown on the terminal.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import sys
import tempfile
import warnings
from typing import Any

from farm.errors import describe

EXPORT_OPSET = 17  # the TorchScript exporter's opset
DYNAMO_OPSET = 18  # the dynamo exporter's lowest


class ExportFailed(Exception):
    """No exporter turned the module into ONNX; `reason` says what each said."""

    def __init__(self, reason: str, log: str) -> None:
        super().__init__(reason)
        self.reason, self.log = reason, log


def export_onnx(torch, wrapper, examples: list, inputs: list, outputs: list[str]) -> tuple[bytes, str, str]:
    """(ONNX bytes, which exporter made them, what the exporters printed): torch.onnx's dynamo
    exporter first (PyTorch's recommendation; it needs onnxscript), the TorchScript exporter where
    that fails; every named dimension of an input dynamic. Raises ExportFailed when neither can."""
    names = [name for name, _, _ in inputs]
    dynamic = {name: {axis: dim for axis, dim in enumerate(shape) if isinstance(dim, str)} for name, shape, _ in inputs}
    failures, logs = [], []
    for exporter in ("dynamo", "torchscript"):
        buffer = io.BytesIO()
        with captured_output() as log:
            try:
                with warnings.catch_warnings(), torch.no_grad():
                    warnings.simplefilter("ignore")
                    if exporter == "dynamo":
                        shapes = _dynamic_shapes(torch, dynamic)  # the wrapper's forward(*inputs): one tuple
                        program = torch.onnx.export(wrapper, tuple(examples), dynamo=True, input_names=names,
                                                    output_names=outputs,
                                                    dynamic_shapes={"inputs": tuple(shapes[n] or None for n in names)},
                                                    opset_version=DYNAMO_OPSET)
                        data = program.model_proto.SerializeToString()
                    else:
                        torch.onnx.export(wrapper, tuple(examples), buffer, dynamo=False, opset_version=EXPORT_OPSET,
                                          input_names=names, output_names=outputs,
                                          dynamic_axes={k: v for k, v in dynamic.items() if v})
                        data = buffer.getvalue()
            except Exception as exc:  # noqa: BLE001 - every exporter error is a reason to try the next
                root = exc  # the dynamo exporter wraps the error that says what went wrong
                while root.__cause__ is not None:
                    root = root.__cause__
                failures.append(f"{exporter}: {_ANSI.sub('', describe(root))[:300]}")
                data = None
            logs.append(f"--- torch.onnx.export, {exporter} ---\n{log.text()}")
        if data is not None:
            label = f"torch.onnx.export(dynamo={exporter == 'dynamo'})"
            if failures:
                label += f" after {'; '.join(failures)}"
            return data, label, "\n".join(logs)
    raise ExportFailed("; ".join(failures), "\n".join(logs))


_ANSI = re.compile(r"\x1b\[[0-9;]*m")  # the dynamo exporter colours its messages


def _dynamic_shapes(torch, dynamic: dict[str, dict[int, str]]) -> dict[str, dict[int, Any]]:
    """torch.export's dynamic_shapes: one Dim per dimension name (shared where inputs share it),
    named as the sweep file names it, so the ONNX file keeps the names (the batch found by name)."""
    dims: dict[str, Any] = {}
    shapes: dict[str, dict[int, Any]] = {}
    for name, axes in dynamic.items():
        shapes[name] = {}
        for axis, dim in axes.items():
            if dim not in dims:
                identifier = "".join(c if c.isalnum() else "_" for c in dim)
                dims[dim] = torch.export.Dim(identifier if identifier[:1].isalpha() else f"d_{identifier}")
            shapes[name][axis] = dims[dim]
    return shapes


class _Captured:
    def __init__(self, handle, stream) -> None:
        self.handle, self.stream = handle, stream

    def text(self) -> str:
        self.stream.flush()
        self.handle.seek(0)
        return self.handle.read().decode(errors="replace")


@contextlib.contextmanager
def captured_output():
    """This process's stdout and stderr into a temporary file while the block runs, at the
    file-descriptor level (C++ prints) and as sys.stdout / sys.stderr (Python prints and logging,
    which may not write through descriptors 1 and 2); `.text()` reads it back."""
    sys.stdout.flush(), sys.stderr.flush()
    with tempfile.TemporaryFile() as handle:
        text = io.TextIOWrapper(os.fdopen(os.dup(handle.fileno()), "wb"), errors="replace", line_buffering=True)
        saved = [os.dup(1), os.dup(2)]
        try:
            os.dup2(handle.fileno(), 1), os.dup2(handle.fileno(), 2)
            with contextlib.redirect_stdout(text), contextlib.redirect_stderr(text):
                yield _Captured(handle, text)
        finally:
            text.flush()
            os.dup2(saved[0], 1), os.dup2(saved[1], 2)
            os.close(saved[0]), os.close(saved[1])
            text.close()




