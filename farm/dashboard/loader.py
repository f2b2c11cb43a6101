"""Moved: the consolidated copy lives in farm.warehouse.consolidated (writers refresh it through
`Warehouse.consolidate`)."""

from __future__ import annotations

from pathlib import Path


def refresh(root: str | Path, sweep: str) -> None:  # shim: moved to farm.warehouse (Warehouse.consolidate); remove when benchmarks/ call that
    from farm.warehouse import Warehouse

    Warehouse(Path(root).resolve()).consolidate(sweep)
