"""Serving scenarios (farm.serving): MLPerf LoadGen's own load on the dynamic batcher in front of a
real ONNX Runtime engine, the batcher's promises, and the search for the highest rate under a
latency bound."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("mlperf_loadgen")

from farm.backends.base import standalone_request
from farm.backends.onnxruntime import OnnxRuntimeBackend
from farm.cli import main
from farm.config import load_config
from farm.plan import plan_sweep
from farm.serving import DynamicBatcher, loadgen_missing, run_scenario
from farm.serving.batcher import BatchStats
from farm.serving.loadgen import ScenarioRun
from farm.serving.search import MAX_TESTS, RUN_TO_RUN, TOLERANCE, below_the_engine, highest_rate, run_to_run
from farm.warehouse import Warehouse
from farm.warehouse.rows import serving_note
from tests.conftest import tiny_cnn, write_sweep


def served(query, max_batch: int, max_delay_ms: float, arrivals: list[list[int]], gap_s: float = 0.0):
    """Issue `arrivals` (lists of sample ids) to a batcher, `gap_s` apart; (completed ids in order, stats)."""
    completed: list[int] = []
    lock = threading.Lock()

    def complete(ids: list[int]) -> None:
        with lock:
            completed.extend(ids)

    batcher = DynamicBatcher(query, max_batch, max_delay_ms, complete)
    batcher.start()
    for ids in arrivals:
        batcher.issue(ids)
        time.sleep(gap_s)
    batcher.stop()
    return completed, batcher.stats


def test_every_sample_is_completed_once_in_batches_no_larger_than_the_max() -> None:
    runs = []
    completed, stats = served(lambda: runs.append(1), 4, 5.0, [list(range(10)), [10], [11, 12]], gap_s=0.001)
    assert sorted(completed) == list(range(13))
    assert max(stats.batch_sizes) <= 4 and sum(n * k for n, k in stats.batch_sizes.items()) == 13
    assert len(runs) == sum(stats.batch_sizes.values()) == len(stats.engine_ms)
    assert len(stats.queue_ms) == 13 and min(stats.queue_ms) >= 0
    assert len(stats.served) == 13 and all(ms >= wait for (_, ms), wait in zip(stats.served, stats.queue_ms))


def test_latency_by_second_shows_where_a_tests_slow_samples_came() -> None:
    """Samples of the batcher's run by the second they arrived in: a burst of slow ones stands out in
    its second; a second in which nothing arrived is None, not 0."""
    stats = BatchStats()
    stats.served = [(100.0 + i / 100, 5.0) for i in range(100)] + [(101.0 + i / 100, 5.0 + (i < 50) * 200) for i in range(100)]
    stats.served += [(103.5, 7.0)]
    assert stats.p99_by_second() == [5.0, 205.0, None, 7.0]
    assert BatchStats().p99_by_second() == []


def test_an_engine_that_fails_still_completes_every_sample_and_says_why() -> None:
    """LoadGen waits for every sample it issued: a failing engine must not hang the test."""
    def query() -> None:
        raise RuntimeError("device lost")

    completed, stats = served(query, 2, 0.0, [[1, 2, 3], [4, 5]])
    assert sorted(completed) == [1, 2, 3, 4, 5]
    assert stats.error == "RuntimeError: device lost"


def test_loadgen_server_on_a_real_engine_is_read_back_from_its_own_log(tmp_path: Path) -> None:
    """A real ONNX Runtime CPU engine under LoadGen's Server scenario at a low rate and a loose
    bound: VALID, its percentiles ordered and no shorter than the engine's own query (LoadGen's
    latency includes the queue), every sample counted in the batch histogram, the logs kept."""
    assert loadgen_missing() is None
    model = tiny_cnn(tmp_path / "tiny.onnx")
    feeds = {"x": np.random.default_rng(0).standard_normal((4, 3, 8, 8)).astype(np.float32)}
    backend = OnnxRuntimeBackend({"intra_op_threads": 1})
    backend.build(standalone_request(model, feeds, "fp32", tmp_path), feeds)
    try:
        run = run_scenario(backend.query_fn(feeds), 4, "server", tmp_path / "logs", max_delay_ms=2.0,
                           target_qps=200, latency_bound_ms=1000, min_duration_ms=1000, min_query_count=500)
    finally:
        backend.close()
    assert run.valid, run.why_invalid
    p50, p99 = run.latency("50.00"), run.latency("99.00")
    assert 0 < p50 <= p99 <= run.latency_ms["max"]
    # each sample's latency holds its batch's query (and its wait before it): no median below the engine's
    assert p50 >= 0.9 * run.engine_ms_median > 0
    assert sum(n * k for n, k in run.batch_sizes.items()) == run.queries >= 500
    assert max(run.batch_sizes) <= 4 and run.error is None
    assert (tmp_path / "logs" / "mlperf_log_summary.txt").read_text().count("Result is : VALID") == 1
    # the test's seconds (at least its 1 s minimum), each sample's latency at least its batch's query
    by_second = [ms for ms in run.p99_by_second_ms if ms is not None]
    assert len(run.p99_by_second_ms) >= 1 and min(by_second) >= 0.5 * run.engine_ms_median


def _run(rate: float, p99: float, valid: bool = True) -> ScenarioRun:
    return ScenarioRun("server", rate, valid, None if valid else "INVALID", rate, rate, {"p99.00": p99}, 1000, 0,
                       None, {}, None, None, [], 1.0, 1.0, 0.01, 1.0, Path("."), None)


def test_the_search_finds_the_highest_passing_rate_within_its_tolerance() -> None:
    """Bisection against a known edge (a rate passes up to 1234/s): the best rate passes twice, lies
    within the tolerance of the edge, and every rate tried is kept."""
    search = highest_rate(lambda rate: _run(rate, 5.0 if rate <= 1234 else 50.0), 10.0, 4000)
    assert search.best is not None and search.best.target_qps <= 1234 and search.confirmed
    assert search.best.target_qps >= 1234 * 0.95 - 1e-9
    assert [t.target_qps for t in search.tried].count(search.best.target_qps) == 2
    assert len(search.tried) <= MAX_TESTS and search.why_none is None


def lucky_engine() -> tuple[Callable[[float], ScenarioRun], set[float]]:
    """An engine whose edge is at 1000/s (p99 10 ms), but whose first test at one rate above it passes
    (a quiet moment of the machine); the set holds that rate once it has been tried."""
    lucky: set[float] = set()

    def run_at(rate: float) -> ScenarioRun:
        if rate > 1000 and not lucky and rate < 1300:
            lucky.add(rate)
            return _run(rate, 9.0)
        return _run(rate, 5.0 if rate <= 1000 else 50.0)

    return run_at, lucky


def test_a_rate_that_passes_once_by_luck_is_not_the_answer() -> None:
    """The winner's curse: the edge is at 1000/s, but the first test at one rate above it passes (a
    quiet moment of the machine). Its confirmation fails, and the answer is a rate below the edge,
    passed twice."""
    run_at, lucky = lucky_engine()
    search = highest_rate(run_at, 10.0, 2000)
    assert lucky and search.best is not None and search.confirmed
    assert 950 <= search.best.target_qps <= 1000
    assert [t.target_qps for t in search.tried].count(min(lucky)) == 2  # tried again, and failed
    nothing = highest_rate(lambda rate: _run(rate, 50.0), 10.0, 4000, max_tests=3)
    assert nothing.best is None and nothing.why_none == "no rate down to 900/s passed: p99 over the bound"


def test_an_answer_says_where_tests_above_it_disagreed() -> None:
    """The lucky search above, as the cell's note: the rate that passed and then failed is named with
    its count (runs of such a search come further apart); a search whose tests all agree says nothing."""
    run_at, lucky = lucky_engine()

    def rows(search) -> list[dict]:
        return [{"scenario": "server", "max_delay_ms": 2.0, "slo_ms": 10.0, "target_qps": t.target_qps, "valid": t.valid,
                 "error": t.error, "latency_p99_ms": t.latency("99.00"), "chosen": t is search.best}
                for t in search.tried]

    note = serving_note(rows(highest_rate(run_at, 10.0, 2000)))
    assert f"above it {min(lucky):,.0f}/s (1 of 2) passed some tests, not all" in note
    clean = serving_note(rows(highest_rate(lambda rate: _run(rate, 5.0 if rate <= 1234 else 50.0), 10.0, 4000)))
    assert "LoadGen VALID twice" in clean and "above it" not in clean
    # an engine error is not the bound moving: a rate that passed once and met one is not named
    run_at, lucky = lucky_engine()  # a fresh one: its lucky pass happens again
    errored = rows(highest_rate(run_at, 10.0, 2000))
    for row in errored:
        if row["target_qps"] == min(lucky) and row["latency_p99_ms"] > 10.0:  # its failed confirmation
            row.update(error="RuntimeError: the engine stopped", latency_p99_ms=float("nan"))
    assert "above it" not in serving_note(errored)


def test_an_answer_says_in_how_many_seconds_the_failing_tests_above_it_were_over() -> None:
    """A failed test just above the answer, by its seconds: a burst (2 of 10 seconds over the bound)
    reads apart from a rate the engine cannot hold (every second over)."""
    def row(rate: float, p99: float, seconds: list, chosen: bool = False) -> dict:
        return {"scenario": "server", "max_delay_ms": 2.0, "slo_ms": 10.0, "target_qps": rate, "valid": p99 <= 10,
                "error": None, "latency_p99_ms": p99, "chosen": chosen, "p99_by_second_ms": json.dumps(seconds)}

    rows = [row(900, 5.0, [4.0] * 10), row(1000, 40.0, [5.0] * 8 + [60.0, 12.0]), row(1100, 90.0, [30.0] * 9 + [None]),
            row(900, 6.0, [4.0] * 10, chosen=True)]
    assert serving_note(rows).endswith("; over p99 10 ms in 2 of 10 seconds at 1,000/s, 9 of 9 seconds at 1,100/s")
    assert "over p99" not in serving_note([{**r, "p99_by_second_ms": None} for r in rows])  # rows before the column


def test_runs_of_a_search_with_longer_tests_are_told_apart_more_finely() -> None:
    """What separates two runs of one search follows its tests' length: 60 s tests came within the
    bisection's own tolerance on the H200, shorter ones up to RUN_TO_RUN; no length known, the wider."""
    assert run_to_run(60.3) == TOLERANCE < run_to_run(59.9) == run_to_run(10.0) == run_to_run(None) == RUN_TO_RUN


