"""`farm --help`, planning and the warehouse work with no engine or GPU stack importable.

Each check runs in a fresh interpreter where importing any engine raises ImportError, as on a
machine where none is installed (after Polygraphy's tests/mod/test_dependencies.py).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from tests.conftest import tiny_cnn, write_sweep

ROOT = Path(__file__).resolve().parent.parent
ENGINES = ("onnxruntime", "torch", "tensorrt", "tensorrt_rtx", "cuda", "ray", "polygraphy", "modelopt", "pycuda")

BLOCKER = textwrap.dedent(f"""
    import sys
    class _NoEngines:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in {ENGINES!r}:
                raise ImportError(f"{{name}} is blocked for this test")
            return None
    sys.meta_path.insert(0, _NoEngines())
""")


def run_bare(code: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", BLOCKER + textwrap.dedent(code)], cwd=cwd, capture_output=True,
                          text=True, timeout=120, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})


def test_every_module_imports_without_engines(tmp_path: Path) -> None:
    result = run_bare("""
        import importlib, pkgutil, farm
        for info in pkgutil.walk_packages(farm.__path__, "farm."):
            if info.name != "farm.__main__":  # that one runs the CLI
                importlib.import_module(info.name)
        print("imported", sorted(m for m in sys.modules if m.split(".")[0] in {"onnxruntime", "torch", "ray"}))
    """, tmp_path)
    assert result.returncode == 0, result.stderr
    assert "imported []" in result.stdout


def test_help_without_engines(tmp_path: Path) -> None:
    for args in ([], ["sweep"], ["query"], ["ls"], ["show"], ["dashboard"], ["report"]):
        result = run_bare(f"""
            from farm.cli import main
            try:
                main({[*args, "--help"]!r})
            finally:
                print("heavy", sorted(m for m in sys.modules if m.split(".")[0] in {{"streamlit", "pandas",
                                                                                    "matplotlib", "duckdb"}}))
        """, tmp_path)
        assert result.returncode == 0, result.stderr
        assert "usage: farm" in result.stdout and "heavy []" in result.stdout
        assert args == [] or "--results" in result.stdout


def test_plan_and_warehouse_without_engines(tmp_path: Path) -> None:
    tiny_cnn(tmp_path / "tiny.onnx")
    write_sweep(tmp_path, '[[models]]\nsource = "tiny.onnx"\n[axes]\nbatch_sizes = [1, 4]\n')
    result = run_bare("""
        from pathlib import Path
        from farm.config import load_config
        from farm.plan import plan_sweep
        from farm.warehouse import Warehouse
        from farm.cell_runner import run_cell
        plan = plan_sweep(load_config("sweep.toml"), Path("cache"))
        print("cells", len(plan.cells))
        result = run_cell(plan.cells[0], Path("cache"))
        print("status", result.status, result.reason)
        print("tables", Warehouse("results").connect().execute("SELECT count(*) FROM cells").fetchone())
    """, tmp_path)
    assert result.returncode == 0, result.stderr
    assert "cells 2" in result.stdout
    # the backend says why it cannot run and how to fix it, instead of crashing
    assert "status skipped onnxruntime is not importable" in result.stdout and "pip install onnxruntime" in result.stdout
    assert "tables (0,)" in result.stdout
