#!/usr/bin/env bash
# Runs every GPU check of docs/gpu.md on a machine with an NVIDIA GPU and no
# Go, in one go (two and a half minutes on an H200, measured), and writes the logs to OUT:
#
#   OUT/gpu.txt            nvidia-smi's name, driver and memory of the GPU
#   OUT/gpu-test.txt       the gpu package's tests (cuda-bin/gpu.test -test.v):
#                          every device op against the CPU, clip-tiny end to
#                          end, the bf16/fp16/tf32 products and features
#   OUT/bench-subtta.txt   subtta bench --device cuda, fp32 (TF32 off), batch 64:
#                          forward, forward+backward, the SubTTA step; then
#                          the forward lines again with --cuda-graphs=false,
#                          and those of bf16 op by op (against matrix's bf16
#                          line at batch 64, replayed)
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
#   OUT/clean.txt          the built-in model's accuracy on CIFAR-10's clean test
#                          set (SHARED's 10,000 JPEGs, subtta eval --methods
#                          source --corruptions clean) with --precision fp32,
#                          bf16 and fp16, and each one's difference to fp32
#                          (within 0.3 points is the aim)
#   OUT/feed.txt           whether decoding keeps the GPU fed: an ImageNet-C-
#                          shaped folder (224-pixel JPEGs of quality 85, made by
#                          subtta corrupt --dataset imagenet from SHARED's CIFAR-10
#                          test JPEGs), subtta eval --device cuda --methods source
#                          on it with ViT-B/32 (random weights, convert --random)
#                          and bench --only forward at the same batch size: both
#                          images/s, their ratio (the aim: 70% or more) and the
#                          host's cores
#   OUT/profile-*.csv      with the part `profile` (not in all): ncu's duration of
#                          every kernel of bench --only forward (fp32 and bf16,
#                          batch 64, op by op) and of bench --only subtta (one
#                          step after the warm-up), and OUT/profile.txt their sums
#                          by kernel a pass (scripts/ncu_kernels.py); about a
#                          minute
#   OUT/ncu.txt            with NCU=1 only: ncu's duration of 60 kernels of a
#                          forward pass at batch 64 (after the warm-up pass);
#                          OUT/ncu-bf16.txt the same with --precision bf16
#
# It expects, in the repository root: cuda-bin/ (scripts/build-cuda.sh; its
# .xz files, and those under .cache/, are unpacked first: scripts/gpu-pack.sh
# says what to carry for each call to a lent machine, whose 64 MiB hold
# only some parts at a time), SHARED (default ../shared: at least fixtures/
# and assets/clip/), and CLIPSRC
# (default .cache/clipsrc: OpenAI's clip package, made by
# ../shared/bench/extract_openai_clip.sh) for the PyTorch figures. Each step
# has a time limit (LIMIT seconds, default 240), so one that hangs costs no
# more.
#
# Usage: [OUT=DIR] [SHARED=DIR] [CLIPSRC=DIR] [NCU=1] scripts/gpu-run.sh [PART...]
# (PART: test, bench, matrix, eval, clean, feed, profile; the first six by default; `clean` needs SHARED's assets/cifar10/test-jpg.tar.gz; `test` needs cuda-bin/gpu.test and SHARED, the others
# cuda-bin/subtta and, for PyTorch, CLIPSRC; `feed` needs SHARED's
# assets/cifar10/test-jpg.tar.gz and assets/labels/imagenet_classes_openai.txt,
# and python3; FEED_IMAGES (default 10000) sets its number of images, WORK
# (default OUT/feed-work) where its model and folders go). With DRY_RUN=1,
# `feed` prepares its model and folder and prints the GPU commands without
# running them; FEED_DEVICE=cpu FEED_LIMIT=N FEED_REPS=1 run them on the CPU
# instead, N images a domain (both for checking the script without a GPU);
# FEED_DEVICE=cpu CLEAN_LIMIT=N does the same for `clean` (the CPU has no
# fp16: that line reads "none").
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-gpu-results}
shared=$(realpath "${SHARED:-../shared}")
clipsrc=${CLIPSRC:-.cache/clipsrc}
limit=${LIMIT:-240}
mkdir -p "$out"
status=0
start=$SECONDS

