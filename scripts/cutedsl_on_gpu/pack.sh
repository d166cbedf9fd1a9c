#!/usr/bin/env bash
# Build the carry folder .cutedsl/ (untracked; listed in .git/info/exclude) for the GPU machine:
# nvidia-cutlass-dsl 4.8.1 for CPython 3.12 with ONE CUDA flavour (cu13 by default; cu12 alternative),
# the two big shared objects xz-compressed (--x86 filter). Result: 62.1 MB (59.2 MiB) for cu13. Run from the repo root on the CPU box:
#
#   scripts/cutedsl_on_gpu/pack.sh [cu13|cu12]
#
# Then in a device call: carry [".cutedsl"], command starting with
#   source scripts/cutedsl_on_gpu/unpack.sh .cutedsl /tmp/site && ...
set -euo pipefail
flavour="${1:-cu13}"
out=.cutedsl
work="${TMPDIR:-/tmp}/cutedsl_pack_$flavour"
mkdir -p "$work/dl" "$out"
grep -qx '/.cutedsl/' .git/info/exclude || echo '/.cutedsl/' >> .git/info/exclude
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d "$work/dl" \
  nvidia-cutlass-dsl==4.8.1 nvidia-cutlass-dsl-libs-base==4.8.1 nvidia-cutlass-dsl-libs-core==4.8.1 \
  "nvidia-cutlass-dsl-libs-$flavour==4.8.1"
rm -f "$out"/*
# everything small (4 wheels minus the two big .so of the flavour) goes into one solid tar.xz
rm -rf "$work/x" && mkdir -p "$work/x"
for w in "$work"/dl/nvidia_cutlass_dsl-4.8.1-*.whl "$work"/dl/nvidia_cutlass_dsl_libs_base-*.whl \
         "$work"/dl/nvidia_cutlass_dsl_libs_core-*.whl "$work"/dl/nvidia_cutlass_dsl_libs_"$flavour"-*.whl; do
  ( cd "$work/x" && unzip -q -o "$w" )
done
: > "$out/MANIFEST"
i=0
for so in $(cd "$work/x" && find . -name '*.so' -size +10M | sed 's|^\./||'); do
  i=$((i + 1))
  xz -c -T1 --x86 --lzma2=preset=9e,dict=192MiB "$work/x/$so" > "$out/big$i.so.xz"
  echo "big$i.so.xz $so" >> "$out/MANIFEST"
  rm "$work/x/$so"
done
# iket (In-Kernel Event Tracing, a profiling add-on; cute.experimental stubs it when absent) is left out: 6.7 MB
# unpacked, 1.4 MB of xz, the room that lets the carry travel beside the repository (64 MiB in all).
rm -rf "$work/x/nvidia_cutlass_dsl/dsl_packages/iket"
( cd "$work/x" && tar cf - . | xz -9e -T1 > "$OLDPWD/$out/small.tar.xz" )
du -sh "$out"; ls -la "$out"; cat "$out/MANIFEST"
