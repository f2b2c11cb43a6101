#!/usr/bin/env bash
# The wheelhouse of a GPU machine without network (bin/wheelhouse: Python 3.12, the gpu, serving and quantization extras),
# plus the dynamo exporter's onnxscript/onnx-ir, timm, scikit-learn and skl2onnx for the model corpus, cut into
# parts of at most PART_MB (default 50) MiB, for a copy to the server that limits each file's size: the
# parts land in .whl/parts/NN/ (ignored by git) with a manifest of their sha256. setup.sh, run
# there once per part in order, keeps them and, when every part has come, joins them and installs
# the wheels into that machine's own Python (the one with its torch). numpy and onnx, which the
# machines have, are left out of the parts.
set -euo pipefail
cd "$(dirname "$0")/../.."
part_mb=${PART_MB:-46}  # the working tree (about 14 MiB) travels beside each part, under 64 MiB a call
# LEAN=1: only what sweeps with --executor local need (no Ray, no corpus libraries, not pyarrow, which
# the machines have): 8 parts instead of 13, a lease's setup in about 2.5 minutes
rm -rf .whl/all && mkdir -p .whl/all
# the versions measured there: ONNX Runtime's CUDA 13 build and the Ray the figures were taken with
printf 'onnxruntime-gpu==1.31.1\nray==2.60.0\n' > .whl/constraints.txt
PIP_CONSTRAINT=$PWD/.whl/constraints.txt bash bin/wheelhouse .whl/all 3.12 gpu,serving,quantization
rm -f .whl/all/farm-*.whl  # farm itself runs from the checkout there
# without their dependencies: the machines' torch, torchvision and huggingface_hub are the ones to use
python3 -m pip download -q --no-deps -d .whl/all onnxscript onnx-ir timm skl2onnx joblib threadpoolctl
# scikit-learn, whose estimators the corpus converts with skl2onnx: built for that machine's Python
python3 -m pip download -q --no-deps -d .whl/all --only-binary=:all: --python-version 3.12 \
  --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 --implementation cp scikit-learn
rm -rf .whl/parts && mkdir -p .whl/parts
# smallest first: the first part then holds every wheel but the largest, which setup.sh installs
# at once, so that farm runs (torch cells, --executor local) from the first part on
lean=()
[ "${LEAN:-0}" = 1 ] && lean=(-e '^ray-' -e '^scikit_learn' -e '^pandas' -e '^timm' -e '^skl2onnx' -e '^joblib' \
  -e '^threadpoolctl' -e '^pyarrow' -e '^pillow')
(cd .whl/all && ls -Sr *.whl | grep -v -e '^numpy-' -e '^onnx-1' -e '^onnxruntime-1' "${lean[@]}" > ../wheels.txt \
  && tar cf - -T ../wheels.txt) | split -b "${part_mb}M" -d -a 2 - .whl/parts/wheels.tar.
count=0
for f in .whl/parts/wheels.tar.*; do
  count=$((count + 1)); n=$(printf %02d "$count")
  mkdir -p ".whl/parts/$n" && mv "$f" ".whl/parts/$n/"
done
(cd .whl/parts && sha256sum */wheels.tar.* > manifest.sha256)
for n in $(seq -f %02g 1 "$count"); do cp .whl/parts/manifest.sha256 ".whl/parts/$n/"; done
echo "$count parts of at most ${part_mb} MiB in .whl/parts/ (run setup.sh with each, in order)"
