#!/usr/bin/env bash
# The CUPTI observer on the GPU machine: build the injection library, run the observer tests (GPU one included),
# then measure its overhead on a cuBLAS matmul and on many tiny launches (torch events, with vs without injection).
# Run from the repository root:  bash scripts/device/observer_gpu_check.sh      (about 1 minute; writes $OUT if set)
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=.${PYTHONPATH:+:$PYTHONPATH}
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
OUTDIR=${OUT:-/tmp/observer_gpu_check}
mkdir -p "$OUTDIR"
CACHE=$(mktemp -d)

echo "== build"
LIB=$(timeout 120 python3 -c "
from pathlib import Path
from xlang.profiler.observer import build_library, find_cupti
print(find_cupti(), flush=True)
print(build_library(Path('$CACHE')))" | tee "$OUTDIR/build.txt" | tail -1) || { echo "build failed"; exit 1; }
echo "library: $LIB"
nm -D --defined-only "$LIB" | grep -w InitializeInjection

echo "== tests"
timeout 300 python3 -m pytest -q -rs tests/test_observer.py 2>&1 | tee "$OUTDIR/pytest.txt" | tail -15
TESTS_RC=${PIPESTATUS[0]}

echo "== overhead"
cat > "$CACHE/bench_child.py" <<'EOF'
import json, sys, torch
a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
b = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
x = torch.zeros(1024, device="cuda")
def timed(fn, n):
    fn(); torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(n):
        fn()
    e.record(); e.synchronize()
    return s.elapsed_time(e) * 1e3 / n  # us per call
res = {}
for r in range(3):
    res.setdefault("matmul_4096_us", []).append(timed(lambda: a @ b, 50))
    res.setdefault("tiny_launch_us", []).append(timed(lambda: x.add_(1.0), 2000))
print(json.dumps({k: sorted(v)[1] for k, v in res.items()}), flush=True)
sys.stdin.readline()
EOF
timeout 180 python3 - "$LIB" "$CACHE/bench_child.py" <<'EOF' | tee "$OUTDIR/overhead.txt"
import json, os, subprocess, sys, time
from pathlib import Path
from xlang.profiler.observer import Observer, kernels, span
lib, child = sys.argv[1], sys.argv[2]

def run(inject):
    t0 = time.monotonic()
    o = None
    env = dict(os.environ)
    fds = ()
    if inject:
        o = Observer(Path(lib))
        extra, fds = o.child_args()
        env.update(extra)
    p = subprocess.Popen([sys.executable, child], env=env, pass_fds=fds, stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    if o:
        o.start()
    res = json.loads(p.stdout.readline())
    if o:
        t = time.monotonic()
        recs = o.flush(60.0)
        res["flush_s"] = time.monotonic() - t
        ks = kernels(recs)
        res["kernels"] = len(ks)
        res["known_module"] = sum(k.module != "-" for k in ks) / max(1, len(ks))
        res["modules"] = len(o.modules)
        names = {}
        for k in ks:
            names[k.name[:60]] = names.get(k.name[:60], 0) + 1
        res["top_kernels"] = sorted(names.items(), key=lambda kv: -kv[1])[:4]
        res["by_module"] = {}
        for k in ks:
            res["by_module"][k.module[:12]] = res["by_module"].get(k.module[:12], 0) + 1
    p.stdin.write("\n"); p.stdin.close(); p.wait(30)
    if o:
        o.close()
    res["wall_s"] = time.monotonic() - t0
    return res

base, inj = run(False), run(True)
print(f"{'':28}{'no observer':>14}{'observer':>14}{'ratio':>8}")
for key in ("matmul_4096_us", "tiny_launch_us", "wall_s"):
    print(f"{key:28}{base[key]:14.2f}{inj[key]:14.2f}{inj[key] / base[key]:8.3f}")
print(f"flush {inj['flush_s']:.3f} s, {inj['kernels']} kernel records, {inj['modules']} modules, "
      f"known module for {inj['known_module']:.1%} of kernels")
print("kernels by module (first 12 hex):", inj["by_module"])
print("top kernels:", inj["top_kernels"])
EOF
BENCH_RC=${PIPESTATUS[0]}
rm -rf "$CACHE"
echo "tests rc=$TESTS_RC bench rc=$BENCH_RC"
exit $(( TESTS_RC != 0 || BENCH_RC != 0 ))
