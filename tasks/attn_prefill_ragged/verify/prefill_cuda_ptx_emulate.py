"""CPU model of tasks/attn_prefill_ragged/solutions/cuda_ptx_hopper.cu (issue 33), for checking what it changed
from the attn_fwd expert (the cu_seqlens walk, TMA boxes over the packed tensors, the per-sequence causal masks and
stores, and the D = 256 path: BN = 64, wgmma m64n64 for S, P V as two m64n128 halves) without a GPU; the kernel has
never run on one.

It re-enacts each CTA's consumer warpgroups in torch, vectorised over the 128 threads, with hand-written rules
(NOT the hardware) as in tasks/attn_fwd/verify/attn_fwd_cuda_ptx_emulate.py: TMA box writes with the 128-byte
swizzle (16-byte chunk ^= 128-byte row % 8, boxes zero-filled past T), wgmma descriptor reads of K-major and
MN-major 128B-swizzled operands (CUTLASS's canonical layouts: K-major SBO = 1024; MN-major LBO = distance of
64-column blocks, SBO = 1024), the m64nNk16 accumulator and register-A fragment maps of the PTX ISA, and the
kernel's softmax / packing / epilogue transliterated. Those rules are the ones the attn_fwd expert, `ok` on the
H200 at D 64..128, was written against; the m64n64 S and the V half offsets are new uses of them. A pass shows the
kernel agrees with the rules and computes the contract; it says nothing of barriers, the producer or speed.

`one_sequence=True` replaces the cu_seqlens walk by "the batch is one sequence of T rows" (causal over the packed
rows, across sequences), the bug tests/test_prefill_cuda_ptx_model.py shows the drawn inputs catch.

    python3 tasks/attn_prefill_ragged/verify/prefill_cuda_ptx_emulate.py
"""

from __future__ import annotations

import math

import torch

LOG2E = 1.4426950408889634
BM = 128
CHUNK_Q = BM * 128


class Cfg:
    """rpre::Cfg<DP>."""

    def __init__(self, DP: int):
        self.DP = DP
        self.BN = 64 if DP == 256 else 128
        self.CH = DP // 64
        self.CHUNK_KV = self.BN * 128
        self.Q_BYTES = self.CH * CHUNK_Q
        self.KV_BYTES = self.CH * self.CHUNK_KV
        self.STAGES = 2


def swz(addr):
    return addr ^ (((addr >> 7) & 7) << 4)


