"""Expert Triton causal prefill over a ragged batch for xlang's `attn_prefill_ragged`.

The causal attention forward expert (tasks/attn_fwd/solutions/triton.py) adapted to packed sequences: q [T, H, D],
k and v [T, HKV, D], sequence b at rows cu_seqlens[b] .. cu_seqlens[b+1] - 1, causal within it; kv head
h // (H // HKV) (GQA); D in {128, 256}.

Design, top-down:
* One program per (query block of BM rows of one sequence, query head). The grid has cdiv(T, BM) + B blocks
  along its first axis, at least sum_b cdiv(n_b, BM); a program walks cu_seqlens to find its sequence and its
  block in it (B scalar loads), and one past the last block returns at once. No host read of cu_seqlens: it
  changes from call to call and a host copy would stall the stream.
* Q, K and V move through TMA: host-built rank-3 tensor descriptors over [T, heads, D] with boxes of [rows, 1, D].
  A box may run past its sequence's end into the next sequence's rows (or past T, where TMA fills zeros): such
  keys only meet query rows past the end under the causal mask j <= i, and such query rows are never stored.
  out is stored with a masked pointer store (rows < n_b): a TMA store would write the next sequence's rows.
* tl.dot on bf16 tiles (wgmma on sm_90a, tcgen05.mma on sm_100a), online softmax in the exp2 domain, as the
  forward expert: key blocks strictly below the diagonal unmasked, the diagonal band with the j <= i mask.

Under Triton's CPU interpreter (TRITON_INTERPRET=1, the tests) the dots take exact fp32 copies and the bf16 cast
rounds to nearest even by hand (see tasks/attn_bwd/solutions/triton.py: the interpreter's own dot multiplies raw
bf16 bits and its cast truncates); compiled code has neither.

Never run on a GPU (written in a session without one): its speed against cuDNN is unmeasured.
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
def _kv_blocks(acc, l_i, m_i, q, k_desc, v_desc, seq_start, kvh, rows, lo, hi, qk_scale,
               BN: tl.constexpr, D: tl.constexpr, CAUSAL_MASK: tl.constexpr, INTERP: tl.constexpr):
    """Fold the sequence's key blocks [lo, hi) (positions within it) into the running (acc, l, m)."""
    offs_n = tl.arange(0, BN)
    for start_n in tl.range(lo, hi, BN):
        k = k_desc.load([seq_start + start_n, kvh, 0]).reshape(BN, D)
        qk = _mma(q, k.T, tl.zeros([q.shape[0], BN], tl.float32), INTERP)
        if CAUSAL_MASK:
            qk = tl.where(rows[:, None] >= (start_n + offs_n)[None, :], qk, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
        p = tl.math.exp2(qk * qk_scale - m_new[:, None])
        alpha = tl.math.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = v_desc.load([seq_start + start_n, kvh, 0]).reshape(BN, D)
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
        band = off_m // BN * BN  # keys below this see no mask for any row of the block
        acc, l_i, m_i = _kv_blocks(acc, l_i, m_i, q, k_desc, v_desc, seq_start, kvh, rows, 0, band, qk_scale,
                                   BN, D, False, INTERP)
        acc, l_i, m_i = _kv_blocks(acc, l_i, m_i, q, k_desc, v_desc, seq_start, kvh, rows, band,
                                   tl.minimum(off_m + BM, n), qk_scale, BN, D, True, INTERP)
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
