"""CPU model of tasks/attn_decode_paged/solutions/cutedsl_hopper.py (CuTe DSL paged GQA decode, sm_90a; issue 33):
its split plan, cp.async page gathers through the block table, per-warp token walk with online softmax, the warps'
merge and the combine over splits, driven by the expert's own index rules (_split_range, _tiles, _page_slot,
_token_live, _token_row, _first_head, split_plan, tokens_per_tile), against the task's reference on the task's drawn
inputs (shuffled pages, garbage slots and table padding around them).

A PASS SHOWS THAT THE KERNELS' SPLITS, PAGE INDEXING AND MERGES AGREE WITH THE RULES MODELLED HERE, NOT THAT THE
KERNELS RUN: they have never run on a GPU.

What is modelled: shared-memory rows a gather did not fill hold NaN (they hold stale data on the GPU), so a step that
reads one shows; every gathered row is read from the real cache at the page the rule names (garbage included);
scores, softmax and sums in fp32 token by token as each warp walks them, the split's outputs and log2-sum-exp in
fp32, the output in bf16. Not modelled: cp.async ordering and the barriers, the shuffles' summation order, timing.

    python3 tasks/attn_decode_paged/verify/decode_cutedsl_emulate.py     # cases + bugs; 0 = PASS
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[3]
EXPERT = ROOT / "tasks/attn_decode_paged/solutions/cutedsl_hopper.py"
BUGS = (
    "contiguous_pages",   # page = block_table[b, 0] + t // P: assumes a sequence's pages are contiguous
    "whole_last_page",    # a split's end rounded up to whole pages: reads the last page's garbage tail
    "follow_padding",     # a split's end not clipped at seq_lens[b]: follows the table's padding entries
    "read_unfilled",      # the warp walk reads tile rows no gather filled (tokens past the split's end)
)


def load_expert(path=EXPERT, name="cutedsl_decode_expert"):
    # the expert imports CuTe DSL at its top: the model reads its rules, so it needs the package too
    from xlang.candidate import load_module

    return load_module(path, name)


def split_cta(expert, inputs, shape, b, kvh, split, chunk, bugs=()):
    """CTA (b, kvh, split) of _split_kernel: [G, D] outputs (normalised by the split's own sum) and [G] log2-sum-exps."""
    H, HKV, D, P = shape["H"], shape["HKV"], shape["D"], shape["P"]
    G = H // HKV
    bn = expert.tokens_per_tile(D)
    n = int(inputs["seq_lens"][b])
    table = inputs["block_table"][b].tolist()
    start, end = expert._split_range(split, chunk, n)
    if "whole_last_page" in bugs:
        end = min(start + chunk, -(-n // P) * P)
    if "follow_padding" in bugs:
        end = start + chunk
    head0 = expert._first_head(kvh, G)
    q = inputs["q"][b, head0: head0 + G].float() * (expert.LOG2E / math.sqrt(D))
    k_rows, v_rows = inputs["k_cache"].reshape(-1, D), inputs["v_cache"].reshape(-1, D)
    m = torch.full((expert.WARPS, G), -math.inf)
    lsum = torch.zeros(expert.WARPS, G)
    o = torch.zeros(expert.WARPS, G, D)
    for j in range(expert._tiles(start, end, bn)):
        t0 = start + j * bn
        sk = torch.full((bn, D), math.nan)       # rows no gather fills keep what they held: NaN here
        sv = torch.full((bn, D), math.nan)
        for r in range(bn):
            t = t0 + r
            if not expert._token_live(t, end):
                continue
            entry, slot = expert._page_slot(t, P)
            if entry >= len(table):                          # past the table's row: the model leaves it NaN
                continue
            page = table[0] + entry if "contiguous_pages" in bugs else table[entry]
            row = (page * P + slot) * HKV + kvh              # the kernel's address, k_cache[page, slot, kvh, :]
            if 0 <= row < k_rows.shape[0]:                   # else outside the cache: left NaN
                sk[r], sv[r] = k_rows[row].float(), v_rows[row].float()
        for w in range(expert.WARPS):
            for rr in range(bn // expert.WARPS):
                row = expert._token_row(rr, w)
                if "read_unfilled" in bugs or expert._token_live(t0 + row, end):
                    s = q @ sk[row]
                    m_new = torch.maximum(m[w], s)
                    alpha = torch.exp2(m[w] - m_new)
                    p = torch.exp2(s - m_new)
                    m[w] = m_new
                    lsum[w] = lsum[w] * alpha + p
                    o[w] = o[w] * alpha[:, None] + p[:, None] * sv[row][None, :]
    m_all = m.amax(0)
    m_safe = torch.where(m_all == -math.inf, 0.0, m_all)
    weight = torch.exp2(m - m_safe[None, :])
    l_all = (lsum * weight).sum(0)
    has = l_all > 0
    inv = torch.where(has, 1 / torch.where(has, l_all, 1.0), 0.0)
    lse = torch.where(has, m_safe + torch.log2(torch.where(has, l_all, 1.0)), -math.inf)
    return (o * weight[:, :, None]).sum(0) * inv[:, None], lse


def model(expert, inputs, shape, sms=132, bugs=()):
    """What xlang_entry leaves in out ([B, H, D] bf16 as fp32) and the split count of its plan for `sms` SMs."""
    B, H, HKV, D = shape["B"], shape["H"], shape["HKV"], shape["D"]
    G = H // HKV
    chunk, nsplit = expert.split_plan(B, HKV, D, shape["P"], shape["MAXP"], sms, G)
    o_part = torch.full((B, H, nsplit, D), math.nan)
    lse_part = torch.full((B, H, nsplit), math.nan)
    for b in range(B):
        for kvh in range(HKV):
            for split in range(nsplit):
                o, lse = split_cta(expert, inputs, shape, b, kvh, split, chunk, bugs)
                head0 = expert._first_head(kvh, G)
                o_part[b, head0: head0 + G, split] = o
                lse_part[b, head0: head0 + G, split] = lse
    m_all = lse_part.amax(2, keepdim=True)
    w = torch.exp2(lse_part - m_all)
    out = (o_part * w[..., None]).sum(2) / w.sum(2)[..., None]
    return out.to(torch.bfloat16).float(), nsplit


def excess(task, got, ref, kind):
    atol, rtol = task.tolerance_for("out", kind)
    return ((got - ref).abs() - (atol + rtol * ref.abs())).nan_to_num(math.inf).max().item()


# (sizes, input kind, SMs standing for the device): several splits (few SMs) and one (132)
CASES = (
    ({"B": 3, "H": 8, "HKV": 2, "D": 128, "P": 16, "S": 700}, "normal", 4),
    ({"B": 2, "H": 3, "HKV": 3, "D": 64, "P": 1, "S": 300}, "normal", 4),
    ({"B": 4, "H": 8, "HKV": 1, "D": 64, "P": 64, "S": 450}, "large_v", 4),
    ({"B": 2, "H": 10, "HKV": 2, "D": 256, "P": 16, "S": 200}, "normal", 4),
    ({"B": 2, "H": 2, "HKV": 2, "D": 256, "P": 1, "S": 90}, "large", 4),
    ({"B": 3, "H": 7, "HKV": 1, "D": 128, "P": 64, "S": 250}, "large", 132),
    ({"B": 8, "H": 8, "HKV": 4, "D": 128, "P": 16, "S": 300}, "normal", 4),     # one split
    ({"B": 1, "H": 1, "HKV": 1, "D": 64, "P": 16, "S": 1}, "normal", 4),
)


def main() -> int:
    from xlang.task import get_task

    expert, task = load_expert(), get_task("attn_decode_paged")
    ok = True
    for sizes, kind, sms in CASES:
        shape = task.shape(sizes)
        inputs = task.make_inputs(shape, 7, "cpu", kind)
        ref = task.reference(inputs, shape)["out"]
        got, nsplit = model(expert, inputs, shape, sms)
        worst = excess(task, got, ref, kind)
        print(sizes, kind, f"splits {nsplit}", "PASS" if worst <= 0 else f"FAIL by {worst:.3g}")
        ok &= worst <= 0
        for bug in BUGS:
            worst = excess(task, model(expert, inputs, shape, sms, (bug,))[0], ref, kind)
            print("   bug", bug, f"caught (by {worst:.3g})" if worst > 0 else "not caught (these sizes cannot show it)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
