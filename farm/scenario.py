"""A cell's load: `offline` (farm's own timing loop, back to back: every cell before serving
scenarios existed, and the default) or one of MLPerf LoadGen's serving scenarios through the
dynamic batcher (farm.serving), with the settings that make that load part of what the cell is."""

from __future__ import annotations

import dataclasses

SCENARIOS = ("offline", "server", "single_stream", "multi_stream")


@dataclasses.dataclass(frozen=True)
class ServingPlan:
    """What a serving cell runs: its scenario, the batcher's policy (the cell's batch is the max batch)
    and LoadGen's settings. Server: the highest rate whose p99 stays under `slo_ms`, or `rates`."""

    scenario: str
    max_delay_ms: float
    slo_ms: float | None = None
    rates: tuple[float, ...] = ()
    min_duration_ms: float = 10_000.0
    min_query_count: int = 1000
    samples_per_query: int = 8  # multi_stream

    @property
    def label(self) -> str:
        return f"{self.scenario} delay={self.max_delay_ms:g}ms" if self.scenario == "server" else self.scenario