# CUDA's libraries: where the loader does not find the runtime (no toolkit
# on its path), those of PyTorch's wheels (site-packages/nvidia/*/lib).
if ! ldconfig -p 2>/dev/null | grep -q 'libcudart\.so'; then
  wheels=$(python3 -c 'import glob, os, nvidia
print(":".join(sorted(glob.glob(os.path.join(list(nvidia.__path__)[0], "*", "lib")))))' 2>/dev/null || true)
  if [ -n "$wheels" ]; then
    export LD_LIBRARY_PATH=$wheels${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    echo "CUDA's libraries from PyTorch's wheels: $wheels" >&2
  fi
fi

# What scripts/gpu-pack.sh compressed to travel: FILE.xz becomes FILE
# (executable under cuda-bin/), unless FILE is there and newer.
while IFS= read -r -d '' xz; do
  f=${xz%.xz}
  [ -e "$f" ] && [ "$f" -nt "$xz" ] && continue
  python3 -c 'import lzma, shutil, sys
with lzma.open(sys.argv[1]) as src, open(sys.argv[2], "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)' "$xz" "$f" || { echo "unpacking $xz failed" >&2; status=1; continue; }
  case $f in cuda-bin/*) chmod +x "$f" ;; esac
done < <(find cuda-bin .cache -name '*.xz' -print0 2>/dev/null)

what=" ${*:-all} "
# want PART: whether PART was asked for (or all).
want() { [[ $what == *" all "* || $what == *" $1 "* ]]; }
step() { echo "== $* ($((SECONDS - start)) s)" >&2; }

if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt"
else
  echo "no nvidia-smi" | tee "$out/gpu.txt"
fi
if want test; then
  step "device tests"
  # In the package's folder, as go test runs it (testdata/).
  (cd gpu && SUBTTA_SHARED=$shared timeout "$limit" ../cuda-bin/gpu.test -test.v -test.count=1) 2>&1 |
    tee "$out/gpu-test.txt" || status=1
fi
if want bench; then
  step "subtta bench, fp32, batch 64"
  timeout "$limit" cuda-bin/subtta bench --device cuda --reps 5 2>&1 | tee "$out/bench-subtta.txt" || status=1
  # The passes without gradients replay a CUDA Graph above (its "graphs:"
  # line says how many); here op by op, for the graphs' share.
  step "subtta bench --only forward, fp32, batch 64, op by op (--cuda-graphs=false)"
  timeout "$limit" cuda-bin/subtta bench --device cuda --only forward --reps 5 --cuda-graphs=false 2>&1 |
    tee -a "$out/bench-subtta.txt" || status=1
  # A bf16 pass is a quarter of fp32's time for as many launches: the same
  # pair of lines there (matrix's bf16 line at batch 64 is the replayed one).
  step "subtta bench --only forward, bf16, batch 64, op by op (--cuda-graphs=false)"
  timeout "$limit" cuda-bin/subtta bench --device cuda --only forward --reps 5 --precision bf16 --cuda-graphs=false 2>&1 |
    tee -a "$out/bench-subtta.txt" || status=1
  if [ -d "$clipsrc" ]; then
    step "PyTorch: the same work, then its forward matrix"
    PYTHONUNBUFFERED=1 timeout "$limit" python3 scripts/torch_vitb32_cuda.py --clip-src "$clipsrc" \
      --matrix-batches 64,256 --json "$out/bench-torch.json" 2>&1 | tee "$out/bench-torch.txt" || status=1
  else
    echo "no $clipsrc: PyTorch's figures skipped" >&2
    status=1
  fi
fi
if want matrix; then
  : >"$out/bench-matrix.txt"
  for batch in 64 256; do
    for prec in fp32 tf32 bf16 fp16; do
      step "subtta bench --only forward, $prec, batch $batch"
      timeout "$limit" cuda-bin/subtta bench --device cuda --only forward --reps 5 --batch-size "$batch" \
        --precision "$prec" 2>&1 | tee -a "$out/bench-matrix.txt" || status=1
    done
  done
fi
if want eval; then
  for prec in fp32 bf16 fp16; do
    step "subtta eval --device cuda --precision $prec"
    rm -rf "$out/eval-$prec"
    timeout "$limit" cuda-bin/subtta eval --device cuda --precision "$prec" --quiet --out "$out/eval-$prec" 2>&1 |
      tee "$out/eval-$prec.txt" || status=1
  done
fi
if want clean; then
  # The README's run has 1,000 images a domain; the clean test set gives
  # the precisions' accuracies on 10,000.
  : >"$out/clean.txt"
  for prec in fp32 bf16 fp16; do
    step "subtta eval --device ${FEED_DEVICE:-cuda} --precision $prec, CIFAR-10 clean"
    rm -rf "$out/clean-$prec"
    acc=$(timeout "$limit" cuda-bin/subtta eval --device "${FEED_DEVICE:-cuda}" --precision "$prec" --dataset cifar10-c \
      --data "$shared/assets/cifar10/test-jpg.tar.gz" --corruptions clean --methods source --limit "${CLEAN_LIMIT:-0}" \
      --quiet --out "$out/clean-$prec" 2>&1 | awk -F'|' '!done && $2 ~ /^ source / { gsub(/ /, "", $3); print $3; done = 1 }')
    echo "clean $prec ${acc:-none}" | tee -a "$out/clean.txt"
    [ -n "$acc" ] || status=1
  done
  awk '$3 != "none" { a[$2] = $3 }
       END { if (!("fp32" in a)) { print "clean: no fp32 figure"; exit 1 }
             for (p in a) if (p != "fp32") printf "clean: %s %.2f against fp32 %.2f: %+.2f points (aim: within 0.3)\n", p, a[p], a["fp32"], a[p] - a["fp32"] }' \
    "$out/clean.txt" | tee -a "$out/clean.txt" || status=1
fi
if want feed; then
  # eval --device cuda --methods source reads, decodes and preprocesses
  # every image on the host (the next batch while the GPU computes the
  # current one); bench's forward pass times the GPU alone on images
  # already in memory. Their ratio says whether the host keeps up.
  work=${WORK:-$out/feed-work}
  n=${FEED_IMAGES:-10000}
  batch=64
  mkdir -p "$work"
  step "feed: ViT-B/32 with random weights, an ImageNet-C-shaped folder of $n images"
  model=$work/vitb32-random.safetensors
  [ -f "$model" ] || cuda-bin/subtta convert --random --arch ViT-B-32-quickgelu "$model" || status=1
  # The clean images in ImageNet's layout: 1000 class folders (ImageNet-C's
  # classes are read by position), CIFAR-10's test JPEGs spread over them.
  rm -rf "$work/clean" "$work/imagenet-c"
  python3 - "$shared/assets/cifar10/test-jpg.tar.gz" "$work/clean" "$n" <<'PY' || status=1
import os, sys, tarfile
src, dst, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
with tarfile.open(src) as t:
    files = sorted((m for m in t.getmembers() if m.isfile() and m.name.lower().endswith(".jpg")), key=lambda m: m.name)
    for i, m in enumerate(files[:n]):
        d = os.path.join(dst, "c%04d" % (i % 1000))
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, m.name.replace("/", "_")), "wb") as f:
            f.write(t.extractfile(m).read())
PY
  # Resize(256), CenterCrop(224), the corruption, JPEG quality 85: what
  # ImageNet-C's files are. gaussian_noise makes the largest JPEGs (the
  # slowest to decode), contrast small ones.
  timeout "$limit" cuda-bin/subtta corrupt --dataset imagenet --data "$work/clean" --out "$work/imagenet-c" \
    --corruptions gaussian_noise,contrast --severities 5 || status=1
  device=${FEED_DEVICE:-cuda}
  evalcmd=(cuda-bin/subtta eval --device "$device" --dataset imagenet-c --data "$work/imagenet-c" --corruptions gaussian_noise,contrast
    --severities 5 --methods source --model "$model" --labels "$shared/assets/labels" --templates "a photo of a {}."
    --batch-size "$batch" --limit "${FEED_LIMIT:-0}" --quiet --out "$work/eval")
  benchcmd=(cuda-bin/subtta bench --device "$device" --only forward --reps "${FEED_REPS:-5}" --batch-size "$batch")
  if [ "${DRY_RUN:-}" = 1 ]; then
    echo "would run: ${evalcmd[*]}"
    echo "would run: ${benchcmd[*]}"
  else
    step "feed: subtta eval --device $device --methods source, then bench --only forward, batch $batch"
    rm -rf "$work/eval"
    # A group, not a pipeline: status stays this shell's.
    { echo "host: $(nproc) cores,$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-)"
      timeout "$limit" "${evalcmd[@]}" 2>&1 | grep -v '^|' || status=1
      timeout "$limit" "${benchcmd[@]}" 2>&1 || status=1
    } >"$out/feed.txt"
    cat "$out/feed.txt"
    # eval's line "source: N images in T s, R img/s" and bench's
    # "forward   F images/s".
    awk '/^source: .* img\/s/ { for (i = 1; i <= NF; i++) if ($(i+1) ~ /^img\/s/) e = $i }
         /^forward / { f = $2 }
         /^forward, next batch uploaded ahead / { for (i = 1; i <= NF; i++) if ($(i+1) == "images/s") a = $i }
         END { if (e && f) printf "feed: eval %.1f img/s, bench forward %.1f img/s: %.0f%% (aim: 70%% or more)\n", e, f, 100 * e / f
               else { print "feed: no figures found in the logs above"; exit 1 }
               if (a) printf "feed: bench forward with the next batch uploaded ahead %.1f img/s: eval at %.0f%% of it\n", a, 100 * e / a }' "$out/feed.txt" | tee -a "$out/feed.txt" || status=1
    # Where eval's time went: the method's steps alone (batches.jsonl's
    # seconds: the forward pass, upload and download) against the domains'
    # wall time, the rest being what the host does between steps (the
    # per-batch diagnostics: the batch covariance and its eigenvectors,
    # principal angles, cosines to the class vectors; reading a batch the
    # pipe has not finished).
    python3 - "$work/eval" <<'PY' | tee -a "$out/feed.txt" || status=1
import json, os, sys
d = sys.argv[1]
steps = [json.loads(l) for l in open(os.path.join(d, "batches.jsonl"))]
recs = [json.loads(l) for l in open(os.path.join(d, "results.jsonl"))]
n, step_s, wall_s = sum(b["size"] for b in steps), sum(b["seconds"] for b in steps), sum(r["seconds"] for r in recs)
print("feed: %d images; the method's steps %.2f s (%.1f img/s), the domains' wall time %.2f s (%.1f img/s): %.0f%% of it between steps"
      % (n, step_s, n / step_s, wall_s, n / wall_s, 100 * (wall_s - step_s) / wall_s))
PY
  fi
fi
if [[ $what == *" profile "* ]]; then
  # Every kernel's duration, one metric (one replay a kernel: some 20 s a
  # run): where a pass's and a step's GPU time goes, by kernel.
  if command -v ncu >/dev/null; then
    : >"$out/profile.txt"
    for run in "forward-fp32:--only forward --precision fp32" "forward-bf16:--only forward --precision bf16" \
      "subtta-step:--only subtta"; do
      name=${run%%:*}
      step "profile: ncu, $name"
      # shellcheck disable=SC2086 # the options are words
      timeout "$limit" ncu --metrics gpu__time_duration.sum --csv --print-units base \
        cuda-bin/subtta bench --device cuda ${run#*:} --reps 1 --batch-size 64 --cuda-graphs=false \
        >"$out/profile-$name.csv" 2>"$out/profile-$name.err" || status=1
      python3 scripts/ncu_kernels.py "$out/profile-$name.csv" | tee -a "$out/profile.txt" || status=1
    done
  else
    echo "profile: no ncu" | tee "$out/profile.txt"
    status=1
  fi
fi
if [ "${NCU:-}" = 1 ] && command -v ncu >/dev/null; then
  # 60 kernels of the second of four forward passes (a pass is about 150
  # launches, cuBLAS's included: 12 a block; the first is bench's warm-up):
  # their durations say where the GPU's time goes. Our kernels of a block:
  # layer_norm_rows (also writing the residual stream with the next
  # product's bias), split_heads (the split adding in_proj's bias, and the
  # merge, into 16 bits in bf16), softmax_rows and bias_act;
  # in bf16 also to_half16, in the first pass only (the weights); the rest
  # is cuBLAS's. Op by op (--cuda-graphs=false), so that the counts above
  # hold; a replay runs the same kernels.
  step "ncu"
  timeout "$limit" ncu --launch-skip 240 --launch-count 60 --section SpeedOfLight \
    cuda-bin/subtta bench --device cuda --only forward --reps 3 --batch-size 64 --cuda-graphs=false >"$out/ncu.txt" 2>&1 || status=1
  step "ncu, bf16"
  timeout "$limit" ncu --launch-skip 240 --launch-count 60 --section SpeedOfLight \
    cuda-bin/subtta bench --device cuda --only forward --reps 3 --batch-size 64 --precision bf16 --cuda-graphs=false >"$out/ncu-bf16.txt" 2>&1 || status=1
fi
step "done"
exit $status
