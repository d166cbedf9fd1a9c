"""gemm_nvfp4: C (bf16) = dequant(A) @ dequant(B)^T in the NVFP4 format (Blackwell-first).

NVFP4 (NVIDIA's 4-bit format, served by cuBLASLt as CUBLASLT_MATMUL_MATRIX_SCALE_VEC16_UE4M3): e2m1 elements (one sign,
two exponent, one mantissa bit: 0, 0.5, 1, 1.5, 2, 3, 4, 6 and their negatives), 16 consecutive elements of K sharing
one UE4M3 scale (an fp8 e4m3 value, positive). A [M, K/2] and B [N, K/2] are bytes holding two e2m1 codes each, packed
along K: element 2j in the LOW nibble (bits 0-3) and element 2j + 1 in the high nibble of byte j (Triton's
tl.dot_scaled packing, "first element in lower bits"). SA [M, K/16] and SB [N, K/16] are the e4m3 scales of each 1x16
block of a row, row-major. Blackwell's tcgen05.mma kind::mxf4nvf4 .block_scale.scale_vec::4X reads exactly such scales
(PTX ISA 9.x, 9.7.16.10.7 "Block Scaling" and its table of valid scale_vectorsize combinations,
#tcgen05-mma-scale-valid-comb: ue4m3 scale factors, M x 4 of them for A per 64-wide MMA step, one per 16 elements of
K; the instruction descriptor's scale-type bit says ue4m3; their tensor-memory layout is the kernel's business).

NVIDIA's NVFP4 recipe has a second level, one fp32 scale per tensor, which this task leaves out: no MMA reads it (the
tcgen05.mma block-scaled kinds have no such operand; cuBLASLt applies it as a scalar alpha in the epilogue), so it adds
one multiply and no instruction the task could require, and the drawn block scales here already span the data's range.
Hopper has no fp4 MMA: a Hopper kernel dequantises (exactly, to fp16 or bf16) and uses the 16-bit wgmma
(solutions/triton_hopper.py). No GPU of either kind has run this task: static (census) only, with CPU checks.
"""

from xlang.task import Contract, Task, TensorArg

from .. import _block_scaled

from ..gemm_mxfp8 import draw_shape  # the same shape space: tails in M and N, K a multiple of 128, N of 16

BLOCK = 16  # elements per NVFP4 scale block
E2M1_MAX = 6.0
E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)  # magnitude of codes 0..7; bit 3 of a code is the sign


def unpack_e2m1(packed):
    """u8 [R, K/2] -> fp32 [R, K]: the e2m1 values, element 2j from the low nibble of byte j, 2j + 1 from the high."""
    import torch

    codes = torch.stack((packed & 0xF, packed >> 4), dim=-1).flatten(-2).long()
    magnitude = torch.tensor((0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0), device=packed.device)[codes & 7]
    return torch.where(codes >= 8, -magnitude, magnitude)


def dequantise(inputs):
    # fp32 A and B with every element times its 1x16 block's e4m3 scale.
    sa = inputs["SA"].float().repeat_interleave(16, dim=1)
    sb = inputs["SB"].float().repeat_interleave(16, dim=1)
    return unpack_e2m1(inputs["A"]) * sa, unpack_e2m1(inputs["B"]) * sb


def reference(inputs, shape):
    # fp32 on the device the inputs live on; TF32 is off so the reference is true fp32.
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    A, B = dequantise(inputs)
    return {"C": A @ B.t()}


