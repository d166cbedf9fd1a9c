"""CPU model of tasks/attn_fwd/solutions/cutedsl_blackwell.py (the CuTe DSL Blackwell attention expert).

There is no Blackwell GPU here, so the kernel has never run. This script checks, on a CPU, the two things
the static build cannot: the arithmetic of the tile algorithm and the deadlock / hazard freedom of its
mbarrier protocol. It models the kernel as written (tile sizes, buffer rotation, pipeline stage counts,
mask formula, exact alpha == 1 skip per warp); it does not execute the DSL code, so it cannot catch a
wrong index inside the DSL calls (those were checked by printing the traced layouts, see the notes).

Part A (values): per CTA of 128 query rows, key blocks of 128: S = Q K^T in fp32 from bf16 inputs, the
mask only on the last processed block (col < limit, limit = S - j*BN, causal also <= row - j*BN), online
softmax in the exp2 domain with the running max scaled by scale*log2(e), O rescaled by alpha unless the
whole warp (32 rows) has alpha == 1, P rounded to bf16 (it goes to TMEM as bf16), O accumulated in fp32,
epilogue O / l rounded to bf16, LSE = (m + log2 l) ln 2. Compared with a float64 reference.

Part B (protocol): a randomised discrete-event model of warp 5 (TMA loader), warp 4 (MMA issuer) and the
four softmax warps with the kernel's pipelines (q, k, v PipelineTmaUmma; s PipelineUmmaAsync x2;
p PipelineAsyncUmma x2; o PipelineUmmaAsync x1, including its initial empty commit), mbarrier parities as
in cutlass.pipeline (producer starts at phase 1, consumer at phase 0), TMA completing in any order, the
tcgen05 MMAs executing in issue order, and a commit arriving once every MMA issued before it completed.
It checks: no deadlock, every read sees the version it expects (K_j, V_j, S_j, P_j, O after PV_{j-1}
and the correction), no softmax TMEM access while an MMA that touches the same buffer is executing, and
that every pipeline tail completes.

    python3 tasks/attn_fwd/verify/attn_fwd_cutedsl_blackwell_emulate.py        # about half a minute
"""
from __future__ import annotations

import math
import random
import sys

import numpy as np

BM = BN = 128
LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453


def bf16(x):
    """Round float32 to bfloat16 (nearest even), returned as float32."""
    x = np.ascontiguousarray(x, np.float32)
    u = x.view(np.uint32).astype(np.uint64)
    u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
    return u.astype(np.uint32).view(np.float32)


# ================================================================ Part A: values
def cta(q, k, v, m_blk, S, D, causal):
    """One CTA: query rows m_blk*BM .. +127 of one head. q, k, v already bf16-valued float32 [S, D]."""
    dp = 64 if D <= 64 else 128
    pad = lambda t, rows0, rows: np.pad(t[rows0:rows0 + rows], ((0, max(0, rows0 + rows - S)), (0, dp - D)))
    qt = pad(q, m_blk * BM, BM)                              # TMA zero fill: rows >= S, columns >= D
    scale_log2 = np.float32(LOG2E / math.sqrt(D))
    n_blocks = (S + BN - 1) // BN
    if causal:
        n_blocks = min(n_blocks, m_blk + 1)
    row = np.arange(BM)
    col = np.arange(BN)
    m = np.full(BM, -np.inf, np.float32)
    l = np.zeros(BM, np.float32)
    o = np.full((BM, dp), np.nan, np.float32)                # TMEM starts undefined: PV 0 must overwrite
    for j in range(n_blocks):
        kt, vt = pad(k, j * BN, BN), pad(v, j * BN, BN)
        s = (qt @ kt.T).astype(np.float32)
        if j == n_blocks - 1:
            limit = np.full(BM, S - j * BN)
            if causal:
                limit = np.minimum(limit, m_blk * BM + row - j * BN + 1)
            s = np.where(col[None, :] < limit[:, None], s, -np.inf).astype(np.float32)
        m_new = np.maximum(m, s.max(1) * scale_log2)
        assert np.isfinite(m_new).all(), "a row with no live key"
        alpha = np.exp2(m - m_new).astype(np.float32)
        m = m_new
        p = np.exp2(s * scale_log2 - m[:, None]).astype(np.float32)
        l = l * alpha + p.sum(1, dtype=np.float32)
        if j > 0:
            for w in range(4):                               # correction skipped per warp when alpha == 1
                rows = slice(32 * w, 32 * w + 32)
                if not (alpha[rows] == 1.0).all():
                    o[rows] *= alpha[rows, None]
        pv = bf16(p) @ vt
        o = pv if j == 0 else o + pv
    out = bf16(o / l[:, None])[:, :D]
    lse = (m + np.log2(l)) * LN2
    return out, lse


