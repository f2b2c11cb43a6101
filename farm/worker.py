from farm.cell_runner import run_cell  # noqa: F401  shim: moved to farm.cell_runner (remove when nothing imports it)
