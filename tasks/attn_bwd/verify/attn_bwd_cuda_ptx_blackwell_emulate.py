"""CPU model of tasks/attn_bwd/solutions/cuda_ptx_blackwell.cu (issue 14, the cuda_ptx Blackwell attention
backward). No Blackwell GPU exists here: this checks the kernel's index arithmetic and its synchronisation
order against hand-written rules of the PTX ISA, NOT against hardware. The kernel has never run.

Modelled (rules as read from the PTX ISA 9.0 text, the same as the forward's model
tasks/attn_fwd/verify/attn_fwd_cuda_ptx_blackwell_emulate.py):
  * TMA: 3-D maps [heads, S, D] bf16, box {64, rows, 1}, out-of-bounds elements of the head written as
    zeros, the full box counted as transaction bytes; the 128-byte swizzle (byte address bits 4-6 ^= bits
    7-9; destinations on 1024-byte boundaries);
  * tcgen05 shared-memory descriptors DECODED from the 64-bit values the kernel builds [9.7.16.4.1]: fixed
    0b001 at bits 46-48, swizzle code 2 (128B) at 61-63, start/LBO/SBO; K-major SW128 element (r, k) at
    start + (r/8)*SBO + (r%8)*128 + 2k, MN-major SW128 element (k, n) at start + (n/64)*LBO + (k/8)*SBO +
    (k%8)*128 + 2(n%64), both then swizzled on the absolute address [9.7.16.3];
  * the kind::f16 instruction descriptor decoded [9.7.16.4.2] (M, N, A/B types, transpose B);
  * TMEM as [128 lanes x 512 columns] of 32-bit cells, allocation size checked (power of two, 32..512, every
    access inside it); tcgen05.mma M = 128 writes row i to lane i, column j to column base + j [9.7.16.10.5];
    tcgen05.ld.32x32b.x32: thread l of warp w reads lane 32w + l, 32 consecutive columns, and a warp may
    only address its own 32 lanes [9.7.16.8.1, 9.7.16.8.3];
  * mbarriers with phases, arrival counts and tx bytes; a wait names the phase the kernel means and the model
    asserts the kernel's parity is that phase's and that exactly that phase has completed (a lap or a hang
    is an assertion);
  * asynchronous completion in two adversarial orders: an MMA executes only when a thread waits on a
    barrier that a tcgen05.commit issued after it arrives on (commit = all earlier MMAs of the thread
    [9.7.16.12.1]), i.e. as LATE as the kernel's synchronisation allows; a TMA load either lands only when a
    thread waits on its barrier (late: a read before the wait sees stale / NaN data) or at once when issued
    (early: it overwrites a slot an MMA that has not completed yet still has to read). Every case runs in
    both orders; shared memory and TMEM start as NaN.
The kernel's per-thread code (masks, P / dS, bf16 rounding, the swizzled row writes of the P^T / dS^T / dS
operand tiles, LSE/Delta staging, epilogue guards and flat addresses) is transliterated, vectorised over the
128 threads. MMAs accumulate in float64 per instruction, rounded to fp32 (the hardware's order inside one MMA
is not modelled). Outputs are NaN-poisoned with a guard zone behind them, every element must be written
exactly once. Compared with the task's own fp32 reference (tasks/_attention.backward_reference, inputs from
backward_inputs for both backward input kinds) at the task's tolerance.

NOT modelled: timing, the real concurrency of the async proxy (only the one adversarial "latest completion"
order above), the fences' semantics (the kernel's fence placement is checked by reading, not here), TMEM
allocation contention between CTAs, hardware summation order and denormal/ftz behaviour of ex2.approx.

    python3 tasks/attn_bwd/verify/attn_bwd_cuda_ptx_blackwell_emulate.py     # exit status 0 = every case PASS
"""
from __future__ import annotations

import os
import sys

import numpy as np

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..")))

