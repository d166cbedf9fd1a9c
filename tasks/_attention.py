"""Shared by the four attention tasks: contract, reference math, inputs, cuDNN baselines and the FA4 peer.

Variants are parameters, not copies: head dim D (64, 96, 128) and GQA (H query heads sharing HKV key/value
heads, H a multiple of HKV) are sizes of the same task; causal is the one switch between task folders.
"""

from __future__ import annotations

import math

from xlang.task import Contract, Peer, SolutionVariant, Task, TensorArg

HEAD_DIMS = (64, 96, 128)
DEFAULT_SHAPE = {"B": 4, "H": 48, "HKV": 48, "S": 4096, "D": 128}
TOLERANCE = {"atol": 1e-2, "rtol": 1e-2}
# The causal backward, with cuDNN's own error as the yardstick (H200, 2026-11-30, B4 H48 S4096 D128 against the
# fp32 reference, benchmarks/expert_probe.py --vendor, inputs normal and flat, 3 seeds each): cuDNN's backward
# fails atol = rtol = 1e-2 on 1 of 100,663,296 dQ elements (flat, seed 1234) and comes within 0.0017 of it on every
# input set; its worst errors (dQ 0.0174, dV 0.0202) and the Triton expert's (0.0190, 0.0188) are alike. The
# early query rows see few keys, so their gradients are large and their bf16 rounding of dS and O counts most.
# The non-causal backward's worst error there is 0.0027: it keeps 1e-2.
CAUSAL_BACKWARD_TOLERANCE = {"atol": 2e-2, "rtol": 2e-2}
# LSE is a log: a relative 1e-2 on a value of ~9.5 (S = 8192) let an LSE ~10% off in its normaliser pass (0.095
# absolute). It is checked absolutely, with a small relative part for large scores. The honest error, measured with
# a CPU emulation of an fp32 online-softmax kernel (its own summation order of Q K^T, key blocks of 128, LSE = m +
# log l) against the fp32 reference, every forward kind, S 333..16383, D 64/96/128, causal or not
# (`python3 benchmarks/attn_precision.py --rows 64 --seeds 1`, 2026-12-01): at most 9.5e-7 where |LSE| <= 11, at
# most 3.8e-5 where |LSE| ~ 120-212 (large, peaked). The tolerance is then 1e-3 + 1e-5 |LSE|: over 1000x the
# former, ~60x the latter; an LSE 0.1% off in its normaliser (1e-3) already fails. Never measured on a GPU kernel.
LSE_TOLERANCE = {"atol": 1e-3, "rtol": 1e-5}

_Q = TensorArg("Q", "in", "bf16", ("B", "H", "S", "D"))
_K = TensorArg("K", "in", "bf16", ("B", "HKV", "S", "D"))
_V = TensorArg("V", "in", "bf16", ("B", "HKV", "S", "D"))
_O = TensorArg("O", "out", "bf16", ("B", "H", "S", "D"))
_LSE = TensorArg("LSE", "out", "fp32", ("B", "H", "S"), "natural-log sum of exp(scaled scores) per query row")

_SHAPE_RULES = (
    "Every shape with B, S >= 1 (any S, tails included), D in {64, 96, 128} and H a positive multiple of HKV\n"
    "(GQA: query head h reads key/value head h // (H // HKV)) must work: besides the default shape, each\n"
    "evaluation checks other shapes drawn at random from that whole space (other S, B, head dims and GQA\n"
    "groups; long sequences too, S up to 16399). All tensors are contiguous and 16-byte aligned.\n"
)
_FORWARD_VALUES = (
    "Inputs are not only N(0, 1): trials also use large scores (far above 88, where exp overflows fp32 unless\n"
    "the row max is subtracted), one dominant key per row, near-uniform rows over V with large means, and V\n"
    "values beyond fp16's range (|V| above 65504: P@V must accumulate in fp32, as the contract says)."
)
_BACKWARD_VALUES = (
    "Inputs are not only N(0, 1): trials also use near-uniform rows (long fp32 sums), and Q, V scaled up and K\n"
    "down by powers of two (the same scores; dP = dO V^T and dK beyond fp16's range: accumulate in fp32)."
)


def _math(causal: bool) -> str:
    mask = "keys j > i are masked out (causal, query i sees keys 0..i)" if causal else "no mask"
    return (
        f"scale = 1/sqrt(D); scores[i, j] = scale * dot(Q[b,h,i], K[b,h//G,j]) with G = H // HKV; {mask};\n"
        "P = softmax(scores) over j; O[b,h,i] = sum_j P[i,j] V[b,h//G,j]; LSE[b,h,i] = logsumexp_j scores[i,j].\n"
    )


