#!/usr/bin/env bash
# On a GPU machine, after setup.sh: the README's main job (`farm sweep configs/resnet.toml`), with
# the machine's own Python (bin/farm would build a virtualenv from PyPI, which a GPU server without
# network cannot reach), then `farm show resnet`. Output and the warehouse's cells land in $OUT.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-/tmp/main-job-out}
results=${MAIN_JOB_RESULTS:-/tmp/main-results}
mkdir -p "$out"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,uuid,driver_version --format=csv 2>&1 | tee "$out/gpu.csv"
start=$(date +%s.%N)
timeout "${MAIN_JOB_TIMEOUT:-480}" python3 -m farm sweep configs/resnet.toml --results "$results" 2>&1 \
  | tee "$out/sweep.txt"
echo "exit ${PIPESTATUS[0]}, wall $(python3 -c "print(f'{$(date +%s.%N) - $start:.1f}')") s" | tee -a "$out/sweep.txt"
COLUMNS=250 python3 -m farm show resnet --results "$results" 2>&1 | tee "$out/show.txt" | tail -60
python3 -m farm show resnet --results "$results" --format csv > "$out/show.csv" 2>&1
# where the time went: each cell's start, duration and the cell process that ran it (a process
# replaced after a profiled cell shows as a new pid), and the host's speed around its repeats
python3 -m farm query "SELECT c.cell_id[:8] AS cell, c.backend, c.precision, c.batch, c.status,
    strftime(c.started_at, '%H:%M:%S') AS started, round(c.duration_s, 1) AS seconds,
    regexp_extract(c.worker, 'cell process pid ([0-9]+)', 1) AS cell_pid, round(m.host_probe_median_ms, 3) AS host_ms,
    round(m.host_probe_spread_percent) AS host_spread FROM cells c LEFT JOIN measurements m USING (cell_id)
    ORDER BY c.started_at" --results "$results" --format csv > "$out/timeline.csv" 2>&1
tail -40 "$out/timeline.csv"
