#!/bin/bash
# One H200 call for the Triton attention-forward experts (issue 7): xlang eval at D=128 (non-causal, causal),
# a short config sweep, then D=64 / D=96 (no ncu) while the time lasts. Logs land in $OUT.
# Usage (device run, repo root): bash benchmarks/attn_fwd_device_run.sh   [BUDGET_S=230]
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 COLUMNS=150
OUT=${OUT:-/tmp/attn_fwd_out}; mkdir -p "$OUT"
END=$(( $(date +%s) + ${BUDGET_S:-230} ))
TAIL=40  # lines of each log shown
source benchmarks/device_step.sh
EV="python3 -m xlang eval --lang triton --arch h100 --no-memcheck"
step fwd_d128    110 $EV expert --task attn_fwd
step causal_d128 100 $EV expert --task attn_fwd_causal
step sweep_d128   45 python3 benchmarks/attn_fwd_triton_sweep.py 128 35
step fwd_d64      45 $EV --no-ncu expert --task attn_fwd --shape D=64
step fwd_d96      45 $EV --no-ncu expert --task attn_fwd --shape D=96
step causal_d64   45 $EV --no-ncu expert --task attn_fwd_causal --shape D=64
step causal_d96   45 $EV --no-ncu expert --task attn_fwd_causal --shape D=96
echo "== done"
