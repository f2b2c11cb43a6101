"""int8: explicit quantization with ONNX Runtime's `quantize_static`, Q/DQ format, symmetric
activations and weights (the form TensorRT's parser accepts), calibrated on the data the sweep
file names (an .npz, a folder of .npy files, a folder of images) or, when it names none, on
seeded synthetic data, which the results then say."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
import tempfile
import zlib
from pathlib import Path

import numpy as np

from farm.errors import ConfigError, first_line
from farm.precision.checks import TransformUnsupported, census, one_line, transform_label
from farm.records import Calibration

SUBGRAPH_OPS = ("If", "Loop", "Scan")
WEIGHTED_OPS = ("Conv", "ConvTranspose", "MatMul", "Gemm")  # int8's gains: a model with any gets int8 weights


def to_int8(model_path: Path, output: Path, batches: list[dict[str, np.ndarray]], temp_area: Path) -> dict:
    import onnx

    label = transform_label("int8")
    _quantize(model_path, output, batches, temp_area)
    before, after = census(onnx.load(str(model_path))), census(onnx.load(str(output)))
    inside = (f"; {before.subgraph_nodes} of its {before.nodes} nodes are inside If/Loop/Scan subgraphs, "
              "which quantize_static does not enter") if before.subgraph_nodes else ""
    weighted = sum(before.ops[op] for op in WEIGHTED_OPS)
    if not after.quantized_nodes or (weighted and not after.quantized_weights):
        ops = ", ".join(sorted(op for op in before.ops if op not in SUBGRAPH_OPS)[:8])
        why = inside or f"; none of its operators ({ops}) has a quantized form in quantize_static"
        what = "nothing was quantized" if not after.quantized_nodes else (
            f"nothing was quantized: none of its {weighted} Conv/MatMul/Gemm nodes got int8 weights")
        raise TransformUnsupported(one_line(f"{label}: {what} ({after.qdq_pairs} Q/DQ pairs, "
                                            f"{after.quantized_nodes} quantized nodes){why}"))
    summary = (f"int8: {after.qdq_pairs} Q/DQ pairs, {after.quantized_weights} quantized weights, "
               f"{after.quantized_nodes} quantized nodes"
               + (f"; {before.subgraph_nodes} nodes in {before.subgraphs} subgraphs left fp32 "
                  "(quantize_static does not enter subgraphs)" if before.subgraph_nodes else ""))
    return {"summary": summary, "tool": label.split("(")[1].rstrip(")"), "counts": {
        "tensors_fp16": 0, "nodes_kept_fp32": before.subgraph_nodes, "nodes_kept_fp32_range": 0,
        "subgraphs": before.subgraphs, "qdq_pairs": after.qdq_pairs, "quantized_nodes": after.quantized_nodes}}


def _quantize(model_path: Path, output: Path, batches: list[dict[str, np.ndarray]], temp_area: Path) -> None:
    """ONNX Runtime's static Q/DQ quantization, its temporary files (the model with shapes
    inferred, the augmented calibration model: easily tens of MB) in a folder of the warehouse's
    temp area that is removed afterwards, whatever happens, instead of the system's temp folder."""
    import onnx
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.items = iter(batches)

        def get_next(self):
            return next(self.items, None)

    folder = Path(tempfile.mkdtemp(prefix="quantize.", dir=temp_area))
    saved = tempfile.tempdir
    tempfile.tempdir = str(folder)  # quantize_static's TemporaryDirectory()s land here
    try:
        # A ModelProto, not the path: given a path, the quantizer writes `<model>-inferred.onnx`
        # beside the model (the user's folder); given a model, into its temporary folder.
        quantize_static(onnx.load(str(model_path)), str(output), Reader(), quant_format=QuantFormat.QDQ,
                        activation_type=QuantType.QInt8, weight_type=QuantType.QInt8,
                        extra_options={"ActivationSymmetric": True, "WeightSymmetric": True})
    finally:
        tempfile.tempdir = saved
        shutil.rmtree(folder, ignore_errors=True)


def calibration_batches(calibration: Calibration, inputs, shapes: dict[str, tuple[int, ...]],
                        seed: int) -> list[dict[str, np.ndarray]]:
    """Calibration feeds, one dict per batch, checked against the model's inputs."""
    if calibration.data:
        arrays = _load_arrays(Path(calibration.base_dir) / calibration.data, inputs)
    elif calibration.images:
        arrays = _load_images(Path(calibration.base_dir) / calibration.images, calibration, inputs, shapes)
    else:
        from farm.models import make_feeds

        return [make_feeds(inputs, shapes, seed + 1000 + i) for i in range(calibration.samples)]
    for spec in inputs:
        array = arrays.get(spec.name)
        expected = shapes[spec.name][1:]
        if array is None:
            raise ConfigError(f"{calibration.data or calibration.images}: no calibration data for input "
                              f"{spec.name!r}; found: {', '.join(arrays) or 'nothing'}")
        if tuple(array.shape[1:]) != tuple(expected):
            raise ConfigError(f"{calibration.data or calibration.images}: calibration data for {spec.name!r} has "
                              f"shape {tuple(array.shape)}, the model needs (N, {', '.join(map(str, expected))})")
        if np.dtype(array.dtype).kind != np.dtype(spec.dtype).kind:
            raise ConfigError(f"{calibration.data or calibration.images}: calibration data for {spec.name!r} is "
                              f"{array.dtype}, the model's input is {spec.dtype}")
        if array.dtype.kind == "f" and not np.isfinite(array).all():
            bad = int(array.size - np.isfinite(array).sum())
            raise ConfigError(f"{calibration.data or calibration.images}: calibration data for {spec.name!r} holds "
                              f"{bad} of {array.size} values that are NaN or infinite: calibration takes the ranges "
                              "of the values the model meets; give finite data")
    count = min(len(a) for a in arrays.values())
    batch = shapes[inputs[0].name][0]
    return [{spec.name: arrays[spec.name][i:i + batch].astype(spec.dtype) for spec in inputs}
            for i in range(0, max(count - batch + 1, 1), batch)][:calibration.samples]


