#!/usr/bin/env bash
# Runs every GPU check of docs/gpu.md on a machine with an NVIDIA GPU and no
# Go, in one go, and writes the logs to OUT:
#
#   OUT/gpu-test.txt       the gpu package's tests (cuda-bin/gpu.test -test.v),
#                          clip-tiny end to end among them, TF32 off
#   OUT/bench-subtta.txt   subtta bench --device cuda (ViT-B/32, random weights)
#   OUT/bench-torch.json   PyTorch eager on the same GPU doing the same work,
#                          straight after (scripts/torch_vitb32_cuda.py)
#
# It expects, in the repository root: cuda-bin/ (scripts/build-cuda.sh),
# SHARED (default ../shared: at least fixtures/ and assets/clip/), and CLIPSRC
# (default .cache/clipsrc: OpenAI's clip package, made by
# ../shared/bench/extract_openai_clip.sh) for the PyTorch figures.
#
# Usage: [OUT=DIR] [SHARED=DIR] [CLIPSRC=DIR] scripts/gpu-run.sh [test|bench]
# (both by default; `test` needs cuda-bin/gpu.test and SHARED, `bench`
# cuda-bin/subtta and CLIPSRC).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-gpu-results}
shared=$(realpath "${SHARED:-../shared}")
clipsrc=${CLIPSRC:-.cache/clipsrc}
mkdir -p "$out"
status=0

what=${1:-all}

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt"
if [ "$what" = all ] || [ "$what" = test ]; then
  # In the package's folder, as go test runs it (testdata/).
  (cd gpu && SUBTTA_SHARED=$shared ../cuda-bin/gpu.test -test.v -test.count=1) 2>&1 |
    tee "$out/gpu-test.txt" || status=1
fi
if [ "$what" = all ] || [ "$what" = bench ]; then
  cuda-bin/subtta bench --device cuda --reps 5 2>&1 | tee "$out/bench-subtta.txt" || status=1
  if [ -d "$clipsrc" ]; then
    PYTHONUNBUFFERED=1 python3 scripts/torch_vitb32_cuda.py --clip-src "$clipsrc" --json "$out/bench-torch.json" || status=1
  else
    echo "no $clipsrc: PyTorch's figures skipped" >&2
    status=1
  fi
fi
exit $status