def forward_contract(causal: bool) -> Contract:
    return Contract(
        tensors=(_Q, _K, _V, _O, _LSE),
        sizes=("B", "H", "HKV", "S", "D"),
        rules=_math(causal) + "O is bf16, LSE fp32 (accumulate in fp32).\n" + _SHAPE_RULES + _FORWARD_VALUES,
    )


def backward_contract(causal: bool) -> Contract:
    return Contract(
        tensors=(
            TensorArg("dO", "in", "bf16", ("B", "H", "S", "D"), "gradient of the loss with respect to O"),
            _Q, _K, _V,
            TensorArg("O", "in", "bf16", ("B", "H", "S", "D"), "the forward output"),
            TensorArg("LSE", "in", "fp32", ("B", "H", "S"), "the forward log-sum-exp"),
            TensorArg("dQ", "out", "bf16", ("B", "H", "S", "D")),
            TensorArg("dK", "out", "bf16", ("B", "HKV", "S", "D"), "summed over the G query heads sharing it"),
            TensorArg("dV", "out", "bf16", ("B", "HKV", "S", "D"), "summed over the G query heads sharing it"),
        ),
        sizes=("B", "H", "HKV", "S", "D"),
        rules=(
            "Backward of the forward attention below: given dO, return dQ, dK, dV (bf16; accumulate in fp32).\n"
            + _math(causal) + _SHAPE_RULES + _BACKWARD_VALUES
        ),
    )


def check_shape(shape):
    if min(shape["B"], shape["S"], shape["H"], shape["HKV"]) < 1:
        raise ValueError("B, H, HKV and S must be positive")
    if shape["D"] not in HEAD_DIMS:
        raise ValueError(f"D must be one of {HEAD_DIMS}")
    if shape["H"] % shape["HKV"]:
        raise ValueError("H must be a multiple of HKV (GQA groups)")


# Drawn correctness shapes. D from HEAD_DIMS; the GQA group G = H // HKV from GROUPS with HKV in 1..3; B in 1..3;
# S in 1..MAX_S and never a multiple of 16 (a tail against every usual tile; the timed default covers whole
# tiles); B*H*S*S bounded so the fp32 reference stays cheap (B, then S, shrink). Sizes the caller fixed keep
# their value, and fixing H or HKV keeps the group: `--shape D=96,HKV=8` (H=48) draws shapes with D=96, HKV=8,
# H=48, so the GQA variant asked for is the one checked.
# Long sequences (issue 31: a kernel cheated only at S >= 8192): the first drawn shape of every evaluation is long
# with S from FIRST_LONG_S (above 8192; half of them from LONG_TOP, around 16384), and any other is long with
# LONG_RATE, S then from LONG_S (half from LONG_TOP). A long shape has B = 1 and H = G in {1, 2}, so B*H*S*S stays
# under MAX_LONG_SCORES (the reference's score matrices ~2 GiB, a trial a fraction of a second on the H200:
# estimated, not measured); with H or HKV fixed the bound shrinks S instead, and with S fixed none is long.
GROUPS = (1, 2, 4, 6, 8)
MAX_S = 2500
MAX_SCORES = 1 << 27
LONG_RATE = 1 / 3
LONG_S = (4097, 16399)
FIRST_LONG_S = (8193, 16399)
LONG_TOP = (16369, 16399)
MAX_LONG_SCORES = 2 * LONG_S[1] ** 2


def _draw_s(rng, hi=MAX_S, lo=1):
    while True:
        if lo > 1:
            s = rng.randint(lo, hi)
        else:
            s = rng.randint(1, min(hi, 200)) if hi <= 200 or rng.random() < 0.25 else rng.randint(201, hi)
        if s % 16 or s < 16:
            return s


def _draw_long_s(rng, lo=LONG_S[0]):
    return _draw_s(rng, *reversed(LONG_TOP)) if rng.random() < 0.5 else _draw_s(rng, LONG_TOP[0] - 1, lo)


