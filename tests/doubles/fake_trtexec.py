"""A stand-in for the trtexec binary (a TensorRT double): records its arguments and replays
recorded real trtexec output from tests/fixtures/trt_seeds as its log and export files."""

import json
import os
import shutil
import sys
from pathlib import Path

SEEDS = Path(os.environ["FAKE_TRTEXEC_SEEDS"])
VERSION = os.environ.get("FAKE_TRTEXEC_VERSION", "100100")

if "--help" in sys.argv:
    print(f"&&&& RUNNING TensorRT.trtexec [TensorRT v{VERSION}] # trtexec --help")
    sys.exit(0)
with open(os.environ["FAKE_TRTEXEC_ARGS"], "a") as log:
    log.write(json.dumps(sys.argv[1:]) + "\n")
args = dict(a.removeprefix("--").split("=", 1) for a in sys.argv[1:] if "=" in a)
profile = json.loads((SEEDS / "centernet_int8.profile.json").read_text())
shutil.copy(SEEDS / "centernet_int8.profile.json", args["exportProfile"])
Path(args["exportLayerInfo"]).write_text(json.dumps({"Layers": [row["name"] for row in profile[1:]], "Bindings": []}))
times, t = [], 0.0
for i in range(40):
    h2d, compute, d2h = 0.07, 1.8 + 0.01 * (i % 5), 0.004
    times.append({"startEnqMs": t, "endEnqMs": t + 0.4, "startH2dMs": t, "endH2dMs": t + h2d,
                  "startComputeMs": t + h2d, "endComputeMs": t + h2d + compute, "startD2hMs": t + h2d + compute,
                  "endD2hMs": t + h2d + compute + d2h, "h2dMs": h2d, "computeMs": compute, "d2hMs": d2h,
                  "latencyMs": h2d + compute + d2h})
    t += 2.0
Path(args["exportTimes"]).write_text(json.dumps(times))
Path(args["saveEngine"]).write_bytes(b"\0" * 1234)
sys.stdout.write((SEEDS / "resnet50_trt86.build_verbose_excerpt.log").read_text())
sys.exit(int(os.environ.get("FAKE_TRTEXEC_EXIT", "0")))
