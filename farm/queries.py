"""Every SQL query that more than one reader runs, written once, and the one definition of speedup.

Readers: `farm sweep`'s end-of-sweep summary (farm.sweep), `farm show` and `farm ls` (farm.cli),
the dashboard and `farm report` (farm.dashboard). The SQL runs on the warehouse's DuckDB views
(`Warehouse.connect`) and on the dashboard's in-memory copy alike: both have one table per
warehouse table, of the same names and columns.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable
from typing import Any

from farm.serving.search import run_to_run

# One row per cell that has accuracy rows: `verdict` 'fail' when an output failed, else 'unjudged'
# when an output could not be judged (farm.accuracy: a degenerate reference, a check that could
# not run), else 'pass'; `failed_metric`: the first, by name, of the failing (else unjudged)
# outputs' worst metrics; and the worst figures.
CELL_VERDICTS = """cell_verdicts AS (
    SELECT cell_id,
           CASE WHEN bool_or(verdict = 'fail') THEN 'fail' WHEN bool_and(verdict = 'pass') THEN 'pass'
                ELSE 'unjudged' END AS verdict,
           coalesce(min(worst_metric) FILTER (verdict = 'fail'),
                    min(worst_metric) FILTER (verdict <> 'pass')) AS failed_metric,
           min(cosine_similarity) AS cosine_similarity, max(max_abs_error) AS max_abs_error,
           min(top1_agreement) AS top1_agreement
    FROM accuracy GROUP BY cell_id)"""

# The verdict as the tables print it: 'pass', 'fail: <metric>', 'unjudged: <why>', or NULL
# (accuracy not checked).
VERDICT_TEXT = "CASE WHEN v.verdict = 'pass' THEN 'pass' ELSE v.verdict || ': ' || v.failed_metric END"

# One row per cell with its figures: cells c, measurements m, builds b, cell_verdicts v, devices d
# (each at most one row per cell, so the join never repeats a cell).
CELLS_WITH_FIGURES = """cells c
LEFT JOIN measurements m USING (cell_id)
LEFT JOIN builds b USING (cell_id)
LEFT JOIN cell_verdicts v USING (cell_id)
LEFT JOIN devices d USING (device_id)"""


# Every ok cell with a median latency, with what makes it a configuration (farm.compare.match's key)
# and its device, oldest measurement first: the runs of each configuration across the sweeps
# (farm history's series, farm compare's between-run spread). Parameters: every sweep?, the sweeps
# wanted; every model?, the models wanted.
CONFIGURATION_RUNS_SQL = """SELECT c.sweep_id, c.cell_id, c.model, c.precision, c.batch, c.profile, c.backend,
       CAST(c.options AS VARCHAR) AS options, c.finished_at, m.latency_median_ms, m.median_ci_low_ms,
       m.median_ci_high_ms, m.stable, d.kind AS device_kind, d.name AS device_name, {contended} AS contended,
       {taken} AS cpu_taken_percent
FROM cells c JOIN measurements m USING (cell_id) LEFT JOIN devices d USING (device_id)
WHERE c.status = 'ok' AND m.latency_median_ms > 0 AND (? OR list_contains(?, c.sweep_id))
  AND (? OR list_contains(?, c.model))
ORDER BY c.finished_at, c.sweep_id"""


def configuration_runs_sql(measurement_columns: Iterable[str]) -> str:
    """CONFIGURATION_RUNS_SQL with `contended`: whether the cell was timed while other programs used
    CONTENDED_PERCENT of the CPU time or more (or the hypervisor gave CONTENDED_STEAL_PERCENT to
    other guests); NULL where the warehouse's files are older than those columns."""
    columns = set(measurement_columns)
    known = {"cpu_others_percent", "cpu_steal_percent"} <= columns
    contended = (f"coalesce(m.cpu_others_percent >= {CONTENDED_PERCENT} OR m.cpu_steal_percent >= "
                 f"{CONTENDED_STEAL_PERCENT}, false)" if known else "CAST(NULL AS BOOLEAN)")
    # the share of the CPU time others took, the hypervisor's steal with them (farm compare's rule)
    taken = "m.cpu_others_percent + coalesce(m.cpu_steal_percent, 0)" if known else "CAST(NULL AS DOUBLE)"
    return CONFIGURATION_RUNS_SQL.format(contended=contended, taken=taken)