def draw_heads(rng, shape, fixed, long: bool, groups=GROUPS) -> tuple[int, int]:
    """(H, HKV) of a drawn shape: a fixed H or HKV keeps the shape's group size H / HKV; a long sequence gets one
    KV head and a group of 1 or 2 (its scores stay affordable); else a group from `groups` and 1..3 KV heads."""
    if "H" in fixed or "HKV" in fixed:
        group = shape["H"] // shape["HKV"]
        hkv = shape["HKV"] if "HKV" in fixed else shape["H"] // group
    elif long:
        group, hkv = rng.choice((1, 2)), 1
    else:
        group, hkv = rng.choice(groups), rng.randint(1, 3)
    return hkv * group, hkv


def draw_shape(rng, shape, fixed, long=None):
    """One shape from the contract's space; sizes in `fixed` keep shape's value (H or HKV: the group too).
    long=True: a long sequence (S from FIRST_LONG_S) unless S is fixed; None: long with LONG_RATE."""
    first = long is True
    long = "S" not in fixed and (first or rng.random() < LONG_RATE)
    s = (_draw_long_s(rng, FIRST_LONG_S[0] if first else LONG_S[0]) if long else _draw_s(rng))
    out = {"D": rng.choice(HEAD_DIMS), "B": 1 if long else rng.randint(1, 3), "S": s}
    out["H"], out["HKV"] = draw_heads(rng, shape, fixed, long)
    out.update({k: shape[k] for k in fixed})
    bound = MAX_LONG_SCORES if long else MAX_SCORES
    if "B" not in fixed:
        while out["B"] > 1 and out["B"] * out["H"] * out["S"] ** 2 > bound:
            out["B"] -= 1
    if "S" not in fixed and out["B"] * out["H"] * out["S"] ** 2 > bound:
        out["S"] = _draw_s(rng, max(1, int((bound / (out["B"] * out["H"])) ** 0.5)))
    return {k: out[k] for k in ("B", "H", "HKV", "S", "D")}


def forward_flops(causal: bool):
    return lambda s: 4.0 * s["B"] * s["H"] * s["S"] * s["S"] * s["D"] * (0.5 if causal else 1.0)


def backward_flops(causal: bool):
    return lambda s: 2.5 * forward_flops(causal)(s)


# ---------------------------------------------------------------------------------------------------------
# Reference: fp32 (no TF32), chunked over (batch, head group) so the score matrix of the default shape
# (4 x 48 x 4096 x 4096) never has to exist at once.


