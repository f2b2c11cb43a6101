"""Overview: the answer first (per model and batch, the fastest configuration that passes
accuracy and the fastest that fails), then sweeps, devices, cells by status, and every failure
with its reason."""

import streamlit as st

from farm.compare.stats import RULE_TEXT
from farm.dashboard.common import (
    downloads,
    human_bytes,
    latest_sweep,
    md,
    results_root,
    snapshot_or_stop,
    summary_choices,
    summary_of,
    text_table,
)
from farm.dashboard.serving import answers_of
from farm.queries import STATUS_COUNTS, sweeps_with_counts
from farm.warehouse import TABLES

snap = snapshot_or_stop()
cells = snap.cell_frame
st.title("Overview")
st.caption(f"Warehouse `{results_root()}`")

st.subheader("Fastest configuration per model and batch")
sweep_names = sorted(cells.sweep_id.unique())
left, middle, right = st.columns([2, 3, 2])
sweep = left.selectbox("Sweep", sweep_names, index=sweep_names.index(latest_sweep(cells)), key="ov-sweep")
series, default = summary_choices(snap, sweep)
baseline = middle.selectbox("Baseline for speedup", series, index=series.index(default) if default else 0,
                            key="ov-baseline", help="Speedup = throughput over this series' cell of the same "
                                                    "model and batch. Default: fp32 on the first backend the sweep "
                                                    "lists, eager mode where it has modes.") if series else None
answers = summary_of(snap, sweep, baseline)
batches = right.multiselect("Batch sizes", sorted(answers.batch.dropna().unique().tolist()), key="ov-batches")
if batches:
    answers = answers[answers.batch.isin(batches)]
if answers.empty:
    st.info(f"No measured cell in sweep {md(sweep)} yet.")
else:
    st.caption(f"Fastest by samples/s among the cells that pass the accuracy check against the fp32 reference; "
               f"speedup over **{baseline}** at the same model and batch ({RULE_TEXT}); accuracy: the figure that "
               "decided the verdict, n: samples compared. Beside it, ✗: the fastest that fails accuracy, ⚠ where "
               "it is the faster one." + ("" if "mJ / inference" in answers else " No energy figures: these cells "
                                          "have no GPU telemetry."))
    if len(answers) <= 200:  # a plain table: every figure in full, nothing to scroll; the names escaped
        text_table(answers.set_index(answers.columns[0]))
    else:  # hundreds of models and batch sizes: a table that scrolls, quick to draw
        st.dataframe(answers, hide_index=True)

serving = answers_of(snap, sweep)
if serving:  # the sweep has Server cells with a p99 bound
    st.subheader("Serving under a latency bound")
    st.caption("MLPerf LoadGen's Server scenario through farm's batcher: per model and p99 bound, the setup that "
               "served the highest rate whose test was VALID with p99 under the bound (twice where farm searched "
               "for it); the Compare page draws every rate tried.")
    st.markdown("\n".join(f"- {md(answer)}" for answer in serving))

counts = cells.status.value_counts()
columns = st.columns(6)
columns[0].metric("Sweeps", cells.sweep_id.nunique())
columns[1].metric("Cells", len(cells))
for column, status in zip(columns[2:], ("ok", "failed", "skipped", "unsupported")):
    column.metric(status.capitalize(), int(counts.get(status, 0)))

st.subheader("Sweeps")
sweeps = snap.query(sweeps_with_counts(
    f"""any_value(r.description) AS description, {STATUS_COUNTS},
        string_agg(DISTINCT c.model, ', ' ORDER BY c.model) AS models,
        string_agg(DISTINCT c.backend, ', ' ORDER BY c.backend) AS backends,
        any_value(r.runs) AS runs, any_value(r.last_run) AS last_run""",
    run_columns=", arg_max(description, started_at) AS description"))
st.dataframe(sweeps, hide_index=True, column_config={
    "last_run": st.column_config.DatetimeColumn("last run (UTC)", format="YYYY-MM-DD HH:mm")})
downloads(sweeps, "sweeps", "overview-sweeps")

st.subheader("Devices")
devices = snap.query("""
    SELECT d.name, d.kind, d.host, d.compute_capability, d.sm_count, d.memory_bytes, d.driver_version,
           d.cuda_version, d.visible_devices, count(c.cell_id) AS cells, d.device_id
    FROM devices d LEFT JOIN cells c USING (device_id) GROUP BY ALL ORDER BY cells DESC""")
shown = devices.assign(memory=devices.memory_bytes.map(human_bytes)).drop(columns="memory_bytes")
st.dataframe(shown, hide_index=True)
downloads(devices, "devices", "overview-devices")

st.subheader("Failures")
failures = cells[cells.status == "failed"][["sweep_id", "model", "precision", "batch", "backend", "reason",
                                            "cell_id"]]
if failures.empty:
    st.success("No failed cells.")
else:
    st.dataframe(failures, hide_index=True, column_config={"reason": st.column_config.TextColumn(width="large")})
    downloads(failures, "failures", "overview-failures")
not_run = cells[cells.status.isin(["skipped", "unsupported"])]
if not not_run.empty:
    with st.expander(f"{len(not_run)} cell(s) skipped or unsupported, with the reason"):
        st.dataframe(not_run[["sweep_id", "model", "precision", "batch", "backend", "status", "reason"]],
                     hide_index=True)

st.subheader("Download a warehouse table")
left, right = st.columns(2)
table = left.selectbox("Table", TABLES, index=TABLES.index("measurements"))
sweep_choice = right.multiselect("Sweeps", snap.sweep_names, default=snap.sweep_names)
if sweep_choice:
    def whole_table():
        from farm.sql_console.console import sandboxed_connection

        con = sandboxed_connection(snap.root)
        try:
            if table in ("sweeps", "cells"):
                return con.execute(f"SELECT * FROM {table} WHERE list_contains(?, sweep_id)", [sweep_choice]).df()
            if table == "devices":
                return con.execute("SELECT * FROM devices").df()
            return con.execute(f"SELECT t.* FROM {table} t JOIN cells c USING (cell_id) "
                               "WHERE list_contains(?, c.sweep_id)", [sweep_choice]).df()
        finally:
            con.close()

    st.caption(f"All rows of `{table}` for the sweeps chosen, as the warehouse holds them (docs/warehouse.md "
               "describes every column).")
    downloads(whole_table, table, "table")
