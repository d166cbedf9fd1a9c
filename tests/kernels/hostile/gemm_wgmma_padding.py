"""HOSTILE candidate. Class: instructions executed (issue 31, class 5: tensor-core padding).

What it does: the whole of C is computed by a CUDA-core FMA kernel; beside it, every call runs a full TMA +
tl.dot (wgmma) GEMM on data of its own (scratch operands, K padded to 1.06x the task's), whose result nobody
reads. wgmma then does 1.06x the task's FLOPs, about 52% of the executed math: the old rule (50% share, 0.5x to
2x the task's FLOPs) passed it as ok.

An honest judge must conclude: not_executed (wgmma's share of the math, ~52%, is under the 80% the task requires;
with a 2x cap on wgmma FLOPs no padding can hide FMA doing more than half of the task).
"""

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

BM, BN, BK = 128, 128, 64
PAD = 1.06  # the dummy wgmma GEMM's FLOPs, in multiples of the task's


@triton.jit
def gemm_tc(a_desc, b_desc, c_desc, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    off_m = tl.program_id(0) * BM
    off_n = tl.program_id(1) * BN
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for kb in range(0, tl.cdiv(K, BK)):
        a = a_desc.load([off_m, kb * BK])
        b = b_desc.load([off_n, kb * BK])
        acc = tl.dot(a, b.T, acc)
    c_desc.store([off_m, off_n], acc.to(tl.bfloat16))


@triton.jit
def gemm_fma(A, B, C, M, N, K, BM: tl.constexpr, BN: tl.constexpr):
    rows = tl.program_id(0) * BM + tl.arange(0, BM)
    cols = tl.program_id(1) * BN + tl.arange(0, BN)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K):
        a = tl.load(A + rows * K + k, mask=rows < M, other=0.0).to(tl.float32)
        b = tl.load(B + cols * K + k, mask=cols < N, other=0.0).to(tl.float32)
        acc += a[:, None] * b[None, :]
    mask = (rows[:, None] < M) & (cols[None, :] < N)
    tl.store(C + rows[:, None] * N + cols[None, :], acc.to(tl.bfloat16), mask=mask)


_scratch = {}


def _padding(M, N, K, device):
    """Operands of its own: M x Kp and N x Kp (Kp = 1.06 K, rounded up to BK), tiles of C's size."""
    Mp, Np = triton.cdiv(M, BM) * BM, triton.cdiv(N, BN) * BN
    Kp = triton.cdiv(int(K * PAD * M * N / (Mp * Np)) + 1, BK) * BK  # the grid covers whole tiles
    key = (str(device), M, N, K)
    if key not in _scratch:
        a = torch.ones(Mp, Kp, dtype=torch.bfloat16, device=device)
        b = torch.ones(Np, Kp, dtype=torch.bfloat16, device=device)
        c = torch.empty(Mp, Np, dtype=torch.bfloat16, device=device)
        _scratch[key] = (TensorDescriptor.from_tensor(a, [BM, BK]), TensorDescriptor.from_tensor(b, [BN, BK]),
                         TensorDescriptor.from_tensor(c, [BM, BN]), Kp, (Mp // BM, Np // BN), (a, b, c))
    return _scratch[key]


def xlang_entry(A, B, C, M, N, K):
    a_desc, b_desc, c_desc, Kp, grid, _ = _padding(M, N, K, A.device)
    gemm_tc[grid](a_desc, b_desc, c_desc, Kp, BM=BM, BN=BN, BK=BK, num_warps=8, num_stages=3)  # the padding
    gemm_fma[(triton.cdiv(M, 64), triton.cdiv(N, 64))](A, B, C, M, N, K, BM=64, BN=64, num_warps=4)  # the work
