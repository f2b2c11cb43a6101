"""GPU telemetry over a cell's timed window, through NVML (nvidia-ml-py's `pynvml`, imported lazily).

`GpuTelemetry` is the window farm.measure.run_timed opens after the warm-up and closes after the
last counted repeat, so build, warm-up, the accuracy check and layer profiling are outside it. At
both ends it reads the board's total-energy counter (nvmlDeviceGetTotalEnergyConsumption, mJ since
the driver loaded; Volta or newer); between them a background thread samples instant power, SM and memory
clocks, temperature, utilization and the current clock-event (throttle) reasons every `PERIOD_S` (200 ms).
`row` turns that into the `measurements` columns in `COLUMNS` (docs/warehouse.md has their units);
what cannot be read stays null and `telemetry_note` says why (no NVML, a CPU cell, a reading the
GPU lacks).

The GPU is the one the cell ran on, found by the UUID in the cell's device row (or a UUID in
CUDA_VISIBLE_DEVICES), never by index: CUDA_VISIBLE_DEVICES renumbers devices, NVML does not.
"""

from __future__ import annotations

import os
import statistics
import threading
import time
from collections.abc import Callable
from typing import Any

# 200 ms: energy comes from the total-energy counter read at both ends of the window, not from
# the samples, so the samples only need to catch clocks, temperature, utilization (which NVML
# averages over 1/6 s to 1 s anyway) and throttle reasons: 5 a second, 15 per three 1 s repeats.
# Each wake is six NVML calls, each handing the GIL back to a host-bound timed loop; at 50 ms the
# batch-1 cells measured 4-9 % slower with telemetry on (H100, benchmarks/telemetry_overhead.py),
# and a model of the sampler here cost a pure-Python loop 1-5 % at 50 ms, under 0.5 % at 200 ms.
PERIOD_S = 0.200
# The energy counter moves in steps of 20-100 ms: a window shorter than this gets a note.
SHORT_WINDOW_S = 1.0

# nvmlClocksEventReason* bits (nvml.h; the same bits as the older nvmlClocksThrottleReason*).
REASONS = {
    0x0004: "sw_power_cap", 0x0008: "hw_slowdown", 0x0010: "sync_boost", 0x0020: "sw_thermal_slowdown",
    0x0040: "hw_thermal_slowdown", 0x0080: "hw_power_brake_slowdown", 0x0100: "display_clock_setting",
    0x0200: "board_limit", 0x0400: "reliability",
}
# Not slowdowns (NVIDIA's docs): GpuIdle (nothing is running, clocks drop to idle: the gaps of a
# host-bound cell) and ApplicationsClocksSetting (clocks are at the application-clock setting).
IGNORED_REASONS = 0x0001 | 0x0002

COLUMNS = (
    "energy_j", "energy_per_query_mj", "energy_per_sample_mj", "power_mean_w", "power_max_w", "power_limit_w",
    "sm_clock_min_mhz", "sm_clock_median_mhz", "mem_clock_min_mhz", "mem_clock_median_mhz", "temperature_max_c",
    "gpu_util_mean_percent", "throttle_reasons", "throttled", "throttled_percent", "telemetry_samples",
    "telemetry_window_ms", "telemetry_note",
)
NO_NVML = "no NVML: nvidia-ml-py is not installed (pip install nvidia-ml-py)"
CPU_CELL = "a CPU cell: GPU telemetry is for device cells"
TURNED_OFF = "telemetry off (measurement.telemetry = false)"
NOT_TIMED_BY_FARM = "the backend times itself, so farm cannot see its timed window"
AVERAGED_POWER = ("power samples are NVML's power usage, a 1 s average on recent GPUs (this one reports no "
                  "instant power): power_max_w lags and understates short peaks")


