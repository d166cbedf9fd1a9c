# An attn_prefill_ragged "candidate" that computes on the CPU with torch (for the CPU tests of the judge/runner split
# only: the real languages need a GPU). XLANG_TEST_PREFILL=one makes it take the whole batch as one sequence (the
# shortcut ragged cu_seqlens must catch); anything else follows cu_seqlens.
import math
import os

import torch


def xlang_entry(q, k, v, cu_seqlens, out, B, T, H, HKV, D):
    bounds = [0, T] if os.environ.get("XLANG_TEST_PREFILL") == "one" else cu_seqlens.tolist()
    for s, e in zip(bounds, bounds[1:]):
        qs = q[s:e].float().transpose(0, 1)
        ks = k[s:e].float().transpose(0, 1).repeat_interleave(H // HKV, 0)
        vs = v[s:e].float().transpose(0, 1).repeat_interleave(H // HKV, 0)
        sc = qs @ ks.transpose(1, 2) / math.sqrt(D)
        sc.masked_fill_(torch.ones(e - s, e - s, dtype=torch.bool).triu(1), float("-inf"))
        out[s:e] = (torch.softmax(sc, -1) @ vs).transpose(0, 1).to(out.dtype)
