"""Run one CuTe DSL GEMM candidate once per small shape (for compute-sanitizer) and print max errors.

    compute-sanitizer --tool memcheck python3 scripts/cutedsl_on_gpu/memcheck_one.py tasks/gemm/solutions/cutedsl_hopper.py
"""
import importlib.util
import sys

import torch

spec = importlib.util.spec_from_file_location("cand", sys.argv[1])
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
for M, N, K in [(1000, 776, 520), (1, 8, 8), (129, 264, 72)]:
    A = torch.randn(M, K, device="cuda").to(torch.bfloat16)
    B = torch.randn(N, K, device="cuda").to(torch.bfloat16)
    C = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
    mod.xlang_entry(A, B, C, M, N, K)
    torch.cuda.synchronize()
    err = (C.float() - A.float() @ B.float().t()).abs().max().item()
    print(f"memcheck_one {M}x{N}x{K}: max_abs_err={err}", flush=True)
