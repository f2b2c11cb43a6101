"""The GPU telemetry of cells (farm.telemetry's `measurements` columns) as the Cell and Compare
pages show it, computed without Streamlit. Rows written before telemetry existed have every one of
these columns null (the snapshot's tables have the current schema): they show nothing of it."""

from __future__ import annotations

from typing import Any

import pandas as pd

from farm.dashboard.data import number
from farm.telemetry import CPU_CELL


def _known(value: Any) -> bool:
    return value is not None and not (isinstance(value, float) and pd.isna(value)) and value is not pd.NA


def has_telemetry(cell: pd.Series) -> bool:
    """Whether the cell has any telemetry figure (the note alone does not count)."""
    return any(_known(cell.get(c)) for c in ("energy_j", "power_mean_w", "sm_clock_median_mhz", "telemetry_samples"))


def throttle_warning(cell: pd.Series) -> str | None:
    """What a throttled cell must say: its GPU's clocks were slowed while it was timed."""
    if not _known(cell.get("throttled")) or not bool(cell.get("throttled")):
        return None
    share = cell.get("throttled_percent")
    how_often = f" in {share:.0f} % of the samples" if _known(share) else ""
    return (f"**Throttled**: the GPU's clocks were slowed during the timed window ({cell.get('throttle_reasons')}"
            f"{how_often}). The figures are those of a slowed GPU; `stable` does not account for it.")


def telemetry_metrics(cell: pd.Series) -> list[tuple[str, str, str]]:
    """(label, value, help) of the Cell page's telemetry figures."""
    def clock(kind: str) -> str:  # short, as the power's: "1980 (min 1755)" was cut to "1980 (min 1…"
        median, low = cell.get(f"{kind}_clock_median_mhz"), cell.get(f"{kind}_clock_min_mhz")
        return f"{number(median)} / {number(low)}" if _known(median) else "–"

    limit = cell.get("power_limit_w")
    return [
        ("Energy / inference (mJ)", number(cell.get("energy_per_query_mj")),
         "board energy over the timed window ÷ inferences (NVML's total-energy counter)"),
        ("Energy / sample (mJ)", number(cell.get("energy_per_sample_mj")), "energy per inference ÷ batch"),
        ("Power mean / max (W)", f"{number(cell.get('power_mean_w'))} / {number(cell.get('power_max_w'))}",
         f"power limit {number(limit)} W" if _known(limit) else "power limit unknown"),
        ("SM clock median / min (MHz)", clock("sm"), "median of the samples, and the lowest"),
        ("Memory clock median / min (MHz)", clock("mem"), "median of the samples, and the lowest"),
        ("Temperature max (°C)", number(cell.get("temperature_max_c")), "highest sampled GPU temperature"),
        ("GPU utilization (%)", number(cell.get("gpu_util_mean_percent"), 3),
         "mean of NVML's utilization: the share of time a kernel ran, not how full the SMs were"),
    ]


def telemetry_caption(cell: pd.Series) -> str | None:
    """How the figures were taken (samples over how long), and the note where one was left."""
    parts = []
    if _known(cell.get("telemetry_samples")) and _known(cell.get("telemetry_window_ms")):
        parts.append(f"{int(cell['telemetry_samples'])} samples over the {cell['telemetry_window_ms'] / 1e3:.3g} s "
                     "timed window (the counted repeats only).")
    if _known(cell.get("telemetry_note")) and cell["telemetry_note"] != CPU_CELL:  # CPU cells: nothing to say
        parts.append(f"Note: {cell['telemetry_note']}.")
    return " ".join(parts) or None


def energy_frame(cells: pd.DataFrame) -> pd.DataFrame:
    """The cells that have an energy figure, with `throttled` as text for the legend."""
    if "energy_per_query_mj" not in cells:
        return cells.iloc[0:0]
    rows = cells[cells.energy_per_query_mj.notna()].copy()
    rows["clocks"] = ["throttled" if _known(t) and bool(t) else "not throttled" for t in rows.throttled]
    return rows
