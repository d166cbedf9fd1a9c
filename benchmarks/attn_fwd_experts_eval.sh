#!/bin/bash
# `xlang eval` of every Hopper attention-forward expert (issue 7) on the H200: the full verdict (correctness,
# memcheck, ncu, timing vs cuDNN) at D=128 for attn_fwd and attn_fwd_causal, then correctness + timing only
# (--no-memcheck --no-ncu, device time) at D=64, D=96 and GQA (HKV=8). B=4, H=48, S=4096 (the task default).
# Usage (device run, repo root, carry .cutedsl for CuTe DSL): bash benchmarks/attn_fwd_experts_eval.sh
#   LANGS="triton cuda_ptx cutedsl"  BUDGET_S=400  LIGHT= (full verdicts everywhere)  SKIP_D128=1
# Every log is also packed into $OUT/attn_fwd_logs.tgz (the device returns a limited number of files).
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 COLUMNS=160 XLANG_CACHE=${XLANG_CACHE:-/tmp/xlang-cache}
OUT=${OUT:-/tmp/attn_fwd_out}; mkdir -p "$OUT"
LANGS=${LANGS:-triton cuda_ptx cutedsl}
END=$(( $(date +%s) + ${BUDGET_S:-400} ))
if [[ " $LANGS " == *" cutedsl "* ]] && [ -d .cutedsl ] && ! python3 -c "import cutlass" 2>/dev/null; then
  source scripts/cutedsl_on_gpu/unpack.sh .cutedsl /tmp/site > "$OUT/unpack.log" 2>&1
  export PYTHONPATH=$PWD:$PYTHONPATH CUTE_DSL_CACHE_DIR=/tmp/cute_cache
fi
one() {  # one NAME LANG TASK [xlang eval options...]
  local name=$1 lang=$2 task=$3; shift 3
  local left=$(( END - $(date +%s) ))
  if [ "$left" -lt 20 ]; then echo "$name: skipped (${left}s left)" | tee -a "$OUT/summary.txt"; return; fi
  timeout $(( left < 150 ? left : 150 )) python3 -m xlang eval expert --lang "$lang" --task "$task" --arch h100 \
    --timeout 120 "$@" > "$OUT/$name.log" 2>&1
  local verdict=$(grep -m1 -A1 -E '^(ok|static_ok|incorrect|runtime_error|timeout|memory_error|not_executed|forbidden_call|compile_error|missing_instructions|no_code) ' "$OUT/$name.log" | tr '\n' ' ')
  echo "$name: ${verdict:-$(tail -n 3 "$OUT/$name.log" | tr '\n' ' ')}" | cut -c1-400 | tee -a "$OUT/summary.txt"
}
if [ -z "$SKIP_D128" ]; then for lang in $LANGS; do
  one ${lang}_fwd_d128 $lang attn_fwd
  one ${lang}_causal_d128 $lang attn_fwd_causal
done; fi
LIGHT=${LIGHT---no-memcheck --no-ncu}  # LIGHT= (empty) for the full verdict at every head dim too
for lang in $LANGS; do
  for d in 64 96; do
    one ${lang}_fwd_d$d $lang attn_fwd $LIGHT --shape D=$d
    one ${lang}_causal_d$d $lang attn_fwd_causal $LIGHT --shape D=$d
  done
  one ${lang}_fwd_gqa8 $lang attn_fwd $LIGHT --shape HKV=8
done
tar czf "$OUT/attn_fwd_logs.tgz" -C "$OUT" $(cd "$OUT" && ls *.log summary.txt 2>/dev/null)
