"""SQL a user writes, over the warehouse, read-only: `sandbox` (the one gate every such query goes
through, the dashboard's console and `farm query` alike: one read-only statement naming the
warehouse's tables, on a DuckDB that opens no file outside it), `console` (the dashboard's SQL
console: limits on time, memory and rows, each query in a process of its own) and `process` (that
query process). None of it imports Streamlit."""
