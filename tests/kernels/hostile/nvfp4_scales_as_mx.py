"""HOSTILE candidate. Class: correctness (issue 34's NVFP4 scale factors).

What it does: NVFP4 read as if it were MXFP4. The same packed e2m1 operands through the same block-scaled MMA
(tl.dot_scaled: tcgen05.mma kind::mxf4.block_scale on sm_100a, so the census sees tcgen05_block_scale doing all the
math), but with MX scales: one UE8M0 byte per 32 elements, the power of two at or above the larger of each pair of
the task's e4m3 scales. Exact only when every pair of 16-blocks shares one power-of-two scale; wrong by the scales'
mantissas and by the spread between neighbouring 16-blocks otherwise.

An honest judge must conclude: incorrect, provided the drawn e4m3 scales are not powers of two and differ between
neighbouring 16-blocks (tasks/gemm_nvfp4 draws each block's magnitude over 2^12 and rounds amax / 6 to e4m3).
"""

import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor


@triton.jit
def gemm_nvfp4_as_mx(a_desc, b_desc, c_desc, SA, SB, M, N, K,
                     BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    off_m = tl.program_id(0) * BM
    off_n = tl.program_id(1) * BN
    rows = off_m + tl.arange(0, BM)
    cols = off_n + tl.arange(0, BN)
    s_idx = tl.arange(0, BK // 16)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        a = a_desc.load([off_m, k // 2])
        b = b_desc.load([off_n, k // 2])
        sa = tl.load(SA + rows.to(tl.int64)[:, None] * (K // 16) + (k // 16 + s_idx)[None, :],
                     mask=(rows < M)[:, None], other=1.0).to(tl.float32)
        sb = tl.load(SB + cols.to(tl.int64)[:, None] * (K // 16) + (k // 16 + s_idx)[None, :],
                     mask=(cols < N)[:, None], other=1.0).to(tl.float32)
        # one power of two per pair of 16-blocks, as a UE8M0 byte (2**(byte - 127))
        sa8 = (tl.ceil(tl.log2(tl.max(tl.reshape(sa, (BM, BK // 32, 2)), axis=2))) + 127).to(tl.uint8)
        sb8 = (tl.ceil(tl.log2(tl.max(tl.reshape(sb, (BN, BK // 32, 2)), axis=2))) + 127).to(tl.uint8)
        acc = tl.dot_scaled(a, sa8, "e2m1", b.T, sb8, "e2m1", acc)
    c_desc.store([off_m, off_n], acc.to(tl.bfloat16))


def xlang_entry(A, SA, B, SB, C, M, N, K):
    BM, BN, BK = 128, 128, 128
    a_desc = TensorDescriptor.from_tensor(A, [BM, BK // 2])
    b_desc = TensorDescriptor.from_tensor(B, [BN, BK // 2])
    c_desc = TensorDescriptor.from_tensor(C, [BM, BN])
    grid = (triton.cdiv(M, BM), triton.cdiv(N, BN))
    gemm_nvfp4_as_mx[grid](a_desc, b_desc, c_desc, SA, SB, M, N, K, BM=BM, BN=BN, BK=BK, num_warps=4, num_stages=3)
