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
from typing import Any

import numpy as np

from farm.errors import ConfigError, first_line
from farm.precision.checks import TransformUnsupported, census, one_line, transform_label
from farm.records import Calibration

SUBGRAPH_OPS = ("If", "Loop", "Scan")
WEIGHTED_OPS = ("Conv", "ConvTranspose", "MatMul", "Gemm")  # what int8 quantizes: its gains are there


def to_int8(model_path: Path, output: Path, batches: list[dict[str, np.ndarray]], temp_area: Path) -> dict:
    import onnx

    label = transform_label("int8")
    quantize_qdq(model_path, output, batches, temp_area)
    before, after = census(onnx.load(str(model_path))), census(onnx.load(str(output)))
    inside = (f"; {before.subgraph_nodes} of its {before.nodes} nodes are inside If/Loop/Scan subgraphs, "
              "which quantize_static does not enter") if before.subgraph_nodes else ""
    weighted = sum(before.ops[op] for op in WEIGHTED_OPS)
    if not after.quantized_nodes or (weighted and not after.quantized_weights):
        ops = ", ".join(sorted(op for op in before.ops if op not in SUBGRAPH_OPS)[:8])
        why = inside or f"; farm quantizes the inputs of {'/'.join(WEIGHTED_OPS)} nodes, and it has none ({ops})"
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


def quantize_qdq(model_path: Path, output: Path, batches: list[dict[str, np.ndarray]], temp_area: Path,
                 op_types: tuple[str, ...] | None = WEIGHTED_OPS) -> None:
    """ONNX Runtime's static Q/DQ quantization, its temporary files (the model with shapes
    inferred, the augmented calibration model: easily tens of MB) in a folder of the warehouse's
    temp area that is removed afterwards, whatever happens, instead of the system's temp folder.
    `op_types`: the operators whose inputs get Q/DQ pairs (None: quantize_static's own default,
    what benchmarks/int8_placement.py holds farm's placement against)."""
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
        # Q/DQ on the weighted operators' inputs only (TensorRT's first placement recommendation):
        # quantize_static's default also wraps Add, Mul, Reshape, Transpose, Gather,
        # Softmax ..., whose Q/DQ pairs an engine must run or fuse around. On ONNX Runtime CPU this
        # placement ran a 2-layer BERT in 0.56 of the time and ResNet-18 in 0.96, both at least as
        # close to fp32 (benchmarks/int8_placement.py; docs/precision.md).
        quantize_static(onnx.load(str(model_path)), str(output), Reader(), quant_format=QuantFormat.QDQ,
                        activation_type=QuantType.QInt8, weight_type=QuantType.QInt8,
                        extra_options={"ActivationSymmetric": True, "WeightSymmetric": True},
                        **({"op_types_to_quantize": list(op_types)} if op_types else {}))
    finally:
        tempfile.tempdir = saved
        shutil.rmtree(folder, ignore_errors=True)


def calibration_batches(calibration: Calibration, inputs, shapes: dict[str, tuple[int, ...]],
                        seed: int) -> list[dict[str, np.ndarray]]:
    """Calibration feeds, one dict per batch, checked against the model's inputs. Only what they
    need is read: the first samples x batch rows of the arrays the inputs name (an .npz's other
    members, its rows beyond those, a folder's other files are never inflated)."""
    batch = shapes[inputs[0].name][0]
    rows = calibration.samples * batch
    if calibration.data:
        arrays = _load_arrays(Path(calibration.base_dir) / calibration.data, inputs, rows)
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
    count = min(len(arrays[spec.name]) for spec in inputs)
    return [{spec.name: arrays[spec.name][i:i + batch].astype(spec.dtype) for spec in inputs}
            for i in range(0, max(count - batch + 1, 1), batch)][:calibration.samples]


NPZ_HOWTO = "numpy.savez(path, INPUT_NAME=array) writes one (an array per input, the samples along axis 0)"


def _load_arrays(path: Path, inputs, rows: int) -> dict[str, np.ndarray]:
    """Per input name, the first `rows` samples of its array in the .npz / .npy file or folder of
    .npy files (one sample each) at `path`; an .npz's members no input names are left unread."""
    if path.is_file():
        with path.open("rb") as handle:
            head = handle.read(6)
            if head == b"\x93NUMPY":  # one .npy array: the input of a single-input model
                if len(inputs) != 1:
                    raise ConfigError(f"{path}: one .npy array calibrates a single-input model; this one has "
                                      f"{len(inputs)} inputs: use an .npz ({NPZ_HOWTO})")
                handle.seek(0)
                return {inputs[0].name: _npy_rows(handle, rows, path, path.stat().st_size)}
        if not head.startswith(b"PK"):  # an .npz is a zip archive
            kind = "text" if head and all(32 <= b < 127 or b in (9, 10, 13) for b in head) else "not a zip archive"
            raise ConfigError(f"{path}: calibration data must be an .npz of NumPy arrays, and this file is {kind}; "
                              f"{NPZ_HOWTO}")
        return _npz_rows(path, inputs, rows)
    if path.is_dir():
        files = sorted(path.glob("*.npy"))
        if not files:
            raise ConfigError(f"{path}: no .npy files in the calibration folder")
        if len(inputs) != 1:
            raise ConfigError(f"{path}: a folder of .npy files calibrates a single-input model; use an .npz "
                              "with one array per input name")
        stacked = []
        for file in files[:rows]:
            with file.open("rb") as handle:
                stacked.append(_npy_rows(handle, None, file, file.stat().st_size))
        return {inputs[0].name: np.stack(stacked)}
    raise ConfigError(f"{path}: no such calibration file or folder")


