#!/usr/bin/env bash
# Issue 15 item 3 on one GPU: the 18 torch CUDA cells of ResNet-50 (benchmarks/device/torch-repro.toml)
# swept twice into two fresh warehouses, beside benchmarks/torch_bare_loop.py (torchvision ResNet-50,
# channels_last, no farm code); one table of both runs and the bare loop.
#
#   bash benchmarks/device/torch_repro.sh all                  # everything, in order
#   bash benchmarks/device/torch_repro.sh run1 bare            # or stages, over several calls:
#   bash benchmarks/device/torch_repro.sh run2 bare-compile table
#
# Stages: gpu (what the machine is), run1, run2, bare (eager + CUDA graphs), bare-compile, table.
# State lives in $TORCH_REPRO_DIR (default /tmp/torch-repro, kept while the machine is); each
# stage's JSON and logs are copied to $OUT when set (the device tool's folder that comes back).
# A sweep stopped by its time limit resumes where it stopped when its stage runs again.
set -uo pipefail
cd "$(dirname "$0")/../.."
work=${TORCH_REPRO_DIR:-/tmp/torch-repro}
sweep=${TORCH_REPRO_SWEEP:-benchmarks/device/torch-repro.toml}
bare_args=${TORCH_REPRO_BARE_ARGS:-}
mkdir -p "$work"
export PYTHONUNBUFFERED=1
keep() { [ -n "${OUT:-}" ] && cp "$@" "$OUT/" 2>/dev/null; return 0; }
stages=("$@")
[ "${stages[*]}" = "all" ] && stages=(gpu run1 run2 bare bare-compile table)
for stage in "${stages[@]}"; do
  echo "== $stage $(date -u +%H:%M:%S)"
  case $stage in
    gpu)
      { nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit,temperature.gpu \
          --format=csv 2>&1; echo "cpus $(nproc); governor $(cat /sys/devices/system/cpu/cpu0/cpufreq/scaling_governor 2>&1)"
        python3 -c "import torch, torchvision; print('torch', torch.__version__, 'torchvision', torchvision.__version__)"
      } | tee "$work/gpu.txt"; keep "$work/gpu.txt" ;;
    run1|run2)
      timeout "${TORCH_REPRO_SWEEP_S:-520}" python3 -m farm sweep "$sweep" --executor local --results "$work/$stage" \
        > "$work/$stage.log" 2>&1; echo "sweep exit $?"
      grep -E "^(ok|failed|skipped|unsupported|error)" "$work/$stage.log" | cut -c1-110
      python3 benchmarks/device/torch_repro.py summarize "$work/$stage" "$work/$stage.json"
      keep "$work/$stage.json" "$work/$stage.log" ;;
    bare)
      python3 benchmarks/torch_bare_loop.py --modes eager cudagraphs --json "$work/bare.json" $bare_args
      keep "$work/bare.json" ;;
    bare-compile)
      python3 benchmarks/torch_bare_loop.py --modes compile --json "$work/bare-compile.json" $bare_args
      keep "$work/bare-compile.json" ;;
    table)
      python3 benchmarks/device/torch_repro.py table "$work/run1.json" "$work/run2.json" "$work"/bare*.json \
        | tee "$work/table.txt"; keep "$work/table.txt" ;;
    *) echo "unknown stage $stage (gpu run1 run2 bare bare-compile table all)" >&2; exit 2 ;;
  esac
done
