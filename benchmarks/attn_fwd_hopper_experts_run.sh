#!/bin/bash
# One H200 call for the cuda_ptx and CuTe DSL Hopper attention-forward experts (issue 7): a probe of each at odd
# shapes (where the error sits, if any, plus a quick do_bench figure against cuDNN), then the full `xlang eval`
# verdict at the default shape (B4 H48 S4096 D128) for each that the probe found correct. Logs land in $OUT.
# Usage (device run, repo root, carry .cutedsl): bash benchmarks/attn_fwd_hopper_experts_run.sh  [BUDGET_S=540]
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 COLUMNS=150
OUT=${OUT:-/tmp/attn_fwd_out}; mkdir -p "$OUT"
END=$(( $(date +%s) + ${BUDGET_S:-540} ))
source benchmarks/device_step.sh
SHAPES="--shape S=1000,B=1,H=2,HKV=2 --shape S=300,B=1,H=4,HKV=1,D=96 --shape S=130,B=2,H=2,HKV=2,D=64 --shape S=64,B=1,H=1,HKV=1"
PROBE="python3 benchmarks/expert_probe.py"
LANGS=${LANGS:-cuda_ptx cutedsl}
if [[ " $LANGS " == *" cutedsl "* ]] && [ -d .cutedsl ]; then
  source scripts/cutedsl_on_gpu/unpack.sh .cutedsl /tmp/site > "$OUT/unpack.log" 2>&1
  export PYTHONPATH=$PWD:$PYTHONPATH CUTE_DSL_CACHE_DIR=/tmp/cute_cache
fi
declare -A good
for lang in $LANGS; do
  step ${lang}_probe 100 $PROBE $lang attn_fwd $SHAPES --time && good[$lang]=1
  step ${lang}_probe_causal 100 $PROBE $lang attn_fwd_causal $SHAPES --time
done
EV="python3 -m xlang eval --arch h100 --timeout 120"
for lang in $LANGS; do
  if [ -n "${good[$lang]}" ]; then step ${lang}_eval 150 $EV --lang $lang expert --task attn_fwd; fi
done
echo "== done"
