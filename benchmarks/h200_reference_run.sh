#!/bin/bash
# One device call on the H200: the published reference report (reports/h200-reference): every expert
# (GEMM, attention forward, causal attention forward; Triton, cuda_ptx, CuTe DSL) judged by `xlang compare`
# with the built-in reference model on h100 (runtime, on the H200) and b200 (compile + static census only).
# Carry .cutedsl (scripts/cutedsl_on_gpu/pack.sh) so CuTe DSL candidates run too.
# Usage (device tool): bash benchmarks/h200_reference_run.sh   -> $OUT/reference.tgz (env.log, compare.log,
#                                                                results.db, report/)
[ -d .cutedsl ] && source scripts/cutedsl_on_gpu/unpack.sh .cutedsl /tmp/site
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 XLANG_CACHE=/tmp/xlang-cache COLUMNS=200
R=$OUT/reference; mkdir -p $R
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv
  python3 -c 'import torch, triton; p = torch.cuda.get_device_properties(0); print(p.name, "SMs", p.multi_processor_count, "L2 bytes", p.L2_cache_size, "torch", torch.__version__, "triton", triton.__version__)'
  python3 -c 'import cutlass; print("cutlass-dsl", cutlass.__version__)'; } > $R/env.log 2>&1
timeout ${COMPARE_S:-450} python3 -m xlang compare --arch h100,b200 --langs triton,cuda_ptx,cutedsl \
    --tasks gemm,attn_fwd,attn_fwd_causal --model reference --store $R/results.db --report $R/report > $R/compare.log 2>&1
tail -n 45 $R/compare.log
tar czf $OUT/reference.tgz -C $OUT reference
