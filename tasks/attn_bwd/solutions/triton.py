"""Expert Triton attention backward for xlang's `attn_bwd` (and, with CAUSAL = True, `attn_bwd_causal`).

Given dO and the forward's Q, K, V, O, LSE (natural log, of the scaled scores), write dQ, dK, dV:
  P = exp(scale Q K^T - LSE)       (recomputed, never stored)     dV = P^T dO
  dP = dO V^T     dS = P * (dP - Delta),  Delta = rowsum(dO * O)  dK = scale dS^T Q     dQ = scale dS K
with scale = 1/sqrt(D), kv = h // (H // HKV) (GQA: dK and dV sum the G query heads of a group), any S >= 1,
head dim D in {64, 96, 128}.

Design, top-down (FlashAttention-2's backward split into three launches, no atomics):
* `attn_bwd_delta_kernel`: Delta[b,h,i] = sum_d dO * O in fp32, into a scratch [B, H, S] tensor.
* `attn_bwd_dkdv_kernel`: one program per (key block of BN rows, batch x kv head). It keeps K, V and the
  fp32 dK, dV accumulators of its block for the whole run and walks every query block of every one of the G
  query heads that share the kv head, so the GQA sum happens in its registers. Per query block it works in
  the transposed orientation (keys as rows): S^T = K Q^T, P^T = exp2(S^T * scale*log2e - LSE*log2e),
  dV += P^T dO, dP^T = V dO^T, dS^T = P^T * (dP^T - Delta), dK += dS^T Q; dK is scaled once at the end.
* `attn_bwd_dq_kernel`: one program per (query block of BM rows, batch x query head). It keeps Q, dO, LSE
  and Delta of its rows and walks the key blocks: S = Q K^T, P, dP = dO V^T, dS, dQ += dS K.
* All tiles move through TMA: host-built rank-3 tensor descriptors over [B*heads, S, D]. The sequence bound
  is per head, so a tail block loads zero rows (never the next head's) and its store is clipped. The tile is
  DP = next power of two >= D wide (96 -> 128): the columns past D load as zeros, add nothing to any dot,
  and the stores are clipped at column D.
* tl.dot on bf16 tiles with fp32 accumulators: wgmma on sm_90a, tcgen05.mma on sm_100a.
* Masks only where needed. Query rows past S need none: their LSE is read as +inf, so their P is 0 (and
  their dO rows are zero), and they add nothing to dK or dV. Key rows past S in the dK/dV program are rows
  of its own accumulators that the clipped store drops. The dQ program masks the one ragged key block
  (keys >= S have zero K rows but exp(-LSE) could overflow there). Causal: blocks entirely above the
  diagonal are skipped, blocks entirely below it run unmasked, and only the diagonal band is masked
  (j <= i), which also covers keys past S for every stored row.
  Causal dQ programs take the query blocks last-first so the longest programs start first; causal dK/dV
  programs already do (key block 0 sees every query block).
* Block sizes, warps and pipeline depth come from a small heuristic on the head dim.

Triton's CPU interpreter (TRITON_INTERPRET=1, used by the tests) runs this same file with CPU tensors:
tensor descriptors work there, but its tl.dot multiplies the raw bits of bf16 operands and its fp32 -> bf16
cast truncates. When the module is imported under the interpreter, INTERPRETED is True: `_mma` casts the bf16
operands to fp32 first (exact, so the products and the fp32 accumulation are the ones the tensor cores
compute) and `_bf16` rounds to nearest even by hand, as the GPU's cast does. The flag is a constexpr:
compiled code contains neither. The device of the tensors is not the test, because xlang's static
build compiles for the GPU while calling the entry point with CPU tensors.
"""

import math

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

CAUSAL = False

LOG2E = 1.4426950408889634
INTERPRETED = bool(triton.knobs.runtime.interpret)


@triton.jit
def _mma(a, b, acc, INTERP: tl.constexpr):
    """acc + a @ b for bf16 a, b; under the interpreter through exact fp32 copies (see the docstring)."""
    if INTERP:
        return tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision="ieee")
    else:
        return tl.dot(a, b, acc)


