"""Run a CuTe DSL test kernel on a real GPU and compare with torch.

Needs a CUDA GPU, torch with CUDA and nvidia-cutlass-dsl importable. Not a
pytest test (the CPU CI has no GPU); run by hand on the GPU machine:

    python tests/kernels/cutedsl/check_on_gpu.py hopper_tma_wgmma 256,256,256 4096,4096,4096
    python tests/kernels/cutedsl/check_on_gpu.py blackwell_tma_tcgen05 512,384,1024   # on sm_100

Prints one line per shape with the max abs error and the time per call, and
exits non-zero on a mismatch.
"""

import importlib.util
import os
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))


def _load(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(HERE, name + ".py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def check(mod, M, N, K):
    torch.manual_seed(0)
    A = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    B = torch.randn(N, K, device="cuda", dtype=torch.bfloat16)
    C = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
    mod.xlang_entry(A, B, C, M, N, K)  # first call compiles
    torch.cuda.synchronize()
    ref = (A.float() @ B.float().T)
    err = (C.float() - ref).abs().max().item()
    tol = 2e-2 * ref.abs().max().item() + 1e-2
    iters = 20
    t0 = time.perf_counter()
    for _ in range(iters):
        mod.xlang_entry(A, B, C, M, N, K)
    torch.cuda.synchronize()
    us = (time.perf_counter() - t0) / iters * 1e6
    ok = err <= tol and not torch.isnan(C).any().item()
    print(f"{M}x{N}x{K}: max_abs_err={err:.4g} tol={tol:.3g} {us:.1f} us/call "
          f"({2 * M * N * K / us / 1e6:.1f} TFLOP/s incl. host overhead) {'OK' if ok else 'MISMATCH'}")
    return ok


def main(argv):
    name = argv[1] if len(argv) > 1 else "hopper_tma_wgmma"
    shapes = argv[2:] or ["256,256,256", "1024,512,2048"]
    mod = _load(name)
    ok = True
    for s in shapes:
        M, N, K = (int(x) for x in s.split(","))
        ok &= check(mod, M, N, K)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
