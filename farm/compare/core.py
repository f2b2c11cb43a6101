"""`compare_sweeps`: two sweeps' cells matched by configuration, a verdict per pair, the layers that
explain each slower cell, and what regressed (docs/dashboard.md: Comparing two runs)."""

from __future__ import annotations

import gc
import math
import textwrap
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from farm.compare.between import MIN_RUNS, run_key, run_spreads
from farm.compare.layer_changes import LayerExplanation, explain
from farm.compare.load import Side, load_side
from farm.compare.match import Pair, config_key, device_text, match_cells
from farm.compare.stats import (
    FASTER,
    INCONCLUSIVE,
    MIN_EFFECT_PERCENT,
    SLOWER,
    Effect,
    MedianInterval,
    effect_interval,
    finite,
    ratio_change,
)
from farm.errors import UserError
from farm.queries import CONTENDED_PERCENT

# a pair's verdict when a cell has no latency to compare: NEW failed where BASE was ok (a regression),
# the other way round, or neither measured
FAILED, FIXED, NOT_MEASURED = "failed", "fixed", "not measured"
# what a verdict rests on, said on the pairs it concerns (the same words for each: printed once)
WITHIN_TWO_RUNS = (f"judged from these two runs' samples: the warehouse holds fewer than {MIN_RUNS} runs of this "
                   "configuration to say how far its runs move apart (run the sweep again under other names: "
                   "farm sweep --sweep NAME)")
RUN_SPREAD_UNDECIDED = ("inconclusive: this configuration's runs move from one to the next about as far as this "
                        "change (its earlier runs in the warehouse), so the machine's speed may have moved, not the code; "
                        "farm compare --confirm measures both again here, interleaved")
CONTENDED_UNDECIDED = "inconclusive: timed under contention"  # the start of farm.compare.core._contended's note
REGRESSIONS = (SLOWER, FAILED)


@dataclass
class PairResult:
    """One matched pair's comparison (NEW against BASE)."""

    label: str
    base_id: str
    new_id: str
    verdict: str
    effect: Effect
    base: MedianInterval | None
    new: MedianInterval | None
    throughput_change: float | None
    p99_change: float | None
    energy_change: float | None  # energy per inference (per sample)
    accuracy: dict[str, Any]
    notes: list[str] = field(default_factory=list)
    layers: LayerExplanation | None = None
    run_spread: float | None = None  # how far a run of this configuration moves (log SD), from runs_seen runs
    runs_seen: int = 0

    @property
    def regressed(self) -> bool:
        """Slower beyond the minimum effect, failed where BASE was ok, or accuracy that passed and now fails."""
        return self.verdict in REGRESSIONS or self.accuracy.get("change") == "pass -> fail"


@dataclass
class Comparison:
    base_sweep: str
    new_sweep: str
    base_results: Path
    new_results: Path
    min_effect_percent: float
    pairs: list[PairResult]
    only_base: list[str]
    only_new: list[str]
    allowed: list[str] = field(default_factory=list)
    precisions: tuple[str, str] | None = None  # BASE's and NEW's, where cells were paired across them

    @property
    def title(self) -> str:
        """'NEW against BASE', or 'NEW at int8 against BASE at bf16'."""
        if self.precisions is None:
            return f"{self.new_sweep} against {self.base_sweep}"
        return f"{self.new_sweep} at {self.precisions[1]} against {self.base_sweep} at {self.precisions[0]}"

    @property
    def regressed(self) -> list[PairResult]:
        return [p for p in self.pairs if p.regressed]

    def counts(self) -> dict[str, int]:
        found: dict[str, int] = {}
        for pair in self.pairs:
            found[pair.verdict] = found.get(pair.verdict, 0) + 1
        return found


