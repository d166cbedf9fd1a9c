"""Test kernel (negative case): a GEMM written with broadcasts and sums: no tl.dot, no descriptors,
so neither tensor cores nor TMA. Correct but slow."""

import triton
import triton.language as tl


@triton.jit
def gemm_fma_kernel(A, B, C, M, N, K, BM: tl.constexpr, BN: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K):
        a = tl.load(A + rm * K + k, mask=rm < M, other=0.0).to(tl.float32)
        b = tl.load(B + rn * K + k, mask=rn < N, other=0.0).to(tl.float32)
        acc += a[:, None] * b[None, :]
    tl.store(C + rm[:, None] * N + rn[None, :], acc.to(tl.bfloat16), mask=(rm[:, None] < M) & (rn[None, :] < N))


def xlang_entry(A, B, C, M, N, K):
    grid = (triton.cdiv(M, 64), triton.cdiv(N, 64))
    gemm_fma_kernel[grid](A, B, C, M, N, K, BM=64, BN=64)
