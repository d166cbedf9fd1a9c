"""BAD candidate (expected: timeout). A TMA + tl.dot GEMM whose programs first spin on a flag that
nothing ever sets: the kernel never ends."""

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

BM, BN, BK = 128, 128, 64


@triton.jit
def gemm_hang(a_desc, b_desc, c_desc, flag, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    spins = 0
    while tl.load(flag, volatile=True) == 0:  # the bug: nobody ever writes the flag
        spins += 1
    acc = tl.zeros((BM, BN), dtype=tl.float32) + spins * 0.0
    for k in range(0, tl.cdiv(K, BK)):
        a = a_desc.load([pid_m * BM, k * BK])
        b = b_desc.load([pid_n * BN, k * BK])
        acc = tl.dot(a, b.T, acc)
    c_desc.store([pid_m * BM, pid_n * BN], acc.to(tl.bfloat16))


def xlang_entry(A, B, C, M, N, K):
    a_desc = TensorDescriptor.from_tensor(A, [BM, BK])
    b_desc = TensorDescriptor.from_tensor(B, [BN, BK])
    c_desc = TensorDescriptor.from_tensor(C, [BM, BN])
    flag = torch.zeros(1, dtype=torch.int32, device=A.device)
    grid = (triton.cdiv(M, BM), triton.cdiv(N, BN))
    gemm_hang[grid](a_desc, b_desc, c_desc, flag, M, N, K, BM=BM, BN=BN, BK=BK, num_warps=8, num_stages=3)
