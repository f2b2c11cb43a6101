#!/usr/bin/env bash
# Farm against the bare loop on one GPU: the 18 torch CUDA cells of ResNet-50 (benchmarks/device/farm-vs-bare-torch.toml,
# torchvision's module) swept twice into two fresh warehouses, beside benchmarks/torch_bare_loop.py
# (torchvision ResNet-50, channels_last, no farm code); one table of both runs and the bare loop.
# The same for ONNX Runtime's CUDA provider: benchmarks/device/farm-vs-bare-ort.toml swept twice beside
# benchmarks/ort_bare_loop.py over the very ONNX files those cells ran.
#
#   bash benchmarks/device/farm_vs_bare.sh all                  # the torch stages, in order
#   bash benchmarks/device/farm_vs_bare.sh run1 bare            # or stages, over several calls:
#   bash benchmarks/device/farm_vs_bare.sh run2 bare-compile table
#   bash benchmarks/device/farm_vs_bare.sh ort1 ort2 ort-bare ort-table
#
# Stages: gpu (what the machine is), run1, run2, bare (eager + CUDA graphs), bare-compile, table;
# ort1, ort2, ort-bare, ort-table, ort-overhead (benchmarks/ort_harness_overhead.py on six of ort1's
# cells); native (farm's ONNX interpreter against the nn.Module itself,
# ResNet-50 fp16 batch 1, eager and compile).
# Host-bound cells only, with longer windows (5 x 4 s, the bare loop 5 x 1000 queries):
#   FARM_VS_BARE_SWEEP=benchmarks/device/farm-vs-bare-torch-hostbound.toml \
#   FARM_VS_BARE_BARE_ARGS="--batches 1 32 --rounds 5 --queries 1000 --warmup-s 3" bash ... bare run1 ...
# Each bare run writes a file of its own (bare-eager-1.json, bare-eager-2.json, ...): the table
# takes their median and shows how far apart they are.
# FARM_VS_BARE_ORT_SWEEP names another sweep file for ort1 / ort2 (e.g. farm-vs-bare-ort-fp16.toml).
# Sweeps run on farm's Ray executor (the product's path; FARM_VS_BARE_EXECUTOR=local for in-process).
# State lives in $FARM_VS_BARE_DIR (default /tmp/farm-vs-bare, kept while the machine is); each
# stage's JSON and logs are copied to $OUT when set (the folder you copy back from the GPU server).
# A sweep stopped by its time limit resumes where it stopped when its stage runs again.
set -uo pipefail
cd "$(dirname "$0")/../.."
work=${FARM_VS_BARE_DIR:-/tmp/farm-vs-bare}
sweep=${FARM_VS_BARE_SWEEP:-benchmarks/device/farm-vs-bare-torch.toml}
bare_args=${FARM_VS_BARE_BARE_ARGS:-}
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
      file=$sweep; [[ $stage == ort* ]] && file=${FARM_VS_BARE_ORT_SWEEP:-benchmarks/device/farm-vs-bare-ort.toml}
      timeout "${FARM_VS_BARE_SWEEP_S:-520}" python3 -m farm sweep "$file" --executor "${FARM_VS_BARE_EXECUTOR:-ray}" --results "$work/$stage" \
        > "$work/$stage.log" 2>&1; echo "sweep exit $?"
      grep -E "^(ok|failed|skipped|unsupported|error)" "$work/$stage.log" | cut -c1-110
      python3 benchmarks/device/farm_vs_bare.py summarize "$work/$stage" "$work/$stage.json"
      keep "$work/$stage.json" "$work/$stage.log" ;;
    bare|bare-compile)  # each run its own file (bare-eager-1.json, ...): the table shows the bare loop's own drift
      modes="eager cudagraphs"; [ $stage = bare-compile ] && modes=compile
      n=1; while [ -f "$work/bare-${modes%% *}-$n.json" ]; do n=$((n + 1)); done
      python3 benchmarks/torch_bare_loop.py --modes $modes --json "$work/bare-${modes%% *}-$n.json" $bare_args
      keep "$work/bare-${modes%% *}-$n.json" ;;
    table)
      python3 benchmarks/device/farm_vs_bare.py table "$work/run1.json" "$work/run2.json" "$work"/bare*.json \
        | tee "$work/table.txt"; keep "$work/table.txt" ;;
    ort-bare)  # the files ort1's cells ran: the zoo's fp32 ResNet-50 and farm's fp16 transform of it
      fp32=$(ls "$work"/ort1/.cache/zoo/resnet50*.onnx | head -1)
      fp16=$(ls "$work"/ort1/.cache/precision/*.fp16.onnx | head -1)
      python3 benchmarks/ort_bare_loop.py --model "$fp32" --label fp32 --nhwc off on --json "$work/ort-bare-fp32.json"
      python3 benchmarks/ort_bare_loop.py --model "$fp32" --label tf32 --nhwc off on --json "$work/ort-bare-tf32.json"
      python3 benchmarks/ort_bare_loop.py --model "$fp16" --label fp16 --nhwc off on --json "$work/ort-bare-fp16.json"
      keep "$work"/ort-bare-*.json ;;
    ort-table)
      second="$work/ort2.json"; [ -f "$second" ] || second=-
      python3 benchmarks/device/farm_vs_bare.py table "$work/ort1.json" "$second" "$work"/ort-bare-*.json \
        | tee "$work/ort-table.txt"; keep "$work/ort-table.txt" ;;
    ort-overhead)  # farm's cell path beside the bare loop in one process, alternating (ort1's files)
      fp32=$(ls "$work"/ort1/.cache/zoo/resnet50*.onnx | head -1)
      fp16=$(ls "$work"/ort1/.cache/precision/*.fp16.onnx | head -1)
      { for cell in "fp16 128 --nhwc --graphs" "fp16 128" "fp16 32 --nhwc --graphs" "fp16 1 --graphs" \
                    "fp32 32" "tf32 32 --graphs"; do
          set -- $cell; file=$fp32; [ "$1" = fp16 ] && file=$fp16
          python3 benchmarks/ort_harness_overhead.py --model "$file" --precision "$1" --batch "$2" "${@:3}" \
            2>&1 | grep -v "No registered plugin EP"
        done; } | tee "$work/ort-overhead.txt"; keep "$work/ort-overhead.txt" ;;
    native)
      for mode in eager compile; do
        python3 benchmarks/native_vs_interpreter.py --source module:torchvision.models:resnet50 \
          --shape batch,3,224,224 --device cuda --mode $mode --precision fp16 --rounds 5 --queries 200 \
          --cache "$work/native-cache"
      done 2>&1 | tee "$work/native.txt"; keep "$work/native.txt" ;;
    *) echo "unknown stage $stage (gpu run1 run2 bare bare-compile table ort1 ort2 ort-bare ort-table ort-overhead native all)" >&2
       exit 2 ;;
  esac
done
