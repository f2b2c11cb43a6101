#!/usr/bin/env bash
# On a GPU machine, after setup.sh: where a GPU-bound cell's per-query spread lies. ResNet-50 fp32 on
# ONNX Runtime CUDA, batch 8 and 32, each sweep alone: telemetry on, off, in-process (--executor
# local) and on again; per cell its figures and clocks, per repeat the latency's and the compute's
# (CUDA events) median and CV from the raw samples. Rows in $OUT/spread.csv (docs/gpu-figures.md).
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
out=${OUT:-/tmp/spread-out}; mkdir -p "$out"
mk() {
cat > /tmp/spread-$1.toml <<EOF
name = "spread"
[[models]]
source = "zoo:resnet50"
[axes]
precisions = ["fp32"]
batch_sizes = [8, 32]
backends = ["onnxruntime"]
[backends.onnxruntime]
device = "cuda"
[measurement]
warmup_ms = 500
min_iterations = 20
min_duration_ms = 2000
repeats = 3
layer_iterations = 10
telemetry = $1
EOF
}
mk true; mk false
run() { # name telemetry executor
  s=$(date +%s)
  gpus=(); [ "$3" = ray ] && gpus=(--gpus 1)
  timeout 200 python3 -m farm sweep /tmp/spread-$2.toml --results /tmp/sp/$1 --executor $3 "${gpus[@]}" --force > "$out/$1.log" 2>&1
  echo "$1: exit $? $(( $(date +%s) - s )) s"
  python3 -m farm query "SELECT '$1' AS run, c.batch, round(m.latency_median_ms,3) AS med, round(m.latency_cv_percent,2) AS cv,
    round(m.latency_p99_ms/m.latency_median_ms,3) AS p99_over_med, round(m.repeat_spread_percent,2) AS rep_spread, m.stable,
    round(m.sm_clock_min_mhz) AS sm_min, round(m.sm_clock_median_mhz) AS sm_med, m.throttle_reasons AS thr, m.timing_cpus
    FROM cells c JOIN measurements m USING (cell_id) ORDER BY c.batch" --results /tmp/sp/$1 --format csv 2>&1 | tail -n +2
  python3 -m farm query "SELECT '$1' AS run, c.batch, s.repeat, round(median(s.latency_ms),3) AS lat, round(100*stddev_pop(s.latency_ms)/avg(s.latency_ms),2) AS lat_cv,
    round(median(s.compute_ms),3) AS comp, round(100*stddev_pop(s.compute_ms)/avg(s.compute_ms),2) AS comp_cv,
    round(median(s.enqueue_ms),3) AS enq, round(quantile_cont(s.latency_ms,0.99),3) AS p99, count(*) AS n
    FROM cells c JOIN samples s USING (cell_id) GROUP BY ALL ORDER BY c.batch, s.repeat" --results /tmp/sp/$1 --format csv 2>&1 | tail -n +2
}
for spec in "ray-telemetry true ray" "ray-notelemetry false ray" "local-notelemetry false local" "ray-telemetry2 true ray"; do
  run $spec | tee -a "$out/spread.csv"
done