BIG, SMALL = 128, 64
BIG_CHUNK, SMALL_CHUNK, OP_BYTES = BIG * 128, SMALL * 128, BIG * 128
TM_S, TM_DP, TM_ACC = 0, 64, 128
LOG2E = np.float32(1.4426950408889634)
SMEM_BASE = 3 * 1024      # shared-window address of the 1024-aligned dynamic smem (any multiple of 1024)
NAN_WORD = np.uint32(0x7FC00000)


def bf16(x):
    """fp32 -> bf16 (round to nearest even), returned as fp32."""
    x = np.ascontiguousarray(x, np.float32)
    u = x.view(np.uint32).astype(np.uint64)
    u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
    return u.astype(np.uint32).view(np.float32)


# ---------------------------------------------------------------- the kernel's encodings (mirrored)
def idesc_bf16(M, N, b_mn_major):
    return (1 << 4) | (1 << 7) | (1 << 10) | (b_mn_major << 16) | ((N >> 3) << 17) | ((M >> 4) << 24)


def desc_kmajor(saddr):
    return ((saddr & 0x3FFFF) >> 4) | (1 << 16) | (64 << 32) | (1 << 46) | (2 << 61)


def desc_mnmajor(saddr, chunk_bytes):
    return ((saddr & 0x3FFFF) >> 4) | ((chunk_bytes >> 4) << 16) | (64 << 32) | (1 << 46) | (2 << 61)


IDESC_SP = idesc_bf16(BIG, SMALL, 0)
assert IDESC_SP == 0x08100490


SM_SMEM, CTA_RESERVED = 233472, 1024


def ctas_per_sm(smem):
    return SM_SMEM // (smem + CTA_RESERVED)


def tmem_safe_smem(smem, cols):
    return smem if ctas_per_sm(smem) * cols <= 512 else SM_SMEM // (512 // cols + 1) - CTA_RESERVED + 16


def cfg_kv(DP):
    CH = DP // 64
    c = dict(CH=CH, BIG_BYTES=CH * BIG_CHUNK, SMALL_BYTES=CH * SMALL_CHUNK)
    c["OFF_V"] = c["BIG_BYTES"]
    c["OFF_Q"] = 2 * c["BIG_BYTES"]
    c["OFF_DO"] = c["OFF_Q"] + 2 * c["SMALL_BYTES"]
    c["OFF_P"] = c["OFF_DO"] + 2 * c["SMALL_BYTES"]
    c["OFF_DS"] = c["OFF_P"] + OP_BYTES
    c["OFF_LSE"] = c["OFF_DS"] + OP_BYTES
    c["OFF_DELTA"] = c["OFF_LSE"] + 2 * SMALL * 4
    c["OFF_BAR"] = c["OFF_DELTA"] + 2 * SMALL * 4
    c["TMEM_COLS"] = 512 if DP == 128 else 256
    c["SMEM"] = tmem_safe_smem(c["OFF_BAR"] + 4 * 8 + 16 + 1024, c["TMEM_COLS"])
    return c


def cfg_q(DP):
    CH = DP // 64
    c = dict(CH=CH, BIG_BYTES=CH * BIG_CHUNK, SMALL_BYTES=CH * SMALL_CHUNK)
    c["OFF_DO"] = c["BIG_BYTES"]
    c["OFF_K"] = 2 * c["BIG_BYTES"]
    c["OFF_V"] = c["OFF_K"] + 2 * c["SMALL_BYTES"]
    c["OFF_DS"] = c["OFF_V"] + 2 * c["SMALL_BYTES"]
    c["OFF_BAR"] = c["OFF_DS"] + OP_BYTES
    c["TMEM_COLS"] = 256
    c["SMEM"] = tmem_safe_smem(c["OFF_BAR"] + 4 * 8 + 16 + 1024, c["TMEM_COLS"])
    return c


# ---------------------------------------------------------------- hardware rules as read from the PTX ISA
def swz(addr):
    return addr ^ (((addr >> 7) & 7) << 4)


