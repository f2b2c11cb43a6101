"""The `ai.onnx.ml` operators of converted scikit-learn models (skl2onnx, onnxmltools): linear models,
tree ensembles (ml_trees), support vector machines, scalers, encoders and ZipMap, as tensor code
that runs on any device, following ONNX Runtime's CPU kernels (its outputs are the accuracy check's
reference).

hummingbird-ml, the library that turns such models into PyTorch, was measured first and not adopted:
it converts a whole model or nothing, and of the 85 skl2onnx models of the corpus it converted 49,
4 of them to other outputs than ONNX Runtime's (LinearSVC, RidgeClassifier and -CV, GradientBoostingRegressor),
and none whose graph mixes these operators with standard ones (Exp, ReduceMean, MatMul, ...), which
farm's interpreter runs. So the interpreter runs these operators node by node beside the others.

A two-class tree ensemble is run as skl2onnx writes it (one score, ONNX Runtime's rules for the two
it outputs); one written otherwise is refused, naming why: run it on onnxruntime. Each node's
attributes are made arrays once, at build.
"""

from __future__ import annotations

import math

import numpy as np

from farm.errors import EngineUnsupported
from farm.onnx_torch.ml_common import arrays, class_labels, floats, post_transform, rows, text
from farm.onnx_torch.ml_trees import prepare_tree_classifier, prepare_tree_regressor, tree_classifier, tree_regressor
from farm.onnx_torch.ops import UnsupportedOperator, lazy_torch, tensor_like


def prepare(op: str, attrs: dict) -> dict:
    """At build: the node's attributes as an operator reads them (numpy arrays and settings), kept
    under `_state` so that the generated code passes the same object on every query (a forest's
    thousands of node attributes are never rebuilt per query)."""
    made = PREPARE.get(op, dict)(attrs)
    return {"_state": {"prepared": made, "device": {}}}


# --- linear models -------------------------------------------------------------------------------

def _prepare_linear(a: dict) -> dict:
    outputs = len(a["intercepts"]) if a.get("intercepts") else int(a.get("targets", 1))
    labels = a.get("classlabels_ints") or a.get("classlabels_strings")
    return {"coefficients": np.asarray(a["coefficients"], np.float32).reshape(outputs, -1),
            "intercepts": np.asarray(a.get("intercepts") or [0.0] * outputs, np.float32),
            "labels": class_labels(a, "LinearClassifier") if labels else None,
            "post_transform": text(a.get("post_transform", "NONE"))}


def _linear_regressor(m, a, x):
    x = rows(floats(x))
    t = arrays(a, x)
    return post_transform(x @ t["coefficients"].T + t["intercepts"], t["post_transform"])


def _linear_classifier(m, a, x):
    torch = lazy_torch()
    x = rows(floats(x))
    t = arrays(a, x)
    labels, how = t["labels"], t["post_transform"]
    if labels is None:
        raise UnsupportedOperator("LinearClassifier without class labels")
    scores = x @ t["coefficients"].T + t["intercepts"]
    if scores.shape[-1] > 1:
        return labels[scores.argmax(dim=-1)], post_transform(scores, how)
    # one score: its sign picks the label; ONNX Runtime writes [1 - s, s] for two labels, else s as it is
    positive = scores[:, 0] > 0
    if len(labels) == 2:
        if how == "PROBIT":
            raise UnsupportedOperator("LinearClassifier of one score with post_transform PROBIT and two labels")
        return torch.where(positive, labels[1], labels[0]), torch.cat([1 - scores, scores], dim=-1)
    return positive.to(torch.int64), (post_transform(scores, how) if how == "PROBIT" else scores)


# --- support vector regression ------------------------------------------------------------------

def _kernel_settings(a: dict, supports: int, what: str) -> dict:
    kernel = text(a.get("kernel_type", "LINEAR")) if supports else "LINEAR"
    if kernel not in ("LINEAR", "POLY", "RBF", "SIGMOID"):
        raise UnsupportedOperator(f"{what} kernel_type {kernel!r}")
    gamma, coef0, degree = (list(a.get("kernel_params") or []) + [0.0, 0.0, 0.0])[:3]
    return {"kernel": kernel, "gamma": float(gamma), "coef0": float(coef0), "degree": float(degree)}


def _kernel(t: dict, x):
    """The kernel of each row of X with each support vector: [N, vectors], as ONNX Runtime's SVMs."""
    torch = lazy_torch()
    if t["kernel"] == "RBF":
        return torch.exp(-t["gamma"] * torch.cdist(x, t["vectors"]).square())
    dot = x @ t["vectors"].T
    if t["kernel"] == "POLY":
        return (t["gamma"] * dot + t["coef0"]).pow(t["degree"])
    if t["kernel"] == "SIGMOID":
        return torch.tanh(t["gamma"] * dot + t["coef0"])
    return dot


def _prepare_svm_regressor(a: dict) -> dict:
    supports = int(a.get("n_supports", 0))
    coefficients = np.asarray(a["coefficients"], np.float32)
    return _kernel_settings(a, supports, "SVMRegressor") | {
        "vectors": np.asarray(a["support_vectors"], np.float32).reshape(supports, -1) if supports else None,
        "coefficients": coefficients.reshape(-1, 1), "rho": np.asarray(a["rho"][:1], np.float32),
        "one_class": bool(a.get("one_class", 0))}


