"""attn_decode_paged: GQA decode attention over a paged KV cache, bf16 (issue 33: the serving workloads).

One query token per sequence (plain decode, FlashInfer's BatchDecodeWithPagedKVCacheWrapper case; speculative
multi-token decode is not part of this contract). The layouts, stated exactly in the contract:
- k_cache / v_cache [NP, P, HKV, D]: FlashInfer's "NHD" paged layout, each of k and v shaped
  [max_num_pages, page_size, num_kv_heads, head_dim] (docs.flashinfer.ai, flashinfer.page.append_paged_kv_cache),
  which is also vLLM's and FlashAttention's paged layout.
- The page table is a padded block table block_table [B, MAXP] int32 with seq_lens [B] int32 (vLLM's and
  FlashAttention's `block_table` + `seqused_k`; FlashInfer's trtllm-gen decode takes `block_tables` + `seq_lens`),
  not FlashInfer's CSR (kv_indptr, kv_indices, kv_last_page_len): the judge allocates every buffer from the
  contract's sizes, and CSR's kv_indices has as many entries as the drawn lengths need pages, while a block
  table's width is ceil(S / P) whatever the lengths. Its entries past a sequence's pages are hostile (below).

Drawn inputs (paged_inputs): the multiset of sequence lengths is a function of (B, S) alone (sequence_lengths:
the longest is S, one is 1, one fills its last page exactly, the others uniform in 1..S), so the FLOPs and bytes
are the shape's and the work of every timed call is the same; the seed of each call shuffles which sequence gets
which length, which pages each sequence gets (a random sample of the cache: non-contiguous, in shuffled order,
no page shared by two sequences), and the values. Every slot no sequence owns (the pages no sequence has, and the
slots of a last page past its sequence's length) holds garbage: NaN in some pages, +-2^100 in others; a block
table's entries past a sequence's pages name garbage pages. A kernel that assumes contiguous pages, reads a whole
last page, or follows the padding reads garbage, and garbage reaches the output (0 * NaN is NaN).
"""

from __future__ import annotations

import math
import random

from xlang.task import Contract, Peer, Task, TensorArg

from .._attention import FP16_BEYOND, TOLERANCE

HEAD_DIMS = (64, 128, 256)
PAGE_SIZES = (1, 16, 64)
MAX_GROUP = 8
SIZES = ("B", "H", "HKV", "D", "P", "S", "MAXP", "NP")
# Llama-3-8B's heads (32 query, 8 key/value, D 128), a batch of 64 sequences of up to 4096 tokens, vLLM's default
# page of 16 tokens.
DEFAULT_SHAPE = {"B": 64, "H": 32, "HKV": 8, "D": 128, "P": 16, "S": 4096, "MAXP": 256, "NP": 64 * 257}
GARBAGE = 2.0 ** 100  # exact in bf16; a score or an output it enters is off by far more than any tolerance


