"""What does NVML's power reading mean on this GPU? Under a steady load that starts after an idle
gap, every 50 ms: nvmlDeviceGetPowerUsage, the instant and average power fields
(nvmlDeviceGetFieldValues: NVML_FI_DEV_POWER_INSTANT / _AVERAGE), and the mean power the
total-energy counter gives since the load began. If GetPowerUsage is a 1 s average it lags the
counter's mean for the first second (a 1 s window's max can then sit below its mean).

    python3 benchmarks/device/power_probe.py
"""
import threading
import time

import pynvml as nv
import torch

nv.nvmlInit()
h = nv.nvmlDeviceGetHandleByIndex(0)
fields = {"instant": getattr(nv, "NVML_FI_DEV_POWER_INSTANT", 186), "average": getattr(nv, "NVML_FI_DEV_POWER_AVERAGE", 185)}


def field(fid):
    try:
        v = nv.nvmlDeviceGetFieldValues(h, [fid])[0]
        if v.nvmlReturn != 0:
            return f"err{v.nvmlReturn}"
        return v.value.uiVal / 1e3
    except Exception as exc:  # noqa: BLE001 - a probe: print what failed
        return f"{type(exc).__name__}"


x = torch.randn(8192, 8192, device="cuda", dtype=torch.float16)
stop = threading.Event()


def load():
    while not stop.is_set():
        for _ in range(20):
            x @ x
        torch.cuda.synchronize()


time.sleep(3)  # idle
e0, t0 = nv.nvmlDeviceGetTotalEnergyConsumption(h), time.perf_counter()
thread = threading.Thread(target=load)
thread.start()
for _ in range(50):
    time.sleep(0.05)
    e, t = nv.nvmlDeviceGetTotalEnergyConsumption(h), time.perf_counter()
    print(f"{t - t0:5.2f} s usage {nv.nvmlDeviceGetPowerUsage(h) / 1e3:7.1f} W  instant {field(fields['instant'])}  "
          f"average {field(fields['average'])}  counter mean {(e - e0) / 1e3 / (t - t0):7.1f} W", flush=True)
stop.set()
thread.join()
