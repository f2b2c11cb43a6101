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
from collections.abc import Callable
from pathlib import Path
from typing import Any

from farm.errors import describe
from farm.records import BATCH_NAMES

EXPORT_OPSET = 17  # the TorchScript exporter's opset
DYNAMO_OPSET = 18  # the dynamo exporter's lowest


class ExportFailed(Exception):
    """No exporter turned the module into ONNX; `reason` says what each said."""

    def __init__(self, reason: str, log: str) -> None:
        super().__init__(reason)
        self.reason, self.log = reason, log


def export_onnx(torch, wrapper, examples: list, inputs: list, outputs: list[str],
                check: Callable[[bytes], str | None] | None = None) -> tuple[bytes, str, str, str | None]:
    """(ONNX bytes, which exporter made them, what the exporters printed, why the file runs at the
    traced batch only or None): torch.onnx's dynamo exporter first (PyTorch's recommendation; it
    needs onnxscript), the TorchScript exporter where that fails; every named dimension of an input
    dynamic. `check` says of a file why its batch is fixed (None: it runs at another batch); where
    the dynamo exporter's is, the TorchScript exporter is tried too, and a file that passes is
    taken; where none does, the first file made, with the reason. Raises ExportFailed when no
    exporter makes a file."""
    names = [name for name, _, _ in inputs]
    dynamic = {name: {axis: dim for axis, dim in enumerate(shape) if isinstance(dim, str)} for name, shape, _ in inputs}
    failures, logs = [], []
    fixed: tuple[bytes, str, str] | None = None  # (bytes, label, why) of the first file whose batch is fixed
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
        if data is None:
            continue
        label = f"torch.onnx.export(dynamo={exporter == 'dynamo'})"
        if failures:
            label += f" after {'; '.join(failures)}"
        why = None
        if check is not None:
            with captured_output() as log:  # ONNX Runtime logs the error of a file that does not run
                why = check(data)
                logs.append(f"--- the file at another batch: {why or 'runs'} ---\n{log.text()}")
        if why is None:
            return data, label, "\n".join(logs), None
        failures.append(f"{exporter}: fixed the batch")
        fixed = fixed or (data, label, why)
    if fixed is not None:
        return fixed[0], fixed[1], "\n".join(logs), fixed[2]
    raise ExportFailed("; ".join(failures), "\n".join(logs))


# transformers' mixture-of-experts layers run their experts through an implementation chosen on the
# model's config; its default (grouped_mm, a custom operator) has no ONNX form, and "eager" loops
# over the experts a batch reached (data-dependent: torch.export refuses it). "batched_mm" gathers
# each token's experts' weights and multiplies in one batched matmul: the same products, exportable.
EXPORTABLE_EXPERTS = "batched_mm"


def exportable_experts(net) -> str | None:
    """Where `net` holds a transformers model whose experts run through another implementation than
    EXPORTABLE_EXPERTS, switch it to that one for the export: a note saying so, else None."""
    for module in net.modules():
        config = getattr(module, "config", None)
        current = getattr(config, "_experts_implementation", None)
        if current is None or current == EXPORTABLE_EXPERTS or not hasattr(module, "set_experts_implementation"):
            continue
        try:
            module.set_experts_implementation(EXPORTABLE_EXPERTS)
        except (ValueError, ImportError, AttributeError, RuntimeError):  # a class that does not let it be set
            continue
        if getattr(module.config, "_experts_implementation", None) != EXPORTABLE_EXPERTS:
            continue  # a model without experts: every transformers config names an implementation
        return (f"experts exported as transformers' {EXPORTABLE_EXPERTS} (the model's {current} has no ONNX form); "
                "PyTorch cells run the model's own")
    return None


def batch_check(torch, wrapper, inputs: list[tuple[str, tuple, str]], examples: list, outputs: list[str],
                batch: int) -> Callable[[bytes], str | None] | None:
    """What checks an exported file at `batch` (`examples`: the inputs at it), a batch it was not
    traced at, for export_onnx: why the exporter fixed the batch (a batch axis that is a constant
    in the file's inputs; ONNX Runtime refusing the file at `batch`, or giving outputs of other
    shapes than the module's), None where it runs. None where no input has a batch axis."""
    axes = {name: [axis for axis, d in enumerate(shape) if isinstance(d, str) and d.strip().lower() in BATCH_NAMES]
            for name, shape, _ in inputs}
    if not any(axes.values()):
        return None

    def check(data: bytes) -> str | None:
        import onnx

        model = onnx.load_from_string(data)
        for value in model.graph.input:
            dim_list = value.type.tensor_type.shape.dim
            for axis in axes.get(value.name, []):
                if axis < len(dim_list) and dim_list[axis].HasField("dim_value") and dim_list[axis].dim_value > 0:
                    return (f"input {value.name!r} axis {axis} is the constant {dim_list[axis].dim_value} in the "
                            "exported graph (the module reads its batch as a Python number: x.shape[0] in an if or a "
                            "loop, a reshape to a constant)")
        try:
            import onnxruntime
        except ImportError:
            return None
        feeds = {name: t.numpy() for (name, _, _), t in zip(inputs, examples) if t.dtype != torch.bfloat16}
        if len(feeds) < len(inputs):
            return None  # numpy has no bfloat16 to feed ONNX Runtime with: the shapes above are what is checked
        try:
            options = onnxruntime.SessionOptions()
            options.log_severity_level = 3
            session = onnxruntime.InferenceSession(data, options, providers=["CPUExecutionProvider"])
            got = session.run(None, feeds)
        except Exception as exc:  # noqa: BLE001 - whatever the runtime says, the file does not run at this batch
            return f"ONNX Runtime cannot run it at batch {batch} ({describe(exc)[:240]})"
        try:
            with torch.no_grad():
                expected = wrapper(*examples)
        except Exception:  # noqa: BLE001 - the module itself does not run at this batch: nothing to compare
            return None
        if len(got) != len(expected):
            return (f"at batch {batch} the module returns {len(expected)} tensors and the export "
                    f"{len(got)} (a list with one entry per image, say)")
        for name, value, tensor in zip(outputs, got, expected):
            if tuple(value.shape) != tuple(tensor.shape):
                return (f"at batch {batch} its output {name!r} has shape {list(value.shape)}, the module's "
                        f"{list(tensor.shape)}")
        return None

    return check


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


# set in an export process (farm.models.parallel_export): what a block captured stays in a file there
# when the process is killed in it, for its model's reason
CAPTURE_DIR: Path | None = None


@contextlib.contextmanager
def captured_output():
    """This process's stdout and stderr into a temporary file while the block runs, at the
    file-descriptor level (C++ prints) and as sys.stdout / sys.stderr (Python prints and logging,
    which may not write through descriptors 1 and 2); `.text()` reads it back."""
    sys.stdout.flush(), sys.stderr.flush()
    kept = tempfile.NamedTemporaryFile(dir=CAPTURE_DIR, prefix="captured-") if CAPTURE_DIR else None
    with kept or tempfile.TemporaryFile() as handle:
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




