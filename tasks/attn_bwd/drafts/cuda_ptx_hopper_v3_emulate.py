"""CPU model of the DRAFT tasks/attn_bwd/drafts/cuda_ptx_hopper_v3.cu (ran correct on the H200, not faster than the expert), for checking its
index arithmetic and its new barrier protocol without a GPU.

A PASS SHOWS THAT THE DRAFT'S INDEX ARITHMETIC AND BARRIER PROTOCOL AGREE WITH THE RULES MODELLED HERE, NOT
WITH THE HARDWARE. Everything shared with the expert is imported, not repeated:
  * layout rules (TMA boxes, 128B swizzle, wgmma descriptors, fragment maps, ex2/fmaf, the Delta kernel) from
    tasks/attn_bwd/verify/attn_bwd_cuda_ptx_emulate.py;
  * the asynchrony rules of the fused expert's model (tasks/attn_bwd/verify/attn_bwd_cuda_ptx_fused_emulate.py):
    mbarriers with arrival + transaction counts and parity waits, deferred TMA loads and bulk reduce-adds
    completed at random later points, lazy wgmma groups (operands read when wait_group retires the group),
    st.shared / st.shared.v4, the dQ-by-(128 keys) wgmma, the convert kernel, the float64 reference and the
    tolerance (its run(), into which this model's CTA is plugged).
New here (the v3 changes): three dS buffers with per-WG dsready[c][b] (count 4) and dsfree[b] (count 8)
mbarriers, dQ of step j issued in step j+1 (and after the loop for the last step), the WG turn waits
(XL_PINGPONG), two WG-local named barriers around the dQ staging, the non-causal query-block rotation
(XL_DQ_ROTATE), the causal longest-first head-group block order (XL_CAUSAL_HG; every block's coordinates are
recorded and the grid must cover each (key block, kv head) exactly once), ST = 4 at D = 64.
The producer warp and the two consumer warpgroups are separate actors in a random interleaving (several seeds).
Not modelled: threads inside one warpgroup run in lockstep (so the __syncwarp + lane-0 arrivals and the WG
barriers are trivially satisfied here), proxy fences, the hardware's summation order inside one wgmma.

    python3 tasks/attn_bwd/drafts/cuda_ptx_hopper_v3_emulate.py           # all cases, exit status 0 = PASS
    python3 tasks/attn_bwd/drafts/cuda_ptx_hopper_v3_emulate.py --bugs    # each injected bug must FAIL or assert
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "verify"))
import attn_bwd_cuda_ptx_emulate as E  # noqa: E402  (layout rules)
import attn_bwd_cuda_ptx_fused_emulate as F  # noqa: E402  (asynchrony rules, reference, run())

BN, BM, LOG2E, SMEM_BASE = F.BN, F.BM, F.LOG2E, F.SMEM_BASE
WARP, G8, QD, T = E.WARP, E.G8, E.QD, E.T
BUGS = set()
OPT = dict(pingpong=1, rotate=1, hg=8)      # the draft's XL_PINGPONG, XL_DQ_ROTATE, XL_CAUSAL_HG
VISITED = []                                 # (kb, bkv) of every CTA of the current run


def cfg(DP):
    """Cfg<DP> of the draft."""
    c = dict(CH=DP // 64, ST=2 if DP == 128 else 4, NB=2 if "nb2" in BUGS else 3, CHUNK_KEY=BN * 128,
             CHUNK_ROW=BM * 128)
    c["KEY_BYTES"], c["ROW_BYTES"] = c["CH"] * c["CHUNK_KEY"], c["CH"] * c["CHUNK_ROW"]
    c["DS_BYTES"], c["DQ_HALF"] = BN * BM * 2, 128 * (DP // 4) * 4
    c["OFF_V"] = c["KEY_BYTES"]
    c["OFF_Q"] = 2 * c["KEY_BYTES"]
    c["OFF_DO"] = c["OFF_Q"] + c["ST"] * c["ROW_BYTES"]
    c["OFF_DS"] = c["OFF_DO"] + c["ST"] * c["ROW_BYTES"]
    c["OFF_DQ"] = c["OFF_DS"] + c["NB"] * c["DS_BYTES"]
    c["OFF_LSE"] = c["OFF_DQ"] + 2 * c["DQ_HALF"]
    c["OFF_DELTA"] = c["OFF_LSE"] + c["ST"] * BM * 4
    c["OFF_BAR"] = c["OFF_DELTA"] + c["ST"] * BM * 4
    c["SMEM"] = c["OFF_BAR"] + (1 + 2 * c["ST"] + 3 * c["NB"]) * 8 + 1024
    assert c["SMEM"] <= 232448, c["SMEM"]
    for k in ("OFF_V", "OFF_Q", "OFF_DO", "OFF_DS"):
        assert c[k] % 1024 == 0, k
    assert c["OFF_DQ"] % 16 == 0 and c["DQ_HALF"] % 16 == 0 and c["OFF_BAR"] % 8 == 0
    return c


def cta_coords(L, gx, causal, nkb, nbkv):
    """cta_coords<CAUSAL>: non-causal grid (nkb, nbkv) (L = by * nkb + bx); causal 1-D, head groups."""
    if not causal:
        return L % gx, L // gx
    HG = OPT["hg"]
    grp = L // (HG * nkb)
    r = L - grp * HG * nkb
    hg = HG if "hg_partial" in BUGS else min(HG, nbkv - grp * HG)
    kb = r // hg
    return kb, grp * HG + (r - kb * hg)


def v3_cta(bx, by, maps, LSE, Delta, dq_acc, dK, dV, H, HKV, S, D, DP, causal, scale, scale_log2, rng):
    """One CTA of attn_bwd_fused_kernel<DP, causal> of the draft; F.run calls it for each block id."""
    c = cfg(DP)
    ST, NB = c["ST"], c["NB"]
    events = []
    sm = F.Smem(c["SMEM"], events)
    s0 = SMEM_BASE
    lse_s = np.full(ST * BM, np.nan, np.float32)
    delta_s = np.full(ST * BM, np.nan, np.float32)
    Bar = F.Bar
    kv_full = Bar(1, "kv_full")
    full = [Bar(32, f"full{s}") for s in range(ST)]
    empty = [Bar(8, f"empty{s}") for s in range(ST)]
    dsready = [[Bar(4, f"dsready{cw}.{i}") for i in range(NB)] for cw in range(2)]
    dsfree = [Bar(8, f"dsfree{i}") for i in range(NB)]
    nbar = {}
    bulk = {0: [], 1: []}

    nkb = (S + BN - 1) // BN
    nbkv = dq_acc.size // (H // HKV) // ((S + BM - 1) // BM * BM * DP)   # B * HKV
    kb, bkv = cta_coords(by * nkb + bx, nkb, causal, nkb, nbkv)        # F.run's loop is L = by * nkb + bx
    assert 0 <= kb < nkb and 0 <= bkv < nbkv, (kb, bkv)
    VISITED.append((kb, bkv))
    n0 = kb * BN
    b, kv = bkv // HKV, bkv % HKV
    G = H // HKV
    nqb = (S + BM - 1) // BM
    m_lo = n0 // BM if causal else 0
    per_head = nqb - m_lo
    rot = (2 * kb) % per_head if (not causal and OPT["rotate"]) else 0
    steps = G * per_head

    def at(it):                                                # StepMap::at
        h = it // per_head
        j = it - h * per_head + rot
        if "rot_clamp" in BUGS:
            j = min(j, per_head - 1)
        elif j >= per_head:
            j -= per_head
        return b * H + kv * G + h, m_lo + j

    def producer():
        kv_full.arrive(1, 2 * c["KEY_BYTES"])
        sm.tile(c["CH"], s0, c["CHUNK_KEY"], maps["k128"], kv_full, n0, bkv)
        sm.tile(c["CH"], s0 + c["OFF_V"], c["CHUNK_KEY"], maps["v128"], kv_full, n0, bkv)
        for it in range(steps):
            s = it % ST
            bh, m = at(it)
            yield ("mbar", empty[s], ((it // ST) & 1) ^ 1)
            lane = np.arange(32)
            for h2 in range(2):
                r = lane + 32 * h2
                row = m * BM + r
                idx = bh * S + np.minimum(row, S - 1)
                lse_s[s * BM + r] = np.where(row < S, (LSE[idx] * LOG2E).astype(np.float32), np.inf)
                delta_s[s * BM + r] = np.where(row < S, Delta[idx], 0.0)
            full[s].arrive(1, 2 * c["ROW_BYTES"])
            sm.tile(c["CH"], s0 + c["OFF_Q"] + s * c["ROW_BYTES"], c["CHUNK_ROW"], maps["q64"], full[s], m * BM, bh)
            sm.tile(c["CH"], s0 + c["OFF_DO"] + s * c["ROW_BYTES"], c["CHUNK_ROW"], maps["do64"], full[s], m * BM, bh)
            full[s].arrive(31)
            yield ("run",)

    def consumer(cw, out):
        key0 = n0 + cw * 64 + WARP * 16 + G8
        k_rows = s0 + cw * 64 * 128
        v_rows = s0 + c["OFF_V"] + cw * 64 * 128
        kb_half = s0 + (cw * c["CHUNK_KEY"] if DP == 128 else cw * 64)
        ds_row = c["OFF_DS"] + (cw * 64 + WARP * 16 + G8) * 128 + 4 * QD
        dq_stage = s0 + c["OFF_DQ"] + cw * c["DQ_HALF"]
        my_ready, other_ready = dsready[cw], dsready[1 - cw]
        R = dict(dk=np.zeros((128, DP // 2), np.float32), dv=np.zeros((128, DP // 2), np.float32))
        wg = F.WGMMA()
        i = np.arange(32)[None, :]
        col = 8 * (i // 4) + 2 * QD[:, None] + (i % 2)

        def dq_out(dq, bh, m):                                  # the dq_out lambda
            if "no_stage_wait" not in BUGS:
                yield ("bulk_read0", cw)                        # thread 0, then named barrier 2 + cw
            yield ("nbar", 2 + cw, 128)
            for v in range(DP // 16):
                sm.st_v4(dq_stage + (v * 128 + T) * 16, dq[:, 4 * v:4 * v + 4])
            yield ("nbar", 2 + cw, 128)
            g0 = ((bh * nqb + m) * 2 + cw) * (32 * DP)

            def reduce(g0=g0):
                n = c["DQ_HALF"] // 4
                vals = np.array([sm.f32[dq_stage + 4 * e] for e in range(n)], np.float32)
                dq_acc[g0:g0 + n] = (dq_acc[g0:g0 + n] + vals).astype(np.float32)
            bulk[cw].append(reduce)
            events.append(("bulk", cw, reduce))

        def issue_dq(j):                                        # dQ(j): wait both halves of dS(j), issue G2
            br, pr = j % NB, (j // NB) & 1
            if "dq_no_ready" not in BUGS:
                yield ("mbar", other_ready[br], pr)
            yield ("mbar", my_ready[br], pr)
            addr = s0 + c["OFF_DS"] + br * c["DS_BYTES"]
            wg.issue(lambda: R.__setitem__("dq", F.issue_dq(sm, DP, None, addr, kb_half)))
            wg.commit()

        yield ("mbar", kv_full, 0)
        prev = None
        for it in range(steps):
            s = it % ST
            bh, m = at(it)
            q_tile = s0 + c["OFF_Q"] + s * c["ROW_BYTES"]
            do_tile = s0 + c["OFF_DO"] + s * c["ROW_BYTES"]
            yield ("mbar", full[s], (it // ST) & 1)
            wg.issue(lambda: R.__setitem__("s", E.issue_abt(sm, DP, k_rows, c["CHUNK_KEY"], q_tile, c["CHUNK_ROW"])))
            wg.commit()
            wg.issue(lambda: R.__setitem__("dp", E.issue_abt(sm, DP, v_rows, c["CHUNK_KEY"], do_tile, c["CHUNK_ROW"])))
            wg.commit()
            if OPT["pingpong"]:
                tp = 1 if "turn_parity" in BUGS else 0
                if cw == 1:
                    yield ("mbar", other_ready[it % NB], ((it // NB) & 1) ^ tp)
                elif it > 0:
                    yield ("mbar", other_ready[(it - 1) % NB], (((it - 1) // NB) & 1) ^ tp)
            wg.wait(1)
            yield ("run",)
            lse2 = lse_s[s * BM:(s + 1) * BM]
            dlt = delta_s[s * BM:(s + 1) * BM]
            masked = (n0 + cw * 64 + 64 > S) or (causal and m * BM < n0 + cw * 64 + 64)
            p = E.ex2(E.fmaf(R["s"], np.float32(scale_log2), -lse2[col]))
            if masked:
                key = key0[:, None] + 8 * ((i // 2) % 2)
                p = np.where((key >= S) | (causal & (key > m * BM + col)), np.float32(0), p)
            pf = E.pack_a(p)
            wg.wait(0)
            dsf = E.pack_a((p * (R["dp"] - dlt[col])).astype(np.float32))
            bw = it % NB
            if "no_dsfree_wait" not in BUGS:
                yield ("mbar", dsfree[bw], ((it // NB) & 1) ^ (0 if "dsfree_parity" in BUGS else 1))
            ds_buf = s0 + ds_row + bw * c["DS_BYTES"]
            for n in range(16):
                sm.st_b32(ds_buf + (n % 2) * 8 * 128 + (((n // 2) ^ G8) << 4), dsf[:, n, 0], dsf[:, n, 1])
            my_ready[bw].arrive(4)                              # lane 0 of the 4 warps, after __syncwarp
            yield ("run",)
            pf_, dsf_ = pf.copy(), dsf.copy()
            wg.issue(lambda: R.__setitem__("dv", E.issue_at(sm, DP, R["dv"], pf_, do_tile, c["CHUNK_ROW"])))
            wg.issue(lambda: R.__setitem__("dk", E.issue_at(sm, DP, R["dk"], dsf_, q_tile, c["CHUNK_ROW"])))
            wg.commit()                                         # G1
            if "empty_early" in BUGS:
                empty[s].arrive(4)
            if it > 0:
                yield from issue_dq(it - 1)                     # G2
                wg.wait(1)
                if "empty_early" not in BUGS:
                    empty[s].arrive(4)
                yield ("run",)
                wg.wait(0)
                dsfree[(it - 1) % NB].arrive(4)
                yield ("run",)
                yield from dq_out(R["dq"], *(at(it) if "prev_coords" in BUGS else prev))
            else:
                wg.wait(0)
                if "empty_early" not in BUGS:
                    empty[s].arrive(4)
            prev = (bh, m)
        if "tail_missing" not in BUGS:
            yield from issue_dq(steps - 1)
            wg.wait(0)
            yield from dq_out(R["dq"], *prev)
        yield ("bulk_read0", cw)                                # bulk_wait0
        out.update(R)

    outs = [{}, {}]
    actors = {"P": producer(), "C0": consumer(0, outs[0]), "C1": consumer(1, outs[1])}
    waiting = {k: ("run",) for k in actors}

    def ready(cond):
        if cond[0] == "run":
            return True
        if cond[0] == "mbar":
            return cond[1].passed(cond[2])
        if cond[0] == "bulk_read0":
            return not bulk[cond[1]]
        if cond[0] == "nbar_wait":
            return nbar[cond[1]][1] > cond[2]
        raise AssertionError(cond)

    while actors or events:
        choices = [k for k in actors if ready(waiting[k])] + [("ev", j) for j in range(len(events))]
        assert choices, f"deadlock: {waiting}"
        ch = choices[rng.randrange(len(choices))]
        if isinstance(ch, tuple):
            ev = events.pop(ch[1])
            if isinstance(ev, tuple):
                ev[2]()
                bulk[ev[1]].remove(ev[2])
            else:
                ev()
            continue
        try:
            cond = next(actors[ch])
        except StopIteration:
            del actors[ch]
            del waiting[ch]
            continue
        if cond[0] == "nbar":
            st = nbar.setdefault(cond[1], [0, 0])
            st[0] += 128
            gen = st[1]
            if st[0] == cond[2]:
                st[0], st[1] = 0, st[1] + 1
            cond = ("nbar_wait", cond[1], gen)
        waiting[ch] = cond
    for bar in [kv_full] + full + empty:
        assert bar.arrived == 0 and bar.tx == 0, f"{bar.name} left mid-phase"
    for bar in dsready[0] + dsready[1] + dsfree:            # dsfree of the last dS is never arrived on
        assert bar.tx == 0 and bar.arrived in (0, 4), f"{bar.name} left mid-phase"

    base = bkv * S
    for cw in range(2):
        key0 = n0 + cw * 64 + WARP * 16 + G8
        for half in range(2):
            key = key0 + 8 * half
            for n in range(DP // 8):
                cc = 8 * n + 2 * QD
                ii = 4 * n + 2 * half
                ok = (key < S) & (cc < D)
                idx = ((base + key) * D + cc)[ok]
                for e in range(2):
                    dK[idx + e] = F.bf16(outs[cw]["dk"][ok, ii + e] * np.float32(scale))
                    dV[idx + e] = F.bf16(outs[cw]["dv"][ok, ii + e])


F.fused_cta = v3_cta          # F.run drives this model's CTAs (same grid size, dq scratch, convert, reference)


def run_case(case, opts, seeds=(0, 1, 2)):
    OPT.update(opts)
    worst, last = -np.inf, None
    B, H, HKV, S, D, causal = case
    for seed in seeds:
        VISITED.clear()
        r = F.run(*case, seed=seed)
        nkb = (S + BN - 1) // BN
        assert sorted(VISITED) == sorted((k, h) for k in range(nkb) for h in range(B * HKV)), "grid not a bijection"
        worst = max(worst, *(m if m == m else np.inf for _, m in r.values()))
        last = r
    return worst, last


P0, R0 = dict(pingpong=0, rotate=1, hg=8), dict(pingpong=1, rotate=0, hg=8)
CASES = [  # ((B, H, HKV, S, D, causal), options); default options: pingpong 1, rotate 1, hg 8
    ((1, 2, 1, 200, 96, False), {}),
    ((1, 2, 1, 200, 96, False), P0),
    ((1, 2, 1, 200, 96, True), {}),
    ((1, 4, 2, 130, 64, True), {}),
    ((2, 2, 2, 70, 128, False), {}),
    ((1, 1, 1, 257, 128, True), {}),
    ((1, 1, 1, 257, 128, True), P0),
    ((1, 3, 1, 1, 64, False), {}),
    ((1, 6, 3, 17, 96, True), dict(hg=2)),
    ((1, 4, 1, 300, 128, False), {}),
    ((1, 4, 1, 300, 128, False), R0),
    ((2, 2, 1, 129, 64, False), {}),
    ((1, 2, 2, 300, 64, False), P0),
    ((3, 2, 1, 260, 64, True), dict(hg=2)),          # 3 kv heads in groups of 2: a partial last group
    ((2, 6, 3, 190, 64, True), dict(hg=4, pingpong=0)),
    ((1, 3, 1, 450, 64, False), {}),                  # G = 3, 8 query blocks, 4 key blocks: rotation wraps
]
BUG_CASES = {  # injected bug -> (case, options) that must expose it
    "no_dsfree_wait": ((1, 4, 1, 200, 64, False), P0),
    "dsfree_parity": ((1, 2, 1, 130, 64, False), {}),
    "dq_no_ready": ((1, 4, 1, 200, 64, False), P0),
    "turn_parity": ((1, 2, 1, 200, 64, False), {}),
    "no_stage_wait": ((1, 4, 1, 130, 64, False), {}),
    "empty_early": ((1, 4, 1, 200, 128, False), {}),
    "prev_coords": ((1, 2, 1, 130, 64, False), {}),
    "tail_missing": ((1, 2, 1, 130, 96, False), {}),
    "rot_clamp": ((1, 2, 1, 300, 64, False), {}),
    "hg_partial": ((3, 2, 1, 260, 64, True), dict(hg=2)),
}


if __name__ == "__main__":
    if "--bugs" in sys.argv:
        caught = 0
        for bug, (case, opts) in BUG_CASES.items():
            BUGS.clear()
            BUGS.add(bug)
            try:
                worst, _ = run_case(case, {**dict(pingpong=1, rotate=1, hg=8), **opts})
                res = f"FAIL (worst margin {worst:+.4f})" if worst > 0 else f"missed (worst margin {worst:+.4f})"
            except AssertionError as e:
                res, worst = f"assert: {str(e)[:90]}", np.inf
            caught += worst > 0
            print(f"bug {bug:16s} {case} {opts}: {res}", flush=True)
        BUGS.clear()
        print(f"caught {caught} of {len(BUG_CASES)}")
        sys.exit(0 if caught == len(BUG_CASES) else 1)
    worst_all = -np.inf
    for case, opts in CASES:
        full_opts = {**dict(pingpong=1, rotate=1, hg=8), **opts}
        worst, r = run_case(case, full_opts)
        line = "  ".join(f"{k}: {e:.1e} {m:+.4f}" for k, (e, m) in r.items())
        print(case, {k: v for k, v in full_opts.items()}, line, f"(worst of 3 schedules {worst:+.4f})", flush=True)
        worst_all = max(worst_all, worst)
    ok = worst_all <= 0
    print("PASS" if ok else "FAIL", f"(worst margin over atol + rtol|ref|: {worst_all:+.4f}; negative passes)")
    sys.exit(0 if ok else 1)
