"""What the dashboard and the static report show, computed without Streamlit.

`Snapshot` loads the warehouse's small tables (one row per cell or fewer) into an in-memory
DuckDB once (through the warehouse's consolidated copy, farm.warehouse.consolidated), so every page queries memory rather than
ten thousand Parquet files; the big tables (`samples`, `layers`) are read per cell straight
from that cell's file. It writes nothing; a damaged file is skipped with a warning and listed
in `Snapshot.damaged`. The functions below turn those rows into the comparisons: series labels,
speedup over a baseline (farm.queries.speedup) with the noise test (noise.py), the Pareto
frontier; layers.py compares cells layer by layer.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from farm.compare.match import TIMING, timing_parts
from farm.compare.stats import ratio_interval, verdicts
from farm.measure import SAMPLE_INTERVAL_METHOD
from farm.queries import CELL_FRAME_SQL, baseline_positions, option_labels, speedup
from farm.warehouse import SCHEMAS, WarehouseReader
from farm.warehouse.consolidated import SMALL_TABLES, create_table, load_sweep_table


class Snapshot:
    """The warehouse as of one moment: small tables in memory, big ones read per cell."""

    def __init__(self, root: str | Path) -> None:
        import duckdb

        self.root = Path(root).resolve()
        self.warehouse = WarehouseReader(self.root)
        self.sweep_names = self.warehouse.sweeps()
        self.con = duckdb.connect(":memory:")
        self.files_read = 0  # cell files read (not found in the consolidated cache): for benchmarks
        for table in SMALL_TABLES:
            create_table(self.con, table, table)
            for sweep in self.sweep_names:
                self.files_read += load_sweep_table(self.con, self.warehouse, sweep, table, table)
        # one devices file per sweep that used the device
        self.con.execute("CREATE OR REPLACE TABLE devices AS SELECT DISTINCT ON (device_id) * FROM devices")
        # a total order (options and id break ties): pages and their defaults the same on every load
        self.cell_frame = self.query(CELL_FRAME_SQL + " ORDER BY c.sweep_id, c.model, c.backend, c.precision, "
                                                      "c.batch, c.options, c.cell_id")
        self.cell_frame["label"] = cell_labels(self.cell_frame)
        self._serving_loaded: set[str] = set()
        self._serving_lock = threading.Lock()

    def load_serving(self, sweeps: list[str]) -> None:
        """Bring these sweeps' `serving` rows (LoadGen tests) into memory beside the small tables, on
        first use: only the pages that show serving cells read that table's files."""
        with self._serving_lock:
            if not self._serving_loaded:
                create_table(self.con, "serving", "serving")
            for sweep in sorted(set(sweeps) - self._serving_loaded):
                self.files_read += load_sweep_table(self.con, self.warehouse, sweep, "serving", "serving")
                self._serving_loaded.add(sweep)

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
        wanted = list(dict.fromkeys(cell_ids))
        missing = [c for c in wanted if c not in cache]
        if missing:  # those this farm computed from the samples, at once (a Compare page asks for 25,000)
            known = self._by_id().reindex(missing)
            ready = ((known.median_ci_method == SAMPLE_INTERVAL_METHOD) & known.median_ci_low_ms.notna()
                     & known.median_ci_high_ms.notna()).to_numpy(dtype=bool)
            cache.update((c, (c, m, low, high, "samples")) for c, m, low, high in zip(
                known.index[ready], known.latency_median_ms[ready], known.median_ci_low_ms[ready],
                known.median_ci_high_ms[ready]))
            for cell_id in known.index[~ready]:
                cache[cell_id] = self._median_interval(cell_id)
        rows = [cache[c] for c in wanted]
        columns = ["cell_id", "noise_median_ms", "noise_low_ms", "noise_high_ms", "noise_source"]
        return pd.DataFrame(rows, columns=columns).set_index("cell_id")

    def _by_id(self) -> pd.DataFrame:
        cells = self.__dict__.get("_cells_by_id")
        if cells is None:
            cells = self.__dict__["_cells_by_id"] = self.cell_frame.drop_duplicates("cell_id").set_index("cell_id")
        return cells

    def _median_interval(self, cell_id: str) -> tuple:
        from farm.measure import median_confidence_interval

        cells = self._by_id()
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
        """(latency_ms, repeat) of a cell's samples (its own file or its compacted block), or None:
        none, no finite latency, or a damaged file (then left out with a warning, as `cell_file`
        does). Only those two columns are read: a Compare page reads every cell's."""
        found = self.warehouse.cell_rows(sweep, "samples", cell_id, ["latency_ms", "repeat"])
        if found is None or found.num_rows == 0:
            return None
        latency = found.column("latency_ms").to_numpy(zero_copy_only=False).astype(np.float64)
        repeat = found.column("repeat").fill_null(0).to_numpy(zero_copy_only=False)
        if not np.isfinite(latency).any():
            return None
        return latency, repeat

    def cell_file(self, cell_id: str, table: str) -> pd.DataFrame:
        """All rows of `table` for one cell, read from that cell's own file or its compacted block
        (empty if none)."""
        import pyarrow as pa

        cell = self.cell(cell_id)
        found = self.warehouse.cell_rows(str(cell.sweep_id), table, cell_id) if cell is not None else None
        if found is None:
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
    precision = frame["precision"] if "precision" in frame else [None] * len(frame)  # without it: every option
    keys = list(zip(frame["backend"].astype(str), frame["options"].where(frame["options"].notna(), None), precision))
    unique = list(dict.fromkeys(keys))  # a few distinct pairs among 100,000 cells: label each once
    labels = dict(zip(unique, option_labels([(b, _options(o)) for b, o, _ in unique],
                                            precisions=[p for _, _, p in unique])))  # farm.queries: one rule
    return pd.Series([labels[k] for k in keys], index=frame.index, dtype=object)


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


