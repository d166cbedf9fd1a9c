"""attn_prefill_ragged: causal prefill attention over a ragged batch (cu_seqlens), GQA, bf16 (issue 33).

The layout is the packed ("ragged", "varlen") one of FlashAttention's varlen functions and FlashInfer's
BatchPrefillWithRaggedKVCacheWrapper: the B sequences' tokens one after another, q [T, H, D], k and v [T, HKV, D],
sequence b's tokens at rows cu_seqlens[b] .. cu_seqlens[b + 1] - 1 (cu_seqlens [B + 1] int32, cu_seqlens[0] = 0,
cu_seqlens[B] = T). Queries and keys have the same lengths (a prefill of new prompts, no cached prefix), causal
within each sequence, nothing across sequences.

The multiset of lengths is a function of (B, T) alone (sequence_lengths: one sequence of length 1 when B >= 2, the
rest a random composition of the remaining tokens), so FLOPs and bytes are the shape's; each call's seed shuffles
their order (so cu_seqlens differs from call to call) and draws the values, with the attention tasks' input kinds
made per sequence (tasks/_attention.py forward_inputs).

Vendor baseline: cuDNN through torch SDPA (CUDNN_ATTENTION only), one call per sequence on strided views of the
packed tensors. torch has ragged entry points too, not taken: `torch.nn.attention.varlen.varlen_attn` runs
FlashAttention kernels, not cuDNN (in torch 2.13 here; whether torch 2.11, the GPU machine's, has it was not
checked), and the cuDNN kernel with cumulative sequence lengths that torch's jagged nested tensors reach
(aten::_cudnn_attention_forward with cum_seq_q / cum_seq_k) is a private op that torch allows there only up to
D = 128. The per-sequence baseline pays one launch per sequence; it has not run on a GPU yet.
"""

from __future__ import annotations

import random

from xlang.task import Contract, Task, TensorArg

from .._attention import (FP16_BEYOND, INPUT_KINDS, TOLERANCE, _chunks, _scores, draw_heads, forward_inputs,
                          forward_reference)

HEAD_DIMS = (128, 256)
GROUPS = (1, 2, 4, 6, 8)
SIZES = ("B", "T", "H", "HKV", "D")
# Llama-3-8B's heads (32 query, 8 key/value, D 128); 8 prompts, 16384 tokens in all.
DEFAULT_SHAPE = {"B": 8, "T": 16384, "H": 32, "HKV": 8, "D": 128}


def sequence_lengths(B: int, T: int) -> list[int]:
    """The shape's lengths (their order is the seed's): [T] for one sequence; else 1 and a random composition of
    the other T - 1 tokens into B - 1 lengths >= 1 (cut points drawn from a generator seeded by the shape)."""
    if B == 1:
        return [T]
    rng = random.Random(f"attn_prefill_ragged:{B}:{T}")
    cuts = sorted(rng.sample(range(1, T - 1), B - 2))
    return [1] + [hi - lo for lo, hi in zip([0] + cuts, cuts + [T - 1])]


_RULES = (
    "Causal prefill over a ragged batch: sequence b is rows cu_seqlens[b] .. cu_seqlens[b+1] - 1 of q, k, v and\n"
    "out (its length n_b = cu_seqlens[b+1] - cu_seqlens[b] >= 1; cu_seqlens[0] = 0, cu_seqlens[B] = T; queries and\n"
    "keys have the same lengths). Within a sequence, query i (0-based in it) sees its keys 0..i; nothing is seen\n"
    "across sequences. GQA: G = H // HKV; query head h reads key/value head h // G. scale = 1/sqrt(D);\n"
    "scores[i, j] = scale * dot(q[s+i, h], k[s+j, h//G]) for j <= i (s = cu_seqlens[b]); P = softmax over j;\n"
    "out[s+i, h] = sum_j P[i, j] v[s+j, h//G]. Accumulate in fp32; out is bf16.\n"
    "The lengths are ragged: 1, odd, longer than any tile, in any order; cu_seqlens changes from call to call at\n"
    "the same shape. Rows of another sequence are never part of a sequence's attention: a tile that runs past its\n"
    "sequence's end must mask those keys and must not store those query rows.\n"
    "Every shape with B >= 1, T >= B, D in {128, 256} and H a positive multiple of HKV must work: besides the\n"
    "default shape, each evaluation checks other shapes drawn at random from that space (other B, T, head dims and\n"
    "GQA groups; long sequences too, T up to 16399). All tensors are contiguous and 16-byte aligned.\n"
    "Inputs are not only N(0, 1): trials also use large scores (far above 88, where exp overflows fp32 unless\n"
    "the row max is subtracted), one dominant key per row, near-uniform rows over V with large means, and V\n"
    "values beyond fp16's range (|V| above 65504: P@V must accumulate in fp32)."
)

