"""Every validation rule: one line naming the file, the key and what is allowed; exit 2; nothing written."""

from __future__ import annotations

from pathlib import Path

import pytest

from farm.cli import main
from farm.config import load_config
from farm.errors import ConfigError
from farm.plan import plan_sweep
from tests.conftest import tiny_cnn, write_sweep

GOOD = """
name = "ok"
[[models]]
source = "models/tiny.onnx"
[axes]
batch_sizes = [1, 2]
[profiles.small]
batch = "1-2-4"
"""

# (what is wrong, sweep file, substrings the one-line message must contain)
BAD_CONFIGS = [
    ("unknown top-level key", "sweeep = 1\n" + GOOD, ["unknown key 'sweeep'", "allowed keys: name,"]),
    ("unknown key in a table", GOOD + "\n[measurement]\nwarmup = 3\n",
     ["measurement: unknown key 'warmup'", "warmup_ms", "min_iterations"]),
    ("unknown key in a model", GOOD.replace('source = "models/tiny.onnx"', 'source = "models/tiny.onnx"\npath = "x"'),
     ["models[0]: unknown key 'path'", "allowed keys: source, name, dims, inputs"]),
    ("unknown key in an input override",
     GOOD + '\n[models.inputs.x]\nshap = [1, 3, 8, 8]\n', ["models[0].inputs.x: unknown key 'shap'", "shape"]),
    ("unknown backend option", GOOD + "\n[backends.onnxruntime]\nthreads = 2\n",
     ["backends.onnxruntime.threads: unknown option", "intra_op_threads"]),
    ("bad backend option value", GOOD + '\n[backends.onnxruntime]\ngraph_optimization = "max"\n',
     ["backends.onnxruntime.graph_optimization", "'max'"]),
    ("wrong type", GOOD + '\n[measurement]\nrepeats = "three"\n', ["measurement.repeats", "integer", "'three'"]),
    ("negative duration", GOOD + "\n[measurement]\nmin_duration_ms = -1\n", ["measurement.min_duration_ms", "0"]),
    ("empty precisions", GOOD.replace("[axes]", "[axes]\nprecisions = []"), ["axes.precisions: must not be empty"]),
    ("empty batch sizes", GOOD.replace("batch_sizes = [1, 2]", "batch_sizes = []"), ["axes.batch_sizes: must not be empty"]),
    ("empty backends", GOOD.replace("[axes]", "[axes]\nbackends = []"), ["axes.backends: must not be empty"]),
    ("empty models", 'name = "x"\nmodels = []\n', ["models: must not be empty"]),
    ("no models", 'name = "x"\n', ["models: required key is missing"]),
    ("batch size zero", GOOD.replace("batch_sizes = [1, 2]", "batch_sizes = [0, 1]"), ["axes.batch_sizes[0]", "1"]),
    ("repeated batch size", GOOD.replace("batch_sizes = [1, 2]", "batch_sizes = [1, 1]"), ["axes.batch_sizes", "repeated"]),
    ("unknown precision", GOOD.replace("[axes]", '[axes]\nprecisions = ["fp32", "fp64"]'),
     ["axes.precisions[1]", "'fp64' is not allowed", "'fp16'"]),
    ("unknown backend", GOOD.replace("[axes]", '[axes]\nbackends = ["onnxruntime", "tvm"]'),
     ["axes.backends: unknown backend 'tvm'", "known backends: onnxruntime"]),
    ("options for an unknown backend", GOOD + "\n[backends.tensorrtt]\nx = 1\n", ["backends.tensorrtt: unknown backend"]),
    ("profile out of order", GOOD.replace('batch = "1-2-4"', 'batch = "4-2-8"'),
     ["profiles.small.batch", "min 4, opt 2, max 8 are out of order"]),
    ("profile malformed", GOOD.replace('batch = "1-2-4"', 'batch = "1..4"'), ["profiles.small.batch", "min-opt-max"]),
    ("empty profile", GOOD.replace('batch = "1-2-4"', ""), ["profiles", "has no dimensions"]),
    ("batch outside a profile", GOOD.replace('batch = "1-2-4"', 'batch = "2-2-4"'),
     ["axes.batch_sizes: batch 1 is outside profile 'small' (batch 2-2-4)"]),
    ("unknown profile in the axis", GOOD.replace("[axes]", '[axes]\nprofiles = ["large"]'),
     ["axes.profiles: unknown profile 'large'", "defined profiles: small"]),
    ("missing model file", GOOD.replace("models/tiny.onnx", "models/missing.onnx"),
     ["models[0].source: no such file 'models/missing.onnx'"]),
    ("unknown zoo model", GOOD.replace("models/tiny.onnx", "zoo:resnet51"),
     ["models[0].source: unknown zoo model 'resnet51'", "resnet50"]),
    ("bad sweep name", GOOD.replace('name = "ok"', 'name = "a/b"'), ["name:", "folder name"]),
    ("not TOML", "name = \n", ["not valid TOML"]),
    ("bad input range", GOOD + "\n[models.inputs.x]\nrange = [1, 0]\n", ["models[0].inputs.x.range", "low < high"]),
]


