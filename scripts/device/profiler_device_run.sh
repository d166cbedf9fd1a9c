#!/bin/bash
# One device call for the profiler (issue 3): tool versions, the GPU tests (which archive every raw ncu /
# compute-sanitizer output as fixtures), a CLI run, and the harness benchmark. Everything lands in $OUT.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 XLANG_PROFILER_ARCHIVE=$OUT/arch XLANG_CACHE=/tmp/xlang-cache
mkdir -p $OUT/arch
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv; ncu --version | tail -1;
  compute-sanitizer --version | tail -1; python3 -c 'import torch, triton; print(torch.__version__, triton.__version__)'; } 2>&1 | tee $OUT/env.log
timeout ${GPU_TESTS_S:-330} python3 -m pytest -m gpu -q -s -p no:cacheprovider tests/test_profiler_gpu.py ${PYTEST_ARGS} 2>&1 | tee $OUT/gpu_tests.log
timeout 60 python3 -m xlang.cli eval tests/kernels/triton/gemm_tma.py --lang triton --task gemm --shape M=4096,N=4096,K=4096 --no-memcheck 2>&1 | tee $OUT/cli.log
timeout ${BENCH_S:-170} python3 benchmarks/bench_harness.py --full ${BENCH_FULL:-2} --light ${BENCH_LIGHT:-5} --json $OUT/bench.json 2>&1 | tee $OUT/bench.log
tar czf $OUT/arch.tgz -C $OUT arch && rm -rf $OUT/arch
