"""CPU model of tasks/attn_decode_paged/solutions/cuda_ptx.cu (issue 33), for checking its index arithmetic
and its split / page / online-softmax / combine logic without a GPU (the kernel has never run on one).

It re-enacts, in torch on the CPU, what each CTA of decode_split and decode_combine does, with the kernel's own
expressions transliterated: the host plan (splits, chunk), the copy layout (thread -> tile row and 16-byte chunk,
PASSES rows per thread), the page lookup (table entry of token t >> log2 P, slot t & (P - 1), zero fill past the
split's end), the XOR-swizzled shared tiles, ldmatrix(.trans) row addresses, the mma.sync m16n8k16 fragments, the
per-warp online softmax in the exp2 domain with P rounded to bf16, the merge of the warps and the LSE-weighted
combine. ldmatrix's and mma.sync's lane maps are modelled by hand-written rules taken from the PTX ISA (sections
"ldmatrix" and "Matrix Fragments for mma.m16n8k16"), NOT by the hardware: a pass shows that the kernel agrees with
those rules and computes the contract's attention; it cannot show the rules are the hardware's, nor anything about
timing or memory ordering (cp.async groups, barriers).

`contiguous=True` replaces the page lookup by the deliberately wrong "pages are contiguous from the sequence's first
one" (page = block_table[b, 0] + t / P), the bug tests/test_decode_cuda_ptx_model.py shows the drawn inputs catch.

    python3 tasks/attn_decode_paged/verify/decode_cuda_ptx_emulate.py      # a few drawn shapes, seconds
"""

from __future__ import annotations

import math

import torch

LOG2E = 1.4426950408889634
MAX_SPLITS = 64  # pdec::MAX_SPLITS


class Cfg:
    """pdec::Cfg<D>."""

    def __init__(self, D: int):
        self.D = D
        self.BN = 64 if D <= 128 else 32
        self.WARPS = self.BN // 16
        self.THREADS = 32 * self.WARPS
        self.CHUNKS = D // 8
        self.ROWS_PER_PASS = self.THREADS // self.CHUNKS
        self.PASSES = self.BN // self.ROWS_PER_PASS


