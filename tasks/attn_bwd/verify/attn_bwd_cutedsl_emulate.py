"""CPU emulation of tasks/attn_bwd/solutions/cutedsl_hopper.py (the CuTe DSL Hopper attention backward): its
loop bounds, step decomposition, GQA rows, clamped LSE/Delta reads, masks (and when they are applied), bf16
rounding points, D = 96 padding and tail handling, against the float64 backward, at the task's tolerance.

A PASS SHOWS THAT THE KERNEL'S TILE ALGORITHM AND INDEX ARITHMETIC AGREE WITH THE RULES MODELLED HERE, NOT THAT
THE KERNEL RUNS. What is modelled and where it comes from:
  * TMA tile loads of [heads, S, D] per head: rows past S and columns past D read as zeros (TMA zero fill);
    stores clipped at S and D. (CuTe's TMA atoms, as in the forward expert that ran on the H200.)
  * The per-thread register map of a 128 x 64 wgmma accumulator, as printed at trace time from the kernel's
    own TiledMma (mma_s.get_slice(t).partition_C(identity)): register i = c + 2r + 4v of consumer thread t
    (warpgroup wg = t // 128, warp w, lane l) is (row 64 wg + 16 w + l // 4 + 8 r, column 2 (l % 4) + c + 8 v).
    The trace-time check also showed that the register-A fragment of the next RS wgmma has the same map
    (so P^T / dS^T are used in place), which is why the RS matmuls are modelled as whole-tile products.
  * The kernel's per-thread code is transliterated over [256 threads, 32 registers] arrays: the LSE / Delta
    reads at the clamped rows of register j = c + 2 v, P via exp2(S * scale log2e - LSE log2e), the masks
    with the kernel's own `needs_mask` conditions (a mask skipped where it was needed shows as an error),
    dS, bf16 rounding of P and dS before the RS wgmmas, fp32 accumulation, the epilogue scale.
  * Not modelled: shared-memory layouts/swizzle and wgmma descriptors (CuTe builds them; the descriptor
    constants were read from the PTX instead), mbarrier phases and the pipeline rings (CuTe's
    PipelineTmaAsync, used as in the forward and GEMM experts), summation order inside a wgmma.
Outputs start NaN-poisoned, so an output element that no CTA stores shows as a failure.

    python3 tasks/attn_bwd/verify/attn_bwd_cutedsl_emulate.py     # exit status 0 = PASS
"""
import math
import sys

import torch

KV_BN, KV_BM, Q_BM, Q_BN = 128, 64, 128, 64
LOG2E = 1.4426950408889634


def bf16(x):
    return x.to(torch.bfloat16).to(torch.float32)