@triton.jit
def _bf16(x, INTERP: tl.constexpr):
    """fp32 -> bf16, rounded to nearest even; the interpreter's own cast truncates, so round the bits first."""
    if INTERP:
        bits = x.to(tl.uint32, bitcast=True)
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
        return bits.to(tl.float32, bitcast=True).to(tl.bfloat16)
    else:
        return x.to(tl.bfloat16)


@triton.jit
def attn_bwd_delta_kernel(o_desc, do_desc, Delta, S,
                          BM: tl.constexpr, DP: tl.constexpr):
    m_blk = tl.program_id(0)
    bh = tl.program_id(1)
    off_m = m_blk * BM
    o = o_desc.load([bh, off_m, 0]).reshape(BM, DP).to(tl.float32)
    do = do_desc.load([bh, off_m, 0]).reshape(BM, DP).to(tl.float32)
    delta = tl.sum(o * do, 1)
    offs_m = off_m + tl.arange(0, BM)
    tl.store(Delta + bh.to(tl.int64) * S + offs_m, delta, mask=offs_m < S)


@triton.jit
def _dkdv_query_blocks(dk, dv, k, v, q_desc, do_desc, LSE, Delta, bh, offs_n, lo, hi, S, qk_scale,
                       BM: tl.constexpr, DP: tl.constexpr, DIAGONAL: tl.constexpr, INTERP: tl.constexpr):
    """Fold query blocks [lo, hi) of head row bh into this key block's dK, dV. DIAGONAL: mask j <= i."""
    row_base = bh.to(tl.int64) * S
    for start_m in tl.range(lo, hi, BM):
        q = q_desc.load([bh, start_m, 0]).reshape(BM, DP)
        do = do_desc.load([bh, start_m, 0]).reshape(BM, DP)
        offs_m = start_m + tl.arange(0, BM)
        in_seq = offs_m < S
        # +inf LSE for rows past S makes their P exactly 0 with no further mask.
        lse2 = tl.load(LSE + row_base + offs_m, mask=in_seq, other=float("inf")) * 1.4426950408889634
        delta = tl.load(Delta + row_base + offs_m, mask=in_seq, other=0.0)
        s_t = _mma(k, q.T, tl.zeros([k.shape[0], BM], tl.float32), INTERP)
        p_t = tl.math.exp2(s_t * qk_scale - lse2[None, :])
        if DIAGONAL:
            p_t = tl.where(offs_m[None, :] >= offs_n[:, None], p_t, 0.0)
        dv = _mma(_bf16(p_t, INTERP), do, dv, INTERP)
        dp_t = _mma(v, do.T, tl.zeros([k.shape[0], BM], tl.float32), INTERP)
        ds_t = p_t * (dp_t - delta[None, :])
        dk = _mma(_bf16(ds_t, INTERP), q, dk, INTERP)
    return dk, dv


@triton.jit
def attn_bwd_dkdv_kernel(q_desc, k_desc, v_desc, do_desc, dk_desc, dv_desc, LSE, Delta,
                         S, H, HKV, qk_scale, scale,
                         BM: tl.constexpr, BN: tl.constexpr, DP: tl.constexpr, IS_CAUSAL: tl.constexpr,
                         INTERP: tl.constexpr):
    n_blk = tl.program_id(0)
    bkv = tl.program_id(1)
    b = bkv // HKV
    kv = bkv % HKV
    group = H // HKV
    start_n = n_blk * BN
    offs_n = start_n + tl.arange(0, BN)

    k = k_desc.load([bkv, start_n, 0]).reshape(BN, DP)
    v = v_desc.load([bkv, start_n, 0]).reshape(BN, DP)
    dk = tl.zeros([BN, DP], tl.float32)
    dv = tl.zeros([BN, DP], tl.float32)

    for g in range(group):
        bh = b * H + kv * group + g
        if IS_CAUSAL:
            # Query blocks before start_n see none of these keys. BN is a multiple of BM, so the blocks in
            # [start_n, start_n + BN) are the diagonal band and every later block sees all of them.
            band_end = tl.minimum(start_n + BN, S)
            dk, dv = _dkdv_query_blocks(dk, dv, k, v, q_desc, do_desc, LSE, Delta, bh, offs_n, start_n,
                                        band_end, S, qk_scale, BM, DP, True, INTERP)
            dk, dv = _dkdv_query_blocks(dk, dv, k, v, q_desc, do_desc, LSE, Delta, bh, offs_n, band_end,
                                        S, S, qk_scale, BM, DP, False, INTERP)
        else:
            dk, dv = _dkdv_query_blocks(dk, dv, k, v, q_desc, do_desc, LSE, Delta, bh, offs_n, 0,
                                        S, S, qk_scale, BM, DP, False, INTERP)

    dk_desc.store([bkv, start_n, 0], _bf16(dk * scale, INTERP).reshape(1, BN, DP))
    dv_desc.store([bkv, start_n, 0], _bf16(dv, INTERP).reshape(1, BN, DP))


