#!/usr/bin/env bash
# Runs every GPU check of docs/gpu.md on a machine with an NVIDIA GPU and no
# Go, in one go (about 6 minutes on an H200, estimated), and writes the logs to OUT:
#
#   OUT/gpu.txt            nvidia-smi's name, driver and memory of the GPU
#   OUT/gpu-test.txt       the gpu package's tests (cuda-bin/gpu.test -test.v):
#                          every device op against the CPU, clip-tiny end to
#                          end, the bf16/fp16/tf32 products and features
#   OUT/bench-subtta.txt   subtta bench --device cuda, fp32 (TF32 off), batch 64:
#                          forward, forward+backward, the SubTTA step
#   OUT/bench-torch.json   PyTorch eager on the same GPU doing the same work
#                          straight after (scripts/torch_vitb32_cuda.py), and its
#                          forward pass at batch 64 and 256 in fp32, TF32 and
#                          autocast bf16 and fp16 (.txt: what it printed)
#   OUT/bench-matrix.txt   subtta bench --device cuda --only forward at batch 64
#                          and 256 with --precision fp32, tf32, bf16 and fp16
#   OUT/eval-P.txt         the README's run (subtta eval --device cuda, the
#                          built-in model and images) with --precision P, for P
#                          fp32 (the CPU's table: 54.01 / 54.04 / 55.10), bf16
#                          and fp16 (within 0.3 points of fp32 is the aim)
#   OUT/ncu.txt            with NCU=1 only: ncu's duration of 60 kernels of a
#                          forward pass at batch 64 (after the warm-up pass);
#                          OUT/ncu-bf16.txt the same with --precision bf16
#
# It expects, in the repository root: cuda-bin/ (scripts/build-cuda.sh),
# SHARED (default ../shared: at least fixtures/ and assets/clip/), and CLIPSRC
# (default .cache/clipsrc: OpenAI's clip package, made by
# ../shared/bench/extract_openai_clip.sh) for the PyTorch figures. Each step
# has a time limit (LIMIT seconds, default 240), so one that hangs costs no
# more.
#
# Usage: [OUT=DIR] [SHARED=DIR] [CLIPSRC=DIR] [NCU=1] scripts/gpu-run.sh [test|bench|matrix|eval]
# (all four by default; `test` needs cuda-bin/gpu.test and SHARED, the others
# cuda-bin/subtta and, for PyTorch, CLIPSRC).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-gpu-results}
shared=$(realpath "${SHARED:-../shared}")
clipsrc=${CLIPSRC:-.cache/clipsrc}
limit=${LIMIT:-240}
mkdir -p "$out"
status=0
start=$SECONDS

what=${1:-all}
step() { echo "== $* ($((SECONDS - start)) s)" >&2; }

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt"
if [ "$what" = all ] || [ "$what" = test ]; then
  step "device tests"
  # In the package's folder, as go test runs it (testdata/).
  (cd gpu && SUBTTA_SHARED=$shared timeout "$limit" ../cuda-bin/gpu.test -test.v -test.count=1) 2>&1 |
    tee "$out/gpu-test.txt" || status=1
fi
if [ "$what" = all ] || [ "$what" = bench ]; then
  step "subtta bench, fp32, batch 64"
  timeout "$limit" cuda-bin/subtta bench --device cuda --reps 5 2>&1 | tee "$out/bench-subtta.txt" || status=1
  if [ -d "$clipsrc" ]; then
    step "PyTorch: the same work, then its forward matrix"
    PYTHONUNBUFFERED=1 timeout "$limit" python3 scripts/torch_vitb32_cuda.py --clip-src "$clipsrc" \
      --matrix-batches 64,256 --json "$out/bench-torch.json" 2>&1 | tee "$out/bench-torch.txt" || status=1
  else
    echo "no $clipsrc: PyTorch's figures skipped" >&2
    status=1
  fi
fi
if [ "$what" = all ] || [ "$what" = matrix ]; then
  : >"$out/bench-matrix.txt"
  for batch in 64 256; do
    for prec in fp32 tf32 bf16 fp16; do
      step "subtta bench --only forward, $prec, batch $batch"
      timeout "$limit" cuda-bin/subtta bench --device cuda --only forward --reps 5 --batch-size "$batch" \
        --precision "$prec" 2>&1 | tee -a "$out/bench-matrix.txt" || status=1
    done
  done
fi
if [ "$what" = all ] || [ "$what" = eval ]; then
  for prec in fp32 bf16 fp16; do
    step "subtta eval --device cuda --precision $prec"
    rm -rf "$out/eval-$prec"
    timeout "$limit" cuda-bin/subtta eval --device cuda --precision "$prec" --quiet --out "$out/eval-$prec" 2>&1 |
      tee "$out/eval-$prec.txt" || status=1
  done
fi
if [ "${NCU:-}" = 1 ] && command -v ncu >/dev/null; then
  # 60 kernels of the second of four forward passes (a pass is about 180
  # launches, cuBLAS's included: 14 a block; the first is bench's warm-up):
  # their durations say where the GPU's time goes. Our kernels of a block:
  # layer_norm_rows, split_heads (the split adding in_proj's bias, and the
  # merge, into 16 bits in bf16), softmax_rows, bias_residual and bias_act;
  # in bf16 also to_half16, in the first pass only (the weights); the rest
  # is cuBLAS's.
  step "ncu"
  timeout "$limit" ncu --launch-skip 300 --launch-count 60 --section SpeedOfLight \
    cuda-bin/subtta bench --device cuda --only forward --reps 3 --batch-size 64 >"$out/ncu.txt" 2>&1 || status=1
  step "ncu, bf16"
  timeout "$limit" ncu --launch-skip 300 --launch-count 60 --section SpeedOfLight \
    cuda-bin/subtta bench --device cuda --only forward --reps 3 --batch-size 64 --precision bf16 >"$out/ncu-bf16.txt" 2>&1 || status=1
fi
step "done"
exit $status
