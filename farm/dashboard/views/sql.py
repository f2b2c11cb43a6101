"""SQL: a read-only DuckDB console over the warehouse, with row, byte, time and memory limits; the
queries run in a child process of the session's own (farm.sql_console.console.Console)."""

import streamlit as st

from farm.dashboard.common import downloads, md, snapshot_or_stop
from farm.layers.memory import format_bytes
from farm.sql_console.console import DEFAULT_BYTE_LIMIT, DEFAULT_TIME_LIMIT_S, PROCESS_MEMORY_LIMIT, Console, QueryRefused
from farm.warehouse import TABLES

EXAMPLE = """SELECT model, precision, batch, backend, throughput_qps, latency_p99_ms
FROM cells JOIN measurements USING (cell_id)
WHERE status = 'ok'
ORDER BY model, batch, throughput_qps DESC"""

snap = snapshot_or_stop()
st.title("SQL")
st.caption(f"DuckDB over the warehouse; tables: {', '.join(f'`{t}`' for t in TABLES)} (columns and units in "
           "docs/warehouse.md). Read-only: one SELECT, PIVOT (with an IN list) or EXPLAIN at a time, over these "
           f"tables only; a query stops after {DEFAULT_TIME_LIMIT_S:g} s, returns at most "
           f"{format_bytes(DEFAULT_BYTE_LIMIT)} and runs in a process allowed {PROCESS_MEMORY_LIMIT / 1e9:g} GB of "
           "memory.")
sql = st.text_area("Query", EXAMPLE, height=160, key="sql-text")
left, right = st.columns([1, 3], vertical_alignment="bottom")
limit = left.selectbox("Row limit", [1_000, 10_000, 100_000], index=1, key="sql-limit")
if right.button("Run", type="primary", key="sql-run"):
    # One query process per browser session, started by its first query; it ends with the session
    # (the console is collected), after IDLE_EXIT_S without a query, or with the server.
    if "sql-console" not in st.session_state:
        st.session_state["sql-console"] = Console()
    try:
        st.session_state["sql-result"] = st.session_state["sql-console"].run_query(snap.root, sql, row_limit=limit)
    except QueryRefused as exc:
        st.session_state["sql-result"] = exc
result = st.session_state.get("sql-result")  # kept while other widgets rerun the page
if isinstance(result, QueryRefused):
    st.error(f"Refused: {md(result)}")
elif result is not None:
    if result.byte_limited:
        more = (f"; only the first {len(result.frame):,} are shown: they reach the console's "
                f"{format_bytes(DEFAULT_BYTE_LIMIT)} (select fewer or narrower columns, or add a LIMIT)")
    elif result.truncated:
        more = f"; only the first {len(result.frame):,} are shown (raise the row limit or add a LIMIT)"
    else:
        more = ""
    st.caption(f"{len(result.frame):,} row(s) in {result.seconds:.2f} s{more}")
    st.dataframe(result.frame, hide_index=True)
    downloads(result.frame, "query", "sql-result")
