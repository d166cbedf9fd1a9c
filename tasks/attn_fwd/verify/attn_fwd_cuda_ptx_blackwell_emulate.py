"""CPU model of tasks/attn_fwd/solutions/cuda_ptx_blackwell.cu (issue 7). No Blackwell GPU exists here, so this
checks the kernel's arithmetic and its synchronisation design against hand-written rules, NOT against hardware.

Part A (values): the kernel's descriptor bit packing (desc_kmajor, desc_mnmajor, idesc_bf16) is re-done here and
then DECODED by a model of the PTX ISA tables (9.7.16.4.1 shared memory descriptor, 9.7.16.3.3 canonical layouts
for 128-byte swizzle, 9.7.16.4.2 instruction descriptor); TMA boxes {64,128,1} are written into a byte-addressed
shared memory with the 128-byte swizzle (16-byte chunk ^= address bits 7-9) and zero fill outside [S, D] of the
head; TMEM is a [128 lanes x 512 columns] array of 32-bit cells with the 32x32b ld/st rule (thread l of warp w
<-> lane 32w+l) and P packed two bf16 per cell (low half = even k) for the A-from-TMEM MMA. The softmax (exp2
domain, lazy rescale with threshold 8, warp-uniform O correction), masking, guarded epilogue and LSE are
transliterated from the kernel, vectorised over the 128 rows. Output is compared with a float64 reference.

Part B (protocol): a randomised discrete-event model of the producer / MMA / 4 softmax warps with the kernel's
mbarriers (counts, parities, tx bytes), asynchronous TMA and MMA completion in any order (a commit arrives once
every MMA issued before it has completed), and checks: no deadlock, no waiter lapped by two phases, no two
overlapping accesses to one TMEM buffer / smem slot with a write among them, and every read sees the version it
expects (S_j, P_j, K_j, V_j, O after PV_{j-1} and the correction).

    python3 tasks/attn_fwd/verify/attn_fwd_cuda_ptx_blackwell_emulate.py      # about a minute on one core
"""
from __future__ import annotations

import math
import random
import sys

import numpy as np

BM = BN = 128
CHUNK = 128 * 128
TMEM_O = 256
THRESH = 8.0
STATS = {"corrections": 0}


def bf16(x):
    x = np.ascontiguousarray(x, np.float32)
    u = x.view(np.uint32).astype(np.uint64)
    u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
    return u.astype(np.uint32).view(np.float32)


# ---------------------------------------------------------------- the kernel's encodings (mirrored)
def desc_kmajor(saddr):
    return ((saddr & 0x3FFFF) >> 4) | (1 << 16) | (64 << 32) | (1 << 46) | (2 << 61)


def desc_mnmajor(saddr):
    return ((saddr & 0x3FFFF) >> 4) | ((CHUNK >> 4) << 16) | (64 << 32) | (1 << 46) | (2 << 61)


def idesc_bf16(M, N, b_mn_major):
    return (1 << 4) | (1 << 7) | (1 << 10) | (b_mn_major << 16) | ((N >> 3) << 17) | ((M >> 4) << 24)


# ---------------------------------------------------------------- hardware rules as read from the PTX ISA
def decode_desc(d):
    assert (d >> 46) & 7 == 1, "fixed 0b001 at bits 46-48"
    assert (d >> 49) & 7 == 0 and (d >> 52) & 1 == 0 and (d >> 53) & 0xFF == 0
    assert (d >> 61) & 7 == 2, "128-byte swizzle"
    return dict(start=(d & 0x3FFF) << 4, lbo=((d >> 16) & 0x3FFF) << 4, sbo=((d >> 32) & 0x3FFF) << 4)


def decode_idesc(i):
    assert i & 0xF == 0 and (i >> 4) & 3 == 1 and (i >> 7) & 7 == 1 and (i >> 10) & 7 == 1, "bf16 x bf16 -> f32"
    assert (i >> 13) & 3 == 0 and (i >> 23) & 1 == 0 and (i >> 29) & 7 == 0
    return dict(M=((i >> 24) & 31) << 4, N=((i >> 17) & 63) << 3, a_mn=(i >> 15) & 1, b_mn=(i >> 16) & 1)


def swz(addr):  # 128-byte swizzle on the absolute shared address (patterns start on 1024-B boundaries)
    return addr ^ (((addr >> 7) & 7) << 4)