def instant_power_reader(nvml: Any, handle: Any) -> Callable[[], float]:
    """A reader of the GPU's instant power in mW (the NVML_FI_DEV_POWER_INSTANT field). Why not
    nvmlDeviceGetPowerUsage: on an H200 (driver 580) it is the 1 s average (NVML_FI_DEV_POWER_AVERAGE
    to the milliwatt), which after an idle gap climbs for a second while the board already draws
    700 W (NVML's power fields read every 50 ms under a load started after an idle gap: a probe kept
    in git, benchmarks/device/power_probe.py at 7c6c637): a 1 s window's maximum then sat below its mean."""
    field = nvml.NVML_FI_DEV_POWER_INSTANT

    def read() -> float:
        value = nvml.nvmlDeviceGetFieldValues(handle, [field])[0]
        if value.nvmlReturn != nvml.NVML_SUCCESS:
            raise nvml.NVMLError(value.nvmlReturn)
        return float(getattr(value.value, FIELD_VALUE_MEMBERS.get(value.valueType, "uiVal")))

    return read


# nvmlValueType_t -> the member of nvmlValue_t that holds it (nvml.h)
FIELD_VALUE_MEMBERS = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}


def decode_reasons(mask: int) -> list[str]:
    """The names of the clock-event reasons set in `mask`, in bit order; idle and the
    application-clock setting left out; an unknown bit as 'unknown_0x...'."""
    mask &= ~IGNORED_REASONS
    names = [name for bit, name in REASONS.items() if mask & bit]
    unknown = mask & ~sum(REASONS)
    return names + ([f"unknown_{unknown:#x}"] if unknown else [])


def unavailable_row(note: str) -> dict[str, Any]:
    """Every telemetry column null, and the note saying why."""
    return {**dict.fromkeys(COLUMNS), "telemetry_note": note}


def telemetry_row(readings: dict[str, list[float]], energy_mj: float | None, window_s: float | None,
                  inferences: int, batch: int, power_limit_mw: float | None, notes: list[str]) -> dict[str, Any]:
    """The telemetry columns from raw readings: `readings` holds each sampled series in NVML's
    units ('power' mW, 'sm_clock'/'mem_clock' MHz, 'temperature' C, 'util' %, 'reasons' bit masks),
    a series absent where it was not readable; `energy_mj` is the counter's difference over the
    window (None: no counter); `inferences` counts the window's queries as throughput does."""
    row = unavailable_row("; ".join(notes) or None)
    power, reasons = readings.get("power"), readings.get("reasons")
    samples = max((len(v) for v in readings.values()), default=0)
    row["telemetry_samples"] = samples
    row["telemetry_window_ms"] = window_s * 1e3 if window_s is not None else None
    if energy_mj is not None:
        row["energy_j"] = energy_mj / 1e3
        row["energy_per_query_mj"] = energy_mj / inferences if inferences else None
        row["energy_per_sample_mj"] = energy_mj / (inferences * batch) if inferences and batch else None
        row["power_mean_w"] = energy_mj / 1e3 / window_s if window_s else None
    elif power:
        row["power_mean_w"] = statistics.fmean(power) / 1e3  # no counter: the samples' mean
    if power:
        row["power_max_w"] = max(power) / 1e3
    row["power_limit_w"] = power_limit_mw / 1e3 if power_limit_mw is not None else None
    for name in ("sm_clock", "mem_clock"):
        if readings.get(name):
            row[f"{name}_min_mhz"] = int(min(readings[name]))
            row[f"{name}_median_mhz"] = float(statistics.median(readings[name]))
    if readings.get("temperature"):
        row["temperature_max_c"] = int(max(readings["temperature"]))
    if readings.get("util"):
        row["gpu_util_mean_percent"] = statistics.fmean(readings["util"])
    if reasons:
        seen = [decode_reasons(int(mask)) for mask in reasons]
        names = [name for bit, name in REASONS.items() if any(name in s for s in seen)]
        names += sorted({n for s in seen for n in s if n.startswith("unknown_")})
        row["throttle_reasons"] = ", ".join(names) or None
        row["throttled"] = bool(names)
        row["throttled_percent"] = 100.0 * sum(1 for s in seen if s) / len(seen)
    return row


class TelemetryUnavailable(Exception):
    """NVML cannot give this cell's telemetry; the message is the note."""