def attention(q, k, v, S, D, causal):
    out = np.empty((S, D), np.float32)
    lse = np.empty(S, np.float32)
    n_q = (S + BM - 1) // BM
    for m_blk in range(n_q):
        o, ls = cta(q, k, v, m_blk, S, D, causal)
        r = min(BM, S - m_blk * BM)                          # the TMA store and the LSE write stop at S
        out[m_blk * BM:m_blk * BM + r] = o[:r]
        lse[m_blk * BM:m_blk * BM + r] = ls[:r]
    return out, lse


def reference(q, k, v, S, D, causal):
    s = (q.astype(np.float64) @ k.astype(np.float64).T) / math.sqrt(D)
    if causal:
        s = np.where(np.tril(np.ones((S, S), bool)), s, -np.inf)
    mx = s.max(1, keepdims=True)
    e = np.exp(s - mx)
    return (e / e.sum(1, keepdims=True)) @ v.astype(np.float64), (mx[:, 0] + np.log(e.sum(1)))


def part_a():
    rng = np.random.default_rng(7)
    worst = 0.0
    for S, D, causal in [(1, 64, False), (1, 96, True), (37, 96, False), (128, 128, True), (129, 64, True),
                         (300, 128, False), (300, 128, True), (1000, 96, True), (1000, 128, False),
                         (531, 64, False), (777, 64, True)]:
        q, k, v = (bf16(rng.standard_normal((S, D), dtype=np.float32)) for _ in range(3))
        out, lse = attention(q, k, v, S, D, causal)
        ref_o, ref_lse = reference(q, k, v, S, D, causal)
        ok_o = np.all(np.abs(out - ref_o) <= 1e-2 + 1e-2 * np.abs(ref_o))
        ok_l = np.all(np.abs(lse - ref_lse) <= 1e-2 + 1e-2 * np.abs(ref_lse))
        err = float(np.abs(out - ref_o).max())
        worst = max(worst, err)
        print(f"  S={S:5d} D={D:3d} causal={causal!s:5}: max|O-ref| {err:.2e}  "
              f"max|LSE-ref| {float(np.abs(lse - ref_lse).max()):.2e}  {'ok' if ok_o and ok_l else 'FAIL'}")
        if not (ok_o and ok_l):
            return False
    print(f"  all inside atol = rtol = 1e-2 (worst |O - ref| {worst:.2e})")
    return True


# ================================================================ Part B: protocol
class Bar:
    """An mbarrier: `count` arrivals complete a phase; wait(parity) passes once the phase of that parity is done."""

    def __init__(self, name, count):
        self.name, self.count, self.pending, self.phase = name, count, count, 0

    def arrive(self):
        self.pending -= 1
        assert self.pending >= 0, f"{self.name}: too many arrivals"
        if self.pending == 0:
            self.phase += 1
            self.pending = self.count

    def done(self, parity):
        return (self.phase & 1) != parity


class Pipe:
    """full[i] / empty[i] pairs; a state is (index, phase) as in cutlass.pipeline.PipelineState."""

    def __init__(self, name, stages, full_count, empty_count):
        self.stages = stages
        self.full = [Bar(f"{name}.full{i}", full_count) for i in range(stages)]
        self.empty = [Bar(f"{name}.empty{i}", empty_count) for i in range(stages)]

    def state(self, producer):
        return [0, 1 if producer else 0]

    def advance(self, st):
        st[0] += 1
        if st[0] == self.stages:
            st[0], st[1] = 0, st[1] ^ 1


