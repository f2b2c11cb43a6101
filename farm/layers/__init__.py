"""Per-layer facts that every backend and `farm ingest` compute the same way."""
