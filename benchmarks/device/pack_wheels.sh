#!/usr/bin/env bash
# Here (no GPU needed): download the wheels the GPU machines lack (Python 3.12, x86-64) and cut
# them into parts small enough to travel with one `run` call each (the working tree and the carry
# share 64 MiB). The parts land in .whl/parts/NN/ (ignored by git), with a manifest of their
# sha256. Then, on the device, back to back (a machine stays warm 30 s after each call):
#   run(carry=[".whl/parts/01"], command="bash benchmarks/device/setup.sh")   ... up to the last part
# setup.sh keeps each part in /tmp, and when every part is there joins them and installs them
# into the machine's own Python (the one with torch): then `python3 -m farm ...` runs there.
set -euo pipefail
cd "$(dirname "$0")/../.."
part_mb=${PART_MB:-50}  # the working tree (about 10 MiB, examples/results most of it) travels too
mkdir -p .whl/all
# what the machines lack: farm's own dependencies (pydantic v2, duckdb, ray, polygraphy, rich,
# onnxconverter-common, ...), nvidia-ml-py and the CUDA 13 build of ONNX Runtime; numpy, torch,
# onnx, pyarrow, pandas and scipy are there already (a wheel already installed is skipped there)
.venv/bin/pip download -q --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
  --platform any -d .whl/all ray==2.60.0 duckdb pydantic polygraphy onnxruntime-gpu==1.31.1 nvidia-ml-py rich \
  onnxconverter-common py-cpuinfo psutil graphviz pillow pytz
# torch.onnx's dynamo exporter (onnxscript, onnx-ir) and timm (benchmarks/model_corpus.py), without
# their dependencies: the machines' torch, torchvision and huggingface_hub are the ones to use
.venv/bin/pip download -q --no-deps -d .whl/all onnxscript onnx-ir timm
rm -rf .whl/parts && mkdir -p .whl/parts
# smallest first: the first part then holds every wheel but ray's and ONNX Runtime's, which setup.sh
# installs at once, so that farm runs (torch cells, --executor local) from the first call on
(cd .whl/all && ls -Sr *.whl | grep -v -e '^numpy-' -e '^onnx-' > ../wheels.txt && tar cf - -T ../wheels.txt) \
  | split -b "${part_mb}M" -d -a 2 - .whl/parts/wheels.tar.
count=0
for f in .whl/parts/wheels.tar.*; do
  count=$((count + 1)); n=$(printf %02d "$count")
  mkdir -p ".whl/parts/$n" && mv "$f" ".whl/parts/$n/"
done
(cd .whl/parts && sha256sum */wheels.tar.* > manifest.sha256)
for n in $(seq -f %02g 1 "$count"); do cp .whl/parts/manifest.sha256 ".whl/parts/$n/"; done
echo "$count parts of at most ${part_mb} MiB in .whl/parts/ (carry them one per call, in order)"