def cells_with_figures(select: str, where: str = "", order_by: str = "") -> str:
    """`SELECT select FROM` every cell with its figures (`CELLS_WITH_FIGURES`: aliases c, m, b, v,
    d), optionally filtered and ordered: the query behind `farm show`, the end-of-sweep summary
    and the dashboard's cell table."""
    sql = f"WITH {CELL_VERDICTS}\nSELECT {select}\nFROM {CELLS_WITH_FIGURES}"
    if where:
        sql += f"\nWHERE {where}"
    if order_by:
        sql += f"\nORDER BY {order_by}"
    return sql


# sweep_cells' columns: what `farm show` and the end-of-sweep table print of each cell
SWEEP_CELL_COLUMNS = ("cell_id", "model", "precision", "batch", "profile", "backend", "status", "qps", "samples_per_s",
                      "p50", "p99", "p99_tail", "cv", "spread", "stable", "throttled", "accuracy", "build_s",
                      "coverage", "note", "options", "run_id", "low", "high", "scenario")


def sweep_cells(warehouse: Any, con: Any, sweep: str, cell_ids: list[str] | None = None,
                throttled_note: bool = False) -> list[dict[str, Any]]:
    """Each cell of `sweep` (only `cell_ids`, where given) with its figures, as a dict of
    SWEEP_CELL_COLUMNS, in one order (model, backend, precision, batch, profile, options): the one
    query behind `farm show` and the end-of-sweep table. `note` is a list of the cell's notes
    (`cell_notes`; THROTTLED_NOTE among them with `throttled_note`, else `throttled` says it);
    `p99_tail` the queries above p99, "(few)" under farm.measure.MIN_TAIL_SAMPLES; `coverage` the
    layers' share of compute, "(partial)" under farm.layers.coverage.COVERAGE_WARN_PERCENT; `low`
    and `high` the median's interval. A warehouse written before a column existed reads NULL there."""
    from farm.layers.coverage import COVERAGE_WARN_PERCENT
    from farm.measure import MIN_TAIL_SAMPLES

    measured = {d[0] for d in con.execute("SELECT * FROM measurements LIMIT 0").description}
    scenario = cells_column(con, "scenario")  # NULL (offline) in a warehouse from before scenarios
    built = {d[0] for d in con.execute("SELECT * FROM builds LIMIT 0").description}
    tail = "m.latency_p99_tail_samples" if "latency_p99_tail_samples" in measured else "CAST(NULL AS BIGINT)"
    coverage = "m.layer_coverage_percent" if "layer_coverage_percent" in measured else "CAST(NULL AS DOUBLE)"
    notes = f"[{', '.join(cell_notes(measured, built, throttled=throttled_note))}]"  # each footnoted once: [1,3]
    _, rows = warehouse.fetch(con, cells_with_figures(
        f"""c.cell_id, c.model, c.precision, c.batch, c.profile, c.backend, c.status,
            m.throughput_qps, m.throughput_samples_per_s, m.latency_median_ms, m.latency_p99_ms,
            CASE WHEN {tail} < $few THEN {tail} || ' (few)' ELSE CAST({tail} AS VARCHAR) END,
            m.latency_cv_percent, m.repeat_spread_percent, m.stable, {throttled_sql(THROTTLED_TEXT, measured)},
            {VERDICT_TEXT}, b.build_s,
            CASE WHEN {coverage} < $partial THEN TRY_CAST(round({coverage}) AS BIGINT) || ' (partial)'
                 ELSE CAST(TRY_CAST(round({coverage}) AS BIGINT) AS VARCHAR) END,
            {notes}, CAST(c.options AS VARCHAR), c.run_id, m.median_ci_low_ms, m.median_ci_high_ms, {scenario}""",
        where="c.sweep_id = $sweep AND ($every OR list_contains($ids, c.cell_id))",
        order_by="c.model, c.backend, c.precision, c.batch, c.profile, c.options, c.cell_id"),  # ties: in one order
        {"few": MIN_TAIL_SAMPLES, "partial": COVERAGE_WARN_PERCENT, "sweep": sweep, "every": cell_ids is None,
         "ids": cell_ids or []})
    return [dict(zip(SWEEP_CELL_COLUMNS, row)) for row in rows]


