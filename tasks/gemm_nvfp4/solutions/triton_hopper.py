"""Expert Triton kernel for `gemm_nvfp4` on Hopper: C = dequant(A) @ dequant(B)^T, NVFP4 without an fp4 MMA.

Hopper has no fp4 tensor-core instruction, and Triton 3.6 does not compile tl.dot_scaled with e4m3 scales for sm_90a
(an assertion in its TritonGPUAccelerateMatmul pass). So the kernel dequantises in registers and uses the bf16 MMA:
* one program per 128x128 output tile (grouped order); A [M, K/2] and B [N, K/2] bytes through TMA descriptors of
  128 rows x 32 bytes (64 elements of K), the e4m3 scales [M, K/16] and [N, K/16] through masked loads;
* per 64-wide K step: each byte's two e2m1 codes (element 2j in the low nibble) decoded arithmetically (sign bit 3,
  exponent bits 2-1, mantissa bit 0), times its 16-block's scale, to fp16: exact (an e2m1 value times an e4m3 scale
  is an fp16 value and a bf16 one, tests/test_nvfp4_task.py checks every pair), then `tl.dot` (wgmma f16, fp32
  accumulator). fp16 rather than bf16 because Triton 3.6's CPU interpreter computed this kernel's bf16 dot wrongly
  (values near 1e11 for 1e4) and its fp16 dot right, so the CPU check runs this very kernel.
Never run on a GPU: static build, census and Triton's CPU interpreter only.
"""

import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor


@triton.jit
def _dequantise(packed, scales, ROWS: tl.constexpr, BK: tl.constexpr):
    """[ROWS, BK/2] bytes and [ROWS, BK/16] e4m3 scales -> [ROWS, BK] fp16 values."""
    codes = tl.reshape(tl.join(packed & 15, packed >> 4), (ROWS, BK))  # element 2j: the low nibble of byte j
    exponent = (codes >> 1) & 3
    mantissa = (codes & 1).to(tl.float32)
    # exponent 0: subnormal, m / 2; else 2**(e - 1) * (1 + m / 2), the power of two as an integer shift
    magnitude = tl.where(exponent == 0, 0.5 * mantissa, ((1 << exponent) >> 1).to(tl.float32) * (1 + 0.5 * mantissa))
    value = tl.where((codes & 8) != 0, -magnitude, magnitude)
    blocks = tl.reshape(value, (ROWS, BK // 16, 16)) * scales.to(tl.float32)[:, :, None]
    return tl.reshape(blocks, (ROWS, BK)).to(tl.float16)


@triton.jit
def gemm_nvfp4_hopper(a_desc, b_desc, c_desc, SA, SB, M, N, K,
                      BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr):
    tiles_m = tl.cdiv(M, BM)
    tiles_n = tl.cdiv(N, BN)
    per_group = GROUP_M * tiles_n
    tile = tl.program_id(0)
    first_m = (tile // per_group) * GROUP_M
    rows_in_group = tl.minimum(tiles_m - first_m, GROUP_M)
    off_m = (first_m + (tile % per_group) % rows_in_group) * BM
    off_n = ((tile % per_group) // rows_in_group) * BN
    k_scales = K // 16  # scales per row of SA and SB
    rows = off_m + tl.arange(0, BM)
    cols = off_n + tl.arange(0, BN)
    s_idx = tl.arange(0, BK // 16)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        a_bytes = a_desc.load([off_m, k // 2])
        b_bytes = b_desc.load([off_n, k // 2])
        sa = tl.load(SA + rows.to(tl.int64)[:, None] * k_scales + (k // 16 + s_idx)[None, :],
                     mask=(rows < M)[:, None], other=0.0)
        sb = tl.load(SB + cols.to(tl.int64)[:, None] * k_scales + (k // 16 + s_idx)[None, :],
                     mask=(cols < N)[:, None], other=0.0)
        a = _dequantise(a_bytes, sa, BM, BK)
        b = _dequantise(b_bytes, sb, BN, BK)
        acc = tl.dot(a, b.T, acc)
    c_desc.store([off_m, off_n], acc.to(tl.bfloat16))


def xlang_entry(A, SA, B, SB, C, M, N, K):
    BM, BN, BK, GROUP_M = 128, 128, 64, 8
    a_desc = TensorDescriptor.from_tensor(A, [BM, BK // 2])
    b_desc = TensorDescriptor.from_tensor(B, [BN, BK // 2])
    c_desc = TensorDescriptor.from_tensor(C, [BM, BN])
    grid = (triton.cdiv(M, BM) * triton.cdiv(N, BN),)
    gemm_nvfp4_hopper[grid](a_desc, b_desc, c_desc, SA, SB, M, N, K, BM=BM, BN=BN, BK=BK, GROUP_M=GROUP_M,
                            num_warps=8, num_stages=3)
