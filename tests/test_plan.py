"""Expanding a sweep into cells, and what a cell id depends on."""

from __future__ import annotations

from pathlib import Path

from farm.config import load_config
from farm.plan import plan_sweep
from tests.conftest import tiny_cnn, write_sweep

BASE = """
name = "p"
[[models]]
source = "models/tiny.onnx"
[axes]
precisions = ["fp32", "bf16"]
batch_sizes = [1, 2]
[profiles.a]
batch = "1-2-4"
[profiles.b]
batch = "1-4-8"
"""


def plan(directory: Path, body: str):
    return plan_sweep(load_config(write_sweep(directory, body)), directory / "cache")


def test_expansion_collapses_profiles_and_marks_unsupported(models_dir: Path) -> None:
    cells = plan(models_dir.parent, BASE).cells
    # 1 model x 2 precisions x 2 batches x (2 profiles collapsed to 1) x 1 backend
    assert len(cells) == 4
    assert {(c.precision, c.batch) for c in cells} == {("fp32", 1), ("fp32", 2), ("bf16", 1), ("bf16", 2)}
    assert all(c.profile is None for c in cells)
    assert all(c.notes == "profile axis collapsed: onnxruntime has no optimization profiles" for c in cells)
    bf16 = [c for c in cells if c.precision == "bf16"]
    assert all(c.unsupported_reason and "bf16" in c.unsupported_reason for c in bf16)
    assert all(c.unsupported_reason is None for c in cells if c.precision == "fp32")
    assert cells[0].input_shapes == {"x": (1, 3, 8, 8)} and cells[1].input_shapes == {"x": (2, 3, 8, 8)}


def test_no_profiles_no_note(models_dir: Path) -> None:
    body = BASE.split("[profiles.a]")[0]
    assert all(c.notes is None for c in plan(models_dir.parent, body).cells)


def test_list_valued_backend_option_is_an_axis(models_dir: Path) -> None:
    cells = plan(models_dir.parent, BASE + "\n[backends.onnxruntime]\nintra_op_threads = [1, 2]\n"
                 'graph_optimization = ["basic", "all"]\n').cells
    assert len(cells) == 16
    combos = {(c.options["intra_op_threads"], c.options["graph_optimization"]) for c in cells}
    assert combos == {(1, "basic"), (1, "all"), (2, "basic"), (2, "all")}


def test_cell_ids_are_stable_and_unique(models_dir: Path) -> None:
    first = [c.cell_id for c in plan(models_dir.parent, BASE).cells]
    again = [c.cell_id for c in plan(models_dir.parent, BASE).cells]
    assert first == again and len(set(first)) == len(first)


def test_cell_id_changes_with_what_changes_the_result(models_dir: Path) -> None:
    base = {c.batch: c.cell_id for c in plan(models_dir.parent, BASE).cells if c.precision == "fp32"}

    def ids(body: str) -> dict[int, str]:
        return {c.batch: c.cell_id for c in plan(models_dir.parent, body).cells if c.precision == "fp32"}

    assert ids(BASE + "\n[backends.onnxruntime]\nintra_op_threads = 1\n")[1] != base[1]
    assert ids(BASE + "\n[measurement]\nmin_iterations = 7\n")[1] != base[1]
    # a setting added later counts only away from its default: cells measured before keep their ids
    timed = BASE + "\n[measurement]\nmin_iterations = 7\n"
    assert ids(timed + "max_repeat_spread_percent = 5.0\n")[1] == ids(timed)[1]
    assert ids(timed + "max_repeat_spread_percent = 10\n")[1] != ids(timed)[1]
    assert ids(timed + "telemetry = true\n")[1] == ids(timed)[1]
    assert ids(timed + "telemetry = false\n")[1] != ids(timed)[1]
    assert ids(BASE.replace('name = "p"', 'name = "p"\ndescription = "words"'))[1] == base[1]
    tiny_cnn(models_dir / "tiny.onnx", channels=6)  # same name, other bytes
    assert ids(BASE)[1] != base[1]


def test_zoo_model_planned_with_its_default_dims(tmp_path: Path) -> None:
    from farm.models.zoo import ZOO

    body = '[[models]]\nsource = "zoo:resnet18"\n[axes]\nbatch_sizes = [4]\n'
    cells = plan(tmp_path, body).cells
    assert cells[0].input_shapes == {"input": (4, 3, 224, 224)}
    assert (tmp_path / "cache" / "zoo").is_dir() and "resnet18" in ZOO


def test_same_cells_in_two_sweeps_have_distinct_ids(models_dir: Path) -> None:
    """Ids are unique in the warehouse, so `JOIN ... USING (cell_id)` never pairs two sweeps' rows."""
    one = {c.cell_id for c in plan(models_dir.parent, BASE).cells}
    other = {c.cell_id for c in plan(models_dir.parent, BASE.replace('name = "p"', 'name = "q"')).cells}
    assert one.isdisjoint(other)


def test_dims_size_a_dynamic_dimension(tmp_path: Path) -> None:
    """`dims` keys are the model's own dynamic dimension names (unknown ones are config errors)."""
    tiny_cnn(tmp_path / "side.onnx", spatial="side")
    cells = plan(tmp_path, '[[models]]\nsource = "side.onnx"\ndims = { side = 16 }\n[axes]\nbatch_sizes = [2]\n').cells
    assert cells[0].input_shapes == {"x": (2, 3, 16, 16)} and cells[0].model.dims == {"side": 16}


def test_options_added_later_keep_existing_ids_and_auto_is_settled(models_dir: Path, monkeypatch) -> None:
    """ONNX Runtime's CUDA options came after its CPU cells had ids: at their defaults they stay
    out of the id (so a warehouse measured before resumes), away from them they count; `device =
    "auto"` is settled at planning (no GPU visible here: cpu), and the cell has the id and the
    options of the device it settled on."""
    fp32 = lambda body: {c.batch: c for c in plan(models_dir.parent, body).cells if c.precision == "fp32"}  # noqa: E731
    base = fp32(BASE)
    assert fp32(BASE + '\n[backends.onnxruntime]\ndevice = "cpu"\ncuda_graph = false\n')[1].cell_id == base[1].cell_id
    assert fp32(BASE + '\n[backends.onnxruntime]\ndevice = "cuda"\n')[1].cell_id != base[1].cell_id
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # whatever this machine has, CUDA would see none
    auto = fp32(BASE + '\n[backends.onnxruntime]\ndevice = "auto"\n')[1]
    assert auto.options["device"] == "cpu" and auto.device_kind == "cpu" and auto.cell_id == base[1].cell_id


def test_visible_gpu_count_follows_the_driver_and_cuda_visible_devices(tmp_path: Path, monkeypatch) -> None:
    from farm.cuda import visible_gpu_count

    driver = tmp_path / "gpus"
    assert visible_gpu_count(driver) == 0  # no NVIDIA driver
    driver.mkdir()
    for bus in ("0000:01:00.0", "0000:02:00.0", "0000:03:00.0"):
        (driver / bus).mkdir()
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert visible_gpu_count(driver) == 3
    for chosen, seen in (("", 0), ("1", 1), ("0,2", 2), ("0,7,1", 1), ("-1", 0), ("GPU-1234,0", 2)):
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", chosen)
        assert visible_gpu_count(driver) == seen, chosen
