"""Attention forward (online softmax) in TileLang for Blackwell (sm_100a); with CAUSAL = True it is
attn_fwd_causal's. Both products run on tcgen05.mma with their accumulators in tensor memory: S = Q K^T into one
TMEM tile, read out (tcgen05.ld) for the softmax in fp32 registers; P (bf16) goes to shared memory and P V lands in
a second TMEM tile, cleared per key block, which the registers' running output takes after rescaling (so the output
accumulator itself stays in fp32 registers). Key / value tiles stream through T.Pipelined (TMA, mbarriers).
B, H, HKV and S are dynamic (GQA: query head h reads key / value head h // (H / HKV)); D is one kernel per value."""

import functools

import tilelang
import tilelang.language as T

CAUSAL = False
LOG2E = 1.4426950408889634
BLOCK_M, BLOCK_N, STAGES, THREADS = 128, 64, 2, 128


@functools.cache
def attention_kernel(dim: int, causal: bool, block_M=BLOCK_M, block_N=BLOCK_N, stages=STAGES, threads=THREADS):
    batch, heads, kv_heads, seq = T.dynamic("B"), T.dynamic("H"), T.dynamic("HKV"), T.dynamic("S")
    dtype, accum = T.bfloat16, T.float32
    qk_scale = LOG2E / dim ** 0.5  # scores in log2 units: exp(x / sqrt(D)) = exp2(x * qk_scale)
    dim_cols = 1 << (dim - 1).bit_length()  # TMEM is allocated in power-of-two columns (96 -> 128)

    @T.prim_func
    def attention(Q: T.Tensor((batch, heads, seq, dim), dtype), K: T.Tensor((batch, kv_heads, seq, dim), dtype),
                  V: T.Tensor((batch, kv_heads, seq, dim), dtype), O: T.Tensor((batch, heads, seq, dim), dtype),
                  LSE: T.Tensor((batch, heads, seq), accum)):
        with T.Kernel(T.ceildiv(seq, block_M), heads, batch, threads=threads) as (bx, by, bz):
            Q_s = T.alloc_shared((block_M, dim), dtype)
            K_s = T.alloc_shared((block_N, dim), dtype)
            V_s = T.alloc_shared((block_N, dim), dtype)
            P_s = T.alloc_shared((block_M, block_N), dtype)
            O_s = T.alloc_shared((block_M, dim), dtype)
            S_t = T.alloc_tmem([block_M, block_N], accum)
            PV_t = T.alloc_tmem([block_M, dim_cols], accum)
            s_done = T.alloc_barrier(1)
            pv_done = T.alloc_barrier(1)
            scores = T.alloc_fragment((block_M, block_N), accum)
            pv = T.alloc_fragment((block_M, dim), accum)
            acc = T.alloc_fragment((block_M, dim), accum)
            row_max = T.alloc_fragment((block_M,), accum)
            prev_max = T.alloc_fragment((block_M,), accum)
            rescale = T.alloc_fragment((block_M,), accum)
            block_sum = T.alloc_fragment((block_M,), accum)
            row_sum = T.alloc_fragment((block_M,), accum)
            kv_head = by // (heads // kv_heads)

            T.copy(Q[bz, by, bx * block_M:(bx + 1) * block_M, :], Q_s)
            T.fill(acc, 0)
            T.fill(row_sum, 0)
            T.fill(row_max, -T.infinity(accum))
            blocks = (T.min(T.ceildiv(seq, block_N), T.ceildiv((bx + 1) * block_M, block_N)) if causal
                      else T.ceildiv(seq, block_N))
            for k in T.Pipelined(blocks, num_stages=stages):
                T.copy(K[bz, kv_head, k * block_N:(k + 1) * block_N, :], K_s)
                T.copy(V[bz, kv_head, k * block_N:(k + 1) * block_N, :], V_s)
                T.gemm(Q_s, K_s, S_t, transpose_B=True, mbar=s_done, clear_accum=True)
                T.copy(S_t, scores)
                for i, j in T.Parallel(block_M, block_N):
                    if causal:
                        scores[i, j] = T.if_then_else(bx * block_M + i >= k * block_N + j, scores[i, j],
                                                      -T.infinity(accum))
                    else:
                        scores[i, j] = T.if_then_else(k * block_N + j < seq, scores[i, j], -T.infinity(accum))
                T.copy(row_max, prev_max)
                T.reduce_max(scores, row_max, dim=1, clear=False)  # the running max: previous blocks included
                for i in T.Parallel(block_M):
                    rescale[i] = T.exp2((prev_max[i] - row_max[i]) * qk_scale)
                for i, j in T.Parallel(block_M, block_N):
                    scores[i, j] = T.exp2(scores[i, j] * qk_scale - row_max[i] * qk_scale)
                T.reduce_sum(scores, block_sum, dim=1)
                for i in T.Parallel(block_M):
                    row_sum[i] = row_sum[i] * rescale[i] + block_sum[i]
                T.copy(scores, P_s)
                T.gemm(P_s, V_s, PV_t[:, 0:dim], mbar=pv_done, clear_accum=True)
                T.copy(PV_t[:, 0:dim], pv)
                for i, j in T.Parallel(block_M, dim):
                    acc[i, j] = acc[i, j] * rescale[i] + pv[i, j]
            for i, j in T.Parallel(block_M, dim):
                acc[i, j] /= row_sum[i]
            T.copy(acc, O_s)
            T.copy(O_s, O[bz, by, bx * block_M:(bx + 1) * block_M, :])
            for i in T.Parallel(block_M):  # natural-log sum of exp of the scaled scores
                row_sum[i] = T.log(row_sum[i]) + row_max[i] * qk_scale / LOG2E
            T.copy(row_sum, LSE[bz, by, bx * block_M:(bx + 1) * block_M])

    return tilelang.compile(attention)


def xlang_entry(Q, K, V, O, LSE, B, H, HKV, S, D):
    attention_kernel(D, CAUSAL)(Q, K, V, O, LSE)
