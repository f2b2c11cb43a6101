"""Pieces every dashboard page uses: the warehouse snapshot, the empty-warehouse message,
downloads and number formats."""

from __future__ import annotations

import io
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import streamlit as st

from farm.dashboard import RESULTS_ENV
from farm.dashboard.data import Snapshot, compare_frame, fingerprint, series_labels
from farm.dashboard.summary import default_baseline, listed_backends, summary, summary_text
from farm.layers.memory import format_bytes
from farm.text import markdown_text


@st.cache_data(max_entries=32, show_spinner="Comparing…")
def _compared(root: str, stamp: tuple, sweeps: tuple, filters: tuple, stable_only: bool, baseline: str | None,
              throughput: str) -> pd.DataFrame:
    return compare_frame(_load(root, stamp), list(sweeps), dict(filters), stable_only, baseline, throughput)


def compared_cells(snap: Snapshot, sweeps: list[str], filters: dict[str, list], stable_only: bool,
                   baseline: str | None, throughput: str) -> pd.DataFrame:
    """`farm.dashboard.data.compare_frame`, once per warehouse state and choice of the Compare page."""
    root = results_root()
    key = tuple((column, tuple(values)) for column, values in filters.items())
    return _compared(str(root), fingerprint(root), tuple(sweeps), key, stable_only, baseline, throughput)


@st.cache_resource(max_entries=8, show_spinner=False)
def _sweep_cells(root: str, stamp: tuple, sweep: str) -> tuple[pd.DataFrame, list[str], str | None]:
    """A sweep's cells with their series (shared: never changed in place), its measured series
    and the default baseline."""
    snap = _load(root, stamp)
    frame = snap.cell_frame[snap.cell_frame.sweep_id == sweep]
    frame = frame.assign(series=series_labels(frame))
    measured = frame[(frame.status == "ok") & frame.throughput_qps.notna()]
    return frame, sorted(measured.series.unique()), default_baseline(frame, listed_backends(snap, [sweep]))


@st.cache_data(max_entries=64, show_spinner=False)
def _summary(root: str, stamp: tuple, sweep: str, baseline: str | None) -> pd.DataFrame:
    frame, series, default = _sweep_cells(root, stamp, sweep)
    return summary_text(summary(_load(root, stamp), frame, baseline if baseline in series else default))


def summary_choices(snap: Snapshot, sweep: str) -> tuple[list[str], str | None]:
    """The sweep's measured series (what a baseline can be) and the default baseline."""
    root = results_root()
    return _sweep_cells(str(root), fingerprint(root), sweep)[1:]


def summary_of(snap: Snapshot, sweep: str, baseline: str | None) -> pd.DataFrame:
    """`summary_text` of the sweep's summary against `baseline` (the default one where it is not
    a series of the sweep), once per warehouse state."""
    root = results_root()
    return _summary(str(root), fingerprint(root), sweep, baseline)


def latest_sweep(cells: pd.DataFrame) -> str:
    """The sweep whose cell finished last: what the pages open on."""
    return cells.sort_values("finished_at", na_position="first").sweep_id.iloc[-1]


md = markdown_text  # the dashboard's name for it: every page escapes the data's text with it


def text_table(frame: pd.DataFrame) -> None:
    """`st.table` (every figure in full, nothing to scroll, its text in the page) of `frame` with
    each text cell escaped (`md`): st.table reads cells as Markdown, and they hold the user's names."""
    st.table(frame.map(lambda value: md(value) if isinstance(value, str) else value).rename(index=md))


def results_root() -> Path:
    return Path(os.environ.get(RESULTS_ENV, "results")).resolve()


@st.cache_resource(max_entries=4, show_spinner="Loading the warehouse…")
def _load(root: str, stamp: tuple) -> Snapshot:
    return Snapshot(root)


def snapshot() -> Snapshot:
    """The warehouse as it is now; reloaded only when a cell was written since the last load."""
    root = results_root()
    return _load(str(root), fingerprint(root))


