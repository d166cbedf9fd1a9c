#!/usr/bin/env bash
# Build the carry folder .flashinfer/ (untracked; /.flashinfer/ is in .gitignore) for the GPU machine: FlashInfer
# 0.7.2.post1 (flashinfer-python, a pure-Python wheel whose kernels are JIT-compiled by nvcc on first use) and
# apache-tvm-ffi 0.1.15.post2 (cp312: the FFI its JIT modules are built against), trimmed to what the paged batch
# decode needs. Run from the repo root on the CPU box (needs pip's registry once; ~1 min cold, xz -9e):
#
#   scripts/serving_on_gpu/pack.sh
#
# Then in a device call: carry [".flashinfer"], command starting with
#   source scripts/serving_on_gpu/unpack.sh .flashinfer /tmp/site && ...
#
# What is left out, and why (scripts/serving_on_gpu/README.md has the measured sizes):
# - flashinfer/data/csrc/*/ (subfolders: MoE, GEMM, cake_*, kda, gdn, trtllm... 248 MB): the decode module's JIT
#   (flashinfer/jit/attention/modules.py gen_batch_decode_module / gen_batch_prefill_module) copies only top-level
#   csrc files (batch_decode.cu, batch_decode_jit_binding.cu, *_customize_config.jinja, batch_prefill*.cu, the
#   tvm_ffi_utils.h helpers); the top-level files all stay.
# - flashinfer/data/cutlass/{examples,python,test,tools} and data/cccl/{benchmarks,ci,docs,python,cudax}: not
#   headers the JIT puts on its include path (jit/env.py CUTLASS_INCLUDE_DIRS = cutlass/include and
#   cutlass/tools/util/include; CCCL_INCLUDE_DIRS = cccl/{libcudacxx/include,cub,thrust}): those stay.
# Requires-Dist not carried: on the image already (click, einops, ninja, numpy, nvidia-ml-py, packaging, requests,
# tabulate, torch, tqdm, cuda-bindings (which `cuda-python` is a meta package over)); not needed by decode and
# imported by flashinfer only inside a try or a function (cuda-tile, nccl4py, nccl-extensions,
# nvidia-cudnn-frontend, nvidia-cutlass-dsl): checked by importing flashinfer 0.7.2.post1 on the CPU box in a
# site folder without them (cutlass, cudnn, torchcomms hidden): the import and BatchDecodeWithPagedKVCacheWrapper load.
set -euo pipefail
out=.flashinfer
work="${TMPDIR:-/tmp}/flashinfer_pack"
mkdir -p "$work/dl" "$out"
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 -d "$work/dl" flashinfer-python==0.7.2.post1 apache-tvm-ffi==0.1.15.post2
rm -rf "$work/x" && mkdir -p "$work/x"
for w in "$work"/dl/flashinfer_python-0.7.2.post1-*.whl "$work"/dl/apache_tvm_ffi-0.1.15.post2-cp312-*.whl; do
  ( cd "$work/x" && unzip -q -o "$w" )
done
d="$work/x/flashinfer/data"
find "$d/csrc" -mindepth 1 -maxdepth 1 -type d -exec rm -rf {} +
rm -rf "$d/cutlass/examples" "$d/cutlass/python" "$d/cutlass/test" "$d/cutlass/docs" "$d/cutlass/media"
find "$d/cutlass/tools" -mindepth 1 -maxdepth 1 ! -name util -exec rm -rf {} + 2>/dev/null || true
find "$d/cutlass/tools/util" -mindepth 1 -maxdepth 1 ! -name include -exec rm -rf {} + 2>/dev/null || true
rm -rf "$d/cccl/benchmarks" "$d/cccl/ci" "$d/cccl/docs" "$d/cccl/python" "$d/cccl/cudax" "$d/cccl/examples" \
       "$d/cccl/test" "$d/cccl/c"
rm -f "$work/x/build_backend.py" "$work/x/build_utils.py"  # the wheel's build hooks, not runtime modules
rm -f "$out"/*
( cd "$work/x" && tar cf - --sort=name --owner=0 --group=0 --numeric-owner . | xz -9e -T1 > "$OLDPWD/$out/flashinfer.tar.xz" )
du -sb "$work/x" | awk '{printf "unpacked: %'"'"'d bytes\n", $1}'
ls -la "$out"
python3 - "$out" <<'PY'
import os, sys
d = sys.argv[1]
n = sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))
print(f"{d}: {n:,} bytes = {n / 2**20:.2f} MiB")
PY
