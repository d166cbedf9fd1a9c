"""HOSTILE candidate. Class: correctness (issue 33's ragged batches).

What it does: the ragged prefill of the expert (tasks/attn_prefill_ragged/solutions/triton.py, TMA boxes, tl.dot),
except that its key tiles are aligned to the packed batch's rows, not to its sequence: the first key tile of a
sequence starts at the multiple of BN at or below the sequence's first row, and the causal mask compares packed
rows (key row <= query row) instead of positions within the sequence. So a query sees the tail of the sequence
before its own: right whenever every sequence starts at a multiple of BN (one sequence, or lengths that are
multiples of the tile), the case a test with B = 1 or tidy lengths never separates.

An honest judge must conclude: incorrect, provided the drawn batches have B >= 2 with ragged lengths (the task
draws them so: a sequence of length 1 whenever B >= 2, the rest a random composition, shuffled per call).
"""

import math

import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

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
def _kv_blocks(acc, l_i, m_i, q, k_desc, v_desc, kvh, rows, lo, hi, qk_scale,
               BN: tl.constexpr, D: tl.constexpr, INTERP: tl.constexpr):
    """Fold the packed key rows [lo, hi) into the running (acc, l, m); rows are packed rows too (the shortcut)."""
    offs_n = tl.arange(0, BN)
    for start_n in tl.range(lo, hi, BN):
        k = k_desc.load([start_n, kvh, 0]).reshape(BN, D)
        qk = _mma(q, k.T, tl.zeros([q.shape[0], BN], tl.float32), INTERP)
        qk = tl.where(rows[:, None] >= (start_n + offs_n)[None, :], qk, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
        p = tl.math.exp2(qk * qk_scale - m_new[:, None])
        alpha = tl.math.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = v_desc.load([start_n, kvh, 0]).reshape(BN, D)
        acc = _mma(_bf16(p, INTERP), v, acc * alpha[:, None], INTERP)
        m_i = m_new
    return acc, l_i, m_i


@triton.jit
def prefill_kernel(q_desc, k_desc, v_desc, out_ptr, cu_ptr, B, H, HKV, qk_scale,
                   BM: tl.constexpr, BN: tl.constexpr, D: tl.constexpr, INTERP: tl.constexpr):
    pid = tl.program_id(0)
    h = tl.program_id(1)
    # Which sequence and which of its query blocks: blocks are numbered sequence after sequence.
    seq_start = 0
    n = 0
    m_blk = -1
    first = 0
    for b in range(0, B):
        lo = tl.load(cu_ptr + b)
        hi = tl.load(cu_ptr + b + 1)
        blocks = (hi - lo + BM - 1) // BM
        inside = (pid >= first) & (pid < first + blocks)
        seq_start = tl.where(inside, lo, seq_start)
        n = tl.where(inside, hi - lo, n)
        m_blk = tl.where(inside, pid - first, m_blk)
        first += blocks
    if m_blk >= 0:
        kvh = h // (H // HKV)
        off_m = m_blk * BM
        rows = off_m + tl.arange(0, BM)  # positions within the sequence
        q = q_desc.load([seq_start + off_m, h, 0]).reshape(BM, D)
        m_i = tl.full([BM], float("-inf"), tl.float32)
        l_i = tl.zeros([BM], tl.float32)
        acc = tl.zeros([BM, D], tl.float32)
        # The shortcut: key tiles aligned to the packed batch, from the tile holding the sequence's first row.
        packed_rows = seq_start + rows
        acc, l_i, m_i = _kv_blocks(acc, l_i, m_i, q, k_desc, v_desc, kvh, packed_rows, seq_start // BN * BN,
                                   seq_start + tl.minimum(off_m + BM, n), qk_scale, BN, D, INTERP)
        o = _bf16(acc / l_i[:, None], INTERP)
        offs_d = tl.arange(0, D)
        token = (seq_start + rows).to(tl.int64)
        tl.store(out_ptr + (token * H + h)[:, None] * D + offs_d[None, :], o, mask=(rows < n)[:, None])


def choose_config(D):
    """A small heuristic in place of autotuning (unmeasured): D = 256 halves the key block to fit shared memory."""
    if D <= 128:
        return dict(BM=128, BN=128, num_warps=8, num_stages=3)
    return dict(BM=128, BN=64, num_warps=8, num_stages=2)


def xlang_entry(q, k, v, cu_seqlens, out, B, T, H, HKV, D):
    cfg = choose_config(D)
    BM, BN = cfg["BM"], cfg["BN"]
    q_desc = TensorDescriptor.from_tensor(q, [BM, 1, D])
    k_desc = TensorDescriptor.from_tensor(k, [BN, 1, D])
    v_desc = TensorDescriptor.from_tensor(v, [BN, 1, D])
    grid = (triton.cdiv(T, BM) + B, H)
    prefill_kernel[grid](q_desc, k_desc, v_desc, out, cu_seqlens, B, H, HKV, LOG2E / math.sqrt(D),
                         BM=BM, BN=BN, D=D, INTERP=INTERPRETED, num_warps=cfg["num_warps"],
                         num_stages=cfg["num_stages"])