def _svm_regressor(m, a, x):
    """ONNX Runtime's SVMRegressor: the kernel of X and each support vector, weighted, plus rho (a
    linear model's coefficients straight on X where it has no support vectors); one target."""
    torch = lazy_torch()
    x = rows(floats(x))
    t = arrays(a, x)
    y = (x if t["vectors"] is None else _kernel(t, x)) @ t["coefficients"] + t["rho"]
    return torch.where(y > 0, 1.0, -1.0).to(y.dtype) if t["one_class"] else y


def _prepare_svm_classifier(a: dict) -> dict:
    """libsvm's one-against-one classifiers as one matrix: each pair's weights over the support
    vectors (class i's by row j - 1 of the coefficients, class j's by row i), and who each vote goes to."""
    labels = class_labels(a, "SVMClassifier")
    per_class = [int(n) for n in a.get("vectors_per_class") or []]
    supports, classes = sum(per_class), len(labels)
    if a.get("prob_a"):
        raise EngineUnsupported("SVMClassifier with probabilities (scikit-learn's probability=True): ONNX Runtime "
                                "couples the pairs' probabilities iteratively, which the interpreter does not "
                                "reproduce; run the model on onnxruntime, or convert it without probabilities")
    how = text(a.get("post_transform", "NONE"))
    if not supports or classes < 2 or (classes == 2 and how == "PROBIT"):
        raise EngineUnsupported("SVMClassifier without support vectors (a linear model), of one class, or of two "
                                "with post_transform PROBIT: run the model on onnxruntime")
    coefficients = np.asarray(a["coefficients"], np.float32).reshape(classes - 1, supports)
    starts = np.cumsum([0, *per_class])
    pairs = [(i, j) for i in range(classes - 1) for j in range(i + 1, classes)]
    weights = np.zeros((supports, len(pairs)), np.float32)
    first, second = np.zeros((len(pairs), classes), np.float32), np.zeros((len(pairs), classes), np.float32)
    for p, (i, j) in enumerate(pairs):
        weights[starts[i]:starts[i + 1], p] = coefficients[j - 1, starts[i]:starts[i + 1]]
        weights[starts[j]:starts[j + 1], p] = coefficients[i, starts[j]:starts[j + 1]]
        first[p, i], second[p, j] = 1.0, 1.0
    return _kernel_settings(a, supports, "SVMClassifier") | {
        "vectors": np.asarray(a["support_vectors"], np.float32).reshape(supports, -1), "weights": weights,
        "rho": np.asarray(a["rho"], np.float32), "first": first, "second": second, "labels": labels,
        "post_transform": how}


def _svm_classifier(m, a, x):
    """Each pair's decision value, the vote it gives (the first class where it is positive), the label
    with the most votes (the first of equals), and the pairs' values as the scores (two classes:
    [-s, s], or [1 - s, s] after a post transform), as ONNX Runtime writes them."""
    torch = lazy_torch()
    x = rows(floats(x))
    t = arrays(a, x)
    scores = _kernel(t, x) @ t["weights"] + t["rho"]
    wins = (scores > 0).to(scores.dtype)
    votes = wins @ t["first"] + (1 - wins) @ t["second"]
    label = t["labels"][votes.argmax(dim=-1)]
    if scores.shape[-1] > 1:
        return label, post_transform(scores, t["post_transform"])
    if t["post_transform"] == "NONE":
        return label, torch.cat([-scores, scores], dim=-1)
    return label, torch.cat([1 - scores, scores], dim=-1)


# --- element-wise and shape ---------------------------------------------------------------------

def _scaler(m, a, x):
    x = floats(x)
    t = arrays(a, x)
    return (x - t["offset"]) * t["scale"]


def _normalizer(m, a, x):
    x = floats(x)
    norm = arrays(a, x)["norm"]
    if norm == "MAX":
        return x / x.amax(dim=-1, keepdim=True)
    if norm == "L1":
        return x / x.abs().sum(dim=-1, keepdim=True)
    if norm == "L2":
        return x / x.square().sum(dim=-1, keepdim=True).sqrt()
    raise UnsupportedOperator(f"Normalizer norm {norm!r}")


def _binarizer(m, a, x):
    return (x > arrays(a, x)["threshold"]).to(x.dtype)


def _prepare_imputer(a: dict) -> dict:
    values = a.get("imputed_value_floats") or []
    return {"values": np.asarray(values, np.float32) if values else None,
            "replaced": float(a.get("replaced_value_float", math.nan))}


def _imputer(m, a, x):
    torch = lazy_torch()
    x = floats(x)
    t = arrays(a, x)
    if t["values"] is None:
        raise UnsupportedOperator("Imputer with integer values: the interpreter imputes floats only")
    missing = torch.isnan(x) if math.isnan(t["replaced"]) else x == t["replaced"]
    return torch.where(missing, t["values"].expand_as(x), x)


