# An attn_decode_paged "candidate" that computes on the CPU with torch (for the CPU tests of the judge/runner split
# only: the real languages need a GPU). XLANG_TEST_DECODE=contiguous makes it assume each sequence's pages follow
# its first one (the shortcut the drawn page tables must catch); anything else follows block_table.
import math
import os

import torch


def xlang_entry(q, k_cache, v_cache, block_table, seq_lens, out, B, H, HKV, D, P, MAXP, NP):
    contiguous = os.environ.get("XLANG_TEST_DECODE") == "contiguous"
    for b in range(B):
        n = int(seq_lens[b])
        count = -(-n // P)
        if contiguous:
            pages = (block_table[b, 0].long() + torch.arange(count)) % NP
        else:
            pages = block_table[b, :count].long()
        k = k_cache[pages].reshape(-1, HKV, D)[:n].float()
        v = v_cache[pages].reshape(-1, HKV, D)[:n].float()
        s = (q[b].float().reshape(HKV, H // HKV, D) @ k.permute(1, 2, 0)) / math.sqrt(D)
        out[b] = (torch.softmax(s, -1) @ v.permute(1, 0, 2)).reshape(H, D).to(out.dtype)
