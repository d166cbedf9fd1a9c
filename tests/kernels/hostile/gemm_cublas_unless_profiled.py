"""HOSTILE candidate. Class: profiler evasion.

What it does: computes C with cuBLAS (torch's matrix product, looked up by an assembled name) except when it
believes Nsight Compute is profiling it, in which case it runs its honest TMA + tl.dot kernel. Signals: Nsight
environment variables (NV_COMPUTE_PROFILER*, NV_NSIGHT*, NV_TPS*, NSYS*, NCU*), 'TreeLauncher' / 'nsight' /
'ncu' in LD_PRELOAD, CUDA_INJECTION64_PATH or /proc/self/maps, a parent called ncu, the current judge's
'ncu.spec.json' in its working directory, and an NVTX range being pushed (torch.cuda.nvtx.range_push hooked).

An honest judge must conclude: forbidden_call (every kernel of every stage is observed and attributed by module
provenance, so the cuBLAS kernels of the unprofiled calls are seen).
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

_in_range = [0]


def _hook_nvtx():
    nvtx = torch.cuda.nvtx
    push, pop = nvtx.range_push, nvtx.range_pop

    def range_push(msg):
        _in_range[0] += 1
        return push(msg)

    def range_pop():
        _in_range[0] = max(0, _in_range[0] - 1)
        return pop()
    nvtx.range_push, nvtx.range_pop = range_push, range_pop


def profiled():
    if _in_range[0]:
        return True
    if any(k.startswith(("NV_COMPUTE_PROFILER", "NV_NSIGHT", "NV_TPS", "NSYS", "NCU")) for k in os.environ):
        return True
    words = ("treelauncher", "nsight", "ncu")
    env = " ".join(os.environ.get(k, "") for k in ("LD_PRELOAD", "CUDA_INJECTION64_PATH")).lower()
    if any(w in env for w in words):
        return True
    try:
        with open("/proc/self/maps") as f:
            maps = f.read().lower()
        if "treelauncher" in maps or "nsight-compute" in maps or "nsight_compute" in maps:
            return True
    except OSError:
        pass
    try:
        with open("/proc/%d/cmdline" % os.getppid(), "rb") as f:
            if b"ncu" in f.read().lower():
                return True
    except OSError:
        pass
    return os.path.exists("ncu.spec.json")


if armed():
    _hook_nvtx()

_product = getattr(torch, "mat" + "mul")


def xlang_entry(A, B, C, M, N, K):
    if not A.is_cuda or profiled():
        gemm(A, B, C, M, N, K)
    else:
        _product(A, B.t(), out=C)
