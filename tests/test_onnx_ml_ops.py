"""scikit-learn models converted by skl2onnx (ai.onnx.ml operators beside standard ones) run through
farm's ONNX interpreter and give ONNX Runtime's outputs: trees, forests, boosting, linear models,
scalers, pipelines, ZipMap's probabilities; what it cannot reproduce is refused, saying why."""

from __future__ import annotations

import warnings

import numpy as np
import onnxruntime as ort
import pytest

torch = pytest.importorskip("torch")
sklearn = pytest.importorskip("sklearn")
skl2onnx = pytest.importorskip("skl2onnx")

from sklearn import ensemble, linear_model, neighbors, pipeline, preprocessing, svm, tree  # noqa: E402

from farm.errors import EngineUnsupported  # noqa: E402
from farm.onnx_torch import build_module  # noqa: E402
from farm.output_values import structured  # noqa: E402

RNG = np.random.default_rng(3)
X = RNG.standard_normal((64, 8)).astype(np.float32)
THREE = (X[:, 0] > 0.4).astype(int) + (X[:, 1] > 0).astype(int)  # classes 0, 1, 2
TWO = (X[:, 2] > 0).astype(int)
TARGET = X @ RNG.standard_normal(8).astype(np.float32) + 0.1 * RNG.standard_normal(64).astype(np.float32)

MODELS = {
    "random forest, 3 classes": lambda: ensemble.RandomForestClassifier(6, max_depth=4, random_state=0).fit(X, THREE),
    "gradient boosting, 3 classes": lambda: ensemble.GradientBoostingClassifier(n_estimators=8, random_state=0).fit(X, THREE),
    "decision tree, 3 classes": lambda: tree.DecisionTreeClassifier(max_depth=5, random_state=0).fit(X, THREE),
    "random forest, 2 classes": lambda: ensemble.RandomForestClassifier(5, max_depth=4, random_state=0).fit(X, TWO),
    "gradient boosting, 2 classes": lambda: ensemble.GradientBoostingClassifier(n_estimators=8, random_state=0).fit(X, TWO),
    "logistic regression, 3 classes": lambda: linear_model.LogisticRegression().fit(X, THREE),
    "logistic regression, 2 classes": lambda: linear_model.LogisticRegression().fit(X, TWO),
    "ridge classifier, 2 classes": lambda: linear_model.RidgeClassifier().fit(X, TWO),
    "forest regressor": lambda: ensemble.RandomForestRegressor(5, max_depth=4, random_state=0).fit(X, TARGET),
    "boosting regressor": lambda: ensemble.GradientBoostingRegressor(n_estimators=10, random_state=0).fit(X, TARGET),
    "linear regression, 2 targets": lambda: linear_model.LinearRegression().fit(X, np.stack([TARGET, -TARGET], 1)),
    "scaler and forest": lambda: pipeline.make_pipeline(preprocessing.StandardScaler(), preprocessing.Normalizer(),
                                                        ensemble.ExtraTreesClassifier(4, random_state=0)).fit(X, THREE),
    "support vector regression, RBF": lambda: svm.SVR(kernel="rbf", gamma=0.3).fit(X, TARGET),
    "support vector regression, polynomial": lambda: svm.NuSVR(kernel="poly", degree=2, coef0=0.5).fit(X, TARGET),
    "support vector regression, sigmoid": lambda: svm.SVR(kernel="sigmoid", gamma=0.05).fit(X, TARGET),
    "nearest neighbours, 3 classes (Scan)": lambda: neighbors.KNeighborsClassifier(3).fit(X, THREE),
    "nearest neighbours regressor (Scan)": lambda: neighbors.KNeighborsRegressor(4, weights="distance").fit(X, TARGET),
    "support vector classifier, 3 classes": lambda: svm.SVC(gamma=0.2).fit(X, THREE),
    "support vector classifier, 2 classes, polynomial": lambda: svm.SVC(kernel="poly", degree=2).fit(X, TWO),
    "robust scaler": lambda: preprocessing.RobustScaler().fit(X),
    "ordinal encoder": lambda: preprocessing.OrdinalEncoder().fit(np.round(X * 2) / 2),
    "binarizer": lambda: preprocessing.Binarizer(threshold=0.2).fit(X),
}


def onnx_of(estimator, **options):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return skl2onnx.to_onnx(estimator, X[:1], options={id(estimator): options} if options else None,
                                target_opset={"": 17, "ai.onnx.ml": 3})


@pytest.mark.parametrize("name", MODELS)
def test_a_converted_model_gives_onnx_runtimes_outputs(name: str) -> None:
    proto = onnx_of(MODELS[name]())
    feeds = (np.round(RNG.standard_normal((16, 8)) * 2) / 2).astype(np.float32)  # halves: the encoder's keys
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    expected = session.run(None, {session.get_inputs()[0].name: feeds})
    module = build_module(proto).eval()
    for annotate in (False, True):  # the generated code and the node-by-node path
        module.annotate = annotate
        with torch.no_grad():
            got = module(torch.from_numpy(feeds))
        assert len(got) == len(expected)
        for g, e in zip(got, expected):
            reference, _ = structured(e)  # ZipMap's maps: a column per class, as the accuracy check reads them
            np.testing.assert_allclose(g.numpy(), reference, rtol=1e-4, atol=1e-5, err_msg=name)


def test_what_it_cannot_reproduce_is_refused_with_why() -> None:
    from onnx import helper

    proto = onnx_of(ensemble.RandomForestClassifier(3, max_depth=3, random_state=0).fit(X, TWO))
    node = next(n for n in proto.graph.node if n.op_type == "TreeEnsembleClassifier")
    for attribute in node.attribute:  # the weights on both classes, as skl2onnx does not write them
        if attribute.name == "class_ids":
            attribute.CopyFrom(helper.make_attribute("class_ids", [i % 2 for i in range(len(attribute.ints))]))
    with pytest.raises(EngineUnsupported, match="two classes with weights on both.*run the model on onnxruntime"):
        build_module(proto)
    with pytest.raises(EngineUnsupported, match="with probabilities.*run the model on onnxruntime"):
        build_module(onnx_of(svm.SVC(probability=True, random_state=0).fit(X, THREE)))
    named = linear_model.LogisticRegression().fit(X, np.array(["a", "b", "c"])[THREE])
    with pytest.raises(EngineUnsupported, match="string class labels.*run the model on onnxruntime"):
        build_module(onnx_of(named))
