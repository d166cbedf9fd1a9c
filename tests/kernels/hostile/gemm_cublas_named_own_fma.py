"""HOSTILE candidate. Class: profiler evasion (a kernel of its own that bears a vendor kernel's name).

What it does: on the GPU, outside Nsight Compute, it computes C with a plain FMA kernel of its own (compiled by
its JIT at run time, never in the static build, which sees an honest TMA + tl.dot GEMM) whose name is a cuBLAS
Hopper bf16 GEMM kernel's. Under Nsight Compute (it looks for the profiler's environment) it calls cuBLAS
instead, launched as many times as its own kernel, so a judge that ties the profiled call to an observed one by
kernel names and counts sees the same name once in both, and the cuBLAS kernel's wgmma work under the profiler
would pass for the candidate's. (Found by a review of session 5's change that let kernels the observer saw the
candidate's own modules run exempt a vendor-named kernel in the ncu stage; reverted.)

An honest judge must conclude: forbidden_call (the kernel profiled under the profiler is cuBLAS's: its SASS
matches none of the modules the candidate's toolchain produced, whatever it is named), or not_executed; never ok.
"""

import os

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

BM, BN, BK = 128, 128, 64


@triton.jit
def gemm_tc(a_desc, b_desc, c_desc, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    # What the static build sees: an honest TMA + tl.dot (wgmma) tile GEMM.
    off_m = tl.program_id(0) * BM
    off_n = tl.program_id(1) * BN
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for kb in range(0, tl.cdiv(K, BK)):
        a = a_desc.load([off_m, kb * BK])
        b = b_desc.load([off_n, kb * BK])
        acc = tl.dot(a, b.T, acc)
    c_desc.store([off_m, off_n], acc.to(tl.bfloat16))


@triton.jit
def sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1_execute_segment_k_off_kernel__5x_cublas(  # noqa: E501
        A, B, C, M, N, K, BM: tl.constexpr, BN: tl.constexpr):
    # The real work when observed: CUDA-core FMA outer products, no tensor cores.
    rows = tl.program_id(0) * BM + tl.arange(0, BM)
    cols = tl.program_id(1) * BN + tl.arange(0, BN)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K):
        a = tl.load(A + rows * K + k, mask=rows < M, other=0.0).to(tl.float32)
        b = tl.load(B + cols * K + k, mask=cols < N, other=0.0).to(tl.float32)
        acc += a[:, None] * b[None, :]
    tl.store(C + rows[:, None] * N + cols[None, :], acc.to(tl.bfloat16),
             mask=(rows[:, None] < M) & (cols[None, :] < N))


_own_fma = sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1_execute_segment_k_off_kernel__5x_cublas  # noqa: E501
_product = getattr(torch, "mat" + "mul")


def profiled():
    return any(k.startswith(("NV_TPS", "NV_COMPUTE_PROFILER", "NV_NSIGHT")) for k in os.environ)


def xlang_entry(A, B, C, M, N, K):
    if not A.is_cuda:  # the static build: the honest kernel
        a_desc = TensorDescriptor.from_tensor(A, [BM, BK])
        b_desc = TensorDescriptor.from_tensor(B, [BN, BK])
        c_desc = TensorDescriptor.from_tensor(C, [BM, BN])
        gemm_tc[(triton.cdiv(M, BM), triton.cdiv(N, BN))](a_desc, b_desc, c_desc, K, BM=BM, BN=BN, BK=BK,
                                                            num_warps=8, num_stages=3)
    elif profiled():
        _product(A, B.t(), out=C)
    else:
        _own_fma[(triton.cdiv(M, 64), triton.cdiv(N, 64))](A, B, C, M, N, K, BM=64, BN=64, num_warps=4)