@pytest.mark.parametrize("what, body, expected", BAD_CONFIGS, ids=[c[0] for c in BAD_CONFIGS])
def test_bad_config_is_one_clear_line(what: str, body: str, expected: list[str], models_dir: Path) -> None:
    path = write_sweep(models_dir.parent, body, fast=False)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    message = str(info.value)
    assert message.startswith(f"{path}: "), message
    assert "\n" not in message
    for part in expected:
        assert part in message, f"{part!r} not in {message!r}"


def test_good_config_loads(models_dir: Path) -> None:
    loaded = load_config(write_sweep(models_dir.parent, GOOD))
    assert loaded.config.axes.batch_sizes == [1, 2]
    assert loaded.profile_names() == ["small"]
    assert loaded.backend_options == {"onnxruntime": [
        {"intra_op_threads": 0, "inter_op_threads": 0, "graph_optimization": "all", "execution_mode": "sequential"}]}


def test_missing_sweep_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such sweep file"):
        load_config(tmp_path / "nope.toml")


def test_name_defaults_to_file_stem(models_dir: Path) -> None:
    loaded = load_config(write_sweep(models_dir.parent, GOOD.replace('name = "ok"', ""), name="my sweep.toml"))
    assert loaded.config.name == "my-sweep"


# --- rules that need the model: checked by the planner, still before anything is written ---------

def test_fixed_batch_model_rejects_other_batch_sizes(tmp_path: Path) -> None:
    tiny_cnn(tmp_path / "fixed.onnx", batch=1)
    path = write_sweep(tmp_path, '[[models]]\nsource = "fixed.onnx"\n[axes]\nbatch_sizes = [1, 4]\n')
    with pytest.raises(ConfigError, match=r"fixed batch of 1, so batch size\(s\) 4 cannot run"):
        plan_sweep(load_config(path), tmp_path / "cache")


def test_dynamic_dim_without_size(tmp_path: Path) -> None:
    tiny_cnn(tmp_path / "tiny.onnx", spatial=8)
    body = '[[models]]\nsource = "tiny.onnx"\n[models.inputs.x]\nshape = ["batch", 3, "height", 8]\n'
    with pytest.raises(ConfigError, match=r"models\[0\]\.dims: input 'x' has dynamic dimension 'height'"):
        plan_sweep(load_config(write_sweep(tmp_path, body)), tmp_path / "cache")


def test_override_of_an_input_the_model_lacks(models_dir: Path) -> None:
    body = GOOD + "\n[models.inputs.image]\ndtype = \"float32\"\n"
    with pytest.raises(ConfigError, match=r"models\[0\]\.inputs\.image: model 'tiny' has no input 'image'; its inputs: x"):
        plan_sweep(load_config(write_sweep(models_dir.parent, body)), models_dir.parent / "cache")


def test_profile_naming_a_dimension_no_model_has(models_dir: Path) -> None:
    body = GOOD.replace('batch = "1-2-4"', 'batch = "1-2-4"\nsequence = "1-8-16"')
    with pytest.raises(ConfigError, match=r"profiles\.small\.sequence: no model has a dynamic dimension 'sequence'"):
        plan_sweep(load_config(write_sweep(models_dir.parent, body)), models_dir.parent / "cache")


def test_dim_size_outside_a_profile(tmp_path: Path) -> None:
    tiny_cnn(tmp_path / "tiny.onnx", spatial=8)
    body = ('[[models]]\nsource = "tiny.onnx"\ndims = { height = 8 }\n'
            '[models.inputs.x]\nshape = ["batch", 3, "height", 8]\n[profiles.p]\nheight = "16-16-32"\n')
    with pytest.raises(ConfigError, match=r"dims\.height: 8 is outside profile 'p' \(height 16-32\)"):
        plan_sweep(load_config(write_sweep(tmp_path, body)), tmp_path / "cache")


@pytest.mark.parametrize("what, body, expected", [BAD_CONFIGS[1], BAD_CONFIGS[21], BAD_CONFIGS[23]],
                         ids=["unknown key", "batch outside profile", "missing file"])
def test_cli_config_error_exits_2_and_writes_nothing(what, body, expected, models_dir: Path, capsys) -> None:
    path = write_sweep(models_dir.parent, body, fast=False)
    results = models_dir.parent / "results"
    assert main(["sweep", str(path), "--results", str(results)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("farm: error: ") and expected[0] in err
    assert len(err.splitlines()) == 1
    assert not results.exists() or not list(results.rglob("*.parquet"))
