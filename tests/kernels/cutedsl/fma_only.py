"""Negative test kernel: plain CUDA-core math, no tensor cores, no TMA.

Same entry contract as the GEMM kernels, but deliberately not a GEMM: an
elementwise fused multiply-add over the flattened tensors,

    C.flat[i] = A.flat[i] * B.flat[i] + C.flat[i]    for i < M*N

(requires M*N <= M*K and M*N <= N*K, i.e. N <= K and M <= K).

One thread per element, 256 threads per block, fp32 math on bf16 data, plain
global loads/stores (LDG/STG). The SASS must contain no HGMMA / UTC*MMA / LDTM
/ UTMALDG.
"""

import cutlass
import cutlass.cute as cute
from cutlass.cute.runtime import from_dlpack, make_fake_stream
from cuda.bindings import driver as cuda_driver

THREADS = 256


@cute.kernel
def _fma_kernel(a: cute.Tensor, b: cute.Tensor, c: cute.Tensor, count: cutlass.Int32):
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    i = bidx * THREADS + tidx
    if i < count:
        x = a[i].to(cutlass.Float32)
        y = b[i].to(cutlass.Float32)
        z = c[i].to(cutlass.Float32)
        c[i] = (x * y + z).to(c.element_type)


@cute.jit
def _fma_host(a: cute.Tensor, b: cute.Tensor, c: cute.Tensor, count: cutlass.Int32,
              stream: cuda_driver.CUstream):
    blocks = (count + THREADS - 1) // THREADS
    _fma_kernel(a, b, c, count).launch(grid=(blocks, 1, 1), block=(THREADS, 1, 1), stream=stream)


_compiled = {}


def _flat(t):
    # 1-D view with a dynamic length so one compile serves every size.
    return from_dlpack(t.view(-1), assumed_align=16).mark_layout_dynamic()


def xlang_entry(A, B, C, M, N, K):
    count = M * N
    assert count <= A.numel() and count <= B.numel(), "needs M*N <= M*K and M*N <= N*K"
    a, b, c = _flat(A), _flat(B), _flat(C)
    fn = _compiled.get("fma")
    if fn is None:
        fn = cute.compile(_fma_host, a, b, c, cutlass.Int32(count), make_fake_stream())
        _compiled["fma"] = fn
    stream = None
    if C.is_cuda:
        import torch

        stream = cuda_driver.CUstream(torch.cuda.current_stream(C.device).cuda_stream)
    fn(a, b, c, cutlass.Int32(count), stream)