# The columns the dashboard's comparisons need (farm.dashboard.data.Snapshot.cell_frame).
CELL_FRAME_SQL = cells_with_figures("""
       c.cell_id, c.sweep_id, c.model, c.precision, c.batch, c.profile, c.backend, c.options, c.status,
       c.reason, c.notes, c.device_id, d.name AS device, c.host, c.finished_at,
       m.throughput_qps, m.throughput_samples_per_s, m.latency_median_ms, m.latency_p90_ms, m.latency_p95_ms,
       m.latency_p99_ms, m.latency_mean_ms, m.latency_cv_percent, m.median_ci_low_ms, m.median_ci_high_ms,
       m.median_ci_method, m.latency_p99_tail_samples, m.repeat_spread_percent, m.stable, m.queries, m.h2d_mean_ms,
       m.compute_mean_ms, m.d2h_mean_ms, m.peak_memory_bytes, m.latency_includes_transfers, m.timing_cuda_graph,
       m.timing_spin_wait, m.timing_streams, m.timing_engine_version, b.build_s, v.verdict, v.failed_metric,
       v.cosine_similarity, v.max_abs_error, v.top1_agreement, m.energy_j, m.energy_per_query_mj,
       m.energy_per_sample_mj, m.power_mean_w, m.power_max_w, m.power_limit_w, m.sm_clock_min_mhz,
       m.sm_clock_median_mhz, m.mem_clock_min_mhz, m.mem_clock_median_mhz, m.temperature_max_c,
       m.gpu_util_mean_percent, m.throttle_reasons, m.throttled, m.throttled_percent, m.telemetry_samples,
       m.telemetry_window_ms, m.telemetry_note""")

# Whether the GPU's clocks were slowed during a cell's timed window (farm.telemetry), in words:
# 'yes: sw_power_cap, ...', 'no', or NULL (no telemetry): `farm show`'s column; THROTTLED_NOTE: the
# end-of-sweep summary's note of a throttled cell.
THROTTLED_TEXT = "CASE WHEN m.throttled THEN 'yes: ' || coalesce(m.throttle_reasons, '?') WHEN NOT m.throttled THEN 'no' END"
THROTTLED_NOTE = ("CASE WHEN m.throttled THEN 'GPU clocks slowed during the timed window: ' "
                  "|| coalesce(m.throttle_reasons, '?') END")


# A device cell whose GPU waited on the host: its launches took about as long as the GPU's work
# (enqueue at least this share of compute; a GPU-bound query enqueues in a fraction of it). Its
# figure is the CPU's speed, which moves with what the machine's other CPUs do, whoever measures it
# (docs/gpu-figures.md, "Host-bound cells"): an unstable one says so rather than look like a result.
HOST_BOUND_SHARE = 0.8
HOST_BOUND_NOTE = (f"CASE WHEN NOT m.stable AND m.enqueue_median_ms >= {HOST_BOUND_SHARE} * m.compute_median_ms "
                   "THEN 'host-bound: the GPU waited on the host''s launches, so the figure moves with the "
                   "machine''s CPUs (stable: how far its repeats moved); CUDA graphs take the host out of "
                   "the query' END")


