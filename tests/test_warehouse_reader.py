"""Readers (the dashboard, `farm report`, `farm compare`, `farm query` / `show` / `ls`) hold a
WarehouseReader: it reads what a Warehouse reads and cannot write."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from farm.warehouse import Warehouse, WarehouseReader
from farm.warehouse.reader import READ_METHODS

ROOT = Path(__file__).resolve().parents[1]
READERS = [*sorted((ROOT / "farm" / "dashboard").rglob("*.py")), *sorted((ROOT / "farm" / "compare").rglob("*.py")),
           *(ROOT / "farm" / "cli" / f"{name}.py" for name in ("query", "graph", "ls", "show", "dashboard", "report",
                                                             "compare", "common"))]


def test_the_reader_lends_every_read_and_no_write(tmp_path: Path) -> None:
    writer, reader = Warehouse(tmp_path), WarehouseReader(tmp_path)
    missing = sorted(name for name in READ_METHODS if not hasattr(writer, name))
    assert not missing, f"READ_METHODS names what Warehouse no longer has: {missing}"
    for name in ("write_cell", "write_rows", "write_sweep_run", "writer_lock", "compact", "consolidate", "fix",
                 "repair", "quarantine", "remove_leftovers", "prepare_sweep", "write_compaction"):
        assert hasattr(writer, name)
        with pytest.raises(AttributeError, match="only reads"):
            getattr(reader, name)
    assert reader.sweeps() == [] and reader.root == writer.root
    assert not any(tmp_path.iterdir())  # reading an empty folder wrote nothing


def test_reader_modules_never_make_a_writer() -> None:
    """No module of the dashboard, compare or the reading commands calls Warehouse(...)."""
    found = []
    for path in READERS:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == "Warehouse":
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not found, found
