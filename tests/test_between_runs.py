"""A verdict must hold across runs, not only within one: where the warehouse holds several runs of a
configuration, how far they move apart widens the interval of a pair of them (farm.compare.between),
so a change the machine's own drift could make is inconclusive, while a change beyond it is still
found; with fewer runs, a verdict says it rests on two runs alone."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from farm.cli import main
from farm.compare import compare_sweeps
from farm.compare.between import robust_spread
from farm.compare.core import RUN_SPREAD_UNDECIDED, WITHIN_TWO_RUNS
from tests.test_history import write_series


def test_the_spread_passes_over_a_step_and_measures_the_noise() -> None:
    rng = np.random.default_rng(0)
    noise = rng.normal(0, 0.05, 400)
    assert robust_spread(noise) == pytest.approx(0.05, rel=0.15)
    stepped = noise.copy()
    stepped[200:] += 1.0  # one difference of a whole e-fold
    assert robust_spread(stepped) == pytest.approx(robust_spread(noise), rel=0.05)
    assert robust_spread([0.3]) == 0.0


def test_identical_runs_that_drift_are_not_called_changed_and_a_real_change_still_is(tmp_path: Path,
                                                                                    capsys) -> None:
    """Eight runs of each configuration, each run's own interval ±1 %. 'drifting' moves 10 % from
    run to run (a host-bound cell on a virtual machine) and its last run is 12 % above the one
    before: alone those two runs say 'slower'; with the history, inconclusive, saying why.
    'steady' moves 0.5 % a run and its last is 20 % slower: still slower."""
    rng = np.random.default_rng(7)
    drifting = list(np.exp(rng.normal(0, 0.10, 8)))
    drifting[7] = drifting[6] * 1.12
    steady = list(np.exp(rng.normal(0, 0.005, 8)))
    steady[7] = steady[6] * 1.20
    results = tmp_path / "results"
    write_series(results, {"drifting": drifting, "steady": steady})
    comparison = compare_sweeps("night-06", "night-07", results)
    pairs = {p.label.split(" · ")[0]: p for p in comparison.pairs}
    assert pairs["drifting"].verdict == "inconclusive" and RUN_SPREAD_UNDECIDED in pairs["drifting"].notes
    assert pairs["drifting"].runs_seen == 8 and pairs["drifting"].run_spread > 0.05
    assert pairs["steady"].verdict == "slower" and pairs["steady"].notes == []
    assert main(["compare", "night-06", "night-07", "--results", str(results), "--json", str(tmp_path / "c.json")]) == 1
    found = {p["label"].split(" · ")[0]: p for p in json.loads((tmp_path / "c.json").read_text())["pairs"]}
    assert found["drifting"]["runs_seen"] == 8 and found["steady"]["verdict"] == "slower"
    assert "the machine's speed may have moved" in capsys.readouterr().out

    two = tmp_path / "two"  # two runs only: the verdict rests on them, and says so
    write_series(two, {"drifting": drifting[6:8]})
    [pair] = compare_sweeps("night-00", "night-01", two).pairs
    assert pair.verdict == "slower" and pair.notes == [WITHIN_TWO_RUNS] and pair.run_spread is None
