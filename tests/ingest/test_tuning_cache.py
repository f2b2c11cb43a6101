"""trtexec 11.1's --tuningCacheFile (tests/ingest/written_from_docs/trt11_tuning_cache.jsonl, written
from trtexec's source): one cell per build route, a crashed route failed with trtexec's words, each
route's loss judged by trtexec's rule, nothing stated that the file does not state."""

from __future__ import annotations

from pathlib import Path

import pytest

from farm.cli import main
from farm.ingest.sniff import detect_kind
from farm.trt_output import FormatError, TuningCacheFromJsonLines
from farm.warehouse import Warehouse
from tests.ingest.test_trt_versions import DOCS, ingest

CACHE = DOCS / "trt11_tuning_cache.jsonl"


def test_each_build_route_is_a_cell(tmp_path: Path) -> None:
    assert detect_kind(CACHE.read_text()) == "tuning_cache"
    code, results = ingest(tmp_path, CACHE)
    assert code == 0
    con = Warehouse(results).connect()
    rows = con.execute("""SELECT c.model, json_extract_string(c.options, '$.build_route'), c.status, c.reason,
                                 m.compute_mean_ms, m.latency_median_ms, m.throughput_qps, a.verdict, a.worst_metric,
                                 a.worst_value
                          FROM cells c LEFT JOIN measurements m USING (cell_id) LEFT JOIN accuracy a USING (cell_id)
                          ORDER BY c.model, json_extract_string(c.options, '$.build_route') DESC""").fetchall()
    assert [(r[1], r[2]) for r in rows] == [("-match_ragged_mha=on -copy_ppg=on", "ok"),
                                            ("-match_ragged_mha=on -copy_ppg=off", "failed"),
                                            ("-match_ragged_mha=off -copy_ppg=on", "ok"),
                                            ("-match_ragged_mha=off -copy_ppg=off", "ok")]
    assert {r[0] for r in rows} == {"model"}  # the header's ONNX file
    assert rows[1][3] == "trtexec: child killed by signal 11 (Segmentation fault)" and rows[1][4] is None
    assert [r[4] for r in rows] == [pytest.approx(0.4187763214111328), None, 0.39, 0.401]
    assert all(r[5] is None and r[6] is None for r in rows)  # no latency or throughput: the file states none
    # trtexec's rule: fail at loss >= --accuracyThreshold (0.01), a route over it still timed
    assert [(r[7], r[9]) for r in rows] == [("pass", 3.0517578125e-07), (None, None), ("fail", 0.0123),
                                            ("pass", 0.0004)]
    assert rows[0][8] == "L2 loss"


def test_a_tuning_cache_is_ingested_alone(tmp_path: Path, capsys) -> None:
    code, _ = ingest(tmp_path, CACHE, DOCS / "trt11_inference_options.log")
    assert code == 2 and "tuning cache, one engine per build route" in capsys.readouterr().err


@pytest.mark.parametrize(("text", "problem"), [
    ('{"tuner_version":"1","tuning_expr":"-a=[on|off]"}\n{"iter":0,"build_route":"-a=on","crash":false,"err',
     "line 2 is not JSON"),
    ('{"tuner_version":"1","tuning_expr":"-a=[on|off]"}\n{"iter":0,"build_route":"-a=on"}',
     "line 2 is a build route without crash, error_message, accuracy_loss, gpu_time"),
    ('{"tuner_version":"1","tuning_expr":"x"}\n{"iter":-1,"build_route":"","crash":false,"error_message":"",'
     '"accuracy_loss":null,"gpu_time":-2}', "line 2: iter -1, gpu_time -2 is not what trtexec writes there"),
    ('{"tuner_version":"1","tuning_expr":"x"}\n{"iter":0,"build_route":"","crash":false,"error_message":"",'
     '"accuracy_loss":null,"gpu_time":1e308}', "line 2: gpu_time 1e"),  # 1e+308: above an hour a query
])
def test_a_cut_or_foreign_line_is_named(tmp_path: Path, text: str, problem: str, capsys) -> None:
    with pytest.raises(FormatError, match=problem):
        TuningCacheFromJsonLines(text)
    path = tmp_path / "tune.jsonl"
    path.write_text(text)
    assert main(["ingest", str(path), "--results", str(tmp_path / "results")]) == 2
    err = capsys.readouterr().err
    assert "tuningCacheFile" in err and problem in err and not (tmp_path / "results").exists()