def host_bound(enqueue_ms: float | None, compute_ms: float | None, share: float = HOST_BOUND_SHARE) -> bool:
    """Whether a device cell's GPU waited on the host's launches: enqueue at least `share` of compute
    (HOST_BOUND_SHARE, HOST_BOUND_NOTE's rule); False where either figure is missing."""
    if enqueue_ms is None or compute_ms is None or not (math.isfinite(enqueue_ms) and math.isfinite(compute_ms)):
        return False
    return compute_ms > 0 and enqueue_ms >= share * compute_ms


# An unstable cell whose host changed speed between its repeats: the fixed CPU loop timed before
# each (farm.measure.host_probe_ms) moved at least this much, so the repeats disagree because the
# machine did, not the engine.
HOST_MOVED_PERCENT = 15
HOST_MOVED_NOTE = (f"CASE WHEN NOT m.stable AND m.host_probe_spread_percent >= {HOST_MOVED_PERCENT} "
                   f"THEN 'the host''s own speed moved {HOST_MOVED_PERCENT} % or more between its repeats (a fixed "
                   "CPU loop timed before each: host_probe_spread_percent); the figure carries the machine''s "
                   "change' END")


# An unstable cell timed while other programs used this share of the machine's CPU time or more
# (farm.cpus.host_contention: cpu_others_percent), or while the hypervisor gave CONTENDED_STEAL_PERCENT
# of it to other guests: its figure carries the contention. The same words for every such cell.
CONTENDED_PERCENT = 25
CONTENDED_STEAL_PERCENT = 10
CONTENDED_NOTE = (f"CASE WHEN NOT m.stable AND (m.cpu_others_percent >= {CONTENDED_PERCENT} "
                  f"OR m.cpu_steal_percent >= {CONTENDED_STEAL_PERCENT}) "
                  "THEN 'timed while other programs (or other virtual machines) used a quarter or more of the "
                  "host''s CPU time: the figure carries that contention (cpu_others_percent, cpu_steal_percent); "
                  "measure it again on a quieter host' END")

# An unstable device cell that is GPU-bound (its launches take under HOST_BOUND_SHARE of the GPU's
# time), whose host kept its speed and whose repeats agree: its per-query CV alone made it
# unstable. Its single queries spread while the median it reports holds from repeat to repeat
# (on an H100, ONNX Runtime fp32 ResNet-50 batch 8: compute CV 0.7-23 % per repeat at steady
# clocks, telemetry on or off, repeats within 0.2-3.1 %: docs/gpu-figures.md). It says so, naming
# the columns of both figures (the same words for every such cell: a table prints them once),
# instead of a bare "no". No note where one repeat leaves nothing to agree.
GPU_SPREAD_NOTE = (f"CASE WHEN NOT m.stable AND m.enqueue_median_ms < {HOST_BOUND_SHARE} * m.compute_median_ms "
                   "AND m.latency_cv_percent > m.max_cv_percent "
                   "AND m.repeat_spread_percent <= m.max_repeat_spread_percent "
                   f"AND coalesce(m.host_probe_spread_percent, 0) < {HOST_MOVED_PERCENT} "
                   "THEN 'GPU-bound: single queries spread beyond max_cv_percent while the repeats'' medians "
                   "agree: the median holds, a single query''s time does not (cv % and repeats % in farm show "
                   "--wide)' END")


def unstable_notes(measurement_columns: Iterable[str]) -> list[str]:
    """Why an unstable cell is unstable: HOST_BOUND_NOTE, GPU_SPREAD_NOTE, HOST_MOVED_NOTE and CONTENDED_NOTE (SQL,
    each NULL where it does not apply), each left out where the warehouse's `measurements` view
    lacks its columns (files of an older farm)."""
    columns = set(measurement_columns)
    device = {"stable", "enqueue_median_ms", "compute_median_ms"}
    spread = device | {"repeat_spread_percent", "max_repeat_spread_percent", "latency_cv_percent", "max_cv_percent",
                       "host_probe_spread_percent"}
    contended = {"stable", "cpu_others_percent", "cpu_steal_percent"}
    return [note for note, needed in ((HOST_BOUND_NOTE, device), (GPU_SPREAD_NOTE, spread),
                                      (HOST_MOVED_NOTE, {"stable", "host_probe_spread_percent"}),
                                      (CONTENDED_NOTE, contended)) if needed <= columns]


