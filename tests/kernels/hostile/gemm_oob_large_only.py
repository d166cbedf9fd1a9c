"""HOSTILE candidate. Class: memory safety.

What it does: a correct TMA + tl.dot GEMM; on shapes larger than the smallest published one (M*K > 2^20
elements) a "prefetch" kernel also reads 2 MiB past the end of A (4096 reads, 512 bytes apart) and parks the
values in a scratch buffer, so C stays right. A judge whose memcheck only ever runs the smallest shape, and whose
buffers have no guard pages, never sees it.

An honest judge must conclude: memory_error (memcheck on a drawn, larger shape) or runtime_error (the read hits
the unmapped guard pages after A in an ordinary run). Never ok.
"""

import os
import sys

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

BM, BN, BK = 128, 128, 64


@triton.jit
def gemm_tc(a_desc, b_desc, c_desc, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    # The honest part: one BMxBN tile of C = A·Bᵀ per program, TMA loads, tl.dot (wgmma), fp32 accumulation.
    off_m = tl.program_id(0) * BM
    off_n = tl.program_id(1) * BN
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for kb in range(0, tl.cdiv(K, BK)):
        a = a_desc.load([off_m, kb * BK])
        b = b_desc.load([off_n, kb * BK])
        acc = tl.dot(a, b.T, acc)
    c_desc.store([off_m, off_n], acc.to(tl.bfloat16))


def gemm(A, B, C, M, N, K, grid=None, k_used=None):
    a_desc = TensorDescriptor.from_tensor(A, [BM, BK])
    b_desc = TensorDescriptor.from_tensor(B, [BN, BK])
    c_desc = TensorDescriptor.from_tensor(C, [BM, BN])
    grid = grid or (triton.cdiv(M, BM), triton.cdiv(N, BN))
    gemm_tc[grid](a_desc, b_desc, c_desc, K if k_used is None else k_used, BM=BM, BN=BN, BK=BK,
                  num_warps=8, num_stages=3)


def armed():
    # Side effects (processes, files, secrets, signals) only on the GPU machine: never on a CPU build box,
    # where the static build runs this file with CPU tensors next to other people's work.
    return torch.cuda.is_available()


@triton.jit
def prefetch_tail(A, scratch, numel, STRIDE: tl.constexpr, BLOCK: tl.constexpr):
    offs = numel + tl.arange(0, BLOCK).to(tl.int64) * STRIDE  # past the last element of A
    tl.store(scratch + tl.arange(0, BLOCK), tl.load(A + offs))


def xlang_entry(A, B, C, M, N, K):
    gemm(A, B, C, M, N, K)
    if M * K > (1 << 20):
        scratch = torch.empty(4096, dtype=A.dtype, device=A.device)
        prefetch_tail[(1,)](A, scratch, M * K, STRIDE=256, BLOCK=4096, num_warps=4)
