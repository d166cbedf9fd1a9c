"""bf16 GEMM C = A @ B^T in TileLang for Blackwell (sm_100a): the fp32 accumulator lives in tensor memory
(T.alloc_tmem), so T.gemm lowers to tcgen05.mma issued by one thread and completed on an mbarrier; T.copy of global
tiles into shared lowers to TMA, T.Pipelined keeps 3 stages in flight; the epilogue reads the accumulator out of
tensor memory (tcgen05.ld), rounds to bf16 in shared memory and stores the tile with TMA. M, N, K are dynamic."""

import tilelang
import tilelang.language as T

BLOCK_M, BLOCK_N, BLOCK_K, STAGES, THREADS = 128, 256, 64, 3, 128


@tilelang.jit
def gemm_kernel(block_M=BLOCK_M, block_N=BLOCK_N, block_K=BLOCK_K, stages=STAGES, threads=THREADS):
    M, N, K = T.dynamic("M"), T.dynamic("N"), T.dynamic("K")
    dtype, accum = T.bfloat16, T.float32

    @T.prim_func
    def gemm(A: T.Tensor((M, K), dtype), B: T.Tensor((N, K), dtype), C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
            A_s = T.alloc_shared((block_M, block_K), dtype)
            B_s = T.alloc_shared((block_N, block_K), dtype)
            C_t = T.alloc_tmem([block_M, block_N], accum)  # tcgen05's accumulator: 256 of the 512 TMEM columns
            mma_done = T.alloc_barrier(1)
            C_f = T.alloc_fragment((block_M, block_N), accum)
            C_s = T.alloc_shared((block_M, block_N), dtype)
            T.use_swizzle(8)  # neighbouring blocks share A / B panels in L2
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=stages):
                T.copy(A[by * block_M, k * block_K], A_s)
                T.copy(B[bx * block_N, k * block_K], B_s)
                T.gemm(A_s, B_s, C_t, transpose_B=True, mbar=mma_done, clear_accum=k == 0)
            T.copy(C_t, C_f)
            T.copy(C_f, C_s)
            T.copy(C_s, C[by * block_M, bx * block_N])

    return gemm


def xlang_entry(A, B, C, M, N, K):
    gemm_kernel()(A, B, C)
