"""History: each configuration across the warehouse's sweeps (`farm history` in the dashboard): its
median latency run by run with the 95 % interval, its change points (Apache Otava's) marked at the
run each starts, and the layers that explain each."""

import pandas as pd
import streamlit as st

from farm.dashboard.common import md, results_root, snapshot_or_stop
from farm.dashboard.data import fingerprint
from farm.errors import UserError
from farm.history import change_text, layer_text


@st.cache_resource(max_entries=8, show_spinner="Finding change points…")
def _history(root: str, stamp: tuple):
    """Every configuration's series, or the one-line reason there is none (stamp: the cache key)."""
    from farm.history import history

    try:
        return history(root)
    except UserError as exc:
        return str(exc)


snap = snapshot_or_stop()
st.title("History")
found = _history(str(results_root()), fingerprint(results_root()))
if isinstance(found, str):
    st.error(md(found))
    st.stop()
if not found:
    st.info("No configuration was measured in two sweeps or more. A history is the same sweep file run into "
            "sweeps of their own names: `farm sweep configs/resnet.toml --sweep nightly-2026-11-28`.")
    st.stop()
changed = [s for s in found if s.changes]
left, right = st.columns(2)
left.metric("Configurations in 2+ sweeps", len(found))
right.metric("With a change point", len(changed))
names = [f"{s.label} on {s.device}" for s in found]
chosen = st.selectbox("Configuration", range(len(found)), format_func=lambda i: names[i], key="hist-series",
                      help="Configurations with a change point come first.")
series = found[chosen]
frame = pd.DataFrame({"run": range(len(series.points)), "sweep": [p.sweep for p in series.points],
                      "median ms": [p.median_ms for p in series.points],
                      "low": [p.low_ms for p in series.points], "high": [p.high_ms for p in series.points],
                      "measured": [p.measured_at for p in series.points]})
starts = pd.DataFrame({"run": [c.index for c in series.changes], "change": [change_text(c) for c in series.changes]})
base = {"x": {"field": "run", "type": "quantitative", "title": "run (oldest first)", "axis": {"tickMinStep": 1}}}
layers = [
    {"mark": {"type": "errorbar"}, "encoding": {**base, "y": {"field": "low", "type": "quantitative",
                                                              "title": "median latency (ms)", "scale": {"zero": False}},
                                                "y2": {"field": "high"}}},
    {"mark": {"type": "line", "point": True},
     "encoding": {**base, "y": {"field": "median ms", "type": "quantitative"},
                  "tooltip": [{"field": "sweep"}, {"field": "median ms", "format": ".4g"}, {"field": "measured"}]}},
]
if not starts.empty:
    layers.append({"data": {"values": starts.to_dict("records")}, "mark": {"type": "rule", "color": "#d62728",
                                                                           "strokeDash": [4, 3]},
                   "encoding": {**base, "tooltip": [{"field": "change"}]}})
st.vega_lite_chart(frame, {"layer": layers}, use_container_width=True)
if not series.changes:
    st.caption(md(f"No change point in {len(series.points)} runs" if len(series.points) >= 6 else
                  f"{len(series.points)} runs: a change point needs 6 or more"))
for change in series.changes:
    st.markdown(md(f"{series.label}: {change_text(change)}"))
    lines = layer_text(change)
    if lines:
        st.markdown("\n".join(f"- {md(line)}" for line in lines))
st.dataframe(frame.drop(columns=["low", "high"]), hide_index=True)
st.caption("Change points: Apache Otava (E-Divisive means, t-test), kept at p < 0.001 and over a 3 % change; "
           "`farm history` prints the same (docs/results.md).")
