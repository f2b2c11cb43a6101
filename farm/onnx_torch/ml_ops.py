"""The `ai.onnx.ml` operators of converted scikit-learn models (skl2onnx, onnxmltools): linear models,
tree ensembles, scalers and ZipMap, as tensor code that runs on any device, following ONNX
Runtime's CPU kernels (its outputs are the accuracy check's reference).

hummingbird-ml, the library that turns such models into PyTorch, was measured first and not adopted:
it converts a whole model or nothing, and of the 85 skl2onnx models of the corpus it converted 49,
4 of them to other outputs than ONNX Runtime's (LinearSVC, RidgeClassifier, GradientBoostingRegressor),
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
from farm.onnx_torch.ops import UnsupportedOperator, lazy_torch, tensor_like

TRANSFORMS = ("NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO", "PROBIT")


def prepare(op: str, attrs: dict) -> dict:
    """At build: the node's attributes as an operator reads them (numpy arrays and settings), kept
    under `_state` so that the generated code passes the same object on every query (a forest's
    thousands of node attributes are never rebuilt per query)."""
    made = PREPARE.get(op, dict)(attrs)
    return {"_state": {"prepared": made, "device": {}}}


def _arrays(a: dict, like) -> dict:
    """The node's prepared values, numpy arrays as tensors on `like`'s device (floats in its dtype),
    made once per device and dtype."""
    torch = lazy_torch()
    state = a["_state"]
    key = (str(like.device), str(like.dtype))
    if key not in state["device"]:
        state["device"][key] = {
            k: torch.as_tensor(v, device=like.device,
                               dtype=like.dtype if v.dtype.kind == "f" and like.is_floating_point() else None)
            if isinstance(v, np.ndarray) else v for k, v in state["prepared"].items()}
    return state["device"][key]


def _floats(x):
    torch = lazy_torch()
    x = x if isinstance(x, torch.Tensor) else torch.as_tensor(np.asarray(x))
    return x if x.is_floating_point() else x.float()


def _rows(x):
    """X as [N, F]: a 1-D input is one row, as ONNX Runtime takes it."""
    return x.reshape(1, -1) if x.dim() == 1 else x


def post_transform(scores, how: str):
    """ONNX-ML's post_transform of [N, C] scores (C > 1, or a regressor's targets)."""
    torch = lazy_torch()
    if how == "NONE":
        return scores
    if how == "LOGISTIC":
        return torch.sigmoid(scores)
    if how == "SOFTMAX":
        return torch.softmax(scores, dim=-1)
    if how == "SOFTMAX_ZERO":  # zeros stay out of the sum (scaled by exp(-max) as ONNX Runtime does)
        peak = scores.amax(dim=-1, keepdim=True)
        zero = scores.abs() <= 1e-7
        values = torch.where(zero, scores * torch.exp(-peak), torch.exp(scores - peak))
        total = torch.where(zero, torch.zeros_like(values), values).sum(dim=-1, keepdim=True)
        return values / total
    if how == "PROBIT":
        return math.sqrt(2) * torch.erfinv(2 * scores - 1)
    raise UnsupportedOperator(f"post_transform {how!r} is not one of {', '.join(TRANSFORMS)}")


def _labels(attrs: dict, what: str) -> np.ndarray:
    if attrs.get("classlabels_strings"):
        raise EngineUnsupported(f"{what} with string class labels: the PyTorch backend has no strings; run the "
                                  'model on onnxruntime, or convert it with integer labels')
    return np.asarray(attrs.get("classlabels_ints") or attrs.get("classlabels_int64s") or [], dtype=np.int64)


# --- linear models -------------------------------------------------------------------------------

def _prepare_linear(a: dict) -> dict:
    outputs = len(a["intercepts"]) if a.get("intercepts") else int(a.get("targets", 1))
    labels = a.get("classlabels_ints") or a.get("classlabels_strings")
    return {"coefficients": np.asarray(a["coefficients"], np.float32).reshape(outputs, -1),
            "intercepts": np.asarray(a.get("intercepts") or [0.0] * outputs, np.float32),
            "labels": _labels(a, "LinearClassifier") if labels else None,
            "post_transform": _text(a.get("post_transform", "NONE"))}


def _linear_regressor(m, a, x):
    x = _rows(_floats(x))
    t = _arrays(a, x)
    return post_transform(x @ t["coefficients"].T + t["intercepts"], t["post_transform"])


def _linear_classifier(m, a, x):
    torch = lazy_torch()
    x = _rows(_floats(x))
    t = _arrays(a, x)
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


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


# --- tree ensembles ----------------------------------------------------------------------------

_MODES = {"BRANCH_LEQ": 0, "BRANCH_LT": 1, "BRANCH_GTE": 2, "BRANCH_GT": 3, "BRANCH_EQ": 4, "BRANCH_NEQ": 5,
          "LEAF": 6}


def _attribute(a: dict, name: str):
    """An attribute given as a list or, from ai.onnx.ml opset 3, as a tensor (`NAME_as_tensor`)."""
    value = a.get(name)
    return value if value is not None and len(value) else a.get(f"{name}_as_tensor")


def _forest(a: dict, prefix: str, outputs: int) -> dict:
    """Every tree's nodes as flat arrays (a node's index in them is its global id), each tree's root,
    the deepest path, and the leaves' weights as a dense [nodes, outputs] matrix (and which leaves
    give each output a weight, for MIN / MAX)."""
    tree_ids, node_ids = list(a["nodes_treeids"]), list(a["nodes_nodeids"])
    index = {(t, n): i for i, (t, n) in enumerate(zip(tree_ids, node_ids))}
    modes = [_MODES[_text(mode)] for mode in a["nodes_modes"]]
    values = _attribute(a, "nodes_values")
    if values is None:
        raise UnsupportedOperator("a tree ensemble without nodes_values")
    true_ids = [index.get((t, c), i) for i, (t, c) in enumerate(zip(tree_ids, a["nodes_truenodeids"]))]
    false_ids = [index.get((t, c), i) for i, (t, c) in enumerate(zip(tree_ids, a["nodes_falsenodeids"]))]
    leaf = [mode == _MODES["LEAF"] for mode in modes]
    children = {c for i, (t, f) in enumerate(zip(true_ids, false_ids)) if not leaf[i] for c in (t, f)}
    roots: dict = {}
    for i, tree in enumerate(tree_ids):
        if i not in children:
            roots.setdefault(tree, i)
    depth, frontier = 0, set(roots.values())
    while frontier and depth <= len(modes):
        frontier = {c for i in frontier if not leaf[i] for c in (true_ids[i], false_ids[i])}
        depth += 1
    weights = np.zeros((len(modes), outputs), np.float64)
    has = np.zeros((len(modes), outputs), bool)
    for tree, node, target, weight in zip(a[f"{prefix}_treeids"], a[f"{prefix}_nodeids"], a[f"{prefix}_ids"],
                                          _attribute(a, f"{prefix}_weights")):
        weights[index[(tree, node)], target] += weight
        has[index[(tree, node)], target] = True
    missing = a.get("nodes_missing_value_tracks_true") or [0] * len(modes)
    return {"feature": np.asarray(a["nodes_featureids"], np.int64), "threshold": np.asarray(values, np.float32),
            "mode": np.asarray(modes, np.int64), "true": np.asarray(true_ids, np.int64),
            "false": np.asarray(false_ids, np.int64), "leaf": np.asarray(leaf), "missing_true": np.asarray(missing, bool),
            "roots": np.asarray([roots[tree] for tree in sorted(roots)], np.int64), "depth": depth,
            "weights": weights.astype(np.float32), "has": has, "post_transform": _text(a.get("post_transform", "NONE")),
            "base": np.asarray(a.get("base_values") or [0.0] * outputs, np.float32)}


def _prepare_tree_classifier(a: dict) -> dict:
    labels = _labels(a, "TreeEnsembleClassifier")
    forest = _forest(a, "class", max(len(labels), 2)) | {"labels": labels, "binary": None}
    if len(labels) > 2:
        return forest
    # two classes, the weights all on the first (skl2onnx's forests and boosting): ONNX Runtime sums
    # them with base_values[0] into one score s; all weights positive (probabilities): the second
    # label where s > 0.5, scores [1 - s, s]; else the second where s > 0, scores [-s, s], or
    # [logistic(-s), logistic(s)] after LOGISTIC
    ids, how = set(a["class_ids"]), forest["post_transform"]
    if len(labels) != 2 or ids != {0} or len(forest["base"]) > 2 or (len(a.get("base_values") or []) == 2) \
            or how not in ("NONE", "LOGISTIC"):
        raise EngineUnsupported("TreeEnsembleClassifier of two classes with weights on both, two base values or "
                                f"post_transform {how}: ONNX Runtime's rules for these two scores are not reproduced "
                                "by the interpreter; run the model on onnxruntime")
    positive = min(_attribute(a, "class_weights")) >= 0
    forest["binary"] = "probability" if positive else how
    return forest


def _prepare_tree_regressor(a: dict) -> dict:
    return _forest(a, "target", int(a.get("n_targets", 1))) | {
        "aggregate": _text(a.get("aggregate_function", "SUM"))}


def _leaves(t: dict, x):
    """Each row's leaf in each tree: [N, trees] node ids, every tree walked at once, one level a step."""
    torch = lazy_torch()
    node = t["roots"].expand(x.shape[0], -1)
    for _ in range(t["depth"]):
        value = x.gather(1, t["feature"][node])
        threshold, mode = t["threshold"][node].to(value.dtype), t["mode"][node]
        goes = torch.where(mode == 0, value <= threshold,
                           torch.where(mode == 1, value < threshold,
                                       torch.where(mode == 2, value >= threshold,
                                                   torch.where(mode == 3, value > threshold,
                                                               torch.where(mode == 4, value == threshold,
                                                                           value != threshold)))))
        goes = goes | (torch.isnan(value) & t["missing_true"][node])
        node = torch.where(t["leaf"][node], node, torch.where(goes, t["true"][node], t["false"][node]))
    return node


