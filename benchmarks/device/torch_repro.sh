#!/usr/bin/env bash
# Issue 15 item 3 on one GPU: the 18 torch CUDA cells of ResNet-50 (benchmarks/device/torch-repro.toml,
# torchvision's module) swept twice into two fresh warehouses, beside benchmarks/torch_bare_loop.py
# (torchvision ResNet-50, channels_last, no farm code); one table of both runs and the bare loop.
# The same for ONNX Runtime's CUDA provider: benchmarks/device/ort-repro.toml swept twice beside
# benchmarks/ort_bare_loop.py over the very ONNX files those cells ran.
#
#   bash benchmarks/device/torch_repro.sh all                  # the torch stages, in order
#   bash benchmarks/device/torch_repro.sh run1 bare            # or stages, over several calls:
#   bash benchmarks/device/torch_repro.sh run2 bare-compile table
#   bash benchmarks/device/torch_repro.sh ort1 ort2 ort-bare ort-table
#
# Stages: gpu (what the machine is), run1, run2, bare (eager + CUDA graphs), bare-compile, table;
# ort1, ort2, ort-bare, ort-table; native (farm's ONNX interpreter against the nn.Module itself,
# ResNet-50 fp16 batch 1, eager and compile).
# Sweeps run on farm's Ray executor (the product's path; TORCH_REPRO_EXECUTOR=local for in-process).
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
    run1|run2|ort1|ort2)
      file=$sweep; [[ $stage == ort* ]] && file=benchmarks/device/ort-repro.toml
      timeout "${TORCH_REPRO_SWEEP_S:-520}" python3 -m farm sweep "$file" --executor "${TORCH_REPRO_EXECUTOR:-ray}" --results "$work/$stage" \
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
    ort-bare)  # the files ort1's cells ran: the zoo's fp32 ResNet-50 and farm's fp16 transform of it
      fp32=$(ls "$work"/ort1/.cache/zoo/resnet50*.onnx | head -1)
      fp16=$(ls "$work"/ort1/.cache/precision/*.fp16.onnx | head -1)
      python3 benchmarks/ort_bare_loop.py --model "$fp32" --label fp32 --nhwc off on --json "$work/ort-bare-fp32.json"
      python3 benchmarks/ort_bare_loop.py --model "$fp16" --label fp16 --nhwc off on --json "$work/ort-bare-fp16.json"
      keep "$work"/ort-bare-*.json ;;
    ort-table)
      second="$work/ort2.json"; [ -f "$second" ] || second=-
      python3 benchmarks/device/torch_repro.py table "$work/ort1.json" "$second" "$work"/ort-bare-*.json \
        | tee "$work/ort-table.txt"; keep "$work/ort-table.txt" ;;
    native)
      for mode in eager compile; do
        python3 benchmarks/native_vs_interpreter.py --source module:torchvision.models:resnet50 \
          --shape batch,3,224,224 --device cuda --mode $mode --precision fp16 --rounds 5 --queries 200 \
          --cache "$work/native-cache"
      done 2>&1 | tee "$work/native.txt"; keep "$work/native.txt" ;;
    *) echo "unknown stage $stage (gpu run1 run2 bare bare-compile table ort1 ort2 ort-bare ort-table native all)" >&2
       exit 2 ;;
  esac
done
