#!/bin/bash
# Compile time, Triton 3.6.0 vs 3.9.0, alternating (same load for both), no build cache, 3 rounds per candidate.
cd /work/wt/toolchain
for round in 1 2 3; do
  for task in gemm attn_fwd; do
    for side in 3.6.0 3.9.0; do
      py=python3; [ $side = 3.9.0 ] && py=/tmp/venv-triton39/bin/python
      s=$($py -m xlang build tasks/$task/solutions/triton.py --lang triton --task $task --arch b200 --no-cache \
          --timeout 600 --json | python3 -c "import json,sys; print(round(json.load(sys.stdin)['seconds'],2))" 2>/dev/null)
      echo "$round $task $side $s"
    done
  done
done
