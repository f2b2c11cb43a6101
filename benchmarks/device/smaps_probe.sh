#!/usr/bin/env bash
# Does reading a CUDA process's /proc/PID/smaps_rollup (psutil's memory_full_info, what farm's cell
# worker polled every 0.25 s for PSS) slow that process's host-bound work? The same in-process
# comparison (benchmarks/torch_harness_overhead.py, compile fp16 b1) three ways: nobody reading, another
# process reading smaps_rollup every 0.25 s, and reading /proc/PID/statm (RSS only) every 0.25 s.
# Prints also how long one smaps_rollup read of that process takes.
cd "$(dirname "$0")/../.."
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
for reader in none smaps_rollup statm; do
  python3 benchmarks/torch_harness_overhead.py --mode "${MODE:-compile}" --batch 1 --rounds 7 --cache /tmp/nc \
    > /tmp/probe.$reader.txt 2>&1 &
  pid=$!
  if [ "$reader" != none ]; then
    while kill -0 $pid 2>/dev/null; do cat /proc/$pid/$reader > /dev/null 2>&1; sleep 0.25; done &
  fi
  sleep 25; s=$(date +%s%N); cat /proc/$pid/smaps_rollup > /dev/null 2>&1; e=$(date +%s%N)
  wait $pid
  echo "== reader $reader (one smaps_rollup read at 25 s: $(( (e - s) / 1000 )) us)"
  grep -E "median|farm / bare" /tmp/probe.$reader.txt
done
