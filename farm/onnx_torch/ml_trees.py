"""ai.onnx.ml's tree ensembles (TreeEnsembleClassifier, TreeEnsembleRegressor) as tensor code: every
tree walked at once, one level a step, following ONNX Runtime's CPU kernels (farm.onnx_torch.ml_ops)."""

from __future__ import annotations

import math

import numpy as np

from farm.errors import EngineUnsupported
from farm.onnx_torch.ml_common import arrays, class_labels, floats, post_transform, rows, text
from farm.onnx_torch.ops import UnsupportedOperator, lazy_torch

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
    modes = [_MODES[text(mode)] for mode in a["nodes_modes"]]
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
            "weights": weights.astype(np.float32), "has": has, "post_transform": text(a.get("post_transform", "NONE")),
            "base": np.asarray(a.get("base_values") or [0.0] * outputs, np.float32)}


def prepare_tree_classifier(a: dict) -> dict:
    labels = class_labels(a, "TreeEnsembleClassifier")
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


def prepare_tree_regressor(a: dict) -> dict:
    return _forest(a, "target", int(a.get("n_targets", 1))) | {
        "aggregate": text(a.get("aggregate_function", "SUM"))}


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


def tree_classifier(m, a, x):
    torch = lazy_torch()
    x = rows(floats(x))
    t = arrays(a, x)
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


def tree_regressor(m, a, x):
    torch = lazy_torch()
    x = rows(floats(x))
    t = arrays(a, x)
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