def decode_desc(d):
    assert (d >> 46) & 7 == 1, "fixed 0b001 at bits 46-48"
    assert (d >> 49) & 7 == 0 and (d >> 52) & 1 == 0 and (d >> 53) & 0xFF == 0, "base offset / LBO mode / reserved"
    assert (d >> 61) & 7 == 2, "128-byte swizzle"
    return dict(start=(d & 0x3FFF) << 4, lbo=((d >> 16) & 0x3FFF) << 4, sbo=((d >> 32) & 0x3FFF) << 4)


def decode_idesc(i):
    assert i & 0xF == 0 and (i >> 4) & 3 == 1 and (i >> 7) & 7 == 1 and (i >> 10) & 7 == 1, "bf16 x bf16 -> f32"
    assert (i >> 13) & 3 == 0 and (i >> 15) & 1 == 0 and (i >> 23) & 1 == 0 and (i >> 29) & 7 == 0
    M, N = ((i >> 24) & 31) << 4, ((i >> 17) & 63) << 3
    assert M == 128 and N % 16 == 0 and 16 <= N <= 256, "cta_group::1 M = 128 needs N % 16 == 0, 16..256"
    return dict(M=M, N=N, b_mn=(i >> 16) & 1)


def kmajor_tile(smem, d, rows):
    """[rows, 16] operand, K-major SW128: ((8,m),(T,2k)):((8T,SBO),(1,T))."""
    f = decode_desc(d)
    r = np.arange(rows)[:, None]
    k = np.arange(16)[None, :]
    addr = f["start"] + (r // 8) * f["sbo"] + (r % 8) * 128 + k * 2
    return smem[swz(addr) // 2]


def mnmajor_tile(smem, d, n):
    """[16 k, n] operand, MN-major SW128: ((T,8,m),(8,k)):((1,T,LBO),(8T,SBO))."""
    f = decode_desc(d)
    k = np.arange(16)[:, None]
    c = np.arange(n)[None, :]
    addr = f["start"] + (c // 64) * f["lbo"] + (k // 8) * f["sbo"] + (k % 8) * 128 + (c % 64) * 2
    return smem[swz(addr) // 2]


class Bar:
    def __init__(self, name, count):
        self.name, self.count, self.pending, self.tx, self.phase = name, count, count, 0, 0

    def arrive(self, tx=0):
        assert self.pending > 0, f"{self.name}: too many arrivals"
        self.pending -= 1
        self.tx += tx
        self._flip()

    def complete_tx(self, nbytes):
        self.tx -= nbytes
        self._flip()

    def _flip(self):
        if self.pending == 0 and self.tx == 0:
            self.phase += 1
            self.pending = self.count


class TensorMap:
    """[heads, S, D] bf16, box {64, rows, 1}, SWIZZLE_128B, OOB fill zeros."""

    def __init__(self, flat, heads, S, D, rows):
        self.x = flat.reshape(heads, S, D)
        self.heads, self.S, self.D, self.rows = heads, S, D, rows


class CTA:
    """Shared memory (bf16 elements addressed in bytes / 2), TMEM, barriers, and the async queues."""

    def __init__(self, smem_bytes, tmem_cols):
        self.tma_early = TMA_EARLY[0]
        self.smem = np.full((SMEM_BASE + smem_bytes) // 2, np.nan, np.float32)
        self.limit = SMEM_BASE + smem_bytes - 1024      # the usable part after the alignment slack
        assert tmem_cols in (32, 64, 128, 256, 512), "tcgen05.alloc: power of two, 32..512 columns"
        assert smem_bytes <= 232448, "dynamic shared memory above the 227 KiB a CTA may have"
        assert ctas_per_sm(smem_bytes) * tmem_cols <= 512, "co-resident CTAs' allocations exceed 512 columns"
        self.cols = tmem_cols
        self.tmem = np.full((128, 512), NAN_WORD, np.uint32)
        self.tma_q = {}        # barrier -> [(dst, map, c0, c1, c2)]
        self.mma_q = []        # issued MMAs not yet executed (closures, in issue order)
        self.commits = []      # (number of MMAs issued before it, barrier)
        self.mma_done = 0

    # ---- TMA
    def tma_load(self, dst, m, bar, c0, c1, c2):
        assert dst % 1024 == 0 and SMEM_BASE <= dst and dst + m.rows * 128 <= self.limit, "TMA destination"
        if self.tma_early:                              # lands at once (over whatever an MMA still has to read)
            self._land(dst, m, bar, c0, c1, c2)
            return
        self.tma_q.setdefault(id(bar), []).append((dst, m, bar, c0, c1, c2))

    def _land(self, dst, m, bar, c0, c1, c2):
        r = np.arange(m.rows)[:, None]
        c = np.arange(64)[None, :]
        gr, gc = c1 + r, c0 + c
        ok = (gr < m.S) & (gc < m.D) & (0 <= c2 < m.heads)
        vals = np.where(ok, m.x[c2, np.minimum(gr, m.S - 1), np.minimum(gc, m.D - 1)], np.float32(0))
        self.smem[swz(dst + r * 128 + c * 2) // 2] = vals
        bar.complete_tx(m.rows * 128)                   # the full box, zero fill included

    # ---- MMA
    def mma_ss(self, d_tmem, da, db, idesc, acc):
        self.mma_q.append((d_tmem, da, db, idesc, acc))

    def _execute(self, d_tmem, da, db, idesc, acc):
        f = decode_idesc(idesc)
        lane, col = d_tmem >> 16, d_tmem & 0xFFFF
        assert lane == 0 and col + f["N"] <= self.cols, "MMA D outside the allocation"
        A = kmajor_tile(self.smem, da, 128)                                        # [128, 16]
        Bm = mnmajor_tile(self.smem, db, f["N"]) if f["b_mn"] else kmajor_tile(self.smem, db, f["N"]).T
        D = A.astype(np.float64) @ Bm.astype(np.float64)
        cur = self.tmem[:, col:col + f["N"]].view(np.float32).astype(np.float64) if acc else 0.0
        self.tmem[:, col:col + f["N"]] = (cur + D).astype(np.float32).view(np.uint32)
        self.mma_done += 1

    def commit(self, bar):
        self.commits.append((len(self.mma_q) + self.mma_done, bar))

    # ---- waits: make exactly what this barrier's completion implies happen, then check the phase
    def wait(self, bar, parity, phase):
        for item in self.tma_q.pop(id(bar), []):
            self._land(*item)
        keep = []
        for upto, b in self.commits:
            if b is bar:
                while self.mma_done < upto:
                    self._execute(*self.mma_q.pop(0))
                b.arrive()
            else:
                keep.append((upto, b))
        self.commits = keep
        assert parity == phase & 1, f"{bar.name}: parity {parity} for phase {phase}"
        assert bar.phase == phase + 1, f"{bar.name}: waiting for phase {phase}, completed {bar.phase} (hang or lap)"

    # ---- TMEM loads by the 4 warps (vectorised): thread t = 32w + l gets lane 32w + l
    def ld_rows(self, t_lane_of_warp, col, n):
        out = np.empty((128, n), np.uint32)
        for w in range(4):
            taddr = t_lane_of_warp(w) + col
            lane, c = taddr >> 16, taddr & 0xFFFF
            for x in range(0, n, 32):                                  # tcgen05.ld.32x32b.x32
                assert lane == 32 * w, "warp w may only access TMEM lanes 32w..32w+31"
                assert c + x + 32 <= self.cols, "tcgen05.ld outside the allocation"
                out[32 * w:32 * w + 32, x:x + 32] = self.tmem[lane:lane + 32, c + x:c + x + 32]
        return out.view(np.float32)

    def finish(self):
        assert not self.tma_q and not self.mma_q and not self.commits, "async work left at dealloc"


# ---------------------------------------------------------------- the kernel's device code, transliterated
def ex2(x):
    return np.exp2(np.asarray(x, np.float32)).astype(np.float32)


def t_lane_fn(tmem):
    return lambda w: tmem + ((w * 32) << 16)


def store_op_row(cta, tile_addr, x):
    """Every thread r writes its row of a [128 x 64] K-major SW128 operand: chunk c at physical c ^ (r % 8)."""
    r = np.arange(128)
    for c in range(8):
        phys = tile_addr + r * 128 + ((c ^ (r & 7)) << 4)
        for e in range(8):
            cta.smem[(phys + 2 * e) // 2] = bf16(x[:, 8 * c + e])


def tma_tile(cta, CH, dst, chunk_bytes, m, bar, row, head):
    for ch in range(CH):
        cta.tma_load(dst + ch * chunk_bytes, m, bar, 64 * ch, row, head)


def issue_abt(cta, DP, c_tmem, a_addr, b_addr):
    da0, db0 = desc_kmajor(a_addr), desc_kmajor(b_addr)
    for kk in range(DP // 16):
        da = da0 + (((kk // 4) * BIG_CHUNK + (kk % 4) * 32) >> 4)
        db = db0 + (((kk // 4) * SMALL_CHUNK + (kk % 4) * 32) >> 4)
        cta.mma_ss(c_tmem, da, db, IDESC_SP, kk > 0)


def issue_at(cta, DP, acc_tmem, a_addr, t_addr, accumulate):
    idesc = idesc_bf16(BIG, DP, 1)
    da0, dt0 = desc_kmajor(a_addr), desc_mnmajor(t_addr, SMALL_CHUNK)
    for kk in range(SMALL // 16):
        cta.mma_ss(acc_tmem, da0 + ((kk * 32) >> 4), dt0 + ((kk * 2048) >> 4), idesc, accumulate or kk > 0)


def store_acc_row(cta, t_lane, DP, col0, row_ok, out, written, row_base, D, mul):
    """row_base[t] = flat index of column 0 of thread t's output row."""
    for c in range(DP // 32):
        if 32 * c >= D:
            break
        v = cta.ld_rows(t_lane, col0 + 32 * c, 32)
        for q in range(4):
            col = 32 * c + 8 * q
            if col < D:
                for e in range(8):
                    at = row_base[row_ok] + col + e
                    out[at] = bf16(v[row_ok, 8 * q + e] * np.float32(mul))
                    written[at] += 1


def delta_kernel(fdo, fo, rows, D):
    return (fdo.reshape(rows, D).astype(np.float32) * fo.reshape(rows, D)).sum(1, dtype=np.float32)


def dkdv_cta(bx, by, maps, LSE, Delta, dK, dV, wK, wV, H, HKV, S, D, DP, causal, scale, scale_log2):
    C = cfg_kv(DP)
    CH = C["CH"]
    cta = CTA(C["SMEM"], C["TMEM_COLS"])
    s0 = SMEM_BASE
    TM_DV, TM_DK = TM_ACC, TM_ACC + DP
    lse_s = np.full((2, SMALL), np.nan, np.float32)
    delta_s = np.full((2, SMALL), np.nan, np.float32)
    kv_full, full, mma_bar = Bar("kv_full", 1), [Bar("full0", 1), Bar("full1", 1)], Bar("mma_bar", 1)
    n0 = bx * BIG
    bkv = by
    b, kv = bkv // HKV, bkv % HKV
    G = H // HKV
    nqb = (S + SMALL - 1) // SMALL
    m_lo = n0 // SMALL if causal else 0
    per_head = nqb - m_lo
    steps = G * per_head
    tid = np.arange(128)

    def load_tiles(it):
        slot = it & 1
        bh = b * H + kv * G + it // per_head
        m = m_lo + it % per_head
        full[slot].arrive(tx=2 * C["SMALL_BYTES"])
        tma_tile(cta, CH, s0 + C["OFF_Q"] + slot * C["SMALL_BYTES"], SMALL_CHUNK, maps["q64"], full[slot], m * SMALL, bh)
        tma_tile(cta, CH, s0 + C["OFF_DO"] + slot * C["SMALL_BYTES"], SMALL_CHUNK, maps["do64"], full[slot],
                 m * SMALL, bh)

    def stage_rows(it):
        slot = it & 1
        bh = b * H + kv * G + it // per_head
        m = m_lo + it % per_head
        t = tid[:SMALL]
        row = m * SMALL + t
        at = bh * S + np.minimum(row, S - 1)
        lse_s[slot] = np.where(row < S, LSE[at] * LOG2E, np.float32(np.inf))
        delta_s[slot] = np.where(row < S, Delta[at], np.float32(0))

    tmem = 0                                      # the allocated base (lane 0, column 0)
    stage_rows(0)
    t_lane = t_lane_fn(tmem)
    kv_full.arrive(tx=2 * C["BIG_BYTES"])
    tma_tile(cta, CH, s0, BIG_CHUNK, maps["k128"], kv_full, n0, bkv)
    tma_tile(cta, CH, s0 + C["OFF_V"], BIG_CHUNK, maps["v128"], kv_full, n0, bkv)
    load_tiles(0)
    cta.wait(kv_full, 0, 0)
    key = n0 + tid
    for it in range(steps):
        slot = it & 1
        m = m_lo + it % per_head
        q_tile = s0 + C["OFF_Q"] + slot * C["SMALL_BYTES"]
        do_tile = s0 + C["OFF_DO"] + slot * C["SMALL_BYTES"]
        cta.wait(full[slot], (it >> 1) & 1, it >> 1)
        issue_abt(cta, DP, tmem + TM_S, s0, q_tile)
        issue_abt(cta, DP, tmem + TM_DP, s0 + C["OFF_V"], do_tile)
        cta.commit(mma_bar)
        cta.wait(mma_bar, it & 1, it)
        if it + 1 < steps:
            load_tiles(it + 1)
        p = cta.ld_rows(t_lane, TM_S, 64).copy()
        ds = cta.ld_rows(t_lane, TM_DP, 64).copy()
        q = m * SMALL + np.arange(64)[None, :]
        p = ex2(p * scale_log2 - lse_s[slot][None, :])
        p = np.where((key[:, None] >= S) | (causal & (key[:, None] > q)), np.float32(0), p)
        ds = (p * (ds - delta_s[slot][None, :])).astype(np.float32)
        store_op_row(cta, s0 + C["OFF_P"], p)
        store_op_row(cta, s0 + C["OFF_DS"], ds)
        if it + 1 < steps:
            stage_rows(it + 1)
        issue_at(cta, DP, tmem + TM_DV, s0 + C["OFF_P"], do_tile, it > 0)
        issue_at(cta, DP, tmem + TM_DK, s0 + C["OFF_DS"], q_tile, it > 0)
    cta.commit(mma_bar)
    cta.wait(mma_bar, steps & 1, steps)
    row_base = (bkv * S + key) * D
    store_acc_row(cta, t_lane, DP, TM_DK, key < S, dK, wK, row_base, D, scale)
    store_acc_row(cta, t_lane, DP, TM_DV, key < S, dV, wV, row_base, D, 1.0)
    cta.finish()


def dq_cta(bx, by, gx, maps, LSE, Delta, dQ, wQ, H, HKV, S, D, DP, causal, scale, scale_log2):
    C = cfg_q(DP)
    CH = C["CH"]
    cta = CTA(C["SMEM"], C["TMEM_COLS"])
    s0 = SMEM_BASE
    q_full, full, mma_bar = Bar("q_full", 1), [Bar("full0", 1), Bar("full1", 1)], Bar("mma_bar", 1)
    mt = gx - 1 - bx if causal else bx
    m0 = mt * BIG
    bh = by
    b, h = bh // H, bh % H
    kvh = b * HKV + h // (H // HKV)
    kend = min(S, m0 + BIG) if causal else S
    nkb = (kend + SMALL - 1) // SMALL
    tid = np.arange(128)

    def load_block(j):
        slot = j & 1
        full[slot].arrive(tx=2 * C["SMALL_BYTES"])
        tma_tile(cta, CH, s0 + C["OFF_K"] + slot * C["SMALL_BYTES"], SMALL_CHUNK, maps["k64"], full[slot], j * SMALL, kvh)
        tma_tile(cta, CH, s0 + C["OFF_V"] + slot * C["SMALL_BYTES"], SMALL_CHUNK, maps["v64"], full[slot], j * SMALL, kvh)

    tmem = 0
    t_lane = t_lane_fn(tmem)
    q_full.arrive(tx=2 * C["BIG_BYTES"])
    tma_tile(cta, CH, s0, BIG_CHUNK, maps["q128"], q_full, m0, bh)
    tma_tile(cta, CH, s0 + C["OFF_DO"], BIG_CHUNK, maps["do128"], q_full, m0, bh)
    load_block(0)
    cta.wait(q_full, 0, 0)
    row = m0 + tid
    head = bh * S
    at = head + np.minimum(row, S - 1)
    lse2 = np.where(row < S, LSE[at] * LOG2E, np.float32(np.inf)).astype(np.float32)
    dlt = np.where(row < S, Delta[at], np.float32(0)).astype(np.float32)
    for j in range(nkb):
        slot = j & 1
        k_tile = s0 + C["OFF_K"] + slot * C["SMALL_BYTES"]
        v_tile = s0 + C["OFF_V"] + slot * C["SMALL_BYTES"]
        cta.wait(full[slot], (j >> 1) & 1, j >> 1)
        issue_abt(cta, DP, tmem + TM_S, s0, k_tile)
        issue_abt(cta, DP, tmem + TM_DP, s0 + C["OFF_DO"], v_tile)
        cta.commit(mma_bar)
        cta.wait(mma_bar, j & 1, j)
        if j + 1 < nkb:
            load_block(j + 1)
        p = cta.ld_rows(t_lane, TM_S, 64).copy()
        ds = cta.ld_rows(t_lane, TM_DP, 64).copy()
        keyv = j * SMALL + np.arange(64)[None, :]
        p = ex2(p * scale_log2 - lse2[:, None])
        p = np.where((keyv >= S) | (causal & (keyv > row[:, None])), np.float32(0), p)
        ds = (p * (ds - dlt[:, None])).astype(np.float32)
        store_op_row(cta, s0 + C["OFF_DS"], ds)
        issue_at(cta, DP, tmem + TM_ACC, s0 + C["OFF_DS"], k_tile, j > 0)
    cta.commit(mma_bar)
    cta.wait(mma_bar, nkb & 1, nkb)
    store_acc_row(cta, t_lane, DP, TM_ACC, row < S, dQ, wQ, (head + row) * D, D, scale)
    cta.finish()


# ---------------------------------------------------------------- driver
GUARD = 4096
TMA_EARLY = [False]   # the adversarial completion order of TMA loads (MMAs always complete as late as allowed)


def run(B, H, HKV, S, D, causal, kind="normal", seed=1):
    import torch

    from tasks._attention import CAUSAL_BACKWARD_TOLERANCE, TOLERANCE, backward_inputs, backward_reference

    shape = dict(B=B, H=H, HKV=HKV, S=S, D=D)
    inp = backward_inputs(shape, seed, "cpu", causal, kind)
    ref = backward_reference(inp["dO"], inp["Q"], inp["K"], inp["V"], shape, causal)

    def flat(t):
        return np.ascontiguousarray(t.float().numpy(), np.float32).reshape(-1)

    fq, fk, fv, fdo, fo = (flat(inp[n]) for n in ("Q", "K", "V", "dO", "O"))
    LSE = flat(inp["LSE"])
    DP = 64 if D <= 64 else 128
    maps = dict(q64=TensorMap(fq, B * H, S, D, SMALL), do64=TensorMap(fdo, B * H, S, D, SMALL),
                k128=TensorMap(fk, B * HKV, S, D, BIG), v128=TensorMap(fv, B * HKV, S, D, BIG),
                q128=TensorMap(fq, B * H, S, D, BIG), do128=TensorMap(fdo, B * H, S, D, BIG),
                k64=TensorMap(fk, B * HKV, S, D, SMALL), v64=TensorMap(fv, B * HKV, S, D, SMALL))
    nq, nk = B * H * S * D, B * HKV * S * D
    dQ, dK, dV = (np.full(n + GUARD, np.nan, np.float32) for n in (nq, nk, nk))
    wQ, wK, wV = (np.zeros(n + GUARD, np.int32) for n in (nq, nk, nk))
    scale = np.float32(1.0) / np.sqrt(np.float32(D))
    scale_log2 = np.float32(scale * LOG2E)
    Delta = delta_kernel(fdo, fo, B * H * S, D)
    gx = (S + BIG - 1) // BIG
    for by in range(B * HKV):
        for bx in range(gx):
            dkdv_cta(bx, by, maps, LSE, Delta, dK, dV, wK, wV, H, HKV, S, D, DP, causal, scale, scale_log2)
    for by in range(B * H):
        for bx in range(gx):
            dq_cta(bx, by, gx, maps, LSE, Delta, dQ, wQ, H, HKV, S, D, DP, causal, scale, scale_log2)

    tol = CAUSAL_BACKWARD_TOLERANCE if causal else TOLERANCE
    res = {}
    for name, got, w, n, shp in (("dQ", dQ, wQ, nq, (B, H, S, D)), ("dK", dK, wK, nk, (B, HKV, S, D)),
                                 ("dV", dV, wV, nk, (B, HKV, S, D))):
        assert (w[n:] == 0).all() and np.isnan(got[n:]).all(), f"{name}: written past the end"
        assert (w[:n] == 1).all(), f"{name}: elements written {w[:n].min()}..{w[:n].max()} times (want exactly 1)"
        g = torch.from_numpy(got[:n].reshape(shp).astype(np.float64))
        r = ref[name].double()
        err = (g - r).abs()
        margin = (err - (tol["atol"] + tol["rtol"] * r.abs())).max().item()   # <= 0: inside the tolerance
        res[name] = (err.max().item(), margin)
    return res


CASES = [  # (B, H, HKV, S, D, causal)
    (1, 1, 1, 1, 64, False),
    (1, 2, 1, 1, 128, True),
    (1, 2, 1, 130, 96, False),
    (1, 2, 1, 130, 96, True),
    (1, 4, 2, 200, 64, True),
    (2, 2, 2, 70, 128, False),
    (1, 1, 1, 257, 128, True),
    (1, 6, 3, 17, 96, True),
    (1, 4, 1, 300, 128, False),
    (2, 2, 1, 129, 64, False),
]
KINDS = ("normal", "flat")


def main(cases=CASES, kinds=KINDS, orders=("late", "early")):
    failures = n = 0
    for case in cases:
        for kind in kinds:
            for order in orders:
                TMA_EARLY[0] = order == "early"
                try:
                    r = run(*case, kind=kind)
                    ok = all(m <= 0 for _, m in r.values())            # a NaN margin fails
                    detail = "  ".join(f"{k} max|err| {e:.2e} margin {m:+.4f}" for k, (e, m) in r.items())
                except AssertionError as e:
                    ok, detail = False, f"assertion: {e}"
                failures += not ok
                n += 1
                print(f"{'PASS' if ok else 'FAIL'} B,H,HKV,S,D,causal={case} {kind:6s} TMA {order:5s} {detail}",
                      flush=True)
    print(f"{'PASS' if not failures else 'FAIL'}: {failures} failing of {n}")
    return failures


if __name__ == "__main__":
    sys.exit(1 if main() else 0)