def _tree_classifier(m, a, x):
    torch = lazy_torch()
    x = _rows(_floats(x))
    t = _arrays(a, x)
    scores = t["weights"][_leaves(t, x)].sum(dim=1).to(x.dtype)
    if t["binary"] is None:
        scores = scores + t["base"]
        return t["labels"][scores.argmax(dim=-1)], post_transform(scores, t["post_transform"])
    score = scores[:, :1] + t["base"][:1]  # base_values[0], or none
    threshold = 0.5 if t["binary"] == "probability" else 0.0
    label = torch.where(score[:, 0] > threshold, t["labels"][1], t["labels"][0])
    if t["binary"] == "probability":
        return label, torch.cat([1 - score, score], dim=-1)
    if t["binary"] == "LOGISTIC":
        return label, torch.cat([torch.sigmoid(-score), torch.sigmoid(score)], dim=-1)
    return label, torch.cat([-score, score], dim=-1)


def _tree_regressor(m, a, x):
    torch = lazy_torch()
    x = _rows(_floats(x))
    t = _arrays(a, x)
    leaves = _leaves(t, x)
    weights, has = t["weights"][leaves], t["has"][leaves]  # [N, trees, targets]
    how = t["aggregate"]
    if how in ("SUM", "AVERAGE"):
        y = weights.sum(dim=1) / (len(t["roots"]) if how == "AVERAGE" else 1)
    elif how in ("MIN", "MAX"):
        fill = torch.full_like(weights, math.inf if how == "MIN" else -math.inf)
        picked = torch.where(has, weights, fill)
        y = picked.amin(dim=1) if how == "MIN" else picked.amax(dim=1)
        y = torch.where(has.any(dim=1), y, torch.zeros_like(y))
    else:
        raise UnsupportedOperator(f"TreeEnsembleRegressor aggregate_function {how!r}")
    return post_transform(y.to(x.dtype) + t["base"], t["post_transform"])


