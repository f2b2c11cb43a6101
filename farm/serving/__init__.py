"""Serving scenarios: an engine measured under MLPerf LoadGen's load (Server: Poisson arrivals
against a latency bound; SingleStream; MultiStream; Offline) through a System Under Test that is a
dynamic batcher in front of the engine's query (farm.serving.batcher), and the search for the
highest request rate whose p99 latency stays under a bound (farm.serving.search).

LoadGen (`mlcommons-loadgen`, imported as `mlperf_loadgen`) makes the load and judges the run
(its minimum duration and query count, its early-stopping estimate: VALID or INVALID); farm only
batches, runs the engine, completes the samples, and reads LoadGen's detail log."""

from farm.scenario import SCENARIOS
from farm.serving.batcher import BatchStats, DynamicBatcher
from farm.serving.loadgen import ScenarioRun, loadgen_missing, run_scenario

__all__ = ["SCENARIOS", "BatchStats", "DynamicBatcher", "ScenarioRun", "loadgen_missing", "run_scenario"]
