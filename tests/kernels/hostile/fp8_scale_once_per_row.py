"""HOSTILE candidate. Class: correctness (issue 34's scale factors).

What it does: the fp8 block-scaled GEMM the cheap way. One fp8 `tl.dot` over the whole K (wgmma .e4m3 on sm_90a, so
the census and Nsight Compute see the required family doing all the math), no per-block promotion, then one scale
per output: the mean of the row's SA blocks times the mean of the column band's SB blocks. Exact when every row's
scales are constant along K; wrong by the spread of the scales otherwise.

An honest judge must conclude: incorrect, provided the drawn scale factors vary along K within a row (the task
draws per-block magnitudes over 2^+-4: tasks/gemm_fp8_blockscale).
"""

import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

BLOCK = 128


@triton.jit
def gemm_fp8_mean_scales(a_desc, b_desc, c_desc, SA, SB, M, N, K,
                         BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    off_m = tl.program_id(0) * BM
    off_n = tl.program_id(1) * BN
    k_blocks = K // BK
    rows = off_m + tl.arange(0, BM)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    sa_sum = tl.zeros((BM,), dtype=tl.float32)
    sb_sum = 0.0
    for kb in range(k_blocks):
        a = a_desc.load([off_m, kb * BK])
        b = b_desc.load([off_n, kb * BK])
        acc = tl.dot(a, b.T, acc)  # the raw fp8 products of every block in one accumulator: no promotion
        sa_sum += tl.load(SA + rows.to(tl.int64) * k_blocks + kb, mask=rows < M, other=0.0)
        sb_sum += tl.load(SB + (off_n // BN) * k_blocks + kb)
    scale = (sa_sum / k_blocks) * (sb_sum / k_blocks)
    c_desc.store([off_m, off_n], (acc * scale[:, None]).to(tl.bfloat16))


def xlang_entry(A, SA, B, SB, C, M, N, K):
    BM, BN, BK = 128, BLOCK, BLOCK
    a_desc = TensorDescriptor.from_tensor(A, [BM, BK])
    b_desc = TensorDescriptor.from_tensor(B, [BN, BK])
    c_desc = TensorDescriptor.from_tensor(C, [BM, BN])
    grid = (triton.cdiv(M, BM), triton.cdiv(N, BN))
    gemm_fp8_mean_scales[grid](a_desc, b_desc, c_desc, SA, SB, M, N, K, BM=BM, BN=BN, BK=BK, num_warps=8,
                               num_stages=3)