# --- support vector regression ------------------------------------------------------------------

def _prepare_svm_regressor(a: dict) -> dict:
    supports = int(a.get("n_supports", 0))
    kernel = _text(a.get("kernel_type", "LINEAR")) if supports else "LINEAR"
    if kernel not in ("LINEAR", "POLY", "RBF", "SIGMOID"):
        raise UnsupportedOperator(f"SVMRegressor kernel_type {kernel!r}")
    gamma, coef0, degree = (list(a.get("kernel_params") or []) + [0.0, 0.0, 0.0])[:3]
    coefficients = np.asarray(a["coefficients"], np.float32)
    return {"vectors": np.asarray(a["support_vectors"], np.float32).reshape(supports, -1) if supports else None,
            "coefficients": coefficients.reshape(-1, 1), "rho": np.asarray(a["rho"][:1], np.float32),
            "kernel": kernel, "gamma": float(gamma), "coef0": float(coef0), "degree": float(degree),
            "one_class": bool(a.get("one_class", 0))}


def _svm_regressor(m, a, x):
    """ONNX Runtime's SVMRegressor: the kernel of X and each support vector, weighted, plus rho (a
    linear model's coefficients straight on X where it has no support vectors); one target."""
    torch = lazy_torch()
    x = _rows(_floats(x))
    t = _arrays(a, x)
    if t["vectors"] is None:
        y = x @ t["coefficients"] + t["rho"]
    else:
        dot = x @ t["vectors"].T
        if t["kernel"] == "RBF":
            kernel = torch.exp(-t["gamma"] * torch.cdist(x, t["vectors"]).square())
        elif t["kernel"] == "POLY":
            kernel = (t["gamma"] * dot + t["coef0"]).pow(t["degree"])
        elif t["kernel"] == "SIGMOID":
            kernel = torch.tanh(t["gamma"] * dot + t["coef0"])
        else:
            kernel = dot
        y = kernel @ t["coefficients"] + t["rho"]
    return torch.where(y > 0, 1.0, -1.0).to(y.dtype) if t["one_class"] else y