def _array_feature_extractor(m, a, x, indices):
    """X's last axis at `indices` (a classifier's labels picked by its argmax, often a constant X; a
    feature picked by a constant index). A constant is copied to the device once (tensor_like), so
    that a CUDA graph holds no copy."""
    torch = lazy_torch()
    if not isinstance(x, torch.Tensor) and not isinstance(indices, torch.Tensor):
        x = np.asarray(x)
        picked = np.take(x, np.asarray(indices).reshape(-1), axis=-1)
        return picked.reshape(1, -1) if x.ndim == 1 else picked  # ONNX Runtime's shape for a 1-D X
    like = x if isinstance(x, torch.Tensor) else indices
    if not isinstance(x, torch.Tensor) and np.asarray(x).dtype.kind in "OUS":
        raise EngineUnsupported("ArrayFeatureExtractor of strings (string class labels): the PyTorch backend "
                                "has no strings; run the model on onnxruntime")
    # a constant beside a tensor: on its device (`like` is then the int64 indices: X keeps its dtype)
    x = x if isinstance(x, torch.Tensor) else tensor_like(np.asarray(x), like)
    index = indices if isinstance(indices, torch.Tensor) else tensor_like(np.asarray(indices), like)
    picked = x.index_select(-1, index.reshape(-1).long())
    return picked.reshape(1, -1) if x.dim() == 1 else picked  # ONNX Runtime's shape for a 1-D X


def _prepare_label_encoder(a: dict) -> dict:
    """Numeric keys and values (ints or floats, as lists or tensors), sorted by key for a search."""
    def given(kind: str):
        for suffix in ("int64s", "floats", "tensor"):
            value = a.get(f"{kind}_{suffix}")
            if value is not None and len(value):
                return np.asarray(value)
        return None

    keys, values = given("keys"), given("values")
    if keys is None or values is None or a.get("keys_strings") or a.get("values_strings") or \
            keys.dtype.kind in "OUS" or values.dtype.kind in "OUS":
        raise EngineUnsupported("LabelEncoder of strings: the PyTorch backend has no strings; run the model on "
                                "onnxruntime")
    order = np.argsort(keys, kind="stable")
    default = a.get("default_tensor")
    if default is None:
        default = a.get("default_float", -0.0) if values.dtype.kind == "f" else a.get("default_int64", -1)
    return {"keys": keys[order], "values": values[order],
            "default": np.asarray(default, values.dtype).reshape(-1)[:1]}


def _label_encoder(m, a, x):
    """Each value of X looked up among the keys: its value, or the default where it is none."""
    torch = lazy_torch()
    x = x if isinstance(x, torch.Tensor) else torch.as_tensor(np.asarray(x))
    t = arrays(a, x if x.is_floating_point() else x.float())
    keys = t["keys"].to(x.dtype)
    where = torch.searchsorted(keys, x.contiguous()).clamp(max=len(keys) - 1)
    return torch.where(keys[where] == x, t["values"][where], t["default"])


def _prepare_zip_map(a: dict) -> dict:
    keys = [text(k) if isinstance(k, bytes) else k for k in (a.get("classlabels_int64s") or
                                                               a.get("classlabels_strings") or [])]
    order = sorted(range(len(keys)), key=lambda i: keys[i])
    return {"order": None if order == list(range(len(keys))) else np.asarray(order, np.int64)}


def _zip_map(m, a, x):
    """A classifier's probabilities [N, C], one column per class label in sorted order: what ONNX
    Runtime's sequence of maps compares as (farm.output_values)."""
    order = arrays(a, x)["order"]
    return x if order is None else x[:, order]


ML_OPS = {
    "LinearRegressor": _linear_regressor,
    "LinearClassifier": _linear_classifier,
    "TreeEnsembleClassifier": tree_classifier,
    "TreeEnsembleRegressor": tree_regressor,
    "SVMRegressor": _svm_regressor,
    "SVMClassifier": _svm_classifier,
    "Scaler": _scaler,
    "Normalizer": _normalizer,
    "Binarizer": _binarizer,
    "Imputer": _imputer,
    "ArrayFeatureExtractor": _array_feature_extractor,
    "ZipMap": _zip_map,
    "LabelEncoder": _label_encoder,
}

PREPARE = {
    "LinearRegressor": _prepare_linear,
    "LinearClassifier": _prepare_linear,
    "TreeEnsembleClassifier": prepare_tree_classifier,
    "TreeEnsembleRegressor": prepare_tree_regressor,
    "SVMRegressor": _prepare_svm_regressor,
    "SVMClassifier": _prepare_svm_classifier,
    "Scaler": lambda a: {"offset": np.asarray(a.get("offset") or [0.0], np.float32),
                         "scale": np.asarray(a.get("scale") or [1.0], np.float32)},
    "Normalizer": lambda a: {"norm": text(a.get("norm", "MAX"))},
    "Binarizer": lambda a: {"threshold": float(a.get("threshold", 0.0))},
    "Imputer": _prepare_imputer,
    "ZipMap": _prepare_zip_map,
    "LabelEncoder": _prepare_label_encoder,
}