def cell_labels(cells: list[dict[str, Any]], wanted: set[str] | None = None) -> dict[str, str]:
    """Per cell id: 'tiny · fp32 · b4 · onnxruntime' (profile where there is one), the backend
    followed by the options that vary among these cells (farm.queries.option_labels: one rule);
    only the `wanted` cell ids' where given (what varies is still among all of `cells`)."""
    import json

    from farm.compare.match import options_text
    from farm.queries import option_labels

    # option_labels over the distinct (backend, options) pairs: what varies is the same, each parsed once
    keys = [(str(c.get("backend")), options_text(c.get("options"), c.get("backend")), str(c.get("precision")))
            for c in cells]
    first = {key: cell for key, cell in reversed(list(zip(keys, cells)))}
    found = dict(zip(first, option_labels([(cell.get("backend"), json.loads(key[1])) for key, cell in first.items()],
                                          precisions=[key[2] for key in first])))
    labels = {}
    for cell, key in zip(cells, keys):
        if wanted is not None and str(cell["cell_id"]) not in wanted:
            continue
        profile = cell.get("profile")
        labels[str(cell["cell_id"])] = (f"{cell.get('model')!s} · {cell.get('precision')!s} · b{cell.get('batch')}"
                                        f"{' · ' + profile if isinstance(profile, str) else ''} · {found[key]}")
    return labels


def cell_label(cell: dict[str, Any]) -> str:
    """One cell's label, naming none of its options (`cell_labels` names those that vary)."""
    return cell_labels([{**cell, "options": None}])[str(cell["cell_id"])]


@contextmanager
def _cycle_collector_paused():
    """Python's cycle collector off for a while: a comparison of 25,000 pairs builds some 300,000
    objects, none in a cycle, and the collector's passes over them took a fifth of its time."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def compare_sweeps(base_sweep: str, new_sweep: str, results: str | Path = "results",
                   base_results: str | Path | None = None, min_effect_percent: float = MIN_EFFECT_PERCENT,
                   allow_timing_differences: bool = False, allow_device_differences: bool = False,
                   precisions: tuple[str, str] | None = None) -> Comparison:
    """Compare NEW (`new_sweep` in `results`) against BASE (`base_sweep` in `base_results`, default
    `results`); with `precisions` (BASE's, NEW's), BASE's cells at one precision against NEW's at
    another (the same sweep twice: what a precision changes). UserError (one line, how to fix) for
    an unknown sweep, no matched cells, or matched cells whose timing definitions or devices differ
    unless allowed."""
    with _cycle_collector_paused():
        return _compare_sweeps(base_sweep, new_sweep, results, base_results, min_effect_percent,
                               allow_timing_differences, allow_device_differences, precisions)


def _compare_sweeps(base_sweep: str, new_sweep: str, results: str | Path, base_results: str | Path | None,
                    min_effect_percent: float, allow_timing_differences: bool,
                    allow_device_differences: bool, precisions: tuple[str, str] | None) -> Comparison:
    if not (isinstance(min_effect_percent, (int, float)) and 0 <= min_effect_percent < 1000):
        raise UserError(f"--min-effect {min_effect_percent}: give a percentage from 0 to 1000, e.g. --min-effect 3")
    base_flag = "--base-results" if base_results is not None else "--results"
    pool = ThreadPoolExecutor(2)  # each side read, then its intervals, while this thread matches
    try:
        loaded: tuple[Future, Future] = (Future(), Future())
        computing = [pool.submit(_side_intervals, loaded[0], base_results if base_results is not None else results,
                                 base_sweep, base_flag), pool.submit(_side_intervals, loaded[1], results, new_sweep)]
        base, new = loaded[0].result(), loaded[1].result()  # BASE's error first, as a reader would
        pairs, only_base, only_new = match_cells(base.cells, new.cells, precisions)
        if not pairs and precisions is not None:
            raise UserError(f"no cell of sweep {new_sweep!r} at {precisions[1]} has the configuration of one of "
                            f"{base_sweep!r}'s at {precisions[0]}: --precisions BASE:NEW names precisions both "
                            f"sweeps ran (see `farm ls`)")
        if not pairs:
            raise UserError(f"no cell of sweep {new_sweep!r} has the configuration of one of {base_sweep!r}'s "
                            f"({len(new.cells)} and {len(base.cells)} cells): compare runs of the same sweep file")
        allowed = _refusals(pairs, allow_timing_differences, allow_device_differences)
        shown = {str(p.new["cell_id"]) for p in pairs} | {str(c["cell_id"]) for c in (*only_base, *only_new)}
        labels = cell_labels(base.cells + new.cells, shown)
        results_ = [_compare_pair(pair, labels) for pair in pairs]
        # one dict per side: two runs of one sweep file in two warehouses share their cell ids
        intervals = (computing[0].result(), computing[1].result())
    finally:  # an error (an unknown sweep, no pairs) is said at once, not after the other side's work
        pool.shutdown(wait=False, cancel_futures=True)
    spreads = run_spreads([base.warehouse, new.warehouse], sorted({str(p.new.get("model")) for p in pairs}))
    for pair, result in zip(pairs, results_):
        _judge(pair, result, min_effect_percent, intervals, spreads)
    _explain_slower(pairs, results_, base, new)
    results_.sort(key=_severity)
    return Comparison(base_sweep, new_sweep, base.results, new.results, float(min_effect_percent), results_,
                      [_unmatched(c, labels) for c in only_base], [_unmatched(c, labels) for c in only_new], allowed,
                      precisions)


def _side_intervals(loaded: Future, results: str | Path, sweep: str, flag: str = "--results"
                    ) -> dict[str, MedianInterval | None]:
    """Read one side (`loaded` gets it, or the error), then every ok cell's median interval (each
    cell's from its own samples: those of unmatched cells are not needed, and cost little)."""
    try:
        side = load_side(results, sweep, flag)
    except BaseException as exc:
        loaded.set_exception(exc)
        raise
    loaded.set_result(side)
    return side.intervals([c for c in side.cells if c.get("status") == "ok"])


