"""BAD candidate (expected: incorrect). A TMA + tl.dot GEMM whose epilogue stores every tile one column to
the right: an off-by-one write (column 0 of C is left unwritten, every other column holds its neighbour)."""

import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

BM, BN, BK = 128, 128, 64


@triton.jit
def gemm_off_by_one(a_desc, b_desc, C, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        a = a_desc.load([pid_m * BM, k * BK])
        b = b_desc.load([pid_n * BN, k * BK])
        acc = tl.dot(a, b.T, acc)
    rows = pid_m * BM + tl.arange(0, BM)
    cols = pid_n * BN + tl.arange(0, BN) + 1  # the bug: one column too far
    mask = (rows[:, None] < M) & (cols[None, :] < N)
    tl.store(C + rows[:, None] * N + cols[None, :], acc.to(tl.bfloat16), mask=mask)


def xlang_entry(A, B, C, M, N, K):
    a_desc = TensorDescriptor.from_tensor(A, [BM, BK])
    b_desc = TensorDescriptor.from_tensor(B, [BN, BK])
    grid = (triton.cdiv(M, BM), triton.cdiv(N, BN))
    gemm_off_by_one[grid](a_desc, b_desc, C, M, N, K, BM=BM, BN=BN, BK=BK, num_warps=8, num_stages=3)
