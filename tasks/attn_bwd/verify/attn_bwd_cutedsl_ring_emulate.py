"""CPU model of tasks/attn_bwd/solutions/cutedsl_hopper.py as it is now (its second fused version, "v2": LSE2 /
Delta staged in shared memory by the producer warp). A PASS shows that the kernel's tile algorithm and its
Q/dO/LSE2/Delta ring protocol agree with the rules modelled here, not that the kernel runs (it ran `ok` on the
H200, 2026-11-30). attn_bwd_cutedsl_emulate.py models the first fused version (consumers reading LSE2 / Delta
from global memory) and holds the parts both share.

What is new against tasks/attn_bwd/verify/attn_bwd_cutedsl_emulate.py (which this file imports: prep kernel,
convert kernel, tile loads / stores, accumulator maps, the named-barrier model, the layout checks, the bug set):
  * the producer warp and the Q/dO ring are modelled (the expert's model left them out): `stages` slots, each
    holding the Q and dO tiles (TMA, landing at a random later point) and the 64 LSE2 / Delta values of the
    step's query rows; a full barrier per slot completes when its 32 lane arrivals and the TMA bytes are in,
    an empty barrier per slot when the 8 consumer warps have arrived (4 per warpgroup, lockstep here);
  * the producer's 32 lanes run in a random order, each writing its rows lane and lane + 32 of the slot and then
    arriving; the consumers read LSE2 after the full-barrier wait and Delta after P^T, from the slot;
  * G1 (dV += P^T dO, dK += dS^T Q) reads the slot's Q / dO when its wait_group retires it, just before the
    slot's release: a slot released too early, or data read before it is published, shows as a wrong result.
The two consumer warpgroups and the producer are separate actors run in a random interleaving (several seeds).

    python3 tasks/attn_bwd/verify/attn_bwd_cutedsl_ring_emulate.py            # layouts + all cases; 0 = PASS
    python3 tasks/attn_bwd/verify/attn_bwd_cutedsl_ring_emulate.py --bugs     # every injected bug must FAIL
    python3 tasks/attn_bwd/verify/attn_bwd_cutedsl_ring_emulate.py --no-layouts
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import attn_bwd_cutedsl_emulate as base  # noqa: E402
from attn_bwd_cutedsl_emulate import BM, BN, BUGS, COL, JMAP, ROW, Barrier, bf16, load_tile  # noqa: E402


class FullBarrier:
    """mbarrier of one ring slot: 32 lane arrivals + the TMA bytes complete a phase."""

    def __init__(self, count):
        self.count, self.arrived, self.tx_pending, self.completed = count, 0, False, 0

    def arrive(self):
        self.arrived += 1
        self._maybe_complete()

    def land(self):
        self.tx_pending = False
        self._maybe_complete()

    def _maybe_complete(self):
        if self.arrived == self.count and not self.tx_pending:
            self.arrived, self.completed = 0, self.completed + 1


class EmptyBarrier:
    def __init__(self, count):
        self.count, self.arrived, self.completed = count, 0, 0

    def arrive(self, n):
        self.arrived += n
        assert self.arrived <= self.count, "empty barrier over-arrived"
        if self.arrived == self.count:
            self.arrived, self.completed = 0, self.completed + 1


def fused_cta(n_blk, bkv, q3, k3, v3, do3, lse2_g, delta_g, dq_acc, dk3, dv3, H, HKV, S, dp, causal, scale,
              scale_log2, rng):
    """One CTA, as base.fused_cta is called (base.run drives both models)."""
    stages = 3 if dp == 64 else 2                      # the kernel's _tile_config
    b, kv = bkv // HKV, bkv % HKV
    group = H // HKV
    n0 = n_blk * BN
    n_qblk = (S + BM - 1) // BM
    m_lo = n0 // BM if causal else 0
    per_head = n_qblk - m_lo
    steps = group * per_head
    half = 32 * dp
    nan = float("nan")
    sK = load_tile(k3, bkv, n0, BN, dp)
    sV = load_tile(v3, bkv, n0, BN, dp)
    sQ = torch.full((stages, BM, dp), nan)
    sdO = torch.full((stages, BM, dp), nan)
    sLse = torch.full((stages, BM), nan)
    sDlt = torch.full((stages, BM), nan)
    sdS = torch.full((2, BN, BM), nan)
    stage = torch.full((2, half), nan)
    full = [FullBarrier(32) for _ in range(stages)]
    empty = [EmptyBarrier(4 if "empty_count_one_wg" in BUGS else 8) for _ in range(stages)]
    bar1 = Barrier(2)
    pending = {0: [], 1: []}       # bulk reduces in flight, per issuing WG
    tma_inflight = []              # (slot, bh, q0): the TMA of a slot, lands at a random later point

    def step_coords(it):
        g = it // per_head
        m = m_lo + (it - g * per_head)
        return b * H + kv * group + g, m

    def complete_reduces(cw):
        for fn in pending[cw]:
            fn()
        pending[cw].clear()

    def producer():
        for it in range(steps):
            s, rnd = it % stages, it // stages
            bh, m = step_coords(it)
            yield ("wait", lambda s=s, rnd=rnd: empty[s].completed >= rnd)     # every lane waits
            full[s].tx_pending = True                                          # elected lane: expect_tx
            tma_inflight.append((s, bh, m * BM))                               # the elected TMA copies
            lanes = list(range(32))
            rng.shuffle(lanes)
            for lane in lanes:
                rows = (lane,) if "producer_skips_upper_rows" in BUGS else (lane, lane + 32)
                if "producer_arrive_before_write" in BUGS:
                    full[s].arrive()
                    yield ("run", None)
                for r in rows:
                    sLse[s, r] = lse2_g[bh, m * BM + r]
                    sDlt[s, r] = delta_g[bh, m * BM + r]
                if "producer_arrive_before_write" not in BUGS:
                    full[s].arrive()                                           # release: this lane's writes
                if rng.random() < 0.25:
                    yield ("run", None)
        # producer_tail: every slot's last round released
        for it in range(steps, steps + stages):
            s, rnd = it % stages, it // stages
            yield ("wait", lambda s=s, rnd=rnd: empty[s].completed >= rnd)

    def consumer(cw):
        dk = torch.zeros(64, dp)
        dv = torch.zeros(64, dp)
        key_hi = n0 + 64 * cw + 64
        jq = COL[:, [(j % 2) + 4 * (j // 2) for j in range(16)]]          # [128, 16] query column of j
        for it in range(steps):
            s, rnd = it % stages, it // stages
            bh, m = step_coords(it)
            q0 = m * BM
            buf = it % 2
            if "lse_read_before_full_wait" in BUGS:
                lse2 = sLse[s, jq].clone()
            yield ("wait", lambda s=s, rnd=rnd: full[s].completed >= rnd + 1)  # consumer_wait
            released = False
            if "release_after_s_wait" in BUGS:
                empty[s].arrive(4)
                released = True
                yield ("run", None)
            # S^T / dP^T wgmmas (SS, the slot's Q and dO; both done before anything below is released)
            Kc, Vc = sK[64 * cw: 64 * cw + 64], sV[64 * cw: 64 * cw + 64]
            st = (Kc @ sQ[s].T)[ROW, COL]
            dpt = (Vc @ sdO[s].T)[ROW, COL]
            if "lse_read_before_full_wait" not in BUGS:
                lse2 = sLse[s, jq].clone()                                     # LDS after the wait
            yield ("run", None)
            p = torch.exp2(st * scale_log2 - lse2[:, JMAP])
            needs_mask = key_hi > S
            if causal:
                needs_mask = needs_mask or (q0 < key_hi)
            if needs_mask:
                key = n0 + 64 * cw + ROW
                dead = key >= S
                if causal:
                    dead = dead | (key > q0 + COL)
                p = torch.where(dead, torch.zeros_like(p), p)
            yield ("run", None)
            dlt = sDlt[s, jq].clone()                                          # LDS after P^T
            ds = p * (dpt - dlt[:, JMAP])
            p_b, ds_b = bf16(p), bf16(ds)
            sdS[buf, 64 * cw + ROW, COL] = ds_b
            Pt = torch.zeros(64, BM)
            dSt = torch.zeros(64, BM)
            Pt[ROW, COL] = p_b
            dSt[ROW, COL] = ds_b
            # G1 committed; it reads the slot's Q / dO when wait_group retires it (below)
            if "release_before_g1" in BUGS and not released:
                empty[s].arrive(4)
                released = True
            complete_reduces(cw)                                               # wait_group.read 0
            gen = bar1.arrive()
            yield ("bar", gen)
            yield ("run", None)
            # G2 committed; wait_group(1): G1 done (reads the slot now), then the slot's release
            dv += Pt @ sdO[s]
            dk += dSt @ sQ[s]
            if not released:
                empty[s].arrive(4)                                             # 4 warps of this WG
            yield ("run", None)
            hc = dp // 2
            dq = sdS[buf].T @ sK[:, hc * cw: hc * cw + hc]                    # wait_group(0): G2 done
            nreg = dp // 4
            regs = dq[ROW[:, :nreg], COL[:, :nreg]]
            stg = torch.empty(half)
            for v4 in range(dp // 16):
                for j in range(4):
                    stg[v4 * 512 + 4 * torch.arange(128) + j] = regs[:, 4 * v4 + j]
            stage[cw] = stg
            yield ("run", None)
            blk = ((bh * n_qblk + m) * 2 + cw) * half

            def reduce(blk=blk, cw=cw):
                dq_acc[blk: blk + half] += stage[cw]
            pending[cw].append(reduce)
        complete_reduces(cw)
        gen = bar1.arrive()
        yield ("bar", gen)
        sK[64 * cw: 64 * cw + 64] = bf16(dk * scale)
        sV[64 * cw: 64 * cw + 64] = bf16(dv)
        gen = bar1.arrive()
        yield ("bar", gen)

    actors = {"p": producer(), 0: consumer(0), 1: consumer(1)}
    cond = {name: None for name in actors}
    while actors:
        for cw in (0, 1):
            if pending[cw] and rng.random() < 0.3:
                pending[cw].pop(0)()
        if tma_inflight and rng.random() < 0.5:
            s, bh, q0 = tma_inflight.pop(0)
            sQ[s] = load_tile(q3, bh, q0, BM, dp)
            sdO[s] = load_tile(do3, bh, q0, BM, dp)
            full[s].land()
        ready = [a for a in actors if cond[a] is None or cond[a]()]
        if not ready:
            assert tma_inflight or any(pending.values()), "deadlock"
            continue
        # the producer is favoured, so that it often runs ahead and waits on a slot's release
        a = "p" if "p" in ready and rng.random() < 0.5 else rng.choice(ready)
        cond[a] = None
        try:
            kind, arg = next(actors[a])
            if kind == "bar":
                cond[a] = lambda gen=arg: bar1.generation > gen
            elif kind == "wait":
                cond[a] = arg
        except StopIteration:
            del actors[a]
    assert not tma_inflight, "a TMA load outlived the CTA"
    base.store_tile(dk3, bkv, n0, sK)
    base.store_tile(dv3, bkv, n0, sV)


def run(B, H, HKV, S, D, causal, kind="normal", seed=1, sched_seed=0):
    """base.run (inputs, prep, CTAs in a random order, convert, the error against the reference) with this
    model's CTA: the producer and the ring."""
    return base.run(B, H, HKV, S, D, causal, kind, seed, sched_seed, cta=fused_cta)


# bug -> the cases it is checked on (it must FAIL on at least one, over the scheduling seeds)
BUG_CASES = {
    "producer_arrive_before_write": [(1, 2, 1, 300, 64, False, "normal"), (1, 2, 1, 200, 128, False, "normal")],
    "producer_skips_upper_rows": [(1, 2, 1, 200, 96, False, "normal")],
    "lse_read_before_full_wait": [(1, 2, 1, 300, 64, False, "normal"), (1, 2, 1, 200, 128, False, "normal")],
    "release_after_s_wait": [(1, 2, 1, 300, 64, False, "normal"), (1, 2, 1, 200, 128, False, "normal")],
    "release_before_g1": [(1, 2, 1, 300, 64, False, "normal"), (1, 2, 1, 200, 128, False, "normal")],
    "empty_count_one_wg": [(1, 2, 1, 300, 64, False, "normal"), (1, 2, 1, 200, 128, False, "normal")],
}


def main():
    return base.main(run, BUG_CASES, bug_scheds=(0, 1, 2, 3))


if __name__ == "__main__":
    sys.exit(main())
