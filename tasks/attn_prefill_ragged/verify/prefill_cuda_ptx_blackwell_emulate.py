"""CPU model of tasks/attn_prefill_ragged/solutions/cuda_ptx_blackwell.cu (issue 33), for checking its values without a
Blackwell GPU; the kernel has never run on one. What it re-enacts, in torch, vectorised over a CTA's 128 rows:

- the cu_seqlens walk (blockIdx.x -> sequence b and query tile mt, the sequence's last tile first; CTAs past the last
  tile do nothing);
- TMA boxes {64, 1, rows} of the packed [T, heads, D] tensors written into a byte-addressed shared memory with the
  128-byte swizzle (16-byte chunk ^= address bits 7-9), zero past T only (rows of the next sequence are loaded), into
  the kernel's own slots (K_j and V_j in slot j % STAGES, so PV_{j-1} reads the slot V_{j-1} went to);
- the kernel's descriptor bit packing (desc_kmajor, desc_mnmajor with its LBO, idesc_bf16) mirrored, then DECODED by
  rules written from the PTX ISA text (9.7.16.4.1 shared memory descriptor, 9.7.16.3 canonical K-major / MN-major
  128B-swizzled layouts, 9.7.16.4.2 instruction descriptor), as tasks/attn_fwd/verify's Blackwell model does;
- TMEM as 128 lanes x 512 columns of 32-bit cells with the 32x32b rule (warp w touches lanes 32w..32w+31) and
  bounds checked: S_j into buffer j&1 at columns j&1 * BN, P_j packed two bf16 per cell (low half = even key) over
  its first BN/2 columns and read back as the A operand of O += P V, O at columns 256..256+D;
- the order of TMEM accumulation: S_j, then PV_{j-1} (after the correction of step j-1), then softmax j (lazy
  rescale, threshold 8 in log2 units) and the warp-uniform O correction once PV_{j-1} is in O;
- the masks (a block is masked when it reaches past the tile's first row or past n; key j BN + c dropped when
  c >= min(n, row + 1) - j BN) and the epilogue's stores of rows < n only, counted: every element of out must be
  written exactly once, nothing past the end.

The rules are hand-written, NOT the hardware: if a rule were misread the same way in the kernel and here, both
agree and both are wrong. Barriers, the producer's timing and speed are not modelled here (the barrier protocol is
attn_fwd's, whose model part B checks; tests/test_prefill_cuda_ptx_blackwell_model.py runs it at this kernel's
stage counts).

Mutations for the tests: `one_sequence=True` treats the batch as one causal sequence of T rows (the walk replaced by
cu = [0, T]); `mask="last_block"` masks only the last key block (attn_fwd's rule, right only for BN == BM).

    python3 tasks/attn_prefill_ragged/verify/prefill_cuda_ptx_blackwell_emulate.py
"""

from __future__ import annotations

import math

import torch

LOG2E = 1.4426950408889634
BM = 128
CHUNK_Q = BM * 128
TMEM_COLS = 512
TMEM_O = 256
THRESH = 8.0
STATS = {"corrections": 0}


class Cfg:
    """bpre::Cfg<DP>."""

    def __init__(self, DP: int):
        self.DP = DP
        self.BN = 64 if DP == 256 else 128
        self.CH = DP // 64
        self.CHUNK_KV = self.BN * 128
        self.Q_BYTES = self.CH * CHUNK_Q
        self.KV_BYTES = self.CH * self.CHUNK_KV
        self.STAGES = 2 if DP == 256 else 3


def bf16(x):
    return x.to(torch.bfloat16).float()


# ---------------------------------------------------------------- the kernel's encodings (mirrored)
def desc_kmajor(saddr):
    return ((saddr & 0x3FFFF) >> 4) | (1 << 16) | (64 << 32) | (1 << 46) | (2 << 61)


def desc_mnmajor(saddr, chunk_bytes):
    return ((saddr & 0x3FFFF) >> 4) | ((chunk_bytes >> 4) << 16) | (64 << 32) | (1 << 46) | (2 << 61)


def idesc_bf16(M, N, b_mn_major):
    return (1 << 4) | (1 << 7) | (1 << 10) | (b_mn_major << 16) | ((N >> 3) << 17) | ((M >> 4) << 24)


# ---------------------------------------------------------------- rules as read from the PTX ISA
def decode_desc(d):
    assert (d >> 46) & 7 == 1, "fixed 0b001 at bits 46-48"
    assert (d >> 49) & 7 == 0 and (d >> 52) & 1 == 0 and (d >> 53) & 0xFF == 0
    assert (d >> 61) & 7 == 2, "128-byte swizzle"
    return dict(start=(d & 0x3FFF) << 4, lbo=((d >> 16) & 0x3FFF) << 4, sbo=((d >> 32) & 0x3FFF) << 4)


