"""gemm_fp8_blockscale: C (bf16) = (A_fp8 * SA) @ (B_fp8 * SB)^T with DeepSeek-V3 / DeepGEMM "1d2d" block scales.

A [M, K] and B [N, K] are fp8 e4m3 (row-major, K contiguous); SA [M, K/128] fp32 holds one scale per 1x128 block of a
row of A, SB [ceil(N/128), K/128] fp32 one per 128x128 block of B; C [M, N] bf16. The layout is the one of DeepGEMM's
`fp8_gemm_nt` with its "1d2d" recipe (per-token A scales, per-block B scales), as its test helpers make it
(`per_token_cast_to_fp8`: scales [m, ceil(k/128)]; `per_block_cast_to_fp8`: scales [ceil(n/128), ceil(k/128)];
dequantised value = fp8 value * scale) and as the PTXBench definitions `fp8_gemm_nt_1d2d_n{N}_k{K}` state it
(A [M, K] e4m3, SF_A [M, K/128] f32, B [N, K] e4m3, SF_B [N/128, K/128] f32, fp32 accumulation folded per K block);
read with the code search, 2026-12-01. Unlike DeepGEMM's kernel entry (which wants SF_A M-major and TMA-aligned),
every tensor here is contiguous row-major: SA's K-block axis is the contiguous one.
"""

from xlang.task import Contract, Task, TensorArg

from .. import _block_scaled

BLOCK = 128  # the scale block: 1x128 of A's rows, 128x128 of B
E4M3_MAX = 448.0  # largest finite e4m3 value (OCP FP8 E4M3; PTX ISA .e4m3)


def dequantise(inputs, shape):
    # fp32 A and B with every element times its block's scale.
    M, N, K = shape["M"], shape["N"], shape["K"]
    sa = inputs["SA"].float().repeat_interleave(128, dim=1)[:, :K]
    sb = inputs["SB"].float().repeat_interleave(128, dim=0)[:N].repeat_interleave(128, dim=1)[:, :K]
    return inputs["A"].float() * sa[:M], inputs["B"].float() * sb


def reference(inputs, shape):
    # fp32 on the device the inputs live on; TF32 is off so the reference is true fp32.
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    A, B = dequantise(inputs, shape)
    return {"C": A @ B.t()}


