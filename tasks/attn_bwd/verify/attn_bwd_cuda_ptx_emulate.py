"""CPU emulation of the FIRST version of tasks/attn_bwd/solutions/cuda_ptx_hopper.cu (FA2's split backward, three
kernels, `ok` on the H200 at 0.71x cuDNN; replaced by the fused version on 2026-11-30, in git history at c61c60b),
for checking its index arithmetic without a GPU. Kept for its layout rules, which the fused version's model
(attn_bwd_cuda_ptx_fused_emulate.py) imports.

A PASS SHOWS THAT THE KERNEL'S INDEX ARITHMETIC AGREES WITH THE RULES MODELLED HERE, NOT WITH THE HARDWARE.
The rules are hand-written from the PTX ISA (and are the ones the forward expert's emulation used, which that
kernel's first H200 run then confirmed for the forward's use of them):
  * tensor maps: [heads, S, D] bf16 (innermost first D, S, heads; strides 2D, 2SD bytes), box {64, rows, 1},
    out-of-bounds elements written as zeros, the full box counted as transaction bytes;
  * the 128-byte swizzle of a box row: byte address bits 4-6 ^= bits 7-9 (tiles on 1024-byte boundaries);
  * wgmma shared-memory descriptors, decoded from the 64-bit value the kernel builds (start, LBO, SBO,
    layout): K-major SW128 operand element (r, k) at start + (r/8)*SBO + (r%8)*128 + 2k; MN-major SW128
    operand element (k, n) at start + (n/64)*LBO + (k/8)*SBO + (k%8)*128 + 2(n%64); both then swizzled;
  * the m64nNk16 accumulator fragment (register i of thread t: row 16(t/32) + (t%32)/4 + 8((i/2)%2),
    column 8(i/4) + 2(t%4) + i%2) and the register-A fragment map of one k-step;
  * mbarrier phases: a wait on parity P passes once the phase of parity P has completed; a phase completes
    when its arrivals and its expected transaction bytes are all in (a wrong byte count or parity = a hang,
    reported here as an assertion).
The kernels' per-thread code (masks, P and dS, bf16 packing, LSE/Delta staging, epilogue index arithmetic,
flat output addresses) is transliterated, vectorised over the 128 threads of a warpgroup; the loop order
(next tile issued into the other slot before the current one is used) is the kernel's, so a slot mix-up
reads the wrong data. Shared memory starts as NaN, outputs are NaN-poisoned: an unwritten output or a read of
never-loaded shared memory shows as NaN. Matmuls accumulate in fp32 per wgmma (the hardware's summation
order inside one wgmma is not modelled). The result is compared with a float64 backward on the same bf16
inputs (O recomputed exactly, as the task's reference does), at the task's tolerance.

    python3 tasks/attn_bwd/verify/attn_bwd_cuda_ptx_emulate.py     # ~6 s on one core; exit status 0 = PASS
"""
import math
import sys

import numpy as np

BN_KV, BM_KV, BM_Q, BN_Q = 128, 64, 128, 64
LOG2E = np.float32(1.4426950408889634)
SMEM_BASE = 1024          # shared-window address of the 1024-aligned dynamic smem (any multiple of 1024)


def bf16(x):
    """fp32 -> bf16 (round to nearest even), returned as fp32."""
    x = np.asarray(x, np.float32)
    u = x.view(np.uint32).astype(np.uint64)
    u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
    return u.astype(np.uint32).view(np.float32)


def swz(addr):
    return addr ^ (((addr >> 7) & 7) << 4)


class Bar:
    def __init__(self, count):
        self.count, self.arrived, self.tx, self.phases = count, 0, 0, 0

    def arrive_expect_tx(self, nbytes):
        self.tx += nbytes
        self.arrived += 1
        self._check()

    def complete_tx(self, nbytes):
        self.tx -= nbytes
        self._check()

    def _check(self):
        if self.arrived == self.count and self.tx == 0:
            self.phases += 1
            self.arrived = 0

    def wait(self, parity):
        # try_wait.parity P succeeds when the current (incomplete) phase has the other parity
        assert self.phases & 1 != parity, "mbarrier wait would hang (parity / byte count)"
        assert self.arrived == 0 and self.tx == 0, "mbarrier wait on a phase that is still filling"


