"""CPU model of tasks/attn_bwd/solutions/gluon_hopper.py and gluon_blackwell.py (the Gluon attention backward).

Gluon kernels cannot run here: no GPU, and TRITON_INTERPRET=1 does not cover them (triton 3.6's gluon.jit always
builds a GluonJITFunction, whose launch asks for a driver: '0 active drivers'). So this file re-enacts the two
experts' algorithm in torch, CTA by CTA and step by step, with the solutions' own tile constants (imported from
the files), and compares the result with the task's fp32 reference at the task's tolerance. A PASS SHOWS THAT THE
KERNELS' BLOCK LOOPS, INDEX ARITHMETIC, MASKS, GQA REDUCTION AND SCALING AGREE WITH THE REFERENCE, NOT THAT THE
KERNELS RUN: layouts, mbarrier phases, the TMA ring, wgmma / tcgen05 semantics are not modelled.

What is modelled, as the kernels do it:
* the 2-D [rows, D] views the TMA descriptors read: a tile starting at row r reads rows r .. r + n - 1 of the
  flat tensor, so rows past S are the NEXT head's rows (zeros only past the end of the tensor), and columns past
  D are zeros up to DP (64 or 128);
* Delta = rowsum(dO * O) in fp32 over the flat rows;
* dK/dV pass: grid (cdiv(S, BN), B*HKV), first query block start_n when causal (else 0), steps over the G query
  heads of the group x the query blocks, in the kernels' order; LSE = +inf and Delta = 0 for query rows past S;
  S^T = K Q^T, P^T = exp2(S^T * scale*log2e - LSE*log2e), the causal select j <= i on the steps whose query
  block starts before the key block's end (the diagonal band), P^T and dS^T
  rounded to bf16 before their MMAs, fp32 accumulation, dK scaled once; the masked store (rows < S - start_n,
  columns < D);
* dQ pass: grid (cdiv(S, BM), B*H), causal CTAs in reverse order, key blocks up to min(S, start_m + BM) when
  causal, the mask (keys < S, and j <= i when causal) only on blocks with (j + 1) * BN > mask_from, dS rounded to
  bf16, dQ scaled once, masked store;
* outputs start NaN (the harness poisons them), so an element no CTA writes fails.

    python3 tasks/attn_bwd/verify/attn_bwd_gluon_emulate.py              # exit status 0 = PASS
    python3 tasks/attn_bwd/verify/attn_bwd_gluon_emulate.py --mutations  # each seeded bug must FAIL
"""

import importlib.util
import math
import random
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[3]
SOLUTIONS = (ROOT / "tasks/attn_bwd/solutions/gluon_hopper.py", ROOT / "tasks/attn_bwd/solutions/gluon_blackwell.py")
LOG2E = 1.4426950408889634
# Seeded bugs, each a plausible kernel mistake the checks must catch.
MUTATIONS = {
    "causal_mask_dropped_in_dkdv": "the dK/dV pass never applies j <= i",
    "causal_mask_strict": "both passes keep j < i (the diagonal dropped)",
    "causal_band_too_narrow": "the dK/dV pass masks only the first query block of the diagonal band",
    "gqa_first_head_only": "the dK/dV pass walks only the first query head of the group",
    "gqa_kv_head_modulo": "the dQ pass reads kv head h % HKV instead of h // G",
    "dq_tail_unmasked": "the dQ pass never masks keys past S (the next head's rows leak in)",
    "lse_tail_zero": "query rows past S read LSE 0 (not +inf): the next head's rows add to dK, dV",
    "dk_unscaled": "dK is not multiplied by 1/sqrt(D)",
}


