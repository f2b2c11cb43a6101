"""GPU telemetry (farm.telemetry) without a GPU: NVML absent gives nulls and the note; the reason
decoding and the per-cell arithmetic on a fake `pynvml` that has only nvidia-ml-py's documented
function names (checked against the real module where it is installed); the window opens after the
warm-up and closes after the last repeat; the columns land in the warehouse; the dashboard reads
warehouses written before them."""

from __future__ import annotations

import itertools
import sys
import types
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from farm import telemetry
from farm.measure import run_timed
from farm.records import MeasurementSettings
from farm.telemetry import COLUMNS, GpuTelemetry, cell_window, decode_reasons, telemetry_row
from farm.warehouse import SCHEMAS
from tests.conftest import warehouse_without_telemetry

ROOT = Path(__file__).resolve().parent.parent
# nvidia-ml-py's names this farm calls (pynvml.py of nvidia-ml-py 13.615.71; the NVML API reference)
DOCUMENTED = {
    "NVMLError", "NVML_CLOCK_SM", "NVML_CLOCK_MEM", "NVML_TEMPERATURE_GPU", "nvmlInit", "nvmlShutdown",
    "nvmlDeviceGetCount", "nvmlDeviceGetHandleByIndex", "nvmlDeviceGetHandleByUUID", "nvmlDeviceGetPowerUsage",
    "nvmlDeviceGetClockInfo", "nvmlDeviceGetTemperature", "nvmlDeviceGetUtilizationRates",
    "nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons",
    "nvmlDeviceGetTotalEnergyConsumption", "nvmlDeviceGetEnforcedPowerLimit", "nvmlDeviceGetFieldValues",
    "NVML_FI_DEV_POWER_INSTANT", "NVML_SUCCESS",
}
UUID = "GPU-8a6f4e1c-0000-1111-2222-333344445555"


def fake_nvml(reasons: int = 0, energy: bool = True, event_reasons: bool = True, gpus: int = 2,
              instant: str = "reported") -> types.ModuleType:
    """A `pynvml` for one H100-like GPU (uuid UUID) among `gpus`; `asked` records the handle lookups.
    `instant`: the instant-power field is 'reported' (900-950 W: never what the 1 s average says),
    'not supported' by the GPU (its per-field return code), or 'absent' (an nvidia-ml-py without it)."""
    nvml = types.ModuleType("pynvml")

    class NVMLError(Exception):
        pass

    counter = itertools.count(5_000_000, 700)  # mJ: each read 0.7 J on
    power = itertools.cycle([300_000, 350_000, 400_000])  # mW
    funcs = {
        "NVMLError": NVMLError, "NVML_CLOCK_SM": 1, "NVML_CLOCK_MEM": 2, "NVML_TEMPERATURE_GPU": 0,
        "nvmlInit": lambda: None, "nvmlShutdown": lambda: nvml.asked.append("shutdown"),
        "nvmlDeviceGetCount": lambda: gpus,
        "nvmlDeviceGetHandleByIndex": lambda i: nvml.asked.append(("index", i)) or f"handle{i}",
        "nvmlDeviceGetHandleByUUID": lambda u: nvml.asked.append(("uuid", u)) or "handle",
        "nvmlDeviceGetPowerUsage": lambda h: next(power),
        "nvmlDeviceGetClockInfo": lambda h, kind: {1: 1980, 2: 2619}[kind],
        "nvmlDeviceGetTemperature": lambda h, sensor: 41,
        "nvmlDeviceGetUtilizationRates": lambda h: types.SimpleNamespace(gpu=90, memory=30),
        "nvmlDeviceGetCurrentClocksThrottleReasons": lambda h: reasons,
        "nvmlDeviceGetEnforcedPowerLimit": lambda h: 700_000,
    }
    if event_reasons:
        funcs["nvmlDeviceGetCurrentClocksEventReasons"] = lambda h: reasons
    if instant != "absent":
        instants = itertools.cycle([900_000, 950_000])

        def field_values(h, ids):  # nvmlFieldValue_t: valueType 1 = unsigned int, nvmlReturn 3 = not supported
            return [types.SimpleNamespace(fieldId=i, valueType=1, nvmlReturn=0 if instant == "reported" else 3,
                                          value=types.SimpleNamespace(uiVal=next(instants))) for i in ids]
        funcs.update(NVML_FI_DEV_POWER_INSTANT=186, NVML_SUCCESS=0, nvmlDeviceGetFieldValues=field_values)
    if energy:
        funcs["nvmlDeviceGetTotalEnergyConsumption"] = lambda h: next(counter)
    else:
        def no_counter(h):
            raise NVMLError("Not Supported")
        funcs["nvmlDeviceGetTotalEnergyConsumption"] = no_counter
    for name, value in funcs.items():
        setattr(nvml, name, value)
    nvml.asked = []
    return nvml


