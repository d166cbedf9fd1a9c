"""BAD candidate (expected: memory_error). A correct TMA + tl.dot GEMM, plus a tail-handling kernel that,
for small M, reads 128 elements past the end of A (the values go to a scratch buffer, so C stays right:
only compute-sanitizer memcheck sees it)."""

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

BM, BN, BK = 128, 128, 64


@triton.jit
def gemm_kernel(a_desc, b_desc, c_desc, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        a = a_desc.load([pid_m * BM, k * BK])
        b = b_desc.load([pid_n * BN, k * BK])
        acc = tl.dot(a, b.T, acc)
    c_desc.store([pid_m * BM, pid_n * BN], acc.to(tl.bfloat16))


@triton.jit
def tail_peek(A, scratch, numel, BLOCK: tl.constexpr):
    offs = numel + tl.arange(0, BLOCK)  # the bug: past the last element of A
    x = tl.load(A + offs)
    tl.store(scratch + tl.arange(0, BLOCK), x)


def xlang_entry(A, B, C, M, N, K):
    a_desc = TensorDescriptor.from_tensor(A, [BM, BK])
    b_desc = TensorDescriptor.from_tensor(B, [BN, BK])
    c_desc = TensorDescriptor.from_tensor(C, [BM, BN])
    grid = (triton.cdiv(M, BM), triton.cdiv(N, BN))
    gemm_kernel[grid](a_desc, b_desc, c_desc, M, N, K, BM=BM, BN=BN, BK=BK, num_warps=8, num_stages=3)
    if M % BM:  # only shapes with a tail in M
        scratch = torch.empty(128, dtype=A.dtype, device=A.device)
        tail_peek[(1,)](A, scratch, M * K, BLOCK=128)
