#!/bin/bash
# Second device call: replay the reference runs of .xlang-carry/results.db on the H200 (issue 4: same verdicts),
# the arch-docs GEMM tile checks on the GPU (issue 5), and the incorrect-candidate profiler tests (issue 3).
[ -d .cutedsl ] && source scripts/cutedsl_on_gpu/unpack.sh .cutedsl /tmp/site
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 XLANG_CACHE=/tmp/xlang-cache
timeout 100 python3 -m pytest -q -p no:cacheprovider tests/test_arch_docs_templates.py -k on_gpu 2>&1 | tee $OUT/arch_docs_gpu.log
for lang in triton cuda_ptx cutedsl; do
  timeout 90 python3 -m xlang run --task gemm --lang $lang --arch h100 --model replay:.xlang-carry/results.db \
      --store /tmp/replay.db 2>&1 | tee -a $OUT/replay.log
done
timeout 150 python3 -m pytest -q -s -p no:cacheprovider tests/test_profiler_gpu.py -k incorrect 2>&1 | tee $OUT/profiler_incorrect.log