# The error bound (Task.error_bound): |C - ref| <= atol + rtol |ref| + U_ACC(K) * (|A_deq| @ |B_deq|^T), computed by
# the judge from its own inputs (one extra fp32 GEMM). Hopper has no fp4 MMA: a kernel decodes exactly to fp16 / bf16
# and runs the 16-bit wgmma with fp32 accumulators. Blackwell's tcgen05.mma kind::mxf4nvf4 (K = 64 per instruction,
# four 16-wide scale blocks): the PTX ISA gives the form (A * scale_A) * (B * scale_B) + D with D .f32 in tensor
# memory and states no internal precision (searched 2026-12-04: 9.7.16.10.7 "Block Scaling" and the tcgen05.mma
# pages say nothing of it), so it is bounded conservatively as no better than Hopper's fp8 tensor core (about 14
# significant bits, truncated: DeepSeek-V3 technical report, arXiv 2412.19437, section 3.3.2): one truncation of each
# instruction's scaled sum before it meets the fp32 accumulator errs by less than 2**-13 of the sum of its 64 scaled
# |a_k||b_k|, and the K/16 scaled block partials are added in fp32 (at most K/16 * 2**-24 more):
#     U_ACC(K) = 2**-13 + (K / 16) * 2**-24        (1.5e-4 at the default K).
# If the hardware also truncated its fp32 accumulator at each instruction, no bound of this form would hold: a
# B200 measurement decides (none yet). Cost of the conservatism: a 16-block of e2m1 products needs at most 12 bits,
# so a bf16 running sum inside a block errs little and now sits at 3.5 (normal) / 0.47 (structured) of the rule
# (149 with atol / rtol alone; the bf16 outer accumulator 21.5 / 10.7). Figures: CPU, 64x512x7168, seed 0,
# `python3 benchmarks/block_scaled_models.py --M 64 --N 512` (honest 0.35 / 0.38 for every model: these partials are
# exact at 14 bits); `python3 tasks/gemm_nvfp4/verify/tolerance.py` (small shapes, the rule): honest 0.384, the
# reference against fp64 0.0005, the wrong kernels 16.7 (A's nibbles swapped) .. 795 (scales ignored).


def accumulation_unit(K):
    """U_ACC(K): the bound's factor on sum_k |a_k||b_k| (the derivation above)."""
    return _block_scaled.accumulation_unit(K, BLOCK)


def error_bound(inputs, shape):
    # On the inputs' device, from the judge's own inputs.
    A, B = dequantise(inputs)
    return _block_scaled.abs_product_bound(A, B, accumulation_unit(shape["K"]))


ERROR_BOUND_RULE = ("bound[m, n] = u * sum_k |a(m, k) * SA[m, k // 16]| * |b(n, k) * SB[n, k // 16]| with "
                    "u = 2**-13 + (K / 16) * 2**-24 (a block-scaled tensor core taken to keep about 14 significant "
                    "bits of each instruction's scaled sum; the partials are summed in fp32)")


INPUT_KINDS = ("normal", "structured")
# Block magnitudes 2**u, u an integer in [LOW_EXP, HIGH_EXP]: 2**8 per operand, 2**16 for a product. Low enough that
# an honest kernel's fp32 summation near cancellation stays far below atol: at [-4, 8] (2**12 per operand) it reached
# 6.7x the tolerance on 512x512x7168 (2026-12-02, on CPU; 4-7 elements of 262,144 failed an honest in-order fp32
# accumulation), at [-4, 4] 0.22 of it; at [-5, 3] less again. Not lower: below u = -5, amax / 6 falls deep into e4m3's
# subnormals (2**-9 steps) and the scales would lose their mantissas.
LOW_EXP, HIGH_EXP = -5, 3
SCALE_MIN = 2.0 ** -9  # e4m3's smallest subnormal: a scale never rounds to zero


def _round_e2m1(x):
    """fp32 -> e2m1 codes (0..15), round to nearest, ties to the even code (mantissa bit 0), saturating at 6."""
    import torch

    grid = torch.tensor(E2M1_VALUES, device=x.device)
    distance = (x.abs().clamp_max(E2M1_MAX)[..., None] - grid).abs()
    # Ties: of two equally near codes the even one; a tiny bias on odd codes breaks them that way.
    odd = torch.arange(8, device=x.device) % 2
    code = (distance + odd * 1e-7).argmin(-1)
    return torch.where(x < 0, code + 8, code).to(torch.uint8)