NPZ_HOWTO = "numpy.savez(path, INPUT_NAME=array) writes one (an array per input, the samples along axis 0)"


def _load_arrays(path: Path, inputs) -> dict[str, np.ndarray]:
    if path.is_file():
        with path.open("rb") as handle:
            head = handle.read(6)
        if head == b"\x93NUMPY":  # one .npy array: the input of a single-input model
            if len(inputs) != 1:
                raise ConfigError(f"{path}: one .npy array calibrates a single-input model; this one has "
                                  f"{len(inputs)} inputs: use an .npz ({NPZ_HOWTO})")
            return {inputs[0].name: _read_npy(path)}
        if not head.startswith(b"PK"):  # an .npz is a zip archive
            kind = "text" if head and all(32 <= b < 127 or b in (9, 10, 13) for b in head) else "not a zip archive"
            raise ConfigError(f"{path}: calibration data must be an .npz of NumPy arrays, and this file is {kind}; "
                              f"{NPZ_HOWTO}")
        try:
            with np.load(path) as npz:
                return {k: npz[k] for k in npz.files}
        except Exception as exc:  # noqa: BLE001 - numpy raises many kinds for a bad file: one line naming it
            raise ConfigError(f"{path}: cannot read calibration data as .npz ({first_line(exc)}); {NPZ_HOWTO}") from None
    if path.is_dir():
        files = sorted(path.glob("*.npy"))
        if not files:
            raise ConfigError(f"{path}: no .npy files in the calibration folder")
        stacked = [_read_npy(file) for file in files]
        if len(inputs) != 1:
            raise ConfigError(f"{path}: a folder of .npy files calibrates a single-input model; use an .npz "
                              "with one array per input name")
        return {inputs[0].name: np.stack(stacked)}
    raise ConfigError(f"{path}: no such calibration file or folder")


def _read_npy(file: Path) -> np.ndarray:
    try:
        return np.load(file)  # allow_pickle stays off: a calibration file runs no code
    except Exception as exc:  # noqa: BLE001 - numpy raises many kinds for a bad file: one line naming it
        raise ConfigError(f"{file}: cannot read it as a NumPy .npy array ({first_line(exc)})") from None


def _load_images(folder: Path, calibration: Calibration, inputs, shapes) -> dict[str, np.ndarray]:
    from PIL import Image, UnidentifiedImageError

    if not folder.is_dir():
        raise ConfigError(f"{folder}: no such image folder")
    shape = tuple(shapes[inputs[0].name])
    if len(inputs) != 1 or len(shape) != 4 or shape[1] not in (1, 3) or np.dtype(inputs[0].dtype).kind != "f":
        what = (f"{len(inputs)} inputs" if len(inputs) != 1 else
                f"input {inputs[0].name!r} of shape {shape} and type {inputs[0].dtype}")
        raise ConfigError(f"{folder}: images calibrate a model of one image input (N, 3 or 1, H, W, floats); this one "
                          f"has {what}: give `data` instead, an .npz ({NPZ_HOWTO})")
    files = sorted(p for p in folder.iterdir() if p.suffix.lower() in (".jpg", ".jpeg", ".png", ".bmp", ".webp"))
    if not files:
        raise ConfigError(f"{folder}: no images (.jpg, .jpeg, .png, .bmp, .webp) in the calibration folder")
    spec = inputs[0]
    _, channels, height, width = shapes[spec.name]
    size = calibration.size or (height, width)
    mean, std = np.asarray(calibration.mean, np.float32), np.asarray(calibration.std, np.float32)
    if channels == 1:  # a grey input: the channels' means
        mean, std = mean.mean(keepdims=True), std.mean(keepdims=True)
    images = []
    for file in files[:calibration.samples * shapes[spec.name][0]]:
        try:
            with Image.open(file) as image:
                pixels = np.asarray(image.convert("RGB").resize((size[1], size[0])), dtype=np.float32) / 255.0
            if channels == 1:  # a grey input: the image's luminance (ITU-R 601, as PIL's "L")
                pixels = (pixels @ np.asarray([0.299, 0.587, 0.114], np.float32))[..., None]
        except (UnidentifiedImageError, OSError) as exc:
            raise ConfigError(f"{file}: cannot read the image: {exc}") from None
        pixels = (pixels - mean) / std
        images.append(pixels.transpose(2, 0, 1))
    return {spec.name: np.stack(images).astype(np.float32)}


def calibration_hash(calibration: Calibration, inputs, shapes, seed: int) -> str:
    digest = hashlib.sha256(json.dumps({k: v for k, v in dataclasses.asdict(calibration).items()
                                        if k != "base_dir"}, sort_keys=True).encode())
    digest.update(str(seed).encode())
    for root in (calibration.data, calibration.images):
        if root:
            path = Path(calibration.base_dir) / root
            files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else []
            for file in files:
                digest.update(file.name.encode())
                digest.update(zlib.crc32(file.read_bytes()).to_bytes(4, "little"))
    digest.update(json.dumps({k: list(v) for k, v in shapes.items()}, sort_keys=True).encode())
    return digest.hexdigest()
