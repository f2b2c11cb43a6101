"""Every benchmark in benchmarks/ runs in its quick mode (same code, tiny sizes), as a child process
from the repository root, writing only under a temporary folder. The tests check that the figures a
benchmark prints are there and are numbers that make sense (positive, finite), never their size:
speed targets are read off the full runs, not asserted here."""

from __future__ import annotations

import collections
import csv
import json
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
from importlib.util import find_spec
from pathlib import Path

import pytest

from farm.cli import main
from tests.conftest import tiny_cnn, write_sweep

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = ROOT / "benchmarks"
NUMBER = r"(-?\d+(?:\.\d+)?)"


def run_benchmark(script: str, *args: str, timeout: float) -> str:
    """Run benchmarks/`script` to its end and return what it printed (stdout and stderr)."""
    process = subprocess.Popen([sys.executable, str(BENCHMARKS / script), *args], cwd=ROOT,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               env={**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"})
    try:
        out, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGTERM)  # the benchmarks stop what they started on SIGTERM
        try:
            out, _ = process.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            out, _ = process.communicate()
        pytest.fail(f"{script} {' '.join(args)} ran over {timeout:.0f} s; its output:\n{out[-4000:]}")
    assert process.returncode == 0, f"{script} exited {process.returncode}:\n{out[-4000:]}"
    return out


def figure(text: str) -> float:
    value = float(text)
    assert math.isfinite(value), text
    return value


def positive(text: str) -> float:
    value = figure(text)
    assert value > 0, text
    return value


def test_harness_overhead_quick(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    out = run_benchmark("harness_overhead.py", "--quick", "--cache", str(cache), timeout=300)
    sections = re.findall(r"^(\S.*?): (\d+) rounds x (\d+) queries each side\n"
                          rf"  farm median latency\s+{NUMBER} ms\n"
                          rf"  bare session\.run median\s+{NUMBER} ms\n"
                          rf"  ratio farm / bare\s+{NUMBER}\s.*\n"
                          rf"  per-query overhead\s+{NUMBER} us", out, re.MULTILINE)
    assert [s[0] for s in sections] == ["zoo:resnet18 batch 1", "tiny CNN (per-query cost made visible)"], out
    for _, rounds, queries, farm, bare, ratio, overhead in sections:
        assert int(rounds) >= 1 and int(queries) >= 1
        assert positive(ratio) == pytest.approx(positive(farm) / positive(bare), rel=0.05, abs=1e-3)
        figure(overhead)  # a paired difference: either sign
    assert (cache / "zoo" / "resnet18-v1.onnx").is_file()  # the zoo model went to --cache


def test_torch_bare_loop_quick_on_cpu(tmp_path: Path) -> None:
    """The bare loop (no farm code: farm's torch cells are checked against it) runs and writes JSON."""
    if find_spec("torch") is None:
        pytest.skip("torch is not installed (pip install -e .[torch])")
    out = run_benchmark("torch_bare_loop.py", "--quick", "--device", "cpu", "--json", str(tmp_path / "bare.json"),
                        timeout=300)
    rows = re.findall(rf"^\s*(fp32)\s+(\d+)\s+(eager)\s+{NUMBER}\s+{NUMBER}\s+{NUMBER}$", out, re.MULTILINE)
    assert [(p, int(b), m) for p, b, m, *_ in rows] == [("fp32", 1, "eager"), ("fp32", 4, "eager")], out
    for *_, latency, compute, queries in rows:
        assert positive(latency) == pytest.approx(positive(compute)) and int(queries) == 20  # CPU: the forward
    written = json.loads((tmp_path / "bare.json").read_text())["rows"]
    assert [(r["batch"], r["mode"]) for r in written] == [(1, "eager"), (4, "eager")]
    source = (BENCHMARKS / "torch_bare_loop.py").read_text()
    assert "import farm" not in source and "from farm" not in source


def test_torch_harness_overhead_quick(tmp_path: Path) -> None:
    """farm's torch cell path and a bare loop over the same native module, in alternating rounds."""
    if find_spec("torch") is None:
        pytest.skip("torch is not installed (pip install -e .[torch])")
    out = run_benchmark("torch_harness_overhead.py", "--quick", "--cache", str(tmp_path / "cache"), timeout=300)
    assert "module:tests.native_models:tiny_cnn: torch" in out and "cpu eager fp32 batch 1" in out, out
    result = json.loads(out.strip().splitlines()[-1])
    assert positive(str(result["ratio"])) == pytest.approx(positive(str(result["farm_ms"])) / positive(str(result["bare_ms"])))
    assert len(re.findall(rf"^  (farm|bare) median\s+{NUMBER} ms   rounds: {NUMBER} {NUMBER}$", out, re.MULTILINE)) == 2


def test_ort_harness_overhead_quick(tmp_path: Path) -> None:
    """farm's onnxruntime cell path and the bare loop, alternating on one file in one process (CPU)."""
    out = run_benchmark("ort_harness_overhead.py", "--quick", timeout=300)
    assert "tiny.onnx: onnxruntime" in out and "cpu fp32 batch 2" in out, out
    result = json.loads(out.strip().splitlines()[-1])
    medians = result["medians_ms"]
    assert set(medians) == {"farm", "bare"}
    assert positive(str(result["farm_over_bare"])) == pytest.approx(positive(str(medians["farm"])) /
                                                                   positive(str(medians["bare"])))
    assert len(re.findall(rf"^  (farm|bare) median\s+{NUMBER} ms   rounds: {NUMBER} {NUMBER}$", out, re.MULTILINE)) == 2


def test_ort_bare_loop_quick_on_cpu(tmp_path: Path) -> None:
    """The ONNX Runtime bare loop (no farm code) runs on the CPU provider and writes JSON; the
    variants that need CUDA say so instead of timing something else."""
    out = run_benchmark("ort_bare_loop.py", "--quick", "--device", "cpu", "--json", str(tmp_path / "bare.json"),
                        timeout=300)
    rows = re.findall(rf"^\s*(fp32)\s+(\d+)\s+(no-graphs)\s+{NUMBER}\s+{NUMBER}\s+{NUMBER}$", out, re.MULTILINE)
    assert [(int(b), v) for _, b, v, *_ in rows] == [(1, "no-graphs"), (4, "no-graphs")], out
    assert len(re.findall(r"^\s*fp32\s+\d+\s+graphs\s+skipped: needs CUDA$", out, re.MULTILINE)) == 2, out
    for *_, latency, compute, sync in rows:
        assert positive(latency) == pytest.approx(positive(compute)) == pytest.approx(positive(sync))
    written = json.loads((tmp_path / "bare.json").read_text())["rows"]
    assert [(r["batch"], r["mode"], r["queries"]) for r in written] == [(1, "no-graphs", 20), (4, "no-graphs", 20)]
    source = (BENCHMARKS / "ort_bare_loop.py").read_text()
    assert "import farm" not in source and "from farm" not in source


def test_farm_vs_bare_table_reads_a_real_warehouse_and_judges_each_cell(tmp_path: Path) -> None:
    """benchmarks/device/farm_vs_bare.py on examples/results' GPU cells: two runs (the same one
    twice, so 0 %), a bare loop 2 % slower for every torch cell but one 10 % faster."""
    script = str(BENCHMARKS / "device" / "farm_vs_bare.py")
    summary = tmp_path / "run.json"
    subprocess.run([sys.executable, script, "summarize", str(ROOT / "examples" / "results" / "gpu-resnet50"),
                    str(summary)], check=True, capture_output=True, text=True)
    rows = json.loads(summary.read_text())
    assert len(rows) == 48 and {r["mode"] for r in rows} == {"eager", "compile", "cudagraphs"}
    bare = [{"precision": r["precision"], "batch": r["batch"], "mode": r["mode"],
             "latency_median_ms": r["latency_median_ms"] * 1.02} for r in rows]
    bare[0]["latency_median_ms"] = rows[0]["latency_median_ms"] / 1.1
    (tmp_path / "bare.json").write_text(json.dumps({"device": "test", "rows": bare}))
    out = subprocess.run([sys.executable, script, "table", str(summary), str(summary), str(tmp_path / "bare.json")],
                         check=True, capture_output=True, text=True).stdout
    lines = [line for line in out.splitlines() if re.match(r"^(fp|bf|tf)\d+ b\d+ ", line)]
    assert len(lines) == 48
    slow = f"{rows[0]['precision']} b{rows[0]['batch']} {rows[0]['mode']}"
    assert [line.split("  ")[0].rstrip(" *") for line in lines if "off the bare loop" in line] == [slow]
    assert all(line.endswith(" ok") for line in lines if not line.startswith(slow + " "))
    assert out.strip().endswith("1 cell(s) miss a target")
    one_run = subprocess.run([sys.executable, script, "table", str(summary), "-", str(tmp_path / "bare.json")],
                             check=True, capture_output=True, text=True).stdout
    assert one_run.strip().endswith("1 cell(s) miss a target") and "runs differ" not in one_run
    # a second bare run 10 % slower: the bare column is the median of the two, their spread beside it
    (tmp_path / "bare2.json").write_text(json.dumps({"device": "test", "rows": [
        dict(r, latency_median_ms=r["latency_median_ms"] * 1.1) for r in bare]}))
    two_bare = subprocess.run([sys.executable, script, "table", str(summary), str(summary), str(tmp_path / "bare.json"),
                               str(tmp_path / "bare2.json")], check=True, capture_output=True, text=True).stdout
    row = next(line for line in two_bare.splitlines() if line.startswith(slow + " "))
    figures = row.split()
    assert "10.0" in figures, row
    expected = rows[0]["latency_median_ms"] / 1.1 * 1.05
    assert any(abs(float(f) - expected) < 0.002 for f in figures if re.fullmatch(r"\d+\.\d{3}", f)), row


def port_is_closed(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(2)
        return s.connect_ex(("127.0.0.1", port)) != 0


@pytest.mark.slow
@pytest.mark.browser
def test_dashboard_scale_quick(tmp_path: Path) -> None:
    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    no_browser = None
    if not Path(chromium).exists():
        no_browser = "no chromium here (apt-get install chromium)"
    elif find_spec("playwright") is None:
        no_browser = "playwright is not installed (pip install -e .[test])"
    work = tmp_path / "scale"
    out = run_benchmark("dashboard_scale.py", "--quick", "--dir", str(work),
                        *(["--no-browser"] if no_browser else []), timeout=600)

    generated = re.search(r"^generated (\d+) cells, (\d+) layer rows, (\d+) samples in (\d+) files", out, re.MULTILINE)
    assert generated and [int(g) for g in generated.groups()[:3]] == [40, 400, 800], out
    loads = re.findall(rf"^snapshot load, (.+?): {NUMBER} s for (\d+) cells", out, re.MULTILINE)
    assert [(state, int(cells)) for state, _, cells in loads] == [("no consolidated copy", 40),
                                                                   ("with the copy", 40)], out
    assert all(positive(seconds) for _, seconds, _ in loads)
    layers = re.search(rf"^one cell's layers read: {NUMBER} ms \((\d+) rows\)", out, re.MULTILINE)
    assert layers and positive(layers.group(1)) and int(layers.group(2)) == 10, out
    apptest = re.findall(rf"^apptest\s+([\d,]+)\s+(\S.+?)\s+{NUMBER}\s+(?:{NUMBER}|–)$", out, re.MULTILINE)
    pages = ["snapshot load + overview", "overview", "cell", "compare", "diff", "regressions", "sql"]
    assert {(cells, page) for cells, page, *_ in apptest} >= {(c, p) for c in ("40", "600") for p in pages}, out
    if no_browser:
        pytest.skip(f"{no_browser}: the snapshot figures were checked, the pages were not timed")

    pages = ["overview", "compare (one sweep)", "cell (its layers, graph)", "diff (two cells' layers)", "sql (page)"]
    example = ["overview", "compare", "cell (deep link)", "diff (deep link)", "regressions", "sql (page)"]
    expected = ([("first", p) for p in pages] + [("query", "sql: GROUP BY over all layer rows")]
                + [("cached", p) for p in pages] + [(f"example {v}", p) for v in ("first", "warm") for p in example])
    rows = re.findall(rf"^(first|warm|query|cached|example first|example warm)\s+(.+?)\s+{NUMBER}$", out,
                      re.MULTILINE)
    assert [(visit, page) for visit, page, _ in rows] == expected, out
    for _, _, seconds in rows:
        assert figure(seconds) >= 0
    # Three servers were started (one per log: the generated warehouse twice, the example), on free
    # ports, and all are stopped now.
    ports = sorted(int(log.stem.removeprefix("dashboard-")) for log in work.glob("dashboard-*.log"))
    assert len(ports) == 3 and 8599 not in ports, ports
    assert all(port_is_closed(port) for port in ports)
    assert (work / "results" / "scale0").is_dir()  # the warehouse went to --dir


@pytest.mark.slow
def test_stress_workers_quick() -> None:
    out = run_benchmark("stress_workers.py", "--quick", timeout=600)
    verdicts = re.findall(r"^(PASS|FAIL)\s+(.*)$", out, re.MULTILINE)
    assert verdicts, out
    assert [name for verdict, name in verdicts if verdict != "PASS"] == [], out


def test_interval_coverage_quick() -> None:
    out = run_benchmark("interval_coverage.py", "--quick", timeout=300)
    rows = re.findall(rf"^\s*{NUMBER}\s+{NUMBER} \|" + rf"\s+{NUMBER}" * 2 + r" \|" + rf"\s+{NUMBER}" * 2
                      + r" \|" + rf"\s+{NUMBER}" * 2 + r" \|" + rf"\s+{NUMBER}" * 2 + r"\s*$", out, re.MULTILINE)
    assert len(rows) == 2, out
    for row in rows:
        shares = [figure(v) for v in row[2:4] + row[6:]]
        assert all(0 <= share <= 1 for share in shares), row
        assert all(positive(width) for width in row[4:6])


def test_telemetry_overhead_quick(tmp_path: Path) -> None:
    out = run_benchmark("telemetry_overhead.py", "--quick", "--cache", str(tmp_path / "cache"), timeout=300)
    interval = rf"{NUMBER} \[{NUMBER}, {NUMBER}\]"
    cells = re.findall(rf"^(.+): (\d+) rounds each side, (\d+) queries a round, (\d+) blocks\n"
                       rf"  p50 latency off / on\s+{NUMBER} / {NUMBER} ms\s+ratio on/off {interval}\n"
                       rf"  throughput off / on\s+{NUMBER} / {NUMBER} qps\s+ratio off/on {interval}\s+(.+)$",
                       out, re.MULTILINE)
    assert [c[0] for c in cells] == ["onnxruntime cpu fp32 batch 1"], out
    for _, rounds, queries, blocks, off, on, *latency, off_qps, on_qps, qps_low, qps, qps_high, verdict in cells:
        assert int(rounds) == 2 and int(queries) >= 5 and int(blocks) == 1
        ratio, low, high = map(positive, latency)
        # one block: its ratio is the median and the whole interval, and with two rounds a side
        # the ratio of the sides' means, which are their medians
        assert low == ratio == high and positive(qps_low) == positive(qps) == positive(qps_high)
        assert ratio == pytest.approx(positive(on) / positive(off), rel=1e-3)
        assert positive(qps) == pytest.approx(positive(off_qps) / positive(on_qps), rel=1e-3)
        assert verdict.startswith(("within 1 %", "OVER 1 %", "not resolved")), verdict
    assert "telemetry_note=a CPU" in out or "telemetry_note=no NVML" in out, out  # CPU: no telemetry, said so
    assert re.search(rf"^worst ratio off 1 by {NUMBER} % over 1 cell", out, re.MULTILINE), out


def test_scaling_quick() -> None:
    out = run_benchmark("scaling.py", "--quick", timeout=120)
    rows = re.findall(rf"^\s+(\d) +{NUMBER} +{NUMBER}x +{NUMBER}%", out, re.M)
    assert [n for n, *_ in rows] == ["1", "2", "4"] * 2, out  # FIFO, then longest first
    assert all(float(wall) > 0 and float(speedup) > 0 and math.isfinite(float(eff)) for _, wall, speedup, eff in rows)


VERDICT = re.compile(r"^(within noise|slower|faster|inconclusive) \([+-]\d+\.\d %, 95 % interval [+-]\d+\.\d to "
                     r"[+-]\d+\.\d %\)$|^not judged \(([+-]\d+\.\d %|no figure); a run has no interval\)$")


def test_scaling_verdict_is_farm_compares_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    """A cell on two runs is judged as `farm compare` judges it, from each median's stored 95 %
    interval, with the target as the minimum effect: within noise only where the whole interval of
    the ratio lies within it, slower / faster only where it lies wholly beyond, inconclusive where
    the runs were too noisy to tell, not judged without an interval."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    from isolation import tally, verdict

    from farm.compare.stats import MedianInterval, effect_interval

    def cell(median, low, high):
        return {"latency_median_ms": median, "median_ci_low_ms": low, "median_ci_high_ms": high}

    steady, noisy = cell(2.0, 1.99, 2.01), cell(2.0, 1.2, 3.4)
    assert verdict(steady, cell(2.06, 2.05, 2.07)) == "within noise (+3.0 %, 95 % interval +2.3 to +3.7 %)"
    assert verdict(steady, cell(2.4, 2.39, 2.41)).startswith("slower (+20.0 %, 95 % interval +19.")
    assert verdict(steady, cell(1.6, 1.59, 1.61)).startswith("faster (-20.0 %")
    assert verdict(noisy, cell(2.4, 2.39, 2.41)).startswith("inconclusive (+20.0 %")  # a large change, noisy runs
    assert verdict(steady, cell(2.09, 2.08, 2.1)).startswith("inconclusive (+4.5 %")  # straddles the 5 % bound
    assert verdict(steady, cell(2.09, 2.08, 2.1), tolerance=0.10).startswith("within noise (+4.5 %")
    assert verdict(steady, cell(2.2, None, None)) == "not judged (+10.0 %; a run has no interval)"
    assert verdict(None, steady) == "not judged (no figure; a run has no interval)"
    words = [verdict(steady, cell(2.06, 2.05, 2.07)), verdict(noisy, cell(2.4, 2.39, 2.41)),
             verdict(steady, cell(2.2, None, None))]
    assert all(VERDICT.match(v) for v in words), words
    assert tally(words) == "within noise: 1, slower: 0, faster: 0, inconclusive: 1, not judged: 1"
    # the same rule as farm compare's, not a copy of it
    low_high = effect_interval(MedianInterval(2.0, 1.99, 2.01, "stored"), MedianInterval(2.4, 2.39, 2.41, "stored"), 5.0)
    assert low_high.verdict == "slower" and f"{100 * low_high.low:+.1f}" in verdict(steady, cell(2.4, 2.39, 2.41))


def test_scaling_run_labels(monkeypatch: pytest.MonkeyPatch) -> None:
    """A count given again, or measured before in the same scratch folder, is a further run: no
    run's warehouse is overwritten."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    from scaling import run_labels

    assert run_labels([2, 1, 2], set()) == [("gpus2", 2), ("gpus1", 1), ("gpus2-run2", 2)]
    assert run_labels([2], {"gpus2", "gpus1"}) == [("gpus2-run2", 2)]
    assert run_labels([2, 2], {"gpus2", "gpus2-run2"}) == [("gpus2-run3", 2), ("gpus2-run4", 2)]


def test_scaling_report_compares_every_run_per_cell(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--report over runs' warehouses (CPU sweeps standing in for 1 GPU, 2 GPUs and 2 GPUs again,
    the last with one of the two cells, from a tree with local changes): each cell against 1 GPU, the
    repeated count against its first run, each judged; the CSV's ratios are the runs' own medians, a
    cell a run lacks has empty figures, and the machine line is the runs' own, a run's uncommitted
    changes named. Without a 1-GPU run, the runs of a count are still compared with each other; with
    none at all, it says so."""
    models = tmp_path / "models"
    models.mkdir()
    config = write_sweep(tmp_path, f"""
        name = "report"
        [[models]]
        source = "{tiny_cnn(models / 'tiny.onnx')}"
        [axes]
        precisions = ["fp32"]
        batch_sizes = [1, 4]
        backends = ["onnxruntime"]
        """)
    scratch = tmp_path / "scratch"
    for label in ("gpus1", "gpus2"):
        assert main(["sweep", str(config), "--results", str(scratch / label), "--executor", "local"]) == 0
    one_cell = sorted(p.stem for p in (scratch / "gpus1" / "report" / "cells").glob("*.parquet"))[0]
    monkeypatch.setattr("farm.cell_runner.farm_commit", lambda: "0123456789abcdef0123456789abcdef01234567+dirty")
    assert main(["sweep", str(config), "--results", str(scratch / "gpus2-run2"), "--executor", "local",
                 "--cells", one_cell]) == 0
    # wall times kept as an older scaling.py wrote them (a GPU count as the key)
    (scratch / "figures.json").write_text(json.dumps({"1": [10.0, [], {}], "2": [6.0, [], {}]}))
    out = run_benchmark("scaling.py", "--report", "--scratch", str(scratch), "--csv", str(tmp_path / "cells.csv"),
                        "--note", "three CPU runs", timeout=180)
    assert re.search(r"^\s+2 +6\.0 +1\.67x +83%", out, re.MULTILINE), out  # speedup against the kept 1-GPU run
    compared = re.findall(r"^(\S+) against (\S+), per cell \(median latency\): (\d) cells", out, re.MULTILINE)
    assert compared == [("gpus2", "gpus1", "2"), ("gpus2-run2", "gpus1", "1"), ("gpus2-run2", "gpus2", "1")], out
    lines = (tmp_path / "cells.csv").read_text().splitlines()
    machine = re.match(r"^# no GPU, \d+ CPUs; farm (.+)$", lines[0])
    assert machine and "0123456+dirty" in machine[1].split(", "), lines[0]
    assert lines[1] == "# three CPU runs", lines[:2]
    rows = list(csv.DictReader(lines[2:]))
    assert len(rows) == 2
    from farm.warehouse import Warehouse

    spent = dict(Warehouse(scratch / "gpus1").connect().execute("SELECT cell_id, duration_s FROM cells").fetchall())
    for row in rows:  # what each cell cost its worker, and whether it waited on the host (CPU cells: never)
        [duration] = [d for cell_id, d in spent.items() if cell_id.startswith(row["cell"])]
        assert float(row["gpus1_duration_s"]) == pytest.approx(duration) and row["gpus1_host_bound"] == "False", row
    runs = (tmp_path / "cells-runs.csv").read_text().splitlines()  # the kept wall times, beside the cells
    assert runs[:2] == lines[:2], runs
    assert [(r["run"], r["gpus"], float(r["wall_s"])) for r in csv.DictReader(runs[2:])] == [
        ("gpus1", "1", 10.0), ("gpus2", "2", 6.0)], runs
    for row in rows:
        for label, base, _ in compared:
            judged = row[f"{label}_vs_{base}"]
            if row[f"{label}_ms"] == "":  # the cell gpus2-run2 did not measure
                assert label == "gpus2-run2" and row["cell"] != one_cell[:8], row
                assert row[f"{label}_over_{base}"] == "" and judged == "not measured in both", row
                continue
            ratio = float(row[f"{label}_over_{base}"])
            assert row[f"{label}_host_probe_ms"] == "", row  # CPU cells take no host probe
            assert ratio == pytest.approx(float(row[f"{label}_ms"]) / float(row[f"{base}_ms"]))
            assert VERDICT.match(judged), judged
            assert not judged.startswith("within noise") or abs(ratio - 1) <= 0.05, (ratio, judged)
            assert not judged.startswith(("slower", "faster")) or abs(ratio - 1) > 0.05, (ratio, judged)
    shutil.rmtree(scratch / "gpus1")
    (scratch / "figures.json").unlink()
    out = run_benchmark("scaling.py", "--report", "--scratch", str(scratch), timeout=180)
    assert re.findall(r"^(\S+) against (\S+), per cell", out, re.MULTILINE) == [("gpus2-run2", "gpus2")], out
    empty = subprocess.run([sys.executable, str(BENCHMARKS / "scaling.py"), "--report", "--scratch", str(tmp_path)],
                           cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert empty.returncode == 1 and "no runs' warehouses under" in empty.stderr, empty.stderr


def test_scaling_docs_are_made_from_the_committed_results(monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/running.md's 4-GPU scaling tables are what `scaling.py --markdown` makes of the committed
    CSVs: a figure there cannot drift from its file (rerun the command and paste its output)."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    monkeypatch.chdir(ROOT)
    from scaling import markdown

    docs = (ROOT / "docs" / "running.md").read_text()
    blocks = dict(re.findall(r"<!-- (scaling-[\w-]+): begin -->\n(.*?)<!-- \1: end -->", docs, re.DOTALL))
    assert set(blocks) == {"scaling-h200x4", "scaling-h200x4-corpus"}, "docs/running.md lost a generated scaling block"
    for name, block in blocks.items():
        made = markdown(Path(re.search(r"--markdown (\S+)`", block)[1]))
        assert block == made, f"docs/running.md's {name} tables differ from the CSV's: rerun scaling.py --markdown"
    # the runs as measured, read back through the CSVs
    assert "| 4 | 225.8 s | 3.35× | 84 %" in blocks["scaling-h200x4"]
    assert "| 4 | 156.2 s | 2.78× | 70 % | 52.3 s | 99.0 s |" in blocks["scaling-h200x4-corpus"]


def test_scaling_markdown_of_a_file_scaling_did_not_write_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "cells.csv").write_text("# a machine\ncell,precision\n")  # no -runs.csv beside it
    for path in (tmp_path / "none.csv", tmp_path / "cells.csv"):
        done = subprocess.run([sys.executable, str(BENCHMARKS / "scaling.py"), "--markdown", str(path)],
                              cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
        assert f"--markdown {path}: not a per-cell CSV of scaling.py --csv beside its -runs.csv" in done.stderr


def test_scaling_report_needs_scratch() -> None:
    process = subprocess.run([sys.executable, str(BENCHMARKS / "scaling.py"), "--report"],
                             cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert process.returncode == 2 and "--report reads the warehouses of an earlier run" in process.stderr


def test_warehouse_scale_quick(tmp_path: Path) -> None:
    out = run_benchmark("warehouse_scale.py", "--quick", "--dir", str(tmp_path / "scale"), timeout=300)
    generated = re.search(r"^generated (\d+) cells in (\d+) sweeps", out, re.MULTILINE)
    assert generated and generated.groups() == ("300", "3"), out
    assert re.search(rf"^farm compact: {NUMBER} s for 300 cells \((\d+) files now\)", out, re.MULTILINE), out
    names = ["farm query (aggregation over every cell)", "farm ls", "farm show scale0", "planning a resume of scale0",
             "snapshot load (once per change)", "page: overview", "page: compare (one sweep)",
             "page: cell (samples, layers)", "page: diff (two cells' layers)"]
    rows = re.findall(rf"^(\S.+?)\s+{NUMBER}\s+{NUMBER}$", out, re.MULTILINE)
    assert [name for name, *_ in rows] == names, out
    for _, before, after in rows:
        assert figure(before) >= 0 and figure(after) >= 0
    assert (tmp_path / "scale" / "results" / "scale0" / "compaction.json").is_file()


def test_native_vs_interpreter_quick(tmp_path: Path) -> None:
    out = run_benchmark("native_vs_interpreter.py", "--quick", "--cache", str(tmp_path / "cache"), timeout=300)
    native = re.search(rf"native module median\s+{NUMBER} ms", out)
    interpreter = re.search(rf"ONNX interpreter median\s+{NUMBER} ms", out)
    ratio = re.search(rf"ratio interpreter / native\s+{NUMBER}", out)
    assert native and interpreter and ratio, out
    assert positive(ratio[1]) == pytest.approx(positive(interpreter[1]) / positive(native[1]), rel=0.05, abs=1e-3)
    assert "build row: PyTorch: native module" in out and "build row: PyTorch: ONNX interpreter" in out


def test_model_corpus_quick(tmp_path: Path) -> None:
    """The corpus's small models (wheel files, the onnx wheel's light models, a transformers encoder,
    PyTorch's own layers) on ONNX Runtime and PyTorch, CPU: a table per engine, and no cell failed
    (what an engine cannot do is unsupported, with the reason)."""
    out = run_benchmark("model_corpus.py", "--quick", "--cache", str(tmp_path / "corpus"),
                        "--json", str(tmp_path / "counts.json"), timeout=900)
    counts = json.loads((tmp_path / "counts.json").read_text())
    assert set(counts["engines"]) == {"onnxruntime cpu b1", "torch cpu eager b1"}, out  # engine and batch
    for engine, figures in counts["engines"].items():
        assert figures["cells"] >= 3 and figures.get("failed", 0) == 0, (engine, out)
        assert figures.get("accuracy fail", 0) == 0, (engine, out)
    assert re.search(rf"onnxruntime cpu b1\s+{NUMBER}\s+{NUMBER}", out), out


def test_onnx_conformance_quick(tmp_path: Path) -> None:
    """ONNX's own operator tests on farm's interpreter, a fixed sample: each case's outcome printed
    and written, none a wrong answer or a crash."""
    out = run_benchmark("onnx_conformance.py", "--quick", "--json", str(tmp_path / "cases.json"), timeout=300)
    data = json.loads((tmp_path / "cases.json").read_text())
    assert data["cases"] == len(data["results"]) >= 10, out
    assert data["counts"].get("differ", 0) == 0 and data["counts"].get("error", 0) == 0, out
    assert data["results"]["test_training_dropout"]["outcome"] == "unsupported", out
    assert re.search(r"pass\s+\d+", out), out


def test_isolation_quick(tmp_path: Path) -> None:
    """Each ok cell of a sweep measured inside it and alone (`farm sweep --cells ID --force`), the
    eager batch-1 cell beside the bare loop; the rows land in a CSV that names the machine."""
    import csv

    out = run_benchmark("isolation.py", "--quick", "--scratch", str(tmp_path / "work"), "--csv",
                        str(tmp_path / "isolation.csv"), timeout=600)
    lines = (tmp_path / "isolation.csv").read_text().splitlines()
    assert lines[0].startswith("# benchmarks/isolation.py") and "CPUs; farm " in lines[0], lines[0]
    rows = list(csv.DictReader(lines[1:]))
    assert {(r["backend"], r["batch"]) for r in rows} == {("onnxruntime", "1"), ("torch", "1")}, out
    for row in rows:
        assert positive(row["in_sweep_ms"]) and positive(row["alone_ms"]), row
        assert figure(row["in_sweep_over_alone"]) == pytest.approx(float(row["in_sweep_ms"]) / float(row["alone_ms"]),
                                                                   rel=1e-3)
        assert row["in_sweep_host_probe_ms"] == row["alone_host_probe_ms"] == "", row  # CPU cells: no host probe
        assert VERDICT.match(row["verdict"]), row
        tolerance, off = 0.10 if row["host_bound"] == "True" else 0.05, abs(float(row["in_sweep_over_alone"]) - 1)
        assert not row["verdict"].startswith("within noise") or off <= tolerance, row
        assert not row["verdict"].startswith(("slower", "faster")) or off > tolerance, row
        assert not row["verdict"].startswith("not judged"), row  # both runs stored their interval
        assert figure(row["alone_repeat_spread_percent"]) >= 0, row
    beside_bare = [r for r in rows if r["bare_ms"]]
    assert [(r["backend"], r["batch"]) for r in beside_bare] == [("torch", "1")] and positive(beside_bare[0]["bare_ms"])
    assert re.search(rf"in-sweep / alone over 2 cells: median {NUMBER}", out), out


def test_host_contention_quick_on_cpu(tmp_path: Path) -> None:
    """A host-bound loop timed with the machine quiet, with its other CPUs busy, quiet again: window
    medians and the ratio, all positive numbers (their size is the machine's, never asserted)."""
    out = run_benchmark("host_contention.py", "--quick", "--device", "cpu", "--json", str(tmp_path / "w.json"),
                        timeout=300)
    for config in ("quiet", "others busy", "quiet again"):
        assert re.search(rf"{config}\s+window medians ms: {NUMBER} {NUMBER}\s+\(median {NUMBER}", out), out
    positive(re.search(rf"others busy / quiet: {NUMBER}", out).group(1))
    windows = json.loads((tmp_path / "w.json").read_text())["windows"]
    assert all(positive(str(w["latency_ms"])) >= 0 and w["queries"] >= 3 for rows in windows.values() for w in rows)


def test_carryover_quick_on_cpu(tmp_path: Path) -> None:
    """A loop timed before and after a treatment in a fresh process each: both medians and their
    ratio per treatment (their size is the machine's, never asserted), and the JSON keeps the windows."""
    out = run_benchmark("carryover.py", "--quick", "--device", "cpu", "--treatments", "profiler-cpu",
                        "--json", str(tmp_path / "c.json"), timeout=300)
    rows = json.loads((tmp_path / "c.json").read_text())
    for row in rows:  # the printed figures are the JSON's, rounded (a ratio of 0.016 to 3 digits, not 0.02)
        match = re.search(rf"{row['treatment']}\s+{NUMBER}\s+{NUMBER}\s+{NUMBER}", out)
        assert match, out
        before, after, ratio = (positive(v) for v in match.groups())
        assert ratio == pytest.approx(row["ratio"], rel=0.01), out
        # the printed figures have 3 decimals: at a few hundredths of a ms that rounding alone moves the ratio
        assert after / before == pytest.approx(row["ratio"], rel=0.02, abs=0.002 + 0.001 / min(before, after)), out
    assert [r["treatment"] for r in rows] == ["profiler-cpu"]
    assert all(len(r["before_ms"]) == len(r["after_ms"]) == 2 for r in rows)


def test_verdicts_across_runs_quick(tmp_path: Path) -> None:
    """Identical runs and a planted change, every pair compared three ways (from its samples alone,
    with the warehouse's run-to-run spread, and measured again interleaved where in doubt): each way
    counts every pair, each verdict one of farm's, the counts add up, and the pairs CSV agrees."""
    out = run_benchmark("verdicts_across_runs.py", "--quick", "--dir", str(tmp_path / "work"),
                        "--csv", str(tmp_path / "pairs.csv"), timeout=600)
    assert re.search(r"^3 runs \(tiny on ONNX Runtime CPU, b1 and b8; planted: node conv run 12 times\) in \d+ s; "
                     r"pairs compared as farm compare does: 4 identical, 4 slower, 4 faster$", out, re.MULTILINE), out
    ways = ["from the two runs' samples alone", "with the warehouse's run-to-run spread",
            "measured again interleaved (2 rounds) where in doubt"]
    with open(tmp_path / "pairs.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert collections.Counter(r["pair"] for r in rows) == {"identical": 4, "slower": 4, "faster": 4}
    for kind in ("identical", "slower", "faster"):
        section = out.split(f"\n{kind} pairs (4):\n", 1)[1]
        said = "false changes" if kind == "identical" else f"found {kind}"
        found = re.findall(r"^  (.+?): (.*); " + said + r" (\d+) of 4 \(\d+ %\)$", section, re.MULTILINE)[:3]
        assert [f[0] for f in found] == ways, section
        for (_, counts, right), column in zip(found, ("alone", "history", "confirmed")):
            verdicts = {v: int(n) for v, n in re.findall(r"([a-z ]+?) (\d+)(?:, |$)", counts)}
            assert verdicts == collections.Counter(r[column] for r in rows if r["pair"] == kind), (kind, column)
            assert set(verdicts) <= {"slower", "faster", "within noise", "inconclusive", "not judged"}, counts
            assert int(right) == (verdicts.get("slower", 0) + verdicts.get("faster", 0) if kind == "identical"
                                  else verdicts.get(kind, 0))
        # measured again: exactly the pairs in doubt (slower, faster or inconclusive with the history)
        again = [r for r in rows if r["pair"] == kind and float(r["confirm_s"]) > 0]
        assert len(again) == sum(r["history"] in ("slower", "faster", "inconclusive") for r in rows if r["pair"] == kind)
        assert re.search(rf"^  measured again: {len(again)} of 4 pairs, ", section, re.MULTILINE), section


def test_confirm_rounds_quick(tmp_path: Path) -> None:
    """--confirm's rounds kept whole and replayed: each pair's every round is in the CSV; the
    report judges each kind four ways; the planted 12x pairs are found by farm's reading, in the
    right direction; judging the CSV again gives the same report, and judging it twice over counts
    each pair twice."""
    out = run_benchmark("confirm_rounds.py", "--quick", "--csv", str(tmp_path / "blocks.csv"), timeout=600)
    with open(tmp_path / "blocks.csv", newline="") as f:
        rows = list(csv.DictReader(line for line in f if not line.startswith("#")))
    assert collections.Counter(r["kind"] for r in rows) == {"identical": 8, "slower": 8, "faster": 8}
    assert [int(r["base_first"]) for r in rows[:4]] == [1, 0, 1, 0]  # the order alternates as --confirm's
    table = {tuple(line.split()[:2]): line.split()[2:] for line in out.strip().splitlines()[-12:]}
    assert {key[1] for key in table} == {"farm", "ABBA", "mean", "p10"}, out
    for kind in ("slower", "faster"):
        pairs, right, wrong = map(int, table[kind, "farm"][:3])
        assert (pairs, right, wrong) == (1, 1, 0), out
    assert run_benchmark("confirm_rounds.py", "--judge", str(tmp_path / "blocks.csv"), timeout=120).strip() == \
        "\n".join(out.strip().splitlines()[-14:])
    twice = run_benchmark("confirm_rounds.py", "--judge", str(tmp_path / "blocks.csv"), str(tmp_path / "blocks.csv"),
                          timeout=120)  # two runs' files judged as one: each file's pairs counted on
    table = {tuple(line.split()[:2]): line.split()[2:] for line in twice.strip().splitlines()[-12:]}
    assert {kind: int(table[kind, "farm"][0]) for kind in ("identical", "slower", "faster")} == \
        {"identical": 2, "slower": 2, "faster": 2}, twice


def test_history_series_quick(tmp_path: Path) -> None:
    """Measured series through farm history: the identical series and the stepped one each have both
    configurations; the stepped series' largest change point starts at its first planted run (a 12x
    convolution), unless runs timed under contention (left out of the change points) left too few
    after it; the last line says whether every change point is where it belongs."""
    out = run_benchmark("history_series.py", "--quick", "--dir", str(tmp_path / "work"), timeout=600)
    assert re.search(r"^6 identical runs, then 5 \+ 5 runs with the convolution run 12 times from run-05 ", out,
                     re.MULTILINE), out
    lines = re.findall(r"^  (identical|stepped) (tiny · fp32 · b[18] · onnxruntime): (\d+) runs \((\d+) contended\); "
                       r"(.*)$", out, re.MULTILINE)
    assert sorted((kind, label.split(" · ")[2]) for kind, label, _, _, _ in lines) == [
        ("identical", "b1"), ("identical", "b8"), ("stepped", "b1"), ("stepped", "b8")], out
    for kind, _, runs, contended, found in lines:
        assert int(runs) == (6 if kind == "identical" else 10) and int(contended) <= int(runs)
        if kind == "stepped":
            changes = re.findall(r"at (run-\d+) [\d.e+-]+ -> [\d.e+-]+ ms \(([+−-][\d.]+) %", found)
            if changes:
                assert max(changes, key=lambda c: abs(float(c[1].replace("−", "-"))))[0] == "run-05", found
            else:
                assert int(contended) > 0, found  # the step left out with the contended runs, never missed in quiet
    assert re.search(r"^change points where they belong: (yes|no)$", out, re.MULTILINE), out


def test_busy_box_quick() -> None:
    """A sweep beside busy programs, the node's memory in waves over its own Ray's threshold: the
    sweep exits 0, the waves crossed the threshold, every cell is ok, none failed for memory, and
    the report's counts add up."""
    out = run_benchmark("busy_box.py", "--quick", timeout=600)
    found = re.search(r": exit (\d+) after \d+ s, beside \d+ busy programs and memory in (\d+) waves up to "
                      r"([\d.]+) of the node \(Ray's threshold ([\d.]+): above it ([\d.]+) s\)$", out, re.MULTILINE)
    assert found, out
    assert found[1] == "0" and int(found[2]) >= 1 and float(found[3]) > float(found[4]), out
    assert float(found[5]) > 0, out  # the waves crossed the threshold: Ray's monitor had cause to act
    assert re.search(r"^cells: ok 6$", out, re.MULTILINE), out
    again = re.search(r"^run more than once: (\d+)$", out, re.MULTILINE)
    assert again and len(re.findall(r"^  \w{8}: \d+ runs; before: ", out, re.MULTILINE)) == int(again[1]), out
    assert re.search(r"^failed for memory: 0$", out, re.MULTILINE), out


def test_parallel_exports_quick() -> None:
    """Planning two PyTorch sources one at a time and two at a time: both times printed, the same files."""
    out = run_benchmark("parallel_exports.py", "--quick", timeout=300)
    match = re.search(rf"one at a time: {NUMBER} s;  2 at a time: {NUMBER} s;  ratio {NUMBER}x", out)
    assert match, out
    assert all(positive(value) for value in match.groups())
    assert "same files: yes" in out


def test_the_benchmarks_page_names_every_file() -> None:
    """benchmarks/README.md is the index of the benchmarks, their GPU-server files and their results:
    a file added without a line there fails here."""
    page = (BENCHMARKS / "README.md").read_text()
    files = [p for p in BENCHMARKS.rglob("*") if p.is_file() and "__pycache__" not in p.parts and p.name != "README.md"]
    # named by their path under benchmarks/, results by their file name in the results table
    missing = [str(p.relative_to(BENCHMARKS)) for p in files
               if f"`{p.relative_to(BENCHMARKS)}`" not in page and f"`{p.name}`" not in page]
    assert not missing, f"not in benchmarks/README.md: {missing}"


def test_the_verdicts_table_in_the_docs_is_made_from_its_results_files() -> None:
    """docs/results.md's verdict counts are what `verdicts_across_runs.py --markdown` makes of the
    committed --csv files it names: a figure there cannot drift from its file."""
    sys.path.insert(0, str(BENCHMARKS))
    from verdicts_across_runs import markdown

    docs = (ROOT / "docs" / "results.md").read_text()
    block = re.search(r"<!-- verdicts: begin -->\n(.*?)<!-- verdicts: end -->", docs, re.S)[1]
    files = re.search(r"--markdown ([^`]+)`", block)[1].split()
    assert block == markdown([ROOT / f for f in files]).replace(str(ROOT) + "/", ""), \
        "docs/results.md's verdicts table differs from its files: rerun --markdown"
    assert len(files) >= 6 and all((ROOT / f).is_file() for f in files)


def test_every_generated_table_in_the_docs_is_what_its_command_makes_of_its_files(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """benchmarks/docs_tables.py --check: each table of measured figures in README.md and docs/ that
    names the command making it from committed results files is that command's output now; a figure
    changed by hand in a copy is found."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import docs_tables

    found = {name for _, name, _, _ in docs_tables.tables()}
    assert found >= {"gpu-engines-fp16", "isolation", "verdicts", "corpus-registry-cpu", "corpus-registry-gpu"}, found
    assert docs_tables.stale() == []
    doctored = tmp_path / "gpu-figures.md"
    doctored.write_text((ROOT / "docs" / "gpu-figures.md").read_text().replace("| PyTorch eager | 191/s,",
                                                                                 "| PyTorch eager | 192/s,", 1))
    assert docs_tables.stale([doctored]) == ["gpu-figures.md: gpu-engines-fp16"]



def test_serving_search_quick(tmp_path: Path) -> None:
    """The serving search on a tiny CNN (ONNX Runtime CPU) under LoadGen's Server scenario: the
    engine's ceiling, each rate tried with LoadGen's verdict and p99, the batcher's own time beside
    the engine's, and the found rate (the highest VALID one under the bound) in the JSON."""
    pytest.importorskip("mlperf_loadgen")
    out = run_benchmark("serving_search.py", "--quick", "--json", str(tmp_path / "serving.json"), timeout=300)
    assert re.search(r"^max batch 4: the engine's query [\d.]+ ms back to back, ceiling [\d,]+/s$", out, re.M), out
    row = json.loads((tmp_path / "serving.json").read_text())["rows"][0]
    assert 1 <= len(row["tried"]) <= 2 and all(t["engine_ms"] > 0 and t["batcher_ms"] > 0 for t in row["tried"])
    passing = [t["rate"] for t in row["tried"] if t["valid"] and t["p99_ms"] <= 1000]
    assert row["best_rate"] == (max(passing) if passing else None), row
    assert row["best_rate"] is None or row["best_rate"] < row["ceiling_per_s"]


def test_int8_placement_quick() -> None:
    """farm's int8 placement against quantize_static's default on a small MatMul model: farm puts
    fewer Q/DQ nodes (none around the Add and Relu), both files close to fp32; a ratio is printed."""
    out = run_benchmark("int8_placement.py", "--quick", timeout=300)
    row = next(line for line in out.splitlines() if line.startswith("quick.onnx")).split()
    farm_nodes, default_nodes = map(int, row[2].split("/"))
    assert 0 < farm_nodes < default_nodes, out
    assert all(float(c) > 0.99 for c in row[3].split("/")), out
    assert float(row[5]) > 0, out
