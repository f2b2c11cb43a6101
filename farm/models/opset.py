"""ONNX files older than opset 7 (the onnx wheel's backend-test graphs at opsets 1-6, early model-zoo
exports), which ONNX Runtime does not promise to run ("only guarantees support for models stamped with
opset version 7 or above") and for several operators of which it has no kernel (Add, Mul and PRelu at
opset 6, AveragePool at opset 1): ONNX Runtime runs them, and the fp32 reference is taken from them,
converted to opset 7 by ONNX's own version converter. The converter rewrites each operator to its newer
definition (opset 6's Add with `broadcast` and `axis` attributes becomes numpy broadcasting, ...);
the graph computes the same values, once farm gives a per-channel PRelu slope the shape opset 7
broadcasts (the converter does not). farm's interpreter runs the conversion too. The converted file
is cached by the original's bytes; the cells that ran it and the accuracy rows judged against it say
so."""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path

from farm.errors import first_line
from farm.files import write_atomic

ORT_OPSET_FLOOR = 7  # the oldest opset of the default domain ONNX Runtime guarantees


class ConversionFailed(ValueError):
    """ONNX's version converter could not take the model to ORT_OPSET_FLOOR (the message says why)."""


def default_opset(path: Path) -> int | None:
    """The model's opset of the default ONNX domain (None: it imports none)."""
    stat = Path(path).stat()
    return _default_opset(str(path), stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=64)
def _default_opset(path: str, _mtime_ns: int, _size: int) -> int | None:
    # cached by the file's identity: a large model is parsed once a process, not at every check
    import onnx

    return model_opset(onnx.load(path, load_external_data=False))


def model_opset(model) -> int | None:
    """A loaded model's opset of the default ONNX domain (None: it imports none)."""
    return next((entry.version for entry in model.opset_import if entry.domain in ("", "ai.onnx")), None)


def conversion_note(before: int) -> str:
    return (f"opset {before} converted to {ORT_OPSET_FLOOR} by onnx.version_converter: ONNX Runtime guarantees "
            f"opset {ORT_OPSET_FLOOR} and newer")


def converted_file(path: Path, cache_dir: Path) -> Path:
    """Where the conversion of the model at `path` is cached (it exists once made)."""
    digest = hashlib.sha256(Path(path).read_bytes()).hexdigest()[:24]
    return cache_dir / "opset" / f"{digest}.opset{ORT_OPSET_FLOOR}.ir4.v2.onnx"  # v2: PRelu's slopes per channel


def for_onnxruntime(path: Path, cache_dir: Path) -> tuple[Path, str | None]:
    """(the file ONNX Runtime runs for the model at `path`, what was done in words or None): the
    model itself at opset 7 or newer, else its conversion (made once, cached under `cache_dir`).
    Raises ConversionFailed saying why where the converter cannot take it."""
    before = default_opset(path)
    if before is None or before >= ORT_OPSET_FLOOR:
        return path, None
    converted = converted_file(path, cache_dir)
    if not converted.is_file():
        import onnx
        from onnx import version_converter

        try:
            original = onnx.load(str(path))
            model = version_converter.convert_version(original, ORT_OPSET_FLOOR)
            _prelu_slopes_per_channel(model, original)
            # IR 4 lets initializers be other than graph inputs, which ONNX Runtime's quantizer makes;
            # the IR 3 of these old files is kept by the converter
            model.ir_version = max(model.ir_version, 4)
            onnx.checker.check_model(model)
        except Exception as exc:  # the converter's own error, said in one line
            raise ConversionFailed(f"the model is at opset {before}, older than ONNX Runtime guarantees "
                                   f"({ORT_OPSET_FLOOR}), and ONNX's version converter could not convert it: "
                                   f"{first_line(exc)[:200]}") from exc
        write_atomic(converted, lambda tmp: onnx.save(model, str(tmp)), make_parents=True)
    return converted, conversion_note(before)


def runnable(path: Path, cache_dir: Path) -> tuple[Path, str | None]:
    """`for_onnxruntime`, or the file as given where the converter refuses it: ONNX Runtime may still
    run it, and where it cannot, its own error says why."""
    try:
        return for_onnxruntime(path, cache_dir)
    except ConversionFailed:
        return path, None


def _prelu_slopes_per_channel(model, original) -> None:
    """Before opset 7 PRelu applies a slope of shape [C] per channel (axis 1, as PyTorch's PReLU);
    from 7 a slope broadcasts from the right, and the version converter leaves it as it was, which
    fails for any input of rank 3 or more. Such a slope (an initializer) becomes [C, 1, ...]."""
    from onnx import numpy_helper, shape_inference

    inferred = shape_inference.infer_shapes(original).graph
    ranks = {v.name: len(v.type.tensor_type.shape.dim) for v in [*inferred.input, *inferred.value_info]
             if v.type.tensor_type.HasField("shape")}
    initializers = {t.name: t for t in model.graph.initializer}
    for node in (n for n in model.graph.node if n.op_type == "PRelu" and len(n.input) == 2):
        slope, rank = initializers.get(node.input[1]), ranks.get(node.input[0], 0)
        if slope is None or rank < 3 or len(slope.dims) != 1 or slope.dims[0] == 1:
            continue
        name = f"{slope.name}_per_channel"
        if name not in initializers:
            values = numpy_helper.to_array(slope).reshape([slope.dims[0]] + [1] * (rank - 2))
            initializers[name] = numpy_helper.from_array(values, name)
            model.graph.initializer.append(initializers[name])
        node.input[1] = name