def test_a_bound_below_the_engines_own_latency_is_one_line() -> None:
    assert below_the_engine(5.0, 2.0, 8) is None
    why = below_the_engine(1.0, 2.5, 8)
    assert why == ("slo_ms = 1 is below the engine's own latency at batch 8 (2.5 ms a query, before any queueing): "
                   "no request rate can meet it; raise slo_ms, or serve a smaller max batch")


SERVED = """name = "served"
[[models]]
source = "tiny.onnx"
[axes]
batch_sizes = [4]
backends = ["onnxruntime", "trtexec"]
scenarios = ["offline", "server", "single_stream"]
[serving]
slo_ms = SLO
max_delay_ms = [0.5, 2.0]
min_duration_ms = 300
min_query_count = 100
"""


def served_sweep(tmp_path: Path, slo: str = "200") -> tuple[int, list[tuple], list[tuple]]:
    """The sweep above on the CPU: (exit status, cells (backend, label, status, reason, notes), serving rows)."""
    tiny_cnn(tmp_path / "tiny.onnx")
    config = write_sweep(tmp_path, SERVED.replace("SLO", slo))
    status = main(["sweep", str(config), "--results", str(tmp_path / "results"), "--executor", "local"])
    con = Warehouse(tmp_path / "results").connect()
    cells = con.execute("SELECT cell_id, backend, status, reason, notes FROM cells ORDER BY backend, notes").fetchall()
    rows = con.execute("SELECT cell_id, scenario, max_delay_ms, valid, chosen, latency_p99_ms, target_qps, log_dir "
                       "FROM serving ORDER BY cell_id, test").fetchall()
    return status, cells, rows


