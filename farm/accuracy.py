"""Accuracy of a cell against the FP32 reference (the original model on ONNX Runtime CPU), on a
fixed evaluation set per model: `accuracy.samples` seeded inputs (64 by default), or the model's
`[models.calibration]` data when it gives some, the same inputs whatever the cell's batch. The set
runs through the cell's engine in chunks of its batch (the last chunk padded with repeats of its
own inputs, the padding dropped from the outputs), and through the reference in the same chunks
(cached). Per output: cosine similarity, max/mean absolute and relative error (Polygraphy's
comparator), SNR, and top-1/top-5 agreement where the output is a classifier's ([n, classes ≥ 5])
with a flip inside the reference's own near-tie margin counted as a tie. A tolerance breach is a
failing verdict, never an error. An output the evaluation set cannot judge (a floating-point
reference that is constant, or zero almost everywhere, on these inputs: a detector's score map on
random noise) is `unjudged`, never `fail`. Outputs that are not numeric tensors (ONNX Runtime's
sequences, maps, a scikit-learn classifier's ZipMap list of {label: probability}, strings) are made
arrays first (`comparable`): a sequence of maps one column per key, strings compared exactly; one
that no array holds is `unjudged` with one line saying why. Definitions and their sources:
docs/precision.md#accuracy.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from farm.files import write_atomic
from farm.output_values import as_bytes, comparable, not_compared
from farm.records import Calibration, Cell, InputSpec, Tolerance

REFERENCE = "onnxruntime-cpu fp32"
DEFAULT_SAMPLES = 64
DEFAULT_TIE_MARGIN = 0.01  # of the reference row's logit range (max - min)
SEED_OFFSET = 1_000_000  # evaluation inputs are seeded apart from calibration's (seed + 1000 + i)
# A floating-point reference output is degenerate when it is constant, when at least
# DEGENERATE_ZERO_SHARE of its elements are zero (|x| <= ZERO), or when most are zero and none
# reaches FAINT (a score map with nothing in it: a text detector's on random noise, 98 % zeros and
# a largest score of 0.003): no error metric separates a right engine from a wrong one there.
ZERO, DEGENERATE_ZERO_SHARE, FAINT = 1e-6, 0.99, 0.01

Run = Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]


@dataclasses.dataclass
class EvaluationSet:
    """The inputs every cell of a model is judged on: arrays stacked along each input's batch axis
    (inputs without one: a single array fed to every chunk). `batched` False: the model has no
    batch axis, so each of the n samples is one whole feed stacked on a new axis 0."""

    arrays: dict[str, np.ndarray]
    axes: dict[str, int | None]
    n: int
    batched: bool
    source: str

    def digest(self) -> str:
        digest = hashlib.sha256(json.dumps([self.n, self.batched, sorted(self.axes.items())]).encode())
        for name in sorted(self.arrays):
            digest.update(name.encode())
            digest.update(as_bytes(self.arrays[name]))
        return digest.hexdigest()

    def chunks(self, batch: int):
        """(feeds, real rows) per chunk of `batch` samples; the last chunk is padded with repeats
        of its own inputs. Unbatched models: one sample per chunk."""
        if not self.batched:
            for i in range(self.n):
                yield {name: array[i] for name, array in self.arrays.items()}, 1
            return
        for start in range(0, self.n, batch):
            index = np.arange(start, min(start + batch, self.n))
            real = len(index)
            if real < batch:
                index = np.concatenate([index, index[np.arange(batch - real) % real]])
            yield {name: array if self.axes[name] is None else np.take(array, index, axis=self.axes[name])
                   for name, array in self.arrays.items()}, real


def evaluation_set(inputs: tuple[InputSpec, ...], shapes: dict[str, tuple[int, ...]], samples: int, seed: int,
                   calibration: Calibration | None = None) -> EvaluationSet:
    """The model's evaluation set: its calibration data (.npz/.npy/images) when given and every
    input's batch is axis 0, else `samples` seeded inputs (sample i from seed + 1e6 + i, so it does
    not depend on n or on the cell's batch)."""
    from farm.models import make_feeds

    batched = any(spec.batch_axis is not None for spec in inputs)
    axes = {spec.name: spec.batch_axis if batched else 0 for spec in inputs}
    one = {spec.name: tuple(1 if axis == spec.batch_axis else size for axis, size in enumerate(shapes[spec.name]))
           for spec in inputs} if batched else dict(shapes)
    if (calibration is not None and (calibration.data or calibration.images) and batched
            and all(spec.batch_axis == 0 for spec in inputs)):
        from farm.precision import calibration_batches

        given = calibration_batches(dataclasses.replace(calibration, samples=samples), inputs, one, seed)
        arrays = {spec.name: np.concatenate([b[spec.name] for b in given]) for spec in inputs}
        return EvaluationSet(arrays, axes, len(given), True, (calibration.data or calibration.images))
    feeds = [make_feeds(inputs, one, seed + SEED_OFFSET + i) for i in range(samples)]
    if batched:
        arrays = {spec.name: feeds[0][spec.name] if spec.batch_axis is None else
                  np.concatenate([f[spec.name] for f in feeds], axis=spec.batch_axis) for spec in inputs}
    else:
        arrays = {spec.name: np.stack([f[spec.name] for f in feeds]) for spec in inputs}
    return EvaluationSet(arrays, axes, samples, batched, f"{samples} seeded inputs")