@triton.jit
def _dq_key_blocks(dq, q, do, lse2, delta, k_desc, v_desc, kv_row, offs_m, lo, hi, S, qk_scale,
                   BN: tl.constexpr, DP: tl.constexpr, MASK: tl.constexpr, INTERP: tl.constexpr):
    """Fold key blocks [lo, hi) into this query block's dQ. MASK: 0 none, 1 keys >= S, 2 causal j <= i."""
    for start_n in tl.range(lo, hi, BN):
        k = k_desc.load([kv_row, start_n, 0]).reshape(BN, DP)
        v = v_desc.load([kv_row, start_n, 0]).reshape(BN, DP)
        s = _mma(q, k.T, tl.zeros([q.shape[0], BN], tl.float32), INTERP)
        p = tl.math.exp2(s * qk_scale - lse2[:, None])
        offs_n = start_n + tl.arange(0, BN)
        if MASK == 1:
            p = tl.where(offs_n[None, :] < S, p, 0.0)
        if MASK == 2:
            p = tl.where(offs_m[:, None] >= offs_n[None, :], p, 0.0)
        dp = _mma(do, v.T, tl.zeros([q.shape[0], BN], tl.float32), INTERP)
        ds = p * (dp - delta[:, None])
        dq = _mma(_bf16(ds, INTERP), k, dq, INTERP)
    return dq


@triton.jit
def attn_bwd_dq_kernel(q_desc, k_desc, v_desc, do_desc, dq_desc, LSE, Delta,
                       S, H, HKV, qk_scale, scale,
                       BM: tl.constexpr, BN: tl.constexpr, DP: tl.constexpr, IS_CAUSAL: tl.constexpr,
                       INTERP: tl.constexpr):
    bh = tl.program_id(1)
    if IS_CAUSAL:
        m_blk = tl.num_programs(0) - 1 - tl.program_id(0)
    else:
        m_blk = tl.program_id(0)
    b = bh // H
    h = bh % H
    kv_row = b * HKV + h // (H // HKV)
    start_m = m_blk * BM
    offs_m = start_m + tl.arange(0, BM)
    in_seq = offs_m < S

    q = q_desc.load([bh, start_m, 0]).reshape(BM, DP)
    do = do_desc.load([bh, start_m, 0]).reshape(BM, DP)
    row_base = bh.to(tl.int64) * S
    lse2 = tl.load(LSE + row_base + offs_m, mask=in_seq, other=float("inf")) * 1.4426950408889634
    delta = tl.load(Delta + row_base + offs_m, mask=in_seq, other=0.0)
    dq = tl.zeros([BM, DP], tl.float32)

    if IS_CAUSAL:
        # BM is a multiple of BN: keys before start_m are below the diagonal for every row of the block;
        # the band [start_m, start_m + BM) is masked j <= i (keys past S are past every stored row too).
        dq = _dq_key_blocks(dq, q, do, lse2, delta, k_desc, v_desc, kv_row, offs_m, 0, start_m, S, qk_scale,
                            BN, DP, 0, INTERP)
        dq = _dq_key_blocks(dq, q, do, lse2, delta, k_desc, v_desc, kv_row, offs_m, start_m,
                            tl.minimum(start_m + BM, S), S, qk_scale, BN, DP, 2, INTERP)
    else:
        full = S // BN * BN
        dq = _dq_key_blocks(dq, q, do, lse2, delta, k_desc, v_desc, kv_row, offs_m, 0, full, S, qk_scale,
                            BN, DP, 0, INTERP)
        if full < S:
            dq = _dq_key_blocks(dq, q, do, lse2, delta, k_desc, v_desc, kv_row, offs_m, full, S, S, qk_scale,
                                BN, DP, 1, INTERP)

    dq_desc.store([bh, start_m, 0], _bf16(dq * scale, INTERP).reshape(1, BM, DP))


