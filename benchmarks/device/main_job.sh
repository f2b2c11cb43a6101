#!/usr/bin/env bash
# On a GPU machine, after setup.sh: the README's main job (`farm sweep configs/resnet.toml`), with
# the machine's own Python (bin/farm would build a virtualenv from PyPI, which the device machines
# cannot reach), then `farm show resnet`. Output and the warehouse's cells land in $OUT.
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
