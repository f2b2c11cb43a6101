"""Streamlit and matplotlib are the `dashboard` extra: without them a sweep runs, the dashboard's
data layer imports, and `farm dashboard` / `farm report` say in one line how to install them."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import tiny_cnn, write_sweep

ROOT = Path(__file__).resolve().parent.parent
UI = ("streamlit", "matplotlib")

BLOCKER = textwrap.dedent(f"""
    import sys
    class _NoUI:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in {UI!r}:
                raise ModuleNotFoundError(f"No module named {{name!r}}")
            return None
    sys.meta_path.insert(0, _NoUI())
""")


def run_without_ui(code: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", BLOCKER + textwrap.dedent(code)], cwd=cwd, capture_output=True,
                          text=True, timeout=300, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})


@pytest.mark.parametrize("args, needs", [(["dashboard"], "streamlit"), (["report", "any"], "matplotlib")])
def test_ui_commands_without_the_extra_say_how_to_install_it(args: list[str], needs: str, tmp_path: Path) -> None:
    result = run_without_ui(f"""
        from farm.cli import main
        sys.exit(main({args!r}))
    """, tmp_path)
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert needs in result.stderr and "pip install 'farm[dashboard]'" in result.stderr


def test_the_data_layer_imports_without_the_extra(tmp_path: Path) -> None:
    result = run_without_ui("""
        import farm.dashboard.data, farm.dashboard.layer_tables, farm.sql_console.console
        print("loaded", sorted(m for m in sys.modules if m.split(".")[0] in ("streamlit", "matplotlib")))
    """, tmp_path)
    assert result.returncode == 0, result.stderr
    assert "loaded []" in result.stdout


@pytest.mark.slow
def test_a_sweep_runs_without_the_extra(tmp_path: Path) -> None:
    tiny_cnn(tmp_path / "tiny.onnx")
    write_sweep(tmp_path, '[[models]]\nsource = "tiny.onnx"\n[axes]\nbatch_sizes = [1]\n')
    result = run_without_ui("""
        from farm.cli import main
        sys.exit(main(["sweep", "sweep.toml", "--executor", "local"]))
    """, tmp_path)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