def choose_config(D, causal):
    """A small heuristic in place of autotuning. dK/dV: BN keys x BM queries per step (BN a multiple of BM);
    dQ: BM queries x BN keys per step (BM a multiple of BN)."""
    DP = triton.next_power_of_2(D)
    if DP > 64:  # D 96 / 128: the fastest of a sweep at D=128 on the H200 (benchmarks/attn_bwd_triton_sweep.py)
        return DP, dict(BM=64, BN=64, num_warps=4, num_stages=2), dict(BM=128, BN=64, num_warps=8, num_stages=3)
    return DP, dict(BM=64, BN=128, num_warps=8, num_stages=3), dict(BM=128, BN=64, num_warps=8, num_stages=3)


def launch(dO, Q, K, V, O, LSE, dQ, dK, dV, B, H, HKV, S, D, DP, dkdv, dq, causal=CAUSAL):
    views = lambda t, heads: t.view(heads, S, D)  # noqa: E731 - [B*heads, S, D]: per-head sequence bound
    q3, o3, do3, dq3 = (views(t, B * H) for t in (Q, O, dO, dQ))
    k3, v3, dk3, dv3 = (views(t, B * HKV) for t in (K, V, dK, dV))
    Delta = torch.empty((B, H, S), dtype=torch.float32, device=Q.device)
    scale = 1.0 / math.sqrt(D)
    qk_scale = scale * LOG2E

    pre_bm = 128
    attn_bwd_delta_kernel[(triton.cdiv(S, pre_bm), B * H)](
        TensorDescriptor.from_tensor(o3, [1, pre_bm, DP]), TensorDescriptor.from_tensor(do3, [1, pre_bm, DP]),
        Delta, S, BM=pre_bm, DP=DP, num_warps=4)

    bm, bn = dkdv["BM"], dkdv["BN"]
    attn_bwd_dkdv_kernel[(triton.cdiv(S, bn), B * HKV)](
        TensorDescriptor.from_tensor(q3, [1, bm, DP]), TensorDescriptor.from_tensor(k3, [1, bn, DP]),
        TensorDescriptor.from_tensor(v3, [1, bn, DP]), TensorDescriptor.from_tensor(do3, [1, bm, DP]),
        TensorDescriptor.from_tensor(dk3, [1, bn, DP]), TensorDescriptor.from_tensor(dv3, [1, bn, DP]),
        LSE, Delta, S, H, HKV, qk_scale, scale,
        BM=bm, BN=bn, DP=DP, IS_CAUSAL=causal, INTERP=INTERPRETED,
        num_warps=dkdv["num_warps"], num_stages=dkdv["num_stages"])

    bm, bn = dq["BM"], dq["BN"]
    attn_bwd_dq_kernel[(triton.cdiv(S, bm), B * H)](
        TensorDescriptor.from_tensor(q3, [1, bm, DP]), TensorDescriptor.from_tensor(k3, [1, bn, DP]),
        TensorDescriptor.from_tensor(v3, [1, bn, DP]), TensorDescriptor.from_tensor(do3, [1, bm, DP]),
        TensorDescriptor.from_tensor(dq3, [1, bm, DP]),
        LSE, Delta, S, H, HKV, qk_scale, scale,
        BM=bm, BN=bn, DP=DP, IS_CAUSAL=causal, INTERP=INTERPRETED,
        num_warps=dq["num_warps"], num_stages=dq["num_stages"])


def xlang_entry(dO, Q, K, V, O, LSE, dQ, dK, dV, B, H, HKV, S, D):
    DP, dkdv, dq = choose_config(D, CAUSAL)
    launch(dO, Q, K, V, O, LSE, dQ, dK, dV, B, H, HKV, S, D, DP, dkdv, dq)
