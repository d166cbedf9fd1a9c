"""BAD candidate (expected: not_executed). A TMA + tl.dot GEMM kernel is launched only when the tensors
live on the CPU (as during xlang's static build, so the static census sees HGMMA and UTMALDG); on the GPU
a plain CUDA-core outer-product kernel computes C instead. The result is right; no wgmma ever executes.
(Its GPU kernel was named gemm_fma until 2026-11-30, when a vendor-named kernel the build did not compile was
forbidden_call; kernels are now the candidate's by their code, and the recorded fixture triton-dead_branch shows
gemm_fma as its own, tests/test_profiler_provenance.py.)"""

import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

BM, BN, BK = 128, 128, 64


@triton.jit
def gemm_tc(a_desc, b_desc, c_desc, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        a = a_desc.load([pid_m * BM, k * BK])
        b = b_desc.load([pid_n * BN, k * BK])
        acc = tl.dot(a, b.T, acc)
    c_desc.store([pid_m * BM, pid_n * BN], acc.to(tl.bfloat16))


@triton.jit
def outer_product_fma(A, B, C, M, N, K, BM: tl.constexpr, BN: tl.constexpr):
    rows = tl.program_id(0) * BM + tl.arange(0, BM)
    cols = tl.program_id(1) * BN + tl.arange(0, BN)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K):
        a = tl.load(A + rows * K + k, mask=rows < M, other=0.0).to(tl.float32)
        b = tl.load(B + cols * K + k, mask=cols < N, other=0.0).to(tl.float32)
        acc += a[:, None] * b[None, :]
    mask = (rows[:, None] < M) & (cols[None, :] < N)
    tl.store(C + rows[:, None] * N + cols[None, :], acc.to(tl.bfloat16), mask=mask)


def xlang_entry(A, B, C, M, N, K):
    if A.device.type == "cpu":
        a_desc = TensorDescriptor.from_tensor(A, [BM, BK])
        b_desc = TensorDescriptor.from_tensor(B, [BN, BK])
        c_desc = TensorDescriptor.from_tensor(C, [BM, BN])
        grid = (triton.cdiv(M, BM), triton.cdiv(N, BN))
        gemm_tc[grid](a_desc, b_desc, c_desc, M, N, K, BM=BM, BN=BN, BK=BK, num_warps=8, num_stages=3)
    else:
        grid = (triton.cdiv(M, 64), triton.cdiv(N, 64))
        outer_product_fma[grid](A, B, C, M, N, K, BM=64, BN=64, num_warps=4)
