"""Accuracy of a cell against the FP32 reference: the original model on ONNX Runtime CPU, run once
per model and input set and cached. Per output: max absolute and relative error, mean absolute
error, cosine similarity, and top-1/top-5 agreement where the output is a classifier's
([batch, classes] with at least 5 classes). A tolerance breach is a failing verdict, never an error.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import numpy as np

REFERENCE = "onnxruntime-cpu fp32"


def reference_outputs(model_path: Path, model_sha256: str, feeds: dict[str, np.ndarray],
                      cache_dir: Path) -> dict[str, np.ndarray]:
    """Outputs of the original model on ONNX Runtime CPU for these feeds (cached on disk)."""
    digest = hashlib.sha256(model_sha256.encode())
    for name in sorted(feeds):
        digest.update(name.encode())
        digest.update(np.ascontiguousarray(feeds[name]).tobytes())
    path = cache_dir / "reference" / f"{digest.hexdigest()[:24]}.npz"
    if path.is_file():
        with np.load(path) as cached:
            return {k: cached[k] for k in cached.files}
    import onnxruntime as ort

    session = ort.InferenceSession(str(model_path), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    outputs = dict(zip(names, session.run(names, feeds)))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.stem}.{os.getpid()}.tmp.npz")
    np.savez(tmp, **outputs)
    os.replace(tmp, path)
    return outputs


def compare(outputs: dict[str, np.ndarray], reference: dict[str, np.ndarray], tolerance) -> list[dict[str, Any]]:
    """One `accuracy` row per reference output, each with its verdict."""
    rows = []
    for name, expected in reference.items():
        got = outputs.get(name)
        row: dict[str, Any] = {"output_name": name, "reference": REFERENCE,
                               "tolerance": json.dumps(tolerance.model_dump(exclude_none=True), sort_keys=True)}
        if got is None or np.shape(got) != np.shape(expected):
            row |= {"verdict": "fail", "worst_metric": "shape",
                    "worst_value": None, "elements": int(np.size(expected))}
            rows.append(row)
            continue
        a = np.asarray(got, dtype=np.float64).reshape(-1)
        b = np.asarray(expected, dtype=np.float64).reshape(-1)
        diff = np.abs(a - b)
        finite = bool(np.isfinite(a).all())
        norm = np.linalg.norm(a) * np.linalg.norm(b)
        row |= {
            "elements": int(a.size),
            "max_abs_error": float(diff.max()) if a.size else 0.0,
            "max_rel_error": float((diff / (np.abs(b) + 1e-8)).max()) if a.size else 0.0,
            "mean_abs_error": float(diff.mean()) if a.size else 0.0,
            "cosine_similarity": float(np.dot(a, b) / norm) if norm > 0 and finite else (1.0 if norm == 0 and
                                                                                        finite and not diff.any() else None),
            "top1_agreement": None, "top5_agreement": None,
        }
        if np.ndim(expected) == 2 and np.shape(expected)[1] >= 5:
            got2, exp2 = np.asarray(got, np.float64), np.asarray(expected, np.float64)
            top1 = exp2.argmax(axis=1)
            row["top1_agreement"] = float(np.mean(got2.argmax(axis=1) == top1))
            top5 = np.argsort(-got2, axis=1)[:, :5]
            row["top5_agreement"] = float(np.mean([t in five for t, five in zip(top1, top5)]))
        row |= _verdict(row, tolerance, finite)
        rows.append(row)
    return rows


def _verdict(row: dict[str, Any], tolerance, finite: bool) -> dict[str, Any]:
    if not finite:
        return {"verdict": "fail", "worst_metric": "non-finite outputs", "worst_value": None}
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
