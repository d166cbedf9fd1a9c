"""Expert Triton kernel for `gemm_fp8_blockscale`: C = (A * SA) @ (B * SB)^T, DeepGEMM's 1d2d block scales.

Design, top-down:
* One program per 128x128 output tile, in a grouped order (GROUP_M row tiles per column band) so programs running at
  the same time share A and B tiles in L2.
* A [M, K] and B [N, K] (fp8 e4m3, K contiguous) and C [M, N] move through TMA: host-built tensor descriptors zero-fill
  loads past M and N and clip the stores, so the tails need no masks.
* The K loop walks the 128-wide scale blocks: per block, one fp8 `tl.dot` of the [128, 128] A tile with the
  transposed [128, 128] B tile into a fresh fp32 partial sum (wgmma .e4m3 on sm_90a, tcgen05.mma kind::f8f6f4 on
  sm_100a; B is K-major, which Hopper's fp8 wgmma requires), then acc += partial * SA[rows, kb] * SB[n_block, kb] on
  the CUDA cores. Promoting each block's partial sum this way is what the scales need anyway, and it also bounds the
  run of the tensor core's own fp8 accumulation to 128 products (DeepGEMM does the same).
* BN = 128, so a tile's columns share one row block of SB: one scalar per K block; SA is a column of BM values.
Performance is unmeasured (no GPU this session): no persistent grid, no warp specialisation yet.
"""

import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

BLOCK = 128  # the contract's scale block along K (and along N for SB)


@triton.jit
def gemm_fp8_1d2d(a_desc, b_desc, c_desc, SA, SB, M, N, K,
                  BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr):
    tiles_m = tl.cdiv(M, BM)
    tiles_n = tl.cdiv(N, BN)
    per_group = GROUP_M * tiles_n
    tile = tl.program_id(0)
    first_m = (tile // per_group) * GROUP_M
    rows_in_group = tl.minimum(tiles_m - first_m, GROUP_M)
    tm = first_m + (tile % per_group) % rows_in_group
    tn = (tile % per_group) // rows_in_group
    off_m = tm * BM
    off_n = tn * BN
    k_blocks = K // BK
    rows = off_m + tl.arange(0, BM)
    sa_row = SA + rows.to(tl.int64) * k_blocks  # SA [M, K/128] row-major
    sb_row = SB + (off_n // BN) * k_blocks  # SB [ceil(N/128), K/128] row-major: this tile's row block
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for kb in range(k_blocks):
        a = a_desc.load([off_m, kb * BK])
        b = b_desc.load([off_n, kb * BK])
        partial = tl.dot(a, b.T)
        sa = tl.load(sa_row + kb, mask=rows < M, other=0.0)
        sb = tl.load(sb_row + kb)
        acc += partial * (sa * sb)[:, None]
    c_desc.store([off_m, off_n], acc.to(tl.bfloat16))


def xlang_entry(A, SA, B, SB, C, M, N, K):
    BM, BN, BK, GROUP_M = 128, BLOCK, BLOCK, 8
    a_desc = TensorDescriptor.from_tensor(A, [BM, BK])
    b_desc = TensorDescriptor.from_tensor(B, [BN, BK])
    c_desc = TensorDescriptor.from_tensor(C, [BM, BN])
    grid = (triton.cdiv(M, BM) * triton.cdiv(N, BN),)
    gemm_fp8_1d2d[grid](a_desc, b_desc, c_desc, SA, SB, M, N, K, BM=BM, BN=BN, BK=BK, GROUP_M=GROUP_M,
                        num_warps=8, num_stages=4)
