#!/usr/bin/env bash
# Build the carry folder .tilelang-carry/ (untracked; listed in .git/info/exclude) for the GPU machine, whose image
# has no tilelang: tilelang 0.1.15 for CPython 3.12 with what the image lacks (apache-tvm-ffi, torch-c-dlpack-ext,
# z3-solver, ml-dtypes) and the xlang-tilelang plugin as a wheel (a jail imports the plugin from a site folder,
# never from the checkout). Run from the repo root on the CPU box:
#
#   scripts/tilelang_on_gpu/pack.sh
#
# Then in a device call: carry [".tilelang-carry"], command starting with
#   source scripts/cutedsl_on_gpu/unpack.sh .tilelang-carry /tmp/site && ...
# (the same unpacker: it extracts *.tar.xz and *.whl into SITE and puts SITE on PYTHONPATH).
# NOT RUN on a GPU machine this session: whether tilelang imports and JITs there (nvcc 13.0, python 3.12,
# torch 2.11) is unknown. Size: see plugins/xlang-tilelang/README.md.
set -euo pipefail
out=.tilelang-carry
work="${TMPDIR:-/tmp}/tilelang_pack"
mkdir -p "$work/dl" "$out"
grep -qx '/.tilelang-carry/' .git/info/exclude || echo '/.tilelang-carry/' >> .git/info/exclude
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d "$work/dl" \
  tilelang==0.1.15 apache-tvm-ffi==0.1.12 torch-c-dlpack-ext==0.1.5 z3-solver==4.15.4.0 ml-dtypes==0.7.0
rm -rf "$work/x" && mkdir -p "$work/x" && rm -f "$out"/*
for w in "$work"/dl/*.whl; do ( cd "$work/x" && unzip -q -o "$w" ); done
# Not carried twice: z3's second copy of its library (libz3.so beside libz3.so.4.15, which libtilelang.so links)
# becomes a link to the first: z3's python loads it by the name libz3.so ("libz3.so not found" without it, seen on
# the H200 2026-12-04). Kept,
# unlike the FA4 carry: tvm_ffi/include and 3rdparty (TileLang's host code includes tvm/ffi/c_api.h when it builds
# a kernel's host library) and TileLang's 3rdparty/ (nvcc includes CUTLASS and TVM headers at every JIT compile).
rm -f "$work/x/z3/lib/libz3.so" && ln -s libz3.so.4.15 "$work/x/z3/lib/libz3.so"
find "$work/x" -name '__pycache__' -prune -exec rm -rf {} +
find "$work/x" -name RECORD -path '*.dist-info/*' -delete
tar -C "$work/x" -cf - . | xz -9e -T1 > "$out/tilelang.tar.xz"
python3 -m pip wheel -q --no-deps --no-build-isolation -w "$out" ./plugins/xlang-tilelang
ls -l "$out"
du -cb "$out"/* | tail -1