# --- comparisons ---------------------------------------------------------------------------------

def with_noise_intervals(snap: Snapshot, frame: pd.DataFrame) -> pd.DataFrame:
    """`frame` with the `Snapshot.median_intervals` columns of its cells joined on."""
    if frame.empty:
        return frame.assign(noise_median_ms=pd.Series(dtype=float), noise_low_ms=pd.Series(dtype=float),
                            noise_high_ms=pd.Series(dtype=float), noise_source=pd.Series(dtype=object))
    intervals = snap.median_intervals(frame.cell_id)
    return frame.join(intervals, on="cell_id")


def with_speedup(frame: pd.DataFrame, baseline_series: str | None) -> pd.DataFrame:
    """Add `speedup` (throughput over the baseline series' cell of the same model and batch),
    `latency_ratio` (median latency over the baseline's) with its 95 % interval
    `ratio_low`/`ratio_high`, and `vs_baseline`: 'baseline', or farm's verdict (farm.compare.stats:
    'faster', 'slower', 'within noise', 'inconclusive', 'not judged'). The medians' intervals are the
    `noise_*` columns where the frame has them (`with_noise_intervals`: from the samples) and the stored `median_ci_*` ones
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
    # the baseline of a cell: the baseline series' first ok cell of the same model and batch
    keys = zip(out.model.map(_key), out.batch.map(_key))
    positions = baseline_positions(keys, (out.series == baseline_series) & (out.status == "ok"))
    merged = figures.reset_index(drop=True).reindex([-1 if p is None else p for p in positions]).add_prefix("base_")
    merged.index = out.index
    speedups = pd.Series([speedup(qps, base) for qps, base in zip(out.throughput_qps, merged.base_throughput_qps)],
                         index=out.index, dtype=float)
    comparable = (out.status == "ok") & merged.base_cell_id.notna() & (merged.base_throughput_qps > 0)
    out.loc[comparable, "speedup"] = speedups[comparable]
    ratio, low, high = ratio_interval(merged.base_median, merged.base_low, merged.base_high, figures["median"],
                                      figures.low, figures.high)
    out["latency_ratio"], out["ratio_low"], out["ratio_high"] = ratio, low, high
    verdict = pd.Series(verdicts(low, high), index=out.index, dtype=object)
    verdict[out.cell_id == merged.base_cell_id] = "baseline"
    out["vs_baseline"] = verdict.where(comparable, None)
    basis = pd.Series(np.where((figures.source == "samples") & (merged.base_source == "samples"), "samples", "stored"),
                      index=out.index, dtype=object)
    out["noise_basis"] = basis.where(comparable, None)
    for column in ("latency_ratio", "ratio_low", "ratio_high"):
        out.loc[~comparable, column] = float("nan")
    out.loc[verdict == "baseline", ["ratio_low", "ratio_high"]] = float("nan")  # itself: nothing to test
    timing = [column for column, *_ in TIMING if column in out]
    if timing:  # worded only where the definitions differ (most often nowhere: 25,000 cells in no time)
        key = out[timing[0]].astype(str).fillna("?")
        for column in timing[1:]:
            key = key + "|" + out[column].astype(str).fillna("?")
        base_key = key.groupby(out.cell_id.to_numpy()).first().reindex(merged.base_cell_id.to_numpy())
        differs = comparable.to_numpy(dtype=bool) & (key.to_numpy() != base_key.to_numpy())
        base_timing = out.drop_duplicates("cell_id").set_index("cell_id")[timing]
        out.loc[differs, "timing_differs"] = [
            timing_difference(row, base_timing.loc[base].to_dict())
            for row, base in zip(out.loc[differs, timing].to_dict("records"), merged.base_cell_id[differs])]
    return out


def _key(value: Any) -> Any:
    """A key part that matches itself: NaN and None both as None."""
    return None if value is None or (isinstance(value, float) and np.isnan(value)) else value


# What a latency includes (measurements' timing columns): (column, label, words for true/false/unknown).
def timing_difference(row: dict[str, Any], base: dict[str, Any]) -> str | None:
    """'different timing: transfers not included vs included; ...' (this cell vs its baseline) where
    the two cells' timing definitions differ, one side unknown counting as different; None where
    they agree or neither says (`with_speedup`'s `timing_differs`, shown beside the verdict).
    farm.compare's rule, with pandas' missing values (pd.NA too) read as unknown."""
    def known(r: dict[str, Any]) -> dict[str, Any]:
        return {column: None if r.get(column) is None or pd.isna(r[column]) else r[column] for column, _, _ in TIMING}

    parts = timing_parts(known(row), known(base))
    return "different timing: " + "; ".join(parts) if parts else None


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




def filter_cells(frame: pd.DataFrame, filters: dict[str, list], stable_only: bool) -> pd.DataFrame:
    """The rows of `frame` each `filters` column keeps (one of its values; none given: all), stable
    ones only if asked: the Compare page's choice."""
    for column, values in filters.items():
        if values:
            frame = frame[frame[column].isin(values)]
    if stable_only:
        frame = frame[frame.stable.fillna(False).astype(bool)]
    return frame


def measured_only(frame: pd.DataFrame) -> pd.DataFrame:
    """The rows of cells that were measured: ok, with a throughput."""
    return frame[(frame.status == "ok") & frame.throughput_qps.notna()]


def compare_frame(snap: Snapshot, sweeps: list[str], filters: dict[str, list], stable_only: bool,
                  baseline: str | None, throughput: str) -> pd.DataFrame:
    """The Compare page's cells: the measured cells of `sweeps` (series named within them), kept
    where each `filters` column holds one of its values (none: all), with the medians' intervals,
    speedup over `baseline`, `pareto` (against p99 and `throughput`), `style` (the series without
    its precision: what a chart's dash and marker show), `batch_label`, `peak memory` in binary
    units; ordered by model, batch, then throughput, highest first."""
    from farm.layers.memory import format_bytes

    frame = snap.cell_frame[snap.cell_frame.sweep_id.isin(sweeps)]
    chosen = measured_only(filter_cells(frame.assign(series=series_labels(frame)), filters, stable_only))
    chosen = chosen.assign(accuracy=chosen.verdict.fillna("not checked"))
    compared = with_speedup(with_noise_intervals(snap, chosen), baseline)
    compared["pareto"] = pareto_front(compared, x="latency_p99_ms", y=throughput)
    compared["style"] = [s[len(p) + 3:] or p for s, p in zip(compared.series, compared.precision.astype(str))]
    compared["batch_label"] = compared.batch.map(lambda b: f"b{int(b)}" if pd.notna(b) else "b?")
    compared["peak memory"] = compared.peak_memory_bytes.map(lambda v: "–" if pd.isna(v) else format_bytes(v))
    compared["peak_memory_mib"] = compared.peak_memory_bytes / 2**20
    return compared.sort_values(["model", "batch", throughput], ascending=[True, True, False], kind="stable")