# The error bound (Task.error_bound): |C - ref| <= atol + rtol |ref| + U_ACC(K) * (|A_deq| @ |B_deq|^T), one extra
# fp32 GEMM of the dequantised operands' absolute values, computed by the judge from its own inputs.
# Why it scales with sum_k |a_k||b_k| (the partials) and not with |C|: on Hopper the fp8 wgmma adds each 128-wide
# block's products inside the tensor core with about 14 significant bits ("the accumulation precision of FP8 GEMM on
# NVIDIA H800 GPUs is limited to retaining around 14 bits", DeepSeek-V3 technical report, arXiv 2412.19437, section
# 3.3.2; an accumulator of e8m13 whose low bits are truncated, as pytorch's FP8 GEMM write-up reads the H100's
# output), and DeepGEMM-style kernels promote that partial to fp32 once per block (Triton 3.6 on sm_90 keeps the
# whole 128-K partial in the tensor core: max_num_imprecise_acc_default = 2**30). Near cancellation the error is then
# what the truncations of the block partials leave, which |C| says nothing about: on the H200 (shared/FACTS.md,
# 2026-12-04) cuBLASLt and a per-block _scaled_mm were 3.8-4.3x the old atol/rtol 1e-2 on 'normal' inputs.
# Derivation. Truncating x to p = 14 significant bits errs by less than one unit in its last place, at most
# 2**(1-p) |x| = 2**-13 |x|. Inside a block the running partial P_j after the j-th 32-wide k-step (4 per block) is
# truncated once per step: |err_block| <= 2**-13 (|P_1| + ... + |P_4|) <= 4 * 2**-13 * T, T = sum over the block of
# |a_k||b_k| (each |P_j| <= T; equality when the block's whole mass sits in its first step). The fp8 products
# themselves are exact (4 x 4 significant bits). Promotion adds KB = K/128 scaled partials in fp32: at most
# KB * 2**-24 of sum_kb s_kb T_kb more (the standard gamma_n bound, Higham, Accuracy and Stability of Numerical
# Algorithms, section 3.1). With s_kb = SA * SB > 0, sum_kb s_kb T_kb = (|A_deq| @ |B_deq|^T)[m, n], hence
#     U_ACC(K) = 4 * 2**-13 + (K / 128) * 2**-24        (4.9e-4 at the default K).
# The reference's own fp32 error is below 1e-6 of that sum on these inputs (benchmarks/block_scaled_models.py) and
# the bound's own GEMM (all terms positive) errs by a relative K * 2**-24 of itself: both negligible. atol and rtol
# stay 1e-2: rtol for the bf16 rounding of the output (2**-8 relative, 0.39 of rtol), atol a floor near zero.
# Figures (CPU, 64x512x7168, seed 0; `python3 benchmarks/block_scaled_models.py --M 64 --N 512`, the rule's worst
# |err| / allowed, in brackets atol / rtol alone): honest fp32 partials 0.33 / 0.37 (normal / structured); the
# audit's 14-bit truncation per k-step 0.28 (1.06 with the old rule) / 0.37; 13 bits 0.29 (1.57) / 0.39; every term
# aligned to the largest and truncated to 14 bits 0.28 (1.44) / 0.40, to 13 bits 0.29 (3.12, where the H200 put
# cuBLASLt: 3.8-4.3) / 0.49. Wrong kernels (tests/test_fp8_task.py, 3 shapes of 2-32 N blocks and 2-4 K blocks):
# scale bugs 53 .. 1e9 on every kind; a bf16 running sum inside each block 5.5 / 2.1 at the default depth; a bf16
# outer accumulator 3.4 (structured) at the default depth, below 1.1 at 2-4 K blocks (a bug of deep K); dequantising
# to bf16 then an fp32 GEMM 1.2-1.9 (normal) at K <= 512 but 0.77 at the default depth: its error (each operand
# rounded to 8 bits, random in sign) is no larger there than Hopper's own fp8 accumulation, so the values cannot
# reject it; the required families do (wgmma_fp8 / tcgen05_f8f6f4, 80% of the executed MMA work). K-block bugs
# cannot show with one K block (K = 128), N-block bugs with N <= 128 (tests/test_fp8_task.py shows them passing there).
K_STEPS_PER_BLOCK = BLOCK // 32  # wgmma m64nNk32 for e4m3: four k-steps per 128-wide scale block


def accumulation_unit(K):
    """U_ACC(K): the bound's factor on sum_k |a_k||b_k| (the derivation above)."""
    return _block_scaled.accumulation_unit(K, BLOCK, K_STEPS_PER_BLOCK)


def error_bound(inputs, shape):
    # On the inputs' device, from the judge's own inputs.
    A, B = dequantise(inputs, shape)
    return _block_scaled.abs_product_bound(A, B, accumulation_unit(shape["K"]))


ERROR_BOUND_RULE = ("bound[m, n] = u * sum_k |A[m, k] * SA[m, k // 128]| * |B[n, k] * SB[n // 128, k // 128]| with "
                    "u = 4 * 2**-13 + (K / 128) * 2**-24 (Hopper's fp8 wgmma keeps about 14 significant bits of a "
                    "128-wide block's partial sum, truncated once per 32-wide k-step; the promoted partials are "
                    "summed in fp32)")


INPUT_KINDS = ("normal", "structured")
# Per-block magnitudes: each 1x128 block of A and each 128x128 block of B is drawn at 2**u times N(0, 1), u uniform in
# CENTER +- SPREAD (continuous: the scales are no powers of two), then quantised as DeepGEMM's helpers do (scale =
# block amax / 448, value = x / scale rounded to e4m3), so every block's fp8 values reach the format's top (448) and the
# scales differ from block to block by up to 2**(2 * SPREAD) per operand, 2**(4 * SPREAD) = 65536 for a product.
SPREAD = 4.0
# CENTER keeps the outputs' magnitude where atol is a floor, not a limit: near cancellation an honest kernel errs by
# what its sums of large partials leave (fp32, and on Hopper the fp8 wgmma's ~14 bits inside a 128-block), and at
# CENTER 0 that reached 0.25 of atol in fp32 alone at 512x512x7168 (median |C| 1.2e3; 2026-12-02, on CPU). At -3 the
# products are 2**-6 of that (median |C| ~20 at the default K, atol still 1/2000 of it).
CENTER = -3.0


