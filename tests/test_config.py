"""Every validation rule: one line naming the file, the key and what is allowed; exit 2; nothing written."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from farm.backends.onnxruntime import OnnxRuntimeOptions
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
    ("no models", 'name = "x"\n', ["missing key 'models' (one [[models]] table per model"]),
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
    ("input range and value", GOOD + "\n[models.inputs.x]\nrange = [0, 1]\nvalue = 0.5\n",
     ["models[0].inputs.x: give either range or value, not both"]),
    ("bool input value", GOOD + "\n[models.inputs.x]\nvalue = true\n",
     ["models[0].inputs.x.value: expected a number", "got True"]),
    ("number batch_dim", GOOD.replace('source = "models/tiny.onnx"', 'source = "models/tiny.onnx"\nbatch_dim = 0'),
     ["models[0].batch_dim: expected a dimension name, \"INPUT:AXIS\", or a list of them", "got 0"]),
    ("empty batch_dim", GOOD.replace('source = "models/tiny.onnx"', 'source = "models/tiny.onnx"\nbatch_dim = [""]'),
     ["models[0].batch_dim: a dimension name must not be empty"]),
]

M = GOOD + "\n[measurement]\n"
AXES = 'name = "ok"\n[[models]]\nsource = "models/tiny.onnx"\n[axes]\n'
ORT = GOOD + "\n[backends.onnxruntime]\n"
# Careless inputs the schema once took silently (or with an error about the wrong thing).
STRICT_CONFIGS = [
    # numbers are finite everywhere: `inf` was a sweep that never ends
    ("infinite duration", M + "min_duration_ms = inf\n",
     ["measurement.min_duration_ms: inf is not allowed: numbers must be finite"]),
    ("nan warm-up", M + "warmup_ms = nan\n", ["measurement.warmup_ms: nan is not allowed"]),
    ("infinite cv", M + "max_cv_percent = inf\n", ["measurement.max_cv_percent: inf is not allowed"]),
    ("infinite tolerance", GOOD + "\n[accuracy.tolerances.fp16]\nmax_abs = inf\n",
     ["accuracy.tolerances.fp16.max_abs: inf is not allowed"]),
    ("infinite input range", GOOD + "\n[models.inputs.x]\nrange = [0, inf]\n",
     ["models[0].inputs.x.range[1]: inf is not allowed"]),
    ("infinite calibration mean", GOOD + "\n[models.calibration]\nmean = [0, -inf, 0]\n",
     ["models[0].calibration.mean[1]: -inf is not allowed"]),
    ("infinite backend option", ORT + "intra_op_threads = [1, inf]\n",
     ["backends.onnxruntime.intra_op_threads[1]: inf is not allowed"]),
    # no coercion: `true` is not 1, "8" is not 8, 8.0 is not an integer
    ("bool batch size", AXES + "batch_sizes = [true]\n", ["axes.batch_sizes[0]", "valid integer", "got True"]),
    ("string batch size", AXES + 'batch_sizes = [1, "8"]\n', ["axes.batch_sizes[1]", "valid integer", "got '8'"]),
    ("float batch size", AXES + "batch_sizes = [8.0]\n", ["axes.batch_sizes[0]", "valid integer", "got 8.0"]),
    ("bool repeats", M + "repeats = true\n", ["measurement.repeats", "valid integer", "got True"]),
    ("float iterations", M + "min_iterations = 10.5\n", ["measurement.min_iterations", "valid integer"]),
    ("string duration", M + 'min_duration_ms = "3000"\n', ["measurement.min_duration_ms", "valid number", "'3000'"]),
    ("bool duration", M + "min_duration_ms = true\n", ["measurement.min_duration_ms", "valid number", "True"]),
    ("string bool", GOOD + '\n[accuracy]\nenabled = "no"\n', ["accuracy.enabled", "valid boolean", "'no'"]),
    ("int bool", GOOD + "\n[precision]\nkeep_io_types = 0\n", ["precision.keep_io_types", "valid boolean", "got 0"]),
    ("bool tolerance", GOOD + "\n[accuracy.tolerances.int8]\nmin_top1 = true\n",
     ["accuracy.tolerances.int8.min_top1", "valid number"]),
    ("string dim size", GOOD.replace('source = "models/tiny.onnx"', 'source = "models/tiny.onnx"\ndims = { s = "128" }'),
     ["models[0].dims.s", "valid integer", "'128'"]),
    ("bool in a shape", GOOD + "\n[models.inputs.x]\nshape = [true, 3, 8, 8]\n",
     ["models[0].inputs.x.shape", "a size (an integer >= 1) or a dimension name, got True"]),
    ("bool input range", GOOD + "\n[models.inputs.x]\nrange = [false, true]\n",
     ["models[0].inputs.x.range[0]", "valid number"]),
    ("string profile bound", GOOD.replace('batch = "1-2-4"', 'batch = { min = "1", opt = 2, max = 4 }'),
     ["profiles.small.batch.min", "valid integer"]),
    ("bool profile", GOOD.replace('batch = "1-2-4"', "batch = true"),
     ["profiles.small.batch", "expected 'min-opt-max'", "got True"]),
    ("string calibration size", GOOD + '\n[models.calibration]\nsize = ["224", 224]\n',
     ["models[0].calibration.size[0]", "valid integer"]),
    # backend options: as strict, and checked for every backend named, swept or not
    ("options of a backend not swept", GOOD + '\n[backends.torch]\nmode = "turbo"\n',
     ["backends.torch.mode", "'eager', 'compile' or 'cudagraphs'", "'turbo'"]),
    ("bad type for a backend not swept", GOOD + "\n[backends.tensorrt]\nsparsity = 1\n",
     ["backends.tensorrt.sparsity", "valid boolean", "got 1"]),
    ("unknown option of a backend not swept", GOOD + "\n[backends.trtexec]\nbinray = \"x\"\n",
     ["backends.trtexec.binray: unknown option", "binary"]),
    ("string backend option", ORT + 'intra_op_threads = "2"\n',
     ["backends.onnxruntime.intra_op_threads", "valid integer", "'2'"]),
    ("bool in a backend option list", ORT + "intra_op_threads = [1, true]\n",
     ["backends.onnxruntime.intra_op_threads[1]", "valid integer", "True"]),
    ("int for a bool backend option", AXES + 'backends = ["torch"]\n[backends.torch]\ntransfers = [true, 0]\n',
     ["backends.torch.transfers[1]", "valid boolean"]),
    ("repeated backend option", ORT + "intra_op_threads = [2, 1, 2]\n",
     ["backends.onnxruntime.intra_op_threads: repeated value(s) 2: list each once"]),
    ("backend option repeated once normalized", GOOD + '\n[backends.tensorrt]\ntactic_sources = ["CUDNN", "CUDNN,"]\n',
     ["backends.tensorrt.tactic_sources: repeated value(s) 'CUDNN,' (the same as 'CUDNN')"]),
    # missing keys are reported as missing
    ("model without source", 'name = "x"\n[[models]]\nname = "m"\n',
     ["models[0]: missing key 'source' ('zoo:NAME' or a path to an .onnx file"]),
    ("profile without max", GOOD.replace('batch = "1-2-4"', "batch = { min = 1, opt = 2 }"),
     ["profiles.small.batch: missing key 'max'"]),
    # negative, zero, empty, out of range, the wrong shape of value
    ("negative seed", M + "seed = -1\n", ["measurement.seed", "greater than or equal to 0", "-1"]),
    ("integer beyond 64 bits", M + "seed = 99999999999999999999\n",
     ["measurement.seed: 99999999999999999999 is out of range: TOML integers are 64-bit"]),
    ("huge batch size", AXES + "batch_sizes = [4294967296]\n", ["axes.batch_sizes[0]", "less than or equal to 2147483647"]),
    ("huge duration", M + "min_duration_ms = 1e300\n", ["measurement.min_duration_ms", "less than or equal to 3600000"]),
    ("huge iteration count", M + "min_iterations = 1000000000000\n",
     ["measurement.min_iterations", "less than or equal to 10000000"]),
    ("zero repeats", M + "repeats = 0\n", ["measurement.repeats", "greater than or equal to 1", "got 0"]),
    ("zero std", GOOD + "\n[models.calibration]\nstd = [0.2, 0, 0.2]\n", ["models[0].calibration.std[1]", "greater than 0"]),
    ("empty shape", GOOD + "\n[models.inputs.x]\nshape = []\n", ["models[0].inputs.x.shape: must not be empty"]),
    ("empty dimension name", GOOD + '\n[models.inputs.x]\nshape = ["batch", 3, "", 8]\n',
     ["models[0].inputs.x.shape: a dimension name must not be empty"]),
    ("empty model name", GOOD.replace('source = "models/tiny.onnx"', 'source = "models/tiny.onnx"\nname = ""'),
     ["models[0].name", "at least 1 character"]),
    ("empty calibration path", GOOD + '\n[models.calibration]\ndata = ""\n', ["models[0].calibration.data", "at least 1"]),
    ("input range of one value", GOOD + "\n[models.inputs.x]\nrange = [1]\n",
     ["models[0].inputs.x.range: expected 2 values, got 1"]),
    ("list for a scalar", M + "repeats = [3, 5]\n",
     ["measurement.repeats", "got [3, 5]", "a list sweeps values only in [axes] and [backends.NAME]"]),
    ("scalar for a list", AXES + "batch_sizes = 8\n", ["axes.batch_sizes: expected a list (got 8)"]),
    ("value for a table", 'name = "x"\nmodels = ["models/tiny.onnx"]\n', ["models[0]: expected a table"]),
]


@pytest.mark.parametrize("what, body, expected", BAD_CONFIGS + STRICT_CONFIGS,
                         ids=[c[0] for c in BAD_CONFIGS + STRICT_CONFIGS])
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
    [options] = loaded.backend_options["onnxruntime"]
    assert list(loaded.backend_options) == ["onnxruntime"]
    # every option with its default filled in (the CUDA ones included), as the cells carry them
    assert options == OnnxRuntimeOptions().model_dump(mode="json")
    assert {"intra_op_threads": 0, "inter_op_threads": 0, "graph_optimization": "all",
            "execution_mode": "sequential", "device": "cpu"}.items() <= options.items()


def test_float_keys_take_integer_literals(models_dir: Path) -> None:
    """TOML reads `3000` as an int: a float key takes it (never a bool or a string)."""
    body = GOOD + "\n[measurement]\nmin_duration_ms = 3000\nwarmup_ms = 0\nmax_cv_percent = 5\n" \
        '[models.inputs.x]\nrange = [0, 1]\n[accuracy.tolerances.fp32]\nmin_cosine = 1\n'
    config = load_config(write_sweep(models_dir.parent, body)).config
    assert config.measurement.min_duration_ms == 3000.0 and isinstance(config.measurement.min_duration_ms, float)
    assert config.measurement.max_cv_percent == 5.0 and config.models[0].inputs["x"].range == (0.0, 1.0)
    assert config.accuracy.tolerance("fp32").min_cosine == 1.0


def test_options_of_backends_not_swept_are_checked_but_not_planned(models_dir: Path) -> None:
    loaded = load_config(write_sweep(models_dir.parent, GOOD + '\n[backends.torch]\nmode = ["eager", "compile"]\n'))
    assert list(loaded.backend_options) == ["onnxruntime"]


def test_missing_sweep_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such sweep file"):
        load_config(tmp_path / "nope.toml")


def test_name_defaults_to_file_stem(models_dir: Path) -> None:
    loaded = load_config(write_sweep(models_dir.parent, GOOD.replace('name = "ok"', ""), name="my sweep.toml"))
    assert loaded.config.name == "my-sweep"


@pytest.mark.parametrize("file_name", ["_draft.toml", ".sweep.toml", "x" * 70 + ".toml"])
def test_missing_name_that_the_file_name_cannot_stand_in_for(file_name: str, models_dir: Path) -> None:
    """Reported as the missing key it is, not as a bad value of a key the user never wrote."""
    path = write_sweep(models_dir.parent, GOOD.replace('name = "ok"', ""), name=file_name)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value) == (f"{path}: missing key 'name' (the sweep's name: letters, digits, '_', '-', '.'); "
                               f"the file name {file_name!r} cannot stand in for it")


# --- rules that need the model: checked by the planner, still before anything is written ---------

def test_fixed_batch_model_plans_other_batch_sizes_as_unsupported(tmp_path: Path) -> None:
    """Not an error: a sweep of several models goes on; the cells say why they cannot run."""
    tiny_cnn(tmp_path / "fixed.onnx", batch=1)
    path = write_sweep(tmp_path, '[[models]]\nsource = "fixed.onnx"\n[axes]\nbatch_sizes = [1, 4]\n')
    cells = plan_sweep(load_config(path), tmp_path / "cache").cells
    assert {c.batch: c.unsupported_reason for c in cells} == {
        1: None, 4: "model 'fixed' has a fixed batch of 1 (axis 0 of every input), so it runs at batch 1 only: "
                    "export it with a dynamic batch dimension to sweep batch sizes"}
    assert cells[1].input_shapes == {"x": (1, 3, 8, 8)}


def test_a_model_fixed_at_a_batch_the_sweep_does_not_list_is_measured_at_its_own(tmp_path: Path) -> None:
    """A model exported at batch 2 in a sweep of batch 1 and 4 gets a cell at 2 too, saying why; its
    cells at 1 and 4 stay unsupported, with the reason."""
    tiny_cnn(tmp_path / "fixed.onnx", batch=2)
    path = write_sweep(tmp_path, '[[models]]\nsource = "fixed.onnx"\n[axes]\nbatch_sizes = [1, 4]\n')
    cells = {c.batch: c for c in plan_sweep(load_config(path), tmp_path / "cache").cells}
    assert sorted(cells) == [1, 2, 4]
    assert cells[2].unsupported_reason is None and cells[2].input_shapes == {"x": (2, 3, 8, 8)}
    assert cells[2].notes == ("batch 2: the only batch model 'fixed' runs (its inputs fix it), which the sweep's "
                              "batch sizes do not list")
    assert all("has a fixed batch of 2" in cells[b].unsupported_reason and not cells[b].notes for b in (1, 4))


def test_dynamic_dim_without_size(tmp_path: Path) -> None:
    tiny_cnn(tmp_path / "tiny.onnx", spatial=8)
    body = '[[models]]\nsource = "tiny.onnx"\n[models.inputs.x]\nshape = ["batch", 3, "height", 8]\n'
    path = write_sweep(tmp_path, body)
    with pytest.raises(ConfigError) as info:
        plan_sweep(load_config(path), tmp_path / "cache")
    assert str(info.value) == (f"{path}: models[0].dims: dynamic dimension(s) with no size: 'height' (input 'x' "
                               "axis 2); set in models[0]: dims = { height = 128 }")


def test_override_of_an_input_the_model_lacks(models_dir: Path) -> None:
    body = GOOD + "\n[models.inputs.image]\ndtype = \"float32\"\n"
    with pytest.raises(ConfigError, match=r"models\[0\]\.inputs\.image: model 'tiny' has no input 'image'; its inputs: x"):
        plan_sweep(load_config(write_sweep(models_dir.parent, body)), models_dir.parent / "cache")


def test_profile_naming_a_dimension_no_model_has(models_dir: Path) -> None:
    body = GOOD.replace('batch = "1-2-4"', 'batch = "1-2-4"\nsequence = "1-8-16"')
    with pytest.raises(ConfigError, match=r"profiles\.small\.sequence: no model has a dynamic dimension 'sequence'"):
        plan_sweep(load_config(write_sweep(models_dir.parent, body)), models_dir.parent / "cache")


@pytest.mark.parametrize("spatial, dims, expected", [
    ("side", "{ sidee = 8 }", "models[0].dims.sidee: model 'tiny' has no dynamic dimension 'sidee'; "
                              "its dynamic dimensions: side"),
    (8, "{ sequense = 128 }", "models[0].dims.sequense: model 'tiny' has no dynamic dimension 'sequense'; "
                              "its dynamic dimensions: none (every dimension but the batch is fixed)"),
    ("side", "{ side = 8, batch = 4 }", "models[0].dims.batch: model 'tiny' has no dynamic dimension 'batch' "
                                        "(that is the batch: its sizes are axes.batch_sizes); its dynamic dimensions: side"),
], ids=["typo", "no dynamic dimension", "the batch"])
def test_unknown_dims_key(spatial, dims: str, expected: str, tmp_path: Path) -> None:
    tiny_cnn(tmp_path / "tiny.onnx", spatial=spatial)
    path = write_sweep(tmp_path, f'[[models]]\nsource = "tiny.onnx"\ndims = {dims}\n')
    with pytest.raises(ConfigError) as info:
        plan_sweep(load_config(path), tmp_path / "cache")
    assert str(info.value) == f"{path}: {expected}"


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


def test_cli_unknown_dim_exits_2_and_writes_nothing(models_dir: Path, capsys) -> None:
    path = write_sweep(models_dir.parent, GOOD.replace('source = "models/tiny.onnx"',
                                                       'source = "models/tiny.onnx"\ndims = { sequense = 128 }'))
    results = models_dir.parent / "results"
    assert main(["sweep", str(path), "--results", str(results)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"farm: error: {path}: models[0].dims.sequense: model 'tiny' has no dynamic dimension")
    assert len(err.splitlines()) == 1
    assert not results.exists() or not list(results.rglob("*.parquet"))


def test_measurement_record_has_the_config_defaults() -> None:
    """farm.records.MeasurementSettings (what cells carry) and the sweep file's [measurement]
    table agree on every key and default."""
    from farm.config import Measurement
    from farm.records import MeasurementSettings

    assert MeasurementSettings(**Measurement().model_dump()) == MeasurementSettings()


def test_model_paths_that_are_not_files_and_absurd_files_are_one_line(tmp_path: Path) -> None:
    """A folder, a device, a FIFO, a symbolic link loop or a NUL character as a model path, and a
    sweep file of 5,000 nested tables: each one ConfigError saying what it is, never a traceback."""
    import os

    (tmp_path / "somedir").mkdir()
    os.mkfifo(tmp_path / "fifo.onnx")
    (tmp_path / "loop.onnx").symlink_to(tmp_path / "loop.onnx")
    for source, said in (("somedir", "is a folder, not a model file"), ("/dev/null", "is not a regular file"),
                         ("fifo.onnx", "is not a regular file"), ("loop.onnx", "cannot open 'loop.onnx'"),
                         ("a\\u0000b.onnx", "has a NUL character"), ("missing.onnx", "no such file 'missing.onnx'")):
        path = tmp_path / "s.toml"
        path.write_text(f'name = "s"\n[[models]]\nsource = "{source}"\n')
        with pytest.raises(ConfigError) as caught:
            load_config(path)
        assert said in str(caught.value) and "\n" not in str(caught.value), (source, caught.value)
    deep = tmp_path / "deep.toml"
    deep.write_text('name = "d"\n[' + ".".join(["a"] * 5000) + "]\nx = 1\n")
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(1000)  # Python's default: a library loaded earlier (torch) may have raised it
    try:
        with pytest.raises(ConfigError, match="nested too deeply"):
            load_config(deep)
    finally:
        sys.setrecursionlimit(limit)


SHIPPED_SWEEPS = sorted([*(Path(__file__).resolve().parents[1] / "configs").glob("*.toml"),
                         *(Path(__file__).resolve().parents[1] / "benchmarks" / "device").glob("*.toml")])


@pytest.mark.parametrize("path", SHIPPED_SWEEPS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_sweep_file_farm_ships_loads(path: Path) -> None:
    """The sweep files in configs/ and benchmarks/device/ are read as a user's would be: a key
    renamed or a value the schema no longer takes fails here, not on a GPU machine."""
    loaded = load_config(path)
    assert loaded.config.name and loaded.config.models and loaded.config.axes.backends, path


def test_a_sweep_file_with_a_byte_order_mark_reads_as_without(tmp_path: Path) -> None:
    """Editors on Windows write UTF-8 with a byte-order mark, which TOML does not allow."""
    from farm.config import load_config

    path = tmp_path / "bom.toml"
    path.write_bytes(b"\xef\xbb\xbf" + b'name = "bom"\n[[models]]\nsource = "zoo:resnet18"\n')
    assert load_config(path).config.name == "bom"