def _unmatched(cell: dict[str, Any], labels: dict[str, str]) -> str:
    return f"{str(cell['cell_id'])[:8]} {labels[str(cell['cell_id'])]} on {device_text(cell)} ({cell.get('status')})"


def _refusals(pairs: list[Pair], allow_timing: bool, allow_device: bool) -> list[str]:
    """Raise UserError where matched cells' latencies are not the same quantity, unless allowed;
    the differences allowed, in words."""
    allowed = []
    for attribute, allow, flag in (("timing_differs", allow_timing, "--allow-timing-differences"),
                                   ("device_differs", allow_device, "--allow-device-differences")):
        differing = [p for p in pairs if getattr(p, attribute)]
        if not differing:
            continue
        first = differing[0]
        what = f"{getattr(first, attribute)} for {cell_label(first.new)}"
        if not allow:
            raise UserError(f"{len(differing)} matched cell(s) differ in what was measured ({what}): their "
                            f"latencies are not comparable; pass {flag} to compare them anyway")
        allowed.append(f"{len(differing)} pair(s) compared despite a different {attribute.split('_')[0]} ({what})")
    return allowed


def _severity(pair: PairResult) -> tuple:
    effect = pair.effect.effect
    return (not pair.regressed, pair.verdict != FAILED, -(effect if math.isfinite(effect) else -math.inf))


def _compare_pair(pair: Pair, labels: dict[str, str]) -> PairResult:
    """A pair's result but for its latency verdict (`_judge` adds it once the intervals are in)."""
    a, b = pair.base, pair.new
    notes = [n for n in (pair.timing_differs, pair.device_differs) if n] + pair.notes
    if b.get("status") != "ok" and b.get("reason"):
        # the reason's whole first line: its end says what to do (notes print below the table, wrapped)
        notes.append(f"NEW {b.get('status')}: {textwrap.shorten(str(b['reason']).splitlines()[0], 500, placeholder=' …')}")
    if b.get("throttled"):
        notes.append("NEW's GPU clocks slowed during its timed window")
    if host := _host_bound_note(a, b):
        notes.append(host)
    return PairResult(labels[str(b["cell_id"])], str(a["cell_id"]), str(b["cell_id"]), NOT_MEASURED, _NO_EFFECT,
                      None, None, ratio_change(b.get("throughput_qps"), a.get("throughput_qps")),
                      ratio_change(b.get("latency_p99_ms"), a.get("latency_p99_ms")),
                      ratio_change(b.get("energy_per_sample_mj"), a.get("energy_per_sample_mj")), _accuracy(a, b), notes)


