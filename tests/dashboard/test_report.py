"""`farm report`: one self-contained HTML file with the sweep's comparisons."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path

from farm.cli import main
from farm.dashboard.data import Snapshot
from tests.test_compare import runs as runs


class Collector(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data):
        self.text.append(data)


def printed(value: float) -> str:
    """How pages print a figure: 4 significant digits, whole numbers with separators from 10,000."""
    return f"{value:,.0f}" if abs(value) >= 10_000 else f"{value:.4g}"


def test_report_is_self_contained_and_holds_the_figures(warehouse: Path, tmp_path: Path, capsys) -> None:
    output = tmp_path / "report.html"
    assert main(["report", "dash", "-o", str(output), "--results", str(warehouse)]) == 0
    assert "wrote" in capsys.readouterr().out
    document = output.read_text()
    parsed = Collector()
    parsed.feed(document)
    tags = [t for t, _ in parsed.tags]
    # nothing is fetched: no script, stylesheet link, image, frame or object; SVG inline
    assert not {"script", "link", "img", "iframe", "object", "embed"} & set(tags)
    assert tags.count("svg") == 3  # throughput, p99 latency, Pareto for the one measured model
    for tag, attrs in parsed.tags:
        for name, value in attrs.items():
            if name in ("src", "href", "xlink:href") and value:
                assert value.startswith("#"), (tag, name, value)  # only references inside the file
    assert not re.search(r"url\((?!#)", document)
    text = " ".join(parsed.text)
    snap = Snapshot(warehouse)
    ok = snap.cell_frame[(snap.cell_frame.sweep_id == "dash") & (snap.cell_frame.status == "ok")]
    for cell in ok.itertuples():
        assert cell.cell_id[:8] in text and printed(cell.throughput_qps) in text
    assert text.count("NoSuchOperator") == 6 and "dashboard test sweep" in text
    assert "fp32 · onnxruntime" in text and "1.000×" in text
    assert "Top layers by time" in text and "[[models]]" in text  # the sweep file is included


def test_report_refuses_unknown_sweep_and_baseline(warehouse: Path, tmp_path: Path, capsys) -> None:
    assert main(["report", "nope", "-o", str(tmp_path / "r.html"), "--results", str(warehouse)]) == 2
    assert "no sweep 'nope'" in capsys.readouterr().err
    assert main(["report", "dash", "--baseline", "fp64 · abacus", "-o", str(tmp_path / "r.html"),
                 "--results", str(warehouse)]) == 2
    err = capsys.readouterr().err
    assert "fp64 · abacus" in err and "fp32 · onnxruntime" in err
    assert not (tmp_path / "r.html").exists()


def test_report_with_another_baseline(warehouse: Path, tmp_path: Path) -> None:
    output = tmp_path / "r.html"
    assert main(["report", "dash", "--baseline", "fp16 · onnxruntime", "-o", str(output),
                 "--results", str(warehouse)]) == 0
    document = output.read_text()
    assert "<b>fp16 · onnxruntime</b>" in document and document.count("baseline</td>") == 3  # fp16 b1, b2, b4


def test_report_of_ingested_tensorrt_results(warehouse: Path, tmp_path: Path) -> None:
    """Recorded TensorRT output: no batch size, no raw samples, one engine with a profile only."""
    output = tmp_path / "trt.html"
    assert main(["report", "trt", "-o", str(output), "--results", str(warehouse)]) == 0
    text = output.read_text()
    assert "mnist_trt80" in text and "6431" in text  # trtexec's 6430.89 qps (tests/fixtures/trt_seeds/README.md)
    assert "fpn_int8" in text and "ok, no timing" in text
    assert "ingested_files" not in text.split("<h2>")[1]  # series are named by short options only


def test_report_intervals_come_from_the_samples(warehouse: Path, tmp_path: Path) -> None:
    """The report's median interval of each cell is the one computed from its raw samples, and
    each cell has the ratio of its median to the baseline's with that ratio's interval."""
    output = tmp_path / "r.html"
    assert main(["report", "dash", "-o", str(output), "--results", str(warehouse)]) == 0
    parsed = Collector()
    parsed.feed(output.read_text())
    text = " ".join(parsed.text)
    assert "p50 / baseline (95% CI)" in text and "beyond ±3 %" in text
    snap = Snapshot(warehouse)
    ok = snap.cell_frame[(snap.cell_frame.sweep_id == "dash") & (snap.cell_frame.status == "ok")]
    intervals = snap.median_intervals(ok.cell_id)
    for _cell_id, row in intervals.iterrows():
        assert row.noise_source == "samples"
        assert f"{printed(row.noise_low_ms)} – {printed(row.noise_high_ms)}" in text


def test_report_against_a_base_sweep(runs: Path, tmp_path: Path, capsys) -> None:
    """`farm report planted --against base`: the comparison's verdicts in a section of their own (a
    real warehouse of two tiny-CNN sweeps, tests/test_compare.py's `runs`); none without --against;
    an unknown BASE is one line, exit 2."""

    output = tmp_path / "against.html"
    assert main(["report", "planted", "--results", str(runs), "-o", str(output), "--against", "base"]) == 0
    text = output.read_text()
    assert "<h2>Changes against base</h2>" in text and "planted against base" in text
    assert "slower" in text and "matched cells regressed" in text and "<script" not in text
    plain = tmp_path / "plain.html"
    assert main(["report", "planted", "--results", str(runs), "-o", str(plain)]) == 0
    assert "Changes against" not in plain.read_text()
    capsys.readouterr()
    assert main(["report", "planted", "--results", str(runs), "-o", str(plain), "--against", "nope"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "no sweep 'nope'" in err
