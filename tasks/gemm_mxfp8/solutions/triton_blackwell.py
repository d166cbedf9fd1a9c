"""Expert Triton kernel for `gemm_mxfp8` on Blackwell: C = (A * 2**(SA-127)) @ (B * 2**(SB-127))^T, MXFP8.

* One program per 128x128 output tile (grouped order), A [M, K] and B [N, K] (e4m3) through TMA descriptors (zero
  fill past M and N, clipped stores), the UE8M0 scale bytes through plain masked loads.
* Per 128-wide K step, `tl.dot_scaled(a, sa, "e4m3", b.T, sb, "e4m3", acc)`: the MMA itself applies the per-32
  scales, which Triton 3.6 lowers on sm_100a to tcgen05.mma kind::mxf8f6f4.block_scale.scale_vec::1X (SASS UTCQMMA
  with the scale factors' tensor-memory operand: the census family tcgen05_block_scale).
Never run on a GPU (no B200 in this workplace): static build and census only.
"""

import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor


@triton.jit
def gemm_mxfp8(a_desc, b_desc, c_desc, SA, SB, M, N, K,
               BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr):
    tiles_m = tl.cdiv(M, BM)
    tiles_n = tl.cdiv(N, BN)
    per_group = GROUP_M * tiles_n
    tile = tl.program_id(0)
    first_m = (tile // per_group) * GROUP_M
    rows_in_group = tl.minimum(tiles_m - first_m, GROUP_M)
    off_m = (first_m + (tile % per_group) % rows_in_group) * BM
    off_n = ((tile % per_group) // rows_in_group) * BN
    k_scales = K // 32  # scale bytes per row of SA and SB
    rows = off_m + tl.arange(0, BM)
    cols = off_n + tl.arange(0, BN)
    s_idx = tl.arange(0, BK // 32)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        a = a_desc.load([off_m, k])
        b = b_desc.load([off_n, k])
        sa = tl.load(SA + rows.to(tl.int64)[:, None] * k_scales + (k // 32 + s_idx)[None, :],
                     mask=(rows < M)[:, None], other=127)
        sb = tl.load(SB + cols.to(tl.int64)[:, None] * k_scales + (k // 32 + s_idx)[None, :],
                     mask=(cols < N)[:, None], other=127)
        acc = tl.dot_scaled(a, sa, "e4m3", b.T, sb, "e4m3", acc)
    c_desc.store([off_m, off_n], acc.to(tl.bfloat16))


def xlang_entry(A, SA, B, SB, C, M, N, K):
    BM, BN, BK, GROUP_M = 128, 128, 128, 8
    a_desc = TensorDescriptor.from_tensor(A, [BM, BK])
    b_desc = TensorDescriptor.from_tensor(B, [BN, BK])
    c_desc = TensorDescriptor.from_tensor(C, [BM, BN])
    grid = (triton.cdiv(M, BM) * triton.cdiv(N, BN),)
    gemm_mxfp8[grid](a_desc, b_desc, c_desc, SA, SB, M, N, K, BM=BM, BN=BN, BK=BK, GROUP_M=GROUP_M,
                     num_warps=4, num_stages=3)
