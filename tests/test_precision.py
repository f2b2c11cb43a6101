"""Precision transforms, calibration data mistakes, the transform cache, and accuracy verdicts."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from farm.accuracy import compare
from farm.config import DEFAULT_TOLERANCES, Tolerance
from farm.errors import ConfigError
from farm.precision import calibration_batches, transform
from farm.records import Calibration, InputSpec
from tests.conftest import tiny_cnn

SPEC = (InputSpec("x", "float32", ("batch", 3, 8, 8), -1.0, 1.0),)
SHAPES = {"x": (2, 3, 8, 8)}


def test_fp16_and_int8_models(tmp_path: Path) -> None:
    import onnx

    model = tiny_cnn(tmp_path / "tiny.onnx")
    fp16 = transform(model, "sha", "fp16", SPEC, SHAPES, Calibration(), True, tmp_path / "cache", 1)
    graph = onnx.load(fp16.path).graph
    assert graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT  # I/O kept in fp32
    assert any(t.data_type == onnx.TensorProto.FLOAT16 for t in graph.initializer)
    int8 = transform(model, "sha", "int8", SPEC, SHAPES, Calibration(samples=4), True, tmp_path / "cache", 1)
    nodes = onnx.load(int8.path).graph.node
    assert any(n.op_type == "QuantizeLinear" for n in nodes)
    zero_points = [t for t in onnx.load(int8.path).graph.initializer if "zero_point" in t.name]
    assert zero_points and all(not np.any(onnx.numpy_helper.to_array(z)) for z in zero_points)  # symmetric
    assert int8.calibration.startswith("calibrated on seeded synthetic data")


def test_cache_hit_and_key_follows_the_calibration_data(tmp_path: Path) -> None:
    model = tiny_cnn(tmp_path / "tiny.onnx")
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "calib.npz", x=rng.uniform(-1, 1, (8, 3, 8, 8)).astype(np.float32))
    calibration = Calibration(data="calib.npz", base_dir=str(tmp_path))
    first = transform(model, "sha", "int8", SPEC, SHAPES, calibration, True, tmp_path / "cache", 1)
    again = transform(model, "sha", "int8", SPEC, SHAPES, calibration, True, tmp_path / "cache", 1)
    assert not first.cached and first.seconds > 0 and again.cached and again.seconds == 0
    assert again.path == first.path
    np.savez(tmp_path / "calib.npz", x=rng.uniform(-2, 2, (8, 3, 8, 8)).astype(np.float32))
    changed = transform(model, "sha", "int8", SPEC, SHAPES, calibration, True, tmp_path / "cache", 1)
    assert changed.path != first.path and not changed.cached
    assert changed.calibration == "calibrated on calib.npz"


def test_calibration_mistakes_name_the_file(tmp_path: Path) -> None:
    np.savez(tmp_path / "shape.npz", x=np.zeros((4, 3, 9, 9), np.float32))
    np.savez(tmp_path / "dtype.npz", x=np.zeros((4, 3, 8, 8), np.int64))
    (tmp_path / "empty").mkdir()
    (tmp_path / "images").mkdir()
    (tmp_path / "images" / "broken.png").write_bytes(b"not a png at all")
    cases = [
        (Calibration(data="shape.npz", base_dir=str(tmp_path)), "shape.npz: calibration data for 'x' has shape (4, 3, 9, 9)"),
        (Calibration(data="dtype.npz", base_dir=str(tmp_path)), "dtype.npz: calibration data for 'x' is int64"),
        (Calibration(data="empty", base_dir=str(tmp_path)), "empty: no .npy files in the calibration folder"),
        (Calibration(images="empty", base_dir=str(tmp_path)), "empty: no images"),
        (Calibration(images="images", base_dir=str(tmp_path)), "broken.png: cannot read the image"),
    ]
    for calibration, message in cases:
        with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
            calibration_batches(calibration, SPEC, SHAPES, 1)


def test_images_are_preprocessed(tmp_path: Path) -> None:
    from PIL import Image

    (tmp_path / "images").mkdir()
    for i in range(3):
        Image.new("RGB", (20, 10), (255, 0, 128)).save(tmp_path / "images" / f"{i}.png")
    batches = calibration_batches(Calibration(images="images", base_dir=str(tmp_path)), SPEC, SHAPES, 1)
    assert batches[0]["x"].shape == (2, 3, 8, 8)
    red = (1.0 - 0.485) / 0.229
    assert batches[0]["x"][0, 0, 0, 0] == pytest.approx(red, rel=1e-5)


def test_tolerance_breach_is_a_failing_verdict() -> None:
    rng = np.random.default_rng(1)
    reference = {"logits": rng.normal(size=(8, 10))}
    close = {"logits": reference["logits"] + 1e-4}
    far = {"logits": rng.normal(size=(8, 10))}
    (ok,) = compare(close, reference, DEFAULT_TOLERANCES["fp16"])
    assert ok["verdict"] == "pass" and ok["top1_agreement"] == 1.0 and ok["top5_agreement"] == 1.0
    assert ok["max_abs_error"] == pytest.approx(1e-4) and ok["mean_abs_error"] == pytest.approx(1e-4)
    expected = reference["logits"]
    assert ok["max_rel_error"] == pytest.approx((1e-4 / np.abs(expected)).max(), rel=1e-6)  # Polygraphy's
    assert ok["mean_rel_error"] == pytest.approx((1e-4 / np.abs(expected)).mean(), rel=1e-6)
    assert ok["snr_db"] == pytest.approx(10 * np.log10(np.mean(expected ** 2) / 1e-8), rel=1e-6)
    assert ok["n"] is None and ok["top1_ties"] == 0  # n: given by the evaluation set (tests/test_accuracy.py)
    (bad,) = compare(far, reference, DEFAULT_TOLERANCES["int8"])
    assert bad["verdict"] == "fail" and bad["worst_metric"] == "cosine_similarity" and bad["worst_value"] < 0.98
    (strict,) = compare(close, reference, Tolerance(min_cosine=0.9, max_abs=1e-6))
    assert strict["verdict"] == "fail" and strict["worst_metric"] == "max_abs_error"
    (nan,) = compare({"logits": np.full((8, 10), np.nan)}, reference, DEFAULT_TOLERANCES["fp32"])
    assert nan["verdict"] == "fail" and nan["worst_metric"] == "non-finite outputs where the reference is finite"
    # NaN in the reference itself (inputs outside the model's domain): judged where it has a value
    holes = {"logits": reference["logits"].copy()}
    holes["logits"][0, :3] = np.nan
    (same,) = compare({"logits": holes["logits"] + 1e-6}, holes, DEFAULT_TOLERANCES["fp32"])
    assert same["verdict"] == "pass" and same["elements"] == holes["logits"].size - 3
    assert same["top1_agreement"] == 1.0  # on the 7 rows whose every logit the reference has
    assert same["worst_metric"] == f"top1_agreement (judged on the {holes['logits'].size - 3} of " \
        f"{holes['logits'].size} elements where the reference is finite: it is NaN or infinite at the rest)"
    (wrong,) = compare({"logits": -holes["logits"]}, holes, DEFAULT_TOLERANCES["fp32"])
    assert wrong["verdict"] == "fail" and wrong["worst_metric"] == "cosine_similarity"
    (none,) = compare({"logits": np.zeros((8, 10))}, {"logits": np.full((8, 10), np.inf)}, DEFAULT_TOLERANCES["fp32"])
    assert none["verdict"] == "unjudged" and none["worst_metric"].startswith("the reference is NaN or infinite at every")
    (shape,) = compare({"logits": np.zeros((8, 5))}, reference, DEFAULT_TOLERANCES["fp32"])
    assert shape["verdict"] == "fail" and shape["worst_metric"] == "shape"


def test_fp16_bert_runs_on_onnxruntime(tmp_path: Path) -> None:
    """The attention-mask Cast must agree with the fp16 type the converter gives its output."""
    import onnx
    import onnxruntime as ort

    from farm.models.zoo import make_bert

    model = make_bert(layers=1, hidden=32, heads=4, intermediate=64, vocab=100, max_positions=64, name="b")
    onnx.save(model, tmp_path / "bert.onnx")
    specs = tuple(InputSpec(n, "int64", ("batch", "sequence"), 0, 2) for n in
                  ("input_ids", "token_type_ids", "attention_mask"))
    shapes = {s.name: (1, 8) for s in specs}
    fp16 = transform(tmp_path / "bert.onnx", "sha", "fp16", specs, shapes, Calibration(), True, tmp_path / "c", 1)
    feeds = {s.name: np.ones((1, 8), np.int64) for s in specs}
    reference = ort.InferenceSession(str(tmp_path / "bert.onnx"), providers=["CPUExecutionProvider"]).run(None, feeds)
    outputs = ort.InferenceSession(str(fp16.path), providers=["CPUExecutionProvider"]).run(None, feeds)
    assert all(np.abs(a - b).max() < 0.01 for a, b in zip(outputs, reference))


def test_calibration_data_that_is_not_what_it_should_be_says_so(tmp_path: Path) -> None:
    """Text given as an .npz, one .npy array, NaN data, images for a model whose input is no image:
    each one line that says what the file is and what to give (numpy's own words were about pickles
    and context managers, NaN data calibrated silently, a token input got a traceback)."""
    (tmp_path / "text.npz").write_text("x,y\n1,2\n")
    np.save(tmp_path / "one.npy", np.ones((4, 3, 8, 8), np.float32))
    np.savez(tmp_path / "nan.npz", x=np.full((4, 3, 8, 8), np.nan, np.float32))
    (tmp_path / "images").mkdir()
    from PIL import Image

    Image.new("RGB", (8, 8), (200, 100, 50)).save(tmp_path / "images" / "a.png")
    tokens = (InputSpec("ids", "int64", ("batch", 128), 0, 100),)
    cases = [
        ("text.npz", None, SPEC, SHAPES, "text.npz: calibration data must be an .npz of NumPy arrays, and this file is text"),
        ("nan.npz", None, SPEC, SHAPES, "calibration data for 'x' holds 768 of 768 values that are NaN or infinite"),
        (None, "images", tokens, {"ids": (2, 128)}, "images calibrate a model of one image input (N, 3 or 1, H, W, "
                                                    "floats); this one has input 'ids' of shape (2, 128)"),
    ]
    for data, images, spec, shapes, message in cases:
        with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
            calibration_batches(Calibration(data=data, images=images, base_dir=str(tmp_path)), spec, shapes, 1)
    [batch, *_] = calibration_batches(Calibration(data="one.npy", base_dir=str(tmp_path)), SPEC, SHAPES, 1)
    assert batch["x"].shape == (2, 3, 8, 8)  # one .npy array: the single input's samples
    grey = (InputSpec("x", "float32", ("batch", 1, 8, 8), -1.0, 1.0),)
    [batch] = calibration_batches(Calibration(images="images", base_dir=str(tmp_path)), grey, {"x": (1, 1, 8, 8)}, 1)
    luminance = (0.299 * 200 + 0.587 * 100 + 0.114 * 50) / 255
    assert batch["x"].shape == (1, 1, 8, 8)
    expected = (luminance - np.mean([0.485, 0.456, 0.406])) / np.mean([0.229, 0.224, 0.225])
    assert batch["x"][0, 0, 0, 0] == pytest.approx(expected, rel=1e-2)


def _npz_with_members(path: Path, members: dict[str, tuple[tuple[int, ...], np.ndarray | None]]) -> None:
    """An .npz whose members are arrays of the shape given, each its given first rows followed by
    zeros written in chunks (a member that inflates to hundreds of MB from a few hundred KB)."""
    import zipfile

    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=1) as archive:
        for name, (shape, first) in members.items():
            with archive.open(f"{name}.npy", "w", force_zip64=True) as stream:
                np.lib.format.write_array_header_1_0(stream, {"descr": "<f4", "fortran_order": False,
                                                              "shape": shape})
                left = int(np.prod(shape)) * 4
                if first is not None:
                    stream.write(first.astype("<f4").tobytes())
                    left -= first.nbytes
                chunk = bytes(1 << 22)
                while left > 0:
                    stream.write(chunk[:min(left, len(chunk))])
                    left -= min(left, len(chunk))


def test_calibration_reads_only_what_the_model_needs(tmp_path: Path) -> None:
    """An .npz member no input names (256 MB inflated) and the rows of the input's own array past
    samples x batch (256 MB more) are never read; a folder's file that is no .npy (a 1 GB sparse
    file) is neither read nor hashed. Peak memory stays far below any of them."""
    import tracemalloc

    from farm.precision.int8 import calibration_hash

    rows = np.random.default_rng(0).uniform(-1, 1, (8, 3, 8, 8)).astype(np.float32)
    _npz_with_members(tmp_path / "calib.npz", {"unused": ((1 << 26,), None), "x": (((1 << 26) // 192, 3, 8, 8), rows)})
    folder = tmp_path / "folder"
    folder.mkdir()
    for i in range(4):
        np.save(folder / f"{i}.npy", rows[i])
    with (folder / "unrelated.bin").open("wb") as handle:
        handle.truncate(1 << 30)
    calibration = Calibration(data="calib.npz", base_dir=str(tmp_path), samples=2)
    tracemalloc.start()
    try:
        batches = calibration_batches(calibration, SPEC, SHAPES, 1)
        from_folder = calibration_batches(Calibration(data="folder", base_dir=str(tmp_path), samples=2), SPEC,
                                          SHAPES, 1)
        key = calibration_hash(Calibration(data="folder", base_dir=str(tmp_path), samples=2), SPEC, SHAPES, 1)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 32 << 20, f"{peak / 2 ** 20:.0f} MiB"
    assert [b["x"].shape for b in batches] == [(2, 3, 8, 8)] * 2
    assert np.array_equal(np.concatenate([b["x"] for b in batches]), rows[:4])
    assert np.array_equal(np.concatenate([b["x"] for b in from_folder]), rows[:4])
    (folder / "unrelated.bin").unlink()
    assert calibration_hash(Calibration(data="folder", base_dir=str(tmp_path), samples=2), SPEC, SHAPES, 1) == key
    np.save(folder / "0.npy", rows[5])  # a file it reads: another key
    assert calibration_hash(Calibration(data="folder", base_dir=str(tmp_path), samples=2), SPEC, SHAPES, 1) != key


def test_an_npz_header_that_claims_more_than_the_file_holds(tmp_path: Path) -> None:
    """A header claiming a 64 GB array in a file of a few bytes: one line, nothing allocated."""
    import zipfile

    with zipfile.ZipFile(tmp_path / "lies.npz", "w") as archive, archive.open("x.npy", "w") as stream:
        np.lib.format.write_array_header_1_0(stream, {"descr": "<f4", "fortran_order": False,
                                                      "shape": (1 << 20, 3, 8, 8 << 10)})
        stream.write(bytes(64))
    with pytest.raises(ConfigError, match=r"lies.npz \(x.npy\): cannot read it as a NumPy .npy array \(the array "
                                          r"is cut short: its header needs"):
        calibration_batches(Calibration(data="lies.npz", base_dir=str(tmp_path), samples=2), SPEC, SHAPES, 1)