def _npz_rows(path: Path, inputs, rows: int) -> dict[str, np.ndarray]:
    """The first `rows` rows of the .npz members named as the inputs (numpy.savez's `NAME.npy`)."""
    import zipfile

    try:
        with zipfile.ZipFile(path) as archive:
            members = {name.removesuffix(".npy"): name for name in archive.namelist()}
            found = {}
            for spec in inputs:
                if spec.name in members:
                    member = archive.getinfo(members[spec.name])
                    with archive.open(member) as stream:
                        found[spec.name] = _npy_rows(stream, rows, f"{path} ({member.filename})", member.file_size)
    except (zipfile.BadZipFile, OSError, EOFError, ValueError) as exc:
        raise ConfigError(f"{path}: cannot read calibration data as .npz ({first_line(exc)}); {NPZ_HOWTO}") from None
    missing = [spec.name for spec in inputs if spec.name not in found]
    if missing:
        raise ConfigError(f"{path}: no calibration data for input {missing[0]!r}; found: "
                          f"{', '.join(members) or 'nothing'}")
    return found


def _npy_rows(stream, rows: int | None, what: Any, stored: int) -> np.ndarray:
    """The first `rows` rows (all: None) of the .npy array `stream` is at, read from its header on:
    the rest of the array is never read, nor more than the `stored` bytes there are (a header may
    claim any shape). No pickled objects (a calibration file runs no code)."""
    fmt = np.lib.format
    try:
        version = fmt.read_magic(stream)
        if version == (1, 0):
            shape, fortran, dtype = fmt.read_array_header_1_0(stream)
        elif version == (2, 0):
            shape, fortran, dtype = fmt.read_array_header_2_0(stream)
        else:
            raise ValueError(f".npy format {version[0]}.{version[1]}: save it with numpy.save")
        if dtype.hasobject:
            raise ValueError("it holds Python objects, which are never unpickled here")
        if fortran and len(shape) > 1:
            raise ValueError("it is stored in Fortran order: save numpy.ascontiguousarray(array)")
        count = shape[0] if shape and (rows is None or shape[0] <= rows) else rows if shape else 1
        size = count * int(np.prod(shape[1:], dtype=np.int64)) * dtype.itemsize
        data = stream.read(size) if size <= stored - stream.tell() else b""
        if len(data) != size:
            raise ValueError(f"the array is cut short: its header needs {size:,} bytes, "
                             f"{max(stored - stream.tell(), 0):,} follow it")
    except Exception as exc:  # noqa: BLE001 - numpy raises many kinds for a bad file: one line naming it
        raise ConfigError(f"{what}: cannot read it as a NumPy .npy array ({first_line(exc)})") from None
    return np.frombuffer(data, dtype).reshape((count, *shape[1:]) if shape else ())


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
    files = _image_files(folder)
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


IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".webp")


def _image_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)


def _files_read(calibration: Calibration, rows: int) -> list[Path]:
    """The files `calibration_batches` reads: the .npz or .npy file, or a folder's first `rows`
    .npy files or images (a folder's other files are not the calibration's)."""
    if calibration.data:
        path = Path(calibration.base_dir) / calibration.data
        return [path] if path.is_file() else sorted(path.glob("*.npy"))[:rows] if path.is_dir() else []
    if calibration.images:
        folder = Path(calibration.base_dir) / calibration.images
        return _image_files(folder)[:rows] if folder.is_dir() else []
    return []


def calibration_hash(calibration: Calibration, inputs, shapes, seed: int) -> str:
    """The int8 model's cache key: the calibration settings, the seed, the shapes and the contents
    of the files calibration reads (streamed: a large .npz is never held in memory for this)."""
    digest = hashlib.sha256(json.dumps({k: v for k, v in dataclasses.asdict(calibration).items()
                                        if k != "base_dir"}, sort_keys=True).encode())
    digest.update(str(seed).encode())
    for file in _files_read(calibration, calibration.samples * shapes[inputs[0].name][0]):
        digest.update(file.name.encode())
        crc = 0
        with file.open("rb") as handle:
            while chunk := handle.read(1 << 20):
                crc = zlib.crc32(chunk, crc)
        digest.update(crc.to_bytes(4, "little"))
    digest.update(json.dumps({k: list(v) for k, v in shapes.items()}, sort_keys=True).encode())
    return digest.hexdigest()
