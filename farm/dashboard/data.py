"""What the dashboard and the static report show, computed without Streamlit.

`Snapshot` loads the warehouse's small tables (one row per cell or fewer) into an in-memory
DuckDB once (through loader.py's consolidated copy), so every page queries memory rather than
ten thousand Parquet files; the big tables (`samples`, `layers`) are read per cell straight
from that cell's file. It writes nothing; a damaged file is skipped with a warning and listed
in `Snapshot.damaged`. The functions
below turn those rows into the comparisons: series labels, speedup over a baseline with a noise
test, the Pareto frontier, per-layer diffs.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from farm.dashboard.loader import SMALL_TABLES, create_table, load_sweep_table
from farm.measure import SAMPLE_INTERVAL_METHOD
from farm.warehouse import SCHEMAS, Warehouse

# A change in median latency counts ("faster"/"slower") only when the 95 % interval of the ratio of
# the two medians excludes 1 and the ratio itself is at least this far from 1: smaller changes are
# real for a large enough sample but too small to decide on (run-to-run and machine-to-machine
# differences are of this order). docs/dashboard.md defines "within noise" with it.
MIN_EFFECT_PERCENT = 2.0
Z_95 = 1.959963984540054  # standard normal 97.5 % quantile: a two-sided 95 % interval


# One row per cell with what every comparison needs; verdict is 'pass', 'fail' or null (no
# accuracy rows: not measured, or a backend that returns no outputs).
CELL_FRAME_SQL = """
WITH verdicts AS (
    SELECT cell_id,
           CASE WHEN bool_and(verdict = 'pass') THEN 'pass' ELSE 'fail' END AS verdict,
           min(worst_metric) FILTER (verdict = 'fail') AS failed_metric,
           min(cosine_similarity) AS cosine_similarity, max(max_abs_error) AS max_abs_error,
           min(top1_agreement) AS top1_agreement
    FROM accuracy GROUP BY cell_id)
SELECT c.cell_id, c.sweep_id, c.model, c.precision, c.batch, c.profile, c.backend, c.options, c.status,
       c.reason, c.notes, c.device_id, d.name AS device, c.host, c.finished_at,
       m.throughput_qps, m.throughput_samples_per_s, m.latency_median_ms, m.latency_p90_ms, m.latency_p95_ms,
       m.latency_p99_ms, m.latency_mean_ms, m.latency_cv_percent, m.median_ci_low_ms, m.median_ci_high_ms,
       m.median_ci_method, m.latency_p99_tail_samples, m.repeat_spread_percent, m.stable, m.queries, m.h2d_mean_ms, m.compute_mean_ms, m.d2h_mean_ms,
       m.peak_memory_bytes, m.latency_includes_transfers, m.timing_cuda_graph, m.timing_spin_wait,
       m.timing_streams, m.timing_engine_version, b.build_s, v.verdict, v.failed_metric, v.cosine_similarity, v.max_abs_error,
       v.top1_agreement
