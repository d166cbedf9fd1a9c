"""CPU emulations of gemm_fp8_blockscale kernels, honest and not, and the error an honest one makes.

An honest kernel (as DeepGEMM's 1d2d and the experts are): per 128-wide K block, the fp8 products summed in fp32
(the tensor core's partial sum), that partial sum times SA[m, kb] * SB[n // 128, kb] added to an fp32 accumulator,
the result rounded to bf16. The wrong ones: the scales ignored; one scale per tensor (their means); one per row of A
and per row block of B (the mean over K blocks); SB indexed by the column's own position instead of its row block
(a layout misread); the un-scaled GEMM (a bf16 GEMM of the fp8 values) with one scale per output (the first K
block's); every product summed in bf16; and the fp8 wgmma's fp16 accumulator (QGMMA ...F16). tests/test_fp8_task.py runs them against the task's tolerance; this
script prints the honest kernel's worst error against the task's fp32 reference, per input kind over drawn shapes:

    python3 benchmarks/fp8_blockscale_precision.py [--shapes 6] [--seeds 2]

Measured 2026-12-01 on a CPU box (torch 2.13 CPU): the figures in tasks/gemm_fp8_blockscale/__init__.py's tolerance
comment.
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

BLOCK = 128


def _partials(A, B):
    """e4m3 A [M, K], B [N, K] -> fp32 partial sums [KB, M, N], one per 128-wide K block."""
    M, K = A.shape
    a = A.float().view(M, K // BLOCK, BLOCK).transpose(0, 1)
    b = B.float().view(B.shape[0], K // BLOCK, BLOCK).transpose(0, 1)
    return a @ b.transpose(1, 2)


def _sb_columns(SB, N):
    """SB [NB, KB] -> [KB, 1, N]: each column n's scale SB[n // 128, kb]."""
    return SB.repeat_interleave(BLOCK, dim=0)[:N].t()[:, None, :]


def honest(inputs, shape, acc=torch.float32):
    """The 1d2d kernel: partial sums per K block, scaled by SA * SB, accumulated in `acc` (fp32 honest; bf16 not)."""
    P = _partials(inputs["A"], inputs["B"])
    scale = inputs["SA"].t()[:, :, None] * _sb_columns(inputs["SB"], shape["N"])
    C = torch.zeros(P.shape[1:], dtype=acc)
    for kb in range(P.shape[0]):
        C = (C.float() + P[kb] * scale[kb]).to(acc)
    return C.float().to(torch.bfloat16)


def ignores_scales(inputs, shape):
    return _partials(inputs["A"], inputs["B"]).sum(0).to(torch.bfloat16)


def per_tensor_scales(inputs, shape):
    return (_partials(inputs["A"], inputs["B"]).sum(0) * inputs["SA"].mean() * inputs["SB"].mean()).to(torch.bfloat16)


def per_row_scales(inputs, shape):
    """One scale per row of A and per row block of B: the mean over the K blocks."""
    sa = inputs["SA"].mean(1)[:, None]
    sb = inputs["SB"].mean(1).repeat_interleave(BLOCK)[: shape["N"]][None, :]
    return (_partials(inputs["A"], inputs["B"]).sum(0) * sa * sb).to(torch.bfloat16)


def sb_misindexed(inputs, shape):
    """SB read as if it were [KB, NB] row-major (a transposed layout): block (nb, kb) takes SB.flatten()[kb*NB + nb]."""
    SB = inputs["SB"]
    misread = SB.flatten().view(SB.shape[1], SB.shape[0]).t()
    return honest({**inputs, "SB": misread}, shape)


def first_block_scales(inputs, shape):
    """The un-scaled GEMM (as a bf16 GEMM of the fp8 values would give it) times the first K block's scales."""
    sa = inputs["SA"][:, :1]
    sb = _sb_columns(inputs["SB"], shape["N"])[0]
    return (_partials(inputs["A"], inputs["B"]).sum(0) * sa * sb).to(torch.bfloat16)