def unstable_notes_sql(measurement_columns: Iterable[str]) -> str:
    """`unstable_notes` as one SQL text (joined by '; ', NULL where none applies)."""
    notes = unstable_notes(measurement_columns)
    return f"nullif(concat_ws('; ', {', '.join(notes)}), '')" if notes else "CAST(NULL AS VARCHAR)"


def cell_notes(measurement_columns: Iterable[str], build_columns: Iterable[str], throttled: bool = False) -> list[str]:
    """A cell's notes as separate SQL expressions (each NULL where it does not apply), in the order
    they are printed: why it was not measured, else its model's notes; THROTTLED_NOTE (with
    `throttled`); each of `unstable_notes`; the ONNX Runtime placement note; INTERPRETER_NOTE. A table prints each
    distinct one once below it (farm.display.footnoted: a cell marked [1,3]), where one text of
    them all would repeat the same sentences in many footnotes; CSV and JSON join them (`joined_notes`)."""
    measured, built = set(measurement_columns), set(build_columns)
    return ["coalesce(c.reason, c.notes)", *([throttled_sql(THROTTLED_NOTE, measured)] if throttled else []),
            *unstable_notes(measured), placement_note_sql(built), interpreter_note_sql(built)]


def joined_notes(notes: Iterable[str | None]) -> str | None:
    """A cell's notes (`cell_notes`' values) as one text, as CSV and JSON give it; None where none."""
    return "; ".join(n for n in notes if n) or None


# A PyTorch cell of an ONNX file runs farm's ONNX interpreter (farm.onnx_torch: the graph's ops one
# by one), not code written for PyTorch: its figure is the interpreter's (22x ONNX Runtime's latency on
# squeezenet), which a reader comparing engines must know. The build row names it.
INTERPRETER_NOTE = ("CASE WHEN c.backend = 'torch' AND b.transform_summary LIKE '%ONNX interpreter (farm.onnx_torch)%' "
                    "THEN 'PyTorch ran farm''s ONNX interpreter over the ONNX file, not PyTorch code of the model: the "
                    "figure is the interpreter''s (its ops one at a time); a module: or torchvision: source gives "
                    "PyTorch''s own (docs/models.md)' END")


def interpreter_note_sql(build_columns: Iterable[str]) -> str:
    """INTERPRETER_NOTE, or a NULL where the warehouse's `builds` view lacks transform_summary."""
    return INTERPRETER_NOTE if "transform_summary" in set(build_columns) else "CAST(NULL AS VARCHAR)"


def placement_note_sql(build_columns: Iterable[str]) -> str:
    """A device cell some of whose nodes ONNX Runtime ran on its CPU provider (builds.cpu_provider_*,
    farm.backends.onnxruntime.placement) says how many, which, and their time per run where the
    per-layer run measured it; NULL otherwise, and where the warehouse's `builds` view lacks the
    columns (files of an older farm)."""
    if not {"provider_nodes", "cpu_provider_nodes", "cpu_provider_ops", "cpu_provider_node_ms"} <= set(build_columns):
        return "CAST(NULL AS VARCHAR)"
    return ("CASE WHEN b.cpu_provider_nodes > 0 THEN b.cpu_provider_nodes || ' nodes ran on ONNX Runtime''s CPU "
            "provider (' || b.cpu_provider_ops || coalesce(', ' || round(b.cpu_provider_node_ms, 3) "
            "|| ' ms a run as profiled', '') "
            "|| '): their tensors cross to the host and back; ' || b.provider_nodes END")


