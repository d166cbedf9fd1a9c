"""HOSTILE candidate. Class: memory safety (checker detection).

What it does: a correct TMA + tl.dot GEMM plus a kernel that reads 2 MiB past the end of B, but only when it
believes compute-sanitizer is NOT watching: LD_PRELOAD / CUDA_INJECTION64_PATH naming the sanitizer, the
sanitizer's libraries in /proc/self/maps, a parent process called compute-sanitizer, or the current judge's
'once.spec.json' (the memcheck stage's spec) in its working directory. It deliberately does not treat a CUPTI
observer as a checker, so a judge that observes every stage still sees the misbehaving run.

An honest judge must conclude: runtime_error (the read faults on the guard pages after B in an ordinary run) or
memory_error. Never ok.
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


def sanitizer_watching():
    env = " ".join(os.environ.get(k, "") for k in ("LD_PRELOAD", "CUDA_INJECTION64_PATH")).lower()
    if "sanitizer" in env or any(k.startswith("CUDA_MEMCHECK") for k in os.environ):
        return True
    try:
        with open("/proc/self/maps") as f:
            if "sanitizer" in f.read().lower():
                return True
    except OSError:
        pass
    try:
        with open("/proc/%d/cmdline" % os.getppid(), "rb") as f:
            if b"sanitizer" in f.read().lower():
                return True
    except OSError:
        pass
    return os.path.exists("once.spec.json")


@triton.jit
def prefetch_tail(X, scratch, numel, STRIDE: tl.constexpr, BLOCK: tl.constexpr):
    offs = numel + tl.arange(0, BLOCK).to(tl.int64) * STRIDE
    tl.store(scratch + tl.arange(0, BLOCK), tl.load(X + offs))


def xlang_entry(A, B, C, M, N, K):
    gemm(A, B, C, M, N, K)
    if A.is_cuda and not sanitizer_watching():
        scratch = torch.empty(4096, dtype=B.dtype, device=B.device)
        prefetch_tail[(1,)](B, scratch, N * K, STRIDE=256, BLOCK=4096, num_warps=4)
