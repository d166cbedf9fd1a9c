"""Checks without a GPU for tasks/attn_prefill_ragged/solutions/cutedsl_hopper.py (CuTe DSL ragged causal prefill,
sm_90a; issue 33): trace-time checks of the register layouts its softmax and P V rely on, then a CPU model of its
cu_seqlens walk, TMA boxes over the packed tensors, key-block loop, masks and predicated stores, against the task's
reference at the task's tolerance.

A PASS SHOWS THAT THE KERNEL'S TILE WALK, MASKING AND INDEXING AGREE WITH THE RULES MODELLED HERE, NOT THAT THE
KERNEL RUNS: it has never run on a GPU.

Part 1, layouts (trace time, nvidia-cutlass-dsl; the expert's own _make_mmas for D 128 and D 256):
  * S and O accumulator register i of consumer thread t (warpgroup t // 128, warp w, lane l) lies on tile row
    64 (t // 128) + 16 w + l // 4 + 8 ((i // 2) % 2), column 8 (i // 4) + 2 (l % 4) + i % 2: the kernel's row
    reductions (registers with (i // 2) % 2 == r, then the 4 lanes of a quad) and its O rescale read this rule;
  * the register A operand of O += P V holds, for k-block kb, the S registers 8 kb .. 8 kb + 7 (the kernel re-views
    P as ((2, 2, 2), 1, bn / 16) with no data movement).
Part 2, CPU model (torch, fp32 and bf16 where the kernel rounds), one CTA at a time, tile-wide (not per thread):
  * the walk over cu_seqlens by the expert's own _tiles / _tile_in_sequence, kv head by its _kv_head;
  * TMA boxes of rows seq_start + tile * 128 (Q) and seq_start + j * bn (K, V) of the packed [T, heads, D]
    tensors, holding the next sequence's rows where they run past the end, zero past T;
  * key blocks 0 .. _key_blocks - 1, masked (_key_dead) where _needs_mask says; online softmax in the exp2 domain
    with the row sum taken from fp32 P and P V from bf16 P; O / l in bf16, stored where _row_stored, counting
    writes (each element of out must be written exactly once).
Not modelled: the TMA / mbarrier pipeline, the producer, summation order inside a wgmma, timing.

    python3 tasks/attn_prefill_ragged/verify/prefill_cutedsl_emulate.py    # layouts + cases + bugs; 0 = PASS
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[3]
EXPERT = ROOT / "tasks/attn_prefill_ragged/solutions/cutedsl_hopper.py"
CONSUMER_THREADS = 256
# Injected bugs of the model (each must make it fail on inputs the task draws):
BUGS = (
    "one_sequence",           # the batch taken as one causal sequence of T rows (attention across sequences)
    "no_sequence_offset",     # tiles read from row tile * 128 of the packed tensors, not from the sequence's start
    "store_all_rows",         # a tile's rows past its sequence's end stored too (into the next sequence's rows)
    "kv_head_modulo",         # kv head h % HKV instead of h // (H / HKV)
)


def load_expert(path=EXPERT, name="cutedsl_prefill_expert"):
    # the expert imports CuTe DSL at its top: part 2 needs the package too (the rules are read from the expert)
    from xlang.candidate import load_module

    return load_module(path, name)


# ============================================================================================= part 1: layouts
def fragment_rule(t, i):
    """(row, column) in the 128-row tile of accumulator register i of consumer thread t (the wgmma D fragment)."""
    lane = t % 32
    return 64 * (t // 128) + 16 * ((t % 128) // 32) + lane // 4 + 8 * ((i // 2) % 2), 8 * (i // 4) + 2 * (lane % 4) + i % 2


def check_layouts(expert, D, threads=range(CONSUMER_THREADS)):
    """Mismatches between the expert's wgmma register layouts at head dim D and the rules the kernel assumes."""
    import cutlass
    import cutlass.cute as cute

    dp, bn, _ = expert.tile_config(D)
    threads = list(threads)
    failures = []

    @cute.jit
    def _check():
        mma_qk, mma_pv = expert._make_mmas(dp, bn)
        for t in cutlass.range_constexpr(len(threads)):
            tid = threads[t]
            s = mma_qk.get_slice(tid).partition_C(cute.make_identity_tensor((expert.BM, bn)))
            o = mma_pv.get_slice(tid).partition_C(cute.make_identity_tensor((expert.BM, dp)))
            a = mma_pv.get_slice(tid).partition_A(cute.make_identity_tensor((expert.BM, bn)))
            for name, coords, n in (("S", s, bn // 2), ("O", o, dp // 2)):
                if cutlass.const_expr(cute.size(coords) != n):
                    failures.append(f"{name}: thread {tid} holds {cute.size(coords)} registers, not {n}")
                for i in cutlass.range_constexpr(cute.size(coords)):
                    if cutlass.const_expr(tuple(coords[i]) != fragment_rule(tid, i)):
                        failures.append(f"{name}: thread {tid} register {i} at {tuple(coords[i])}, "
                                        f"the kernel assumes {fragment_rule(tid, i)}")
            for kb in cutlass.range_constexpr(bn // 16):
                for e in cutlass.range_constexpr(8):
                    flat = (e % 2, (e // 2) % 2, e // 4)
                    if cutlass.const_expr(tuple(a[(flat, 0, kb)]) != tuple(s[8 * kb + e])):
                        failures.append(f"P: thread {tid} k-block {kb} value {e} is A at {tuple(a[(flat, 0, kb)])}, "
                                        f"S register {8 * kb + e} at {tuple(s[8 * kb + e])}")

    cute.compile(_check, options="--gpu-arch sm_90a")
    return failures


# ============================================================================================= part 2: model
def bf16(x):
    return x.to(torch.bfloat16).float()


def box(x, row0, rows, head):
    """A TMA box of `rows` rows of one head of the packed x [T, heads, D] from row row0, zero past T."""
    out = torch.zeros(rows, x.shape[2])
    r1 = min(row0 + rows, x.shape[0])
    if r1 > row0:
        out[: r1 - row0] = x[row0:r1, head].float()
    return out


def cta(expert, inputs, shape, bx, h, out, writes, bugs=()):
    """CTA (bx, h) of _prefill_kernel; returns (sequence, tile) or None for a CTA past the last tile."""
    B, T, H, HKV, D = (shape[k] for k in ("B", "T", "H", "HKV", "D"))
    cu = [0, T] if "one_sequence" in bugs else inputs["cu_seqlens"].tolist()
    BM = expert.BM
    dp, bn, _ = expert.tile_config(D)
    seq_start, n, tile, x, seq = 0, 0, -1, bx, None
    for b in range(len(cu) - 1):                   # the kernel's walk: n_seqs loads pairs of cu_seqlens
        tiles = expert._tiles(cu[b + 1] - cu[b])
        if tile < 0:
            if x < tiles:
                tile, seq_start, n, seq = expert._tile_in_sequence(x, tiles), cu[b], cu[b + 1] - cu[b], b
            x -= tiles
    if tile < 0:
        return None
    kv_head = h % HKV if "kv_head_modulo" in bugs else expert._kv_head(h, H, HKV)
    base = 0 if "no_sequence_offset" in bugs else seq_start
    scale_log2 = expert.LOG2E / math.sqrt(D)
    q_row0 = tile * BM
    Q = box(inputs["q"], base + q_row0, BM, h)
    rows = q_row0 + torch.arange(BM)[:, None]
    row_max = torch.full((BM,), -math.inf)
    row_sum = torch.zeros(BM)
    acc = torch.zeros(BM, dp)
    for j in range(expert._key_blocks(n, tile, bn)):
        K = box(inputs["k"], base + j * bn, bn, kv_head)
        V = box(inputs["v"], base + j * bn, bn, kv_head)
        S = Q @ K.T
        if expert._needs_mask(j, tile, n, bn):
            S = torch.where(expert._key_dead(j * bn + torch.arange(bn)[None, :], rows, n), -math.inf, S)
        m_new = torch.maximum(row_max, S.amax(1) * scale_log2)
        alpha = torch.exp2(row_max - m_new)
        row_max = m_new
        P = torch.exp2(S * scale_log2 - m_new[:, None])
        row_sum = row_sum * alpha + P.sum(1)
        acc = acc * alpha[:, None] + bf16(P) @ V
    O = bf16(acc / row_sum[:, None])
    for r in range(BM):
        if "store_all_rows" in bugs or expert._row_stored(q_row0 + r, n):
            token = seq_start + q_row0 + r
            if token >= T:
                writes[0, 0] += 1                  # a write past the tensor: count it as a double write
                continue
            out[token, h] = O[r, :D]
            writes[token, h] += 1
    return seq, tile


def model(expert, inputs, shape, bugs=()):
    """What xlang_entry leaves in out ([T, H, D], NaN where never written), the writes per (token, head) and the
    (sequence, tile) each CTA of head 0 took."""
    B, T, H = shape["B"], shape["T"], shape["H"]
    out = torch.full((T, H, shape["D"]), math.nan)
    writes = torch.zeros(T, H, dtype=torch.int64)
    visited = []
    for bx in range(-(-T // expert.BM) + B):       # the kernel's grid
        for h in range(H):
            took = cta(expert, inputs, shape, bx, h, out, writes, bugs)
            if took is not None and h == 0:
                visited.append(took)
    return out, writes, visited


def excess(task, got, ref, kind):
    """How far the worst element lies outside the task's tolerance (<= 0: inside; NaN counts as far outside)."""
    atol, rtol = task.tolerance_for("out", kind)
    return ((got - ref).abs() - (atol + rtol * ref.abs())).nan_to_num(math.inf).max().item()


def judge(expert, task, shape, seed, kind, bugs=()):
    """What is wrong with the model's out on the task's drawn inputs ([] when nothing): outside the tolerance (or
    never written), (token, head) pairs not written exactly once, query tiles not each taken once."""
    inputs = task.make_inputs(shape, seed, "cpu", kind)
    ref = task.reference(inputs, shape)["out"]
    got, writes, visited = model(expert, inputs, shape, bugs)
    cu = inputs["cu_seqlens"].tolist()
    want = sorted((b, t) for b in range(shape["B"]) for t in range(-(-(cu[b + 1] - cu[b]) // expert.BM)))
    wrong = []
    worst = excess(task, got, ref, kind)
    if worst > 0:
        wrong.append(f"outside the tolerance by {worst:.3g}")
    if not bool((writes == 1).all()):
        wrong.append(f"{int((writes != 1).sum())} (token, head) pairs not written exactly once")
    if sorted(visited) != want:
        wrong.append(f"tiles taken {sorted(visited)}, want {want}")
    return wrong


CASES = (  # (sizes, input kind): ragged lengths 1, odd, longer than a tile; D 128 and 256; GQA
    ({"B": 3, "T": 300, "H": 4, "HKV": 2, "D": 128}, "normal"),
    ({"B": 2, "T": 300, "H": 2, "HKV": 1, "D": 256}, "normal"),   # a sequence of 299: 3 tiles, up to 5 key blocks
    ({"B": 4, "T": 260, "H": 2, "HKV": 2, "D": 256}, "large"),
    ({"B": 3, "T": 200, "H": 2, "HKV": 1, "D": 128}, "large_v"),
    ({"B": 1, "T": 1, "H": 1, "HKV": 1, "D": 256}, "normal"),
)


def main() -> int:
    from xlang.task import get_task

    expert, task = load_expert(), get_task("attn_prefill_ragged")
    ok = True
    for D in (128, 256):
        failures = check_layouts(expert, D)
        for f in failures[:10]:
            print("FAIL", f)
        print(f"layouts D {D}:", "PASS" if not failures else f"FAIL ({len(failures)})")
        ok &= not failures
    for sizes, kind in CASES:
        shape = task.shape(sizes)
        why = judge(expert, task, shape, 5, kind)
        print(sizes, kind, "FAIL " + "; ".join(why) if why else "PASS")
        ok &= not why
        for bug in BUGS:
            why = judge(expert, task, shape, 5, kind, bugs=(bug,))
            print("   bug", bug, "caught: " + "; ".join(why) if why else "not caught (these sizes cannot show it)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
