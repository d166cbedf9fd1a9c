"""Checks without a GPU for tasks/attn_bwd/solutions/cutedsl_hopper.py (fused CuTe DSL Hopper
attention backward): trace-time layout checks with nvidia-cutlass-dsl, then a CPU model of its tile algorithm,
index arithmetic and its consumer-side barrier protocol, against the float64 backward at the task tolerance.

A PASS SHOWS THAT THE KERNEL'S TILE ALGORITHM, INDEX ARITHMETIC AND BUFFER PROTOCOL AGREE WITH THE RULES MODELLED
HERE, NOT THAT THE KERNEL RUNS (it ran correct on the H200, 2026-11-30).

Part 1, layouts (trace time, repeats the expert host's own make_trivial_tiled_mma / make_smem_layout_* calls):
  * the 128 x 64 SS accumulator (S^T, dP^T) gives register i = c + 2r + 4v of consumer thread t (warpgroup wg,
    warp w, lane l) the tile position (64 wg + 16 w + l // 4 + 8 r, 2 (l % 4) + c + 8 v), and the stmatrix
    source partition of the dS^T store walks the same positions in the same flat order;
  * the dQ accumulator (one warpgroup, 64 x DP/2) follows the same rule without the 64 wg term: that is the
    thread order of the staging buffer and of the convert kernel;
  * every smem tile read in two majors (Q/dO ring, K tile as dQ's B, dS^T buffers as dQ's A) maps
    (row, col, stage) to the same offset in both views, under the same swizzle.
Part 2, CPU model (torch, fp32, bf16 rounding where the kernel rounds):
  * prep: Delta, LSE2 = LSE log2e into [B*H, S_pad] scratch, +inf / 0 past S; the dQ scratch (NaN before)
    zeroed by the prep kernel's rows;
  * TMA loads of [heads, S, D] per head zero-filled past S and D; dK/dV stores clipped;
  * per consumer warpgroup, the expert's per-thread code over [128 threads, 32 registers] arrays: LSE2 / Delta
    reads of register j = c + 2v, exp2, the mask and its per-warpgroup needs_mask condition, dS^T, bf16 P^T /
    dS^T as the RS wgmmas' A;
  * the dS^T double buffer, the K tile (read by dQ's wgmma, then overwritten by the dK/dV epilogue), the two
    staging buffers and the fp32 scratch are shared arrays; the two consumer warpgroups are separate actors run
    in a random interleaving (several seeds); the dQ wgmma group (G2) reads dS^T and K when its wait_group
    retires it, and each bulk reduce-add reads its staging buffer at a random later point (forced by the
    issuing thread's wait_group.read); named barriers 1 (256) and 2 + c (128) block; so a buffer reused too
    early shows as a wrong result.
  * the convert kernel's un-permutation of the thread-order scratch, transliterated.
Not modelled: the producer and CuTe's PipelineTmaAsync ring (as used by the split expert that ran on the
H200), threads inside one warpgroup (lockstep here), proxy fences, summation order inside a wgmma.

    python3 tasks/attn_bwd/verify/attn_bwd_cutedsl_emulate.py            # layouts + all cases; 0 = PASS
    python3 tasks/attn_bwd/verify/attn_bwd_cutedsl_emulate.py --bugs     # every injected bug must FAIL
    python3 tasks/attn_bwd/verify/attn_bwd_cutedsl_emulate.py --no-layouts
    python3 tasks/attn_bwd/verify/attn_bwd_cutedsl_emulate.py --no-layouts --side v2   # the side kernels
                                                 # (prep, convert) of the expert before 2026-12-01 instead
"""
import math
import random
import sys

import torch

BN, BM = 128, 64
LOG2E = 1.4426950408889634
BUGS = set()