def decode_idesc(i):
    assert i & 0xF == 0 and (i >> 4) & 3 == 1 and (i >> 7) & 7 == 1 and (i >> 10) & 7 == 1, "bf16 x bf16 -> f32"
    assert (i >> 13) & 3 == 0 and (i >> 23) & 1 == 0 and (i >> 29) & 7 == 0
    f = dict(M=((i >> 24) & 31) << 4, N=((i >> 17) & 63) << 3, a_mn=(i >> 15) & 1, b_mn=(i >> 16) & 1)
    # kind::f16, cta_group::1, M = 128: N 8..256 in steps of 8, steps of 16 with A in TMEM (arch_docs/b200/params.md,
    # from the PTX shape table and CUTLASS's rule); the stricter form holds for every MMA of this kernel
    assert f["M"] == 128 and f["N"] % 16 == 0 and 16 <= f["N"] <= 256 and f["a_mn"] == 0
    return f


def swz(addr):  # 128-byte swizzle on the absolute shared address (patterns start on 1024-B boundaries)
    return addr ^ (((addr >> 7) & 7) << 4)


class Smem:
    """Shared memory as bf16 values (held exactly in fp32), addressed in bytes; NaN where never written."""

    def __init__(self, nbytes: int):
        self.m = torch.full((nbytes // 2,), math.nan)

    def tma(self, base, src, token0, head, col0, rows):
        """Box {64, 1, rows} of the packed [T, heads, D] src at (col0, head, token0); zero fill past T."""
        T = src.shape[0]
        r = torch.arange(rows)[:, None]
        c = torch.arange(64)[None, :]
        tok = token0 + r
        vals = torch.where(tok < T, src[tok.clamp(max=T - 1), head, col0 + c].float(), 0.0)
        self.m[swz(base + r * 128 + c * 2) // 2] = vals

    def kmajor(self, d, rows):
        """[rows, 16] operand of a K-major SW128 descriptor: ((8,m),(T,2k)):((8T,SBO),(1,T))."""
        f = decode_desc(d)
        r = torch.arange(rows)[:, None]
        k = torch.arange(16)[None, :]
        return self.m[swz(f["start"] + (r // 8) * f["sbo"] + (r % 8) * 128 + k * 2) // 2]

    def mnmajor(self, d, n):
        """[16 k, n] operand of an MN-major SW128 descriptor: ((T,8,m),(8,k)):((1,T,LBO),(8T,SBO))."""
        f = decode_desc(d)
        k = torch.arange(16)[:, None]
        c = torch.arange(n)[None, :]
        return self.m[swz(f["start"] + (c // 64) * f["lbo"] + (k // 8) * f["sbo"] + (k % 8) * 128 + (c % 64) * 2) // 2]


class Tmem:
    """128 lanes x 512 columns of 32-bit cells."""

    def __init__(self):
        self.u = torch.zeros((128, TMEM_COLS), dtype=torch.int32)

    def _cols(self, taddr, n):
        col = taddr & 0xFFFF
        assert 0 <= col and col + n <= TMEM_COLS, f"TMEM columns {col}..{col + n} outside the allocation"
        return col

    def ld(self, warp, taddr, n):  # tcgen05.ld.32x32b.xN by warp `warp`: [32 lanes, n] words
        lane, col = taddr >> 16, self._cols(taddr, n)
        assert lane == 32 * (warp % 4), "warp w may only access lanes 32(w%4)..+31"
        return self.u[lane:lane + 32, col:col + n].clone()

    def st(self, warp, taddr, words):
        lane, col = taddr >> 16, self._cols(taddr, words.shape[1])
        assert lane == 32 * (warp % 4)
        self.u[lane:lane + 32, col:col + words.shape[1]] = words

    def a_bf16(self, taddr, k):  # A operand [128, k] bf16 from TMEM (row-major, 2 per cell, low half = even k)
        col = self._cols(taddr, k // 2)
        w = self.u[:, col:col + k // 2]
        out = torch.empty((128, k), dtype=torch.int32)
        out[:, 0::2], out[:, 1::2] = (w & 0xFFFF) << 16, w & -65536
        return out.view(torch.float32)


def mma(tm, d_tmem, A, Bop, idesc, acc):
    """D[tmem] (+)= A . B with A [128, 16]; B as the descriptor gives it: K-major [N, 16], MN-major [16, N]."""
    f = decode_idesc(idesc)
    Bm = Bop if f["b_mn"] else Bop.T
    assert d_tmem >> 16 == 0 and A.shape == (128, 16) and Bm.shape == (16, f["N"])
    col = tm._cols(d_tmem, f["N"])
    D = A.double() @ Bm.double()
    cur = tm.u[:, col:col + f["N"]].view(torch.float32).double() if acc else 0.0
    tm.u[:, col:col + f["N"]] = (cur + D).float().view(torch.int32)


def pack_bf16(lo, hi):
    lo16 = lo.to(torch.bfloat16).view(torch.int16).to(torch.int32) & 0xFFFF
    hi16 = hi.to(torch.bfloat16).view(torch.int16).to(torch.int32) & 0xFFFF
    return lo16 | (hi16 << 16)


def cta(cfg, q, k, v, cu, out_flat, count, bx, h, B, H, HKV, mask="kernel"):
    """One CTA (blockIdx.x = bx, blockIdx.y = h) of bpre::prefill_tcgen05<DP>; returns (b, mt) or None."""
    DP, BN, CH, ST = cfg.DP, cfg.BN, cfg.CH, cfg.STAGES
    # the cu_seqlens walk
    b, mt, x = 0, -1, bx
    while b < B:
        seq_start, n = cu[b], cu[b + 1] - cu[b]
        tiles = -(-n // BM)
        if x < tiles:
            mt = tiles - 1 - x
            break
        x -= tiles
        b += 1
    if mt < 0:
        return None
    kvh = h // (H // HKV)
    nkb = -(-min(n, (mt + 1) * BM) // BN)
    scale_log2 = torch.tensor(LOG2E / math.sqrt(DP), dtype=torch.float32)
    idesc_s, idesc_o = idesc_bf16(BM, BN, 0), idesc_bf16(BM, DP, 1)

    sm, tm = Smem(cfg.Q_BYTES + 2 * ST * cfg.KV_BYTES), Tmem()
    sq, sk, sv = 0, cfg.Q_BYTES, cfg.Q_BYTES + ST * cfg.KV_BYTES
    for ch in range(CH):
        sm.tma(sq + ch * CHUNK_Q, q, seq_start + mt * BM, h, 64 * ch, BM)
    rows = mt * BM + torch.arange(128)
    m = torch.full((128,), -math.inf)
    l = torch.zeros(128)

    def needs_mask(j):
        if mask == "last_block":
            return j == nkb - 1
        return j * BN + BN - 1 > mt * BM or j * BN + BN > n

    def issue_pv(i):
        pb, vs = i & 1, i % ST
        dv = desc_mnmajor(sv + vs * cfg.KV_BYTES, cfg.CHUNK_KV)
        for kk in range(BN // 16):  # 16 keys = 8 TMEM columns of P = 2048 B of V
            mma(tm, TMEM_O, tm.a_bf16(pb * BN + kk * 8, 16), sm.mnmajor(dv + ((kk * 2048) >> 4), DP), idesc_o,
                i > 0 or kk > 0)

    for j in range(nkb + 1):
        if j < nkb:  # producer: K_j, V_j into slot j % ST; MMA thread: S_j into buffer j & 1
            s_slot, sb = j % ST, j & 1
            for ch in range(CH):
                sm.tma(sk + s_slot * cfg.KV_BYTES + ch * cfg.CHUNK_KV, k, seq_start + j * BN, kvh, 64 * ch, BN)
                sm.tma(sv + s_slot * cfg.KV_BYTES + ch * cfg.CHUNK_KV, v, seq_start + j * BN, kvh, 64 * ch, BN)
            dq, dk = desc_kmajor(sq), desc_kmajor(sk + s_slot * cfg.KV_BYTES)
            for kk in range(DP // 16):
                offq = ((kk // 4) * CHUNK_Q + (kk % 4) * 32) >> 4
                offk = ((kk // 4) * cfg.CHUNK_KV + (kk % 4) * 32) >> 4
                mma(tm, sb * BN, sm.kmajor(dq + offq, 128), sm.kmajor(dk + offk, BN), idesc_s, kk > 0)
        if j >= 1:  # PV_{j-1}, after P_{j-1} and the correction of step j-1
            issue_pv(j - 1)
        if j == nkb:
            break
        # softmax warps, block j
        sb = j & 1
        s = torch.cat([tm.ld(w, ((32 * w) << 16) + sb * BN, BN) for w in range(4)]).view(torch.float32).clone()
        if needs_mask(j):
            lim = torch.minimum(torch.tensor(n), rows + 1) - j * BN
            s[torch.arange(BN)[None, :] >= lim[:, None]] = -math.inf
        mx = s.amax(1) * scale_log2
        m_new = torch.where(mx > m + THRESH, mx, m)
        ms = torch.where(m_new == -math.inf, 0.0, m_new)
        alpha = torch.exp2(m - ms)
        p = torch.exp2((s.double() * scale_log2.double() - ms[:, None].double()).float())
        l = l * alpha + p.sum(1)
        words = pack_bf16(p[:, 0::2], p[:, 1::2])  # cell i: keys 2i (low), 2i + 1 (high)
        for part in range(BN // 64):
            for w in range(4):
                tm.st(w, ((32 * w) << 16) + sb * BN + 32 * part, words[32 * w:32 * w + 32, 32 * part:32 * part + 32])
        if j >= 1:  # PV_{j-1} has completed here (the kernel waits pv_done phase j-1)
            for w in range(4):
                if (m_new[32 * w:32 * w + 32] > m[32 * w:32 * w + 32]).any():
                    STATS["corrections"] += 1
                    for c in range(DP // 32):
                        t = ((32 * w) << 16) + TMEM_O + 32 * c
                        o = tm.ld(w, t, 32).view(torch.float32) * alpha[32 * w:32 * w + 32, None]
                        tm.st(w, t, o.view(torch.int32))
        m = m_new

    # epilogue: O / l in bf16, rows < n only, at the kernel's flat addresses
    inv = torch.where(l > 0, 1 / l, 0.0)
    ok = rows < n
    orow = ((seq_start + rows) * H + h) * DP
    for c in range(DP // 32):
        o = torch.cat([tm.ld(w, ((32 * w) << 16) + TMEM_O + 32 * c, 32) for w in range(4)]).view(torch.float32)
        addr = orow[:, None] + 32 * c + torch.arange(32)[None, :]
        out_flat[addr[ok]] = bf16(o * inv[:, None])[ok]
        count.index_put_((addr[ok].reshape(-1),), torch.ones(int(ok.sum()) * 32, dtype=torch.int32), accumulate=True)
    return b, mt


def xlang_entry_model(inputs, shape, one_sequence=False, mask="kernel"):
    """What xlang_entry leaves in out ([T, H, D], NaN where nothing was written) and the (b, tile) each CTA of head
    0 took; asserts every element written exactly once and nothing past the end."""
    B, T, H, HKV, D = (shape[k] for k in ("B", "T", "H", "HKV", "D"))
    cfg = Cfg(D)
    q, k, v = inputs["q"], inputs["k"], inputs["v"]
    cu = inputs["cu_seqlens"].tolist()
    if one_sequence:
        cu, B = [0, T], 1
    guard = BM * H * D  # a tile's worth of rows past the end
    out_flat = torch.full((T * H * D + guard,), math.nan)
    count = torch.zeros(T * H * D + guard, dtype=torch.int32)
    visited = []
    for bx in range(-(-T // BM) + shape["B"]):  # the kernel's grid: ceil(T / BM) + B
        for h in range(H):
            took = cta(cfg, q, k, v, cu, out_flat, count, bx, h, B, H, HKV, mask)
            if took is not None and h == 0:
                visited.append(took)
    assert count[T * H * D:].eq(0).all(), "a store past the end of out"
    assert count[:T * H * D].eq(1).all(), "an element of out written twice or never"
    return out_flat[:T * H * D].reshape(T, H, D), visited


if __name__ == "__main__":
    from xlang.task import get_task

    task = get_task("attn_prefill_ragged")
    for sizes in ({"B": 3, "T": 300, "H": 2, "HKV": 1, "D": 128}, {"B": 3, "T": 300, "H": 2, "HKV": 1, "D": 256}):
        shape = task.shape(sizes)
        inputs = task.make_inputs(shape, 1, "cpu", "normal")
        ref = task.reference(inputs, shape)["out"]
        atol, rtol = task.tolerance_for("out", "normal")
        for variant in ({}, {"one_sequence": True}, {"mask": "last_block"}):
            got, visited = xlang_entry_model(inputs, shape, **variant)
            excess = ((got - ref).abs() - (atol + rtol * ref.abs())).nan_to_num(math.inf).max().item()
            print(sizes, variant or "kernel", f"tiles {len(visited)}", f"worst excess over tolerance {excess:.3g}",
                  f"O corrections so far {STATS['corrections']}")