def test_the_fake_has_only_documented_names() -> None:
    fake = {n for n in vars(fake_nvml()) if not n.startswith("_") and n != "asked"}
    assert fake <= DOCUMENTED, fake - DOCUMENTED
    try:
        import pynvml
    except ImportError:
        return  # not installed here (the GPU machines have it); the names were read off its source
    assert [n for n in DOCUMENTED if not hasattr(pynvml, n)] == []
    assert pynvml.NVML_CLOCK_SM == 1 and pynvml.NVML_CLOCK_MEM == 2 and pynvml.NVML_TEMPERATURE_GPU == 0
    assert pynvml.NVML_FI_DEV_POWER_INSTANT == 186 and pynvml.NVML_SUCCESS == 0
    value = pynvml.c_nvmlFieldValue_t()  # the members the instant-power reader reads
    assert {"valueType", "nvmlReturn", "value"} <= {f[0] for f in value._fields_}
    assert [f[0] for f in pynvml.c_nvmlValue_t._fields_] == list(telemetry.FIELD_VALUE_MEMBERS.values())


def test_nvml_absent_gives_nulls_and_the_note(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml raises ImportError
    window, why = cell_window("cuda", True, UUID)
    assert window is None and why == telemetry.NO_NVML
    row = telemetry.unavailable_row(why)
    assert set(row) == set(COLUMNS) and row["telemetry_note"].startswith("no NVML")
    assert all(v is None for k, v in row.items() if k != "telemetry_note")
    assert cell_window("cpu", True, None) == (None, telemetry.CPU_CELL)
    assert cell_window("cuda", False, UUID) == (None, telemetry.TURNED_OFF)


def test_reasons_decoded_without_idle_and_application_clocks() -> None:
    assert decode_reasons(0x1 | 0x2) == []  # idle, application-clock setting: not slowdowns
    assert decode_reasons(0x1 | 0x4 | 0x40) == ["sw_power_cap", "hw_thermal_slowdown"]
    assert decode_reasons(0x8 | 0x80) == ["hw_slowdown", "hw_power_brake_slowdown"]
    assert decode_reasons(0x800) == ["unknown_0x800"]


def test_per_cell_arithmetic() -> None:
    readings = {"power": [300_000, 400_000, 350_000], "sm_clock": [1980, 1755, 1980], "mem_clock": [2619] * 3,
                "temperature": [40, 44, 42], "util": [90, 100, 95], "reasons": [0x1, 0x4, 0x4 | 0x2]}
    row = telemetry_row(readings, energy_mj=9_000.0, window_s=3.0, inferences=300, batch=32,
                        power_limit_mw=700_000, notes=[])
    assert row["energy_j"] == 9.0 and row["energy_per_query_mj"] == 30.0
    assert row["energy_per_sample_mj"] == pytest.approx(30.0 / 32)
    assert row["power_mean_w"] == 3.0  # from the counter: 9 J over 3 s, not the samples' 350 W
    assert row["power_max_w"] == 400.0 and row["power_limit_w"] == 700.0
    assert (row["sm_clock_min_mhz"], row["sm_clock_median_mhz"]) == (1755, 1980.0)
    assert (row["mem_clock_min_mhz"], row["mem_clock_median_mhz"]) == (2619, 2619.0)
    assert row["temperature_max_c"] == 44 and row["gpu_util_mean_percent"] == 95.0
    assert row["throttle_reasons"] == "sw_power_cap" and row["throttled"] is True
    assert row["throttled_percent"] == pytest.approx(200 / 3) and row["telemetry_samples"] == 3
    assert row["telemetry_window_ms"] == 3000.0 and row["telemetry_note"] is None
    idle = telemetry_row({"power": [60_000], "reasons": [0x1]}, None, 1.5, 10, 1, None, ["no counter"])
    assert idle["throttled"] is False and idle["throttle_reasons"] is None
    assert idle["energy_j"] is None and idle["power_mean_w"] == 60.0 and idle["telemetry_note"] == "no counter"
    assert set(row) == set(COLUMNS) == set(idle)


def test_window_on_a_fake_gpu(monkeypatch) -> None:
    nvml = fake_nvml(reasons=0x1 | 0x4)
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")  # renumbered: index 0 here is GPU 1 there
    window, why = cell_window("cuda", True, UUID)
    assert why is None and nvml.asked == [("uuid", UUID)]  # by UUID, never by index
    window.period_s = 0.005
    calls = []
    settings = MeasurementSettings(warmup_ms=0, min_iterations=5, min_duration_ms=30, repeats=2)

    def query():
        calls.append(window.t_start is not None and window.t_stop is None)  # inside the window?

    samples = run_timed(query, settings, window)
    assert calls[0] is False and all(calls[1:])  # the warm-up call is outside, every counted one inside
    row = window.row(len(samples), batch=8)
    window.close()
    assert nvml.asked[-1] == "shutdown"
    assert row["energy_j"] == pytest.approx(0.7)  # one read at each end, 700 mJ apart
    assert row["energy_per_query_mj"] == pytest.approx(700 / len(samples))
    assert row["energy_per_sample_mj"] == pytest.approx(700 / len(samples) / 8)
    assert row["telemetry_samples"] >= 2 and row["throttled"] is True and row["throttle_reasons"] == "sw_power_cap"
    assert row["power_limit_w"] == 700.0 and row["power_max_w"] in (900.0, 950.0)  # instant, not the average
    assert row["sm_clock_median_mhz"] == 1980 and row["temperature_max_c"] == 41
    assert "short against the energy counter" in row["telemetry_note"]  # a 60 ms window


def short_window_row(monkeypatch, nvml: types.ModuleType) -> dict:
    """The telemetry row of a window opened, started and stopped at once on the fake `nvml`."""
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    window = GpuTelemetry(UUID, period_s=0.005)
    assert window.open() is None
    window.start()
    window.stop()
    row = window.row(10, 1)
    window.close()
    return row


def test_older_driver_and_missing_counter(monkeypatch) -> None:
    row = short_window_row(monkeypatch, fake_nvml(reasons=0x8, energy=False, event_reasons=False))
    assert row["throttle_reasons"] == "hw_slowdown"  # read through the older ...ThrottleReasons
    assert row["energy_j"] is None and row["power_mean_w"] is not None
    assert "no total-energy counter" in row["telemetry_note"]
    assert telemetry.AVERAGED_POWER not in row["telemetry_note"]  # instant power, read where reported


@pytest.mark.parametrize("instant", ["not supported", "absent"])
def test_power_without_an_instant_reading_is_the_average_and_says_so(monkeypatch, instant) -> None:
    row = short_window_row(monkeypatch, fake_nvml(instant=instant))
    assert row["power_max_w"] in (300.0, 350.0, 400.0)  # nvmlDeviceGetPowerUsage's readings
    assert telemetry.AVERAGED_POWER in row["telemetry_note"] and "failed" not in row["telemetry_note"]


def test_unknown_gpu_and_self_timed_backend(monkeypatch) -> None:
    nvml = fake_nvml(gpus=2)
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    window, why = cell_window("cuda", True, None)
    assert window is None and "which GPU" in why and ("index", 0) not in nvml.asked
    window, why = cell_window("cuda", True, UUID)
    assert window.row(10, 1)["telemetry_note"] == telemetry.NOT_TIMED_BY_FARM  # never started
    window.close()


def test_columns_declared_and_written(tmp_path: Path) -> None:
    assert set(COLUMNS) <= set(SCHEMAS["measurements"].names)
    from tests.conftest import swept_tiny, tiny_sweep_text

    results = swept_tiny(tmp_path, tiny_sweep_text("t", (1,), ("fp32",)))
    [path] = (results / "t" / "measurements").glob("*.parquet")
    row = pq.read_table(path).to_pylist()[0]
    assert row["telemetry_note"] == telemetry.CPU_CELL and row["energy_j"] is None and row["throttled"] is None


def test_dashboard_reads_a_warehouse_without_telemetry(tmp_path: Path) -> None:
    pytest.importorskip("streamlit")
    from farm.dashboard.data import Snapshot
    from farm.dashboard.telemetry import energy_frame, has_telemetry, throttle_warning

    snap = Snapshot(warehouse_without_telemetry(tmp_path / "results"))
    frame = snap.cell_frame
    assert not frame.empty and set(COLUMNS) <= set(frame.columns)
    assert frame.energy_per_query_mj.isna().all()  # written before telemetry existed
    cell = frame.iloc[0]
    assert not has_telemetry(cell) and throttle_warning(cell) is None and energy_frame(frame).empty
