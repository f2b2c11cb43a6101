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
    err = capsys.readouterr().err
    assert "no cell id starts with 'zzzz'" in err and "farm show" in err and "longer prefix" not in err


@pytest.fixture
def fpn_truncated(tmp_path: Path) -> tuple[str, str]:
    """fpn_int8: a profile of 113 layers, a verbose log cut after 48 (the other 65 name no tensors)."""
    results = str(tmp_path / "results")
    assert main(["ingest", str(SEEDS / "fpn_int8.profile.json"), str(SEEDS / "fpn_int8.build_verbose.log"),
                 "--results", results]) == 0
    cell = Warehouse(results).connect().execute("SELECT cell_id FROM cells").fetchone()[0]
    return results, cell


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


@needs_dot
def test_a_truncated_log_is_ranked_and_listed_not_a_row_of_boxes(fpn_truncated, tmp_path: Path) -> None:
    """Before: an 18911 x 5164 px PNG, 65 unconnected boxes in one row. Now the 48 layers the log
    names tensors for are ranked top to bottom, the 65 others listed in one table."""
    results, cell = fpn_truncated
    out = tmp_path / "engine.png"
    assert main(["graph", cell, "--results", results, "-o", str(out)]) == 0
    width, height = png_size(out.read_bytes())
    assert width < 2500 and height > width  # a column, not a row
    assert main(["graph", cell, "--results", results, "-o", str(tmp_path / "engine.svg")]) == 0
    svg = (tmp_path / "engine.svg").read_text()
    assert "65 layers without tensor names (no edges), in execution order" in svg
    assert svg.count('class="node"') == 48 + 1 + 1 + 1  # 48 ranked layers, the input, one output, the table
    assert main(["graph", cell, "--results", results, "-o", str(tmp_path / "engine.dot")]) == 0
    source = (tmp_path / "engine.dot").read_text()
    assert source.count("<TR>") == 2 + 65  # heading, column names, one line per layer without tensors
    assert source.count("->") >= 48  # the ranked part keeps its edges


def test_rows_without_tensors_are_a_list_in_execution_order() -> None:
    from farm.layers.graph import has_edges, render

    rows = [{"layer_index": i, "name": f"triton_kernel_{i}", "type": "kernel", "output_dtypes": None,
             "time_share_percent": 10.0 * i, "time_avg_ms": 0.01 * i, "total_bytes": None,
             "input_tensors": "[]", "output_tensors": "[]"} for i in range(5)]
    assert not has_edges(rows)
    source = render(rows, "compiled", "dot").decode()
    assert "->" not in source and source.count("<TR>") == 2 + 5  # heading, column names, five layers
    assert source.index("triton_kernel_0") < source.index("triton_kernel_4")
    assert "5 layers in execution order: their rows name no tensors" in source


EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "results"


@needs_dot
@pytest.mark.skipif(not any(EXAMPLES.glob("*/layers/*.parquet")), reason="examples/results has no layers here")
def test_175_graph_ops_with_edges_are_a_ranked_column(tmp_path: Path) -> None:
    """ResNet-50 eager on the H200 (examples/results): 175 graph ops with their tensors, ranked top
    to bottom: every layer a box, every tensor an edge, a column rather than a row."""
    con = Warehouse(EXAMPLES).connect()
    cell = con.execute("SELECT cell_id FROM cells WHERE options LIKE '%\"eager\"%' AND precision = 'fp32' "
                       "AND batch = 1").fetchone()[0]
    out = tmp_path / "engine.dot"
    assert main(["graph", cell, "--results", str(EXAMPLES), "-o", str(out)]) == 0
    source = out.read_text()
    assert "rankdir=TB" in source and "<TABLE" not in source  # every row names its tensors: no list
    assert len(re.findall(r"^\s*L\d+ \[", source, re.M)) == 175
    edges = con.execute("SELECT sum(json_array_length(input_tensors)) FROM layers WHERE cell_id = ?",
                        [cell]).fetchone()[0]
    assert source.count("->") == edges + 1  # one per tensor read, one to the engine output
    png = tmp_path / "engine.png"
    assert main(["graph", cell, "--results", str(EXAMPLES), "-o", str(png)]) == 0
    width, height = png_size(png.read_bytes())
    assert width < 1500 and height > 10 * width


def test_names_from_the_data_stay_text_in_dot_and_svg() -> None:
    """A layer or tensor name that tries to end its DOT string (a backslash before a quote) and add
    attributes, or to be an HTML label, is drawn as the text it is: the SVG links nowhere and loads
    nothing."""
    import shutil

    from farm.layers.graph import render

    attack = 'a\\\\" URL="javascript:alert(1)" stylesheet="http://host/s.css'
    rows = [{"layer_index": 0, "name": attack, "type": "Conv", "input_tensors": '["x"]',
             "output_tensors": '["<<B>y</B>>\\\\"]', "time_share_percent": 50.0, "time_avg_ms": 1.0,
             "total_bytes": 10, "output_dtypes": "float"},
            {"layer_index": 1, "name": "<<B>bold</B>>", "type": "Relu", "input_tensors": '["<<B>y</B>>\\\\"]',
             "output_tensors": '["z"]', "time_share_percent": 50.0, "time_avg_ms": 1.0, "total_bytes": 10,
             "output_dtypes": "float"}]
    source = render(rows, 'model "x\\', "dot").decode()
    assert "URL=" not in source.replace('URL=\\"', "") and "stylesheet=" not in source.replace('stylesheet=\\"', "")
    if shutil.which("dot") is None:
        pytest.skip("graphviz's dot is not installed: the SVG is not drawn here")
    svg = render(rows, 'model "x\\', "svg").decode()
    assert "xlink:href" not in svg and "xml-stylesheet" not in svg and "<B>" not in svg
    assert 'URL=&quot;javascript:alert(1)&quot; stylesheet=&quot;http://host/s.css">' in svg  # as the tooltip's text