# --- element-wise and shape ---------------------------------------------------------------------

def _scaler(m, a, x):
    x = _floats(x)
    t = _arrays(a, x)
    return (x - t["offset"]) * t["scale"]


def _normalizer(m, a, x):
    x = _floats(x)
    norm = _arrays(a, x)["norm"]
    if norm == "MAX":
        return x / x.amax(dim=-1, keepdim=True)
    if norm == "L1":
        return x / x.abs().sum(dim=-1, keepdim=True)
    if norm == "L2":
        return x / x.square().sum(dim=-1, keepdim=True).sqrt()
    raise UnsupportedOperator(f"Normalizer norm {norm!r}")


def _binarizer(m, a, x):
    return (x > _arrays(a, x)["threshold"]).to(x.dtype)


def _prepare_imputer(a: dict) -> dict:
    values = a.get("imputed_value_floats") or []
    return {"values": np.asarray(values, np.float32) if values else None,
            "replaced": float(a.get("replaced_value_float", math.nan))}


def _imputer(m, a, x):
    torch = lazy_torch()
    x = _floats(x)
    t = _arrays(a, x)
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
    t = _arrays(a, x if x.is_floating_point() else x.float())
    keys = t["keys"].to(x.dtype)
    where = torch.searchsorted(keys, x.contiguous()).clamp(max=len(keys) - 1)
    return torch.where(keys[where] == x, t["values"][where], t["default"])


def _prepare_zip_map(a: dict) -> dict:
    keys = [_text(k) if isinstance(k, bytes) else k for k in (a.get("classlabels_int64s") or
                                                               a.get("classlabels_strings") or [])]
    order = sorted(range(len(keys)), key=lambda i: keys[i])
    return {"order": None if order == list(range(len(keys))) else np.asarray(order, np.int64)}


def _zip_map(m, a, x):
    """A classifier's probabilities [N, C], one column per class label in sorted order: what ONNX
    Runtime's sequence of maps compares as (farm.output_values)."""
    order = _arrays(a, x)["order"]
    return x if order is None else x[:, order]


ML_OPS = {
    "LinearRegressor": _linear_regressor,
    "LinearClassifier": _linear_classifier,
    "TreeEnsembleClassifier": _tree_classifier,
    "TreeEnsembleRegressor": _tree_regressor,
    "SVMRegressor": _svm_regressor,
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
    "TreeEnsembleClassifier": _prepare_tree_classifier,
    "TreeEnsembleRegressor": _prepare_tree_regressor,
    "SVMRegressor": _prepare_svm_regressor,
    "Scaler": lambda a: {"offset": np.asarray(a.get("offset") or [0.0], np.float32),
                         "scale": np.asarray(a.get("scale") or [1.0], np.float32)},
    "Normalizer": lambda a: {"norm": _text(a.get("norm", "MAX"))},
    "Binarizer": lambda a: {"threshold": float(a.get("threshold", 0.0))},
    "Imputer": _prepare_imputer,
    "ZipMap": _prepare_zip_map,
    "LabelEncoder": _prepare_label_encoder,
}
