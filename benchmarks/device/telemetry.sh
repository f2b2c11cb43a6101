#!/usr/bin/env bash
# On a GPU machine, after setup.sh (one command): issue 15 item 4's device run. The telemetry
# overhead benchmark (torch CUDA fp16 eager and compile, zoo:resnet50, batch 1 and 32), then a
# small sweep (torch CUDA fp16 eager, batch 1 and 128) through the real executor (Ray, one actor
# pinned to the GPU), its `farm show` and its telemetry columns. Everything lands in $OUT.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-/tmp/telemetry-out}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,uuid,driver_version,power.limit,clocks.max.sm,clocks.max.mem,temperature.gpu \
  --format=csv 2>&1 | tee "$out/gpu.csv"
python3 -c "import pynvml, importlib.metadata as m; print('nvidia-ml-py', m.version('nvidia-ml-py'))"
timeout "${OVERHEAD_TIMEOUT:-240}" python3 benchmarks/telemetry_overhead.py --cache /tmp/results/.cache \
  ${OVERHEAD_ARGS:-} 2>&1 | tee "$out/overhead.txt"
cat > /tmp/telemetry-sweep.toml <<'EOF'
name = "telemetry"
description = "issue 15 item 4: telemetry per cell, ResNet-50 fp16 eager on PyTorch CUDA"
[[models]]
source = "zoo:resnet50"
[axes]
precisions = ["fp16"]
batch_sizes = [1, 128]
backends = ["torch"]
[backends.torch]
device = "cuda"
mode = "eager"
[accuracy]
enabled = false
[measurement]
layer_iterations = 0
EOF
timeout "${SWEEP_TIMEOUT:-200}" python3 -m farm sweep /tmp/telemetry-sweep.toml --results /tmp/results \
  2>&1 | tee "$out/sweep.txt"
python3 -m farm show telemetry --results /tmp/results --format csv > "$out/show.csv" 2>&1
python3 - "$out" <<'EOF'
import sys, duckdb
from farm.telemetry import COLUMNS
con = duckdb.connect()
rows = con.execute(f"""SELECT c.batch, m.throughput_qps, m.latency_median_ms, {', '.join('m.' + c for c in COLUMNS)}
    FROM read_parquet('/tmp/results/telemetry/measurements/*.parquet') m
    JOIN read_parquet('/tmp/results/telemetry/cells/*.parquet') c USING (cell_id) ORDER BY c.batch""").fetchdf()
rows.to_csv(f"{sys.argv[1]}/telemetry.csv", index=False)
with __import__("pandas").option_context("display.width", 250, "display.max_columns", 40):
    print(rows.T.to_string())
EOF