def _quantise(x):
    """x [R, K] fp32 -> (packed e2m1 u8 [R, K/2], e4m3 scales [R, K/16]): per 1x16 block the scale amax / 6 rounded to
    e4m3 (NVIDIA's NVFP4 recipe without its per-tensor level), the values x / scale rounded to e2m1."""
    import torch

    R, K = x.shape
    blocks = x.view(R, K // BLOCK, BLOCK)
    amax = blocks.abs().amax(2)
    scale = (amax / E2M1_MAX).clamp(SCALE_MIN, 448.0).to(torch.float8_e4m3fn)
    codes = _round_e2m1(blocks / scale.float()[:, :, None]).view(R, K // 2, 2)
    return codes[..., 0] | (codes[..., 1] << 4), scale


def make_inputs(shape, seed, device, kind="normal"):
    """A, B (packed e2m1 bytes) and SA, SB (e4m3 scales), seeded. Kinds:
    normal: N(0, 1) values, each 1x16 block at its own magnitude 2**u (u an integer in [-5, 3]), quantised per block
        (scale amax / 6 in e4m3): the scales differ from block to block over 2**8 per operand (2**16 for a product)
        with mantissas of their own, and each block's values reach e2m1's top codes (4, 6), so a kernel that ignores the scales, averages them,
        takes another block's or reads them as exponent bytes is far off.
    structured: as normal, plus a shared offset per row of A and of B (|offset| in [0.5, 2], sign drawn): partial
        sums of one sign that grow with K, against accumulators narrower than fp32.
    """
    import torch

    if kind not in INPUT_KINDS:
        raise ValueError(f"gemm_nvfp4 has no input kind '{kind}' (its kinds: {', '.join(INPUT_KINDS)})")
    g = torch.Generator(device=device).manual_seed(seed)
    M, N, K = shape["M"], shape["N"], shape["K"]
    A = torch.randn(M, K, generator=g, device=device)
    B = torch.randn(N, K, generator=g, device=device)
    if kind == "structured":
        def offsets(n):
            sign = torch.randint(0, 2, (n, 1), generator=g, device=device) * 2 - 1
            return sign * (0.5 + 1.5 * torch.rand(n, 1, generator=g, device=device))

        A, B = offsets(M) + 0.5 * A, offsets(N) + 0.5 * B

    def magnitudes(rows):
        u = torch.randint(LOW_EXP, HIGH_EXP + 1, (rows, K // BLOCK), generator=g, device=device)
        return u.float().exp2().repeat_interleave(BLOCK, dim=1)

    A4, SA = _quantise(A * magnitudes(M))
    B4, SB = _quantise(B * magnitudes(N))
    return {"A": A4, "SA": SA, "B": B4, "SB": SB}


def baseline(inputs, shape):
    """A FALLBACK, not a vendor NVFP4 GEMM: the operands dequantised to bf16 (exact: an e2m1 value times an e4m3 scale
    has at most 6 significant bits and stays in bf16's range; tests/test_nvfp4_task.py checks every pair), then
    cuBLAS's bf16 GEMM (torch.matmul), the dequantisation inside the timed call. The vendor path
    (torch.nn.functional.scaled_mm with float4_e2m1fn_x2 operands, ScalingType.BlockWise1x16 and the scales in
    SwizzleType.SWIZZLE_32_4_4, cuBLASLt's VEC16_UE4M3; names as torch 2.13 has them) is Blackwell-only and not wired
    here; nothing of this has run on a GPU."""
    import torch

    C = torch.empty(shape["M"], shape["N"], dtype=torch.bfloat16, device=inputs["A"].device)

    def call():
        A, B = dequantise(inputs)
        return torch.matmul(A.to(torch.bfloat16), B.to(torch.bfloat16).t(), out=C)  # C, for who checks it

    return call


def check_shape(shape):
    M, N, K = shape["M"], shape["N"], shape["K"]
    if min(M, N, K) < 1:
        raise ValueError("M, N and K must be positive")
    if K % 128:
        raise ValueError("K must be a multiple of 128 (whole 16-element scale blocks, two 64-wide MMA steps)")
    if N % 16:
        raise ValueError("N must be a multiple of 16 (16-byte aligned rows of C)")


TASK = Task(
    name="gemm_nvfp4",
    title="NVFP4 GEMM (e2m1 packed two per byte, one e4m3 scale per 16 elements)",
    contract=Contract(
        tensors=(
            TensorArg("A", "in", "u8", ("M", "K/2"), "(two e2m1 codes per byte along K: element 2j in the low nibble)"),
            TensorArg("SA", "in", "fp8e4m3", ("M", "K/16"), "(positive e4m3 scale of each 1x16 block of a row of A)"),
            TensorArg("B", "in", "u8", ("N", "K/2"), "(C = A @ B.T; packed as A)"),
            TensorArg("SB", "in", "fp8e4m3", ("N", "K/16"), "(positive e4m3 scale of each 1x16 block of a row of B)"),
            TensorArg("C", "out", "bf16", ("M", "N")),
        ),
        sizes=("M", "N", "K"),
        rules=(
            "Compute C[m, n] = sum_k (a(m, k) * SA[m, k // 16]) * (b(n, k) * SB[n, k // 16]) with fp32 accumulation,\n"
            "rounded to bf16: NVFP4, e2m1 elements with one e4m3 scale per 16 consecutive elements of K (no\n"
            "per-tensor scale). a(m, k) is the e2m1 value of the 4-bit code in byte A[m, k // 2]: its low nibble\n"
            "(bits 0-3) for even k, its high nibble for odd k; a code is sign (bit 3), two exponent bits and one\n"
            "mantissa bit, magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6 for codes 0..7. b(n, k) likewise from B. SA and SB\n"
            "are row-major. Every shape with M >= 1, N a positive multiple of 16 and K a positive multiple of 128\n"
            "must work (tails in M and N included): besides the default shape, each evaluation checks other shapes\n"
            "drawn at random from that space. The scales differ from block to block over many powers of two and\n"
            "trials also use rows with shared offsets. All tensors are contiguous and 16-byte aligned."
        ),
    ),
    default_shape={"M": 4096, "N": 4096, "K": 7168},
    # Measured on CPU (2026-12-02, `python3 tasks/gemm_nvfp4/verify/tolerance.py`: 4 shapes up to K = 4096, 2 seeds,
    # 2 kinds, with the block magnitudes of LOW_EXP / HIGH_EXP): the honest emulation (per-16-block fp32 partials times
    # sa * sb, summed in fp32, rounded to bf16) reaches 0.389 of this tolerance at worst (bf16's own rounding: 2**-8
    # relative against rtol 1e-2); the fp32 reference against an fp64 dequantise-matmul 0.0072 of it. At the default
    # K, tests/test_block_scaled_depth.py keeps the fp32 summation alone below 0.1 of it. The wrong kernels exceed it:
    # A's nibbles swapped 17x, one mean scale per row 66x, shifted by one block 97x, scales read as UE8M0 exponent
    # bytes 100x, scales ignored 809x.
    tolerance={"atol": 1e-2, "rtol": 1e-2},
    error_bound=error_bound,
    error_bound_rule=ERROR_BOUND_RULE,
    math_type="fp4",  # the roofline's compute ceiling: the fp4 tensor-core rate
    flops=lambda s: 2.0 * s["M"] * s["N"] * s["K"],
    min_bytes=lambda s: (s["M"] + s["N"]) * s["K"] * (0.5 + 1 / BLOCK) + 2.0 * s["M"] * s["N"],
    make_inputs=make_inputs,
    reference=reference,
    shown_reference=(unpack_e2m1, dequantise, reference),
    reference_call="outputs = reference({'A': A, 'SA': SA, 'B': B, 'SB': SB}, {'M': M, 'N': N, 'K': K})  # -> C",
    baseline=baseline,
    baseline_name="fallback: dequantise to bf16 + cuBLAS bf16 GEMM (not a vendor NVFP4 GEMM)",
    draw_shape=draw_shape,
    check_shape=check_shape,
    input_kinds=INPUT_KINDS,
    # Hopper: no fp4 MMA; the exact route is dequantising to fp16 / bf16 and the 16-bit wgmma (fp8 wgmma's K = 32 spans
    # two scale blocks, and an e2m1 value times an e4m3 scale is not an e4m3 value in general).
    suites_file="gemm/suites.toml",  # the same (M, N, K) layers as the bf16 gemm task: every K a multiple of 128
    required={"hopper": ("wgmma", "tma"), "blackwell": ("tcgen05_block_scale", "tma")},
)
