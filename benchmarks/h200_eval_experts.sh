#!/bin/bash
# Device call: `xlang eval` (full verdict: correctness, memcheck, ncu, timing vs cuBLAS) of each Hopper GEMM expert.
[ -d .cutedsl ] && source scripts/cutedsl_on_gpu/unpack.sh .cutedsl /tmp/site
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 XLANG_CACHE=/tmp/xlang-cache
for f in triton.py cuda_ptx_hopper.cu cutedsl_hopper.py; do
  lang=${f%%.*}; lang=${lang%_hopper}
  timeout 70 python3 -m xlang eval tasks/gemm/solutions/$f --lang $lang --task gemm --arch h100 2>&1 | tee -a $OUT/eval_experts.log
done