def evaluate(run: Run, evaluation: EvaluationSet, batch: int) -> dict[str, np.ndarray]:
    """`run` over the evaluation set in chunks of `batch`, padding dropped: outputs whose axis 0 is
    the chunk's batch are concatenated on it; others (no batch axis) are stacked, one per chunk.
    An output that a chunk gives as the line saying why it is not compared is that line."""
    parts: dict[str, list[np.ndarray]] = {}
    sliced: dict[str, bool] = {}
    unheld: dict[str, np.ndarray] = {}
    for feeds, real in evaluation.chunks(batch):
        for name, value in run(feeds).items():
            value = np.asarray(value)
            if not_compared(value) is not None:
                unheld.setdefault(name, value)
                continue
            size = batch if evaluation.batched else None
            cut = size is not None and value.ndim > 0 and value.shape[0] == size
            sliced[name] = sliced.get(name, True) and cut
            parts.setdefault(name, []).append(value[:real] if cut else value)
    return {name: np.concatenate(values) if sliced[name] else np.stack(values)
            for name, values in parts.items() if name not in unheld} | unheld


def reference_evaluation(model_path: Path, model_sha256: str, evaluation: EvaluationSet, batch: int,
                         cache_dir: Path) -> dict[str, np.ndarray]:
    """The FP32 reference over the evaluation set, in the same chunks as the cell (cached on disk)."""
    key = hashlib.sha256(f"{model_sha256}:{batch}:{evaluation.digest()}{_converted_mark(model_path, cache_dir)}"
                         .encode()).hexdigest()[:24]
    return _cached(cache_dir / "reference" / f"eval-{key}.npz",
                   lambda: evaluate(_reference_session(model_path, cache_dir), evaluation, batch))


def reference_outputs(model_path: Path, model_sha256: str, feeds: dict[str, np.ndarray],
                      cache_dir: Path) -> dict[str, np.ndarray]:
    """Outputs of the original model on ONNX Runtime CPU for these feeds (cached on disk)."""
    digest = hashlib.sha256(f"{model_sha256}{_converted_mark(model_path, cache_dir)}".encode())
    for name in sorted(feeds):
        digest.update(name.encode())
        digest.update(as_bytes(feeds[name]))
    return _cached(cache_dir / "reference" / f"{digest.hexdigest()[:24]}.npz",
                   lambda: _reference_session(model_path, cache_dir)(feeds))


def _converted_mark(model_path: Path, cache_dir: Path) -> str:
    """Part of a cached reference's key: the outputs of a converted model are not those of the file."""
    return ":opset7" if _reference_file(model_path, cache_dir)[1] else ""


