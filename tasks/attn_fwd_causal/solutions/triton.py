"""Expert Triton attention forward for xlang's `attn_fwd_causal` (CAUSAL = True; `attn_fwd` is the same file with CAUSAL = False).

O[b,h] = softmax(scale * Q[b,h] K[b,kv]^T) V[b,kv], LSE[b,h] = logsumexp of the scaled scores (natural log),
kv = h // (H // HKV) (GQA), any S >= 1, head dim D in {64, 96, 128}.

Design, top-down:
* One program per (query block of BM rows, batch x query head); the query-block index is the fast grid axis,
  so the programs running together read the same head's K and V out of L2.
* Q, K, V and O move through TMA: host-built rank-3 tensor descriptors over [B*heads, S, D]. The middle
  (sequence) bound is per head, so a tail block is zero-filled on load and clipped on store without masks and
  never touches the next head. The block is DP = next power of two >= D wide (96 -> 128): the columns past D
  load as zeros (they add nothing to Q.K^T and give zero O columns) and the O store is clipped at D.
* tl.dot on bf16 tiles: wgmma on sm_90a, tcgen05.mma on sm_100a. Online softmax in the exp2 domain:
  scores are multiplied by scale*log2(e) once, the running max m and sum l are kept per row, and
  LSE = (m + log2 l) * ln 2 at the end.
* Key blocks are split by what they need: full blocks run without any mask; the one ragged tail block
  (S % BN) masks keys >= S; causal runs the blocks strictly below the diagonal unmasked, the diagonal band with
  the j <= i mask, and skips every block above it. Causal programs take the query blocks last-first so the
  longest programs start first.
* Block sizes, warps and pipeline depth come from a small heuristic on the head dim and architecture.
"""

import math

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

CAUSAL = True

LOG2E = 1.4426950408889634


@triton.jit
def _kv_blocks(acc, l_i, m_i, q, k_desc, v_desc, kv_row, offs_m, lo, hi, S, qk_scale,
               BN: tl.constexpr, DP: tl.constexpr, MASK: tl.constexpr, WS: tl.constexpr):
    """Fold key blocks [lo, hi) into the running (acc, l, m). MASK: 0 none, 1 keys >= S, 2 causal."""
    offs_n = tl.arange(0, BN)
    for start_n in tl.range(lo, hi, BN, warp_specialize=WS):
        k = k_desc.load([kv_row, start_n, 0]).reshape(BN, DP)
        qk = tl.dot(q, k.T)
        if MASK == 1:
            qk = tl.where((start_n + offs_n)[None, :] < S, qk, float("-inf"))
        if MASK == 2:
            qk = tl.where(offs_m[:, None] >= (start_n + offs_n)[None, :], qk, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
        p = tl.math.exp2(qk * qk_scale - m_new[:, None])
        alpha = tl.math.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        v = v_desc.load([kv_row, start_n, 0]).reshape(BN, DP)
        acc = tl.dot(p.to(tl.bfloat16), v, acc)
        m_i = m_new
    return acc, l_i, m_i


@triton.jit
def attn_fwd_kernel(q_desc, k_desc, v_desc, o_desc, LSE, S, H, HKV, qk_scale,
                    BM: tl.constexpr, BN: tl.constexpr, DP: tl.constexpr, IS_CAUSAL: tl.constexpr,
                    WS: tl.constexpr):
    bh = tl.program_id(1)
    if IS_CAUSAL:
        m_blk = tl.num_programs(0) - 1 - tl.program_id(0)
    else:
        m_blk = tl.program_id(0)
    b = bh // H
    h = bh % H
    kv_row = b * HKV + h // (H // HKV)
    off_m = m_blk * BM
    offs_m = off_m + tl.arange(0, BM)

    q = q_desc.load([bh, off_m, 0]).reshape(BM, DP)
    m_i = tl.full([BM], float("-inf"), tl.float32)
    l_i = tl.zeros([BM], tl.float32)
    acc = tl.zeros([BM, DP], tl.float32)

    if IS_CAUSAL:
        # Blocks entirely at or below the diagonal for every row of this query block: no mask.
        band = off_m // BN * BN
        acc, l_i, m_i = _kv_blocks(acc, l_i, m_i, q, k_desc, v_desc, kv_row, offs_m, 0, band, S, qk_scale,
                                   BN, DP, 0, WS)
        # The diagonal band; keys past S only meet query rows past S, which are never stored.
        hi = tl.minimum(off_m + BM, S)
        acc, l_i, m_i = _kv_blocks(acc, l_i, m_i, q, k_desc, v_desc, kv_row, offs_m, band, hi, S, qk_scale,
                                   BN, DP, 2, WS)
    else:
        full = S // BN * BN
        acc, l_i, m_i = _kv_blocks(acc, l_i, m_i, q, k_desc, v_desc, kv_row, offs_m, 0, full, S, qk_scale,
                                   BN, DP, 0, WS)
        if full < S:
            acc, l_i, m_i = _kv_blocks(acc, l_i, m_i, q, k_desc, v_desc, kv_row, offs_m, full, S, S, qk_scale,
                                       BN, DP, 1, WS)

    o = acc / l_i[:, None]
    o_desc.store([bh, off_m, 0], o.to(tl.bfloat16).reshape(1, BM, DP))
    lse = (m_i + tl.math.log2(l_i)) * 0.6931471805599453
    tl.store(LSE + bh.to(tl.int64) * S + offs_m, lse, mask=offs_m < S)


def _capability(device):
    props = torch.cuda.get_device_properties(device)
    return props.major * 10 + props.minor


def choose_config(D, S, capability, causal):
    """A small heuristic in place of autotuning."""
    DP = triton.next_power_of_2(D)
    if capability >= 100:
        return dict(BM=128, BN=128, DP=DP, num_warps=8, num_stages=3)
    if DP <= 64:
        return dict(BM=128, BN=128, DP=DP, num_warps=8, num_stages=4)
    return dict(BM=128, BN=128, DP=DP, num_warps=8, num_stages=3)


def launch(Q, K, V, O, LSE, B, H, HKV, S, D, BM, BN, DP, num_warps, num_stages, WS=False, causal=CAUSAL):
    q3 = Q.view(B * H, S, D)
    k3 = K.view(B * HKV, S, D)
    v3 = V.view(B * HKV, S, D)
    o3 = O.view(B * H, S, D)
    q_desc = TensorDescriptor.from_tensor(q3, [1, BM, DP])
    k_desc = TensorDescriptor.from_tensor(k3, [1, BN, DP])
    v_desc = TensorDescriptor.from_tensor(v3, [1, BN, DP])
    o_desc = TensorDescriptor.from_tensor(o3, [1, BM, DP])
    qk_scale = LOG2E / math.sqrt(D)
    grid = (triton.cdiv(S, BM), B * H)
    attn_fwd_kernel[grid](q_desc, k_desc, v_desc, o_desc, LSE, S, H, HKV, qk_scale,
                          BM=BM, BN=BN, DP=DP, IS_CAUSAL=causal, WS=WS, num_warps=num_warps, num_stages=num_stages)


def xlang_entry(Q, K, V, O, LSE, B, H, HKV, S, D):
    cfg = choose_config(D, S, _capability(Q.device), CAUSAL)
    launch(Q, K, V, O, LSE, B, H, HKV, S, D, **cfg)
