#!/usr/bin/env bash
# On a GPU server without network: gather the wheel parts copied to it so far (.whl/parts/NN/,
# made on a machine with network by pack_wheels.sh; copied one or more at a time) in /tmp; once every part of the manifest is there, join, check and install
# them into the Python that has the machine's torch (python3 on PATH: /opt/torch/.venv), so one
# interpreter has torch, onnx, numpy and farm's dependencies. The machine is bare each time it
# starts, so nothing else is touched. Prints "ready" when done, "have K of N parts" before (and
# installs at once the wheels already complete: farm's small dependencies come in the first part).
set -euo pipefail
cd "$(dirname "$0")/../.."
store=/tmp/farm-wheels
mkdir -p "$store"
if [ -f "$store/.ready" ]; then echo "ready: $(command -v python3) (already)"; exit 0; fi
for dir in .whl/parts/*/; do
  [ -f "$dir/manifest.sha256" ] || continue
  cp "$dir"/manifest.sha256 "$store/"
  for f in "$dir"/wheels.tar.*; do [ -f "$f" ] && cp "$f" "$store/"; done
done
[ -f "$store/manifest.sha256" ] || { echo "no wheel parts here: copy .whl/parts/01 (made by pack_wheels.sh) into this checkout first" >&2; exit 2; }
total=$(wc -l < "$store/manifest.sha256")
have=$(ls "$store"/wheels.tar.* 2>/dev/null | wc -l)
if [ "$have" -lt "$total" ]; then
  # the wheels complete in the parts so far (pack_wheels.sh puts the small ones first), without
  # their dependencies: farm's own (pydantic, duckdb, rich, ...) work from the first part on
  early=$store/early && mkdir -p "$early"
  cat "$store"/wheels.tar.* | tar xf - -C "$early" 2>/dev/null || true
  ready=()
  for w in "$early"/*.whl; do
    [ -f "$w.done" ] && continue
    python3 -m zipfile -t "$w" >/dev/null 2>&1 && ready+=("$w")
  done
  if [ ${#ready[@]} -gt 0 ]; then
    python3 -m pip install -q --no-deps "${ready[@]}" && for w in "${ready[@]}"; do touch "$w.done"; done
  fi
  echo "have $have of $total parts; installed early: $(ls "$early"/*.done 2>/dev/null | wc -l) wheels"
  exit 0
fi
(cd "$store" && sed 's#[0-9]*/wheels#wheels#' manifest.sha256 | sha256sum -c --quiet)
mkdir -p "$store/wheels" && cat "$store"/wheels.tar.* | tar xf - -C "$store/wheels"
python3 -m pip install -q --no-index --find-links "$store/wheels" "$store"/wheels/*.whl
python3 -c "import onnxruntime as o, duckdb, pydantic, torch; o.preload_dlls(); print('providers', o.get_available_providers())"
ls "$store"/wheels/ray-*.whl >/dev/null 2>&1 && python3 -c "import ray"  # a LEAN=1 wheelhouse has no Ray
touch "$store/.ready"
echo "ready: $(command -v python3)"