def solution_constants(path):
    """The tile constants of one solution file, imported (the module imports triton's gluon; no GPU needed)."""
    spec = importlib.util.spec_from_file_location(f"attn_bwd_{path.stem}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    consts = {name: getattr(mod, name) for name in ("DKDV_BM", "DKDV_BN", "DQ_BM", "DQ_BN")}
    # The causal dK/dV pass starts at query block start_n // BM: only exact when BN is a multiple of BM.
    assert consts["DKDV_BN"] % consts["DKDV_BM"] == 0, consts
    return consts


def _bf16(x):
    return x.to(torch.bfloat16).to(torch.float32)


def _tile(flat, row0, rows, dp):
    """A TMA box of `rows` x dp at row0 of a flat [rows, D] view: the next rows whatever head they are, zeros
    past the tensor's end and past D."""
    out = torch.zeros(rows, dp)
    end = min(row0 + rows, flat.shape[0])
    if end > row0:
        out[: end - row0, : flat.shape[1]] = flat[row0:end]
    return out


def _row_values(vec, head, offs, S, other):
    """LSE / Delta of head `head` at rows offs (masked loads: `other` at rows >= S)."""
    out = torch.full((len(offs),), other, dtype=torch.float32)
    ok = offs < S
    out[ok] = vec[head * S + offs[ok]]
    return out


def _store(flat_out, tile, row0, n_valid, D):
    n = min(n_valid, tile.shape[0])
    flat_out[row0:row0 + n] = tile[:n, :D].to(flat_out.dtype)


def entry(consts, causal, mutation=None):
    """A callable with the experts' xlang_entry signature that computes what their kernels compute."""
    BM_KV, BN_KV, BM_Q, BN_Q = consts["DKDV_BM"], consts["DKDV_BN"], consts["DQ_BM"], consts["DQ_BN"]

    def run(dO, Q, K, V, O, LSE, dQ, dK, dV, B, H, HKV, S, D):
        DP = 64 if D <= 64 else 128
        scale = 1.0 / math.sqrt(D)
        qk_scale = torch.tensor(scale * LOG2E, dtype=torch.float32)  # passed to the kernels as an fp32 scalar
        group = H // HKV
        qf, kf, vf, dof, of = (t.reshape(-1, D).float() for t in (Q, K, V, dO, O))
        dq_out, dk_out, dv_out = (t.view(-1, D) for t in (dQ, dK, dV))
        lse = LSE.reshape(-1).float()
        delta = (of * dof).sum(1)  # _delta_kernel: fp32 products and sum over the row
        lse_other = 0.0 if mutation == "lse_tail_zero" else float("inf")
        keep_diag = (lambda i, j: i > j) if mutation == "causal_mask_strict" else (lambda i, j: i >= j)

        # _dkdv_kernel: CTA (n_blk, bkv)
        for bkv in range(B * HKV):
            head0 = (bkv // HKV) * H + (bkv % HKV) * group
            for n_blk in range((S + BN_KV - 1) // BN_KV):
                start_n = n_blk * BN_KV
                first_m = start_n if causal else 0
                n_q = (S - first_m + BM_KV - 1) // BM_KV
                heads = 1 if mutation == "gqa_first_head_only" else group
                k = _tile(kf, bkv * S + start_n, BN_KV, DP)
                v = _tile(vf, bkv * S + start_n, BN_KV, DP)
                offs_n = start_n + torch.arange(BN_KV)
                dk = torch.zeros(BN_KV, DP)
                dv = torch.zeros(BN_KV, DP)
                for it in range(heads * n_q):
                    bh = head0 + it // n_q
                    start_m = first_m + (it % n_q) * BM_KV
                    q = _tile(qf, bh * S + start_m, BM_KV, DP)
                    do = _tile(dof, bh * S + start_m, BM_KV, DP)
                    offs_m = start_m + torch.arange(BM_KV)
                    lse2 = _row_values(lse, bh, offs_m, S, lse_other) * LOG2E
                    dlt = _row_values(delta, bh, offs_m, S, 0.0)
                    p_t = torch.exp2(k @ q.T * qk_scale - lse2[None, :])
                    band_end = start_n + (BM_KV if mutation == "causal_band_too_narrow" else BN_KV)
                    if causal and start_m < band_end and mutation != "causal_mask_dropped_in_dkdv":
                        p_t = torch.where(keep_diag(offs_m[None, :], offs_n[:, None]), p_t, 0.0)
                    dv += _bf16(p_t) @ do
                    ds_t = p_t * (v @ do.T - dlt[None, :])
                    dk += _bf16(ds_t) @ q
                dk_scale = 1.0 if mutation == "dk_unscaled" else scale
                _store(dk_out, dk * dk_scale, bkv * S + start_n, S - start_n, D)
                _store(dv_out, dv, bkv * S + start_n, S - start_n, D)

        # _dq_kernel: CTA (pid, bh); causal CTAs take the query blocks last first (the order changes nothing here)
        n_m = (S + BM_Q - 1) // BM_Q
        for bh in range(B * H):
            kv_head = (bh % H) % HKV if mutation == "gqa_kv_head_modulo" else (bh % H) // group
            kv_row = ((bh // H) * HKV + kv_head) * S
            for pid in range(n_m):
                start_m = (n_m - 1 - pid if causal else pid) * BM_Q
                end_n = min(S, start_m + BM_Q) if causal else S
                mask_from = min(S, start_m) if causal else S
                q = _tile(qf, bh * S + start_m, BM_Q, DP)
                do = _tile(dof, bh * S + start_m, BM_Q, DP)
                offs_m = start_m + torch.arange(BM_Q)
                lse2 = _row_values(lse, bh, offs_m, S, lse_other) * LOG2E
                dlt = _row_values(delta, bh, offs_m, S, 0.0)
                dq = torch.zeros(BM_Q, DP)
                for j in range((end_n + BN_Q - 1) // BN_Q):
                    k = _tile(kf, kv_row + j * BN_Q, BN_Q, DP)
                    v = _tile(vf, kv_row + j * BN_Q, BN_Q, DP)
                    p = torch.exp2(q @ k.T * qk_scale - lse2[:, None])
                    if (j + 1) * BN_Q > mask_from:
                        cols = j * BN_Q + torch.arange(BN_Q)
                        keep = (cols[None, :] < S) | (mutation == "dq_tail_unmasked")
                        if causal:
                            keep = keep & keep_diag(offs_m[:, None], cols[None, :])
                        p = torch.where(keep, p, 0.0)
                    ds = p * (do @ v.T - dlt[:, None])
                    dq += _bf16(ds) @ k
                _store(dq_out, dq * scale, bh * S + start_m, S - start_m, D)

    return run


def check_case(task, shape, kind, consts, mutation=None, seed=3):
    """{output: worst excess over atol + rtol |ref|} (<= 0 passes; inf for non-finite) of one emulated call."""
    from xlang.candidate import allocate_outputs, arguments

    inputs = task.make_inputs(shape, seed, "cpu", kind)
    outputs = allocate_outputs(task, shape, "cpu")
    entry(consts, task.name.endswith("_causal"), mutation)(*arguments(task, shape, {**inputs, **outputs}))
    result = {}
    for name, expected in task.reference(inputs, shape).items():
        atol, rtol = task.tolerance_for(name, kind)
        got = outputs[name].float()
        if not torch.isfinite(got).all():
            result[name] = float("inf")
            continue
        result[name] = ((got - expected).abs() - (atol + rtol * expected.abs())).max().item()
    return result


# (task, B, H, HKV, S, D, input kind): tails (S = 1, 37, 130, 257), every head dim, GQA groups 1, 2, 4
FIXED_CASES = [
    ("attn_bwd", 1, 2, 1, 37, 64, "normal"),
    ("attn_bwd", 1, 4, 2, 130, 96, "flat"),
    ("attn_bwd", 2, 2, 2, 1, 128, "normal"),
    ("attn_bwd", 1, 4, 1, 257, 128, "scaled"),
    ("attn_bwd_causal", 1, 4, 1, 130, 128, "normal"),
    ("attn_bwd_causal", 1, 4, 2, 257, 96, "flat"),
    ("attn_bwd_causal", 2, 2, 2, 37, 64, "normal"),
    ("attn_bwd_causal", 1, 2, 2, 1, 64, "scaled"),
]


def drawn_cases(n, seed=35):
    """Small shapes drawn from the contract's space (any S, every D, GQA groups), both tasks, every input kind."""
    from tasks._attention import BACKWARD_INPUT_KINDS, HEAD_DIMS

    rng = random.Random(seed)
    cases = []
    for i in range(n):
        hkv, group = rng.choice((1, 2)), rng.choice((1, 2, 4))
        cases.append(("attn_bwd_causal" if i % 2 else "attn_bwd", rng.randint(1, 2), hkv * group, hkv,
                      rng.randint(1, 300), rng.choice(HEAD_DIMS), rng.choice(BACKWARD_INPUT_KINDS)))
    return cases


def _shape(case):
    return dict(zip(("B", "H", "HKV", "S", "D"), case[1:6]))


def main(argv):
    from xlang.task import get_task

    ok = True
    for path in SOLUTIONS:
        consts = solution_constants(path)
        if "--mutations" in argv:
            for mutation, what in MUTATIONS.items():
                caught = any(max(check_case(get_task(c[0]), _shape(c), c[6], consts, mutation).values()) > 0
                             for c in FIXED_CASES)
                ok &= caught
                print(f"  {'caught' if caught else 'MISSED'} {path.name}: {mutation} ({what})")
            continue
        for case in FIXED_CASES + drawn_cases(8):
            worst = check_case(get_task(case[0]), _shape(case), case[6], consts)
            ok &= max(worst.values()) <= 0
            print(f"  {'PASS' if max(worst.values()) <= 0 else 'FAIL'} {path.name} {case}: "
                  + ", ".join(f"{k} {v:.3g}" for k, v in worst.items()))
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main(sys.argv[1:]))