def kmajor_tile(smem, d, rows):  # [rows, 16] operand: ((8,m),(T,2k)):((8T,SBO),(1,T)), 16 k of one 128-B row
    f = decode_desc(d)
    r = np.arange(rows)[:, None]
    k = np.arange(16)[None, :]
    addr = f["start"] + (r // 8) * f["sbo"] + (r % 8) * 128 + k * 2
    return smem[swz(addr) // 2]


def mnmajor_tile(smem, d, n):  # [16 k, n] operand: ((T,8,m),(8,k)):((1,T,LBO),(8T,SBO))
    f = decode_desc(d)
    k = np.arange(16)[:, None]
    c = np.arange(n)[None, :]
    addr = f["start"] + (c // 64) * f["lbo"] + (k // 8) * f["sbo"] + (k % 8) * 128 + (c % 64) * 2
    return smem[swz(addr) // 2]


def tma_box(smem, base, src, r0, c0, S, D):  # box {64 cols, 128 rows} of one head's [S, D], zero fill
    r = np.arange(128)[:, None]
    c = np.arange(64)[None, :]
    gr, gc = r0 + r, c0 + c
    ok = (gr < S) & (gc < D)
    vals = np.where(ok, src[np.minimum(gr, S - 1), np.minimum(gc, D - 1)], 0.0)
    smem[swz(base + r * 128 + c * 2) // 2] = vals


class Tmem:
    def __init__(self):
        self.u = np.zeros((128, 512), np.uint32)

    def ld(self, warp, taddr, n):  # tcgen05.ld.32x32b.xN by warp `warp`: [32 lanes, n] 32-bit words
        lane, col = taddr >> 16, taddr & 0xFFFF
        assert lane == 32 * (warp % 4), "warp w may only access lanes 32(w%4)..+31"
        return self.u[lane:lane + 32, col:col + n].copy()

    def st(self, warp, taddr, words):
        lane, col = taddr >> 16, taddr & 0xFFFF
        assert lane == 32 * (warp % 4)
        self.u[lane:lane + 32, col:col + words.shape[1]] = words

    def f32(self, col, n):
        return self.u[:, col:col + n].view(np.float32)

    def a_bf16(self, taddr, k):  # A operand [128, k] bf16 from TMEM (row-major, 2 per cell, low = even k)
        col = taddr & 0xFFFF
        w = self.u[:, col:col + k // 2]
        lo = (w & 0xFFFF) << 16
        hi = w & 0xFFFF0000
        out = np.empty((128, k), np.uint32)
        out[:, 0::2], out[:, 1::2] = lo, hi
        return out.view(np.float32)


def mma(tm, d_tmem, a, b, idesc, acc):  # a: ("smem", tile) or ("tmem", matrix); b: tile [N, 16] or [16, N]
    f = decode_idesc(idesc)
    assert f["M"] == 128 and d_tmem >> 16 == 0
    A = a
    Bm = b if f["b_mn"] else b.T  # K-major B is given as [N, 16]; MN-major as [16, N]
    assert A.shape == (128, 16) and Bm.shape == (16, f["N"])
    col = d_tmem & 0xFFFF
    D = A.astype(np.float64) @ Bm.astype(np.float64)
    cur = tm.f32(col, f["N"]) if acc else 0.0
    tm.u[:, col:col + f["N"]] = (cur + D).astype(np.float32).view(np.uint32)


def pack_bf16(lo, hi):
    return (bf16(lo).view(np.uint32) >> 16) | (bf16(hi).view(np.uint32) & 0xFFFF0000)


def run_tile(Q, K, V, O_flat, LSE_flat, b, h, H, HKV, S, D, mt, causal):
    DP = 64 if D <= 64 else 128
    CH = DP // 64
    TILE = CH * CHUNK
    smem = np.zeros((3 * TILE) // 2, np.float32)  # Q, one K slot, one V slot (values, addressed in bytes / 2)
    sq, sk, sv = 0, TILE, 2 * TILE
    bh = b * H + h
    kvh = h // (H // HKV)
    nkb_all = (S + BN - 1) // BN
    nkb = min(nkb_all, mt + 1) if causal else nkb_all
    scale_log2 = np.float32(1.4426950408889634 / math.sqrt(D))
    idesc_s, idesc_o = idesc_bf16(BM, BN, 0), idesc_bf16(BM, DP, 1)
    tm = Tmem()
    for ch in range(CH):
        tma_box(smem, sq + ch * CHUNK, Q[b, h], mt * BM, 64 * ch, S, D)
    rows = mt * BM + np.arange(128)
    m = np.full(128, -np.inf, np.float32)
    l = np.zeros(128, np.float32)
    v_tiles = {}
    for j in range(nkb + 1):
        if j < nkb:  # MMA thread: S_j into buffer j&1
            sb = j & 1
            for ch in range(CH):
                tma_box(smem, sk + ch * CHUNK, K[b, kvh], j * BN, 64 * ch, S, D)
                tma_box(smem, sv + ch * CHUNK, V[b, kvh], j * BN, 64 * ch, S, D)
            v_tiles[j] = smem[sv // 2:(sv + TILE) // 2].copy()
            for kk in range(DP // 16):
                off = ((kk // 4) * CHUNK + (kk % 4) * 32) >> 4
                mma(tm, sb * BN, kmajor_tile(smem, desc_kmajor(sq) + off, 128),
                    kmajor_tile(smem, desc_kmajor(sk) + off, 128), idesc_s, kk > 0)
        if j >= 1:  # MMA thread: PV_{j-1} (after P_{j-1} and the correction)
            i = j - 1
            pb = i & 1
            vsm = np.zeros_like(smem)
            vsm[sv // 2:(sv + TILE) // 2] = v_tiles.pop(i)
            for kk in range(BN // 16):
                a = tm.a_bf16(pb * BN + kk * 8, 16)
                bt = mnmajor_tile(vsm, desc_mnmajor(sv) + ((kk * 2048) >> 4), DP)
                mma(tm, TMEM_O, a, bt, idesc_o, i > 0 or kk > 0)
        if j == nkb:
            break
        # softmax warps for block j (vectorised over the 128 threads = rows)
        sb = j & 1
        s = np.concatenate([tm.ld(w, ((32 * w) << 16) + sb * BN, BN) for w in range(4)]).view(np.float32).copy()
        if j == nkb - 1:
            lim = (np.minimum(S, rows + 1) if causal else np.full(128, S)) - j * BN
            s[np.arange(BN)[None, :] >= lim[:, None]] = -np.inf
        mx = s.max(1) * scale_log2
        m_new = np.where(mx > m + np.float32(THRESH), mx, m).astype(np.float32)
        ms = np.where(m_new == -np.inf, np.float32(0), m_new)
        alpha = np.exp2(m - ms).astype(np.float32)
        p = np.exp2((s * scale_log2 - ms[:, None]).astype(np.float32)).astype(np.float32)
        l = (l * alpha + p.sum(1, dtype=np.float32)).astype(np.float32)
        words = pack_bf16(p[:, 0::2], p[:, 1::2])
        for w in range(4):
            tm.st(w, ((32 * w) << 16) + sb * BN, words[32 * w:32 * w + 32])
        if j >= 1:  # here PV_{j-1} has completed (the kernel waits pv_done)
            for w in range(4):
                if (m_new[32 * w:32 * w + 32] > m[32 * w:32 * w + 32]).any():
                    STATS["corrections"] += 1
                    for c in range(DP // 32):
                        t = ((32 * w) << 16) + TMEM_O + 32 * c
                        v = tm.ld(w, t, 32).view(np.float32) * alpha[32 * w:32 * w + 32, None]
                        tm.st(w, t, v.astype(np.float32).view(np.uint32))
        m = m_new
    # epilogue (guards as in the kernel; flat addresses as in the kernel)
    inv = np.where(l > 0, 1 / l, 0).astype(np.float32)
    for w in range(4):
        for c in range(DP // 32):
            if 32 * c >= D:
                break
            v = tm.ld(w, ((32 * w) << 16) + TMEM_O + 32 * c, 32).view(np.float32)
            for ln in range(32):
                row = mt * BM + 32 * w + ln
                if row < S:
                    for q in range(4):
                        col = 32 * c + 8 * q
                        if col < D:
                            a0 = (bh * S + row) * D + col
                            O_flat[a0:a0 + 8] = bf16(v[ln, 8 * q:8 * q + 8] * inv[32 * w + ln])
    ok = rows < S
    LSE_flat[bh * S + rows[ok]] = ((m + np.log2(l)) * np.float32(math.log(2)))[ok]


def part_a(B, H, HKV, S, D, causal, trend=False, seed=0):
    rng = np.random.default_rng(seed)
    Q = rng.standard_normal((B, H, S, D)) * 1.5
    K = rng.standard_normal((B, HKV, S, D)) * 1.5
    if trend:  # scores grow with the key index, so the running max moves by more than 2^8 between blocks
        Q = Q * 0.3 + 2.0
        K = K * 0.3 + (np.arange(S) / 24.0)[None, None, :, None]
    Q, K = bf16(Q), bf16(K)
    V = bf16(rng.standard_normal((B, HKV, S, D)))
    guard = 4096
    O_flat = np.full(B * H * S * D + guard, np.nan, np.float32)
    LSE_flat = np.full(B * H * S + guard, np.nan, np.float32)
    for b in range(B):
        for h in range(H):
            for mt in range((S + BM - 1) // BM):
                run_tile(Q, K, V, O_flat, LSE_flat, b, h, H, HKV, S, D, mt, causal)
    assert np.isnan(O_flat[B * H * S * D:]).all() and np.isnan(LSE_flat[B * H * S:]).all(), "write past the end"
    O = O_flat[:B * H * S * D].reshape(B, H, S, D)
    LSE = LSE_flat[:B * H * S].reshape(B, H, S)
    assert not np.isnan(O).any() and not np.isnan(LSE).any(), "an output element was never written"
    G = H // HKV
    eo = el = worst = 0.0
    for b in range(B):
        for h in range(H):
            sc = (Q[b, h].astype(np.float64) @ K[b, h // G].T.astype(np.float64)) / math.sqrt(D)
            if causal:
                sc = np.where(np.triu(np.ones((S, S), bool), 1), -np.inf, sc)
            mx = sc.max(1, keepdims=True)
            pr = np.exp(sc - mx)
            lsum = pr.sum(1, keepdims=True)
            o = (pr / lsum) @ V[b, h // G].astype(np.float64)
            eo = max(eo, float(np.abs(O[b, h] - o).max()))
            worst = max(worst, float((np.abs(O[b, h] - o) / (1e-2 + 1e-2 * np.abs(o))).max()))
            el = max(el, float(np.abs(LSE[b, h] - (mx + np.log(lsum))[:, 0]).max()))
    return eo, el, worst


# ---------------------------------------------------------------- Part B: the mbarrier protocol
class Bar:
    def __init__(self, name, count):
        self.name, self.count, self.pending, self.tx, self.phase = name, count, count, 0, 0

    def arrive(self, tx=0):
        self.pending -= 1
        self.tx += tx
        self._maybe_flip()

    def complete_tx(self, nbytes):
        self.tx -= nbytes
        self._maybe_flip()

    def _maybe_flip(self):
        if self.pending == 0 and self.tx == 0:
            self.phase += 1
            self.pending = self.count

    def try_wait(self, parity, waiter_phase):
        # PTX: succeeds when the phase with this parity has completed, i.e. current parity != parity.
        # The model also knows which phase the waiter means (the kernel's parity must be its low bit) and
        # flags any disagreement: a lap (barrier two phases ahead: the waiter would hang) or a false pass
        # (barrier a phase behind: the parity test succeeds before the awaited phase completed).
        assert parity == waiter_phase & 1, f"{self.name}: parity {parity} for phase {waiter_phase}"
        by_parity, truth = (self.phase & 1) != parity, self.phase > waiter_phase
        if self.phase >= waiter_phase + 2:
            raise AssertionError(f"{self.name}: waiter for phase {waiter_phase} lapped (now {self.phase})")
        if by_parity != truth:
            raise AssertionError(f"{self.name}: parity wait for phase {waiter_phase} passes early (now {self.phase})")
        return by_parity


class Protocol:
    def __init__(self, nkb, ST, rng):
        self.nkb, self.ST, self.rng, self.t = nkb, ST, rng, 0
        B = Bar
        self.k_full = [B(f"k_full{s}", 1) for s in range(ST)]
        self.k_empty = [B(f"k_empty{s}", 1) for s in range(ST)]
        self.v_full = [B(f"v_full{s}", 1) for s in range(ST)]
        self.v_empty = [B(f"v_empty{s}", 1) for s in range(ST)]
        self.q_full = B("q_full", 1)
        self.s_full = [B("s_full0", 1), B("s_full1", 1)]
        self.p_full = [B("p_full0", 128), B("p_full1", 128)]
        self.pv_done = B("pv_done", 1)
        self.async_ops = []          # (kind, payload) completing in any order
        self.mma_inflight = []       # ids of issued, incomplete MMAs
        self.commits = []            # (set of MMA ids it waits for, barrier)
        self.access = {}             # resource -> list of [start, end or None, kind, actor, version]
        self.version = {}
        self.mma_id = 0

    # resource accounting: accesses are intervals; writes must not overlap any other access
    def begin(self, res, kind, actor, expect=None):
        if expect is not None:
            got = self.version.get(res)
            ok = got in expect if isinstance(expect, (set, frozenset)) else got == expect
            assert ok, f"{actor} reads {res}: version {got}, expected {expect}"
        for a in self.access.get(res, []):
            if a[1] is None and (kind == "W" or a[2] == "W") and a[3] != actor:
                raise AssertionError(f"race on {res}: {actor} {kind} while {a[3]} {a[2]} in flight")
        rec = [self.t, None, kind, actor]
        self.access.setdefault(res, []).append(rec)
        return rec

    def end(self, rec, res, new_version=None):
        rec[1] = self.t
        if new_version is not None:
            self.version[res] = new_version

    def instant(self, res, kind, actor, expect=None, new_version=None):
        self.end(self.begin(res, kind, actor, expect), res, new_version)

    def wait(self, bar, parity, phase):
        while not bar.try_wait(parity, phase):
            yield

    # ---- roles (generators: each yield is a scheduling point)
    def producer(self):
        ST = self.ST
        self.tma("Q", "Q", self.q_full)
        for j in range(self.nkb):
            s, ph = j % ST, (j // ST) & 1
            yield from self.wait(self.k_empty[s], ph ^ 1, j // ST - 1)
            self.tma(f"Kslot{s}", ("K", j), self.k_full[s])
            yield
            yield from self.wait(self.v_empty[s], ph ^ 1, j // ST - 1)
            self.tma(f"Vslot{s}", ("V", j), self.v_full[s])
            yield

    def tma(self, res, version, bar):
        bar.arrive(tx=1)
        rec = self.begin(res, "W", "TMA")
        self.async_ops.append(("tma", (rec, res, version, bar)))

    def issue_mma(self, reads, writes):
        mid = self.mma_id
        self.mma_id += 1
        recs = [(self.begin(r, "R", f"MMA{mid}", e), r, None) for r, e in reads]
        recs += [(self.begin(r, "W", f"MMA{mid}"), r, v) for r, v in writes]
        self.mma_inflight.append(mid)
        self.async_ops.append(("mma", (mid, recs)))

    def commit(self, bar):
        self.commits.append((set(self.mma_inflight), bar))
        self._fire_commits()

    def _fire_commits(self):
        keep = []
        for waiting, bar in self.commits:
            waiting &= set(self.mma_inflight)
            if waiting:
                keep.append((waiting, bar))
            else:
                bar.arrive()
        self.commits = keep

    def mma_thread(self):
        ST, nkb = self.ST, self.nkb

        def pv(i):
            pb, vs = i & 1, i % ST
            yield from self.wait(self.p_full[pb], (i >> 1) & 1, i >> 1)
            yield from self.wait(self.v_full[vs], (i // ST) & 1, i // ST)
            o_expect = None if i == 0 else frozenset({("PV", i - 1), ("C", i)})
            reads = [(f"Sbuf{pb}.{w}", ("P", i)) for w in range(4)] + [(f"Vslot{vs}", ("V", i))]
            reads += [(f"O{w}", o_expect) for w in range(4)]
            self.issue_mma(reads, [(f"O{w}", ("PV", i)) for w in range(4)])
            self.commit(self.v_empty[vs])
            self.commit(self.pv_done)
            yield

        yield from self.wait(self.q_full, 0, 0)
        for j in range(nkb):
            sb, ks = j & 1, j % ST
            if j >= 2:
                yield from self.wait(self.pv_done, (j - 2) & 1, j - 2)
            yield from self.wait(self.k_full[ks], (j // ST) & 1, j // ST)
            self.issue_mma([("Q", "Q"), (f"Kslot{ks}", ("K", j))], [(f"Sbuf{sb}.{w}", ("S", j)) for w in range(4)])
            self.commit(self.k_empty[ks])
            self.commit(self.s_full[sb])
            yield
            if j >= 1:
                yield from pv(j - 1)
        yield from pv(nkb - 1)

    def softmax_warp(self, w):
        rng = self.rng
        for j in range(self.nkb):
            sb = j & 1
            yield from self.wait(self.s_full[sb], (j >> 1) & 1, j >> 1)
            self.instant(f"Sbuf{sb}.{w}", "R", f"SM{w}", ("S", j))   # this warp's 32 lanes of the buffer
            yield
            self.instant(f"Sbuf{sb}.{w}", "W", f"SM{w}", ("S", j), ("P", j))   # P_j over S_j
            yield
            if j >= 1:
                yield from self.wait(self.pv_done, (j - 1) & 1, j - 1)
                if rng.random() < 0.5:  # this warp's rows moved their max: correct O
                    self.instant(f"O{w}", "W", f"SM{w}", ("PV", j - 1), ("C", j))
                yield
            for _ in range(32):
                self.p_full[sb].arrive()
            yield
        yield from self.wait(self.pv_done, (self.nkb - 1) & 1, self.nkb - 1)
        self.instant(f"O{w}", "R", f"EPI{w}", ("PV", self.nkb - 1))

    def run(self):
        agents = [self.producer(), self.mma_thread()] + [self.softmax_warp(w) for w in range(4)]
        live = list(agents)
        stall = 0
        while live or self.async_ops:
            self.t += 1
            choices = [("agent", a) for a in live] + [("async", k) for k in range(len(self.async_ops))]
            kind, x = self.rng.choice(choices)
            if kind == "agent":
                try:
                    next(x)
                except StopIteration:
                    live.remove(x)
            else:
                op, payload = self.async_ops.pop(x)
                if op == "tma":
                    rec, res, version, bar = payload
                    self.end(rec, res, version)
                    bar.complete_tx(1)
                else:
                    mid, recs = payload
                    for rec, res, v in recs:
                        self.end(rec, res, v)
                    self.mma_inflight.remove(mid)
                    self._fire_commits()
            stall = stall + 1 if not self.async_ops else 0
            if stall > 20000:
                raise AssertionError("deadlock: agents spin with nothing in flight")
        assert not self.commits


def part_b(trials=300, seed=1):
    rng = random.Random(seed)
    for n in range(trials):
        nkb = rng.choice([1, 2, 3, 4, 5, 7, 9])
        ST = rng.choice([3, 4])
        Protocol(nkb, ST, rng).run()
    return trials


if __name__ == "__main__":
    failures = 0
    cases = [  # (B, H, HKV, S, D, causal[, trend])
        (1, 1, 1, 1, 64, False), (1, 1, 1, 1, 128, True), (1, 2, 1, 130, 96, False), (1, 2, 1, 130, 96, True),
        (1, 2, 2, 257, 64, True), (1, 4, 2, 257, 128, False), (2, 4, 1, 200, 96, True), (1, 1, 1, 384, 128, True),
        (1, 2, 1, 520, 96, False, True), (1, 2, 2, 520, 64, True, True),
    ]
    for case in cases:
        before = STATS["corrections"]
        eo, el, worst = part_a(*case)
        ok = worst <= 1.0 and el < 1e-3   # the task's tolerance: |O - ref| <= 1e-2 + 1e-2 |ref|
        failures += not ok
        print(f"A {'ok  ' if ok else 'FAIL'} B,H,HKV,S,D,causal(,trend)={case}: max|O-ref|={eo:.2e} "
              f"(worst / tolerance {worst:.2f}) max|LSE-ref|={el:.2e}, O corrections {STATS['corrections'] - before}")
    try:
        print(f"B ok   protocol: {part_b()} random interleavings, nkb 1..9, 3-4 stages: no deadlock, lap, race or stale read")
    except AssertionError as e:
        failures += 1
        print(f"B FAIL protocol: {e}")
    sys.exit(1 if failures else 0)
