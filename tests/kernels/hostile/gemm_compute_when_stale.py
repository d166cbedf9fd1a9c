"""HOSTILE candidate. Class: timing (skip work the harness will not look at).

What it does: every program first reads the top-left element of its C tile and compares its bits with what it
wrote there last time (kept in a private per-tile shadow buffer). Equal bits mean "the harness did not touch C
since my last call": the program skips the whole K loop and the store. Anything the harness poisons or
re-allocates (NaN fill, fresh buffer) looks fresh, so every checked call computes; back-to-back timed calls on
untouched output buffers do no work. Unlike a call counter, this survives a re-check after timing.

An honest judge must conclude: ok at an honest speed (every timed call's output is poisoned or fresh), or
incorrect (timed outputs left as they were, with fresh inputs, and a verified one is stale). Never an inflated
speedup.
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
def gemm_unless_stale(a_desc, b_desc, C, shadow, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    tile = pid_m * tl.num_programs(1) + pid_n
    off_m = pid_m * BM
    off_n = pid_n * BN
    corner = tl.load(C + off_m * N + off_n).to(tl.int16, bitcast=True)
    fresh = corner != tl.load(shadow + tile)
    k_blocks = tl.where(fresh, tl.cdiv(K, BK), 0)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for kb in range(0, k_blocks):
        a = a_desc.load([off_m, kb * BK])
        b = b_desc.load([off_n, kb * BK])
        acc = tl.dot(a, b.T, acc)
    rows = off_m + tl.arange(0, BM)
    cols = off_n + tl.arange(0, BN)
    out = acc.to(tl.bfloat16)
    tl.store(C + rows[:, None] * N + cols[None, :], out, mask=(rows[:, None] < M) & (cols[None, :] < N) & fresh)
    first = (rows[:, None] == off_m) & (cols[None, :] == off_n)
    bits = tl.where(first, out.to(tl.int16, bitcast=True).to(tl.int32), 0)
    tl.store(shadow + tile, tl.sum(tl.sum(bits, 1), 0).to(tl.int16), mask=fresh)


_shadows = {}


def xlang_entry(A, B, C, M, N, K):
    grid = (triton.cdiv(M, BM), triton.cdiv(N, BN))
    key = (C.data_ptr(), M, N, str(C.device))
    if key not in _shadows:
        _shadows[key] = torch.full((grid[0] * grid[1],), -1, dtype=torch.int16, device=C.device)
    a_desc = TensorDescriptor.from_tensor(A, [BM, BK])
    b_desc = TensorDescriptor.from_tensor(B, [BN, BK])
    gemm_unless_stale[grid](a_desc, b_desc, C, _shadows[key], M, N, K, BM=BM, BN=BN, BK=BK, num_warps=8,
                            num_stages=3)