def test_a_sweep_runs_each_scenario_on_the_engine_its_offline_cell_builds(tmp_path: Path) -> None:
    """Offline, Server at two batcher delays and SingleStream of one engine: the offline cell keeps
    the id it had before scenarios existed, each serving cell's LoadGen tests are rows of `serving`
    (the chosen Server rate VALID under its bound, LoadGen's logs kept), its answer a note; trtexec,
    which times itself, cannot serve."""
    status, cells, rows = served_sweep(tmp_path)
    assert status == 0, cells
    plain = plan_sweep(load_config(write_sweep(tmp_path, SERVED.split("scenarios")[0], "plain.toml")),
                       tmp_path / "cache").cells
    ort = [c for c in cells if c[1] == "onnxruntime"]
    assert len(ort) == 4 and {c[2] for c in ort} == {"ok"}, ort
    assert plain[0].cell_id in {c[0] for c in ort}  # the offline cell: the id of a sweep without scenarios
    notes = {c[0]: c[4] or "" for c in ort}
    server = [c for c in ort if notes[c[0]].startswith("server")]
    assert len(server) == 2 and {n.split(":")[0] for n in (notes[c[0]] for c in server)} == {
        "server (max delay 0.5 ms)", "server (max delay 2 ms)"}
    for cell_id, *_ in server:
        mine = [r for r in rows if r[0] == cell_id]
        chosen = [r for r in mine if r[4]]
        assert 1 <= len(mine) <= MAX_TESTS and len(chosen) <= 1
        passed = {r[6]: r[3] and r[5] <= 200 for r in mine}  # a rate, and whether every test of it passed
        for r in mine:
            passed[r[6]] &= r[3] and r[5] <= 200
        for row in chosen:  # the highest rate whose every test passed, twice where the search had the tests
            assert passed[row[6]] and row[6] == max(rate for rate, ok in passed.items() if ok)
            assert [r[6] for r in mine].count(row[6]) == 2 or len(mine) == MAX_TESTS
            assert f"{row[6]:,.0f} queries/s under p99 200 ms" in notes[cell_id]
        assert all((Path(r[7]) / "mlperf_log_detail.txt").is_file() for r in mine)
    single = [r for r in rows if r[1] == "single_stream"]
    assert len(single) == 1 and single[0][2] == 0.0
    trtexec = [c[3] for c in cells if c[1] == "trtexec" and c[2] == "unsupported"]
    assert sorted(trtexec) == [
        f"trtexec times its own runs, and a {scenario} scenario needs an engine farm calls query by query (its batcher "
        "feeds it): run the scenario on the tensorrt, onnxruntime or torch backend"
        for scenario in ("server", "server", "single_stream")]


