#!/usr/bin/env bash
# On a GPU machine: measure again the cells of examples/results that are not ok (failed, skipped) for
# one sweep file, by resuming a copy of the warehouse, and send back what that run wrote:
#
#   bash benchmarks/device/resume_examples.sh configs/gpu-engines.toml
#   bash benchmarks/device/resume_examples.sh benchmarks/device/gpu-engines-ort-fp16.toml --force
#
# Arguments after the sweep file go to `farm sweep` (--force: measure the file's cells again even
# where they are ok, e.g. a subset of a sweep after a change in how farm runs them).
#
# The copy lives in $RESUME_DIR (default /tmp/resume-examples; kept while the machine is, so a call
# stopped by its time limit resumes where it stopped when this runs again). The files written since
# the copy was made go to $OUT/new-files.tar; here, `tar xf new-files.tar -C examples/results` puts
# them beside the old ones (a cell's newer files replace its failed record: farm check shows one row).
set -uo pipefail
cd "$(dirname "$0")/../.."
config=${1:?usage: resume_examples.sh SWEEP_FILE [farm sweep options]}
shift
work=${RESUME_DIR:-/tmp/resume-examples}
if [ ! -f "$work/.start" ]; then
  rm -rf "$work" && cp -r examples/results "$work" && touch "$work/.start" && sleep 1
fi
export PYTHONUNBUFFERED=1
timeout "${RESUME_S:-540}" python3 -m farm sweep "$config" --results "$work" "$@" > "$work.log" 2>&1
echo "sweep exit $?"; grep -vE "^\s*$" "$work.log" | tail -45 | cut -c1-160
# a narrower sweep file of the same name measures a subset: the sweep stays the full one
name=$(python3 -c "import sys, tomllib; print(tomllib.load(open(sys.argv[1], 'rb'))['name'])" "$config")
python3 benchmarks/device/keep_plan.py "$work" "$name"
(cd "$work" && find . -type f -newer .start ! -path './.cache/*' ! -name '*.lock' ! -name .farm-warehouse | sort > "$work.files")
echo "$(wc -l < "$work.files") files written"
(cd "$work" && tar cf "${OUT:-/tmp}/new-files.tar" -T "$work.files")
[ -n "${OUT:-}" ] && cp "$work.log" "$OUT/resume.log"
exit 0
