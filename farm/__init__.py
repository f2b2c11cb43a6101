"""farm: a benchmark farm for inference engines.

A sweep (TOML) expands into cells; each cell builds and measures one model on one backend;
results land in a Parquet warehouse that DuckDB queries. See docs/architecture.md.
"""

__version__ = "0.1.0"