def test_show_and_compare_keep_a_cells_scenario_apart(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """`farm show` names each cell's scenario where a sweep's cells differ in it, and farm compare
    never pairs a serving cell with the offline cell of the same settings."""
    import csv
    import io

    from farm.compare.match import config_key

    status, cells, _ = served_sweep(tmp_path)
    capsys.readouterr()
    assert main(["show", "served", "--results", str(tmp_path / "results"), "--format", "csv"]) == 0
    shown = [r for r in csv.DictReader(io.StringIO(capsys.readouterr().out)) if r["backend"] == "onnxruntime"]
    assert sorted(r["variant"] for r in shown) == ["offline", "server delay=0.5ms", "server delay=2ms", "single_stream"]
    assert sorted(r["scenario"] for r in shown) == ["", "server delay=0.5ms", "server delay=2ms", "single_stream"]
    chosen = Warehouse(tmp_path / "results").connect().execute(
        "SELECT max_delay_ms, target_qps, duration_s FROM serving WHERE chosen AND scenario = 'server' "
        "ORDER BY target_qps DESC, cell_id").fetchall()
    assert main(["show", "served", "--results", str(tmp_path / "results")]) == 0
    answer = [line for line in capsys.readouterr().out.splitlines() if line.startswith("tiny, p99 under 200 ms")]
    if chosen:  # the setup that served the most under the bound, with the runner-up and the margin
        best = f"tiny, p99 under 200 ms: serve it on onnxruntime at fp32, max batch 4, delay {chosen[0][0]:g} ms: " \
               f"{chosen[0][1]:,.0f} queries/s (p99 "
        assert len(answer) == 1 and answer[0].startswith(best), answer
        assert len(chosen) == 1 or f"; runner-up onnxruntime at fp32, max batch 4, delay {chosen[1][0]:g} ms: " \
            f"{chosen[1][1]:,.0f}/s, " in answer[0]
        if len(chosen) == 2:  # a margin within what runs of one search with tests this long came apart says so
            apart = 100 * run_to_run(min(chosen[0][2], chosen[1][2]))
            assert (f"up to {apart:g} % apart: not told apart" in answer[0]) == (chosen[1][1] / chosen[0][1] > 1 - apart / 100)
    same = {"model": "tiny", "precision": "fp32", "batch": 4, "profile": None, "backend": "onnxruntime", "options": "{}"}
    assert config_key({**same, "scenario": None}) != config_key({**same, "scenario": "server delay=2ms"})


def test_a_bound_below_the_engines_query_makes_its_server_cells_unsupported(tmp_path: Path) -> None:
    status, cells, rows = served_sweep(tmp_path, slo="0.000001")
    assert status == 0
    reasons = [c[3] for c in cells if c[1] == "onnxruntime" and c[2] == "unsupported"]
    assert len(reasons) == 2 and all(r.startswith("slo_ms = 1e-06 is below the engine's own latency at batch 4 (")
                                     for r in reasons), reasons
    assert {r[1] for r in rows} == {"single_stream"}


def test_server_without_a_bound_or_rates_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    config = write_sweep(tmp_path, SERVED.replace("slo_ms = SLO\n", ""))
    assert main(["sweep", str(config), "--results", str(tmp_path / "results")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"farm: error: {config}: axes.scenarios has \"server\": set serving.slo_ms = MS (the p99 bound "
                   "under which farm searches the highest rate) or serving.rates = [QPS, ...] (rates to measure)"]


def test_the_report_says_which_setup_serves_the_most(tmp_path: Path) -> None:
    """`farm report` of a sweep with Server cells carries the same answer as `farm show`."""
    pytest.importorskip("matplotlib")
    import html

    from farm.queries import serving_answers

    status, _, _ = served_sweep(tmp_path)
    assert status == 0
    reader = Warehouse(tmp_path / "results")
    answers = serving_answers(reader, reader.connect(), "served")
    assert main(["report", "served", "--results", str(tmp_path / "results"), "-o", str(tmp_path / "r.html")]) == 0
    page = (tmp_path / "r.html").read_text()
    assert ("<h2>Serving under a latency bound</h2>" in page) == bool(answers)
    assert all(html.escape(answer) in page for answer in answers), (answers, page)



def test_each_loadgen_test_carries_the_boards_energy_per_query(tmp_path: Path, monkeypatch) -> None:
    """A GPU cell's serving rows hold the energy over each LoadGen test from the telemetry window
    (NVML here is tests.test_telemetry's double, checked against nvidia-ml-py's names): the
    counter's two reads 700 mJ apart, divided by the test's queries; without a window, nulls and why."""
    import sys

    from farm.scenario import ServingPlan
    from farm.serving.cell import serving_rows
    from farm.telemetry import cell_window
    from tests.test_telemetry import UUID, fake_nvml

    model = tiny_cnn(tmp_path / "tiny.onnx")
    feeds = {"x": np.random.default_rng(0).standard_normal((2, 3, 8, 8)).astype(np.float32)}
    backend = OnnxRuntimeBackend({"intra_op_threads": 1})
    backend.build(standalone_request(model, feeds, "fp32", tmp_path), feeds)
    plan = ServingPlan("server", 1.0, slo_ms=1000, rates=(100.0,), min_duration_ms=300, min_query_count=50)
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml())
    try:
        measured = serving_rows(backend.query_fn(feeds), plan, 2, tmp_path / "gpu", lambda _: None,
                                telemetry=lambda: cell_window("cuda", True, UUID))
        plain = serving_rows(backend.query_fn(feeds), plan, 2, tmp_path / "cpu", lambda _: None,
                             telemetry=lambda: cell_window("cpu", True, None))
    finally:
        backend.close()
    (row,), (cpu,) = measured, plain
    assert row["queries"] >= 50 and row["energy_j"] == pytest.approx(0.7)
    assert row["energy_per_query_mj"] == pytest.approx(700 / row["queries"]) == row["energy_per_sample_mj"]
    assert row["power_mean_w"] == pytest.approx(0.7 / row["duration_s"], rel=0.5)
    assert cpu["energy_j"] is None and cpu["energy_per_query_mj"] is None
    assert cpu["telemetry_note"] == "a CPU cell: GPU telemetry is for device cells"


def test_each_loadgen_test_starts_on_an_engine_warmed_just_before_it(tmp_path: Path) -> None:
    """Between one LoadGen test and the next the engine idles (logs written, the next rate chosen):
    each test is preceded by the query back to back, so that no test's first queries meet an
    engine gone cold. Counted from the engine's own calls: between two tests' ends, the calls the
    batcher made for the second test's batches, and the warm-up's on top."""
    import json as json_module

    from farm.scenario import ServingPlan
    from farm.serving.cell import serving_rows

    model = tiny_cnn(tmp_path / "tiny.onnx")
    feeds = {"x": np.random.default_rng(0).standard_normal((2, 3, 8, 8)).astype(np.float32)}
    backend = OnnxRuntimeBackend({"intra_op_threads": 1})
    backend.build(standalone_request(model, feeds, "fp32", tmp_path), feeds)
    events: list[str] = []
    engine = backend.query_fn(feeds)

    def query():
        events.append("call")
        return engine()

    plan = ServingPlan("server", 1.0, slo_ms=1000, rates=(100.0, 150.0), min_duration_ms=300, min_query_count=50)
    try:
        rows = serving_rows(query, plan, 2, tmp_path / "logs", lambda line: events.append("log"))
    finally:
        backend.close()
    ends = [i for i, event in enumerate(events) if event == "log"]  # the engine's ceiling, then each test's end
    assert len(ends) == 3 and len(rows) == 2
    for (start, end), row in zip(zip(ends, ends[1:]), rows):
        batches = sum(json_module.loads(row["batch_sizes"]).values())
        assert batches >= 25  # 50 queries or more, at most 2 a batch
        assert end - start - 1 > batches, (end - start - 1, batches)  # and the warm-up's, one at least