def snapshot_or_stop() -> Snapshot:
    """The snapshot, or a message saying what to run when there is nothing to show yet."""
    root = results_root()
    snap = snapshot()
    if snap.empty:
        where = "is empty" if root.is_dir() else "does not exist"
        st.info(
            f"**No results yet.** The warehouse `{root}` {where}.\n\n"
            "Run a sweep, then reload this page:\n\n"
            "```\nbin/farm sweep configs/resnet.toml\n```\n\n"
            "or point the dashboard at another warehouse: `farm dashboard --results DIR` "
            "(the GPU example shipped with farm: `farm dashboard --results examples/results`)."
        )
        st.stop()
    if snap.damaged:  # left out of every page; the rest of the warehouse is shown as usual
        listed = "\n".join(f"- `{path}`: {why}" for path, why in sorted(snap.damaged.items())[:10])
        more = f"\n- … and {len(snap.damaged) - 10} more" if len(snap.damaged) > 10 else ""
        st.warning(f"**{len(snap.damaged)} damaged file(s) left out** (their cells are missing here; "
                   f"`farm check --fix` moves them aside and the next `farm sweep` measures those cells "
                   f"again):\n{listed}{more}")
    return snap


def downloads(frame: pd.DataFrame | Callable[[], pd.DataFrame], name: str, key: str) -> None:
    """CSV and Parquet buttons for a table (or for a function that makes one); the files are made
    only when a button is clicked."""
    get = frame if callable(frame) else (lambda: frame)
    left, right, _ = st.columns([1, 1, 6])
    left.download_button("CSV", data=lambda: get().to_csv(index=False), file_name=f"{name}.csv", mime="text/csv",
                         key=f"{key}-csv", on_click="ignore")
    right.download_button("Parquet", data=lambda: _parquet(get()), file_name=f"{name}.parquet",
                          mime="application/vnd.apache.parquet", key=f"{key}-parquet", on_click="ignore")


def _parquet(frame: pd.DataFrame) -> bytes:
    buffer = io.BytesIO()
    frame.to_parquet(buffer, index=False)
    return buffer.getvalue()


def human_bytes(value: Any) -> str:
    return "–" if value is None or pd.isna(value) else format_bytes(float(value))


def cell_picker(snap: Snapshot, label: str, key: str, default: str | None = None,
                only_ok: bool = False) -> str | None:
    """Pick a cell by sweep then label; the query parameter `key` preselects (and records) it,
    so a page of one cell can be linked to."""
    frame = snap.cell_frame if not only_ok else snap.cell_frame[snap.cell_frame.status == "ok"]
    if frame.empty:
        return None
    wanted = st.query_params.get(key) or default
    if wanted:
        match = frame[frame.cell_id.str.startswith(wanted)]
        wanted = match.cell_id.iloc[0] if len(match) else None
    sweeps = sorted(frame.sweep_id.unique())
    sweep_default = frame.loc[frame.cell_id == wanted, "sweep_id"].iloc[0] if wanted else sweeps[0]
    sweep = st.selectbox(f"{label}: sweep", sweeps, index=sweeps.index(sweep_default), key=f"{key}-sweep")
    rows = frame[frame.sweep_id == sweep]
    ids = rows.cell_id.tolist()
    labels = dict(zip(rows.cell_id, rows.label + rows.status.map(lambda s: "" if s == "ok" else f" ({s})")))
    index = ids.index(wanted) if wanted in ids else 0
    cell_id = st.selectbox(label, ids, index=index, format_func=labels.get, key=f"{key}-cell")
    if st.query_params.get(key) != cell_id:
        st.query_params[key] = cell_id
    return cell_id


SAME_PRECISION = "the same in both"  # the Regressions page's precisions choice of two runs compared


def precision_choices(precisions: list[str]) -> list[str]:
    """SAME_PRECISION, then each ordered pair of the warehouse's precisions ('fp32 → fp16'), in the
    sweep file's order of precisions (the reference, fp32, first): what the Regressions page offers
    (farm compare --precisions)."""
    import typing

    from farm.config.schema import Precision

    known = typing.get_args(Precision)
    order = sorted(set(precisions), key=lambda p: (known.index(p) if p in known else len(known), p))
    return [SAME_PRECISION] + [f"{a} → {b}" for a in order for b in order if a != b]