class GpuTelemetry:
    """A timed window's telemetry on one GPU: `open()`, then `start()`/`stop()` (farm.measure
    calls them around the counted repeats), `row(...)`, `close()`. Never raises: what fails
    becomes the note."""

    def __init__(self, uuid: str | None, period_s: float = PERIOD_S) -> None:
        self.uuid, self.period_s = uuid, period_s
        self.nvml: Any = None
        self.handle: Any = None
        self.readers: dict[str, Callable[[], float]] = {}
        self.readings: dict[str, list[float]] = {}
        self.notes: list[str] = []
        self.energy: Callable[[], float] | None = None
        self.energy_start = self.energy_end = self.power_limit_mw = None
        self.t_start = self.t_stop = None
        self.failed_reads = 0
        self.busy_s = 0.0  # time spent sampling (the sampler's own cost)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._initialized = False

    # --- set-up: NVML, the handle, which readings this GPU has ------------------------------------

    def open(self) -> str | None:
        """Initialize NVML and find the GPU; None when ready, else why not (also the note)."""
        try:
            try:
                import pynvml
            except ImportError:
                raise TelemetryUnavailable(NO_NVML) from None
            self.nvml = pynvml
            try:
                pynvml.nvmlInit()
            except pynvml.NVMLError as exc:
                raise TelemetryUnavailable(f"no NVML: nvmlInit failed: {exc}") from None
            self._initialized = True
            self.handle = self._find_handle()
            self._probe()
        except TelemetryUnavailable as exc:
            self.notes = [str(exc)]
            self.close()
            return str(exc)
        return None

    def _find_handle(self) -> Any:
        nvml = self.nvml
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
        uuid = self.uuid or (visible if visible.startswith(("GPU-", "MIG-")) else None)
        try:
            if uuid:
                return nvml.nvmlDeviceGetHandleByUUID(uuid)
            if nvml.nvmlDeviceGetCount() == 1:  # one GPU: no doubt which
                return nvml.nvmlDeviceGetHandleByIndex(0)
        except nvml.NVMLError as exc:
            raise TelemetryUnavailable(f"NVML cannot find the cell's GPU {uuid or ''}: {exc}".replace("  ", " ")) from None
        raise TelemetryUnavailable("which GPU the cell ran on is unknown: no UUID in its device row or "
                                   "CUDA_VISIBLE_DEVICES, and several GPUs (an index would not do: "
                                   "CUDA_VISIBLE_DEVICES renumbers them)")

    def _probe(self) -> None:
        """Keep the readings this GPU answers; a note for each it does not."""
        nvml, handle = self.nvml, self.handle
        instant = (instant_power_reader(nvml, handle) if hasattr(nvml, "nvmlDeviceGetFieldValues")
                   and hasattr(nvml, "NVML_FI_DEV_POWER_INSTANT") else None)
        average = lambda: nvml.nvmlDeviceGetPowerUsage(handle)  # noqa: E731
        candidates: dict[str, list[Callable[[], float]]] = {
            "power": [instant, average] if instant else [average],
            "sm_clock": [lambda: nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM)],
            "mem_clock": [lambda: nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_MEM)],
            "temperature": [lambda: nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU)],
            "util": [lambda: nvml.nvmlDeviceGetUtilizationRates(handle).gpu],
            # the event-reasons call is newer (drivers 535+); older drivers have only the throttle one
            "reasons": [lambda: nvml.nvmlDeviceGetCurrentClocksEventReasons(handle),
                        lambda: nvml.nvmlDeviceGetCurrentClocksThrottleReasons(handle)],
        }
        for name, readers in candidates.items():
            error = None
            for reader in readers:
                try:
                    reader()
                except (nvml.NVMLError, AttributeError) as exc:
                    error = exc
                    continue
                self.readers[name], self.readings[name] = reader, []
                break
            else:
                self.notes.append(f"the GPU does not report {name.replace('_', ' ')} ({error})")
        if self.readers.get("power") is average:
            self.notes.append(AVERAGED_POWER)
        try:
            nvml.nvmlDeviceGetTotalEnergyConsumption(handle)
            self.energy = lambda: nvml.nvmlDeviceGetTotalEnergyConsumption(handle)
        except nvml.NVMLError as exc:
            self.notes.append(f"the GPU has no total-energy counter ({exc}; Volta or newer has one): "
                              "power_mean_w is the samples' mean, energy is null")
        try:
            self.power_limit_mw = nvml.nvmlDeviceGetEnforcedPowerLimit(handle)
        except nvml.NVMLError as exc:
            self.notes.append(f"the GPU does not report its power limit ({exc})")

    # --- the window ---------------------------------------------------------------------------------

    @property
    def ready(self) -> bool:
        return self.handle is not None

    def start(self) -> None:
        """Open the window: first energy reading, then the sampling thread (samples at once)."""
        if not self.ready or self.t_start is not None:
            return
        self.energy_start = self._read_energy()
        self.t_start = time.perf_counter()
        self._thread = threading.Thread(target=self._loop, name="farm-telemetry", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Close the window: stop the thread, one last sample, the last energy reading."""
        if self._thread is None or self.t_stop is not None:
            return
        self._stop.set()
        self._thread.join()
        self._sample()
        self.t_stop = time.perf_counter()
        self.energy_end = self._read_energy()

    def _loop(self) -> None:
        due = time.perf_counter()
        while True:
            self._sample()
            due += self.period_s
            if self._stop.wait(max(due - time.perf_counter(), 0.0)):
                return

    def _sample(self) -> None:
        began = time.perf_counter()
        for name, reader in self.readers.items():
            try:
                self.readings[name].append(reader())
            except Exception:  # noqa: BLE001 - a reading that fails mid-window is counted, not fatal
                self.failed_reads += 1
        self.busy_s += time.perf_counter() - began

    def _read_energy(self) -> float | None:
        if self.energy is None:
            return None
        try:
            return float(self.energy())
        except Exception:  # noqa: BLE001 - a failed read is a missing figure, never a failed cell
            self.failed_reads += 1
            return None

    # --- the result -------------------------------------------------------------------------------

    def row(self, inferences: int, batch: int) -> dict[str, Any]:
        """The telemetry columns of the window (`inferences`: queries x streams, as throughput)."""
        if not self.ready:
            return unavailable_row("; ".join(self.notes) or NO_NVML)
        if self.t_stop is None:
            return unavailable_row(NOT_TIMED_BY_FARM)
        window_s = self.t_stop - self.t_start
        notes = list(self.notes)
        energy = (self.energy_end - self.energy_start
                  if self.energy_start is not None and self.energy_end is not None else None)
        if energy is None and self.energy is not None:
            notes.append("the energy counter could not be read at both ends of the window")
        elif energy is not None and window_s < SHORT_WINDOW_S:
            notes.append(f"a {window_s * 1e3:.0f} ms window is short against the energy counter's "
                         "20-100 ms steps: energy is coarse")
        if self.failed_reads:
            notes.append(f"{self.failed_reads} NVML reading(s) failed during the window")
        return telemetry_row(self.readings, energy, window_s, inferences, batch, self.power_limit_mw, notes)

    def close(self) -> None:
        """Stop the thread if still running and shut NVML down (safe to call twice)."""
        if self._thread is not None and self._thread.is_alive():
            self._stop.set()
            self._thread.join()
        if self._initialized:
            self._initialized = False
            try:
                self.nvml.nvmlShutdown()
            except Exception:  # noqa: BLE001 - nothing to do about it
                pass


def cell_window(device_kind: str, enabled: bool, uuid: str | None) -> tuple[GpuTelemetry | None, str | None]:
    """A cell's opened telemetry window, or (None, why there is none): a CPU cell, telemetry
    turned off, or NVML unavailable."""
    if device_kind != "cuda":
        return None, CPU_CELL
    if not enabled:
        return None, TURNED_OFF
    window = GpuTelemetry(uuid)
    why = window.open()
    return (None, why) if why else (window, None)
