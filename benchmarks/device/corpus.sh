#!/usr/bin/env bash
# On a GPU machine without network, after setup.sh: the model corpus (benchmarks/model_corpus.py)
# on every engine, from the ONNX files extracted here beforehand and carried in
# .whl/corpus-*/models/ (copy them from a CPU run's --cache/models). Arguments go to
# model_corpus.py. A run stopped by its time limit (CORPUS_TIMEOUT seconds) counts the cells it
# finished, and resumes where it stopped when run again (the warehouse stays in $CORPUS_DIR while
# the machine is kept). The log, and the counts that
# docs/models.md's tables are made from (--json, --markdown), land in $OUT.
set -uo pipefail
cd "$(dirname "$0")/../.."
cache=${CORPUS_DIR:-/tmp/fc}
out=${OUT:-/tmp/corpus-out}
mkdir -p "$cache/models" "$out"
for d in .whl/corpus-*/models; do [ -d "$d" ] && cp -rn "$d"/* "$cache/models/"; done
ray stop --force >/dev/null 2>&1
export PYTHONUNBUFFERED=1
# the sweep stops at CORPUS_TIMEOUT and the cells done are counted (a partial counts file); the
# outer timeout is a backstop for a run that does not stop
limit=${CORPUS_TIMEOUT:-540}
timeout "$((limit + 180))" python3 benchmarks/model_corpus.py --device cuda --cache "$cache" --time-limit "$limit" \
  --wheels /tmp/no-wheels --json "$out/counts.json" "$@" > "$out/corpus.log" 2>&1
echo "exit $?"
tail -90 "$out/corpus.log"
