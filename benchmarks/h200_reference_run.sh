#!/bin/bash
# One device call on the H200: the published reference report (issues 4, 6, 8) and the arch-docs GPU check
# (issue 5). Carry .cutedsl (scripts/cutedsl_on_gpu/pack.sh) so CuTe DSL candidates run too.
# Usage (device tool): bash benchmarks/h200_reference_run.sh   -> $OUT/{env,arch_docs_gpu,compare,replay}.log,
#                                                               $OUT/results.db, $OUT/report.tgz
[ -d .cutedsl ] && source scripts/cutedsl_on_gpu/unpack.sh .cutedsl /tmp/site
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 XLANG_CACHE=/tmp/xlang-cache
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv
  python3 -c 'import torch, triton; p = torch.cuda.get_device_properties(0); print(p.name, "SMs", p.multi_processor_count, "L2 bytes", p.L2_cache_size, "torch", torch.__version__, "triton", triton.__version__)'
  python3 -c 'import cutlass; print("cutlass-dsl", cutlass.__version__)'; } 2>&1 | tee $OUT/env.log
timeout 90 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_arch_docs_templates.py 2>&1 | tee $OUT/arch_docs_gpu.log
timeout 330 python3 -m xlang compare --arch h100,b200 --langs triton,cuda_ptx,cutedsl --tasks gemm --model reference \
    --store $OUT/results.db --report $OUT/report 2>&1 | tee $OUT/compare.log
timeout 120 python3 -m xlang run --task gemm --lang cuda_ptx --arch h100 --model replay:$OUT/results.db \
    --store $OUT/replay.db 2>&1 | tee $OUT/replay.log
tar czf $OUT/report.tgz -C $OUT report && rm -rf $OUT/report