def thread_map():
    """[256, 32] row and column of each consumer thread's accumulator register in a 128 x 64 tile."""
    t = torch.arange(256)[:, None]
    i = torch.arange(32)[None, :]
    wg, w, lane = t // 128, (t % 128) // 32, t % 32
    c, r, v = i % 2, (i // 2) % 2, i // 4
    row = 64 * wg + 16 * w + lane // 4 + 8 * r
    col = 2 * (lane % 4) + c + 8 * v
    return row.expand(256, 32), col.expand(256, 32)


ROW, COL = thread_map()
assert len(set(zip(ROW.flatten().tolist(), COL.flatten().tolist()))) == 128 * 64   # a bijection


def load_tile(t3, head, row0, rows, dp):
    """TMA box of `rows` x dp from head `head` of a [heads, S, D] tensor: zeros past S and D."""
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


def delta_kernel(O, dO):
    # one warp per row: lane sums columns lane, lane+32, ... (fp32), then a butterfly (order not modelled)
    return (O.float() * dO.float()).sum(-1)


def dkdv_cta(n_blk, bkv, q3, k3, v3, do3, lse, delta, dk3, dv3, H, HKV, S, dp, causal, scale, scale_log2):
    b, kv = bkv // HKV, bkv % HKV
    group = H // HKV
    n0 = n_blk * KV_BN
    n_qblk = (S + KV_BM - 1) // KV_BM
    m_lo = n0 // KV_BM if causal else 0
    per_head = n_qblk - m_lo
    steps = group * per_head
    K = load_tile(k3, bkv, n0, KV_BN, dp)
    V = load_tile(v3, bkv, n0, KV_BN, dp)
    dK = torch.zeros(KV_BN, dp)
    dV = torch.zeros(KV_BN, dp)
    for it in range(steps):
        g = it // per_head
        m = m_lo + (it - g * per_head)
        bh = b * H + kv * group + g
        q0 = m * KV_BM
        # per-thread LSE / Delta of register j = c + 2v, read at the column of register i0 = c + 4v, clamped
        lse2 = torch.empty(256, 16)
        dlt = torch.empty(256, 16)
        for j in range(16):
            i0 = (j % 2) + 4 * (j // 2)
            qrow = torch.clamp(q0 + COL[:, i0], max=S - 1)
            lse2[:, j] = lse[bh, qrow] * LOG2E
            dlt[:, j] = delta[bh, qrow]
        Q = load_tile(q3, bh, q0, KV_BM, dp)
        dO = load_tile(do3, bh, q0, KV_BM, dp)
        St = K @ Q.T                      # [128 keys, 64 queries]
        dPt = V @ dO.T
        s = St[ROW, COL]                  # registers [256, 32]
        dp_r = dPt[ROW, COL]
        jmap = torch.tensor([(i % 2) + 2 * (i // 4) for i in range(32)])
        p = torch.exp2(s * scale_log2 - lse2[:, jmap])
        needs_mask = (n0 + KV_BN > S) or (q0 + KV_BM > S)
        if causal:
            needs_mask = needs_mask or (q0 < n0 + KV_BN)
        if needs_mask:
            key = n0 + ROW
            qrow = q0 + COL
            dead = (key >= S) | (qrow >= S)
            if causal:
                dead = dead | (key > qrow)
            p = torch.where(dead, torch.zeros_like(p), p)
        ds = p * (dp_r - dlt[:, jmap])
        Pt = torch.zeros(KV_BN, KV_BM)
        dSt = torch.zeros(KV_BN, KV_BM)
        Pt[ROW, COL] = bf16(p)
        dSt[ROW, COL] = bf16(ds)
        dV += Pt @ dO                     # RS wgmma: A = P^T registers, B = dO (MN-major view)
        dK += dSt @ Q
    store_tile(dk3, bkv, n0, dK * scale)
    store_tile(dv3, bkv, n0, dV)


def dq_cta(blk_x, n_mblk, bh, q3, k3, v3, do3, lse, delta, dq3, H, HKV, S, dp, causal, scale, scale_log2):
    m_blk = n_mblk - 1 - blk_x if causal else blk_x
    m0 = m_blk * Q_BM
    b, h = bh // H, bh % H
    kv_row = b * HKV + h // (H // HKV)
    kend = min(S, m0 + Q_BM) if causal else S
    n_kblk = (kend + Q_BN - 1) // Q_BN
    Q = load_tile(q3, bh, m0, Q_BM, dp)
    dO = load_tile(do3, bh, m0, Q_BM, dp)
    lse2 = torch.empty(256, 2)
    dlt = torch.empty(256, 2)
    for r in range(2):
        qrow = torch.clamp(m0 + ROW[:, 2 * r], max=S - 1)
        lse2[:, r] = lse[bh, qrow] * LOG2E
        dlt[:, r] = delta[bh, qrow]
    rmap = torch.tensor([(i // 2) % 2 for i in range(32)])
    dQ = torch.zeros(Q_BM, dp)
    for n in range(n_kblk):
        k0 = n * Q_BN
        Kt = load_tile(k3, kv_row, k0, Q_BN, dp)
        Vt = load_tile(v3, kv_row, k0, Q_BN, dp)
        s = (Q @ Kt.T)[ROW, COL]
        dp_r = (dO @ Vt.T)[ROW, COL]
        p = torch.exp2(s * scale_log2 - lse2[:, rmap])
        needs_mask = k0 + Q_BN > S
        if causal:
            needs_mask = needs_mask or (k0 + Q_BN > m0)
        if needs_mask:
            key = k0 + COL
            dead = key >= S
            if causal:
                dead = dead | (key > m0 + ROW)
            p = torch.where(dead, torch.zeros_like(p), p)
        ds = p * (dp_r - dlt[:, rmap])
        dS = torch.zeros(Q_BM, Q_BN)
        dS[ROW, COL] = bf16(ds)
        dQ += dS @ Kt                     # RS wgmma: A = dS registers, B = K (MN-major view)
    store_tile(dq3, bh, m0, dQ * scale)


def run(B, H, HKV, S, D, causal, kind="normal", seed=1):
    sys.path.insert(0, ".")
    from tasks._attention import backward_inputs, backward_reference

    shape = dict(B=B, H=H, HKV=HKV, S=S, D=D)
    inp = backward_inputs(shape, seed, "cpu", causal, kind)
    ref = backward_reference(inp["dO"], inp["Q"], inp["K"], inp["V"], shape, causal)
    dp = 64 if D <= 64 else 128
    scale = 1.0 / math.sqrt(D)
    scale_log2 = scale * LOG2E
    q3 = inp["Q"].view(B * H, S, D)
    do3 = inp["dO"].view(B * H, S, D)
    o3 = inp["O"].view(B * H, S, D)
    k3 = inp["K"].view(B * HKV, S, D)
    v3 = inp["V"].view(B * HKV, S, D)
    lse = inp["LSE"].view(B * H, S).float()
    delta = delta_kernel(o3, do3)
    nan = float("nan")
    dq3 = torch.full((B * H, S, D), nan)
    dk3 = torch.full((B * HKV, S, D), nan)
    dv3 = torch.full((B * HKV, S, D), nan)
    for bkv in range(B * HKV):
        for n_blk in range((S + KV_BN - 1) // KV_BN):
            dkdv_cta(n_blk, bkv, q3, k3, v3, do3, lse, delta, dk3, dv3, H, HKV, S, dp, causal, scale, scale_log2)
    n_mblk = (S + Q_BM - 1) // Q_BM
    for bh in range(B * H):
        for blk_x in range(n_mblk):
            dq_cta(blk_x, n_mblk, bh, q3, k3, v3, do3, lse, delta, dq3, H, HKV, S, dp, causal, scale, scale_log2)
    tol = 2e-2 if causal else 1e-2
    worst = -math.inf
    errs = {}
    for name, got, want in (("dQ", dq3, ref["dQ"]), ("dK", dk3, ref["dK"]), ("dV", dv3, ref["dV"])):
        want = want.reshape(got.shape).float()
        excess = (got - want).abs() - (tol + tol * want.abs())
        excess = torch.where(torch.isnan(got), torch.full_like(got, math.inf), excess)
        worst = max(worst, excess.max().item())
        errs[name] = (got - want).abs().max().item()
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
]


def main():
    ok = True
    for case in CASES:
        B, H, HKV, S, D, causal, kind = case
        worst, errs = run(B, H, HKV, S, D, causal, kind)
        status = "ok" if worst <= 0 else "FAIL"
        ok &= worst <= 0
        print(f"{status:4} B={B} H={H} HKV={HKV} S={S} D={D} causal={causal} {kind:6} worst margin {worst:+.4f} "
              + " ".join(f"max|{k}err| {v:.2e}" for k, v in errs.items()))
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