_NO_EFFECT = effect_interval(None, None)


def _host_bound_note(a: dict[str, Any], b: dict[str, Any]) -> str | None:
    """Where a side's GPU waited on the host's launches (farm.queries.host_bound): its latency is the
    CPU's speed when it ran, which on a virtual machine moves between runs of the same code minutes
    apart (docs/gpu-figures.md), so a verdict on it may be the machine's; the host probe each run
    timed before its repeats says how far the CPU itself moved."""
    from farm.queries import host_bound

    sides = [name for name, cell in (("BASE", a), ("NEW", b)) if host_bound(cell.get("enqueue_median_ms"),
                                                                             cell.get("compute_median_ms"))]
    if not sides:
        return None
    note = (f"host-bound ({' and '.join(sides)}): the latency is the CPU's speed when each ran, which moves "
            "between runs of the same code")
    change = ratio_change(b.get("host_probe_median_ms"), a.get("host_probe_median_ms"))
    if change is not None:
        note += (f"; host probe {a['host_probe_median_ms']:.2f} → {b['host_probe_median_ms']:.2f} ms "
                 f"({100 * change:+.0f} %)".replace("-", "−"))
    return note


def _contended(a: dict[str, Any], b: dict[str, Any], ratio: float) -> str | None:
    """Why a change of `ratio` (NEW / BASE) may be other programs': the slower side was timed while
    they took CONTENDED_PERCENT points more of the host's CPU time than on the other side
    (farm.queries.CONTENDED_PERCENT; the hypervisor's steal counted with them), and the change is
    no larger than losing that share could make it: 1 / (1 - share)^2, for a parallel engine waits
    on its slowest thread (identical ResNet-18 runs on ONNX Runtime, 2 cores, came out 2.2-2.3x
    apart with 0 % against 35-41 % taken; no false change had both sides alike)."""
    taken = [finite(c.get("cpu_others_percent")) for c in (a, b)]
    if None in taken or not math.isfinite(ratio) or ratio <= 0:
        return None
    taken = [t + (finite(c.get("cpu_steal_percent")) or 0.0) for t, c in zip(taken, (a, b))]
    slower, faster = (1, 0) if ratio > 1 else (0, 1)
    share = (taken[slower] - taken[faster]) / 100
    if share * 100 < CONTENDED_PERCENT or max(ratio, 1 / ratio) > 1 / (1 - min(share, 0.9)) ** 2:
        return None
    side = ("BASE", "NEW")[slower]
    return (f"{CONTENDED_UNDECIDED}: {side}, the slower, was timed while other programs took {taken[slower]:.0f} % "
            f"of the CPU time ({taken[faster]:.0f} % for the other), enough to make that change; farm compare "
            "--confirm measures both again here, interleaved")


