"""`farm graph`: the engine graph of an ingested TensorRT engine and of a farm-measured cell."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from farm.cli import main
from farm.warehouse import Warehouse
from tests.conftest import write_sweep
from tests.ingest.test_trt_fixtures import SEEDS

needs_dot = pytest.mark.skipif(shutil.which("dot") is None, reason="graphviz's dot is not installed")


@pytest.fixture
def centernet(tmp_path: Path) -> tuple[str, str]:
    results = str(tmp_path / "results")
    assert main(["ingest", str(SEEDS / "centernet_int8.layer_info.log"), str(SEEDS / "centernet_int8.profile.json"),
                 "--results", results]) == 0
    cell = Warehouse(results).connect().execute("SELECT cell_id FROM cells").fetchone()[0]
    return results, cell


@needs_dot
def test_svg_of_an_ingested_engine(centernet, tmp_path: Path) -> None:
    results, cell = centernet
    out = tmp_path / "engine.svg"
    assert main(["graph", cell[:6], "--results", results, "-o", str(out)]) == 0
    svg = out.read_text()
    assert svg.count('class="node"') == 54 + 4  # 54 layers, 1 engine input, 3 outputs (hm, wh, reg)
    assert "MaxPool_12" in svg and "15.28 %" in svg  # the slowest layer's share
    assert len(re.findall(r'class="edge"', svg)) >= 57
    from farm.layers.graph import _heat

    assert _heat(15.28) in svg and _heat(15.28) != _heat(0.5)  # the hottest layer is coloured by its share


@needs_dot
def test_png_of_a_measured_cell(models_dir: Path, tmp_path: Path) -> None:
    config = write_sweep(models_dir.parent, '[[models]]\nsource = "models/tiny.onnx"\n')
    results = str(tmp_path / "results")
    assert main(["sweep", str(config), "--results", results, "--executor", "local"]) == 0
    cell = Warehouse(results).connect().execute("SELECT cell_id FROM cells").fetchone()[0]
    out = tmp_path / "engine.png"
    assert main(["graph", cell, "--results", results, "-o", str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_dot_source_and_mistakes(centernet, tmp_path: Path, capsys) -> None:
    results, cell = centernet
    out = tmp_path / "engine.dot"
    assert main(["graph", cell, "--results", results, "-o", str(out)]) == 0
    source = out.read_text()
    assert source.startswith("digraph engine") and source.count("->") >= 57
    assert main(["graph", cell, "--results", results, "-o", str(tmp_path / "engine.jpg")]) == 2
    assert main(["graph", "zzzz", "--results", results]) == 2
    assert "0 cells match" in capsys.readouterr().err