class Model:
    def __init__(self, n_blocks, stages, rng):
        self.n, self.stages, self.rng = n_blocks, stages, rng
        self.q = Pipe("q", 1, 1, 1)
        self.k = Pipe("k", stages, 1, 1)
        self.v = Pipe("v", stages, 1, 1)
        self.s = Pipe("s", 2, 1, 4)          # softmax side: 4 warps (each warp's 32 arrivals counted as one)
        self.p = Pipe("p", 2, 4, 1)
        self.o = Pipe("o", 1, 1, 4)
        self.tma = []                         # in flight: (bar, action)
        self.mma = []                         # issued, not completed, in order: dict
        self.issued = self.completed = 0
        self.commits = []                     # (bar, issued count at commit)
        self.smem_k = [None] * stages
        self.smem_v = [None] * stages
        self.smem_q = None
        self.S = [None, None]                 # (block, set of softmax warps that have read it)
        self.P = [None, None]                 # (block, set of warps that have written their rows) / consumed
        self.O = [None] * 4                   # per softmax warp (its 32 rows): ("pv", j) / ("corrected", j)
        self.executing = None                 # the MMA now executing (head of the queue, started)
        self.freed = False
        self.w_tma = rng.choice((0.02, 0.2, 1.0, 5.0))
        self.w_mma = rng.choice((0.02, 0.2, 1.0, 5.0))

    # ------------------------------------------------------------ asynchronous units
    def issue_tma(self, bar, action):
        self.tma.append((bar, action))

    def issue_mma(self, op):
        self.mma.append(op)
        self.issued += 1

    def commit(self, bar):
        self.commits.append((bar, self.issued))
        self.fire_commits()

    def fire_commits(self):
        keep = []
        for bar, need in self.commits:
            if self.completed >= need:
                bar.arrive()
            else:
                keep.append((bar, need))
        self.commits = keep

    def start_mma(self):
        op = self.mma[0]
        kind, j = op["kind"], op["j"]
        if kind == "qk":
            assert self.smem_q == "Q", "QK before Q landed"
            assert self.smem_k[op["slot"]] == j, f"QK{j}: K slot holds {self.smem_k[op['slot']]}"
            assert self.S[op["buf"]] is None or self.S[op["buf"]] == (j - 2, {0, 1, 2, 3}), \
                f"QK{j} overwrites {self.S[op['buf']]}"
        else:
            assert self.smem_v[op["slot"]] == j, f"PV{j}: V slot holds {self.smem_v[op['slot']]}"
            assert self.P[op["buf"]] == (j, {0, 1, 2, 3}), f"PV{j}: P buffer holds {self.P[op['buf']]}"
            assert j == 0 or all(x == ("corrected", j) for x in self.O), f"PV{j}: O is {self.O}"
        self.executing = op

    def finish_mma(self):
        op = self.mma.pop(0)
        if op["kind"] == "qk":
            self.S[op["buf"]] = (op["j"], set())
        else:
            self.O = [("pv", op["j"])] * 4
            self.P[op["buf"]] = ("consumed", op["j"])
        self.executing = None
        self.completed += 1
        self.fire_commits()

    def tmem_access(self, what, buf=None):
        assert not self.freed, f"softmax touches TMEM ({what}) after it was freed"
        ex = self.executing
        if ex is None:
            return
        if what == "S":
            assert not (ex["kind"] == "qk" and ex["buf"] == buf), "softmax reads S while QK writes it"
        if what == "P":
            assert not (ex["kind"] == "pv" and ex["buf"] == buf), "softmax writes P while PV reads it"
        if what == "O":
            assert ex["kind"] != "pv", "softmax touches O while a PV executes"

    # ------------------------------------------------------------ the kernel's roles (generators yield waits)
    def loader(self):
        q, k, v = self.q, self.k, self.v
        st = q.state(True)
        yield q.empty[st[0]], st[1]
        self.issue_tma(q.full[st[0]], lambda: setattr(self, "smem_q", "Q"))
        ks, vs = k.state(True), v.state(True)
        for j in range(self.n):
            yield k.empty[ks[0]], ks[1]
            self.issue_tma(k.full[ks[0]], lambda i=ks[0], j=j: self.smem_k.__setitem__(i, j))
            k.advance(ks)
            yield v.empty[vs[0]], vs[1]
            self.issue_tma(v.full[vs[0]], lambda i=vs[0], j=j: self.smem_v.__setitem__(i, j))
            v.advance(vs)
        for pipe, st in ((k, ks), (v, vs)):                     # producer_tail
            for _ in range(pipe.stages - 1):
                pipe.advance(st)
            yield pipe.empty[st[0]], st[1]

    def mma_warp(self):
        q, k, v, s, p, o = self.q, self.k, self.v, self.s, self.p, self.o
        qg, kg, vg = q.state(False), k.state(False), v.state(False)
        sp, pg, op = s.state(True), p.state(False), o.state(True)
        yield q.full[qg[0]], qg[1]
        yield o.empty[op[0]], op[1]                             # the initial empty commit
        self.commit(o.full[op[0]])
        o.advance(op)

        def qk(j):
            yield s.empty[sp[0]], sp[1]
            yield k.full[kg[0]], kg[1]
            self.issue_mma({"kind": "qk", "j": j, "slot": kg[0], "buf": sp[0]})
            self.commit(k.empty[kg[0]])
            k.advance(kg)
            self.commit(s.full[sp[0]])
            s.advance(sp)

        for j in range(min(self.n, 2)):
            yield from qk(j)
        for j in range(self.n):
            yield p.full[pg[0]], pg[1]
            yield v.full[vg[0]], vg[1]
            yield o.empty[op[0]], op[1]
            self.issue_mma({"kind": "pv", "j": j, "slot": vg[0], "buf": pg[0]})
            self.commit(v.empty[vg[0]])
            v.advance(vg)
            self.commit(p.empty[pg[0]])
            p.advance(pg)
            self.commit(o.full[op[0]])
            o.advance(op)
            for jj in range(j + 2, min(self.n, j + 3)):
                yield from qk(jj)
        for pipe, st in ((s, sp), (o, op)):                     # producer_tail
            for _ in range(pipe.stages - 1):
                pipe.advance(st)
            yield pipe.empty[st[0]], st[1]

    def softmax_warp(self, w, epi_bar):
        s, p, o = self.s, self.p, self.o
        sg, pp, og = s.state(False), p.state(True), o.state(False)
        for j in range(self.n):
            yield s.full[sg[0]], sg[1]
            self.tmem_access("S", sg[0])
            assert self.S[sg[0]] is not None and self.S[sg[0]][0] == j and w not in self.S[sg[0]][1], \
                f"softmax warp {w} wants S{j}, the buffer holds {self.S[sg[0]]}"
            self.S[sg[0]][1].add(w)
            s.empty[sg[0]].arrive()
            s.advance(sg)
            yield o.full[og[0]], og[1]
            if j > 0:
                self.tmem_access("O")
                assert self.O[w] == ("pv", j - 1), f"correction {j} of warp {w} sees O {self.O[w]}"
                self.O[w] = ("corrected", j)
            o.empty[og[0]].arrive()
            o.advance(og)
            yield p.empty[pp[0]], pp[1]
            self.tmem_access("P", pp[0])
            cur = self.P[pp[0]]
            if cur is None or cur == ("consumed", j - 2):
                cur = self.P[pp[0]] = (j, set())
            assert cur[0] == j and w not in cur[1], f"P{j} store of warp {w} over {cur}"
            cur[1].add(w)
            p.full[pp[0]].arrive()
            p.advance(pp)
        yield o.full[og[0]], og[1]
        assert self.O[w] == ("pv", self.n - 1), f"epilogue of warp {w} sees O {self.O[w]}"
        self.tmem_access("O")
        o.empty[og[0]].arrive()
        epi_bar.arrive()
        yield epi_bar, 0                                        # named barrier of the 4 softmax warps
        if w == 0:
            assert not self.mma and self.executing is None, "TMEM freed with MMAs outstanding"
            self.freed = True
        for _ in range(p.stages - 1):                           # producer_tail
            p.advance(pp)
        yield p.empty[pp[0]], pp[1]

    # ------------------------------------------------------------ scheduler
    def run(self):
        """Step a random runnable agent, TMA completion or MMA start / finish until everything has ended."""
        epi = Bar("epi", 4)
        agents = {"load": self.loader(), "mma": self.mma_warp()}
        for w in range(4):
            agents[f"sm{w}"] = self.softmax_warp(w, epi)
        waiting = {name: None for name in agents}
        alive = set(agents)
        steps = 0
        while alive or self.tma or self.mma:
            steps += 1
            assert steps < 100000, "livelock"
            choices = []
            for name in alive:
                wt = waiting[name]
                if wt is None or wt[0].done(wt[1]):
                    choices.append(("agent", name))
            choices += [("tma", i) for i in range(len(self.tma))]
            if self.mma:
                choices.append(("mma", 0))
            if not choices:
                raise AssertionError("deadlock: " + ", ".join(
                    f"{n} waits {waiting[n][0].name} parity {waiting[n][1]}" for n in sorted(alive)))
            # Each run draws how slow TMA and the tensor core are relative to the warps, so that both
            # "memory far behind" and "MMA far behind" orders get explored.
            weights = [self.w_tma if c[0] == "tma" else self.w_mma if c[0] == "mma" else 1.0 for c in choices]
            kind, arg = self.rng.choices(choices, weights)[0]
            if kind == "tma":
                bar, action = self.tma.pop(arg)
                action()
                bar.arrive()
            elif kind == "mma":
                if self.executing is None:
                    self.start_mma()
                else:
                    self.finish_mma()
            else:
                try:
                    waiting[arg] = next(agents[arg])
                except StopIteration:
                    alive.discard(arg)
                    waiting[arg] = None
        assert self.freed, "TMEM never freed"
        return steps


def part_b(trials=400):
    rng = random.Random(1)
    runs = 0
    for n_blocks in range(1, 7):
        for stages in (2, 3):
            for _ in range(trials // 12 + 1):
                Model(n_blocks, stages, rng).run()
                runs += 1
    print(f"  {runs} randomised schedules (n_blocks 1..6, K/V stages 2 and 3): no deadlock, no hazard, "
          "all versions as expected")
    return True


if __name__ == "__main__":
    print("Part A: tile algorithm vs float64 reference")
    a = part_a()
    print("Part B: mbarrier protocol")
    b = part_b()
    sys.exit(0 if a and b else 1)