def plan(cfg: Cfg, B: int, HKV: int, tokens: int, sms: int, per_sm: int) -> tuple[int, int]:
    """pdec::plan: (nsplit, chunk)."""
    units = B * HKV
    want = -(-(2 * sms * per_sm) // units)
    most = -(-tokens // (4 * cfg.BN))
    nsplit = max(1, min(want, most, MAX_SPLITS))
    per = -(-tokens // nsplit)
    chunk = -(-per // cfg.BN) * cfg.BN
    return -(-tokens // chunk), chunk


def swz(cfg: Cfg, row, chunk):
    """Byte offset of (row, 16-byte chunk) in a swizzled [rows x D] bf16 tile (pdec::swz)."""
    return row * cfg.D * 2 + ((chunk ^ (row & 7)) << 4)


def ldmatrix_x4(tile: torch.Tensor, addr: torch.Tensor, trans: bool) -> torch.Tensor:
    """ldmatrix.sync.aligned.m8n8.x4(.trans).b16 by the PTX ISA's rule, for warps at once. tile: the shared tile as
    bf16 elements (flat); addr [W, 32]: each lane's row address in bytes (lane 8 i + r: row r of matrix i). Returns
    [W, 32, 4, 2]: register i of each lane as its two bf16 halves (low, high). Without .trans lane l gets row l / 4,
    columns 2 (l % 4), +1 of matrix i; with .trans, column l / 4 of rows 2 (l % 4) and 2 (l % 4) + 1."""
    lane = torch.arange(32)
    rows = addr.reshape(addr.shape[0], 4, 8) // 2  # [W, matrix, row]: element index of the row's start
    out = torch.empty(addr.shape[0], 32, 4, 2, dtype=tile.dtype)
    for i in range(4):
        if not trans:
            start = rows[:, i, lane // 4]  # [W, 32]
            out[:, :, i, 0] = tile[start + 2 * (lane % 4)]
            out[:, :, i, 1] = tile[start + 2 * (lane % 4) + 1]
        else:
            out[:, :, i, 0] = tile[rows[:, i, 2 * (lane % 4)] + lane // 4]
            out[:, :, i, 1] = tile[rows[:, i, 2 * (lane % 4) + 1] + lane // 4]
    return out


def mma_16816(c: torch.Tensor, a0, a2, b0, b1) -> torch.Tensor:
    """mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 with a1 = a3 = 0 and the C rows 8..15 zero in, dropped out
    (pdec::mma_16816), by the PTX ISA's fragment maps; for warps at once. a0, a2, b0, b1 [W, 32, 2] bf16 halves;
    c [W, 32, 2] fp32: the lanes' c0, c1. g = lane / 4, q = lane % 4: a0 = A(g, 2q..2q+1), a2 = A(g, 2q+8..+9),
    b0 = B(2q..2q+1, g), b1 = B(2q+8..+9, g); c0, c1 = C(g, 2q..2q+1)."""
    W = c.shape[0]
    lane = torch.arange(32)
    g, q = lane // 4, lane % 4
    A = torch.zeros(W, 16, 16)
    Bm = torch.zeros(W, 16, 8)
    for e in range(2):
        A[:, g, 2 * q + e] = a0[:, :, e].float()
        A[:, g, 2 * q + 8 + e] = a2[:, :, e].float()
        Bm[:, 2 * q + e, g] = b0[:, :, e].float()
        Bm[:, 2 * q + 8 + e, g] = b1[:, :, e].float()
    Cm = A @ Bm  # exact products of bf16 values, fp32 sums
    return c + torch.stack([Cm[:, g, 2 * q], Cm[:, g, 2 * q + 1]], dim=-1)


def pack_bf16(lo: torch.Tensor, hi: torch.Tensor) -> torch.Tensor:
    """__floats2bfloat162_rn: round to nearest even, as torch's cast does."""
    return torch.stack([lo, hi], dim=-1).to(torch.bfloat16)


def decode_split(cfg, inputs, shape, b, kvh, split, nsplit, chunk, out, o_part, lse_part, contiguous=False):
    """One CTA of pdec::decode_split<D>."""
    D, BN, WARPS, THREADS = cfg.D, cfg.BN, cfg.WARPS, cfg.THREADS
    H, HKV, P, MAXP = (shape[k] for k in ("H", "HKV", "P", "MAXP"))
    log2_p = {1: 0, 16: 4, 64: 6}[P]
    q, k_cache, v_cache = inputs["q"], inputs["k_cache"].reshape(-1), inputs["v_cache"].reshape(-1)
    table_row = inputs["block_table"][b]
    n = int(inputs["seq_lens"][b])
    start = split * chunk
    if start >= n:
        return
    end = min(start + chunk, n)
    ntiles = -(-(end - start) // BN)
    G = H // HKV
    qk_scale = LOG2E / math.sqrt(D)

    # The copy layout: thread tid, pass p -> tile row my_row0 + p * ROWS_PER_PASS, chunk my_chunk.
    tid = torch.arange(THREADS)
    my_chunk, my_row0 = tid % cfg.CHUNKS, tid // cfg.CHUNKS
    rows = my_row0[:, None] + torch.arange(cfg.PASSES)[None, :] * cfg.ROWS_PER_PASS  # [THREADS, PASSES]
    chunks = my_chunk[:, None].expand_as(rows)

    def gather(tile_start):
        """The stage's K and V tiles after issue(): flat bf16 shared images (zero fill past the end)."""
        t = (tile_start + rows)
        live = t < end
        t, r, c = t[live], rows[live], chunks[live]  # the copies with src-size 16; the others zero-fill
        page = (table_row[0] + (t >> log2_p)) if contiguous else table_row[t >> log2_p]
        slot = (page.long() << log2_p) + (t & (P - 1))
        off = (slot * HKV + kvh) * D + c * 8  # elements; 16 bytes = 8 of them from here
        dst = swz(cfg, r, c) // 2
        tiles = []
        for cache in (k_cache, v_cache):
            tile = torch.zeros(BN * D, dtype=torch.bfloat16)
            inside = (off >= 0) & (off + 8 <= cache.numel())  # a read outside the cache: NaN (memcheck's error)
            for e in range(8):
                tile[dst + e] = torch.where(inside, cache[torch.where(inside, off + e, 0)], math.nan)
            tiles.append(tile)
        return tiles

    lane = torch.arange(32)
    warp = torch.arange(WARPS)[:, None]
    g, qd = lane // 4, lane % 4
    mi, r8 = lane >> 3, lane & 7
    k_row, k_chunk = 16 * warp + 8 * (mi >> 1) + r8, mi & 1  # [WARPS, 32]
    v_row, v_chunk = 16 * warp + 8 * (mi & 1) + r8, mi >> 1

    # Q A-fragments: row g = head kvh * G + g (zero for g >= G).
    qrow = torch.zeros(32, D, dtype=torch.bfloat16)
    has_head = g < G
    qrow[has_head] = q[b, kvh * G + g[has_head]]
    qa = []
    for ks in range(D // 16):
        a0 = torch.stack([qrow[lane, 16 * ks + 2 * qd], qrow[lane, 16 * ks + 2 * qd + 1]], -1)
        a2 = torch.stack([qrow[lane, 16 * ks + 8 + 2 * qd], qrow[lane, 16 * ks + 8 + 2 * qd + 1]], -1)
        qa.append((a0.expand(WARPS, 32, 2), a2.expand(WARPS, 32, 2)))

    o = torch.zeros(WARPS, 32, D // 8, 2)
    m = torch.full((WARPS, 32), -math.inf)
    l_part = torch.zeros(WARPS, 32)
    for j in range(ntiles):
        tile_start = start + j * BN
        sk, sv = gather(tile_start)
        s = [torch.zeros(WARPS, 32, 2), torch.zeros(WARPS, 32, 2)]
        for ks in range(D // 16):
            kb = ldmatrix_x4(sk, swz(cfg, k_row, 2 * ks + k_chunk), trans=False)
            s[0] = mma_16816(s[0], *qa[ks], kb[:, :, 0], kb[:, :, 1])
            s[1] = mma_16816(s[1], *qa[ks], kb[:, :, 2], kb[:, :, 3])
        t0 = tile_start + 16 * warp + 2 * qd  # [WARPS, 32]
        x = torch.empty(WARPS, 32, 2, 2)
        for nt in range(2):
            for e in range(2):
                x[:, :, nt, e] = torch.where(t0 + 8 * nt + e < end, s[nt][:, :, e] * qk_scale, -math.inf)
        mx = x.amax(dim=(2, 3)).reshape(WARPS, 8, 4).amax(-1).repeat_interleave(4, -1)  # the quad's max
        m_new = torch.maximum(m, mx)
        ms = torch.where(m_new == -math.inf, 0.0, m_new)
        alpha = torch.exp2(m - ms)
        m = m_new
        p = torch.exp2(x - ms[:, :, None, None])
        l_part = l_part * alpha + p.sum(dim=(2, 3))
        pa0, pa2 = pack_bf16(p[:, :, 0, 0], p[:, :, 0, 1]), pack_bf16(p[:, :, 1, 0], p[:, :, 1, 1])
        for dp in range(D // 16):
            vb = ldmatrix_x4(sv, swz(cfg, v_row, 2 * dp + v_chunk), trans=True)
            o[:, :, 2 * dp] *= alpha[:, :, None]
            o[:, :, 2 * dp + 1] *= alpha[:, :, None]
            o[:, :, 2 * dp] = mma_16816(o[:, :, 2 * dp], pa0, pa2, vb[:, :, 0], vb[:, :, 1])
            o[:, :, 2 * dp + 1] = mma_16816(o[:, :, 2 * dp + 1], pa0, pa2, vb[:, :, 2], vb[:, :, 3])

    # Merge the warps through "shared memory".
    l_sum = l_part.reshape(WARPS, 8, 4).sum(-1)  # the quad's sum = red_l[w][g]
    m_w = m.reshape(WARPS, 8, 4)[:, :, 0]  # red_m[w][g]
    red_o = torch.zeros(WARPS, 8, D)
    for dt in range(D // 8):
        for e in range(2):
            red_o[:, g, 8 * dt + 2 * qd + e] = o[:, :, dt, e]
    mm = m_w.amax(0)  # [8]
    wt = torch.exp2(m_w - mm)
    ll = (l_sum * wt).sum(0)
    acc = (red_o * wt[:, :, None]).sum(0)  # [8, D]
    for hg in range(G):
        row = (b, kvh * G + hg)
        if nsplit == 1:
            out[row] = (acc[hg] / ll[hg]).to(torch.bfloat16)
        else:
            o_part[row + (split,)] = acc[hg] / ll[hg]
            lse_part[row + (split,)] = mm[hg] + torch.log2(ll[hg])


def decode_combine(inputs, out, o_part, lse_part, nsplit, chunk):
    """pdec::decode_combine, every (b, h) at once."""
    B, H = out.shape[:2]
    for b in range(B):
        used = -(-int(inputs["seq_lens"][b]) // chunk)
        lse = lse_part[b, :, :used]  # [H, used]
        weight = torch.exp2(lse - lse.amax(-1, keepdim=True))
        out[b] = ((weight[:, :, None] * o_part[b, :, :used]).sum(1) / weight.sum(-1, keepdim=True)).to(torch.bfloat16)


def xlang_entry_model(inputs, shape, sms=132, per_sm=3, contiguous=False):
    """What xlang_entry leaves in out (bf16 [B, H, D]); sms and per_sm stand for the device's SM count and the split
    kernel's occupancy (small values make small shapes run several splits). Unwritten elements stay NaN."""
    B, H, HKV, D, P, MAXP = (shape[k] for k in ("B", "H", "HKV", "D", "P", "MAXP"))
    cfg = Cfg(D)
    nsplit, chunk = plan(cfg, B, HKV, MAXP * P, sms, per_sm)
    out = torch.full((B, H, D), math.nan, dtype=torch.bfloat16)
    o_part = torch.full((B, H, nsplit, D), math.nan)
    lse_part = torch.full((B, H, nsplit), math.nan)
    for b in range(B):
        for kvh in range(HKV):
            for split in range(nsplit):
                decode_split(cfg, inputs, shape, b, kvh, split, nsplit, chunk, out, o_part, lse_part, contiguous)
    if nsplit > 1:
        decode_combine(inputs, out, o_part, lse_part, nsplit, chunk)
    return out, nsplit


if __name__ == "__main__":
    from xlang.task import get_task

    task = get_task("attn_decode_paged")
    for sizes in ({"B": 3, "H": 8, "HKV": 2, "D": 128, "P": 16, "S": 700}, {"B": 2, "H": 3, "HKV": 3, "D": 64, "P": 1,
                                                                              "S": 300}):
        shape = task.shape(sizes)
        inputs = task.make_inputs(shape, 1, "cpu", "normal")
        ref = task.reference(inputs, shape)["out"]
        for contiguous in (False, True):
            got, nsplit = xlang_entry_model(inputs, shape, sms=4, per_sm=1, contiguous=contiguous)
            err = (got.float() - ref).abs().nan_to_num(math.inf).max().item()
            print(sizes, f"nsplit={nsplit}", "contiguous" if contiguous else "paged", f"max |err| = {err:.3g}")
