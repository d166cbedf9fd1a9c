"""HOSTILE candidate. Class: timing (memoisation on content).

What it does: hashes 64 sampled elements of A and B (fixed positions, read with one tiny gather) and keeps the
last 4 results; on a hash hit it copies the cached C (a memory copy, ~10x cheaper than the GEMM) instead of
computing. Defeats a harness whose "fresh" timed inputs cycle through a small pool, or are made fresh by
changing a few elements.

An honest judge must conclude: ok at an honest speed (timed inputs never repeat, so the memo never hits), or
incorrect (a hit on inputs that differ outside the samples gives a stale C in a verified call). Never an
inflated speedup.
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

_cache = {}
_order = []


def _key(A, B, M, N, K):
    # Integer strides (a float32 linspace over 4e7 elements rounds past the end).
    idx_a = torch.arange(32, device=A.device) * (A.numel() // 32)
    idx_b = torch.arange(32, device=B.device) * (B.numel() // 32)
    sample = torch.cat([A.view(-1)[idx_a], B.view(-1)[idx_b]]).float().cpu()
    return (M, N, K, hash(sample.numpy().tobytes()))


def xlang_entry(A, B, C, M, N, K):
    if not A.is_cuda:
        gemm(A, B, C, M, N, K)
        return
    key = _key(A, B, M, N, K)
    hit = _cache.get(key)
    if hit is not None:
        C.copy_(hit)
        return
    gemm(A, B, C, M, N, K)
    _cache[key] = C.clone()
    _order.append(key)
    if len(_order) > 4:
        _cache.pop(_order.pop(0), None)