# ============================================================================================= part 1: layouts
def check_layouts():
    import cutlass
    import cutlass.cute as cute
    import cutlass.utils.hopper_helpers as sm90_utils
    from cutlass.cute.nvgpu import warp, warpgroup
    from cutlass.utils.layout import LayoutEnum

    AB, ACC = cutlass.BFloat16, cutlass.Float32
    failures = []

    @cute.jit
    def _check(dp: cutlass.Constexpr, stages: cutlass.Constexpr):
        K_MAJ, MN_MAJ = warpgroup.OperandMajorMode.K, warpgroup.OperandMajorMode.MN
        mma_s = sm90_utils.make_trivial_tiled_mma(AB, AB, K_MAJ, K_MAJ, ACC, (2, 1, 1), tiler_mn=(64, 64))
        mma_dq = sm90_utils.make_trivial_tiled_mma(AB, AB, MN_MAJ, MN_MAJ, ACC, (1, 1, 1), tiler_mn=(64, dp // 2))
        pairs = (
            ("K tile / its MN-major view",
             sm90_utils.make_smem_layout_a(LayoutEnum.ROW_MAJOR, (BN, 64, dp), AB, 1),
             sm90_utils.make_smem_layout_b(LayoutEnum.COL_MAJOR, (64, dp, BN), AB, 1), BN, dp, 1),
            ("Q/dO slot / its MN-major view",
             sm90_utils.make_smem_layout_b(LayoutEnum.ROW_MAJOR, (BN, BM, dp), AB, stages),
             sm90_utils.make_smem_layout_b(LayoutEnum.COL_MAJOR, (BN, dp, BM), AB, stages), BM, dp, stages),
            ("dS^T buffer / its MN-major view",
             sm90_utils.make_smem_layout_a(LayoutEnum.ROW_MAJOR, (BN, 64, BM), AB, 2),
             sm90_utils.make_smem_layout_a(LayoutEnum.COL_MAJOR, (BM, 64, BN), AB, 2), BN, BM, 2),
        )
        for name, lay, lay_t, rows, cols, st in pairs:
            print(f"dp={dp} {name}: {lay}  |  {lay_t}")
            if cutlass.const_expr(str(lay.inner) != str(lay_t.inner)):
                failures.append(f"dp={dp} {name}: swizzles differ")
            for s in cutlass.range_constexpr(st):
                for row in cutlass.range_constexpr(0, rows, 3):
                    for col in cutlass.range_constexpr(0, cols, 5):
                        if cutlass.const_expr(lay.outer((row, col, s)) != lay_t.outer((col, row, s))):
                            failures.append(f"dp={dp} {name}: ({row},{col},{s}) differs")
        r2s_atom = sm90_utils.get_smem_store_op(LayoutEnum.ROW_MAJOR, AB, ACC)
        stm_atom = cute.make_copy_atom(warp.StMatrix8x8x16bOp(False, 4), AB)
        r2s = cute.make_tiled_copy_S(r2s_atom, cute.make_tiled_copy_C_atom(stm_atom, mma_s))
        for t in cutlass.range_constexpr(256):
            wg, w, lane = t // 128, (t % 128) // 32, t % 32
            cs = mma_s.get_slice(t).partition_C(cute.make_identity_tensor((BN, BM)))
            src = r2s.get_slice(t).partition_S(cute.make_identity_tensor((BN, BM)))
            for i in cutlass.range_constexpr(32):
                c, r, v = i % 2, (i // 2) % 2, i // 4
                want = (64 * wg + 16 * w + lane // 4 + 8 * r, 2 * (lane % 4) + c + 8 * v)
                if cutlass.const_expr(tuple(cs[i]) != want):
                    failures.append(f"dp={dp} SS accumulator t={t} i={i}: {tuple(cs[i])} != {want}")
                if cutlass.const_expr(tuple(src[i]) != want):
                    failures.append(f"dp={dp} stmatrix source t={t} i={i}: {tuple(src[i])} != {want}")
            if cutlass.const_expr(t < 128):
                cq = mma_dq.get_slice(t).partition_C(cute.make_identity_tensor((BM, dp // 2)))
                for i in cutlass.range_constexpr(dp // 4):
                    c, r, v = i % 2, (i // 2) % 2, i // 4
                    want = (16 * w + lane // 4 + 8 * r, 2 * (lane % 4) + c + 8 * v)
                    if cutlass.const_expr(tuple(cq[i]) != want):
                        failures.append(f"dp={dp} dQ accumulator t={t} i={i}: {tuple(cq[i])} != {want}")

    for dp, stages in ((128, 2), (64, 3)):
        cute.compile(_check, dp, stages, options="--gpu-arch sm_90a")
    for f in failures[:20]:
        print("FAIL", f)
    print("layouts:", "PASS" if not failures else f"FAIL ({len(failures)} mismatches)")
    return not failures


# ============================================================================================= part 2: model
def bf16(x):
    return x.to(torch.bfloat16).to(torch.float32)


def _maps():
    t = torch.arange(128)[:, None]
    w, lane = t // 32, t % 32
    i = torch.arange(32)[None, :]
    c, r, v = i % 2, (i // 2) % 2, i // 4
    row = (16 * w + lane // 4 + 8 * r).expand(128, 32)
    col = (2 * (lane % 4) + c + 8 * v).expand(128, 32)
    return row, col


ROW, COL = _maps()              # one warpgroup's [128 threads, 32 registers] of a 64 x 64 accumulator
JMAP = torch.tensor([(i % 2) + 2 * (i // 4) for i in range(32)])


def load_tile(t3, head, row0, rows, dp):
    S, D = t3.shape[1], t3.shape[2]
    out = torch.zeros(rows, dp)
    r1 = min(row0 + rows, S)
    if r1 > row0:
        out[: r1 - row0, :D] = t3[head, row0:r1].float()
    return out


def store_tile(t3, head, row0, tile):
    S, D = t3.shape[1], t3.shape[2]
    r1 = min(row0 + tile.shape[0], S)
    if r1 > row0:
        t3[head, row0:r1] = bf16(tile[: r1 - row0, :D])


def prep_kernel(o3, do3, lse, S, seq_pad, dq_acc, dp):
    """Delta, LSE2 and, as the kernel does, the dQ scratch zeroed by rows: warp (bh, row < S_pad) zeroes the DP
    floats at (bh * S_pad + row) * DP (the scratch arrives full of NaN, so a float left out shows)."""
    rows = o3.shape[0]
    last_row = seq_pad - (1 if "prep_zero_skips_pad_rows" in BUGS else 0)
    for bh in range(rows):
        for row in range(last_row):
            base = (bh * seq_pad + row) * dp
            dq_acc[base: base + dp] = 0.0
    delta = torch.full((rows, seq_pad), float("nan"))
    lse2 = torch.full((rows, seq_pad), float("nan"))
    delta[:, :S] = (o3.float() * do3.float()).sum(-1)
    lse2[:, :S] = lse * LOG2E
    delta[:, S:] = 0.0
    lse2[:, S:] = math.inf     # (0 would also be harmless: Q and dO rows past S load as zeros, so dS = 0)
    return delta, lse2


# The side kernels of the expert since 2026-12-01 (v3, the default; `--side v2` models the earlier ones):
# a prep whose lanes < D/8 read 8 bf16 each and whose lanes < DP/4 zero 4 floats each, and a convert in which a
# thread reads the float4s v and v+1 of its t and the 4 lanes of a quad trade bf16 pairs by shuffles so that each
# lane stores 8 bf16 of one row. Transliterated per lane, shuffles included.
SIDE = {"kernels": "v3"}


def prep_kernel_v3(o3, do3, lse, S, seq_pad, dq_acc, dp):
    rows, d = o3.shape[0], o3.shape[2]
    o_flat, do_flat = o3.reshape(-1).float(), do3.reshape(-1).float()
    load_lanes = d // 8 - (1 if "prep_v3_load_lanes_short" in BUGS else 0)
    zero_lanes = dp // 4 - (1 if "prep_v3_zero_lanes_short" in BUGS else 0)
    delta = torch.full((rows, seq_pad), float("nan"))
    lse2 = torch.full((rows, seq_pad), float("nan"))
    bh, row = torch.meshgrid(torch.arange(rows), torch.arange(S), indexing="ij")
    acc = torch.zeros(rows, S)
    for lane in range(load_lanes):                     # lane's 16-byte loads: tile k8 of 8 elements
        k8 = (bh * S + row) * (d // 8) + lane
        at = 8 * k8[..., None] + torch.arange(8)
        acc += (o_flat[at] * do_flat[at]).sum(-1)
    delta[:, :S] = acc
    lse2[:, :S] = lse * LOG2E
    delta[:, S:] = 0.0
    lse2[:, S:] = math.inf
    for lane in range(zero_lanes):                     # lane's 16-byte store of zeros: float4 number below
        f4 = (torch.arange(rows)[:, None] * seq_pad + torch.arange(seq_pad)) * (dp // 4) + lane
        dq_acc[(4 * f4.reshape(-1)[:, None] + torch.arange(4)).reshape(-1)] = 0.0
    return delta, lse2


def convert_kernel_v3(dq_acc, dq3, S, D, dp, scale):
    n_qblk = (S + BM - 1) // BM
    n_pairs = dq_acc.numel() // 8
    pair = torch.arange(n_pairs)                       # = blk * 256 + tidx: the grid is exact
    bhm = pair // (8 * dp)
    rem = pair - bhm * (8 * dp)
    c = rem // (4 * dp)
    r2 = rem - c * (4 * dp)
    v = 2 * (r2 // 128)
    t = r2 - (r2 // 128) * 128
    at = bhm * (16 * dp) + c * (8 * dp) + v * 128 + t
    f4 = dq_acc.view(-1, 4)
    x, y = f4[at] * scale, f4[at + 128] * scale
    mine = [bf16(x[:, 0:2]), bf16(x[:, 2:4]), bf16(y[:, 0:2]), bf16(y[:, 2:4])]   # 4 x [n_pairs, 2]
    q = t % 4
    assert n_pairs % 256 == 0 and torch.equal(q, pair % 4)  # exact grid; quad = 4 consecutive threads
    for k in range(4):                                 # each quad is whole: one (bhm, c, v) and one row of t
        mate = pair - q + k
        assert all(torch.equal(a[mate], a) for a in (bhm, c, v, t // 4))
    out = [m.clone() for m in mine]                    # o0..o3 start as m0..m3
    for j in range(4):
        want = (q - j) & 3
        frm = (q + j) & 3 if "convert_v3_shuffle_src" not in BUGS else (q - j) & 3
        send = torch.stack(mine)[want, torch.arange(n_pairs)]          # each lane's own send this round
        src = pair - q + frm if j > 0 else pair                         # shuffle_sync(send, lane quad + frm)
        got = send[src]
        for k in range(4):
            sel = frm == k
            out[k][sel] = got[sel]
    bh = bhm // n_qblk
    m = bhm - bh * n_qblk
    row = m * BM + 16 * (t // 32) + (t % 32) // 4 + (8 * (q % 2) if "convert_v3_row_no_q" not in BUGS else 0)
    col = c * (dp // 2) + 8 * (v + q // 2)
    vals = torch.cat(out, dim=1)                       # o0, o1, o2, o3: 8 bf16 of one row
    ok = (row < S) & (col < D)
    for e in range(8):
        dq3[bh[ok], row[ok], col[ok] + e] = vals[ok, e]


class Barrier:
    def __init__(self, count):
        self.count, self.arrived, self.generation = count, 0, 0

    def arrive(self):
        self.arrived += 1
        gen = self.generation
        if self.arrived == self.count:
            self.arrived, self.generation = 0, self.generation + 1
        return gen


def fused_cta(n_blk, bkv, q3, k3, v3, do3, lse2_s, delta_s, dq_acc, dk3, dv3, H, HKV, S, dp, causal, scale,
              scale_log2, rng):
    b, kv = bkv // HKV, bkv % HKV
    group = H // HKV
    n0 = n_blk * BN
    n_qblk = (S + BM - 1) // BM
    m_lo = n0 // BM if causal else 0
    if "causal_m_lo_late" in BUGS and causal:
        m_lo += 1
    per_head = n_qblk - m_lo
    steps = group * per_head
    half = 32 * dp
    sK = load_tile(k3, bkv, n0, BN, dp)             # shared K tile (dQ's B; the dK epilogue tile at the end)
    sV = load_tile(v3, bkv, n0, BN, dp)
    sdS = torch.full((2, BN, BM), float("nan"))     # dS^T buffers [key][query]
    stage = torch.full((2, half), float("nan"))     # dQ staging per WG, thread order
    bar1 = Barrier(2)
    pending = {0: [], 1: []}                        # bulk reduces in flight, per issuing WG
    out = {}

    def complete_reduces(cw):
        for fn in pending[cw]:
            fn()
        pending[cw].clear()

    def consumer(cw):
        dk = torch.zeros(64, dp)
        dv = torch.zeros(64, dp)
        key_hi = n0 + 64 * cw + 64
        nbuf = 1 if "single_ds_buffer" in BUGS else 2
        for it in range(steps):
            g = it // per_head
            m = m_lo + (it - g * per_head)
            bh = b * H + kv * group + g
            q0 = m * BM
            buf = it % nbuf
            jcols = q0 + COL[:, [(j % 2) + 4 * (j // 2) for j in range(16)]]    # [128, 16]
            lse2 = lse2_s[bh, jcols]
            dlt = delta_s[bh, jcols]
            if "lse_map_i_div_2" in BUGS:
                lse2 = lse2_s[bh, q0 + COL[:, [j // 2 for j in range(16)]]]
            Q = load_tile(q3, bh, q0, BM, dp)
            dO = load_tile(do3, bh, q0, BM, dp)
            Kc, Vc = sK[64 * cw: 64 * cw + 64], sV[64 * cw: 64 * cw + 64]
            s = (Kc @ Q.T)[ROW, COL]
            dpt = (Vc @ dO.T)[ROW, COL]
            p = torch.exp2(s * scale_log2 - lse2[:, JMAP])
            needs_mask = key_hi > S
            if causal and "causal_straddle_dropped" not in BUGS:
                needs_mask = needs_mask or (q0 < key_hi)
            if needs_mask:
                key = n0 + 64 * cw + ROW if "mask_key_no_wg_offset" not in BUGS else n0 + ROW
                dead = key >= S
                if causal:
                    dead = dead | (key > q0 + COL)
                p = torch.where(dead, torch.zeros_like(p), p)
            ds = p * (dpt - dlt[:, JMAP])
            p_b, ds_b = bf16(p), bf16(ds)
            # stmatrix: this WG's 64 rows of the dS^T buffer (positions = the accumulator map, checked above)
            sdS[buf, 64 * cw + ROW, COL] = ds_b
            # G1: dV += P^T dO, dK += dS^T Q (A = registers)
            Pt = torch.zeros(64, BM)
            dSt = torch.zeros(64, BM)
            Pt[ROW, COL] = p_b
            dSt[ROW, COL] = ds_b
            dv += Pt @ dO
            dk += dSt @ Q
            if "no_bulk_wait_read" not in BUGS:
                complete_reduces(cw)                    # thread 0: cp.async.bulk.wait_group.read 0
            gen = bar1.arrive()
            yield ("bar1", gen)
            # G2 issued; it reads dS^T and K when wait_group retires it
            yield ("run", None)
            hc = dp // 2
            c0 = hc * cw if "dq_half_offset_wrong" not in BUGS else 0
            dq = sdS[buf].T @ sK[:, c0:c0 + hc]         # [64 queries, DP/2]
            # staging, thread order: float v*512 + 4t + j = register 4v + j of thread t
            nreg = dp // 4
            regs = dq[ROW[:, :nreg], COL[:, :nreg]]     # [128, DP/4]
            st = torch.empty(half)
            for v4 in range(dp // 16):
                for j in range(4):
                    st[v4 * 512 + 4 * torch.arange(128) + j] = regs[:, 4 * v4 + j]
            stage[cw] = st
            yield ("run", None)                         # barrier 2 + c: the WG's 128 threads (lockstep here)
            blk = ((bh * n_qblk + m) * 2 + cw) * half
            if "scratch_offset_no_cw" in BUGS:
                blk = (bh * n_qblk + m) * 2 * half

            def reduce(blk=blk, cw=cw):
                dq_acc[blk: blk + half] += stage[cw]    # reads the staging buffer when it runs
            pending[cw].append(reduce)
        complete_reduces(cw)                            # wait_group 0 before the epilogue / exit
        if "no_epilogue_barrier" not in BUGS:
            gen = bar1.arrive()
            yield ("bar1", gen)
        sK[64 * cw: 64 * cw + 64] = bf16(dk * scale)    # stmatrix into the (reused) K and V tiles
        sV[64 * cw: 64 * cw + 64] = bf16(dv)
        gen = bar1.arrive()
        yield ("bar1", gen)
        out[cw] = True

    actors = {0: consumer(0), 1: consumer(1)}
    blocked = {0: None, 1: None}
    while actors:
        for cw in list(pending):
            if pending[cw] and rng.random() < 0.3:      # a bulk reduce may land at any later point
                pending[cw].pop(0)()
        ready = [cw for cw in actors if blocked[cw] is None or bar1.generation > blocked[cw]]
        assert ready, "deadlock"
        cw = rng.choice(ready)
        blocked[cw] = None
        try:
            kind, gen = next(actors[cw])
            if kind == "bar1":
                blocked[cw] = gen
        except StopIteration:
            del actors[cw]
    store_tile(dk3, bkv, n0, sK)                        # TMA stores (warp 4 after the last barrier)
    store_tile(dv3, bkv, n0, sV)


def convert_kernel(dq_acc, dq3, S, D, dp, scale):
    n_qblk = (S + BM - 1) // BM
    n4 = dq_acc.numel() // 4
    idx = torch.arange(n4)
    bhm = idx // (16 * dp)
    rem = idx - bhm * (16 * dp)
    c = rem // (8 * dp)
    r2 = rem - c * (8 * dp)
    v = r2 // 128
    t = r2 - v * 128
    bh = bhm // n_qblk
    m = bhm - bh * n_qblk
    row = m * BM + 16 * (t // 32) + (t % 32) // 4
    col = c * (dp // 2) + 8 * v + 2 * (t % 4)
    if "convert_col_no_half" in BUGS:
        col = 8 * v + 2 * (t % 4)
    x = dq_acc.view(n4, 4) * scale
    for j, (dr, dc) in enumerate(((0, 0), (0, 1), (8, 0), (8, 1))):
        ok = (col < D) & (row + dr < S)
        dq3[bh[ok], (row + dr)[ok], (col + dc)[ok]] = bf16(x[ok, j])


def run(B, H, HKV, S, D, causal, kind="normal", seed=1, sched_seed=0, cta=None):
    """One case end to end: (worst margin against the tolerance, max |error| per output). cta: the model of one
    CTA (default fused_cta; attn_bwd_cutedsl_ring_emulate.py passes its own, with the producer and the ring)."""
    cta = cta or fused_cta
    sys.path.insert(0, ".")
    from tasks._attention import backward_inputs, backward_reference

    shape = dict(B=B, H=H, HKV=HKV, S=S, D=D)
    inp = backward_inputs(shape, seed, "cpu", causal, kind)
    ref = backward_reference(inp["dO"], inp["Q"], inp["K"], inp["V"], shape, causal)
    dp = 64 if D <= 64 else 128
    scale = 1.0 / math.sqrt(D)
    scale_log2 = scale * LOG2E
    n_qblk = (S + BM - 1) // BM
    seq_pad = n_qblk * BM
    q3 = inp["Q"].view(B * H, S, D)
    do3 = inp["dO"].view(B * H, S, D)
    o3 = inp["O"].view(B * H, S, D)
    k3 = inp["K"].view(B * HKV, S, D)
    v3 = inp["V"].view(B * HKV, S, D)
    lse = inp["LSE"].view(B * H, S).float()
    dq_acc = torch.full((B * H * seq_pad * dp,), float("nan"))     # torch.empty: whatever was there
    prep, convert = (prep_kernel_v3, convert_kernel_v3) if SIDE["kernels"] == "v3" else (prep_kernel, convert_kernel)
    delta_s, lse2_s = prep(o3, do3, lse, S, seq_pad, dq_acc, dp)
    nan = float("nan")
    dq3 = torch.full((B * H, S, D), nan)
    dk3 = torch.full((B * HKV, S, D), nan)
    dv3 = torch.full((B * HKV, S, D), nan)
    rng = random.Random(sched_seed)
    ctas = [(n, bkv) for bkv in range(B * HKV) for n in range((S + BN - 1) // BN)]
    rng.shuffle(ctas)                                   # CTAs in any order (the reduce-adds commute)
    for n_blk, bkv in ctas:
        cta(n_blk, bkv, q3, k3, v3, do3, lse2_s, delta_s, dq_acc, dk3, dv3, H, HKV, S, dp, causal, scale,
            scale_log2, rng)
    convert(dq_acc, dq3, S, D, dp, scale)
    tol = 2e-2 if causal else 1e-2
    worst = -math.inf
    errs = {}
    for name, got, want in (("dQ", dq3, ref["dQ"]), ("dK", dk3, ref["dK"]), ("dV", dv3, ref["dV"])):
        want = want.reshape(got.shape).float()
        excess = (got - want).abs() - (tol + tol * want.abs())
        excess = torch.where(torch.isnan(got), torch.full_like(got, math.inf), excess)
        worst = max(worst, excess.max().item())
        errs[name] = (got - want).abs().nan_to_num(math.inf).max().item()
    return worst, errs


CASES = [  # (B, H, HKV, S, D, causal, kind)
    (1, 2, 1, 200, 96, False, "normal"),
    (1, 2, 1, 200, 96, True, "normal"),
    (1, 4, 2, 130, 64, True, "flat"),
    (2, 2, 2, 70, 128, False, "flat"),
    (1, 1, 1, 257, 128, True, "normal"),
    (1, 3, 1, 1, 64, False, "normal"),
    (1, 6, 3, 17, 96, True, "normal"),
    (1, 4, 1, 300, 128, False, "normal"),
    (2, 2, 1, 129, 64, False, "flat"),
    (1, 2, 1, 300, 64, True, "normal"),
]

# bug -> the cases it is checked on (it must FAIL on at least one, over the scheduling seeds)
BUG_CASES = {
    "single_ds_buffer": [(1, 2, 1, 300, 64, False, "normal")],
    "no_bulk_wait_read": [(1, 2, 1, 300, 64, False, "normal")],
    "no_epilogue_barrier": [(1, 2, 1, 200, 96, False, "normal")],
    "scratch_offset_no_cw": [(1, 2, 1, 200, 96, False, "normal")],
    "dq_half_offset_wrong": [(1, 2, 1, 200, 64, False, "normal")],
    "causal_m_lo_late": [(1, 2, 1, 300, 64, True, "normal")],
    "causal_straddle_dropped": [(1, 2, 1, 300, 64, True, "normal")],
    "lse_map_i_div_2": [(1, 2, 1, 200, 96, False, "normal")],
    "mask_key_no_wg_offset": [(1, 2, 1, 300, 64, True, "normal")],
}
SIDE_BUG_CASES = {  # bugs of the side kernels modelled (--side)
    "v2": {"convert_col_no_half": [(1, 2, 1, 200, 128, False, "normal")],
           "prep_zero_skips_pad_rows": [(1, 2, 1, 64, 64, False, "normal")]},
    "v3": {"prep_v3_load_lanes_short": [(1, 2, 1, 200, 96, False, "normal")],
           "prep_v3_zero_lanes_short": [(1, 2, 1, 200, 128, False, "normal")],
           "convert_v3_shuffle_src": [(1, 2, 1, 200, 128, False, "normal")],
           "convert_v3_row_no_q": [(1, 2, 1, 200, 64, False, "normal")]},
}


def main(model_run=None, bug_cases=None, bug_scheds=(0, 1, 2)):
    """The command line of this model and of the models that import it (attn_bwd_cutedsl_ring_emulate.py passes
    its own run and bug table): layouts, then every case; or, with --bugs, every injected bug must fail."""
    model_run = model_run or run
    args = sys.argv[1:]
    if "--side" in args:
        SIDE["kernels"] = args[args.index("--side") + 1]
        assert SIDE["kernels"] in ("v2", "v3"), "--side v2 | v3"
    if bug_cases is None:
        bug_cases = {**BUG_CASES, **SIDE_BUG_CASES[SIDE["kernels"]]}
    ok = True
    if "--no-layouts" not in args and "--bugs" not in args:
        ok &= check_layouts()
    if "--bugs" in args:
        for bug, cases in bug_cases.items():
            BUGS.clear()
            BUGS.add(bug)
            caught = False
            for case in cases:
                for sched in bug_scheds:
                    try:
                        worst, _ = model_run(*case, sched_seed=sched)
                    except AssertionError:
                        worst = math.inf
                    caught |= worst > 0
            ok &= caught
            print(f"{'caught' if caught else 'MISSED':6} {bug}")
        BUGS.clear()
        print("bugs: PASS (every injected bug fails)" if ok else "bugs: FAIL (a bug went unnoticed)")
        return 0 if ok else 1
    for case in CASES:
        B, H, HKV, S, D, causal, kind = case
        for sched in (0, 1):
            worst, errs = model_run(B, H, HKV, S, D, causal, kind, sched_seed=sched)
            status = "ok" if worst <= 0 else "FAIL"
            ok &= worst <= 0
            print(f"{status:4} B={B} H={H} HKV={HKV} S={S} D={D} causal={causal} {kind:6} sched={sched} "
                  f"worst margin {worst:+.4f} " + " ".join(f"max|{k}err| {v:.2e}" for k, v in errs.items()))
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