def derived_sizes(shape: dict) -> dict:
    """MAXP: the block table's width (pages of the longest possible sequence); NP: pages in the cache, one spare
    per sequence beyond a full table so that garbage pages always exist."""
    maxp = -(-shape["S"] // shape["P"])
    return {"MAXP": maxp, "NP": shape["B"] * (maxp + 1)}


def sequence_lengths(B: int, S: int) -> list[int]:
    """The shape's sequence lengths (their order is the seed's): the longest S, then 1, then a multiple of 64 (a
    last page filled exactly at every page size), the rest uniform in 1..S. The same for every page size."""
    rng = random.Random(f"attn_decode_paged:{B}:{S}")
    lengths = [S, 1][:B]
    if B > 2:
        lengths.append(64 * rng.randint(1, S // 64) if S >= 64 else rng.randint(1, S))
    while len(lengths) < B:
        lengths.append(rng.randint(1, S))
    return lengths


_RULES = (
    "Decode: one query token per sequence b (its newest), attending to all seq_lens[b] tokens of its KV cache\n"
    "(no mask within them). GQA: G = H // HKV query heads share a key/value head; query head h reads key/value\n"
    "head h // G. scale = 1/sqrt(D).\n"
    "The KV cache is paged: token t (0 <= t < seq_lens[b]) of sequence b is slot t % P of page\n"
    "block_table[b, t // P], so its key is k_cache[block_table[b, t // P], t % P, kvh, :] (v_cache alike).\n"
    "scores[b, h, t] = scale * dot(q[b, h, :], key of token t, head h // G); probs = softmax over t;\n"
    "out[b, h, :] = sum_t probs[b, h, t] * (value of token t, head h // G). Accumulate in fp32; out is bf16.\n"
    "Sequence b owns pages block_table[b, 0 .. ceil(seq_lens[b] / P) - 1]: distinct pages in no order (not\n"
    "contiguous, not increasing), no page owned by two sequences. 1 <= seq_lens[b] <= S, any value (often not a\n"
    "multiple of P, 1 included; S, the shape's longest length, is not passed: S <= MAXP * P).\n"
    "Everything else is garbage and must never reach out: block_table[b, j] for j >= ceil(seq_lens[b] / P)\n"
    "names some page that is not b's (do not follow it), pages no sequence owns and the slots of b's last page\n"
    "past seq_lens[b] hold NaN or +-2^100. Masking the scores of such slots is not enough\n"
    "(0 * NaN is NaN): do not load them (masked loads with zero fill), or zero them before probs @ V.\n"
    "MAXP = ceil(S / P) (the block table's row length); NP = B * (MAXP + 1) pages in each cache. Addresses in\n"
    "k_cache / v_cache can pass 2^31 bytes at large shapes: compute them in 64 bits.\n"
    "Every shape with B, S >= 1, P in {1, 16, 64}, D in {64, 128, 256}, HKV >= 1 and H = G * HKV with G in 1..8\n"
    "must work: besides the default shape, each evaluation checks other shapes drawn at random from that space\n"
    "(every page size, head dim and GQA group; long sequences too, S up to 32771) with fresh page tables. All\n"
    "tensors are contiguous and 16-byte aligned.\n"
    "Inputs are not only N(0, 1): trials also use large scores (far above 88, where exp overflows fp32 unless the\n"
    "row max is subtracted) and V values beyond fp16's range (|V| above 65504: accumulate P @ V in fp32)."
)

CONTRACT = Contract(
    tensors=(
        TensorArg("q", "in", "bf16", ("B", "H", "D"), "the query token of each sequence"),
        TensorArg("k_cache", "in", "bf16", ("NP", "P", "HKV", "D"), "keys: page, slot in the page, head, dim"),
        TensorArg("v_cache", "in", "bf16", ("NP", "P", "HKV", "D"), "values, laid out as k_cache"),
        TensorArg("block_table", "in", "int32", ("B", "MAXP"), "page indices of each sequence, in token order"),
        TensorArg("seq_lens", "in", "int32", ("B",), "tokens in each sequence's cache (1..S)"),
        TensorArg("out", "out", "bf16", ("B", "H", "D")),
    ),
    sizes=("B", "H", "HKV", "D", "P", "MAXP", "NP"),
    rules=_RULES,
)


def check_shape(shape):
    if min(shape["B"], shape["S"], shape["H"], shape["HKV"]) < 1:
        raise ValueError("B, H, HKV and S must be positive")
    if shape["D"] not in HEAD_DIMS:
        raise ValueError(f"D must be one of {HEAD_DIMS}")
    if shape["P"] not in PAGE_SIZES:
        raise ValueError(f"P (the page size) must be one of {PAGE_SIZES}")
    if shape["H"] % shape["HKV"] or not 1 <= shape["H"] // shape["HKV"] <= MAX_GROUP:
        raise ValueError(f"H must be G * HKV with G in 1..{MAX_GROUP} (GQA groups)")
    want = derived_sizes(shape)
    if any(shape[k] != v for k, v in want.items()):
        raise ValueError(f"MAXP = ceil(S / P) and NP = B * (MAXP + 1): here MAXP={want['MAXP']}, NP={want['NP']}")


# Drawn correctness shapes: every page size, head dim and group G in 1..8 with HKV in 1..4; B in 1..12; S in 1..5000
# (a quarter of them up to 300). Long sequences (issue 31's rule for attention): the first drawn shape of every
# evaluation and a third of the others have S 8193..32771 with B <= 2 and HKV <= 2. The cache's elements B * S * HKV
# * D stay under MAX_KV (B, then S, shrink): k and v of 2^25 elements each, 64 MiB in bf16 (the reference gathers
# only the sequences' own pages). Sizes the caller fixed keep their value (H or HKV: the GQA group too).
LONG_RATE = 1 / 3
LONG_S = (8193, 32771)
MAX_KV = 1 << 25


def draw_shape(rng, shape, fixed, long=None):
    first = long is True
    long = "S" not in fixed and (first or rng.random() < LONG_RATE)
    if long:
        s = rng.randint(*LONG_S)
    else:
        s = rng.randint(1, 300) if rng.random() < 0.25 else rng.randint(301, 5000)
    out = {"D": rng.choice(HEAD_DIMS), "P": rng.choice(PAGE_SIZES), "S": s,
           "B": rng.randint(1, 2) if long else rng.randint(1, 12)}
    if "H" in fixed or "HKV" in fixed:
        group = shape["H"] // shape["HKV"]
        hkv = shape["HKV"] if "HKV" in fixed else shape["H"] // group
    else:
        group, hkv = rng.randint(1, MAX_GROUP), rng.randint(1, 2 if long else 4)
    out.update(H=hkv * group, HKV=hkv)
    out.update({k: shape[k] for k in fixed if k not in ("MAXP", "NP")})
    if "B" not in fixed:
        while out["B"] > 1 and out["B"] * out["S"] * out["HKV"] * out["D"] > MAX_KV:
            out["B"] -= 1
    if "S" not in fixed and out["B"] * out["S"] * out["HKV"] * out["D"] > MAX_KV:
        out["S"] = max(1, MAX_KV // (out["B"] * out["HKV"] * out["D"]))
    out.update(derived_sizes(out))
    return {k: out[k] for k in SIZES}


def flops(shape) -> float:
    """Q K^T and P V over every sequence's tokens: 4 * H * D per token (one query per sequence)."""
    return 4.0 * shape["H"] * shape["D"] * sum(sequence_lengths(shape["B"], shape["S"]))


def min_bytes(shape) -> float:
    """Decode is memory-bound: the keys and values every sequence owns (read once, bf16), the query and output, the
    table entries of those pages and seq_lens; nothing of the garbage."""
    lengths = sequence_lengths(shape["B"], shape["S"])
    kv = 2 * 2 * shape["HKV"] * shape["D"] * sum(lengths)
    table = 4 * (sum(-(-n // shape["P"]) for n in lengths) + shape["B"])
    return float(kv + 2 * 2 * shape["B"] * shape["H"] * shape["D"] + table)


# ---------------------------------------------------------------------------------------------------------
# Inputs


def paged_inputs(shape, seed, device, kind="normal"):
    """q, k_cache, v_cache, block_table, seq_lens for one call (see the module docstring). Kinds:
    normal: N(0, 1).
    large: q = N(0,1) + 400/sqrt(D), keys of element mean exactly 0.5: scaled scores ~ 200 per row (as attention's
        `large`), so exp overflows fp32 unless the row max is subtracted first.
    large_v: q, k normal; each value channel offset by 1..3 (random sign) and all of V times 2^16: |V| beyond
        fp16's 65504, so a P @ V accumulated in fp16 overflows.
    Garbage (every kind): the slots no sequence owns hold NaN (pages of even index) or +-2^100 (odd)."""
    import torch

    B, H, HKV, D, P, S, MAXP, NP = (shape[k] for k in SIZES)
    rng = random.Random(seed)
    lengths = sequence_lengths(B, S)
    rng.shuffle(lengths)
    pages_needed = [-(-n // P) for n in lengths]
    pages = rng.sample(range(NP), NP)  # every page once, in random order
    owned, garbage = pages[: sum(pages_needed)], pages[sum(pages_needed):]
    padding = rng.choices(garbage, k=B * MAXP - len(owned))  # what the table holds past each sequence's pages
    rows, at, pad = [], 0, 0
    for n in pages_needed:
        rows.append(owned[at: at + n] + padding[pad: pad + MAXP - n])
        at, pad = at + n, pad + MAXP - n
    block_table = torch.tensor(rows, dtype=torch.int32, device=device).reshape(B, MAXP)
    seq_lens = torch.tensor(lengths, dtype=torch.int32, device=device)

    g = torch.Generator(device=device).manual_seed(seed)
    q = torch.randn(B, H, D, generator=g, device=device)
    k = torch.randn(NP, P, HKV, D, generator=g, device=device)
    v = torch.randn(NP, P, HKV, D, generator=g, device=device)
    if kind == "large":
        q, k = q + 400.0 / math.sqrt(D), k - k.mean(-1, keepdim=True) + 0.5
    elif kind == "large_v":
        offset = torch.rand(1, 1, HKV, D, generator=g, device=device) * 2 + 1
        sign = torch.randint(0, 2, (1, 1, HKV, D), generator=g, device=device) * 2 - 1
        v = FP16_BEYOND * (sign * offset + 0.5 * v)
    elif kind != "normal":
        raise ValueError(f"attn_decode_paged has no input kind '{kind}' (its kinds: {', '.join(INPUT_KINDS)})")
    k, v = k.to(torch.bfloat16), v.to(torch.bfloat16)

    # Which of the NP * P slots hold a token of some sequence: the first seq_lens[b] slots along b's table row.
    slots = (block_table.long()[:, :, None] * P + torch.arange(P, device=device)).reshape(B, MAXP * P)
    valid = torch.arange(MAXP * P, device=device)[None, :] < seq_lens[:, None]
    owned_slot = torch.zeros(NP * P, dtype=torch.bool, device=device)
    owned_slot[slots[valid]] = True
    page_of_slot = torch.arange(NP * P, device=device) // P
    nan_slot = ~owned_slot & (page_of_slot % 2 == 0)
    huge_slot = ~owned_slot & (page_of_slot % 2 == 1)
    for cache in (k, v):
        flat = cache.view(NP * P, HKV, D)
        flat[nan_slot] = float("nan")
        sign = torch.randint(0, 2, (int(huge_slot.sum()), HKV, D), generator=g, device=device) * 2 - 1
        flat[huge_slot] = (GARBAGE * sign).to(torch.bfloat16)
    return {"q": q.to(torch.bfloat16), "k_cache": k, "v_cache": v, "block_table": block_table, "seq_lens": seq_lens}


INPUT_KINDS = ("normal", "large", "large_v")


# ---------------------------------------------------------------------------------------------------------
# Reference: fp32 (no TF32), one sequence at a time: gather its pages in table order, keep its first seq_lens[b]
# tokens, then attention.


def decode_reference(q, k_cache, v_cache, block_table, seq_lens, shape):
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    B, H, HKV, D, P = (shape[k] for k in ("B", "H", "HKV", "D", "P"))
    group = H // HKV
    scale = 1.0 / math.sqrt(D)
    out = torch.empty(B, H, D, dtype=torch.float32, device=q.device)
    for b, n in enumerate(seq_lens.tolist()):
        pages = block_table[b, : -(-n // P)].long()
        k = k_cache[pages].reshape(-1, HKV, D)[:n].float()  # [n, HKV, D]: sequence b's tokens in order
        v = v_cache[pages].reshape(-1, HKV, D)[:n].float()
        qb = q[b].float().reshape(HKV, group, D)
        s = (qb @ k.permute(1, 2, 0)) * scale  # [HKV, G, n]
        out[b] = (torch.softmax(s, dim=-1) @ v.permute(1, 0, 2)).reshape(H, D)
    return {"out": out}


# ---------------------------------------------------------------------------------------------------------
# The comparison. torch has no paged decode kernel this task's pages fit: its FA2 (aten._flash_attention_forward)
# takes a block_table, but only with pages of a multiple of 256 tokens (pytorch/pytorch
# aten/src/ATen/native/transformers/cuda/flash_attn/flash_api.cpp @ef3d5c9, mha_varlen_fwd: TORCH_CHECK(!paged_KV
# || page_block_size % 256 == 0, "Paged KV cache block size must be divisible by 256")), and the task's pages are
# 1, 16 or 64 tokens. So the vendor baseline is torch's own way there: gather the pages, then SDPA (named as that,
# the fallback it is). What users run for paged decode is FlashInfer's BatchDecodeWithPagedKVCacheWrapper: it is
# the task's peer (Task.peers), timed beside the vendor when flashinfer is installed (scripts/serving_on_gpu/
# carries it to the H200), so the report shows x vendor and x FlashInfer. A peer rather than the baseline: a
# peer's packages are hidden from the candidate's jail (xlang.task.peer_library_folders), and the vendor column
# means the same thing on every machine, installed or not.


def _flashinfer_decode(inputs, shape):
    """FlashInfer's BatchDecodeWithPagedKVCacheWrapper (NHD) over the same buffers. Its CSR page table is built
    from the block table in the setup, with plan(), untimed (as FlashInfer's plan runs once per batch, before every
    layer). Tensor cores where FlashInfer says they pay (its docstring: "faster for large group size"; G >= 4),
    which also covers G = 5 and 7, for which its CUDA-core decode has no instance (DISPATCH_GQA_GROUP_SIZE: 1, 2, 3,
    4, 6, 8, 16). The first plan JIT-compiles the kernel with nvcc (cached in FlashInfer's workspace)."""
    import flashinfer
    import torch

    B, H, HKV, D, P = (shape[k] for k in ("B", "H", "HKV", "D", "P"))
    q, k_cache, v_cache = inputs["q"], inputs["k_cache"], inputs["v_cache"]
    indptr, indices, last_page_len = csr_pages(inputs["block_table"], inputs["seq_lens"], P)
    workspace = torch.empty(128 << 20, dtype=torch.uint8, device=q.device)
    wrapper = flashinfer.BatchDecodeWithPagedKVCacheWrapper(workspace, "NHD", use_tensor_cores=H // HKV >= 4)
    wrapper.plan(indptr, indices, last_page_len, H, HKV, D, P, pos_encoding_mode="NONE",
                 q_data_type=torch.bfloat16, kv_data_type=torch.bfloat16)
    return lambda: wrapper.run(q, (k_cache, v_cache))


def csr_pages(block_table, seq_lens, P: int):
    """FlashInfer's CSR page table from the padded block table: indptr [B+1], the pages each sequence owns in token
    order, and the tokens in each last page (1..P)."""
    import torch

    lens = seq_lens.long()
    pages = (lens + P - 1) // P
    indptr = torch.zeros(len(lens) + 1, dtype=torch.int32, device=block_table.device)
    indptr[1:] = torch.cumsum(pages, 0)
    keep = torch.arange(block_table.shape[1], device=block_table.device)[None, :] < pages[:, None]
    indices = block_table[keep].to(torch.int32).contiguous()
    last_page_len = (lens - (pages - 1) * P).to(torch.int32)
    return indptr, indices, last_page_len


def _sdpa_baseline(inputs, shape):
    """Each call gathers every sequence's tokens out of the pages into [B, HKV, MAXP * P, D] (slots past a
    sequence's length read its first token, masked out: never garbage) and runs torch SDPA (whichever backend torch
    picks for a boolean mask with GQA) on them. The slot indices come from the setup, untimed. `shape` holds the
    contract's sizes only (the runner passes those): S is not among them."""
    import torch
    import torch.nn.functional as F

    B, H, HKV, D, P, MAXP = (shape[k] for k in ("B", "H", "HKV", "D", "P", "MAXP"))
    S = MAXP * P
    q, k_cache, v_cache, table = inputs["q"], inputs["k_cache"], inputs["v_cache"], inputs["block_table"]
    lens = inputs["seq_lens"].long()
    t = torch.arange(S, device=q.device)
    valid = t[None, :] < lens[:, None]  # [B, S]
    slot = table.long().gather(1, (t // P)[None, :].expand(B, S)) * P + t % P
    slot = torch.where(valid, slot, slot[:, :1])
    mask = valid[:, None, None, :]  # [B, 1, 1, S]: True where the token is attended
    query = q[:, :, None, :]  # [B, H, 1, D]

    def call():
        k = k_cache.view(-1, HKV, D)[slot].transpose(1, 2)  # [B, HKV, S, D]
        v = v_cache.view(-1, HKV, D)[slot].transpose(1, 2)
        return F.scaled_dot_product_attention(query, k, v, attn_mask=mask, enable_gqa=H != HKV)

    return call


TASK = Task(
    name="attn_decode_paged",
    title="paged GQA decode attention, bf16, page size 1/16/64, head dim 64/128/256",
    contract=CONTRACT,
    default_shape=dict(DEFAULT_SHAPE),
    derived_sizes=derived_sizes,
    tolerance=dict(TOLERANCE),
    kind_output_scale={"large_v": {"out": FP16_BEYOND}},
    flops=flops,
    min_bytes=min_bytes,
    make_inputs=paged_inputs,
    input_kinds=INPUT_KINDS,
    reference=lambda inputs, shape: decode_reference(inputs["q"], inputs["k_cache"], inputs["v_cache"],
                                                     inputs["block_table"], inputs["seq_lens"], shape),
    shown_reference=(decode_reference,),
    reference_call="outputs = decode_reference(q, k_cache, v_cache, block_table, seq_lens, shape)  # -> out",
    baseline=_sdpa_baseline,
    baseline_name=("torch SDPA over pages it gathers per call (the fallback: torch has no paged decode for pages "
                   "under 256 tokens)"),
    peers=(Peer("flashinfer", "FlashInfer", ("flashinfer-python",), ("flashinfer",), _flashinfer_decode),),
    draw_shape=draw_shape,
    draw_first=lambda rng, shape, fixed: draw_shape(rng, shape, fixed, long=True),
    check_shape=check_shape,
    # Decode reads each key and value once for G query rows: G flops per byte (8 at most), far below the H200's
    # ~200 flop/byte ridge, so it is bound by memory, and wgmma (64 rows per instruction against G <= 8 live rows)
    # is no requirement. What a fast Hopper decode kernel must have is many page gathers in flight without
    # spending registers on them: cp.async (LDGSTS), which gathers rows at any page size, P = 1 included. TMA
    # tiles need a page of rows per box and Hopper has no TMA gather, so TMA is not asked for. Blackwell has TMA
    # gather4 as well, but cp.async is still the one family every page size can use; it is asked there too.
    required={"hopper": ("cp_async",), "blackwell": ("cp_async",)},
)
