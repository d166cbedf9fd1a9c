"""bf16 GEMM C = A @ B^T in TileLang for Hopper (sm_90a): T.gemm on shared tiles (wgmma), T.copy of global tiles
into shared (TMA, mbarrier-tracked), T.Pipelined with 3 stages (TileLang warp-specialises it: a producer warpgroup
issues TMA, two consumer warpgroups issue wgmma). M, N, K are dynamic: one kernel for every shape."""

import tilelang
import tilelang.language as T

BLOCK_M, BLOCK_N, BLOCK_K, STAGES, THREADS = 128, 256, 64, 3, 256


@tilelang.jit
def gemm_kernel(block_M=BLOCK_M, block_N=BLOCK_N, block_K=BLOCK_K, stages=STAGES, threads=THREADS):
    M, N, K = T.dynamic("M"), T.dynamic("N"), T.dynamic("K")
    dtype, accum = T.bfloat16, T.float32

    @T.prim_func
    def gemm(A: T.Tensor((M, K), dtype), B: T.Tensor((N, K), dtype), C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
            A_s = T.alloc_shared((block_M, block_K), dtype)
            B_s = T.alloc_shared((block_N, block_K), dtype)
            C_f = T.alloc_fragment((block_M, block_N), accum)
            C_s = T.alloc_shared((block_M, block_N), dtype)
            T.use_swizzle(10)  # neighbouring blocks share A / B panels in L2
            T.clear(C_f)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=stages):
                T.copy(A[by * block_M, k * block_K], A_s)
                T.copy(B[bx * block_N, k * block_K], B_s)
                T.gemm(A_s, B_s, C_f, transpose_B=True)
            T.copy(C_f, C_s)
            T.copy(C_s, C[by * block_M, bx * block_N])

    return gemm


def xlang_entry(A, B, C, M, N, K):
    gemm_kernel()(A, B, C)
