"""Readers (the dashboard, `farm report`, `farm compare`, `farm query` / `show` / `ls`) hold a
WarehouseReader: it reads what a Warehouse reads and cannot write."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from farm.warehouse import Warehouse, WarehouseReader
from farm.warehouse.reader import WRITE_METHODS

ROOT = Path(__file__).resolve().parents[1]
READERS = [*sorted((ROOT / "farm" / "dashboard").rglob("*.py")), *sorted((ROOT / "farm" / "compare").rglob("*.py")),
           *(ROOT / "farm" / "cli" / f"{name}.py" for name in ("query", "graph", "ls", "show", "dashboard", "report",
                                                             "compare", "common"))]


def test_the_reader_lends_every_read_and_no_write(tmp_path: Path) -> None:
    writer, reader = Warehouse(tmp_path), WarehouseReader(tmp_path)
    reads = {name for name in dir(WarehouseReader) if not name.startswith("_")}
    writes = {name for name in dir(Warehouse) if not name.startswith("_")} - reads
    assert writes == WRITE_METHODS, "WRITE_METHODS, the reader's list of what it refuses, differs from Warehouse's writes"
    for name in sorted(writes):
        with pytest.raises(AttributeError, match="only reads"):
            getattr(reader, name)
    with pytest.raises(AttributeError, match="has no attribute 'nosuch'"):
        writer.nosuch  # noqa: B018 - a name neither has is a plain AttributeError
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
