"""Correctness and speed of CuTe DSL GEMM kernels on the GPU, against torch / cuBLAS.

Run on the GPU machine after `source scripts/cutedsl_on_gpu/unpack.sh`:

    python3 scripts/cutedsl_on_gpu/bench.py OUTDIR [NAME=PATH[:VAR=VALUE,...] ...]

Default kernels: the expert tasks/gemm/solutions/cutedsl_hopper.py and the colleague's test kernel
tests/kernels/cutedsl/hopper_tma_wgmma.py. A `:VAR=VALUE,...` suffix overrides module constants before
the first compile (a tuning variant). Each kernel runs in its own child process with a time limit (a
hang or crash costs only that kernel); each child also times cuBLAS, so every speedup comes from one
process. Results: OUTDIR/results.json (one record per kernel) and the log on stdout.

Correctness: fresh random bf16 inputs per shape, C pre-filled with NaN, reference A.float() @ B.float().T
with TF32 off, pass if no NaN and |C - ref| <= 1e-2 + 1e-2 |ref| everywhere (the task's tolerance).
Timing: warm-up, then REPS reps each preceded by a 512 MiB L2-flushing write; CUDA events around the
kernel alone; median. cuBLAS: torch.matmul(A, B.t(), out=C) timed the same way.
"""

import importlib.util
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CHECK_SHAPES = [(8192, 7168, 5120), (4096, 4096, 4096), (1000, 776, 520), (2056, 3080, 1032), (1, 8, 8),
                (129, 264, 72), (7, 776, 520)]
TIME_SHAPES = [(8192, 7168, 5120), (4096, 4096, 4096), (8192, 8192, 8192)]
DEFAULT = [
    "expert_hopper=tasks/gemm/solutions/cutedsl_hopper.py",
    "colleague_hopper=tests/kernels/cutedsl/hopper_tma_wgmma.py",
]
CHILD_TIMEOUT_S = 75


def _load(path, overrides):
    spec = importlib.util.spec_from_file_location("cand_" + os.path.basename(path)[:-3], os.path.join(ROOT, path))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    for k, v in overrides.items():
        setattr(mod, k, v)
    return mod


def _bench(fn, torch, reps, flush):
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        flush.zero_()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        torch.cuda.synchronize()
        ts.append(s.elapsed_time(e) * 1e3)
    ts.sort()
    return ts[len(ts) // 2]


def child(name, path, overrides, out_json):
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    rec = {"name": name, "path": path, "overrides": overrides, "check": [], "time": [], "error": None}
    t0 = time.time()
    try:
        import cutlass  # noqa: F401

        rec["cutlass_import_s"] = round(time.time() - t0, 2)
        mod = _load(path, overrides)
        flush = torch.empty(512 * 2**20, dtype=torch.uint8, device="cuda")
        g = torch.Generator(device="cuda").manual_seed(1234)
        for (M, N, K) in CHECK_SHAPES:
            A = torch.randn(M, K, generator=g, device="cuda").to(torch.bfloat16)
            B = torch.randn(N, K, generator=g, device="cuda").to(torch.bfloat16)
            C = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
            r = {"M": M, "N": N, "K": K}
            try:
                t1 = time.time()
                mod.xlang_entry(A, B, C, M, N, K)
                torch.cuda.synchronize()
                r["first_call_s"] = round(time.time() - t1, 2)
                ref = A.float() @ B.float().t()
                d = (C.float() - ref).abs()
                bad = (d > 1e-2 + 1e-2 * ref.abs()) | torch.isnan(C.float())
                r.update(nan=int(torch.isnan(C.float()).sum()), max_abs_err=float(d.nan_to_num(float("inf")).max()),
                         bad=int(bad.sum()), ok=bool(bad.sum() == 0))
            except AssertionError as e:
                r.update(ok=None, skipped=f"AssertionError: {e}")
            except Exception as e:  # noqa: BLE001
                r.update(ok=False, error=f"{type(e).__name__}: {str(e)[:1500]}")
            print(f"[{name}] check {M}x{N}x{K}: {r}", flush=True)
            rec["check"].append(r)
        for (M, N, K) in TIME_SHAPES:
            A = torch.randn(M, K, generator=g, device="cuda").to(torch.bfloat16)
            B = torch.randn(N, K, generator=g, device="cuda").to(torch.bfloat16)
            C = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
            C2 = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
            fl = 2.0 * M * N * K
            r = {"M": M, "N": N, "K": K}
            try:
                us = _bench(lambda: mod.xlang_entry(A, B, C, M, N, K), torch, 30, flush)
                r.update(us=round(us, 1), tflops=round(fl / us / 1e6, 1))
            except AssertionError as e:
                r.update(skipped=f"AssertionError: {e}")
            except Exception as e:  # noqa: BLE001
                r.update(error=f"{type(e).__name__}: {str(e)[:800]}")
            cus = _bench(lambda: torch.matmul(A, B.t(), out=C2), torch, 30, flush)
            r.update(cublas_us=round(cus, 1), cublas_tflops=round(fl / cus / 1e6, 1))
            if "us" in r:
                r["speedup_vs_cublas"] = round(cus / r["us"], 3)
            print(f"[{name}] time {M}x{N}x{K}: {r}", flush=True)
            rec["time"].append(r)
    except Exception:  # noqa: BLE001
        import traceback

        rec["error"] = traceback.format_exc()[-3000:]
        print(f"[{name}] ERROR {rec['error']}", flush=True)
    rec["wall_s"] = round(time.time() - t0, 1)
    with open(out_json, "w") as f:
        json.dump(rec, f, indent=1)


def parse(spec):
    name, rest = spec.split("=", 1)
    path, _, ov = rest.partition(":")
    overrides = {}
    for kv in filter(None, ov.split(",")):
        k, v = kv.split("=")
        overrides[k] = int(v)
    return name, path, overrides


def main(argv):
    if argv[1:2] == ["--child"]:
        name, path, ov, out_json = argv[2], argv[3], json.loads(argv[4]), argv[5]
        child(name, path, ov, out_json)
        return 0
    outdir = argv[1]
    os.makedirs(outdir, exist_ok=True)
    specs = argv[2:] or DEFAULT
    results = []
    for spec in specs:
        name, path, ov = parse(spec)
        cj = os.path.join(outdir, f"child_{name}.json")
        t0 = time.time()
        try:
            p = subprocess.run([sys.executable, __file__, "--child", name, path, json.dumps(ov), cj],
                               timeout=CHILD_TIMEOUT_S)
            rc = p.returncode
        except subprocess.TimeoutExpired:
            rc = "timeout"
        rec = json.load(open(cj)) if os.path.exists(cj) else {"name": name, "path": path, "overrides": ov}
        rec["child_rc"], rec["child_wall_s"] = rc, round(time.time() - t0, 1)
        print(f"== {name}: rc={rc} wall={rec['child_wall_s']} s", flush=True)
        results.append(rec)
        with open(os.path.join(outdir, "results.json"), "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
