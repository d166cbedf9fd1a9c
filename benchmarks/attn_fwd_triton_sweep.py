"""Time a few configs of the Triton attention experts (B4 H48 S4096) with do_bench; prints TFLOP/s per config.
Usage: python3 benchmarks/attn_fwd_triton_sweep.py [D]"""
import sys
import time

import torch
import triton

from expert_module import load_expert




D = int(sys.argv[1]) if len(sys.argv) > 1 else 128
B, H, HKV, S = 4, 48, 48, 4096
DP = triton.next_power_of_2(D)
q = torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16)
k = torch.randn(B, HKV, S, D, device="cuda", dtype=torch.bfloat16)
v = torch.randn(B, HKV, S, D, device="cuda", dtype=torch.bfloat16)
o = torch.empty_like(q)
lse = torch.empty(B, H, S, device="cuda", dtype=torch.float32)
variants = [dict(BM=128, BN=128, num_warps=8, num_stages=3), dict(BM=128, BN=128, num_warps=8, num_stages=2),
            dict(BM=128, BN=64, num_warps=8, num_stages=3), dict(BM=128, BN=128, num_warps=8, num_stages=3, WS=True),
            dict(BM=128, BN=128, num_warps=4, num_stages=3, WS=True)]
t_end = time.time() + float(sys.argv[2] if len(sys.argv) > 2 else 60)
for task in ("attn_fwd", "attn_fwd_causal"):
    mod = load_expert(task)
    flops = 4.0 * B * H * S * S * D * (0.5 if mod.CAUSAL else 1.0)
    for cfg in variants:
        if time.time() > t_end:
            print("sweep: out of time"); sys.exit(0)
        try:
            fn = lambda: mod.launch(q, k, v, o, lse, B, H, HKV, S, D, DP=DP, **cfg)
            ms = triton.testing.do_bench(fn, warmup=50, rep=200)
            print(f"sweep {task} D={D} {cfg}: {ms:.3f} ms {flops / ms / 1e9:.0f} TFLOP/s", flush=True)
        except Exception as e:  # a variant that does not compile or run is reported, not fatal
            print(f"sweep {task} D={D} {cfg}: FAILED {type(e).__name__}: {str(e)[:200]}", flush=True)
