#!/usr/bin/env bash
# How the GPU figures of the Ray farm / PyTorch backend were produced on the device machine
# (2 x H200). Wheels missing there (ray, duckdb, pydantic, jsonschema) travel in .whl*/.
#   bash benchmarks/device/issue3.sh setup1|setup2|smoke|run1|run2|pack
set -euo pipefail
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 RAY_USAGE_STATS_ENABLED=0
case "$1" in
  setup1)  # first half of the wheels
    mkdir -p /tmp/wh && cp .whl/*.whl .whl2/ray.part1 /tmp/wh/
    nvidia-smi -L; python3 -c "import torch; print(torch.__version__, torch.cuda.device_count())" ;;
  setup2)  # second half, join, install
    cp .whl3/ray.part2 /tmp/wh/ && cat /tmp/wh/ray.part1 /tmp/wh/ray.part2 > /tmp/wh/ray-2.60.0-cp312-cp312-manylinux2014_x86_64.whl
    rm /tmp/wh/ray.part1 /tmp/wh/ray.part2
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site /tmp/wh/*.whl
    python3 -c "import ray, duckdb, pydantic; print('ray', ray.__version__, 'duckdb', duckdb.__version__)" ;;
  smoke)
    TORCHINDUCTOR_CACHE_DIR=/tmp/inductor-smoke python3 -m farm sweep benchmarks/device/smoke.toml \
      --results /tmp/res-smoke --gpus 2
    python3 -m farm query "SELECT left(c.cell_id,8) id, c.options->>'mode' AS mode, c.precision, c.status, c.worker,
      round(m.latency_median_ms,3) p50, round(m.h2d_mean_ms,3) h2d, round(m.compute_mean_ms,3) compute,
      round(m.d2h_mean_ms,3) d2h, m.peak_memory_bytes FROM cells c LEFT JOIN measurements m USING (cell_id)" \
      --results /tmp/res-smoke ;;
  run1)  # the sweep on one GPU (cold compile cache), then the bare-loop comparison
    /usr/bin/time -f "WALL run1 %e s" env TORCHINDUCTOR_CACHE_DIR=/tmp/inductor-1gpu \
      python3 -m farm sweep configs/gpu-resnet50.toml --results /tmp/res-1gpu --gpus 1
    python3 benchmarks/torch_bare_loop.py --cache /tmp/res-1gpu/.cache ;;
  run2)  # the same sweep on both GPUs (cold compile cache)
    /usr/bin/time -f "WALL run2 %e s" env TORCHINDUCTOR_CACHE_DIR=/tmp/inductor-2gpu \
      python3 -m farm sweep configs/gpu-resnet50.toml --results /tmp/res-2gpu ;;
  pack)
    for r in 1gpu 2gpu; do tar czf "$OUT/res-$r.tgz" -C /tmp/res-$r --exclude=.cache . ; done ;;
esac
