#!/usr/bin/env bash
# Builds the CUDA binaries to carry to a GPU machine that has CUDA 11–13 but
# no Go (docs/gpu.md):
#
#   OUT/gpu.test  the gpu package's tests, the clip-tiny end-to-end test among
#                 them (go test -c -tags cuda ./gpu)
#   OUT/subtta    the command (go build -tags cuda ./cmd/subtta)
#
# and prints the newest glibc symbol version each needs: the GPU machine's
# glibc must be at least that. CUDA is not needed here: the binaries dlopen
# it at run time. The tags netgo and osusergo keep the standard library's own
# cgo (DNS, user lookup) out, so the only C is gpu's and runtime/cgo's. Built
# on glibc ≥ 2.34 (where dlopen and pthread moved into libc) they need
# GLIBC_2.34: Ubuntu 22.04, Debian 12, RHEL 9 or newer. For an older glibc,
# run this script on a machine with that glibc.
#
# The binaries are built without their symbol tables and DWARF (-s -w: a
# panic still names its functions and lines) and also written xz-compressed
# (OUT/NAME.xz): what travels to a lent GPU machine must fit 64 MiB with the
# repository, so the compressed ones are what scripts/gpu-pack.sh lists, and
# scripts/gpu-run.sh unpacks them there (with python3's lzma).
#
# Usage: scripts/build-cuda.sh [OUT]   (default OUT: cuda-bin)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-cuda-bin}
mkdir -p "$out"
export CGO_ENABLED=1
tags="cuda netgo osusergo"
flags=(-tags "$tags" -trimpath -ldflags "-s -w")
go test -c "${flags[@]}" -o "$out/gpu.test" ./gpu
go build "${flags[@]}" -o "$out/subtta" ./cmd/subtta
for b in "$out/gpu.test" "$out/subtta"; do
  echo "$b: needs $(objdump -T "$b" | grep -o 'GLIBC_[0-9.]*' | sort -Vu | tail -1)"
  xz -T0 -6 -c "$b" >"$b.xz"
  echo "$b.xz: $(($(stat -c %s "$b.xz") / 1024)) KiB ($(($(stat -c %s "$b") / 1024)) KiB unpacked)"
done
