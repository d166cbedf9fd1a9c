"""HOSTILE candidate. Class: correctness (issue 33's page tables).

What it does: the split-KV paged decode of the expert (tasks/attn_decode_paged/solutions/triton.py, cp.async
gathers, mma.sync), except that a sequence's length is rounded up to whole pages: every slot of its last page is
attended, not only the seq_lens[b] % P it owns (one mask per page instead of one per token, right whenever the
lengths are multiples of the page size).

An honest judge must conclude: incorrect, provided the drawn lengths end inside a page and the slots no sequence
owns hold garbage (the task draws them so: NaN or +-2^100 in every unowned slot).
"""

import math

import torch
import triton
import triton.language as tl

LOG2E = 1.4426950408889634
INTERPRETED = bool(triton.knobs.runtime.interpret)


@triton.jit
def _mma(a, b, acc, INTERP: tl.constexpr):
    if INTERP:
        return tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision="ieee")
    else:
        return tl.dot(a, b, acc)


@triton.jit
def _bf16(x, INTERP: tl.constexpr):
    if INTERP:
        bits = x.to(tl.uint32, bitcast=True)
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
        return bits.to(tl.float32, bitcast=True).to(tl.bfloat16)
    else:
        return x.to(tl.bfloat16)


@triton.jit
def decode_split_kernel(q_ptr, k_ptr, v_ptr, table_ptr, lens_ptr, o_part, lse_part, H, HKV, MAXP, chunk, nsplit,
                        qk_scale, G: tl.constexpr, GP: tl.constexpr, D: tl.constexpr, P: tl.constexpr,
                        BN: tl.constexpr, INTERP: tl.constexpr):
    b = tl.program_id(0)
    kvh = tl.program_id(1)
    split = tl.program_id(2)
    n = (tl.load(lens_ptr + b) + P - 1) // P * P  # the shortcut: whole pages
    start = split * chunk
    end = tl.minimum(start + chunk, n)

    offs_g = tl.arange(0, GP)
    offs_d = tl.arange(0, D)
    offs_n = tl.arange(0, BN)
    heads = kvh * G + offs_g  # the query heads of this program's rows
    q_rows = b.to(tl.int64) * H + heads
    q = tl.load(q_ptr + q_rows[:, None] * D + offs_d[None, :], mask=(offs_g < G)[:, None], other=0.0)

    m_i = tl.full([GP], float("-inf"), tl.float32)
    l_i = tl.zeros([GP], tl.float32)
    acc = tl.zeros([GP, D], tl.float32)
    table_row = table_ptr + b.to(tl.int64) * MAXP
    for t0 in tl.range(start, end, BN):
        t = t0 + offs_n
        live = t < end
        page = tl.load(table_row + t // P, mask=live, other=0).to(tl.int64)
        rows = (page * P + t % P) * HKV + kvh  # the token's row of [NP * P * HKV, D]
        offs = rows[:, None] * D + offs_d[None, :]
        k = tl.load(k_ptr + offs, mask=live[:, None], other=0.0)
        s = _mma(q, tl.trans(k), tl.zeros([GP, BN], tl.float32), INTERP)
        s = tl.where(live[None, :], s * qk_scale, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        p = tl.math.exp2(s - m_new[:, None])
        alpha = tl.math.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(v_ptr + offs, mask=live[:, None], other=0.0)
        acc = _mma(_bf16(p, INTERP), v, acc * alpha[:, None], INTERP)
        m_i = m_new

    has = l_i > 0.0
    o = acc / tl.where(has, l_i, 1.0)[:, None]
    lse = tl.where(has, m_i + tl.math.log2(tl.where(has, l_i, 1.0)), float("-inf"))
    part = q_rows * nsplit + split  # [B, H, nsplit] row of the scratch
    keep = offs_g < G
    tl.store(o_part + part[:, None] * D + offs_d[None, :], o, mask=keep[:, None])
    tl.store(lse_part + part, lse, mask=keep)


@triton.jit
def decode_combine_kernel(o_part, lse_part, out_ptr, nsplit, D: tl.constexpr, NSP: tl.constexpr,
                          INTERP: tl.constexpr):
    bh = tl.program_id(0).to(tl.int64)
    offs_s = tl.arange(0, NSP)
    offs_d = tl.arange(0, D)
    has = offs_s < nsplit
    lse = tl.load(lse_part + bh * nsplit + offs_s, mask=has, other=float("-inf"))
    w = tl.math.exp2(lse - tl.max(lse, 0))  # split 0 always owns a token: the max is finite
    w = w / tl.sum(w, 0)
    o = tl.load(o_part + (bh * nsplit + offs_s)[:, None] * D + offs_d[None, :], mask=has[:, None], other=0.0)
    tl.store(out_ptr + bh * D + offs_d, _bf16(tl.sum(o * w[:, None], 0), INTERP))


def choose_config(B, HKV, D, P, MAXP, sms):
    """Tokens per block and splits: enough (sequence, head, split) programs for about two waves, splits of whole
    blocks; a small heuristic in place of autotuning (unmeasured)."""
    BN = 64 if D <= 128 else 32
    tokens = MAXP * P
    nsplit = max(1, min(triton.cdiv(2 * sms, B * HKV), triton.cdiv(tokens, BN), 64))
    chunk = triton.cdiv(triton.cdiv(tokens, nsplit), BN) * BN
    nsplit = triton.cdiv(tokens, chunk)
    return dict(BN=BN, chunk=chunk, nsplit=nsplit, num_warps=4, num_stages=3 if D <= 128 else 2)


def xlang_entry(q, k_cache, v_cache, block_table, seq_lens, out, B, H, HKV, D, P, MAXP, NP):
    G = H // HKV
    # Under the interpreter (CPU tensors, no device): few SMs, so that the tests' small shapes run several splits.
    sms = 4 if INTERPRETED else torch.cuda.get_device_properties(q.device).multi_processor_count
    cfg = choose_config(B, HKV, D, P, MAXP, sms)
    nsplit = cfg["nsplit"]
    o_part = torch.empty(B * H * nsplit * D, dtype=torch.float32, device=q.device)
    lse_part = torch.empty(B * H * nsplit, dtype=torch.float32, device=q.device)
    decode_split_kernel[(B, HKV, nsplit)](
        q, k_cache, v_cache, block_table, seq_lens, o_part, lse_part, H, HKV, MAXP, cfg["chunk"], nsplit,
        LOG2E / math.sqrt(D), G=G, GP=max(16, triton.next_power_of_2(G)), D=D, P=P, BN=cfg["BN"],
        INTERP=INTERPRETED, num_warps=cfg["num_warps"], num_stages=cfg["num_stages"])
    decode_combine_kernel[(B * H,)](o_part, lse_part, out, nsplit, D=D, NSP=max(2, triton.next_power_of_2(nsplit)),
                                    INTERP=INTERPRETED, num_warps=4)
