"""Precision as an ONNX-to-ONNX step, shared by the backends that read precision from the model
(ONNX Runtime, TensorRT's strongly typed networks, trtexec).

- fp16: onnxconverter-common's float16 conversion, keeping numerically sensitive operators and
  (by default) the model's inputs and outputs in fp32.
- int8: explicit quantization with ONNX Runtime's `quantize_static`, Q/DQ format, symmetric
  activations and weights (the form TensorRT's parser accepts), calibrated on the data the sweep
  file names or, when it names none, on seeded synthetic data, which the results then say.
Results are cached by a hash of everything that changes them (model bytes, precision, options,
calibration data), so a second sweep does not recalibrate. Why these libraries: docs/precision.md.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import shutil
import tempfile
import time
import zlib
from pathlib import Path

import numpy as np

from farm.errors import ConfigError

TRANSFORM_VERSION = 2
TRANSFORMS = ("fp16", "int8")
# Kept in fp32 by the fp16 conversion (besides onnxconverter-common's own list): reductions and
# normalisations whose range or accumulated error fp16 does not hold.
SENSITIVE_OPS = ["LayerNormalization", "Softmax", "ReduceMean", "ReduceSum", "Pow", "Exp", "Log", "Erf", "Sqrt"]


@dataclasses.dataclass(frozen=True)
class Calibration:
    """Where int8 calibration data comes from (all None: seeded synthetic inputs)."""

    data: str | None = None  # .npz file or folder of .npy files, relative to the sweep file
    images: str | None = None  # folder of images
    size: tuple[int, int] | None = None  # images: resized to (height, width)
    mean: tuple[float, ...] = (0.485, 0.456, 0.406)
    std: tuple[float, ...] = (0.229, 0.224, 0.225)
    samples: int = 16
    base_dir: str = "."

    def describe(self) -> str:
        if self.data:
            return f"calibrated on {self.data}"
        if self.images:
            return f"calibrated on images in {self.images}"
        return f"calibrated on seeded synthetic data ({self.samples} samples): no calibration data given"


@dataclasses.dataclass
class Transformed:
    path: Path
    seconds: float  # time of the transform, 0 when it came from the cache
    cached: bool
    calibration: str | None


def transform(model_path: Path, model_sha256: str, precision: str, inputs, shapes: dict[str, tuple[int, ...]],
              calibration: Calibration, keep_io_types: bool, cache_dir: Path, seed: int) -> Transformed:
    """The model converted to `precision` (cached by content hash)."""
    calibration_hash = _calibration_hash(calibration, inputs, shapes, seed) if precision == "int8" else None
    key = hashlib.sha256(json.dumps({
        "model": model_sha256, "precision": precision, "keep_io_types": keep_io_types,
        "calibration": calibration_hash, "version": TRANSFORM_VERSION, "sensitive": SENSITIVE_OPS,
    }, sort_keys=True).encode()).hexdigest()[:24]
    path = cache_dir / "precision" / f"{key}.{precision}.onnx"
    described = calibration.describe() if precision == "int8" else None
    if path.is_file():
        return Transformed(path, 0.0, True, described)
    from farm.warehouse import TEMP_DIR_NAME

    temp_area = cache_dir / TEMP_DIR_NAME  # emptied by the next sweep if this one is killed
    path.parent.mkdir(parents=True, exist_ok=True)
    temp_area.mkdir(parents=True, exist_ok=True)
    tmp = temp_area / f"{path.name}.{os.getpid()}.tmp"
    start = time.perf_counter()
    try:
        if precision == "fp16":
            import onnx
            from onnxconverter_common import float16

            model = onnx.load(str(model_path))
            converted = float16.convert_float_to_float16(
                model, keep_io_types=keep_io_types, op_block_list=list(float16.DEFAULT_OP_BLOCK_LIST) + SENSITIVE_OPS)
            onnx.save(_consistent_casts(converted), str(tmp))
        elif precision == "int8":
            _quantize(model_path, tmp, calibration_batches(calibration, inputs, shapes, seed), temp_area)
        else:
            raise ValueError(f"no ONNX transform for {precision}")
        seconds = time.perf_counter() - start
        os.replace(tmp, path)
    finally:  # a failed transform leaves no partial file (on a full disk it would keep it full)
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
    return Transformed(path, seconds, False, described)


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
    count = min(len(a) for a in arrays.values())
    batch = shapes[inputs[0].name][0]
    return [{spec.name: arrays[spec.name][i:i + batch].astype(spec.dtype) for spec in inputs}
            for i in range(0, max(count - batch + 1, 1), batch)][:calibration.samples]


def _load_arrays(path: Path, inputs) -> dict[str, np.ndarray]:
    if path.is_file():
        try:
            with np.load(path) as npz:
                return {k: npz[k] for k in npz.files}
        except Exception as exc:
            raise ConfigError(f"{path}: cannot read calibration data as .npz: {exc}") from None
    if path.is_dir():
        files = sorted(path.glob("*.npy"))
        if not files:
            raise ConfigError(f"{path}: no .npy files in the calibration folder")
        stacked = []
        for file in files:
            try:
                stacked.append(np.load(file))
            except Exception as exc:
                raise ConfigError(f"{file}: cannot read calibration array: {exc}") from None
        if len(inputs) != 1:
            raise ConfigError(f"{path}: a folder of .npy files calibrates a single-input model; use an .npz "
                              "with one array per input name")
        return {inputs[0].name: np.stack(stacked)}
    raise ConfigError(f"{path}: no such calibration file or folder")


def _load_images(folder: Path, calibration: Calibration, inputs, shapes) -> dict[str, np.ndarray]:
    from PIL import Image, UnidentifiedImageError

    if not folder.is_dir():
        raise ConfigError(f"{folder}: no such image folder")
    files = sorted(p for p in folder.iterdir() if p.suffix.lower() in (".jpg", ".jpeg", ".png", ".bmp", ".webp"))
    if not files:
        raise ConfigError(f"{folder}: no images (.jpg, .jpeg, .png, .bmp, .webp) in the calibration folder")
    spec = inputs[0]
    _, channels, height, width = shapes[spec.name]
    size = calibration.size or (height, width)
    images = []
    for file in files[:calibration.samples * shapes[spec.name][0]]:
        try:
            with Image.open(file) as image:
                pixels = np.asarray(image.convert("RGB").resize((size[1], size[0])), dtype=np.float32) / 255.0
        except (UnidentifiedImageError, OSError) as exc:
            raise ConfigError(f"{file}: cannot read the image: {exc}") from None
        pixels = (pixels - np.asarray(calibration.mean, np.float32)) / np.asarray(calibration.std, np.float32)
        images.append(pixels.transpose(2, 0, 1))
    return {spec.name: np.stack(images).astype(np.float32)}


def _calibration_hash(calibration: Calibration, inputs, shapes, seed: int) -> str:
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



def _consistent_casts(model):
    """onnxconverter-common retypes a `Cast(to=FLOAT)` node's output as fp16 but leaves its `to`
    attribute (BERT's attention-mask cast): make the attribute agree, or ONNX Runtime rejects it."""
    from onnx import TensorProto

    declared = {v.name: v.type.tensor_type.elem_type for v in [*model.graph.value_info, *model.graph.output]}
    for node in model.graph.node:
        if node.op_type != "Cast" or declared.get(node.output[0]) != TensorProto.FLOAT16:
            continue
        for attribute in node.attribute:
            if attribute.name == "to" and attribute.i == TensorProto.FLOAT:
                attribute.i = TensorProto.FLOAT16
    return model
