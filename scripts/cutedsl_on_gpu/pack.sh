#!/usr/bin/env bash
# Build the carry folder .cutedsl/ (untracked; listed in .git/info/exclude) for the GPU machine:
# nvidia-cutlass-dsl 4.8.1 for CPython 3.12 with ONE CUDA flavour (cu13 by default; cu12 alternative), and with
# --peers also the two CuTe DSL peers flash-attn-4 4.0.0b36 (flash_attn.cute) and quack-kernels 0.6.5 with the deps
# the GPU image lacks (einops, apache-tvm-ffi, torch-c-dlpack-ext). Run from the repo root on the CPU box:
#
#   scripts/cutedsl_on_gpu/pack.sh [cu13|cu12] [--peers]
#
# Result for `cu13 --peers`: 55,356,769 bytes (52.79 MiB; without --peers ~53.27 MB = 50.80 MiB); with the tracked
# repository (~3.84 MiB) and .whl/ (0.13 MiB) 56.76 MiB of the 64 MiB a device call carries. The old layout (the two
# .so in two separate xz streams, no peers) was 61,954,611 bytes (59.08 MiB). README.md beside this file: the figures.
# Where the room came from: the two big shared objects (_cutlass_ir 193 MB, libcute_dsl_runtime 44 MB) share much
# of their code (40% of random 64-byte pieces of the runtime occur verbatim in _cutlass_ir), so they go into ONE xz
# stream (bin1.xz: --x86 filter, 256 MiB dictionary, i.e. larger than both together, lc=4 lp=0 pb=0 for byte-aligned
# x86 code): 51.85 MB instead of 47.55 + 12.99 MB. Both are already stripped (`strip --strip-unneeded` would take
# 472 bytes off each: not done). README.md beside this file says what else is left out and why.
#
# Then in a device call: carry [".cutedsl"], command starting with
#   source scripts/cutedsl_on_gpu/unpack.sh .cutedsl /tmp/site && ...
set -euo pipefail
flavour=cu13
peers=0
for a in "$@"; do
  case "$a" in
    cu12|cu13) flavour="$a" ;;
    --peers) peers=1 ;;
    *) echo "usage: $0 [cu13|cu12] [--peers]" >&2; exit 2 ;;
  esac
done
out=.cutedsl
work="${TMPDIR:-/tmp}/cutedsl_pack_$flavour"
XZ_BIN=(--x86 --lzma2=preset=9e,dict=256MiB,lc=4,lp=0,pb=0)  # ONE stream over all the big .so (dict >= their sum)
XZ_PEERS=(--x86 --lzma2=preset=9e)
mkdir -p "$work/dl" "$work/cache" "$out"
grep -qx '/.cutedsl/' .git/info/exclude || echo '/.cutedsl/' >> .git/info/exclude
pipdl() {
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d "$work/dl" "$@"
}
pipdl nvidia-cutlass-dsl==4.8.1 nvidia-cutlass-dsl-libs-base==4.8.1 nvidia-cutlass-dsl-libs-core==4.8.1 \
  "nvidia-cutlass-dsl-libs-$flavour==4.8.1"
# The peers. torch (2.11 on the GPU image), typing-extensions, cuda-bindings, protobuf, packaging: on the image
# already (torch itself requires typing-extensions and cuda-bindings), so not carried. Requires-Dist checked:
#   flash-attn-4 4.0.0b36: nvidia-cutlass-dsl>=4.6.2, torch, einops, typing_extensions, apache-tvm-ffi<0.2,>=0.1.11,
#                          torch-c-dlpack-ext, quack-kernels>=0.5.3
#   quack-kernels 0.6.5:   nvidia-cutlass-dsl>=4.7, torch, apache-tvm-ffi<0.2,>=0.1.6, torch-c-dlpack-ext, einops
#   apache-tvm-ffi:        typing-extensions>=4.13;  einops: none;  torch-c-dlpack-ext: torch
[ "$peers" = 1 ] && pipdl flash-attn-4==4.0.0b36 quack-kernels==0.6.5 einops==0.8.2 \
  apache-tvm-ffi==0.1.15.post2 torch-c-dlpack-ext==0.1.5

# xz with a cache keyed by the exact input bytes and options (a 9e pass over 237 MB takes ~10-15 min on one core)
xz_cached() {  # xz_cached OUTFILE "OPTS..." FILE...
  local dst="$1" opts="$2"; shift 2
  local key; key=$( { echo "$opts"; for f in "$@"; do stat -c %s "$f"; sha256sum < "$f"; done; } | sha256sum | cut -c1-32)
  if [ ! -s "$work/cache/$key.xz" ]; then
    # shellcheck disable=SC2086
    cat "$@" | xz -c -T1 $opts > "$work/cache/$key.xz.part" && mv "$work/cache/$key.xz.part" "$work/cache/$key.xz"
  fi
  cp "$work/cache/$key.xz" "$dst"
}

