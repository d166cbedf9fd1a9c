"""CPU model of the DRAFT tasks/attn_bwd/drafts/cuda_ptx_hopper_v4.cu (ran correct on the H200, not faster than the expert): the fused expert plus the
XL_PINGPONG turn barrier and the XL_CAUSAL_HG block order.

A PASS SHOWS THAT THE DRAFT'S INDEX ARITHMETIC AND BARRIER PROTOCOL AGREE WITH THE RULES MODELLED HERE, NOT
WITH THE HARDWARE. Everything shared with the expert is imported from its model
(tasks/attn_bwd/verify/attn_bwd_cuda_ptx_fused_emulate.py, which imports the layout rules of
tasks/attn_bwd/verify/attn_bwd_cuda_ptx_emulate.py): Cfg, mbarriers (arrival + transaction counts, parity
waits), deferred TMA loads and bulk reduce-adds completed at random later points, lazy wgmma groups
(operands read when wait_group retires the group), st.shared, the dQ wgmma, the convert kernel, the float64
reference, the tolerance and run(), into which this model's CTA is plugged.
New here:
  * named barriers with bar.arrive (counts the arriving warpgroup, does not wait) next to bar.sync, and a
    check that every named barrier ends the CTA with no partial generation;
  * the turn: WG2 bar.sync 4 after issuing its S^T/dP^T, WG1 bar.arrive 4 after committing G1. The barrier
    orders no data, so its correctness is (a) no deadlock and (b) the order it is for: with XL_PINGPONG 1 the
    math phases (from the S^T wait to the G1 commit) of the two warpgroups never overlap and run
    WG1(0), WG2(0), WG1(1), WG2(1), ... Each math phase yields to the scheduler in its middle, so a missing
    or misplaced turn shows as an overlap;
  * cta_coords of XL_CAUSAL_HG (1-D causal grid, nbkv = gridDim.x / nkb): every (key block, kv head) must be
    visited exactly once.
Not modelled: threads inside one warpgroup run in lockstep, proxy fences, the hardware's summation order
inside one wgmma, timing (the turn's performance effect is an estimate in the draft's README section).

    python3 tasks/attn_bwd/drafts/cuda_ptx_hopper_v4_emulate.py           # all cases, exit status 0 = PASS
    python3 tasks/attn_bwd/drafts/cuda_ptx_hopper_v4_emulate.py --bugs    # each injected bug must FAIL or assert
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "verify"))
import attn_bwd_cuda_ptx_emulate as E  # noqa: E402  (layout rules)
import attn_bwd_cuda_ptx_fused_emulate as F  # noqa: E402  (the expert's model: asynchrony rules, run())

BN, BM, LOG2E, SMEM_BASE = F.BN, F.BM, F.LOG2E, F.SMEM_BASE
WARP, G8, QD, T = E.WARP, E.G8, E.QD, E.T
BUGS = set()
OPT = dict(pingpong=1, hg=8)                 # the draft's XL_PINGPONG, XL_CAUSAL_HG
VISITED = []                                 # (kb, bkv) of every CTA of the current run
TURN = 4                                     # named barrier id of the turn


def cta_coords(L, nkb, nbkv, causal):
    """cta_coords<CAUSAL> of the draft; L = blockIdx.y * nkb + blockIdx.x (F.run's loop order)."""
    HG = OPT["hg"]
    if not (causal and HG > 0):
        return L % nkb, L // nkb
    grid_x = nkb * nbkv                       # the 1-D grid of the launch
    nbkv_k = grid_x // nkb                    # the kernel's gridDim.x / nkb
    grp = L // (HG * nkb)
    r = L - grp * (HG * nkb)
    hg = HG if "hg_partial" in BUGS else min(HG, nbkv_k - grp * HG)
    kb = r // hg
    return kb, grp * HG + (r - kb * hg)


def v4_cta(bx, by, maps, LSE, Delta, dq_acc, dK, dV, H, HKV, S, D, DP, causal, scale, scale_log2, rng):
    """One CTA of attn_bwd_fused_kernel<DP, causal> of the draft; F.run calls it for each block."""
    c = F.cfg(DP)                             # v4 keeps the expert's Cfg (ST, 2 dS buffers, offsets)
    ST = c["ST"]
    events = []
    sm = F.Smem(c["SMEM"], events)
    s0 = SMEM_BASE
    lse_s = np.full(ST * BM, np.nan, np.float32)
    delta_s = np.full(ST * BM, np.nan, np.float32)
    kv_full = F.Bar(1, "kv_full")
    full = [F.Bar(32, f"full{s}") for s in range(ST)]
    empty = [F.Bar(8, f"empty{s}") for s in range(ST)]
    nbar = {}                                 # named barriers: id -> [arrived threads, generation]
    bulk = {0: [], 1: []}
    log = []                                  # ("start" | "end", cw, it) of the math phases, in execution order

    nkb = (S + BN - 1) // BN
    B = dq_acc.size // (H * ((S + BM - 1) // BM) * BM * DP)   # F.run does not pass B; its scratch size has it
    nbkv = B * HKV
    kb, bkv = cta_coords(by * nkb + bx, nkb, nbkv, causal)
    assert 0 <= kb < nkb and 0 <= bkv < nbkv, (kb, bkv)
    VISITED.append((kb, bkv))
    n0 = kb * BN
    b, kv = bkv // HKV, bkv % HKV
    G = H // HKV
    nqb = (S + BM - 1) // BM
    m_lo = n0 // BM if causal else 0
    per_head = nqb - m_lo
    steps = G * per_head
    pp = OPT["pingpong"]
    turn_count = 384 if "turn_count384" in BUGS else 256

    def producer():
        kv_full.arrive(1, 2 * c["KEY_BYTES"])
        sm.tile(c["CH"], s0, c["CHUNK_KEY"], maps["k128"], kv_full, n0, bkv)
        sm.tile(c["CH"], s0 + c["OFF_V"], c["CHUNK_KEY"], maps["v128"], kv_full, n0, bkv)
        for it in range(steps):
            s = it % ST
            ph = (it // ST) & 1
            bh = b * H + kv * G + it // per_head
            m = m_lo + it % per_head
            yield ("mbar", empty[s], ph if "parity" in BUGS else ph ^ 1)
            lane = np.arange(32)
            for h2 in range(2):
                r = lane + 32 * h2
                row = m * BM + r
                at = bh * S + np.minimum(row, S - 1)
                lse_s[s * BM + r] = np.where(row < S, (LSE[at] * LOG2E).astype(np.float32), np.inf)
                delta_s[s * BM + r] = np.where(row < S, Delta[at], 0.0)
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
        R = dict(dk=np.zeros((128, DP // 2), np.float32), dv=np.zeros((128, DP // 2), np.float32))
        wg = F.WGMMA()
        i = np.arange(32)[None, :]
        col = 8 * (i // 4) + 2 * QD[:, None] + (i % 2)
        yield ("mbar", kv_full, 0)
        for it in range(steps):
            s = it % ST
            bh = b * H + kv * G + it // per_head
            m = m_lo + it % per_head
            q_tile = s0 + c["OFF_Q"] + s * c["ROW_BYTES"]
            do_tile = s0 + c["OFF_DO"] + s * c["ROW_BYTES"]
            yield ("mbar", full[s], (it // ST) & 1)
            wg.issue(lambda: R.__setitem__("s", E.issue_abt(sm, DP, k_rows, c["CHUNK_KEY"], q_tile, c["CHUNK_ROW"])))
            wg.commit()
            wg.issue(lambda: R.__setitem__("dp", E.issue_abt(sm, DP, v_rows, c["CHUNK_KEY"], do_tile, c["CHUNK_ROW"])))
            wg.commit()
            if pp and cw == 0 and "arrive_before_math" in BUGS:
                yield ("nbar_arrive", TURN, turn_count)
            if pp and cw == 1 and "no_turn_wait" not in BUGS:
                yield ("nbar", TURN, turn_count)                       # turn_wait()
            wg.wait(1)
            yield ("run",)
            log.append(("start", cw, it))
            lse2 = lse_s[s * BM:(s + 1) * BM]
            dlt = delta_s[s * BM:(s + 1) * BM]
            masked = (n0 + cw * 64 + 64 > S) or (causal and m * BM < n0 + cw * 64 + 64)
            p = E.ex2(E.fmaf(R["s"], np.float32(scale_log2), -lse2[col]))
            if masked:
                key = key0[:, None] + 8 * ((i // 2) % 2)
                qrow = m * BM + col
                p = np.where((key >= S) | (causal & (key > qrow)), np.float32(0), p)
            pf = E.pack_a(p)
            yield ("run",)                                             # the middle of the math phase
            wg.wait(0)
            ds = (p * (R["dp"] - dlt[col])).astype(np.float32)
            dsf = E.pack_a(ds)
            buf = 0 if "ds_single_buffer" in BUGS else (it & 1)
            ds_buf = s0 + ds_row + buf * c["DS_BYTES"]
            for n in range(16):
                sm.st_b32(ds_buf + (n % 2) * 8 * 128 + (((n // 2) ^ G8) << 4), dsf[:, n, 0], dsf[:, n, 1])
            pf_, dsf_ = pf.copy(), dsf.copy()
            wg.issue(lambda: R.__setitem__("dv", E.issue_at(sm, DP, R["dv"], pf_, do_tile, c["CHUNK_ROW"])))
            wg.issue(lambda: R.__setitem__("dk", E.issue_at(sm, DP, R["dk"], dsf_, q_tile, c["CHUNK_ROW"])))
            wg.commit()                                                # G1
            log.append(("end", cw, it))
            last_skip = "skip_last_arrive" in BUGS and it == steps - 1
            if pp and cw == 0 and not ({"arrive_before_math", "arrive_after_bar1"} & BUGS) and not last_skip:
                yield ("nbar_arrive", TURN, turn_count)                # turn_arrive()
            if "empty_early" in BUGS:
                empty[s].arrive(4)
            if "no_bulk_wait" not in BUGS:
                yield ("bulk_read0", cw)
            if "no_bar1" not in BUGS:
                yield ("nbar", 1, 256)
            if pp and cw == 0 and "arrive_after_bar1" in BUGS:
                yield ("nbar_arrive", TURN, turn_count)
            ds_addr = s0 + c["OFF_DS"] + buf * c["DS_BYTES"]
            wg.issue(lambda: R.__setitem__("dq", F.issue_dq(sm, DP, None, ds_addr, kb_half)))
            wg.commit()                                                # G2
            wg.wait(1)
            if "empty_early" not in BUGS:
                empty[s].arrive(4)
            yield ("run",)
            wg.wait(0)
            dq = R["dq"]
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
        yield ("bulk_read0", cw)
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

    def count(bid, n):                           # one warpgroup (128 threads) reaches named barrier bid
        st = nbar.setdefault(bid, [0, 0, n])
        assert st[2] == n, f"named barrier {bid} used with counts {st[2]} and {n}"
        st[0] += 128
        gen = st[1]
        if st[0] == n:
            st[0], st[1] = 0, st[1] + 1
        return gen

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
            cond = ("nbar_wait", cond[1], count(cond[1], cond[2]))
        elif cond[0] == "nbar_arrive":
            count(cond[1], cond[2])
            cond = ("run",)
        waiting[ch] = cond
    for bar in [kv_full] + full + empty:
        assert bar.arrived == 0 and bar.tx == 0, f"{bar.name} left mid-phase"
    for bid, st in nbar.items():
        assert st[0] == 0, f"named barrier {bid} left with {st[0]} of {st[2]} threads arrived"
    if pp:                                       # the turn order: WG1(0), WG2(0), WG1(1), ... never overlapping
        want = [(k, cw, it) for it in range(steps) for cw in range(2) for k in ("start", "end")]
        assert log == want, "turn order broken: " + str(next((g, w) for g, w in zip(log, want) if g != w))

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


F.fused_cta = v4_cta          # F.run drives this model's CTAs (same grid size, dQ scratch, convert, reference)


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


CASES = [  # ((B, H, HKV, S, D, causal), options)
    ((1, 2, 1, 200, 96, False), {}),
    ((1, 2, 1, 200, 96, True), {}),
    ((1, 4, 2, 130, 64, True), {}),
    ((2, 2, 2, 70, 128, False), {}),
    ((1, 1, 1, 257, 128, True), {}),
    ((1, 3, 1, 1, 64, False), {}),
    ((1, 6, 3, 17, 96, True), {}),
    ((1, 4, 1, 300, 128, False), {}),
    ((2, 2, 1, 129, 64, False), {}),
    ((1, 2, 2, 300, 64, False), {}),
    ((1, 4, 2, 300, 64, True), {"hg": 3}),           # partial last head group (2 kv heads, groups of 3 / 1)
    ((3, 2, 1, 200, 128, True), {"hg": 2}),          # 3 kv heads in groups of 2 + 1
    ((1, 4, 2, 200, 128, True), {"hg": 0}),          # the expert's causal grid
    ((1, 4, 1, 200, 64, False), {"pingpong": 0}),    # the expert's lock-step loop
    ((1, 2, 1, 257, 128, True), {"pingpong": 0}),
]
BUG_CASES = {  # injected bug -> (case, options) that must expose it (wrong result, assertion or deadlock)
    "turn_count384": ((1, 2, 1, 130, 64, False), {}),
    "arrive_after_bar1": ((1, 2, 1, 130, 64, False), {}),
    "arrive_before_math": ((1, 2, 1, 200, 64, False), {}),
    "no_turn_wait": ((1, 2, 1, 200, 64, False), {}),
    "skip_last_arrive": ((1, 2, 1, 130, 128, False), {}),
    "no_bar1": ((1, 4, 1, 200, 64, False), {}),
    "ds_single_buffer": ((1, 4, 1, 130, 64, False), {}),
    "no_bulk_wait": ((1, 4, 1, 130, 64, False), {}),
    "empty_early": ((1, 4, 1, 200, 128, False), {}),
    "parity": ((1, 2, 1, 200, 64, False), {}),
    "hg_partial": ((3, 2, 1, 200, 64, True), {"hg": 2}),
}


if __name__ == "__main__":
    default = dict(OPT)
    if "--bugs" in sys.argv:
        caught = 0
        for bug, (case, opts) in BUG_CASES.items():
            BUGS.clear()
            BUGS.add(bug)
            OPT.clear()
            OPT.update(default)
            try:
                worst, _ = run_case(case, opts)
                res = f"FAIL (worst margin {worst:+.4f})" if worst > 0 else f"missed (worst margin {worst:+.4f})"
            except AssertionError as e:
                res, worst = f"assert: {str(e)[:90]}", np.inf
            caught += worst > 0
            print(f"bug {bug:20s} case {case} {opts}: {res}", flush=True)
        BUGS.clear()
        print(f"caught {caught} of {len(BUG_CASES)}")
        sys.exit(0 if caught == len(BUG_CASES) else 1)
    worst_all = -np.inf
    for case, opts in CASES:
        OPT.clear()
        OPT.update(default)
        worst, r = run_case(case, opts)
        line = "  ".join(f"{k}: max|err| {e:.2e} margin {m:+.4f}" for k, (e, m) in r.items())
        print(case, opts, line, f"(worst over 3 schedules {worst:+.4f})", flush=True)
        worst_all = max(worst_all, worst)
    ok = worst_all <= 0
    print("PASS" if ok else "FAIL", f"(worst margin over atol + rtol|ref|: {worst_all:+.4f}; negative passes)")
    sys.exit(0 if ok else 1)