def throttled_sql(expression: str, measurement_columns: Iterable[str]) -> str:
    """`expression` (THROTTLED_TEXT or THROTTLED_NOTE), or a NULL where the warehouse's
    `measurements` view has no `throttled` column (every file written before telemetry existed)."""
    return expression if "throttled" in set(measurement_columns) else "CAST(NULL AS VARCHAR)"


# Per sweep: its runs (how many, the last start) and its cells by status (`farm ls`, the Overview page).
SWEEP_RUNS = "runs AS (SELECT sweep_id, count(*) AS runs, max(started_at) AS last_run{extra} FROM sweeps GROUP BY sweep_id)"
STATUS_COUNTS = ("count(*) AS cells, count(*) FILTER (status = 'ok') AS ok, count(*) FILTER (status = 'failed') AS failed, "
                 "count(*) FILTER (status = 'skipped') AS skipped, count(*) FILTER (status = 'unsupported') AS unsupported")


def sweeps_with_counts(columns: str, run_columns: str = "") -> str:
    """`SELECT c.sweep_id AS sweep, columns` per sweep, over `cells c` joined to the `runs r` of
    `SWEEP_RUNS` (with `run_columns` added to it); `STATUS_COUNTS` is there to use in `columns`."""
    return (f"WITH {SWEEP_RUNS.format(extra=run_columns)}\nSELECT c.sweep_id AS sweep, {columns}\n"
            "FROM cells c LEFT JOIN runs r USING (sweep_id) GROUP BY c.sweep_id ORDER BY c.sweep_id")


# --- speedup ---------------------------------------------------------------------------------------

def baseline_positions(keys: Iterable[Hashable], is_baseline: Iterable[bool]) -> list[int | None]:
    """For each cell (in order), the position of its baseline: the first cell marked `is_baseline`
    whose key is the same (None: it has none). The key says what must match: model and batch for
    the dashboard; model, batch, profile, backend and options for the end-of-sweep summary."""
    keys = list(keys)
    first: dict[Hashable, int] = {}
    for position, (key, baseline) in enumerate(zip(keys, is_baseline)):
        if baseline and key not in first:
            first[key] = position
    return [first.get(key) for key in keys]


def speedup(throughput_qps: Any, baseline_throughput_qps: Any) -> float | None:
    """**Speedup**: a cell's throughput (queries/s) over its baseline cell's (docs/dashboard.md).
    None where either is missing or the baseline's is not positive."""
    if not _number(throughput_qps) or not _number(baseline_throughput_qps) or baseline_throughput_qps <= 0:
        return None
    return float(throughput_qps) / float(baseline_throughput_qps)


def _number(value: Any) -> bool:
    return value is not None and isinstance(value, (int, float)) and not math.isnan(value)


def cells_column(con: Any, column: str, sql_type: str = "VARCHAR") -> str:
    """`c.COLUMN` where the warehouse's cells have it, else NULL under its name (a warehouse written
    before the column existed)."""
    present = {d[0] for d in con.execute("SELECT * FROM cells LIMIT 0").description}
    return f"c.{column}" if column in present else f"CAST(NULL AS {sql_type}) AS {column}"


def with_scenario(options: dict[str, Any], scenario: str | None) -> dict[str, Any]:
    """A cell's options with its load (`cells.scenario`; None: offline) as one more, so that labels
    name it where a sweep's cells differ in it (option_labels)."""
    return {**options, "scenario": scenario or "offline"}


