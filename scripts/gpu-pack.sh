#!/usr/bin/env bash
# Prepares, here, what each call of scripts/gpu-run.sh on a lent GPU machine
# needs beside the repository, and checks that each call's share fits the
# 64 MiB that travel with a call (the repository's tracked files count too):
#
#   cuda-bin/gpu.test.xz, cuda-bin/subtta.xz   (scripts/build-cuda.sh, run first)
#   .cache/shared/fixtures/*                   the fixtures gpu.test reads, the
#                                              compressible ones as .xz
#   .cache/shared/assets/...                   clean's and feed's JPEGs and class names
#   .cache/clipsrc                             OpenAI's clip package for PyTorch's figures
#                                              (CLIPSRC=DIR: extract_openai_clip.sh's output)
#
# The checks do not fit one call: it prints two, each with the paths to
# carry and their size: the command's (the comparison with PyTorch, the
# kernel profile, the README run, clean accuracy, feed: three to four
# minutes on an H200), then the device tests' (gpu.test and clip-tiny's weights
# leave no room for the command). scripts/gpu-run.sh unpacks the .xz files
# it finds before it starts.
#
# Usage: [SHARED=DIR] [CLIPSRC=DIR] scripts/gpu-pack.sh
set -euo pipefail
# SHARED and CLIPSRC are taken from where the script is called; ../shared
# from the repository root.
clipsrc=${CLIPSRC:+$(realpath -m "$CLIPSRC")}
[ -z "${SHARED:-}" ] || SHARED=$(realpath -m "$SHARED")
cd "$(dirname "$0")/.."
shared=$(realpath "${SHARED:-../shared}")
budget=$((64 * 1024 * 1024))
for b in cuda-bin/gpu.test.xz cuda-bin/subtta.xz; do
  [ -f "$b" ] || { echo "gpu-pack: no $b: run scripts/build-cuda.sh first" >&2; exit 1; }
done
mkdir -p .cache/shared/fixtures .cache/shared/assets/cifar10 .cache/shared/assets/labels
for f in clip-tiny.openai.safetensors clip-tiny.config.json forward.json; do
  cp "$shared/fixtures/$f" .cache/shared/fixtures/
done
for f in preprocess.safetensors forward.safetensors; do # mostly structure: xz takes them to a tenth
  rm -f ".cache/shared/fixtures/$f"
  xz -T0 -6 -c "$shared/fixtures/$f" >".cache/shared/fixtures/$f.xz"
done
cp "$shared/assets/cifar10/test-jpg.tar.gz" .cache/shared/assets/cifar10/
cp "$shared/assets/labels/imagenet_classes_openai.txt" .cache/shared/assets/labels/
if [ -n "$clipsrc" ] && [ "$clipsrc" != "$(realpath -m .cache/clipsrc)" ]; then
  [ -f "$clipsrc/clip/model.py" ] || {
    echo "gpu-pack: CLIPSRC=$CLIPSRC has no clip/model.py: give extract_openai_clip.sh's output" >&2
    exit 1
  }
  rm -rf .cache/clipsrc.tmp
  cp -r "$clipsrc" .cache/clipsrc.tmp
  rm -rf .cache/clipsrc
  mv .cache/clipsrc.tmp .cache/clipsrc
fi
[ -d .cache/clipsrc ] || echo "gpu-pack: no .cache/clipsrc (CLIPSRC=DIR): the bench call will have no PyTorch figures" >&2

tracked=$(git ls-files -z | xargs -0 stat -c %s | awk '{ s += $1 } END { print s }')
size() { du -sb "$@" 2>/dev/null | awk '{ s += $1 } END { print s + 0 }'; }
status=0
call() { # call NAME PARTS PATHS...
  local name=$1 parts=$2
  shift 2
  local total=$((tracked + $(size "$@")))
  local verdict=fits
  if [ "$total" -gt "$budget" ]; then
    verdict="TOO LARGE"
    status=1
  fi
  # A lent machine returns at most 8 files of 16 MiB from $OUT: the logs go back as one
  # archive, without feed's model and folder (half a gigabyte).
  # The lent machine sets OUT to the folder that comes back: gpu-run.sh
  # gets its own, and the archive goes to the machine's.
  printf '%s: %d KiB of 65536 (%s)\n  carry: %s\n  run:   R=$OUT; OUT=gpu-results SHARED=.cache/shared scripts/gpu-run.sh %s; tar czf "$R/gpu-results-%s.tgz" --exclude=feed-work gpu-results\n' \
    "$name" $((total / 1024)) "$verdict" "$*" "$parts" "${name%%.*}"
}
echo "the repository's tracked files: $((tracked / 1024)) KiB"
call "1. the comparison with PyTorch, the profile, the README run, clean accuracy, feed" "bench matrix profile eval clean feed" \
  cuda-bin/subtta.xz .cache/clipsrc .cache/shared/assets
call "2. the device tests" "test" cuda-bin/gpu.test.xz .cache/shared/fixtures
exit $status