def _quantise(x, rows_per_block):
    """x [R, K] fp32 -> (e4m3 [R, K], fp32 scales [ceil(R / rows_per_block), K / 128]), one scale per
    rows_per_block x 128 block: its amax / 448 (DeepGEMM's per_token / per_block cast)."""
    import torch

    R, K = x.shape
    rb = -(-R // rows_per_block)
    padded = torch.zeros(rb * rows_per_block, K, device=x.device)
    padded[:R] = x
    blocks = padded.view(rb, rows_per_block, K // BLOCK, BLOCK)
    scale = blocks.abs().amax(dim=(1, 3)).clamp_min(1e-30) / E4M3_MAX
    q = (blocks / scale[:, None, :, None]).view(-1, K)[:R].to(torch.float8_e4m3fn)
    return q, scale


def make_inputs(shape, seed, device, kind="normal"):
    """A, B (e4m3) and SA, SB (fp32), seeded. Kinds:
    normal: N(0, 1) values, each scale block at its own magnitude 2**u (u uniform in [-7, 1]), quantised per block
        (scale = amax / 448): a kernel that ignores the scales, uses one per tensor, per row or per K block only, or
        takes another block's, is off by up to 2**16 somewhere.
    structured: as normal, plus a shared offset per row of A and of B (|offset| in [0.5, 2], sign drawn), so the
        128 products of one block have one sign and the partial sums grow as K: an accumulator narrower than fp32
        (bf16, or fp8 wgmma results summed in bf16) drifts far beyond the tolerance.
    """
    import torch

    if kind not in INPUT_KINDS:
        raise ValueError(f"gemm_fp8_blockscale has no input kind '{kind}' (its kinds: {', '.join(INPUT_KINDS)})")
    g = torch.Generator(device=device).manual_seed(seed)
    M, N, K = shape["M"], shape["N"], shape["K"]
    KB, NB = K // BLOCK, -(-N // BLOCK)

    def rand(*size):
        return torch.rand(*size, generator=g, device=device)

    A = torch.randn(M, K, generator=g, device=device)
    B = torch.randn(N, K, generator=g, device=device)
    if kind == "structured":
        def offsets(n):
            sign = torch.randint(0, 2, (n, 1), generator=g, device=device) * 2 - 1
            return sign * (0.5 + 1.5 * rand(n, 1))

        A, B = offsets(M) + 0.5 * A, offsets(N) + 0.5 * B
    a_mag = torch.exp2(CENTER + SPREAD * (2 * rand(M, KB) - 1))
    b_mag = torch.exp2(CENTER + SPREAD * (2 * rand(NB, KB) - 1))
    A = A * a_mag.repeat_interleave(BLOCK, dim=1)
    B = B * b_mag.repeat_interleave(BLOCK, dim=0)[:N].repeat_interleave(BLOCK, dim=1)
    A8, SA = _quantise(A, 1)
    B8, SB = _quantise(B, BLOCK)
    return {"A": A8, "SA": SA.contiguous(), "B": B8, "SB": SB.contiguous()}


def baseline(inputs, shape):
    """cuBLASLt's DeepSeek-style block-scaled fp8 GEMM through torch._scaled_mm (pytorch/pytorch#158037: on Hopper with
    CUDA >= 12.9 the scaling kind is read from the scale shapes, here (BlockWise1x128, BlockWise128x128): scale_a
    [M, K/128], scale_b [K/128, N/128]). Layouts as torch's own tests give them: scale_a outer-dim (M) major; scale_b
    K-block major with that axis padded to a multiple of 4 (pytorch/ao#4229, cuBLASLt's rule). NOT YET RUN on a GPU:
    whether torch 2.11+cu130 on the H200 accepts it, and its speed, are unmeasured."""
    import torch

    A, B, SA, SB = inputs["A"], inputs["B"], inputs["SA"], inputs["SB"]
    KB, NB = SA.shape[1], SB.shape[0]
    scale_a = SA.t().contiguous().t()  # [M, KB], M contiguous
    padded = torch.zeros(NB, -(-KB // 4) * 4, dtype=torch.float32, device=SB.device)
    padded[:, :KB] = SB
    scale_b = padded[:, :KB].t()  # [KB, NB], KB contiguous
    C = torch.empty(shape["M"], shape["N"], dtype=torch.bfloat16, device=A.device)
    return lambda: torch._scaled_mm(A, B.t(), scale_a, scale_b, out_dtype=torch.bfloat16, out=C)


def check_shape(shape):
    M, N, K = shape["M"], shape["N"], shape["K"]
    if min(M, N, K) < 1:
        raise ValueError("M, N and K must be positive")
    if K % BLOCK:
        raise ValueError("K must be a multiple of 128 (one scale per 128 elements of K)")
    if N % 16:
        raise ValueError("N must be a multiple of 16 (16-byte aligned rows of C, and the vendor's fp8 rule)")


# Drawn correctness shapes: M anything from 1; N a multiple of 16 that is not a multiple of 128 (the last row block of
# SB covers fewer than 128 rows of B), K a multiple of 128; a quarter of them take (N, K) of DeepSeek-V3's GEMMs as the
# PTXBench definitions list them (fp8_gemm_nt_1d2d_n24576_k1536, _n32768_k512, _n7168_k16384, _n4096_k7168,
# _n7168_k2048) with a small M, as in decoding. M*N*K bounded so the fp32 reference stays cheap.
MAX_SIZE = 3000
MAX_MACS = 1 << 31
MODEL_NK = ((24576, 1536), (32768, 512), (7168, 16384), (4096, 7168), (7168, 2048))


def _tail16(x):
    """x rounded down to a multiple of 16 (at least 16) that is not a multiple of 128."""
    x = max(16, x - x % 16)
    return x - 16 if x % 128 == 0 else x


def draw_shape(rng, shape, fixed):
    """One shape from the contract's space; sizes in `fixed` keep shape's value."""
    if rng.random() < 0.25:
        N, K = MODEL_NK[rng.randrange(len(MODEL_NK))]
        out = {"M": rng.randint(1, 64), "N": N, "K": K}
    else:
        m = rng.randint(1, 64) if rng.random() < 0.25 else rng.randint(65, MAX_SIZE)
        n = _tail16(rng.randint(16, 128) if rng.random() < 0.2 else rng.randint(129, MAX_SIZE))
        out = {"M": m, "N": n, "K": BLOCK * rng.randint(1, MAX_SIZE // BLOCK)}
    out.update({k: shape[k] for k in fixed})
    free = [k for k in ("M", "N", "K") if k not in fixed]
    while out["M"] * out["N"] * out["K"] > MAX_MACS:
        big = [k for k in free if out[k] > {"M": 1, "N": 16, "K": BLOCK}[k]]
        if not big:
            break  # the fixed sizes alone exceed the bound: keep the smallest free sizes
        k = max(big, key=lambda k: out[k])
        out[k] = max(1, out[k] // 2) if k == "M" else _tail16(out[k] // 2) if k == "N" else \
            max(BLOCK, (out[k] // 2) // BLOCK * BLOCK)
    return out


TASK = Task(
    name="gemm_fp8_blockscale",
    title="fp8 GEMM, 1x128 / 128x128 block scales (DeepGEMM 1d2d)",
    contract=Contract(
        tensors=(
            TensorArg("A", "in", "fp8e4m3", ("M", "K")),
            TensorArg("SA", "in", "fp32", ("M", "K/128"), "(one scale per 1x128 block of a row of A)"),
            TensorArg("B", "in", "fp8e4m3", ("N", "K"), "(C = A @ B.T)"),
            TensorArg("SB", "in", "fp32", ("N/128", "K/128"), "(one scale per 128x128 block of B; N/128 rounded up)"),
            TensorArg("C", "out", "bf16", ("M", "N")),
        ),
        sizes=("M", "N", "K"),
        rules=(
            "Compute C[m, n] = sum_k (A[m, k] * SA[m, k // 128]) * (B[n, k] * SB[n // 128, k // 128]) with fp32\n"
            "accumulation, rounded to bf16. A and B are fp8 e4m3 (torch.float8_e4m3fn, CUDA __nv_fp8_e4m3), K contiguous;\n"
            "SA [M, K/128] and SB [ceil(N/128), K/128] are fp32, row-major (the K-block index is the contiguous one):\n"
            "DeepGEMM's 1d2d layout (per-token scales of A, per-128x128-block scales of B). Within one 128-wide K block\n"
            "the scales are constant, so sum the 128 products first and multiply the partial sum by SA * SB.\n"
            "Every shape with M >= 1, N a positive multiple of 16 and K a positive multiple of 128 must work (tails in\n"
            "M and N included: the last row block of SB may cover fewer than 128 rows of B): besides the default shape,\n"
            "each evaluation checks other shapes drawn at random from that whole space. The scales differ from block to\n"
            "block by orders of magnitude and the fp8 values use the format's whole range; trials also use rows with\n"
            "shared offsets, so every scale must be applied to its own block and the accumulation must really be fp32.\n"
            "All tensors are contiguous and 16-byte aligned."
        ),
    ),
    # PTXBench's fp8_gemm_nt_1d2d_n4096_k7168 at M = 4096.
    default_shape={"M": 4096, "N": 4096, "K": 7168},
    # atol / rtol below, plus the error bound above (error_bound, ERROR_BOUND_RULE; the prompt states it). Before
    # the bound (2026-12-04): measured (python3 benchmarks/fp8_blockscale_precision.py, CPU, 2026-12-01, again 2026-12-02 with CENTER -3:
    # atol needed 9.4e-6, ratio 0.388; 10 drawn shapes x 2 seeds per kind):
    # an honest kernel (fp32 partial sums per 128-block, scaled, summed in fp32, rounded to bf16) errs against the fp32
    # reference by the bf16 rounding of the output, at most 2**-8 relative (max |err| / |ref| 0.0039 where |ref| >= 1),
    # and near cancellation by what fp32 accumulation leaves (|err| - 0.01 |ref| <= 6e-4): 0.39 of this tolerance at
    # worst. The wrong kernels (scales ignored, averaged, taken from another block; bf16 accumulation) exceed it by
    # orders of magnitude (tests/test_fp8_task.py). rtol 1e-2 leaves 2.5x over the bf16 rounding for Hopper's fp8
    # accumulation inside a 128-block (about 14 bits kept, DeepSeek-V3 report; not measured here); atol 1e-2 is far
    # below the outputs' typical magnitude (median |C| ~ 20 at the default K with these inputs; CENTER above says why
    # they sit there, tests/test_block_scaled_depth.py checks it at the default depth).
    tolerance={"atol": 1e-2, "rtol": 1e-2},
    error_bound=error_bound,
    error_bound_rule=ERROR_BOUND_RULE,
    math_type="fp8",  # the roofline's compute ceiling: the fp8 tensor-core rate
    flops=lambda s: 2.0 * s["M"] * s["N"] * s["K"],
    min_bytes=lambda s: (s["M"] * s["K"] + s["N"] * s["K"] + 2.0 * s["M"] * s["N"]
                         + 4.0 * (s["M"] + -(-s["N"] // BLOCK)) * (s["K"] // BLOCK)),
    make_inputs=make_inputs,
    reference=reference,
    shown_reference=(dequantise, reference),
    reference_call="outputs = reference({'A': A, 'SA': SA, 'B': B, 'SB': SB}, {'M': M, 'N': N, 'K': K})  # -> C",
    baseline=baseline,
    baseline_name="cuBLASLt block-scaled fp8 GEMM (torch _scaled_mm, 1x128 / 128x128 scales)",
    draw_shape=draw_shape,
    check_shape=check_shape,
    input_kinds=INPUT_KINDS,
    suites_file="gemm/suites.toml",  # the same (M, N, K) layers as the bf16 gemm task: every K a multiple of 128
    required={"hopper": ("wgmma_fp8", "tma"), "blackwell": ("tcgen05_f8f6f4", "tma")},
)
