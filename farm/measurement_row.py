"""`MeasurementRow`: one cell's `measurements` row, typed from where it is made (farm.measure's
summary, the TensorRT output readers) to where it is written (farm.warehouse.rows). Each column is
one field here, with its type, unit and meaning: the warehouse's `measurements` schema and
docs/warehouse.md's table of its columns are made from these fields (tests/test_docs.py checks the
page), so a new column is one field and its line.

A row reads and writes like a dict of its columns (`row["latency_median_ms"]`, `row.get(...)`,
`row |= {...}`), so the code that fills it in steps keeps its shape; a name that is not a column
is refused where it is set (KeyError), not at the write three processes later. A column left
unset is null; iterating a row gives the columns that have a value or were set, as a dict would."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterator, Mapping, MutableMapping
from typing import Any


def column(unit: str, meaning: str, *texts: str, arrow: str | None = None) -> Any:
    """A column: null until set; `unit` and `meaning` (its `meaning` strings joined) are its line in
    docs/warehouse.md; `arrow` where its Arrow type is not the one its Python type gives (int32)."""
    return dataclasses.field(default=None, metadata={"unit": unit, "meaning": "".join((meaning, *texts)),
                                                     "arrow": arrow})


@dataclasses.dataclass(eq=False)  # compared as a mapping of its set columns, a dict too
class MeasurementRow(MutableMapping):
    """One `measurements` row without its `cell_id` (the fields' meanings: docs/warehouse.md)."""

    queries: int | None = column('count', 'Counted queries, all repeats together.')
    throughput_qps: float | None = column(
        'queries/s',
        'Inferences / host walltime of the counted loops (one inference per query, except TensorRT with '
        '`streams` > 1, where each query is that many concurrent inferences).')
    throughput_samples_per_s: float | None = column(
        'samples/s',
        "`throughput_qps` × the cell's batch. Ingested trtexec logs: trtexec prints batch × queries / "
        'walltime as "Throughput" for an implicit-batch engine (`--batch=N`, 7.x and 8.x), so that figure is '
        'stored here and `throughput_qps` is it ÷ N; 7.x prints 0 for an explicit-batch engine, stored as '
        "null; what the log printed is kept in the cell's options (`trtexec_definitions`).")
    latency_min_ms: float | None = column('ms', 'Fastest query.')
    latency_mean_ms: float | None = column('ms', 'Mean latency.')
    latency_median_ms: float | None = column('ms', 'Median latency (p50).')
    latency_p90_ms: float | None = column('ms', "90th percentile (trtexec's definition).")
    latency_p95_ms: float | None = column('ms', '95th percentile.')
    latency_p99_ms: float | None = column('ms', '99th percentile.')
    latency_max_ms: float | None = column('ms', 'Slowest query.')
    latency_std_ms: float | None = column('ms', 'Standard deviation (population).')
    latency_cv_percent: float | None = column('%', 'Coefficient of variation: std / mean.')
    latency_p90_tail_samples: int | None = column(
        'count',
        'Samples above `latency_p90_ms`: how many queries the figure stands on (null without raw samples).')
    latency_p95_tail_samples: int | None = column('count', 'Samples above `latency_p95_ms`.')
    latency_p99_tail_samples: int | None = column(
        'count',
        'Samples above `latency_p99_ms`; under 10 (`farm.measure.MIN_TAIL_SAMPLES`), `farm show` and the '
        'dashboard mark the percentile as resting on too few queries.')
    enqueue_mean_ms: float | None = column('ms', 'Host time to launch a query (GPU backends; null on CPU).')
    enqueue_median_ms: float | None = column('ms', 'Median of the same.')
    h2d_mean_ms: float | None = column('ms', 'Host-to-device copy per query (GPU backends; null on CPU).')
    h2d_median_ms: float | None = column('ms', 'Median of the same.')
    compute_mean_ms: float | None = column('ms', 'Compute per query. On CPU backends the whole query is compute.')
    compute_median_ms: float | None = column('ms', 'Median of the same.')
    d2h_mean_ms: float | None = column('ms', 'Device-to-host copy per query (GPU backends; null on CPU).')
    d2h_median_ms: float | None = column('ms', 'Median of the same.')
    compute_p99_ms: float | None = column('ms', '99th percentile of compute.')
    host_walltime_ms: float | None = column('ms', 'Sum over repeats of (last query end − first query start).')
    repeats: int | None = column('count', 'Counted loops.', arrow='int32')
    warmup_queries: int | None = column('count', 'Queries run in the warm-up (not counted).', arrow='int32')
    warmup_ms: float | None = column('ms', 'Length of the warm-up.')
    median_ci_low_ms: float | None = column(
        'ms',
        'Lower end of the 95 % confidence interval of the median latency: the distribution-free '
        'order-statistic interval over all the raw samples, at the effective sample size of autocorrelated '
        'queries (`farm.measure.median_confidence_interval`), widened with 2 or more repeats to at least the '
        "t-interval of the repeats' medians on the log scale (what a whole run moves by, which queries inside"
        ' one run cannot show). Always positive and around the median; outside [`latency_min_ms`, '
        '`latency_max_ms`] only where the repeats disagree.')
    median_ci_high_ms: float | None = column('ms', 'Upper end.')
    median_ci_method: str | None = column(
        '',
        '`order_statistic_neff_repeats` (the above). Older rows: `order_statistic_neff` (the samples alone: '
        'on simulated cells whose repeats move by 3 %, it covered the run-to-run median 57–71 % of the time; '
        'benchmarks/interval_coverage.py), `t_over_repeat_medians` (a t-interval over 2–3 repeat medians, '
        'often far too wide and below zero; readers compute the interval again from the samples) or '
        '`order_statistic` (1 repeat, no autocorrelation correction).')
    repeat_spread_percent: float | None = column(
        '%',
        '(slowest − fastest repeat median) / median: the run-to-run spread (it also widens the interval); '
        'null with one repeat.')
    stable: bool | None = column(
        'bool',
        '`latency_cv_percent` ≤ `max_cv_percent` and `repeat_spread_percent` ≤ `max_repeat_spread_percent` '
        '(or one repeat).')
    max_cv_percent: float | None = column('%', 'The CV threshold used for `stable`.')
    max_repeat_spread_percent: float | None = column(
        '%',
        "The repeat-spread threshold used for `stable` (the sweep file's "
        '`measurement.max_repeat_spread_percent`, default 5); null in older rows, whose `stable` is the CV '
        'test alone.')
    layer_coverage_percent: float | None = column(
        '%',
        "Layer coverage: Σ over the cell's `layers` rows of the mean time per query ÷ the compute time per "
        'query (`compute_median_ms`, else `latency_median_ms` where a backend has no split), × 100. Under 80 '
        '% (`farm.layers.coverage.COVERAGE_WARN_PERCENT`) the per-layer times are partial, and the dashboard,'
        ' the report and `farm show` say so ("layers cover 3 % of compute: per-layer times are partial"); '
        'above 100 % the profiling run was slower than the timed loop, and above 110 % '
        '(`COVERAGE_OVER_PERCENT`) the dashboard, the report and `farm compare` say so ("layers sum to 172 % '
        'of compute: the per-layer run times each layer on its own ..."): the rows are a split of the time, '
        'not times that add up to a query. Null without layer rows; in rows written before the column, the '
        'dashboard computes it the same way.')
    peak_memory_bytes: int | None = column(
        'bytes',
        'Device memory of the cell: PyTorch on CUDA, the peak allocated (`torch.cuda.max_memory_allocated`); '
        "TensorRT, the engine's execution memory (`device_memory_size_v2`); null on CPU.")
    latency_includes_transfers: bool | None = column(
        'bool',
        'What the latency covers: true = H2D copies + compute + D2H copies; false = GPU compute alone '
        "(trtexec 11.x's default, `--noDataTransfers`); null = unknown (an ingested log that does not say). "
        'Latencies of different definitions are not comparable: the dashboard flags such comparisons '
        '(`timing_differs`).')
    timing_cuda_graph: bool | None = column(
        'bool',
        'The enqueue ran as a CUDA graph launch (TensorRT: the capture succeeded; trtexec: `CUDA Graph` as '
        'its log or command line says). Null = unknown.')
    timing_spin_wait: bool | None = column(
        'bool',
        "The host waited for the GPU by spinning, not by blocking sync (trtexec `--useSpinWait`; farm's "
        "TensorRT backend waits on default-flag events, as trtexec's spin-wait does). Null = unknown or not "
        'applicable.')
    timing_streams: int | None = column(
        'count',
        "Concurrent streams (contexts) per query: trtexec `--infStreams`, farm's TensorRT `streams`. Null = "
        'unknown.', arrow='int32')
    timing_engine_version: str | None = column('', 'What timed it, e.g. `TensorRT 10.13.0`; null = unknown.')
    energy_j: float | None = column(
        'J',
        'GPU telemetry (farm.telemetry, through NVML; device cells with `measurement.telemetry` on, the '
        "default): the board's energy over the timed window, the counted repeats and nothing else (no build, "
        "warm-up, accuracy check or layer profiling): the difference of NVML's total-energy counter "
        '(`nvmlDeviceGetTotalEnergyConsumption`, Volta or newer) read as the first repeat starts and after '
        "the last one ends. The whole board's energy, idle power included: a host-bound cell pays for the GPU"
        ' waiting on the host. The counter moves in steps of 20–100 ms, so a window under 1 s is coarse (the '
        'note says so). Every telemetry column is null where it could not be read; `telemetry_note` says why.')
    energy_per_query_mj: float | None = column(
        'mJ',
        "`energy_j` ÷ the window's inferences (queries × `timing_streams`, as `throughput_qps` counts them): "
        'energy per inference of a batch.')
    energy_per_sample_mj: float | None = column('mJ', '`energy_per_query_mj` ÷ the batch: energy per input sample.')
    power_mean_w: float | None = column(
        'W',
        'Mean board power over the window: `energy_j` ÷ `telemetry_window_ms`; without an energy counter, the'
        ' mean of the sampled power.')
    power_max_w: float | None = column(
        'W',
        "Highest sampled board power: NVML's instant power (the `NVML_FI_DEV_POWER_INSTANT` field), one "
        'sample per period, so a peak between samples is missed. Where the GPU reports no instant power, '
        '`nvmlDeviceGetPowerUsage`, which recent GPUs average over 1 s (on an H200 it climbs for a second '
        "after an idle gap, so a 1 s window's maximum sat below its mean): `telemetry_note` says so.")
    power_limit_w: float | None = column(
        'W',
        'The enforced power limit (`nvmlDeviceGetEnforcedPowerLimit`) as the window started.')
    sm_clock_min_mhz: int | None = column(
        'MHz',
        'Lowest sampled SM clock (`nvmlDeviceGetClockInfo`, `NVML_CLOCK_SM`).', arrow='int32')
    sm_clock_median_mhz: float | None = column('MHz', 'Median sampled SM clock.')
    mem_clock_min_mhz: int | None = column('MHz', 'Lowest sampled memory clock (`NVML_CLOCK_MEM`).', arrow='int32')
    mem_clock_median_mhz: float | None = column('MHz', 'Median sampled memory clock.')
    temperature_max_c: int | None = column(
        '°C',
        'Highest sampled GPU temperature (`NVML_TEMPERATURE_GPU`).', arrow='int32')
    gpu_util_mean_percent: float | None = column(
        '%',
        "Mean sampled GPU utilization (`nvmlDeviceGetUtilizationRates().gpu`: the share of NVML's 1/6–1 s "
        'sample period in which a kernel ran; not a measure of how full the SMs are).')
    throttle_reasons: str | None = column(
        '',
        "Every clock-event (throttle) reason seen in any sample, in NVML's bit order, comma-separated: "
        '`sw_power_cap`, `hw_slowdown`, `sync_boost`, `sw_thermal_slowdown`, `hw_thermal_slowdown`, '
        '`hw_power_brake_slowdown`, `display_clock_setting`, `board_limit`, `reliability` (`unknown_0x…` for '
        'a bit this farm does not know). `nvmlDeviceGetCurrentClocksEventReasons`, or `…ThrottleReasons` on '
        "drivers before 535. GPU idle and the application-clock setting are not slowdowns (NVIDIA's docs) and"
        ' are left out. Null: none seen (or not readable: then `throttled` is null too).')
    throttled: bool | None = column(
        'bool',
        'A reason that slows the clocks (any of `throttle_reasons`) was seen during the window. `stable` does'
        " not change with it, but `farm show`, the end-of-sweep summary and the dashboard say so: the cell's "
        'figures are those of a slowed GPU.')
    throttled_percent: float | None = column('%', 'Share of the samples with such a reason.')
    telemetry_samples: int | None = column(
        'count',
        "Samples taken (every 200 ms, `farm.telemetry.PERIOD_S`, from the window's start, plus one at its "
        'end).', arrow='int32')
    telemetry_window_ms: float | None = column(
        'ms',
        'Length of the telemetry window (the counted repeats; about `host_walltime_ms`).')
    telemetry_note: str | None = column(
        '',
        'Why telemetry is missing or partial, or null: `a CPU cell: ...`, `telemetry off ...`, `no NVML: '
        '...`, `the GPU has no total-energy counter ...`, `the GPU does not report ...`, `the backend times '
        'itself ...` (trtexec), a short window. Rows written before telemetry existed have every telemetry '
        'column null and no note.')
    host_probe_median_ms: float | None = column(
        'ms',
        "The host's own speed: a fixed pure-Python loop (20,000 multiply-adds, the fastest of 9 runs after a "
        "5 ms pause that lets an engine's spinning threads park) timed in the cell's process before each "
        'counted repeat and after the last (`farm.measure.host_probe_ms`), never inside a repeat; the median '
        "of those probes. Device (GPU) cells only: on a CPU cell the engine's own threads (ONNX Runtime's, "
        "OpenMP's spin-waits) share the cores with the probe, which would time them. Comparable between cells"
        ' of one machine, not between machines. Null for CPU cells, samples farm did not time (ingested '
        'TensorRT output, trtexec) and rows of an older farm.')
    host_probe_spread_percent: float | None = column(
        '%',
        "(slowest − fastest probe) / their median: how far the host's speed moved during the cell. On a "
        "virtual machine it moves by itself (an H200 host's vCPUs switched between two speeds 1.8× apart over"
        " seconds); an unstable cell whose probes moved 15 % or more says so in `farm show`'s note. Null with"
        ' fewer than two probes.')
    cpu_others_percent: float | None = column(
        '%',
        "The share of the whole machine's CPU time that other processes used while the cell's repeats were "
        "timed (host CPU time less idle, steal and this cell's process, whose engine threads count as its "
        'own; `psutil.cpu_times`). Every cell. An unstable cell timed at 25 % or more says so in `farm '
        "show`'s and the end table's note.")
    cpu_steal_percent: float | None = column(
        '%',
        'The share the hypervisor gave to other virtual machines in that window (the `steal` of '
        '`/proc/stat`); an unstable cell at 10 % or more says so too. Null where the system does not report '
        'it.')
    host_load_per_cpu: float | None = column(
        '',
        "The 1-minute load average at the end of the window over the CPU count (the cell's own threads "
        'counted): 1 means as many runnable threads as CPUs.')
    timing_cpus: str | None = column(
        '',
        'The CPU the timing thread was kept on for each counted repeat, space-separated (e.g. `3 3 11`): '
        "before each repeat of a device (GPU) cell farm times a short fixed loop on every CPU the cell's "
        'process may use and keeps the thread on the quickest (`farm.measure.quickest_cpu`), because a '
        "virtual machine's vCPUs change speed one by one and a host-bound query follows the one it runs on; "
        'the thread moves only between repeats. Null for CPU cells, a process with one CPU to choose from, '
        'other platforms than Linux and samples farm did not time.')

    def __post_init__(self) -> None:
        self._given: set[str] = set()  # columns set through the mapping, None included: they stay keys

    @classmethod
    def of(cls, values: Mapping[str, Any] | None) -> MeasurementRow | None:
        """A row of `values` (a row itself is returned as it is); None stays None. KeyError names a
        key that is not a column."""
        if values is None or isinstance(values, MeasurementRow):
            return values
        row = cls()
        row.update(values)
        return row

    def __getitem__(self, key: str) -> Any:
        if key not in columns(type(self)):
            raise KeyError(key)
        return getattr(self, key)

    def __setitem__(self, key: str, value: Any) -> None:
        if key not in columns(type(self)):
            raise KeyError(f"the measurements table has no column {key!r} (farm.measurement_row.MeasurementRow "
                           "lists them: add a field there and its line in docs/warehouse.md)")
        setattr(self, key, value)
        self._given.add(key)

    def __delitem__(self, key: str) -> None:
        self[key] = None
        self._given.discard(key)

    def __iter__(self) -> Iterator[str]:
        # as a dict of what was put in: a column set to None through the mapping (a log that says
        # "unknown") is a key, and overrides when the row is merged into another
        return (name for name in columns(type(self)) if name in self._given or getattr(self, name) is not None)

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __ior__(self, other: Mapping[str, Any]) -> MeasurementRow:
        self.update(other)
        return self


@functools.cache
def columns(row_type: type[MeasurementRow] = MeasurementRow) -> tuple[str, ...]:
    """The columns of a row type, in order."""
    return tuple(f.name for f in dataclasses.fields(row_type))


def arrow_fields(row_type: type[MeasurementRow] = MeasurementRow) -> list[tuple[str, Any]]:
    """The columns as (name, Arrow type), in order: the warehouse's `measurements` schema after `cell_id`."""
    import pyarrow as pa

    by_python = {"int": pa.int64(), "float": pa.float64(), "bool": pa.bool_(), "str": pa.string()}
    return [(f.name, getattr(pa, f.metadata["arrow"])() if f.metadata["arrow"] else
             by_python[str(f.type).split(" |")[0]]) for f in dataclasses.fields(row_type)]


def docs_table(row_type: type[MeasurementRow] = MeasurementRow) -> str:
    """docs/warehouse.md's table of the `measurements` columns."""
    lines = ["| column | unit | meaning |", "| --- | --- | --- |", "| `cell_id` | | The cell. |"]
    lines += [f"| `{f.name}` | {f.metadata['unit']}{' ' if f.metadata['unit'] else ''}| {f.metadata['meaning']} |"
              for f in dataclasses.fields(row_type)]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":  # the table for docs/warehouse.md
    print(docs_table(), end="")
