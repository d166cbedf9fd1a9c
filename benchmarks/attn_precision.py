"""CPU emulations of attention forward kernels, honest and not, and the LSE error an honest fp32 kernel makes.

An honest kernel (FlashAttention-style, as the experts are): scores Q K^T accumulated in fp32 over the head dim in
steps of 16 (one wgmma k-step each; a summation order of its own, not the reference's), key blocks of 128 with a
running row max, P rounded to bf16 for the P@V MMA, fp32 row sum and O accumulators, LSE = m + log(l). The
shortcuts: an fp16 accumulator for P@V (HGMMA ...F16 / HMMA ...F16), fp16 score accumulation, no max subtraction.
tests/test_attention_precision.py runs them against the task's tolerance; this script prints the worst LSE error
of the honest one against the task's fp32 reference and an fp64 one, per input kind and shape (long S included:
only `--rows` query rows are computed, every key is).

    python3 benchmarks/attn_precision.py [--rows 64] [--seeds 2]

Measured 2026-12-01 on a CPU box (torch 2.13 CPU, the figures in tasks/_attention.py's LSE_TOLERANCE comment).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def scores(q, k, scale, acc=torch.float32, kstep=16):
    """q [..., R, D] and k [..., N, D] (bf16) -> scale * q k^T, the dot accumulated in `acc` one k-step at a time."""
    out = torch.zeros(q.shape[:-1] + (k.shape[-2],), dtype=acc)
    for c in range(0, q.shape[-1], kstep):
        part = q[..., c:c + kstep].float() @ k[..., c:c + kstep].float().transpose(-1, -2)
        out = (out.float() + part).to(acc)
    return out.float() * scale


def forward(q, k, v, causal=False, rows=None, acc=torch.float32, score_acc=torch.float32, max_subtracted=True,
            block=128):
    """One head group: q [H, S, D], k, v [H, S, D] (bf16, GQA already expanded) -> O [H, R, D] bf16, LSE [H, R] fp32
    for the query rows `rows` (default: all). `acc`: the P@V accumulator (fp16: each block's product lands in it, as
    an fp16-accumulating MMA's does); `score_acc`: the Q K^T accumulator; max_subtracted=False: plain exp."""
    S, D = q.shape[-2], q.shape[-1]
    rows = torch.arange(S) if rows is None else rows
    scale = 1.0 / math.sqrt(D)
    qr = q[..., rows, :]
    m = torch.full(qr.shape[:-1] + (1,), float("-inf") if max_subtracted else 0.0)
    ell = torch.zeros_like(m)
    o = torch.zeros(qr.shape[:-1] + (D,), dtype=acc)
    for j0 in range(0, S, block):
        s = scores(qr, k[..., j0:j0 + block, :], scale, score_acc)
        if causal:
            keys = torch.arange(j0, min(S, j0 + block))
            s = s.masked_fill(keys[None, :] > rows[:, None], float("-inf"))
        if max_subtracted:
            new_m = torch.maximum(m, s.amax(-1, keepdim=True))
            alpha = torch.exp(m - new_m).nan_to_num(0.0)
            p = torch.exp(s - new_m).nan_to_num(0.0)
        else:
            new_m, alpha, p = m, torch.ones_like(m), torch.exp(s)
        ell = ell * alpha + p.sum(-1, keepdim=True)
        block_pv = (p.to(torch.bfloat16).float() @ v[..., j0:j0 + block, :].float()).to(acc)
        o = (o.float() * alpha + block_pv.float()).to(acc)
        m = new_m
    lse = (m + torch.log(ell)).squeeze(-1)
    return (o.float() / ell).to(torch.bfloat16), lse


def reference_lse(q, k, causal=False, rows=None, dtype=torch.float64):
    """logsumexp of the scaled scores in `dtype`, the rows given (the task's reference is this in fp32)."""
    S, D = q.shape[-2], q.shape[-1]
    rows = torch.arange(S) if rows is None else rows
    s = (q[..., rows, :].to(dtype) @ k.to(dtype).transpose(-1, -2)) / math.sqrt(D)
    if causal:
        s = s.masked_fill(torch.arange(S)[None, :] > rows[:, None], float("-inf"))
    return torch.logsumexp(s, -1)


def expanded(x, shape):
    group = shape["H"] // shape["HKV"]
    return x["Q"][0], x["K"][0].repeat_interleave(group, 0), x["V"][0].repeat_interleave(group, 0)


def main(argv=None) -> None:
    from xlang.task import get_task

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=64, help="query rows computed per shape (every key is)")
    ap.add_argument("--seeds", type=int, default=2)
    args = ap.parse_args(argv)
    shapes = [{"B": 1, "H": 2, "HKV": 1, "S": s, "D": d} for s, d in ((333, 64), (2047, 96), (8191, 128),
                                                                      (16383, 128), (16383, 64))]
    print(f"{'task':16} {'shape':12} {'kind':8} {'LSE':>7} {'vs fp32 ref':>11} {'vs fp64':>9} {'ref vs fp64':>11}")
    worst = 0.0
    for name in ("attn_fwd", "attn_fwd_causal"):
        task = get_task(name)
        causal = name.endswith("_causal")
        for shape in shapes:
            for kind in task.input_kinds:
                for seed in range(args.seeds):
                    x = task.make_inputs(shape, 100 + seed, "cpu", kind=kind)
                    q, k, v = expanded(x, shape)
                    rows = torch.randperm(shape["S"], generator=torch.Generator().manual_seed(seed))[:args.rows]
                    rows = torch.cat([rows, torch.tensor([0, shape["S"] - 1])]).unique()
                    _, lse = forward(q, k, v, causal, rows)
                    ref32 = reference_lse(q, k, causal, rows, torch.float32)
                    ref64 = reference_lse(q, k, causal, rows, torch.float64)
                    e32 = float((lse - ref32).abs().max())
                    e64 = float((lse.double() - ref64).abs().max())
                    eref = float((ref32.double() - ref64).abs().max())
                    worst = max(worst, e32)
                    print(f"{name:16} S{shape['S']:<5}D{shape['D']:<5} {kind:8} {float(ref64.abs().max()):7.1f} "
                          f"{e32:11.2e} {e64:9.2e} {eref:11.2e}")
    print(f"worst |LSE - fp32 reference| of the honest emulation: {worst:.2e}")


if __name__ == "__main__":
    main()