def _narrow_partials(A, B, acc, step):
    """Partial sums [KB, M, N] whose running sum inside each 128-block is kept in `acc`, `step` products at a time
    (step 1: every product added to a bf16 sum; step 32: one fp8 wgmma k-step, QGMMA ...F16, into an fp16 sum)."""
    M, K = A.shape
    a, b = A.float(), B.float()
    out = []
    for kb in range(K // BLOCK):
        part = torch.zeros(M, B.shape[0], dtype=acc)
        for k in range(kb * BLOCK, (kb + 1) * BLOCK, step):
            part = (part.float() + a[:, k:k + step] @ b[:, k:k + step].t()).to(acc)
        out.append(part.float())
    return torch.stack(out)


def _scaled_sum(P, inputs, shape, acc):
    scale = inputs["SA"].t()[:, :, None] * _sb_columns(inputs["SB"], shape["N"])
    C = torch.zeros(P.shape[1:], dtype=acc)
    for kb in range(P.shape[0]):
        C = (C.float() + P[kb] * scale[kb]).to(acc)
    return C.float().to(torch.bfloat16)


def bf16_accumulator(inputs, shape):
    """Every product added to a bf16 running sum, the scaled partial sums to a bf16 accumulator."""
    return _scaled_sum(_narrow_partials(inputs["A"], inputs["B"], torch.bfloat16, 1), inputs, shape, torch.bfloat16)


def fp16_wgmma_accumulator(inputs, shape):
    """The fp8 wgmma with an fp16 accumulator (QGMMA ...F16; the census flags it too): k-steps of 32 into fp16."""
    return _scaled_sum(_narrow_partials(inputs["A"], inputs["B"], torch.float16, 32), inputs, shape, torch.float32)


def _with_column_scales(inputs, shape, sa, sb_cols):
    """The 1d2d kernel with SA [M, KB] and the scale of each column of C per K block, sb_cols [N, KB], given."""
    P = _partials(inputs["A"], inputs["B"])
    scale = sa.t()[:, :, None] * sb_cols.t()[:, None, :]
    C = torch.zeros(P.shape[1:])
    for kb in range(P.shape[0]):
        C = C + P[kb] * scale[kb]
    return C.to(torch.bfloat16)


def sa_m_major(inputs, shape):
    """SA read as DeepGEMM's kernel layout, M-major [K/128, M]: (m, kb) taken from flat index kb * M + m."""
    SA = inputs["SA"]
    return honest({**inputs, "SA": SA.flatten().view(SA.shape[1], SA.shape[0]).t()}, shape)


def sb_per_row(inputs, shape):
    """SB indexed by the row n of B instead of its row block n // 128 (flat index n * KB + kb, wrapped in range)."""
    SB = inputs["SB"]
    NB, KB = SB.shape
    idx = (torch.arange(shape["N"])[:, None] * KB + torch.arange(KB)[None, :]) % (NB * KB)
    return _with_column_scales(inputs, shape, inputs["SA"], SB.flatten()[idx])


def one_sb_per_256_columns(inputs, shape):
    """One SB row block per 256-wide N tile (a tile of 256 taken as one scale block)."""
    SB = inputs["SB"]
    return _with_column_scales(inputs, shape, inputs["SA"], SB[torch.arange(shape["N"]) // 256])


def k_block_off_by_one(inputs, shape):
    """K block kb scaled with block kb + 1's SA and SB (the last with the first's)."""
    return honest({**inputs, "SA": inputs["SA"].roll(-1, 1), "SB": inputs["SB"].roll(-1, 1)}, shape)


def last_block_scales(inputs, shape):
    """One scale in the epilogue: the un-scaled sum times the last K block's SA and SB."""
    sa = inputs["SA"][:, -1:]
    sb = _sb_columns(inputs["SB"], shape["N"])[-1]
    return (_partials(inputs["A"], inputs["B"]).sum(0) * sa * sb).to(torch.bfloat16)


def ue8m0_truncated_scales(inputs, shape):
    """Scales cut to their power of two (sign and exponent kept, mantissa dropped: DeepGEMM's UE8M0 on SM100)."""
    def cut(s):
        return torch.exp2(torch.floor(torch.log2(s)))

    return honest({**inputs, "SA": cut(inputs["SA"]), "SB": cut(inputs["SB"])}, shape)


def bf16_outer_accumulator(inputs, shape):
    """fp32 partial sums per block, the scaled partials added to a bf16 accumulator."""
    return honest(inputs, shape, acc=torch.bfloat16)


def bf16_running_sum_in_block(inputs, shape):
    """Every product of a block added to a bf16 running sum; the scaled partials to an fp32 accumulator."""
    return _scaled_sum(_narrow_partials(inputs["A"], inputs["B"], torch.bfloat16, 1), inputs, shape, torch.float32)


def dequantise_to_bf16_then_gemm(inputs, shape):
    """A and B dequantised (value times its fp32 scale) and rounded to bf16, then an fp32-accumulated GEMM."""
    from tasks.gemm_fp8_blockscale import dequantise

    A, B = dequantise(inputs, shape)
    return (A.to(torch.bfloat16).float() @ B.to(torch.bfloat16).float().t()).to(torch.bfloat16)


WRONG = {"ignores_scales": ignores_scales, "per_tensor_scales": per_tensor_scales, "per_row_scales": per_row_scales,
         "sb_misindexed": sb_misindexed, "first_block_scales": first_block_scales, "bf16_accumulator": bf16_accumulator,
         "fp16_wgmma_accumulator": fp16_wgmma_accumulator, "sa_m_major": sa_m_major, "sb_per_row": sb_per_row,
         "one_sb_per_256_columns": one_sb_per_256_columns, "k_block_off_by_one": k_block_off_by_one,
         "last_block_scales": last_block_scales, "ue8m0_truncated_scales": ue8m0_truncated_scales,
         "bf16_outer_accumulator": bf16_outer_accumulator, "bf16_running_sum_in_block": bf16_running_sum_in_block,
         "dequantise_to_bf16_then_gemm": dequantise_to_bf16_then_gemm}
# Bugs a shape cannot show: with one K block (K = 128) every K-block misplacement is the right block
# (sa_m_major still misreads rows unless M = 1); with N <= 128 one SB row block covers every column (sb_per_row,
# one_sb_per_256_columns and sb_misindexed see block 0 or wrap onto it).
K_BLOCK_BUGS = ("k_block_off_by_one", "last_block_scales", "first_block_scales", "per_row_scales")
N_BLOCK_BUGS = ("sb_per_row", "one_sb_per_256_columns", "sb_misindexed")


def error(got, want, atol, rtol) -> dict:
    """Worst element: |err| / (atol + rtol |want|) (<= 1 passes), |err| / |want| where |want| >= 1, and the atol an
    element needs beyond rtol |want|."""
    err = (got.float() - want.float()).abs()
    big = want.abs() >= 1
    return {"ratio": float((err / (atol + rtol * want.abs())).max()),
            "rel": float((err[big] / want.abs()[big]).max()) if big.any() else 0.0,
            "atol_needed": float((err - rtol * want.abs()).clamp_min(0).max())}


def main() -> int:
    from xlang.task import get_task

    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", type=int, default=6)
    ap.add_argument("--seeds", type=int, default=2)
    args = ap.parse_args()
    task = get_task("gemm_fp8_blockscale")
    atol, rtol = task.tolerance["atol"], task.tolerance["rtol"]
    # Small drawn shapes: the reference and the emulation are CPU matmuls.
    small = {"M": 256, "N": 400, "K": 1024}
    shapes = task.draw_shapes(small, random.Random(7), args.shapes)
    shapes = [s for s in shapes if s["M"] * s["N"] * s["K"] <= 1 << 29]
    worst = {}
    for kind in task.input_kinds:
        for shape in shapes:
            for seed in range(args.seeds):
                inputs = task.make_inputs(shape, seed, "cpu", kind)
                want = task.reference(inputs, shape)["C"]
                e = error(honest(inputs, shape), want, atol, rtol)
                print(f"{kind:10s} M={shape['M']:5d} N={shape['N']:5d} K={shape['K']:5d} seed {seed}: "
                      f"honest max rel {e['rel']:.5f}, atol needed {e['atol_needed']:.2e}, ratio {e['ratio']:.3f}")
                for k, v in e.items():
                    worst[k] = max(worst.get(k, 0.0), v)
    print(f"worst over all: max rel {worst['rel']:.5f}, atol needed {worst['atol_needed']:.2e}, "
          f"ratio to the tolerance {worst['ratio']:.3f} (atol={atol}, rtol={rtol})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