def _chunks(shape, budget_elems=1 << 28):
    B, H, HKV, S = shape["B"], shape["H"], shape["HKV"], shape["S"]
    group = H // HKV
    kv_per_chunk = max(1, budget_elems // (group * S * S))
    for b in range(B):
        for k0 in range(0, HKV, kv_per_chunk):
            k1 = min(HKV, k0 + kv_per_chunk)
            yield b, k0, k1, k0 * group, k1 * group


def _scores(q, k, scale, causal):
    import torch

    s = (q @ k.transpose(-1, -2)) * scale
    if causal:
        n = s.shape[-1]
        s.masked_fill_(torch.ones(n, n, dtype=torch.bool, device=s.device).triu_(1), float("-inf"))
    return s


def forward_reference(Q, K, V, shape, causal):
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    group = shape["H"] // shape["HKV"]
    O = torch.empty(Q.shape, dtype=torch.float32, device=Q.device)
    LSE = torch.empty(Q.shape[:-1], dtype=torch.float32, device=Q.device)
    scale = 1.0 / math.sqrt(shape["D"])
    for b, k0, k1, h0, h1 in _chunks(shape):
        q = Q[b, h0:h1].float()
        k = K[b, k0:k1].float().repeat_interleave(group, dim=0)
        v = V[b, k0:k1].float().repeat_interleave(group, dim=0)
        s = _scores(q, k, scale, causal)
        lse = torch.logsumexp(s, dim=-1)
        O[b, h0:h1] = torch.exp(s - lse[..., None]) @ v
        LSE[b, h0:h1] = lse
    return {"O": O, "LSE": LSE}


def backward_reference(dO, Q, K, V, shape, causal):
    """Exact gradients of the fp32 forward (recomputed here, not taken from the bf16 O input)."""
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    group = shape["H"] // shape["HKV"]
    dQ = torch.empty(Q.shape, dtype=torch.float32, device=Q.device)
    dK = torch.zeros(K.shape, dtype=torch.float32, device=Q.device)
    dV = torch.zeros(V.shape, dtype=torch.float32, device=Q.device)
    scale = 1.0 / math.sqrt(shape["D"])
    for b, k0, k1, h0, h1 in _chunks(shape):
        q, do = Q[b, h0:h1].float(), dO[b, h0:h1].float()
        k = K[b, k0:k1].float().repeat_interleave(group, dim=0)
        v = V[b, k0:k1].float().repeat_interleave(group, dim=0)
        s = _scores(q, k, scale, causal)
        p = torch.softmax(s, dim=-1)
        o = p @ v
        dv = p.transpose(-1, -2) @ do
        dp = do @ v.transpose(-1, -2)
        ds = p * (dp - (do * o).sum(-1, keepdim=True))
        dQ[b, h0:h1] = (ds @ k) * scale
        dk = (ds.transpose(-1, -2) @ q) * scale
        # Sum the G query heads of each GQA group back onto their shared key/value head.
        dK[b, k0:k1] = dk.unflatten(0, (k1 - k0, group)).sum(1)
        dV[b, k0:k1] = dv.unflatten(0, (k1 - k0, group)).sum(1)
    return {"dQ": dQ, "dK": dK, "dV": dV}


# ---------------------------------------------------------------------------------------------------------
# Inputs: bf16 values the contract allows, in several distributions (the judge cycles through INPUT_KINDS
# across trials). dO is N(0, 1) for every kind.

INPUT_KINDS = ("normal", "large", "peaked", "flat", "large_v")
# The backward recomputes P from the given LSE, so large or peaked scores cannot overflow it; what they do is
# amplify the bf16 rounding of dS and of the given O (which the contract allows) past the tolerance, in dQ/dK
# (measured with an FA2-style emulation). Its trials use near-uniform rows besides N(0, 1), and "scaled": the
# normal kind with Q and V multiplied and K divided by powers of two. Scores are the same, every gradient scales
# by a power of two (dV not at all), so an honest kernel's relative errors are the normal kind's; what it adds is
# range: dP = dO V^T and dK exceed 65504, so an fp16 accumulator overflows. Offsets in V cannot be used there (they
# cancel in dP - rowsum(dO * O) and leave the bf16 rounding of the given O dominant), nor larger scores.
BACKWARD_INPUT_KINDS = ("normal", "flat", "scaled")
# Powers of two (exact in bf16) for "large_v" and "scaled": 2^16 is past fp16's largest finite value (65504).
FP16_BEYOND = 2.0 ** 16
SCALED_Q, SCALED_K, SCALED_V = 2.0 ** 4, 2.0 ** -4, 2.0 ** 13


def _randn(shape_tuple, g, device):
    import torch

    return torch.randn(*shape_tuple, generator=g, device=device).to(torch.bfloat16)


def forward_inputs(shape, seed, device, kind="normal", causal=False, backward=False):
    """Q, K, V, seeded. Kinds:
    normal: N(0, 1).
    large: Q = 1 + N(0,1), K = b + N(0,1) with b*sqrt(D) = 200: scaled scores ~ 200 +- 25 per row (spread ~1.4
        within a row): exp(score) overflows fp32 (above ~88.7) unless the row max is subtracted first.
    peaked: query i points at one key j*(i) (one it may see: j* <= i when causal), margin 10..120 over the rest:
        softmax is nearly one-hot at a random position, so a row max taken from part of the row overflows.
    flat: Q ~ N(0, 0.02^2): near-uniform rows, O is the mean of V over up to S keys; for the forward V has a
        per-channel offset (|offset| 1..3) so that mean is large and a bf16 row sum or output accumulator
        drifts (the backward keeps V ~ N(0, 1): an offset cancels in dP - rowsum(dO * O) and leaves the bf16
        rounding of O dominant).
    large_v (forward): Q, K normal; V as in flat times 2^16, so |V| ~ 65536..300000: the running P@V
        accumulator, whose largest term is the row's top key with weight exp(0) = 1, passes fp16's 65504 on every
        row (Inf), while an fp32 accumulator and the bf16 output hold it with the flat kind's relative error.
    scaled (backward): Q * 2^4, K * 2^-4 (scores unchanged), V * 2^13: |dP| = |dO V^T| ~ 2^13 sqrt(D) and dK
        ~ 2^17 x the normal kind's, beyond fp16; every relative error an honest kernel makes is the normal kind's.
    """
    import torch

    g = torch.Generator(device=device).manual_seed(seed)
    B, H, HKV, S, D = (shape[k] for k in ("B", "H", "HKV", "S", "D"))
    q = torch.randn(B, H, S, D, generator=g, device=device)
    k = torch.randn(B, HKV, S, D, generator=g, device=device)
    v = torch.randn(B, HKV, S, D, generator=g, device=device)
    if kind == "large":
        # Every key row has element mean exactly 0.5 (before rounding), every query row ~ 400/sqrt(D): the
        # scaled score is 200 + 0.5 N(0,1) per row plus N(0,1) within it. The large component sits in Q, so
        # the backward's dK (which carries it) stays relative and dQ sees keys of mean 0.5 only.
        q, k = q + 400.0 / math.sqrt(D), k - k.mean(-1, keepdim=True) + 0.5
    elif kind == "peaked":
        group = H // HKV
        u = torch.rand(B, H, S, generator=g, device=device)
        limit = (torch.arange(S, device=device) + 1.0) if causal else torch.full((S,), float(S), device=device)
        j = (u * limit).long().clamp_max(S - 1)  # the dominant key of each query row
        margin = 10.0 + 110.0 * torch.rand(B, H, S, 1, generator=g, device=device)
        kk = k.to(torch.bfloat16).float().repeat_interleave(group, dim=1)
        target = torch.gather(kk, 2, j[..., None].expand(B, H, S, D))
        # scale * dot(q, target) = margin; the other keys score ~ margin * N(0, 1/D)
        q = target * (margin * math.sqrt(D) / (target * target).sum(-1, keepdim=True)) + 0.1 * q
    elif kind == "flat":
        offset = torch.rand(B, HKV, 1, D, generator=g, device=device) * 2 + 1
        sign = torch.randint(0, 2, (B, HKV, 1, D), generator=g, device=device) * 2 - 1
        q = 0.02 * q
        if not backward:
            v = sign * offset + 0.5 * v
    elif kind == "large_v" and not backward:
        offset = torch.rand(B, HKV, 1, D, generator=g, device=device) * 2 + 1
        sign = torch.randint(0, 2, (B, HKV, 1, D), generator=g, device=device) * 2 - 1
        v = FP16_BEYOND * (sign * offset + 0.5 * v)
    elif kind == "scaled" and backward:
        q, k, v = q * SCALED_Q, k * SCALED_K, v * SCALED_V
    elif kind != "normal":
        kinds = BACKWARD_INPUT_KINDS if backward else INPUT_KINDS
        raise ValueError(f"attention has no input kind '{kind}' (its kinds: {', '.join(kinds)})")
    return {"Q": q.to(torch.bfloat16), "K": k.to(torch.bfloat16), "V": v.to(torch.bfloat16)}


def backward_inputs(shape, seed, device, causal, kind="normal"):
    import torch

    inputs = forward_inputs(shape, seed, device, kind, causal, backward=True)
    g = torch.Generator(device=device).manual_seed(seed + 7919)
    fwd = forward_reference(inputs["Q"], inputs["K"], inputs["V"], shape, causal)
    B, H, S, D = shape["B"], shape["H"], shape["S"], shape["D"]
    return {"dO": _randn((B, H, S, D), g, device), **inputs,
            "O": fwd["O"].to(torch.bfloat16), "LSE": fwd["LSE"]}


# ---------------------------------------------------------------------------------------------------------
# Vendor baselines: cuDNN attention through torch's SDPA (the CUDNN_ATTENTION backend, nothing else allowed).


def _sdpa(q, k, v, causal):
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=q.shape[1] != k.shape[1])


