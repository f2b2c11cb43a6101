"""The layering rules of docs/architecture.md hold on every run: benchmarks/architecture.py reads
farm/ with `ast` (no import) and these tests assert what it counts."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def shape() -> dict:
    spec = importlib.util.spec_from_file_location("architecture", ROOT / "benchmarks" / "architecture.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.report(ROOT) | {"module": module}


def test_every_module_has_a_layer(shape: dict) -> None:
    assert shape["unlayered"] == [], "add the module to LAYERS in benchmarks/architecture.py and docs/architecture.md"


def test_no_import_cycles(shape: dict) -> None:
    assert shape["cycles"] == []


def test_imports_point_down(shape: dict) -> None:
    assert shape["upward"] == []


def test_no_private_name_is_imported_from_another_module(shape: dict) -> None:
    assert shape["private"] == []


def test_one_atomic_write_and_one_device_timer(shape: dict) -> None:
    assert shape["copies"]["atomic write"] == ["farm.files"]
    assert shape["copies"]["device timer"] in ([], ["farm.device_timer"])


def test_modules_and_functions_stay_small(shape: dict) -> None:
    assert shape["big"] == [], f"modules over {shape['module'].MAX_MODULE_LINES} lines"
    assert shape["long"] == [], f"functions over {shape['module'].MAX_FUNCTION_LINES} lines"


def test_the_checker_sees_what_it_must(shape: dict, tmp_path: Path) -> None:
    """On a made-up package: a cycle, an upward import, a private import, a copy of the atomic
    write and an over-long function are all found (a checker that finds nothing proves nothing)."""
    farm = tmp_path / "farm"
    (farm / "backends").mkdir(parents=True)
    (farm / "__init__.py").write_text("")
    (farm / "records.py").write_text("from farm.sweep import run\n")  # layer 0 imports layer 6
    (farm / "sweep.py").write_text("from farm.records import X\nfrom farm.plan import _private\n"
                                   "def run():\n" + "    x = 1\n" * 70)
    (farm / "plan.py").write_text("import os\n_private = 1\ndef save(tmp, path):\n    os.replace(tmp, path)\n")
    found = shape["module"].report(tmp_path)
    assert found["cycles"] == [["farm.records", "farm.sweep"]]
    assert "farm.records (layer 0) imports farm.sweep (layer 6)" in found["upward"]
    assert found["private"] == ["farm.sweep imports farm.plan._private"]
    assert found["copies"]["atomic write"] == ["farm.plan"]
    assert [name for name, _ in found["long"]] == ["farm.sweep.run"]