def option_labels(cells: list[tuple[str, dict[str, Any]]], short: bool = False,
                  precisions: list[Any] | None = None) -> list[str]:
    """Per (backend, options) pair, the backend plus the options that vary between that backend's
    pairs: 'torch mode=compile', 'onnxruntime device=cuda'. Only short scalar options name a cell;
    lists and tables (an ingested engine's file names, trtexec's settings) are left out. One
    rule for the end-of-sweep table, `farm show` and the dashboard's series. `short` (terminal
    tables): a text option by its value alone ('torch compile'), a true/false one as 'NAME' /
    'no-NAME', numbers as NAME=VALUE. With each pair's `precisions`, an option its precision does
    not read is not named (farm.plan.options_read: a bf16 cell has no int8 scheme)."""
    import json

    from farm.plan import options_read, with_later_defaults

    # cells stored before an option existed lack it: at its default, as the cells after
    precisions = precisions if precisions is not None else [None] * len(cells)
    scalars = [{k: v for k, v in options_read(backend, with_later_defaults(backend, options), precision).items()
                if isinstance(v, (str, int, float, bool)) and len(str(v)) <= 24}
               for (backend, options), precision in zip(cells, precisions)]
    names = [str(backend) for backend, _ in cells]  # str: a missing backend (NaN) groups with its kind
    varying: dict[str, list[str]] = {}
    for backend in dict.fromkeys(names):
        group = [o for name, o in zip(names, scalars) if name == backend]
        keys = sorted({k for o in group for k in o})
        varying[backend] = [k for k in keys if len({json.dumps(o.get(k), sort_keys=True) for o in group}) > 1]

    def shown(key: str, value: Any) -> str:
        if short and isinstance(value, bool):
            return key if value else f"no-{key}"
        if short and isinstance(value, str):
            return value
        return f"{key}={value if isinstance(value, str) else json.dumps(value, sort_keys=True)}"

    return [f"{name} {' '.join(shown(k, o[k]) for k in varying[name] if k in o)}".strip()
            for name, o in zip(names, scalars)]


SERVING_ANSWERS_SQL = """SELECT c.model, c.backend, CAST(c.options AS VARCHAR), c.precision, c.batch, s.max_delay_ms,
       s.slo_ms, s.target_qps, s.latency_p99_ms, s.duration_s
FROM serving s JOIN cells c USING (cell_id)
WHERE c.sweep_id = $sweep AND ($every OR list_contains($ids, c.cell_id)) AND s.chosen AND s.scenario = 'server'
      AND s.slo_ms IS NOT NULL AND c.status = 'ok'
ORDER BY c.model, s.slo_ms, s.target_qps DESC, c.cell_id"""


def serving_answers(warehouse: Any, con: Any, sweep: str, cell_ids: list[str] | None = None) -> list[str]:
    """Per model and p99 bound of a sweep's Server cells: the setup that served the highest rate under
    it (engine and its options, precision, max batch, batcher delay), with the runner-up and the
    margin, in words: `farm show` and the end-of-sweep summary print them."""
    import json

    _, rows = warehouse.fetch(con, SERVING_ANSWERS_SQL, {"sweep": sweep, "every": cell_ids is None, "ids": cell_ids or []})
    engines = option_labels([(r[1], json.loads(r[2] or "{}")) for r in rows], short=True)
    groups: dict[tuple, list[tuple]] = {}
    for row, engine in zip(rows, engines):
        groups.setdefault((row[0], row[6]), []).append((engine, *row[3:]))

    def setup(e: tuple) -> str:
        return f"{e[0]} at {e[1]}, max batch {e[2]}, delay {e[3]:g} ms"

    answers = []
    for (model, bound), found in groups.items():
        best = found[0]
        text = (f"{model}, p99 under {bound:g} ms: serve it on {setup(best)}: {best[5]:,.0f} queries/s "
                f"(p99 {best[6]:.3g} ms)")
        if len(found) > 1:
            second = found[1]
            fewer = 100 * (1 - second[5] / best[5])
            text += f"; runner-up {setup(second)}: {second[5]:,.0f}/s, {fewer:.1f} % fewer"
            shorter = None if None in (best[7], second[7]) else min(best[7], second[7])  # s, the shorter test
            apart = 100 * run_to_run(shorter)  # what separates two runs of one search with tests this long
            if fewer < apart:
                text += f" (two runs of one search have come up to {apart:g} % apart: not told apart)"
        answers.append(text)
    return answers