def _reference_session(model_path: Path, cache_dir: Path) -> Run:
    import onnxruntime as ort

    from farm.backends.narrow_types import ort_feeds

    options = ort.SessionOptions()
    options.log_severity_level = 3  # errors only: an old opset's optimizer warnings are not the user's news
    runnable, _ = _reference_file(model_path, cache_dir)
    session = ort.InferenceSession(str(runnable), options, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return comparable(lambda feeds: dict(zip(names, session.run(names, ort_feeds(feeds)))))


def _cached(path: Path, compute: Callable[[], dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    if path.is_file():
        with np.load(path) as cached:
            return {k: cached[k] for k in cached.files}
    outputs = compute()

    def save(tmp: Path) -> None:
        with tmp.open("wb") as handle:  # a file object: np.savez adds no .npz to its name
            np.savez(handle, **outputs)

    write_atomic(path, save, make_parents=True)
    return outputs


def check(run: Run, cell: Cell, feeds: dict[str, np.ndarray], cache_dir: Path,
          log: Callable[[str], None] = lambda message: None) -> list[dict[str, Any]]:
    """The cell's `accuracy` rows on its model's evaluation set. A backend whose `outputs` does not
    follow the feeds it is given (returns what it was built with) is judged on the cell's own
    feeds instead, and `n` says how many inputs that was."""
    tolerance = cell.tolerance or Tolerance()
    samples, margin = tolerance.samples, tolerance.tie_margin
    run = comparable(run, log)
    model = cell.model
    evaluation = evaluation_set(model.inputs, cell.input_shapes, samples, cell.measurement.seed, cell.calibration)
    first, _ = next(evaluation.chunks(cell.batch))
    if not all(np.array_equal(first[k], feeds[k]) for k in feeds) and _same(run(first), run(feeds)):
        expected = reference_outputs(model.path, model.sha256, first, cache_dir)
        telling = not _same(expected, reference_outputs(model.path, model.sha256, feeds, cache_dir)) and not all(
            degenerate_reference(value) for value in expected.values())
    else:
        telling = False
    if telling:
        # the engine gives the same outputs for two inputs the reference tells apart (a model that
        # maps both to the same, or to ~0, is no sign of that)
        log("the backend's outputs do not follow their inputs: accuracy on the cell's own inputs")
        reference = reference_outputs(model.path, model.sha256, feeds, cache_dir)
        n = next((np.shape(feeds[s.name])[s.batch_axis] for s in model.inputs if s.batch_axis is not None), 1)
        return compare(run(feeds), reference, tolerance, margin, n=int(n),
                       reference_name=reference_name(model.path, cache_dir))
    log(f"on {evaluation.source} ({evaluation.n} inputs) in chunks of {cell.batch}")
    reference = reference_evaluation(model.path, model.sha256, evaluation, cell.batch, cache_dir)
    return compare(evaluate(run, evaluation, cell.batch), reference, tolerance, margin, n=evaluation.n,
                   reference_name=reference_name(model.path, cache_dir))


def reference_name(model_path: Path, cache_dir: Path) -> str:
    """The `reference` of the model's accuracy rows: ONNX Runtime CPU at fp32, on the model converted
    to opset 7 where it is older and the converter takes it (farm.models.opset), as `_reference_session`
    runs it; the cached outputs' keys carry the same (`_converted_mark`)."""
    _, converted = _reference_file(model_path, cache_dir)
    return f"{REFERENCE}, {converted}" if converted else REFERENCE


def _reference_file(model_path: Path, cache_dir: Path) -> tuple[Path, str | None]:
    from farm.models.opset import runnable

    return runnable(model_path, cache_dir)  # a model older than opset 7: its conversion


def _same(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> bool:
    return a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


def _polygraphy_errors(got: np.ndarray, expected: np.ndarray) -> dict[str, float]:
    """max/mean absolute and relative error from Polygraphy's comparator (SimpleCompareFunc):
    relative = |got - expected| / |expected|, a zero in the reference raised to 2.2e-16."""
    from polygraphy import comparator
    from polygraphy.comparator.struct import IterationResult
    from polygraphy.logger import G_LOGGER

    G_LOGGER.module_severity = G_LOGGER.CRITICAL  # its per-output report goes to the log, not here
    simple = getattr(comparator, "SimpleCompareFunc", None) or comparator.CompareFunc.simple  # older: the latter
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = simple(check_error_stat="max")(
            IterationResult({"o": got}, runner_name="engine"), IterationResult({"o": expected}, runner_name="ref"))["o"]
    return {"max_abs_error": result.max_absdiff, "mean_abs_error": result.mean_absdiff,
            "max_rel_error": result.max_reldiff, "mean_rel_error": result.mean_reldiff}


def top_k_agreement(got: np.ndarray, expected: np.ndarray, tie_margin: float = DEFAULT_TIE_MARGIN) -> dict[str, Any]:
    """Top-1/top-5 agreement of a classifier output [n, classes] with the reference. A row agrees
    when the engine's pick (top-1) or one of its top 5 is the reference's top-1, or scores within
    the reference's near-tie margin of it: reference[pick] >= reference.max - tie_margin x (the
    reference row's max - min). `top1_ties` counts the rows whose top-1 differs but is such a tie."""
    got, expected = np.asarray(got, np.float64), np.asarray(expected, np.float64)
    best = expected.max(axis=1)
    margin = tie_margin * (best - expected.min(axis=1))
    rows = np.arange(len(expected))

    def tied(classes: np.ndarray) -> np.ndarray:
        return expected[rows, classes] >= best - margin

    pick = got.argmax(axis=1)
    exact = pick == expected.argmax(axis=1)
    top1 = exact | tied(pick)
    five = np.argsort(-got, axis=1, kind="stable")[:, :5]
    top5 = np.any([tied(five[:, j]) for j in range(5)], axis=0) | np.any(five == expected.argmax(axis=1)[:, None], axis=1)
    return {"top1_agreement": float(top1.mean()), "top5_agreement": float(top5.mean()),
            "top1_ties": int((top1 & ~exact).sum())}


def compare(outputs: dict[str, np.ndarray], reference: dict[str, np.ndarray], tolerance,
            tie_margin: float = DEFAULT_TIE_MARGIN, n: int | None = None,
            reference_name: str = REFERENCE) -> list[dict[str, Any]]:
    """One `accuracy` row per reference output, each with its verdict; `n`: inputs compared."""
    rows = []
    for name, expected in reference.items():
        got = outputs.get(name)
        row: dict[str, Any] = {"output_name": name, "reference": reference_name, "n": n,
                               "tolerance": tolerance_text(tolerance)}
        why = not_compared(expected)
        if why is not None:  # what the reference gave no array holds (`comparable`)
            rows.append(row | {"verdict": "unjudged", "worst_metric": why, "worst_value": None})
            continue
        if got is None or np.shape(got) != np.shape(expected) or not_compared(got) is not None:
            row |= {"verdict": "fail", "worst_metric": "shape",
                    "worst_value": None, "elements": int(np.size(expected))}
            rows.append(row)
            continue
        if np.asarray(expected).dtype.kind in "US" or np.asarray(got).dtype.kind in "US":
            rows.append(row | _exact(np.asarray(got), np.asarray(expected)))
            continue
        a = np.asarray(got, dtype=np.float64).reshape(-1)
        b = np.asarray(expected, dtype=np.float64).reshape(-1)
        defined = np.isfinite(b)
        undefined = int(a.size - defined.sum())
        if undefined:  # NaN or inf in the reference itself (Pow of a negative base, log of 0, ...)
            if undefined == a.size:
                rows.append(row | {"verdict": "unjudged", "elements": int(a.size), "worst_value": None,
                                   "worst_metric": "the reference is NaN or infinite at every element: nothing to "
                                                   "judge on these inputs (give [models.calibration] data the model "
                                                   "is defined on)"})
                continue
            a, b = a[defined], b[defined]  # judged where the reference has a value
        finite = bool(np.isfinite(a).all())
        norm = np.linalg.norm(a) * np.linalg.norm(b)
        noise = float(np.sum((a - b) ** 2))
        signal = float(np.sum(b ** 2))
        row |= {
            "elements": int(a.size),
            "max_abs_error": 0.0, "mean_abs_error": 0.0, "max_rel_error": 0.0, "mean_rel_error": 0.0,
            "cosine_similarity": float(np.dot(a, b) / norm) if norm > 0 and finite else (1.0 if norm == 0 and
                                                                                        finite and noise == 0 else None),
            "snr_db": float(10 * np.log10(signal / noise)) if finite and noise > 0 and signal > 0 else None,
            "top1_agreement": None, "top5_agreement": None, "top1_ties": None,
        }
        if a.size:
            row |= _polygraphy_errors(a, b)
        if np.ndim(expected) == 2 and np.shape(expected)[1] >= 5 and finite:
            whole = np.isfinite(np.asarray(expected, dtype=np.float64)).all(axis=1)  # rows with every logit
            if whole.any():
                row |= top_k_agreement(np.asarray(got)[whole], np.asarray(expected)[whole], tie_margin)
        degenerate = degenerate_reference(b if undefined else expected)
        row |= ({"verdict": "unjudged", "worst_metric": degenerate, "worst_value": None} if degenerate
                else _verdict(row, tolerance, finite))
        if undefined and row["verdict"] == "pass":  # after the metric closest to its bound
            row["worst_metric"] = (f"{row['worst_metric']} (judged on the {a.size} of {a.size + undefined} elements "
                                   "where the reference is finite: it is NaN or infinite at the rest)")
        rows.append(row)
    return rows


def _exact(got: np.ndarray, expected: np.ndarray) -> dict[str, Any]:
    """Strings agree exactly or not at all: `exact_match` is the share of elements equal."""
    same = got.dtype.kind in "US" and expected.dtype.kind in "US"
    share = float(np.mean(got == expected)) if same and expected.size else float(same)
    return {"elements": int(expected.size), "verdict": "pass" if share == 1.0 else "fail",
            "worst_metric": "exact_match", "worst_value": share}


def degenerate_reference(expected: np.ndarray) -> str | None:
    """Why a reference output cannot judge an engine on these inputs, or None where it can: a
    floating-point output that is constant, zero (|x| <= ZERO) on DEGENERATE_ZERO_SHARE of its
    elements or more, or zero on most of them with none reaching FAINT. Integer and boolean outputs
    (indices, labels, counts) are compared exactly."""
    values = np.asarray(expected)
    if values.dtype.kind != "f" or values.size == 0 or not np.isfinite(values).all():
        return None
    if values.size > 1 and float(values.max()) == float(values.min()):
        return f"reference constant ({float(values.reshape(-1)[0]):.4g}) on these inputs"
    magnitude = np.abs(values)
    zero, largest = float(np.mean(magnitude <= ZERO)), float(magnitude.max())
    if zero >= DEGENERATE_ZERO_SHARE or (zero >= 0.5 and largest < FAINT):
        return f"reference ~0 on these inputs ({100 * zero:.1f} % of elements 0, largest {largest:.2g})"
    return None


def tolerance_text(tolerance: Any) -> str:
    """The `tolerance` column: the bounds that are set, as JSON. `tolerance` is a farm.records.Tolerance
    or one of farm.config's tolerance tables (what a caller outside a cell passes)."""
    fields = dataclasses.asdict(tolerance) if dataclasses.is_dataclass(tolerance) else tolerance.model_dump()
    return json.dumps({k: v for k, v in fields.items() if v is not None}, sort_keys=True)


def _verdict(row: dict[str, Any], tolerance, finite: bool) -> dict[str, Any]:
    if not finite:
        return {"verdict": "fail", "worst_metric": "non-finite outputs where the reference is finite", "worst_value": None}
    checks = [("cosine_similarity", row["cosine_similarity"], tolerance.min_cosine, "min")]
    if tolerance.min_top1 is not None and row["top1_agreement"] is not None:
        checks.append(("top1_agreement", row["top1_agreement"], tolerance.min_top1, "min"))
    if tolerance.max_abs is not None:
        checks.append(("max_abs_error", row["max_abs_error"], tolerance.max_abs, "max"))
    for metric, value, bound, kind in checks:
        if value is None or (value < bound if kind == "min" else value > bound):
            return {"verdict": "fail", "worst_metric": metric, "worst_value": value}
    # passing: name the metric closest to its bound
    margins = [((value - bound) if kind == "min" else (bound - value), metric, value)
               for metric, value, bound, kind in checks]
    _, metric, value = min(margins)
    return {"verdict": "pass", "worst_metric": metric, "worst_value": value}