def forward_baseline(inputs, causal):
    q, k, v = inputs["Q"], inputs["K"], inputs["V"]
    return lambda: _sdpa(q, k, v, causal)


def backward_baseline(inputs, causal):
    import torch

    q, k, v = (inputs[n].detach().requires_grad_() for n in ("Q", "K", "V"))
    out = _sdpa(q, k, v, causal)
    dO = inputs["dO"]
    return lambda: torch.autograd.grad(out, (q, k, v), dO, retain_graph=True)


# ---------------------------------------------------------------------------------------------------------
# The peer: FlashAttention 4 (the flash-attn-4 wheel, CuTe DSL), called as a library. Its layout is
# (B, S, H, D); ours is (B, H, S, D) contiguous, so it gets transposed views of the judge's buffers (no copy: its
# kernels read them through strides, as they allow any aligned stride but the last). Like the vendor's, its
# setup runs once per buffer set, untimed (xlang.profiler.runner caches the call).


def _fa4(q, k, v, causal):
    from flash_attn.cute import flash_attn_func

    out = flash_attn_func(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), causal=causal)
    return out[0] if isinstance(out, tuple) else out  # (out, lse) in some releases


def fa4_forward(inputs, causal):
    q, k, v = inputs["Q"], inputs["K"], inputs["V"]
    return lambda: _fa4(q, k, v, causal)