class Smem:
    """Shared memory as bf16 values (held exactly in fp32), addressed in bytes."""

    def __init__(self, nbytes: int):
        self.m = torch.full((nbytes // 2,), math.nan)  # never-written bytes poison what reads them

    def tma(self, base, src, token0, head, col0, rows):
        """One box {64, 1, rows} of the packed [T, heads, D] tensor src at (col0, head, token0), zero past T / D."""
        T, _, D = src.shape
        r = torch.arange(rows)[:, None]
        c = torch.arange(64)[None, :]
        tok, col = token0 + r, col0 + c
        inside = (tok < T) & (col < D)
        vals = torch.where(inside, src[tok.clamp(max=T - 1), head, col.clamp(max=D - 1)].float(), 0.0)
        self.m[swz(base + r * 128 + c * 2) // 2] = vals

    def kmajor(self, start, R):
        """Operand [R rows, 16 k] of a K-major 128B-swizzled descriptor at byte address start."""
        r = torch.arange(R)[:, None]
        k = torch.arange(16)[None, :]
        return self.m[swz(start + (r // 8) * 1024 + (r % 8) * 128 + k * 2) // 2]

    def mnmajor(self, start, N, lbo):
        """Operand B [16 k, N n] of an MN-major 128B-swizzled descriptor (LBO = lbo, SBO = 1024)."""
        k = torch.arange(16)[:, None]
        n = torch.arange(N)[None, :]
        return self.m[swz(start + (n // 64) * lbo + (k // 8) * 1024 + (k % 8) * 128 + (n % 64) * 2) // 2]


def acc_index(N):
    """(row, column) of accumulator register i of thread t for m64nNk16: [128, N/2] each."""
    t = torch.arange(128)[:, None]
    i = torch.arange(N // 2)[None, :]
    return 16 * (t // 32) + (t % 32) // 4 + 8 * ((i // 2) % 2), 8 * (i // 4) + 2 * (t % 4) + (i % 2)


def to_regs(M):
    r, c = acc_index(M.shape[1])
    return M[r, c]


def from_regs(R):
    r, c = acc_index(2 * R.shape[1])
    M = torch.zeros(64, 2 * R.shape[1])
    M[r, c] = R
    return M


def afrag_matrix(pf, kk):
    """pf [128, BN/4, 2] (the bf16 pairs lo, hi) -> A [64, 16] of k-step kk by the PTX register-A map:
    regs 4kk + 0..3 hold (g, 2q), (g + 8, 2q), (g, 2q + 8), (g + 8, 2q + 8), each with its right neighbour."""
    t = torch.arange(128)
    w, g, q = t // 32, (t % 32) // 4, t % 4
    A = torch.zeros(64, 16)
    for rr, (dr, dc) in enumerate(((0, 0), (8, 0), (0, 8), (8, 8))):
        for e in range(2):
            A[16 * w + g + dr, 2 * q + dc + e] = pf[:, 4 * kk + rr, e]
    return A


def bf16(x):
    return x.to(torch.bfloat16).float()


def cta(cfg, q, k, v, cu, out, bx, h, B, H, HKV, D, one_sequence=False):
    """One CTA (blockIdx.x = bx, blockIdx.y = h) of rpre::prefill_kernel<DP>: both consumer warpgroups."""
    DP, BN, CH, ST = cfg.DP, cfg.BN, cfg.CH, cfg.STAGES
    T = q.shape[0]
    if one_sequence:
        cu = [0, T]
        B = 1
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
    scale_log2 = LOG2E / math.sqrt(D)

    sm = Smem(cfg.Q_BYTES + 2 * ST * cfg.KV_BYTES)
    sq, sk, sv = 0, cfg.Q_BYTES, cfg.Q_BYTES + ST * cfg.KV_BYTES
    for ch in range(CH):
        sm.tma(sq + ch * CHUNK_Q, q, seq_start + mt * BM, h, 64 * ch, BM)

    def load_block(j):
        s = j % ST
        for ch in range(CH):
            sm.tma(sk + s * cfg.KV_BYTES + ch * cfg.CHUNK_KV, k, seq_start + j * BN, kvh, 64 * ch, BN)
            sm.tma(sv + s * cfg.KV_BYTES + ch * cfg.CHUNK_KV, v, seq_start + j * BN, kvh, 64 * ch, BN)

    def issue_qk(q_addr, k_addr):
        S = torch.zeros(64, BN)
        for kk in range(DP // 16):
            A = sm.kmajor(q_addr + (kk // 4) * CHUNK_Q + (kk % 4) * 32, 64)
            Bk = sm.kmajor(k_addr + (kk // 4) * cfg.CHUNK_KV + (kk % 4) * 32, BN)
            S += A @ Bk.T
        return to_regs(S)

    def issue_pv(oacc, pf, v_addr):
        for half in range(DP // 128):
            d0 = v_addr + half * 2 * cfg.CHUNK_KV
            Om = from_regs(oacc[:, 64 * half: 64 * half + 64])
            for kk in range(BN // 16):
                Om += afrag_matrix(pf, kk) @ sm.mnmajor(d0 + kk * 16 * 128, 128, cfg.CHUNK_KV)
            oacc[:, 64 * half: 64 * half + 64] = to_regs(Om)

    t = torch.arange(128)
    warp, lane = t // 32, t % 32
    g, qd = lane // 4, lane % 4
    i_s = torch.arange(BN // 2)
    second = ((i_s // 2) % 2).bool()  # registers of row r0 + 8
    results = []
    for c in range(2):
        results.append(dict(r0=mt * BM + c * 64 + warp * 16 + g, oacc=torch.zeros(128, DP // 2),
                            m0=torch.full((128,), -math.inf), m1=torch.full((128,), -math.inf),
                            l0=torch.zeros(128), l1=torch.zeros(128), pf=None))

    def softmax(st, sacc, j, masked):
        if masked:
            key = j * BN + 8 * (i_s // 4)[None, :] + 2 * qd[:, None] + (i_s % 2)[None, :]
            row = st["r0"][:, None] + 8 * second[None, :]
            sacc = torch.where((key >= n) | (key > row), -math.inf, sacc)
        mx0 = sacc[:, ~second].amax(1)
        mx1 = sacc[:, second].amax(1)
        mx0 = mx0.reshape(32, 4).amax(1).repeat_interleave(4)  # the quad shuffles
        mx1 = mx1.reshape(32, 4).amax(1).repeat_interleave(4)
        mn0, mn1 = torch.maximum(st["m0"], mx0 * scale_log2), torch.maximum(st["m1"], mx1 * scale_log2)
        ms0, ms1 = torch.where(mn0 == -math.inf, 0.0, mn0), torch.where(mn1 == -math.inf, 0.0, mn1)
        a0, a1 = torch.exp2(st["m0"] - ms0), torch.exp2(st["m1"] - ms1)
        st["m0"], st["m1"] = mn0, mn1
        ms = torch.where(second[None, :], ms1[:, None], ms0[:, None])
        p = torch.exp2(sacc * scale_log2 - ms)
        st["l0"] = st["l0"] * a0 + p[:, ~second].sum(1)
        st["l1"] = st["l1"] * a1 + p[:, second].sum(1)
        return p, a0, a1

    def needs_mask(j):
        return j * BN + BN - 1 > mt * BM or j * BN + BN > n

    def pack(p):
        return bf16(p.reshape(128, BN // 4, 2))

    load_block(0)
    for ci, st in enumerate(results):
        q_addr = sq + ci * 64 * 128
        p, _, _ = softmax(st, issue_qk(q_addr, sk), 0, needs_mask(0))
        st["pf"] = pack(p)
    for j in range(1, nkb):
        load_block(j)  # stage j % 2; stage (j - 1) % 2 still holds V_{j-1}
        for ci, st in enumerate(results):
            q_addr = sq + ci * 64 * 128
            sacc = issue_qk(q_addr, sk + (j % ST) * cfg.KV_BYTES)
            issue_pv(st["oacc"], st["pf"], sv + ((j - 1) % ST) * cfg.KV_BYTES)
            p, a0, a1 = softmax(st, sacc, j, needs_mask(j))
            rowsel = ((torch.arange(DP // 2) // 2) % 2).bool()
            st["oacc"] *= torch.where(rowsel[None, :], a1[:, None], a0[:, None])
            st["pf"] = pack(p)
    for st in results:
        issue_pv(st["oacc"], st["pf"], sv + ((nkb - 1) % ST) * cfg.KV_BYTES)
        l0 = st["l0"].reshape(32, 4).sum(1).repeat_interleave(4)
        l1 = st["l1"].reshape(32, 4).sum(1).repeat_interleave(4)
        inv0 = torch.where(l0 > 0, 1 / l0, 0.0)
        inv1 = torch.where(l1 > 0, 1 / l1, 0.0)
        for i in range(DP // 8):
            col = 8 * i + 2 * qd
            for e in range(2):
                for rows, inv, reg in ((st["r0"], inv0, 4 * i + e), (st["r0"] + 8, inv1, 4 * i + 2 + e)):
                    ok = (rows < n) & (col + e < D)
                    out[seq_start + rows[ok], h, (col + e)[ok]] = bf16(st["oacc"][ok, reg] * inv[ok])
    return b, mt


def xlang_entry_model(inputs, shape, one_sequence=False):
    """What xlang_entry leaves in out ([T, H, D], NaN where nothing was written) and the (b, tile) each CTA took."""
    B, T, H, HKV, D = (shape[k] for k in ("B", "T", "H", "HKV", "D"))
    cfg = Cfg(D)
    q, k, v = inputs["q"], inputs["k"], inputs["v"]
    cu = inputs["cu_seqlens"].tolist()
    out = torch.full((T, H, D), math.nan)
    visited = []
    for bx in range(-(-T // BM) + B):
        for h in range(H):
            took = cta(cfg, q, k, v, cu, out, bx, h, B, H, HKV, D, one_sequence)
            if took is not None and h == 0:
                visited.append(took)
    return out, visited


if __name__ == "__main__":
    from xlang.task import get_task

    task = get_task("attn_prefill_ragged")
    for sizes in ({"B": 3, "T": 300, "H": 2, "HKV": 1, "D": 128}, {"B": 3, "T": 200, "H": 2, "HKV": 1, "D": 256}):
        shape = task.shape(sizes)
        inputs = task.make_inputs(shape, 1, "cpu", "normal")
        ref = task.reference(inputs, shape)["out"]
        for one in (False, True):
            got, visited = xlang_entry_model(inputs, shape, one_sequence=one)
            err = (got - ref).abs().nan_to_num(math.inf).max().item()
            print(sizes, "one sequence" if one else "ragged", f"tiles {len(visited)}", f"max |err| = {err:.3g}")