FROM cells c
LEFT JOIN measurements m USING (cell_id)
LEFT JOIN builds b USING (cell_id)
LEFT JOIN verdicts v USING (cell_id)
LEFT JOIN devices d USING (device_id)
"""


class Snapshot:
    """The warehouse as of one moment: small tables in memory, big ones read per cell."""

    def __init__(self, root: str | Path) -> None:
        import duckdb

        self.root = Path(root).resolve()
        self.warehouse = Warehouse(self.root)
        self.sweep_names = self.warehouse.sweeps()
        self.con = duckdb.connect(":memory:")
        self.files_read = 0  # cell files read (not found in the consolidated cache): for benchmarks
        for table in SMALL_TABLES:
            create_table(self.con, table, table)
            for sweep in self.sweep_names:
                self.files_read += load_sweep_table(self.con, self.warehouse, sweep, table, table)
        # one devices file per sweep that used the device
        self.con.execute("CREATE OR REPLACE TABLE devices AS SELECT DISTINCT ON (device_id) * FROM devices")
        self.cell_frame = self.query(CELL_FRAME_SQL + " ORDER BY c.sweep_id, c.model, c.backend, c.precision, c.batch")
        self.cell_frame["label"] = cell_labels(self.cell_frame)

    @property
    def empty(self) -> bool:
        return self.cell_frame.empty

    @property
    def damaged(self) -> dict[Path, str]:
        """Files left out because they are damaged (path: why); `farm check --fix` moves them aside."""
        return self.warehouse.skipped

    def query(self, sql: str, params: Any = None) -> pd.DataFrame:
        """Run SQL over the in-memory tables; safe from several Streamlit sessions at once."""
        with self.con.cursor() as cursor:
            return cursor.execute(sql, params).fetchdf()

    def cell(self, cell_id: str) -> pd.Series | None:
        rows = self.cell_frame[self.cell_frame.cell_id == cell_id]
        return None if rows.empty else rows.iloc[0]

    def median_intervals(self, cell_ids: Any) -> pd.DataFrame:
        """Per cell id: `noise_median_ms`, `noise_low_ms`, `noise_high_ms` (the median latency and its
        95 % interval computed from the cell's raw samples, farm.measure.median_confidence_interval)
        and `noise_source`: 'samples', or 'stored' where the cell has no samples (an ingested
        trtexec summary) and the measurements row's stored interval stands in. A row whose stored
        interval this farm already computed from the samples (`median_ci_method` =
        SAMPLE_INTERVAL_METHOD) is used as it is; the samples files of older rows are read, once
        per snapshot."""
        cache = self.__dict__.setdefault("_intervals", {})
        for cell_id in dict.fromkeys(cell_ids):
            if cell_id not in cache:
                cache[cell_id] = self._median_interval(cell_id)
        rows = [cache[c] for c in dict.fromkeys(cell_ids)]
        columns = ["cell_id", "noise_median_ms", "noise_low_ms", "noise_high_ms", "noise_source"]
        return pd.DataFrame(rows, columns=columns).set_index("cell_id")

    def _median_interval(self, cell_id: str) -> tuple:
        from farm.measure import median_confidence_interval

        cells = self.__dict__.get("_cells_by_id")
        if cells is None:
            cells = self.__dict__["_cells_by_id"] = self.cell_frame.drop_duplicates("cell_id").set_index("cell_id")
        if cell_id not in cells.index:
            return cell_id, None, None, None, None
        cell = cells.loc[cell_id]
        if (cell.median_ci_method == SAMPLE_INTERVAL_METHOD and pd.notna(cell.median_ci_low_ms)
                and pd.notna(cell.median_ci_high_ms)):
            # written by this farm from the same samples with the same function: no need to read them
            return cell_id, cell.latency_median_ms, cell.median_ci_low_ms, cell.median_ci_high_ms, "samples"
        samples = self._samples(str(cell.sweep_id), cell_id)
        if samples is not None:
            latency, repeat = samples
            low, high, _ = median_confidence_interval(latency, repeat)
            return cell_id, float(np.nanmedian(latency)), low, high, "samples"
        if pd.isna(cell.latency_median_ms):
            return cell_id, None, None, None, None
        return cell_id, cell.latency_median_ms, cell.median_ci_low_ms, cell.median_ci_high_ms, "stored"

    def _samples(self, sweep: str, cell_id: str) -> tuple[np.ndarray, np.ndarray] | None:
        """(latency_ms, repeat) of a cell's samples file, or None: no file, no finite latency, or a
        damaged file (then left out with a warning, as `cell_file` does). Only those two columns
        are read: a Compare page reads every cell's file."""
        import pyarrow.parquet as pq

        path = self.root / sweep / "samples" / f"{cell_id}.parquet"
        if not path.is_file() or path in self.warehouse.skipped:
            return None
        try:
            found = pq.read_table(path, columns=["latency_ms", "repeat"])
        except FileNotFoundError:  # removed since: a sweep is redoing the cell
            return None
        except Exception as exc:  # noqa: BLE001 - any reason a file cannot be read makes it damaged
            self.warehouse.skip(path, str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__)
            return None
        latency = found.column("latency_ms").to_numpy(zero_copy_only=False).astype(np.float64)
        repeat = found.column("repeat").fill_null(0).to_numpy(zero_copy_only=False)
        if not np.isfinite(latency).any():
            return None
        return latency, repeat

    def cell_file(self, cell_id: str, table: str) -> pd.DataFrame:
        """All rows of `table` for one cell, read from that cell's own file (empty if none)."""
        cell = self.cell(cell_id)
        path = self.root / str(cell.sweep_id) / table / f"{cell_id}.parquet" if cell is not None else None
        if path is None or not path.is_file() or path in self.warehouse.skipped:
            return SCHEMAS[table].empty_table().to_pandas()
        import pyarrow as pa
        import pyarrow.parquet as pq

        try:
            found = pq.read_table(path)
        except FileNotFoundError:  # removed since: a sweep is redoing the cell
            return SCHEMAS[table].empty_table().to_pandas()
        except Exception as exc:  # noqa: BLE001 - any reason a file cannot be read makes it damaged
            self.warehouse.skip(path, str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__)
            return SCHEMAS[table].empty_table().to_pandas()
        schema = SCHEMAS[table]
        # Files written by an older farm lack newer columns: they read as nulls, as in the SQL views.
        columns = [found.column(f.name).cast(f.type) if f.name in found.column_names
                   else pa.nulls(found.num_rows, f.type) for f in schema]
        return pa.table(columns, schema=schema).to_pandas()


def fingerprint(root: str | Path) -> tuple:
    """Changes whenever a cell is written (a rename into a `cells` folder changes its mtime):
    the dashboard reloads its snapshot when this changes and never otherwise."""
    root = Path(root)
    if not root.is_dir():
        return ("missing",)
    parts: list[Any] = [root.stat().st_mtime_ns]
    for entry in sorted(os.scandir(root), key=lambda e: e.name):
        if entry.is_dir() and not entry.name.startswith("."):
            for table in ("cells", "sweeps", "devices"):
                try:
                    parts.append((entry.name, table, os.stat(os.path.join(entry.path, table)).st_mtime_ns))
                except FileNotFoundError:
                    pass
    return tuple(parts)


def number(value: Any, digits: int = 4) -> str:
    """4 significant digits; thousands separated rather than in exponent form (22,873 not 2.287e+04)."""
    if value is None or pd.isna(value):
        return "–"
    if abs(value) >= 10 ** digits:
        return f"{value:,.0f}"
    return f"{value:.{digits}g}"


# --- labels --------------------------------------------------------------------------------------

def _options(text: Any) -> dict[str, Any]:
    try:
        return json.loads(text) if isinstance(text, str) else {}
    except ValueError:
        return {}


def variant_labels(frame: pd.DataFrame) -> pd.Series:
    """Backend plus the options that vary between its cells: 'torch mode=compile'. Only short
    scalar options name a series; lists and tables (an ingested engine's file names, trtexec's
    settings) stay on the Cell page."""
    options = frame["options"].map(_options).map(
        lambda o: {k: v for k, v in o.items() if isinstance(v, (str, int, float, bool)) and len(str(v)) <= 24})
    labels = pd.Series(index=frame.index, dtype=object)
    for backend, rows in frame.groupby("backend", dropna=False, sort=False):
        parsed = options[rows.index]
        keys = sorted({k for o in parsed for k in o})
        varying = [k for k in keys if len({json.dumps(o.get(k), sort_keys=True) for o in parsed}) > 1]
        for index, opts in parsed.items():
            extra = " ".join(f"{k}={_short(opts.get(k))}" for k in varying)
            labels[index] = f"{backend} {extra}".strip()
    return labels


def series_labels(frame: pd.DataFrame) -> pd.Series:
    """What one line of a chart stands for: precision · backend variant · profile, plus the
    device and the sweep where the warehouse holds more than one."""
    if frame.empty:
        return pd.Series(dtype=object)
    parts = [frame["precision"].astype(str), variant_labels(frame)]
    if frame["profile"].notna().any():
        parts.append(frame["profile"].fillna("no profile").astype(str))
    if frame["device"].nunique() > 1:  # cells that never reached a device do not count
        parts.append(frame["device"].fillna("?").astype(str))
    if frame["sweep_id"].nunique() > 1:
        parts.append(frame["sweep_id"].astype(str))
    label = parts[0]
    for part in parts[1:]:
        label = label + " · " + part
    return label


def cell_labels(frame: pd.DataFrame) -> pd.Series:
    """A cell as people name it: 'resnet50 · fp16 · b8 · onnxruntime · 3a2a8a8c'."""
    if frame.empty:
        return pd.Series(dtype=object)
    variant = variant_labels(frame)
    profile = frame["profile"].map(lambda p: f" · {p}" if isinstance(p, str) else "")
    batch = frame["batch"].map(lambda b: f"b{int(b)}" if pd.notna(b) else "b?")
    return (frame["model"].astype(str) + " · " + frame["precision"].astype(str) + " · " + batch + profile
            + " · " + variant + " · " + frame["cell_id"].str[:8])


def _short(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


# --- comparisons ---------------------------------------------------------------------------------

def with_noise_intervals(snap: Snapshot, frame: pd.DataFrame) -> pd.DataFrame:
    """`frame` with the `Snapshot.median_intervals` columns of its cells joined on."""
    if frame.empty:
        return frame.assign(noise_median_ms=pd.Series(dtype=float), noise_low_ms=pd.Series(dtype=float),
                            noise_high_ms=pd.Series(dtype=float), noise_source=pd.Series(dtype=object))
    intervals = snap.median_intervals(frame.cell_id)
    return frame.join(intervals, on="cell_id")


def median_ratio(median_a: Any, low_a: Any, high_a: Any, median_b: Any, low_b: Any, high_b: Any) -> tuple:
    """B's median latency over A's, and a 95 % interval for that ratio, from each median's own 95 %
    interval. Numbers or arrays.

    Each interval is read as a standard error on the log scale, se = (log high - log low) / (2 z),
    and the two combine as independent: log ratio +- z * sqrt(se_a^2 + se_b^2). The per-cell
    intervals are the order-statistic ones of farm.measure (distribution-free, widened for
    autocorrelated queries), so the test uses both cells' samples at the cost of one sort each, is
    deterministic, and needs no resampling: a Compare page over hundreds of cells stays quick.
    Testing the ratio (rather than whether the two intervals overlap) keeps its 95 % level; overlap
    is a test at about 99.5 %, and useless with wide intervals. A bound that is missing, not
    positive, or not around its median gives a NaN interval (the difference cannot be judged)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        arrays = [np.asarray(pd.to_numeric(pd.Series(np.atleast_1d(v), dtype=object), errors="coerce"),
                             dtype=np.float64) for v in (median_a, low_a, high_a, median_b, low_b, high_b)]
        ma, la, ha, mb, lb, hb = arrays
        valid = (la > 0) & (lb > 0) & (la <= ma) & (ma <= ha) & (lb <= mb) & (mb <= hb)
        se = np.sqrt(((np.log(ha) - np.log(la)) / (2 * Z_95)) ** 2 + ((np.log(hb) - np.log(lb)) / (2 * Z_95)) ** 2)
        log_ratio = np.log(mb) - np.log(ma)
        ratio = mb / ma
        low = np.where(valid, np.exp(log_ratio - Z_95 * se), np.nan)
        high = np.where(valid, np.exp(log_ratio + Z_95 * se), np.nan)
    if np.ndim(median_a) == 0 and np.ndim(median_b) == 0:
        return float(ratio[0]), float(low[0]), float(high[0])
    return ratio, low, high


def noise_verdict(ratio: Any, low: Any, high: Any, min_effect_percent: float = MIN_EFFECT_PERCENT) -> Any:
    """'faster' / 'slower' (B's latency against A's) when the ratio's interval excludes 1 and the
    ratio is at least `min_effect_percent` from 1; 'within noise' otherwise; 'not judged' where a
    cell has no usable interval (nothing says how noisy it was). Numbers or arrays (then an array
    of strings)."""
    ratio, low, high = (np.asarray(v, dtype=np.float64) for v in (ratio, low, high))
    effect = np.abs(ratio - 1) * 100 >= min_effect_percent
    verdict = np.where(effect & (high < 1) & (ratio < 1), "faster",
                       np.where(effect & (low > 1) & (ratio > 1), "slower",
                                np.where(np.isnan(low) | np.isnan(high), "not judged", "within noise")))
    return str(verdict) if verdict.ndim == 0 else verdict.astype(object)


def compare_samples(a: Any, b: Any, repeat_a: Any = None, repeat_b: Any = None) -> tuple[float, float, float, str]:
    """The ratio of medians (B over A), its 95 % interval and the verdict, from two sets of raw
    latencies (repeat numbers optional: one repeat)."""
    from farm.measure import median_confidence_interval

    figures = []
    for values, repeat in ((a, repeat_a), (b, repeat_b)):
        values = np.asarray(values, dtype=np.float64)
        repeat = np.zeros(len(values), dtype=np.int64) if repeat is None else np.asarray(repeat)
        low, high, _ = median_confidence_interval(values, repeat)
        figures += [float(np.nanmedian(values)), low, high]
    ratio, low, high = median_ratio(*figures)
    return ratio, low, high, noise_verdict(ratio, low, high)


def with_speedup(frame: pd.DataFrame, baseline_series: str | None) -> pd.DataFrame:
    """Add `speedup` (throughput over the baseline series' cell of the same model and batch),
    `latency_ratio` (median latency over the baseline's) with its 95 % interval
    `ratio_low`/`ratio_high` (`median_ratio`), and `vs_baseline`: 'baseline', or `noise_verdict`'s
    'faster', 'slower' or 'within noise'. The medians' intervals are the `noise_*` columns where the
    frame has them (`with_noise_intervals`: from the samples) and the stored `median_ci_*` ones
    otherwise; `noise_basis` says which: 'samples' when both cells' came from samples, else
    'stored' (their stored intervals may be the older, looser kind: see docs/warehouse.md).
    `timing_differs` says where the two latencies are not defined alike (`timing_difference`)."""
    out = frame.copy()
    out["speedup"] = float("nan")
    for column in ("latency_ratio", "ratio_low", "ratio_high"):
        out[column] = float("nan")
    out["vs_baseline"] = None
    out["noise_basis"] = None
    out["timing_differs"] = None
    if baseline_series is None or out.empty:
        return out
    if "noise_low_ms" in out:
        median, low, high, source = out.noise_median_ms, out.noise_low_ms, out.noise_high_ms, out.noise_source
    else:
        median, low, high = out.latency_median_ms, out.median_ci_low_ms, out.median_ci_high_ms
        source = pd.Series("stored", index=out.index, dtype=object)
    figures = pd.DataFrame({"model": out.model, "batch": out.batch, "cell_id": out.cell_id,
                            "throughput_qps": out.throughput_qps, "median": median, "low": low, "high": high,
                            "source": source})
    base = figures[(out.series == baseline_series) & (out.status == "ok")].drop_duplicates(["model", "batch"])
    merged = figures[["model", "batch"]].merge(base.add_prefix("base_"), left_on=["model", "batch"],
                                               right_on=["base_model", "base_batch"], how="left")
    merged.index = out.index
    comparable = (out.status == "ok") & merged.base_cell_id.notna() & (merged.base_throughput_qps > 0)
    out.loc[comparable, "speedup"] = out.throughput_qps[comparable] / merged.base_throughput_qps[comparable]
    ratio, low, high = median_ratio(merged.base_median, merged.base_low, merged.base_high, figures["median"],
                                    figures.low, figures.high)
    out["latency_ratio"], out["ratio_low"], out["ratio_high"] = ratio, low, high
    verdict = pd.Series(noise_verdict(ratio, low, high), index=out.index, dtype=object)
    verdict[out.cell_id == merged.base_cell_id] = "baseline"
    out["vs_baseline"] = verdict.where(comparable, None)
    basis = pd.Series(np.where((figures.source == "samples") & (merged.base_source == "samples"), "samples", "stored"),
                      index=out.index, dtype=object)
    out["noise_basis"] = basis.where(comparable, None)
    for column in ("latency_ratio", "ratio_low", "ratio_high"):
        out.loc[~comparable, column] = float("nan")
    out.loc[verdict == "baseline", ["ratio_low", "ratio_high"]] = float("nan")  # itself: nothing to test
    timing = [column for column, *_ in _TIMING if column in out]
    base_timing = out.drop_duplicates("cell_id").set_index("cell_id")[timing].to_dict("index")
    out["timing_differs"] = pd.Series(
        [timing_difference(row, base_timing[base]) if ok else None
         for row, base, ok in zip(out[timing].to_dict("records"), merged.base_cell_id, comparable)],
        index=out.index, dtype=object)
    return out


# What a latency includes (measurements' timing columns): (column, label, words for true/false/unknown).
_TIMING = (("latency_includes_transfers", "transfers", ("included", "not included")),
           ("timing_cuda_graph", "CUDA graph", ("on", "off")), ("timing_spin_wait", "spin-wait", ("on", "off")),
           ("timing_streams", "streams", None))


def timing_difference(row: dict[str, Any], base: dict[str, Any]) -> str | None:
    """'different timing: transfers not included vs included; ...' (this cell vs its baseline) where
    the two cells' timing definitions differ, one side unknown counting as different; None where
    they agree or neither says (`with_speedup`'s `timing_differs`, shown beside the verdict)."""
    parts = []
    for column, label, words in _TIMING:
        a, b = (None if r.get(column) is None or pd.isna(r[column]) else r[column] for r in (row, base))
        if a == b:
            continue
        if words is None:
            shown = ["unknown" if v is None else str(int(v)) for v in (a, b)]
        else:
            shown = ["unknown" if v is None else words[0] if bool(v) else words[1] for v in (a, b)]
        parts.append(f"{label} {shown[0]} vs {shown[1]}")
    return "different timing: " + "; ".join(parts) if parts else None


def intervals_overlap(low: Any, high: Any, other_low: Any, other_high: Any) -> Any:
    """Whether [low, high] and [other_low, other_high] overlap. Works on numbers and, element by
    element, on Series; a missing bound never overlaps (a comparison with NaN is False). No longer
    the noise test (that is `median_ratio` + `noise_verdict`)."""
    return (low <= other_high) & (other_low <= high)


def pareto_front(frame: pd.DataFrame, x: str = "latency_p99_ms", y: str = "throughput_samples_per_s") -> pd.Series:
    """True for the points no other point beats: none has lower-or-equal `x` and higher-or-equal
    `y`, one of them strictly. Computed per model (different models are not alternatives)."""
    front = pd.Series(False, index=frame.index)
    measured = frame.dropna(subset=[x, y])
    for _, rows in measured.groupby("model"):
        ordered = rows.sort_values([x, y], ascending=[True, False])[y]
        # Lower latency comes first: a point is kept only if it delivers more than all before it.
        best_before = ordered.cummax().shift(fill_value=float("-inf"))
        front[ordered.index[ordered > best_before]] = True
    return front


class LayersNotComparable(ValueError):
    """Two cells' layer rows are of different kinds (farm.layers.coverage): no sum or diff of them."""


def layer_kinds(layers: pd.DataFrame, backend: Any = None) -> pd.Series:
    """Each row's kind (`graph op`, `kernel`, `engine layer`); rows written before the `kind`
    column get theirs from the cell's backend (farm.layers.coverage.row_kind)."""
    from farm.layers.coverage import row_kind

    kinds = layers["kind"] if "kind" in layers else pd.Series(None, index=layers.index, dtype=object)
    types = layers["type"] if "type" in layers else pd.Series(None, index=layers.index, dtype=object)
    return pd.Series([row_kind(k, backend, t) for k, t in zip(kinds, types)], index=layers.index, dtype=object)


def layers_not_comparable(left: pd.DataFrame, right: pd.DataFrame, backend_a: Any = None,
                          backend_b: Any = None) -> str | None:
    """Why the two cells' layers cannot be summed against each other or diffed, or None."""
    from farm.layers.coverage import not_comparable

    return not_comparable(layer_kinds(left, backend_a), layer_kinds(right, backend_b))


def layer_diff(left: pd.DataFrame, right: pd.DataFrame, backend_a: Any = None, backend_b: Any = None) -> pd.DataFrame:
    """Per-layer rows of two cells matched by name with TensorRT's renamings undone (PWN(...),
    profile suffixes); repeated names match in execution order. Unmatched layers appear once with
    the other side empty, so the totals of both sides stay complete. Rows of different kinds
    (an eager cell's graph ops against a compiled cell's kernels) raise LayersNotComparable."""
    from farm.layers.engine import join_key

    reason = layers_not_comparable(left, right, backend_a, backend_b)
    if reason:
        raise LayersNotComparable(reason)

    def keyed(frame: pd.DataFrame) -> pd.DataFrame:
        frame = frame.sort_values("layer_index").copy()
        frame["key"] = frame["name"].map(join_key)
        frame["occurrence"] = frame.groupby("key").cumcount()
        return frame[["key", "occurrence", "name", "type", "time_avg_ms", "total_bytes", "layer_index"]]

    merged = keyed(left).merge(keyed(right), on=["key", "occurrence"], how="outer", suffixes=("_a", "_b"))
    merged["match"] = "both"
    merged.loc[merged.name_b.isna(), "match"] = "only A"
    merged.loc[merged.name_a.isna(), "match"] = "only B"
    merged["time_delta_ms"] = merged.time_avg_ms_b.fillna(0) - merged.time_avg_ms_a.fillna(0)
    merged["time_delta_percent"] = 100 * merged.time_delta_ms / merged.time_avg_ms_a.where(merged.time_avg_ms_a > 0)
    merged["bytes_delta"] = merged.total_bytes_b.astype("Float64") - merged.total_bytes_a.astype("Float64")
    order = merged.time_delta_ms.abs().sort_values(ascending=False).index
    columns = ["match", "name_a", "name_b", "type_a", "type_b", "time_avg_ms_a", "time_avg_ms_b", "time_delta_ms",
               "time_delta_percent", "total_bytes_a", "total_bytes_b", "bytes_delta"]
    return merged.loc[order, columns].reset_index(drop=True)


def layer_coverage(snap: Snapshot, cell_id: str, layers: pd.DataFrame) -> float | None:
    """The cell's `layer_coverage_percent` (Σ layer time ÷ compute time, in %); for rows written
    before the column existed, computed the same way from its layers and measurements rows."""
    from farm.layers.coverage import compute_ms, coverage_percent

    row = snap.query("SELECT layer_coverage_percent, compute_median_ms, latency_median_ms FROM measurements "
                     "WHERE cell_id = ?", [cell_id])
    if row.empty:
        return None
    stored = row.layer_coverage_percent.iloc[0]
    if pd.notna(stored):
        return float(stored)
    measurement = {k: (None if pd.isna(v) else float(v)) for k, v in row.iloc[0].items()}
    return coverage_percent(layers.time_avg_ms.dropna().tolist(), compute_ms(measurement))


def top_layers(layers: pd.DataFrame, by: str, n: int = 15) -> pd.DataFrame:
    columns = ["layer_index", "name", "type", "time_avg_ms", "time_share_percent", "input_bytes", "weight_bytes",
               "output_bytes", "total_bytes", "tactic"]
    return layers.dropna(subset=[by]).sort_values(by, ascending=False).head(n)[columns].reset_index(drop=True)


def graph_rows(layers: pd.DataFrame) -> list[dict[str, Any]]:
    """Layer rows in the shape farm.layers.graph draws (what `farm graph` reads from SQL)."""
    columns = ["layer_index", "name", "type", "output_dtypes", "time_share_percent", "time_avg_ms", "total_bytes",
               "input_tensors", "output_tensors"]
    ordered = layers.sort_values("layer_index")[columns].astype(object)
    return ordered.where(ordered.notna(), None).to_dict("records")