CONTRACT = Contract(
    tensors=(
        TensorArg("q", "in", "bf16", ("T", "H", "D"), "queries, the sequences' tokens packed one after another"),
        TensorArg("k", "in", "bf16", ("T", "HKV", "D"), "keys, packed as q"),
        TensorArg("v", "in", "bf16", ("T", "HKV", "D"), "values, packed as q"),
        TensorArg("cu_seqlens", "in", "int32", ("B+1",), "sequence b is rows cu_seqlens[b] .. cu_seqlens[b+1] - 1"),
        TensorArg("out", "out", "bf16", ("T", "H", "D")),
    ),
    sizes=("B", "T", "H", "HKV", "D"),
    rules=_RULES,
)


def check_shape(shape):
    if min(shape["B"], shape["T"], shape["H"], shape["HKV"]) < 1:
        raise ValueError("B, T, H and HKV must be positive")
    if shape["T"] < shape["B"]:
        raise ValueError("T must be at least B (every sequence has a token)")
    if shape["D"] not in HEAD_DIMS:
        raise ValueError(f"D must be one of {HEAD_DIMS}")
    if shape["H"] % shape["HKV"]:
        raise ValueError("H must be a multiple of HKV (GQA groups)")


# Drawn correctness shapes: D from HEAD_DIMS; G from GROUPS with HKV in 1..3; B in 1..6; T from B to 2500 (the
# reference's causal scores of the longest sequence, at most H * T^2, under MAX_SCORES: T shrinks). Long sequences
# (issue 31's rule): the first drawn shape of every evaluation and a third of the others have T 8193..16399 with
# B <= 2, HKV = 1 and H <= 2. Sizes the caller fixed keep their value (H or HKV: the GQA group too).
MAX_T = 2500
MAX_SCORES = 1 << 27
LONG_RATE = 1 / 3
LONG_T = (8193, 16399)
MAX_LONG_SCORES = 2 * LONG_T[1] ** 2


def draw_shape(rng, shape, fixed, long=None):
    first = long is True
    long = "T" not in fixed and (first or rng.random() < LONG_RATE)
    out = {"D": rng.choice(HEAD_DIMS), "B": rng.randint(1, 2) if long else rng.randint(1, 6)}
    out["T"] = rng.randint(*LONG_T) if long else rng.randint(out["B"], MAX_T)
    out["H"], out["HKV"] = draw_heads(rng, shape, fixed, long, GROUPS)
    out.update({k: shape[k] for k in fixed})
    bound = MAX_LONG_SCORES if long else MAX_SCORES
    if "T" not in fixed and out["H"] * out["T"] ** 2 > bound:
        out["T"] = max(out["B"], int((bound / out["H"]) ** 0.5))
    if "B" not in fixed:
        out["B"] = min(out["B"], out["T"])
    return {k: out[k] for k in SIZES}


def flops(shape) -> float:
    """Causal attention of each sequence, counted as the attention tasks count it: 4 * H * n^2 * D / 2 per sequence."""
    return 2.0 * shape["H"] * shape["D"] * sum(n * n for n in sequence_lengths(shape["B"], shape["T"]))


