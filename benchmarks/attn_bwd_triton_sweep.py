"""Time configs of the Triton attention-backward expert's two main kernels at B4 H48 S4096 (do_bench), one kernel's
config varied at a time with the other at the expert's choice; each config's outputs are checked against the
expert's own (the harness's `xlang eval` is the verdict). Prints ms and TFLOP/s of the whole backward per config.
Usage: python3 benchmarks/attn_bwd_triton_sweep.py [D] [seconds] [task,task]"""
import itertools
import sys
import time

import torch
import triton

from expert_module import load_expert
from xlang.task import get_task




D = int(sys.argv[1]) if len(sys.argv) > 1 else 128
t_end = time.time() + float(sys.argv[2] if len(sys.argv) > 2 else 120)
B, H, HKV, S = 4, 48, 48, 4096
shape = dict(B=B, H=H, HKV=HKV, S=S, D=D)
DKDV = [dict(BM=bm, BN=bn, num_warps=w, num_stages=st)
        for bm, bn, w, st in itertools.product((32, 64, 128), (64, 128), (4, 8), (1, 2, 3)) if bn % bm == 0]
DQ = [dict(BM=bm, BN=bn, num_warps=w, num_stages=st)
      for bm, bn, w, st in itertools.product((64, 128), (32, 64, 128), (4, 8), (1, 2, 3)) if bm % bn == 0]
for task_name in (sys.argv[3] if len(sys.argv) > 3 else "attn_bwd").split(","):
    task, mod = get_task(task_name), load_expert(task_name)
    inputs = task.make_inputs(shape, 1, "cuda")
    outs = {n: torch.empty_like(inputs[src]) for n, src in (("dQ", "Q"), ("dK", "K"), ("dV", "V"))}
    args = [inputs[n] for n in ("dO", "Q", "K", "V", "O", "LSE")] + [outs[n] for n in ("dQ", "dK", "dV")]
    DP, dkdv0, dq0 = mod.choose_config(D, mod.CAUSAL)
    flops = task.flops(shape)

    def run(dkdv, dq):
        mod.launch(*args, B, H, HKV, S, D, DP, dkdv, dq)

    run(dkdv0, dq0)
    want = {n: t.clone() for n, t in outs.items()}
    base = triton.testing.do_bench(lambda: run(dkdv0, dq0), warmup=10, rep=100)
    print(f"{task_name} D{D} expert config dkdv={dkdv0} dq={dq0}: {base:.3f} ms {flops / base / 1e9:.0f} TFLOP/s")
    for which, space in (("dkdv", DKDV), ("dq", DQ)):
        for cfg in space:
            if time.time() > t_end:
                print("sweep: out of time")
                sys.exit(0)
            pair = (cfg, dq0) if which == "dkdv" else (dkdv0, cfg)
            try:
                for t in outs.values():
                    t.fill_(float("nan"))
                run(*pair)
                torch.cuda.synchronize()
                bad = max(((outs[n].float() - want[n].float()).abs().max().item()) for n in outs)
                ms = triton.testing.do_bench(lambda: run(*pair), warmup=10, rep=100)
                print(f"  {which} {cfg}: {ms:.3f} ms {flops / ms / 1e9:.0f} TFLOP/s  max|diff| vs expert {bad:.3g}")
            except Exception as e:  # noqa: BLE001 - out of shared memory, registers: report and go on
                print(f"  {which} {cfg}: failed {type(e).__name__}: {str(e)[:120]}")
