#!/usr/bin/env bash
# On a GPU machine, after setup.sh: benchmarks/scaling.py's counts (default "2 1", cold caches)
# of a sweep (default configs/gpu-resnet50.toml; SWEEP= in the environment for another, or several
# separated by colons, each with the same counts, one after the other), for runs longer than one
# remote command may last (a 1-GPU count of gpu-resnet50 takes 13 minutes or more). A count given
# twice is measured twice (scaling.py: gpus2, gpus2-run2).
#   bash benchmarks/device/scaling_counts.sh start [COUNTS...]   # returns at once; the job runs on
#   bash benchmarks/device/scaling_counts.sh wait [SECONDS]       # until it ends or SECONDS pass
# `start` copies the checkout to /tmp/farm-scaling/code and runs there in a process session of
# its own (setsid), so it outlives the command that started it; `wait` says where it is and copies
# each sweep's per-cell CSV (cells-NAME.csv), the logs and the warehouses' tables (tar; without the
# per-query samples and layers, which pass no size limit of a copy) to $OUT, done or not.
# `wait` on a machine where nothing was started says so at once.
set -uo pipefail
cd "$(dirname "$0")/../.."
job=/tmp/farm-scaling
verb=${1:-wait}
shift || true
shopt -s nullglob
running() { [ -f "$job/pid" ] && kill -0 "$(cat "$job/pid")" 2>/dev/null; }
if [ "$verb" = start ]; then
  if running; then echo "a run is under way (pid $(cat "$job/pid")): wait for it first" >&2; exit 2; fi
  rm -rf "$job" && mkdir -p "$job/code"
  tar cf - --exclude=./.whl . | tar xf - -C "$job/code"
  counts=${*:-2 1}
  IFS=: read -ra sweeps <<< "${SWEEP:-configs/gpu-resnet50.toml}"
  for sweep in "${sweeps[@]}"; do [ -f "$sweep" ] || { echo "no sweep file $sweep" >&2; exit 2; }; done
  {
    echo "echo \$\$ > $job/pid"
    echo "cd $job/code"
    # no network there: a hub lookup of a corpus model would only wait through its retries
    echo "export PYTHONPATH=\$PWD PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=\${HF_HUB_OFFLINE:-1}"
    i=0
    for sweep in "${sweeps[@]}"; do
      name=$(basename "$sweep" .toml | tr -c 'A-Za-z0-9._\n-' _)
      for n in $counts; do
        i=$((i + 1))
        echo "echo \"$name count $n from \$(date +%s)\" >> $job/progress"
        echo "python3 benchmarks/scaling.py $(printf %q "$sweep") --gpus $n --scratch $job/scratch/$name --cold \\"
        echo "  --csv $job/cells-$name.csv > $job/run$i-$name-gpus$n.log 2>&1"
      done
    done
    echo "echo \"done \$(date +%s)\" >> $job/progress"
  } > "$job/run.sh"
  setsid nohup bash "$job/run.sh" > "$job/run.out" 2>&1 < /dev/null &
  echo $! > "$job/pid"  # run.sh writes its own at once (setsid may have forked)
  echo "started: counts $counts of ${sweeps[*]} (logs in $job)"
  exit 0
fi
[ -f "$job/pid" ] || { echo "nothing started on this machine (it may be a fresh one)"; exit 3; }
touch "$job/progress"
limit=${1:-540}
while ! grep -q '^done' "$job/progress" && running && [ "$SECONDS" -lt "$limit" ]; do sleep 5; done
cat "$job/progress"
grep -q '^done' "$job/progress" || running || echo "the run ended before it was done: $job/run.out, the logs below"
for log in "$job"/run*-gpus*.log; do
  echo "== $log: $(grep -c '^ok' "$log") cells ok so far"
  if grep -q '^real sweeps' "$log"; then
    grep -v '^\s*$' "$log" | grep -A30 '^real sweeps\|per cell (median' | tail -40
  else
    tail -5 "$log"
  fi
done
# What is there comes back after every wait, so a job cut short (the machine's time spent) keeps the
# counts it finished; the tar of a job not done is named -partial (a count under way may be half written).
if [ -n "${OUT:-}" ]; then
  tarname=scaling-warehouses.tgz
  grep -q '^done' "$job/progress" || tarname=scaling-warehouses-partial.tgz
  mkdir -p "$OUT" && cp "$job"/*.log "$job"/*.csv "$job/progress" "$OUT"/ 2>/dev/null
  [ -d "$job/scratch" ] && tar czf "$OUT/$tarname" -C "$job" --exclude='scratch/*/*/*/samples' \
    --exclude='scratch/*/*/*/layers' --exclude='scratch/*/*/.cache' scratch
fi
true