def min_bytes(shape) -> float:
    """q, k, v read once and out written once (bf16), and cu_seqlens."""
    T, H, HKV, D = shape["T"], shape["H"], shape["HKV"], shape["D"]
    return float(2 * T * D * (2 * H + 2 * HKV) + 4 * (shape["B"] + 1))


def ragged_inputs(shape, seed, device, kind="normal"):
    """q, k, v packed and cu_seqlens: the lengths in the seed's order, each sequence's values drawn as the causal
    attention forward draws them (forward_inputs, one sequence of that length, its own seed)."""
    import torch

    B, T, H, HKV, D = (shape[k] for k in SIZES)
    lengths = sequence_lengths(B, T)
    random.Random(seed).shuffle(lengths)
    parts = [forward_inputs({"B": 1, "H": H, "HKV": HKV, "S": n, "D": D}, seed * 7919 + b, device, kind, causal=True)
             for b, n in enumerate(lengths)]
    cu = [0]
    for n in lengths:
        cu.append(cu[-1] + n)
    packed = {name: torch.cat([p[big][0].transpose(0, 1) for p in parts]).contiguous()
              for name, big in (("q", "Q"), ("k", "K"), ("v", "V"))}
    return {**packed, "cu_seqlens": torch.tensor(cu, dtype=torch.int32, device=device)}


def prefill_reference(q, k, v, cu_seqlens, shape):
    """fp32, one sequence at a time: the causal attention forward's reference (tasks/_attention.py
    forward_reference) on that sequence's rows, as [1, heads, n, D]."""
    import torch

    out = torch.empty(q.shape, dtype=torch.float32, device=q.device)
    cu = cu_seqlens.tolist()
    for s, e in zip(cu[:-1], cu[1:]):
        one = {"B": 1, "H": shape["H"], "HKV": shape["HKV"], "S": e - s, "D": shape["D"]}
        o = forward_reference(q[s:e].transpose(0, 1)[None], k[s:e].transpose(0, 1)[None],
                              v[s:e].transpose(0, 1)[None], one, causal=True)["O"]
        out[s:e] = o[0].transpose(0, 1)
    return {"out": out}


def _cudnn_per_sequence(inputs, shape):
    """cuDNN SDPA (CUDNN_ATTENTION only), causal, one call per sequence on [1, heads, n, D] views of the packed
    tensors; the sequence bounds come from the setup, untimed."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q, k, v = inputs["q"], inputs["k"], inputs["v"]
    cu = inputs["cu_seqlens"].tolist()
    views = [(q[s:e].transpose(0, 1)[None], k[s:e].transpose(0, 1)[None], v[s:e].transpose(0, 1)[None])
             for s, e in zip(cu[:-1], cu[1:])]
    gqa = shape["H"] != shape["HKV"]

    def call():
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            for qs, ks, vs in views:
                F.scaled_dot_product_attention(qs, ks, vs, is_causal=True, enable_gqa=gqa)

    return call


TASK = Task(
    name="attn_prefill_ragged",
    title="causal prefill attention, ragged batch, bf16, head dim 128/256, GQA",
    contract=CONTRACT,
    default_shape=dict(DEFAULT_SHAPE),
    tolerance=dict(TOLERANCE),
    kind_output_scale={"large_v": {"out": FP16_BEYOND}},
    flops=flops,
    min_bytes=min_bytes,
    make_inputs=ragged_inputs,
    input_kinds=INPUT_KINDS,
    reference=lambda inputs, shape: prefill_reference(inputs["q"], inputs["k"], inputs["v"], inputs["cu_seqlens"],
                                                      shape),
    shown_reference=(prefill_reference, forward_reference, _scores, _chunks),
    reference_call="outputs = prefill_reference(q, k, v, cu_seqlens, shape)  # -> out",
    baseline=_cudnn_per_sequence,
    baseline_name="cuDNN SDPA causal forward per sequence (torch CUDNN_ATTENTION)",
    draw_shape=draw_shape,
    draw_first=lambda rng, shape, fixed: draw_shape(rng, shape, fixed, long=True),
    check_shape=check_shape,
)
