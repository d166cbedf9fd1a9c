"""Expert Triton kernel for `gemm_nvfp4` on Blackwell: C = dequant(A) @ dequant(B)^T, NVFP4.

* One program per 128x128 output tile (grouped order). A [M, K/2] and B [N, K/2] hold two e2m1 codes per byte
  (element 2j in the low nibble: tl.dot_scaled's own packing, "first element in lower bits") and come through TMA
  descriptors of 128 rows x 64 bytes (128 elements of K; zero fill past M and N, clipped stores); the e4m3 scales
  [M, K/16] and [N, K/16] through plain masked loads, 8 per row per K step.
* Per 128-wide K step, `tl.dot_scaled(a, sa, "e2m1", b.T, sb, "e2m1", acc)` with fp8e4nv scales: Triton 3.6 takes
  e4m3 scales as one per 16 elements and lowers it on sm_100a to tcgen05.mma kind::mxf4nvf4.block_scale.scale_vec::4X
  (SASS UTCOMMA.4X with the scale factors' tensor-memory operand: the census family tcgen05_block_scale; Triton moves
  the scales into tensor memory with tcgen05.st, not tcgen05.cp). Its instruction descriptor (a PTX constant) says
  E2M1 x E2M1 with UE4M3 scales, M = N = 128 (decoded by tests/test_nvfp4_task.py).
Never run on a GPU (no B200 in this workplace): static build and census only.
"""

import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor


@triton.jit
def gemm_nvfp4(a_desc, b_desc, c_desc, SA, SB, M, N, K,
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
        a = a_desc.load([off_m, k // 2])  # bytes: two elements of K each
        b = b_desc.load([off_n, k // 2])
        sa = tl.load(SA + rows.to(tl.int64)[:, None] * k_scales + (k // 16 + s_idx)[None, :],
                     mask=(rows < M)[:, None], other=1.0)
        sb = tl.load(SB + cols.to(tl.int64)[:, None] * k_scales + (k // 16 + s_idx)[None, :],
                     mask=(cols < N)[:, None], other=1.0)
        acc = tl.dot_scaled(a, sa, "e2m1", b.T, sb, "e2m1", acc)
    c_desc.store([off_m, off_n], acc.to(tl.bfloat16))


def xlang_entry(A, SA, B, SB, C, M, N, K):
    BM, BN, BK, GROUP_M = 128, 128, 128, 8
    a_desc = TensorDescriptor.from_tensor(A, [BM, BK // 2])
    b_desc = TensorDescriptor.from_tensor(B, [BN, BK // 2])
    c_desc = TensorDescriptor.from_tensor(C, [BM, BN])
    grid = (triton.cdiv(M, BM) * triton.cdiv(N, BN),)
    gemm_nvfp4[grid](a_desc, b_desc, c_desc, SA, SB, M, N, K, BM=BM, BN=BN, BK=BK, GROUP_M=GROUP_M,
                     num_warps=4, num_stages=3)