def fa4_backward(inputs, causal):
    """FA4's backward kernels only, as backward_baseline times cuDNN's: the forward runs once here, untimed, and
    each call is torch autograd into FA4's backward (its preprocess, main and postprocess kernels)."""
    import torch

    q, k, v = (inputs[n].detach().requires_grad_() for n in ("Q", "K", "V"))
    out = _fa4(q, k, v, causal)
    dO = inputs["dO"].transpose(1, 2)
    return lambda: torch.autograd.grad(out, (q, k, v), dO, retain_graph=True)


def fa4_peer(backward: bool, causal: bool) -> Peer:
    return Peer(name="fa4", display="FA4", distributions=("flash-attn-4",), modules=("flash_attn.cute",),
                call=(lambda inputs, shape: fa4_backward(inputs, causal)) if backward
                else (lambda inputs, shape: fa4_forward(inputs, causal)))


def make_task(name: str, backward: bool, causal: bool) -> Task:
    kind = "backward" if backward else "forward"
    return Task(
        name=name,
        title=f"attention {kind}{' (causal)' if causal else ''}, bf16, head dim 64/96/128, GQA",
        contract=backward_contract(causal) if backward else forward_contract(causal),
        default_shape=dict(DEFAULT_SHAPE),
        tolerance=dict(CAUSAL_BACKWARD_TOLERANCE if backward and causal else TOLERANCE),
        output_tolerance={} if backward else {"LSE": dict(LSE_TOLERANCE)},
        kind_output_scale={"scaled": {"dQ": SCALED_V * SCALED_K, "dK": SCALED_V * SCALED_Q}} if backward
        else {"large_v": {"O": FP16_BEYOND}},
        flops=backward_flops(causal) if backward else forward_flops(causal),
        make_inputs=(lambda shape, seed, device, kind="normal": backward_inputs(shape, seed, device, causal, kind))
        if backward else (lambda shape, seed, device, kind="normal": forward_inputs(shape, seed, device, kind, causal)),
        input_kinds=BACKWARD_INPUT_KINDS if backward else INPUT_KINDS,
        reference=(lambda inputs, shape: backward_reference(
            inputs["dO"], inputs["Q"], inputs["K"], inputs["V"], shape, causal)) if backward
        else (lambda inputs, shape: forward_reference(inputs["Q"], inputs["K"], inputs["V"], shape, causal)),
        baseline=(lambda inputs, shape: backward_baseline(inputs, causal)) if backward
        else (lambda inputs, shape: forward_baseline(inputs, causal)),
        baseline_name=f"cuDNN SDPA {kind} (torch CUDNN_ATTENTION)",
        peers=(fa4_peer(backward, causal),),
        shown_reference=((backward_reference if backward else forward_reference), _scores, _chunks),
        reference_call=(f"outputs = backward_reference(dO, Q, K, V, shape, causal={causal})  # -> dQ, dK, dV"
                        if backward else f"outputs = forward_reference(Q, K, V, shape, causal={causal})  # -> O, LSE"),
        # The causal experts are the non-causal ones with their causal switch on (CAUSAL in Python, XL_CAUSAL in CUDA).
        solution_variant=SolutionVariant(name.removesuffix("_causal"), {"CAUSAL": "True", "XL_CAUSAL": "1"})
        if causal else None,
        draw_shape=draw_shape,
        draw_first=lambda rng, shape, fixed: draw_shape(rng, shape, fixed, long=True),
        check_shape=check_shape,
        suites_file="_attention_suites.toml",  # one file for the four tasks: the same sizes, the same models
        # The backward experts recompute: Triton's FA2 split does 1.40-1.44x the task's FLOPs on wgmma, 1.87x at
        # D=96 (padded to 128), at >= 99.0% share (reports/h200-reference, harness 4). A 2.5x cap keeps 1.3x margin
        # over that; the 90% share then leaves other math at most 2.5 * 0.1 / 0.9 = 0.28x the task.
        **({"min_tc_share": 0.9, "tc_flops_ratio": (0.5, 2.5)} if backward else {}),
    )