rm -f "$out"/*
# --- nvidia-cutlass-dsl: 4 wheels of the flavour
rm -rf "$work/x" && mkdir -p "$work/x"
for w in "$work"/dl/nvidia_cutlass_dsl-4.8.1-*.whl "$work"/dl/nvidia_cutlass_dsl_libs_base-*.whl \
         "$work"/dl/nvidia_cutlass_dsl_libs_core-*.whl "$work"/dl/nvidia_cutlass_dsl_libs_"$flavour"-*.whl; do
  ( cd "$work/x" && unzip -q -o "$w" )
done
# iket (In-Kernel Event Tracing, a profiling add-on; cute.experimental stubs it when absent) is left out: 6.7 MB
# unpacked, 1.4 MB of xz.
rm -rf "$work/x/nvidia_cutlass_dsl/dsl_packages/iket"
# lib/stubs/aarch64-*: link-time stubs for AOT cross-compiling an exported kernel for aarch64 hosts
# (cute/export/aot_config.py looks there only for a non-host target triple); the GPU host is x86_64.
rm -rf "$work/x/nvidia_cutlass_dsl/$flavour/lib/stubs"
: > "$out/MANIFEST"
# the big shared objects (> 10 MB), largest first, into ONE xz stream; MANIFEST: "<xz> <path> <bytes>" in stream order
mapfile -t bigs < <(cd "$work/x" && find . -name '*.so' -size +10M -printf '%s %P\n' | sort -k1,1nr -k2 | cut -d' ' -f2)
for so in "${bigs[@]}"; do echo "bin1.xz $so $(stat -c %s "$work/x/$so")" >> "$out/MANIFEST"; done
xz_cached "$out/bin1.xz" "${XZ_BIN[*]}" "${bigs[@]/#/$work/x/}"
for so in "${bigs[@]}"; do rm "$work/x/$so"; done
( cd "$work/x" && tar cf - --sort=name --owner=0 --group=0 --numeric-owner . | xz -9e -T1 > "$OLDPWD/$out/small.tar.xz" )

# --- the peers (--peers): python sources in peers.tar.xz, their shared objects in bin2.xz (--x86)
if [ "$peers" = 1 ]; then
  rm -rf "$work/p" && mkdir -p "$work/p"
  for w in "$work"/dl/flash_attn_4-4.0.0b36-*.whl "$work"/dl/quack_kernels-0.6.5-*.whl "$work"/dl/einops-0.8.2-*.whl \
           "$work"/dl/apache_tvm_ffi-0.1.15.post2-cp312-*.whl "$work"/dl/torch_c_dlpack_ext-0.1.5-cp312-*.whl; do
    ( cd "$work/p" && unzip -q -o "$w" )
  done
  # tvm_ffi: 3rdparty/ (libbacktrace sources), include/ (C++ headers), src/ (C++ sources), cython/ (the .pyx/.pxi
  # that core.so was built from), share/ (CMake config), CMakeLists.txt: only for building C++ extensions
  # (tvm_ffi.cpp.load_inline, tvm-ffi-config); CuTe DSL only asks tvm_ffi for libtvm_ffi.so (cutlass/runtime.py).
  # lib/libtvm_ffi_testing.so stays: core.so has it as DT_NEEDED.
  rm -rf "$work/p/tvm_ffi/3rdparty" "$work/p/tvm_ffi/include" "$work/p/tvm_ffi/src" "$work/p/tvm_ffi/cython" \
         "$work/p/tvm_ffi/share" "$work/p/tvm_ffi/CMakeLists.txt"
  # torch-c-dlpack-ext: its prebuilt addons cover torch 2.4-2.9 only; torch 2.11 has __dlpack_c_exchange_api__
  # itself, so tvm_ffi never loads the addon (and would find none for 2.11). Its python files stay (tiny).
  # build_backend.py is the wheel's build hook (a top-level file), not a runtime module.
  rm -f "$work/p"/torch_c_dlpack_ext/*.so "$work/p/build_backend.py"
  mapfile -t psos < <(cd "$work/p" && find . -name '*.so' -printf '%s %P\n' | sort -k1,1nr -k2 | cut -d' ' -f2)
  for so in "${psos[@]}"; do echo "bin2.xz $so $(stat -c %s "$work/p/$so")" >> "$out/MANIFEST"; done
  xz_cached "$out/bin2.xz" "${XZ_PEERS[*]}" "${psos[@]/#/$work/p/}"
  for so in "${psos[@]}"; do rm "$work/p/$so"; done
  ( cd "$work/p" && tar cf - --sort=name --owner=0 --group=0 --numeric-owner . | xz -9e -T1 > "$OLDPWD/$out/peers.tar.xz" )
fi
ls -la "$out"; cat "$out/MANIFEST"
python3 - "$out" <<'PY'
import os, sys
d = sys.argv[1]
n = sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))
print(f"{d}: {n:,} bytes = {n / 2**20:.2f} MiB")
PY