class TensorMap:
    """make_map(): a [heads, S, D] tensor (flat array), box {64, box_rows, 1}, zero fill out of bounds."""

    def __init__(self, flat, heads, S, D, box_rows):
        self.flat, self.heads, self.S, self.D, self.rows = flat, heads, S, D, box_rows


class Smem:
    def __init__(self, nbytes):
        self.m = np.full((SMEM_BASE + nbytes) // 2, np.nan, np.float32)
        self.limit = SMEM_BASE + nbytes

    def tma_load_3d(self, dst, tmap, bar, c0, c1, c2):
        assert dst % 1024 == 0 and c0 % 64 == 0 and 0 <= c2 < tmap.heads
        r = np.arange(tmap.rows)[:, None]
        c = np.arange(64)[None, :]
        col, row = c0 + c, c1 + r
        ok = (col < tmap.D) & (row < tmap.S)
        elem = c2 * tmap.S * tmap.D + np.minimum(row, tmap.S - 1) * tmap.D + np.minimum(col, tmap.D - 1)
        addr = swz(dst + r * 128 + c * 2)
        assert addr.max() < self.limit
        self.m[addr // 2] = np.where(ok, tmap.flat[elem], 0.0)
        bar.complete_tx(tmap.rows * 64 * 2)

    def tile(self, ch_count, dst, chunk, tmap, bar, row, head):       # tma_tile<CH>
        for ch in range(ch_count):
            self.tma_load_3d(dst + ch * chunk, tmap, bar, 64 * ch, row, head)

    @staticmethod
    def decode(desc):
        start = (desc & 0x3FFF) << 4
        lbo = ((desc >> 16) & 0x3FFF) << 4
        sbo = ((desc >> 32) & 0x3FFF) << 4
        assert (desc >> 62) == 1 and ((desc >> 49) & 7) == 0
        return start, lbo, sbo

    def kmajor(self, desc, R):            # operand [R rows, 16 k]
        start, _, sbo = self.decode(desc)
        r = np.arange(R)[:, None]
        k = np.arange(16)[None, :]
        return self.m[swz(start + (r // 8) * sbo + (r % 8) * 128 + k * 2) // 2]

    def mnmajor(self, desc, N):           # operand B [16 k, N n]
        start, lbo, sbo = self.decode(desc)
        k = np.arange(16)[:, None]
        n = np.arange(N)[None, :]
        return self.m[swz(start + (n // 64) * lbo + (k // 8) * sbo + (k % 8) * 128 + (n % 64) * 2) // 2]


def desc_kmajor(saddr):
    return ((saddr & 0x3FFFF) >> 4) | (1 << 16) | (64 << 32) | (1 << 62)


def desc_mnmajor(saddr, chunk_bytes):
    return ((saddr & 0x3FFFF) >> 4) | ((chunk_bytes >> 4) << 16) | (64 << 32) | (1 << 62)


# ---- fragment maps (vectorised over the 128 threads of a warpgroup)
T = np.arange(128)
WARP, LANE = T // 32, T % 32
G8, QD = LANE // 4, LANE % 4


def acc_rc(n_regs):
    i = np.arange(n_regs)[None, :]
    row = 16 * WARP[:, None] + G8[:, None] + 8 * ((i // 2) % 2)
    col = 8 * (i // 4) + 2 * QD[:, None] + (i % 2)
    return row, col


def to_regs(M):
    row, col = acc_rc(M.shape[1] // 2)
    return M[row, col].astype(np.float32)


def from_regs(R):
    row, col = acc_rc(R.shape[1])
    M = np.full((64, R.shape[1] * 2), np.nan, np.float32)
    M[row, col] = R
    assert not np.isnan(M).any()
    return M


def pack_a(c):
    """pack_a(): af[n] = (lo, hi) = bf16(c[2n]), bf16(c[2n+1]) -> array [128, 16, 2]."""
    return np.stack([bf16(c[:, 0::2]), bf16(c[:, 1::2])], axis=-1)


def afrag_matrix(af, kk):
    """A [64 x 16] of k-step kk from af[:, 4kk..4kk+3], by the register-A fragment map."""
    A = np.full((64, 16), np.nan, np.float32)
    pos = [(0, 0), (8, 0), (0, 8), (8, 8)]       # a0..a3: (row offset, k offset)
    for r, (dr, dk) in enumerate(pos):
        row = 16 * WARP + G8 + dr
        k = 2 * QD + dk
        A[row, k] = af[:, 4 * kk + r, 0]
        A[row, k + 1] = af[:, 4 * kk + r, 1]
    assert not np.isnan(A).any()
    return A


def issue_abt(sm, DP, a_addr, a_chunk, b_addr, b_chunk):
    """C[64 x 64] = A B^T, A and B K-major (DP/16 wgmma m64n64k16, the first with scale-d 0)."""
    da0, db0 = desc_kmajor(a_addr), desc_kmajor(b_addr)
    C = np.zeros((64, 64), np.float32)
    for kk in range(DP // 16):
        da = da0 + (((kk // 4) * a_chunk + (kk % 4) * 32) >> 4)
        db = db0 + (((kk // 4) * b_chunk + (kk % 4) * 32) >> 4)
        A, B = sm.kmajor(da, 64), sm.kmajor(db, 64)
        C = (C.astype(np.float64) + A.astype(np.float64) @ B.T.astype(np.float64)).astype(np.float32)
    return to_regs(C)


def issue_at(sm, DP, acc, af, t_addr, t_chunk):
    """acc[64 x DP] += A T, A from registers (4 k-steps), T MN-major (wgmma m64n{DP}k16, imm-trans-b 1)."""
    M = from_regs(acc)
    d0 = desc_mnmajor(t_addr, t_chunk)
    for kk in range(4):
        A, B = afrag_matrix(af, kk), sm.mnmajor(d0 + ((kk * 16 * 128) >> 4), DP)
        M = (M.astype(np.float64) + A.astype(np.float64) @ B.astype(np.float64)).astype(np.float32)
    return to_regs(M)


def ex2(x):
    return np.exp2(np.asarray(x, np.float32)).astype(np.float32)


def fmaf(a, b, c):      # one rounding (a*b exact in float64 for fp32 a, b)
    return (np.asarray(a, np.float64) * np.asarray(b, np.float64) + np.asarray(c, np.float64)).astype(np.float32)


def cfg_kv(DP):
    CH = DP // 64
    c = dict(CH=CH, CHUNK_KEY=BN_KV * 128, CHUNK_ROW=BM_KV * 128)
    c["KEY_BYTES"], c["ROW_BYTES"] = CH * c["CHUNK_KEY"], CH * c["CHUNK_ROW"]
    c["OFF_V"] = c["KEY_BYTES"]
    c["OFF_Q"] = 2 * c["KEY_BYTES"]
    c["OFF_DO"] = c["OFF_Q"] + 2 * c["ROW_BYTES"]
    c["OFF_LSE"] = c["OFF_DO"] + 2 * c["ROW_BYTES"]
    c["OFF_DELTA"] = c["OFF_LSE"] + 2 * BM_KV * 4
    c["OFF_BAR"] = c["OFF_DELTA"] + 2 * BM_KV * 4
    c["SMEM"] = c["OFF_BAR"] + 3 * 8 + 1024
    return c


def cfg_q(DP):
    CH = DP // 64
    c = dict(CH=CH, CHUNK_ROW=BM_Q * 128, CHUNK_KEY=BN_Q * 128)
    c["ROW_BYTES"], c["KEY_BYTES"] = CH * c["CHUNK_ROW"], CH * c["CHUNK_KEY"]
    c["OFF_DO"] = c["ROW_BYTES"]
    c["OFF_K"] = 2 * c["ROW_BYTES"]
    c["OFF_V"] = c["OFF_K"] + 2 * c["KEY_BYTES"]
    c["OFF_BAR"] = c["OFF_V"] + 2 * c["KEY_BYTES"]
    c["SMEM"] = c["OFF_BAR"] + 3 * 8 + 1024
    return c


def check_layouts():
    for DP in (64, 128):
        for c in (cfg_kv(DP), cfg_q(DP)):
            assert c["SMEM"] <= 232448
            for k, v in c.items():
                if k.startswith("OFF_") and k not in ("OFF_LSE", "OFF_DELTA", "OFF_BAR"):
                    assert v % 1024 == 0, (k, v)
            assert c["OFF_BAR"] % 8 == 0


# ---- kernel 1
def delta_kernel(dO, O, rows, D):
    nblk = (rows + 7) // 8
    Delta = np.full(rows, np.nan, np.float32)
    row = np.arange(nblk * 8)
    row = row[row < rows]
    part = np.zeros((len(row), 32), np.float32)
    for lane in range(32):
        for c in range(lane, D // 2, 32):
            x0, x1 = dO[row * D + 2 * c], dO[row * D + 2 * c + 1]
            y0, y1 = O[row * D + 2 * c], O[row * D + 2 * c + 1]
            part[:, lane] = fmaf(x0, y0, fmaf(x1, y1, part[:, lane]))
    for m in (16, 8, 4, 2, 1):
        part = (part + part[:, np.arange(32) ^ m]).astype(np.float32)
    Delta[row] = part[:, 0]
    return Delta


# ---- kernel 2
def dkdv_cta(bx, by, maps, LSE, Delta, dK, dV, H, HKV, S, D, DP, causal, scale, scale_log2):
    c = cfg_kv(DP)
    sm = Smem(c["SMEM"])
    s0 = SMEM_BASE
    lse_s = np.full(2 * BM_KV, np.nan, np.float32)
    delta_s = np.full(2 * BM_KV, np.nan, np.float32)
    kv_full, full = Bar(1), [Bar(1), Bar(1)]
    n0 = bx * BN_KV
    bkv = by
    b, kv = bkv // HKV, bkv % HKV
    G = H // HKV
    nqb = (S + BM_KV - 1) // BM_KV
    m_lo = n0 // BM_KV if causal else 0
    per_head = nqb - m_lo
    steps = G * per_head

    def load_tiles(it):          # thread 0
        slot = it & 1
        bh = b * H + kv * G + it // per_head
        m = m_lo + it % per_head
        full[slot].arrive_expect_tx(2 * c["ROW_BYTES"])
        sm.tile(c["CH"], s0 + c["OFF_Q"] + slot * c["ROW_BYTES"], c["CHUNK_ROW"], maps["q64"], full[slot], m * BM_KV, bh)
        sm.tile(c["CH"], s0 + c["OFF_DO"] + slot * c["ROW_BYTES"], c["CHUNK_ROW"], maps["do64"], full[slot], m * BM_KV, bh)

    def stage_rows(it):          # threads < 64
        slot = it & 1
        bh = b * H + kv * G + it // per_head
        m = m_lo + it % per_head
        tid = np.arange(BM_KV)
        row = m * BM_KV + tid
        at = bh * S + np.minimum(row, S - 1)
        lse_s[slot * BM_KV + tid] = np.where(row < S, (LSE[at] * LOG2E).astype(np.float32), np.inf)
        delta_s[slot * BM_KV + tid] = np.where(row < S, Delta[at], 0.0)

    kv_full.arrive_expect_tx(2 * c["KEY_BYTES"])
    sm.tile(c["CH"], s0, c["CHUNK_KEY"], maps["k128"], kv_full, n0, bkv)
    sm.tile(c["CH"], s0 + c["OFF_V"], c["CHUNK_KEY"], maps["v128"], kv_full, n0, bkv)
    load_tiles(0)
    stage_rows(0)
    kv_full.wait(0)
    dk = [np.zeros((128, DP // 2), np.float32) for _ in range(2)]
    dv = [np.zeros((128, DP // 2), np.float32) for _ in range(2)]
    i = np.arange(32)[None, :]
    col = 8 * (i // 4) + 2 * QD[:, None] + (i % 2)             # [128, 32]
    for it in range(steps):
        slot = it & 1
        if it + 1 < steps:
            load_tiles(it + 1)
        m = m_lo + it % per_head
        q_tile = s0 + c["OFF_Q"] + slot * c["ROW_BYTES"]
        do_tile = s0 + c["OFF_DO"] + slot * c["ROW_BYTES"]
        lse2 = lse_s[slot * BM_KV:(slot + 1) * BM_KV]
        dlt = delta_s[slot * BM_KV:(slot + 1) * BM_KV]
        full[slot].wait((it >> 1) & 1)
        for wg in range(2):
            key0 = n0 + wg * 64 + WARP * 16 + G8
            k_rows = s0 + wg * 64 * 128
            v_rows = s0 + c["OFF_V"] + wg * 64 * 128
            s = issue_abt(sm, DP, k_rows, c["CHUNK_KEY"], q_tile, c["CHUNK_ROW"])
            dp = issue_abt(sm, DP, v_rows, c["CHUNK_KEY"], do_tile, c["CHUNK_ROW"])
            masked = (n0 + wg * 64 + 64 > S) or (causal and m * BM_KV < n0 + wg * 64 + 64)
            p = ex2(fmaf(s, np.float32(scale_log2), -lse2[col]))
            if masked:
                key = key0[:, None] + 8 * ((i // 2) % 2)
                qrow = m * BM_KV + col
                p = np.where((key >= S) | (causal & (key > qrow)), np.float32(0), p)
            pf = pack_a(p)
            ds = (p * (dp - dlt[col])).astype(np.float32)
            dsf = pack_a(ds)
            dv[wg] = issue_at(sm, DP, dv[wg], pf, do_tile, c["CHUNK_ROW"])
            dk[wg] = issue_at(sm, DP, dk[wg], dsf, q_tile, c["CHUNK_ROW"])
        if it + 1 < steps:
            stage_rows(it + 1)
        # __syncthreads(): slot it & 1 free, rows of step it+1 staged
    base = bkv * S
    for wg in range(2):
        key0 = n0 + wg * 64 + WARP * 16 + G8
        for half in range(2):
            key = key0 + 8 * half
            for n in range(DP // 8):
                cc = 8 * n + 2 * QD
                ii = 4 * n + 2 * half
                ok = (key < S) & (cc < D)
                at = ((base + key) * D + cc)[ok]
                for e in range(2):
                    dK[at + e] = bf16(dk[wg][ok, ii + e] * np.float32(scale))
                    dV[at + e] = bf16(dv[wg][ok, ii + e])


# ---- kernel 3
def dq_cta(bx, by, grid_x, maps, LSE, Delta, dQ, H, HKV, S, D, DP, causal, scale, scale_log2):
    c = cfg_q(DP)
    sm = Smem(c["SMEM"])
    s0 = SMEM_BASE
    q_full, full = Bar(1), [Bar(1), Bar(1)]
    mt = grid_x - 1 - bx if causal else bx
    m0 = mt * BM_Q
    bh = by
    b, h = bh // H, bh % H
    kvh = b * HKV + h // (H // HKV)
    kend = min(S, m0 + BM_Q) if causal else S
    nkb = (kend + BN_Q - 1) // BN_Q

    def issue_block(j):
        slot = j & 1
        full[slot].arrive_expect_tx(2 * c["KEY_BYTES"])
        sm.tile(c["CH"], s0 + c["OFF_K"] + slot * c["KEY_BYTES"], c["CHUNK_KEY"], maps["k64"], full[slot], j * BN_Q, kvh)
        sm.tile(c["CH"], s0 + c["OFF_V"] + slot * c["KEY_BYTES"], c["CHUNK_KEY"], maps["v64"], full[slot], j * BN_Q, kvh)

    q_full.arrive_expect_tx(2 * c["ROW_BYTES"])
    sm.tile(c["CH"], s0, c["CHUNK_ROW"], maps["q128"], q_full, m0, bh)
    sm.tile(c["CH"], s0 + c["OFF_DO"], c["CHUNK_ROW"], maps["do128"], q_full, m0, bh)
    issue_block(0)
    head = bh * S
    i = np.arange(32)[None, :]
    hi = (i // 2) % 2
    st = []
    for wg in range(2):
        r0 = m0 + wg * 64 + WARP * 16 + G8
        sel0, sel1 = np.minimum(head + r0, head + S - 1), np.minimum(head + r0 + 8, head + S - 1)
        lse2_0 = np.where(r0 < S, (LSE[sel0] * LOG2E).astype(np.float32), np.inf)
        lse2_1 = np.where(r0 + 8 < S, (LSE[sel1] * LOG2E).astype(np.float32), np.inf)
        dl0 = np.where(r0 < S, Delta[sel0], 0.0).astype(np.float32)
        dl1 = np.where(r0 + 8 < S, Delta[sel1], 0.0).astype(np.float32)
        st.append(dict(r0=r0, lse2=np.where(hi == 1, lse2_1[:, None], lse2_0[:, None]),
                       dl=np.where(hi == 1, dl1[:, None], dl0[:, None]), dq=np.zeros((128, DP // 2), np.float32)))
    q_full.wait(0)
    for j in range(nkb):
        slot = j & 1
        if j + 1 < nkb:
            issue_block(j + 1)
        k_tile = s0 + c["OFF_K"] + slot * c["KEY_BYTES"]
        v_tile = s0 + c["OFF_V"] + slot * c["KEY_BYTES"]
        full[slot].wait((j >> 1) & 1)
        for wg in range(2):
            w = st[wg]
            q_rows = s0 + wg * 64 * 128
            do_rows = s0 + c["OFF_DO"] + wg * 64 * 128
            s = issue_abt(sm, DP, q_rows, c["CHUNK_ROW"], k_tile, c["CHUNK_KEY"])
            dp = issue_abt(sm, DP, do_rows, c["CHUNK_ROW"], v_tile, c["CHUNK_KEY"])
            k0 = j * BN_Q
            masked = (k0 + BN_Q > S) or (causal and k0 + BN_Q - 1 > m0 + wg * 64)
            p = ex2(fmaf(s, np.float32(scale_log2), -w["lse2"]))
            if masked:
                key = k0 + 8 * (i // 4) + 2 * QD[:, None] + (i % 2)
                row = w["r0"][:, None] + 8 * hi
                p = np.where((key >= S) | (causal & (key > row)), np.float32(0), p)
            ds = (p * (dp - w["dl"])).astype(np.float32)
            w["dq"] = issue_at(sm, DP, w["dq"], pack_a(ds), k_tile, c["CHUNK_KEY"])
    for wg in range(2):
        w = st[wg]
        for half in range(2):
            row = w["r0"] + 8 * half
            for n in range(DP // 8):
                cc = 8 * n + 2 * QD
                ii = 4 * n + 2 * half
                ok = (row < S) & (cc < D)
                at = ((head + w["r0"]) * D + 8 * half * D + cc)[ok]
                for e in range(2):
                    dQ[at + e] = bf16(w["dq"][ok, ii + e] * np.float32(scale))


def run(B, H, HKV, S, D, causal, seed=0):
    rng = np.random.default_rng(seed)
    Q = bf16(rng.standard_normal((B, H, S, D)))
    K = bf16(rng.standard_normal((B, HKV, S, D)))
    V = bf16(rng.standard_normal((B, HKV, S, D)))
    dO = bf16(rng.standard_normal((B, H, S, D)))
    G = H // HKV
    scale = 1.0 / math.sqrt(D)
    # float64 forward + backward (the task's backward_reference, in float64)
    O64 = np.zeros((B, H, S, D))
    LSE64 = np.zeros((B, H, S))
    rdQ = np.zeros((B, H, S, D))
    rdK = np.zeros((B, HKV, S, D))
    rdV = np.zeros((B, HKV, S, D))
    for b in range(B):
        for h in range(H):
            q, k, v, do = (x.astype(np.float64) for x in (Q[b, h], K[b, h // G], V[b, h // G], dO[b, h]))
            s = q @ k.T * scale
            if causal:
                s = np.where(np.triu(np.ones((S, S), bool), 1), -np.inf, s)
            mx = s.max(1, keepdims=True)
            e = np.exp(s - mx)
            lse = mx[:, 0] + np.log(e.sum(1))
            p = np.exp(s - lse[:, None])
            o = p @ v
            O64[b, h], LSE64[b, h] = o, lse
            dp = do @ v.T
            ds = p * (dp - (do * o).sum(1, keepdims=True))
            rdQ[b, h] = ds @ k * scale
            rdK[b, h // G] += ds.T @ q * scale
            rdV[b, h // G] += p.T @ do
    O = bf16(O64.astype(np.float32))
    LSE = LSE64.astype(np.float32).reshape(-1)

    DP = 64 if D <= 64 else 128
    flat = lambda x: np.ascontiguousarray(x, np.float32).reshape(-1)  # noqa: E731
    fq, fk, fv, fdo = flat(Q), flat(K), flat(V), flat(dO)
    maps = dict(q64=TensorMap(fq, B * H, S, D, BM_KV), do64=TensorMap(fdo, B * H, S, D, BM_KV),
                k128=TensorMap(fk, B * HKV, S, D, BN_KV), v128=TensorMap(fv, B * HKV, S, D, BN_KV),
                q128=TensorMap(fq, B * H, S, D, BM_Q), do128=TensorMap(fdo, B * H, S, D, BM_Q),
                k64=TensorMap(fk, B * HKV, S, D, BN_Q), v64=TensorMap(fv, B * HKV, S, D, BN_Q))
    dQ = np.full(B * H * S * D, np.nan, np.float32)
    dK = np.full(B * HKV * S * D, np.nan, np.float32)
    dV = np.full(B * HKV * S * D, np.nan, np.float32)
    scale32 = np.float32(1.0) / np.sqrt(np.float32(D))
    scale_log2 = np.float32(scale32 * LOG2E)
    Delta = delta_kernel(fdo, flat(O), B * H * S, D)
    for by in range(B * HKV):
        for bx in range((S + BN_KV - 1) // BN_KV):
            dkdv_cta(bx, by, maps, LSE, Delta, dK, dV, H, HKV, S, D, DP, causal, scale32, scale_log2)
    gx = (S + BM_Q - 1) // BM_Q
    for by in range(B * H):
        for bx in range(gx):
            dq_cta(bx, by, gx, maps, LSE, Delta, dQ, H, HKV, S, D, DP, causal, scale32, scale_log2)

    tol = 2e-2 if causal else 1e-2
    out = {}
    for name, got, ref in (("dQ", dQ, rdQ), ("dK", dK, rdK), ("dV", dV, rdV)):
        ref = ref.reshape(-1)
        if np.isnan(got).any():
            out[name] = (float("nan"), float("nan"))
            continue
        err = np.abs(got.astype(np.float64) - ref)
        out[name] = (err.max(), (err - tol - tol * np.abs(ref)).max())
    return out


CASES = [  # (B, H, HKV, S, D, causal)
    (1, 2, 1, 200, 96, False),
    (1, 2, 1, 200, 96, True),
    (1, 4, 2, 130, 64, True),
    (2, 2, 2, 70, 128, False),
    (1, 1, 1, 257, 128, True),
    (1, 3, 1, 1, 64, False),
    (1, 6, 3, 17, 96, True),
    (1, 4, 1, 300, 128, False),
    (2, 2, 1, 129, 64, False),
]

if __name__ == "__main__":
    check_layouts()
    worst = -np.inf
    for case in CASES:
        r = run(*case)
        line = "  ".join(f"{k}: max|err| {e:.2e} margin {m:+.4f}" for k, (e, m) in r.items())
        print(case, line, flush=True)
        worst = max(worst, *(m if m == m else np.inf for _, m in r.values()))
    ok = worst <= 0
    print("PASS" if ok else "FAIL", f"(worst margin over atol + rtol|ref|: {worst:+.4f}; negative passes)")
    sys.exit(0 if ok else 1)