def _judge(pair: Pair, result: PairResult, min_effect_percent: float,
           intervals: tuple[dict[str, MedianInterval | None], dict[str, MedianInterval | None]],
           spreads: dict[tuple, tuple[float, int]]) -> None:
    """The pair's change in median latency with its interval (widened by how far this
    configuration's runs move, where the warehouses hold enough of them), and the verdict."""
    a, b = pair.base, pair.new
    ok_a, ok_b = a.get("status") == "ok", b.get("status") == "ok"
    result.base = intervals[0].get(str(a["cell_id"])) if ok_a else None
    result.new = intervals[1].get(str(b["cell_id"])) if ok_b else None
    spread, result.runs_seen = spreads.get(run_key(b), (None, 0))
    result.run_spread = spread
    result.effect = effect_interval(result.base, result.new, min_effect_percent, spread or 0.0)
    result.verdict = result.effect.verdict
    contended = _contended(a, b, result.effect.effect + 1) if result.verdict in (SLOWER, FASTER) else None
    if contended:
        result.verdict = INCONCLUSIVE
        result.notes.append(contended)
    elif result.verdict in (SLOWER, FASTER) and spread is None:
        result.notes.append(WITHIN_TWO_RUNS)
    elif spread and result.verdict == INCONCLUSIVE and effect_interval(
            result.base, result.new, min_effect_percent).verdict in (SLOWER, FASTER):
        result.notes.append(RUN_SPREAD_UNDECIDED)
    if not (ok_a and ok_b):  # failed / fixed only where a side failed; skipped or unsupported: not measured
        failed_a, failed_b = a.get("status") == "failed", b.get("status") == "failed"
        result.verdict = FAILED if ok_a and failed_b else FIXED if ok_b and failed_a else NOT_MEASURED


def _explain_slower(pairs: list[Pair], results: list[PairResult], base: Side, new: Side) -> None:
    """Each slower pair's layers (every slower cell's layer rows read in one query per side)."""
    slower = [(pair, result) for pair, result in zip(pairs, results) if result.verdict == SLOWER]
    if not slower:
        return
    rows_base = base.layers_of([pair.base for pair, _ in slower])
    rows_new = new.layers_of([pair.new for pair, _ in slower])
    for pair, result in slower:
        result.layers = _explain(pair.base, pair.new, rows_base[str(pair.base["cell_id"])],
                                 rows_new[str(pair.new["cell_id"])])
        result.layers.latency_added_ms = result.new.median - result.base.median


def _explain(a: dict[str, Any], b: dict[str, Any], rows_a: list[dict[str, Any]],
             rows_b: list[dict[str, Any]]) -> LayerExplanation:
    """The layers that explain NEW's slower latency, with each cell's layer coverage (the stored
    figure, else Σ layer time ÷ compute time from its rows)."""
    from farm.layers.coverage import compute_ms, coverage_percent

    explanation = explain(rows_a, rows_b, a.get("backend"), b.get("backend"))
    coverage = []
    for cell, rows in ((a, rows_a), (b, rows_b)):
        stored = cell.get("layer_coverage_percent")
        if stored is None or (isinstance(stored, float) and math.isnan(stored)):
            stored = coverage_percent([r.get("time_avg_ms") for r in rows], compute_ms(cell))
        coverage.append(stored)
    explanation.coverage_base, explanation.coverage_new = coverage
    return explanation


_BASE_KEYS, _NEW_KEYS = (tuple(f"{side}_{c}" for c in ("cosine_similarity", "top1_agreement")) for side in ("base", "new"))


def _accuracy(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Both cells' accuracy verdicts and worst figures, and the change ('pass -> fail', 'fail ->
    pass'; None where it did not change or was not checked on both)."""
    found: dict[str, Any] = {}
    for side, cell, keys in (("base", a, _BASE_KEYS), ("new", b, _NEW_KEYS)):
        found[side] = cell.get("accuracy_verdict")
        for column, key in zip(("cosine_similarity", "top1_agreement"), keys):
            value = cell.get(column)
            found[key] = None if value is None or value != value else value  # value != value: NaN
    if found["base"] and found["new"] and found["base"] != found["new"]:
        found["change"] = f"{found['base']} -> {found['new']}"
    else:
        found["change"] = None
    if found["new"] in ("fail", "unjudged") and b.get("failed_metric"):
        found["failed_metric"] = b["failed_metric"]
    return found


__all__ = ["Comparison", "PairResult", "cell_label", "cell_labels", "compare_sweeps", "config_key"]
