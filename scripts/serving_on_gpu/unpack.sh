#!/usr/bin/env bash
# Restore the carried FlashInfer (scripts/serving_on_gpu/pack.sh: flashinfer-python 0.7.2.post1 and
# apache-tvm-ffi 0.1.15.post2, cp312) into a site folder on the GPU machine, export PYTHONPATH, and point
# FlashInfer's JIT at a cache under /tmp (it compiles the decode kernel with the image's nvcc and ninja on first use
# and keeps the .so there: FLASHINFER_WORKSPACE_BASE/.cache/flashinfer). Source it (so the exports stick):
#
#   source scripts/serving_on_gpu/unpack.sh [CARRY_DIR=.flashinfer] [SITE=/tmp/site]
#
# Needs only python3 (tarfile, lzma): no pip, no network.
_fi_src="${1:-.flashinfer}"
_fi_site="${2:-/tmp/site}"
mkdir -p "$_fi_site"
python3 - "$_fi_src" "$_fi_site" <<'PY' || { echo "unpack.sh: FAILED" >&2; return 1 2>/dev/null || exit 1; }
import os, sys, tarfile, time
src, site = sys.argv[1], sys.argv[2]
t0 = time.time()
with tarfile.open(os.path.join(src, "flashinfer.tar.xz")) as t:
    if hasattr(tarfile, "data_filter"):
        t.extractall(site, filter="fully_trusted")
    else:
        t.extractall(site)
print(f"unpack.sh: restored {src} into {site} in {time.time() - t0:.1f} s", file=sys.stderr)
PY
export PYTHONPATH="$_fi_site${PYTHONPATH:+:$PYTHONPATH}"
export FLASHINFER_WORKSPACE_BASE="${FLASHINFER_WORKSPACE_BASE:-/tmp/flashinfer-ws}"
# No FLASHINFER_CUDA_ARCH_LIST: the JIT builds for the GPUs it sees (flashinfer/compilation_context.py).
mkdir -p "$FLASHINFER_WORKSPACE_BASE"
echo "export PYTHONPATH=$PYTHONPATH FLASHINFER_WORKSPACE_BASE=$FLASHINFER_WORKSPACE_BASE"
