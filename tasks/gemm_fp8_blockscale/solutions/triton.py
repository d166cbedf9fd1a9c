"""Expert Triton kernel for `gemm_fp8_blockscale`: C = (A * SA) @ (B * SB)^T, DeepGEMM's 1d2d block scales.

Design, top-down:
* One program per BM x BN output tile, in a grouped order (GROUP_M row tiles per column band) so programs running at
  the same time share A and B tiles in L2. With PERSISTENT, min(#tiles, #SMs) programs walk the tiles in that order
  instead (the loop flattened so the next tile's loads start during this tile's store).
* A [M, K] and B [N, K] (fp8 e4m3, K contiguous) and C [M, N] move through TMA: host-built tensor descriptors zero-fill
  loads past M and N and clip the stores, so the tails need no masks.
* The K loop walks the 128-wide scale blocks (BK is the scale block, never a knob): per block, one fp8 `tl.dot` of the
  [BM, 128] A tile with the transposed [BN, 128] B tile into a fresh fp32 partial sum (wgmma .e4m3 on sm_90a,
  tcgen05.mma kind::f8f6f4 on sm_100a; B is K-major, which Hopper's fp8 wgmma requires), then
  acc += partial * SA[rows, kb] * SB[n_block, kb] on the CUDA cores. Promoting each block's partial sum this way is
  what the scales need anyway, and it also bounds the run of the tensor core's own fp8 accumulation to 128 products
  (DeepGEMM does the same).
* BN divides 128, so a tile's columns share one row block of SB: one scalar per K block; SA is a column of BM values.

Config (CONFIG; benchmarks/fp8_blockscale_sweep.py overrides it to time others). The default is the configuration
the H200 judged `ok` at 0.796x cuBLASLt (harness 7): 128 x 128 tiles, 8 warps (two warpgroups), 4 stages. The
sweep on the H200 (2026-12-04, call 6 of reports/harness7-h200-2026-12-04: do_bench back to back, every
configuration checked by the task's rule at four shapes) found 64 x 128, 4 warps, 3 stages, persistent with two
programs per SM faster at the default shape: 0.749x against this one's 0.718x (FASTEST_SWEPT below). It is not the
default because no full verdict has judged it (drawn shapes with tails, memcheck, the executed families): the
device time ran out first. Why it is faster: the partial's wgmma must finish (wait 0) before its promotion, so
within one program the tensor core idles during every promotion; 128 x 128 with 4 stages (160 KiB of shared
memory) allows one program per SM, while 64 x 128 with 3 stages (88 KiB, ~170 registers x 128 threads) lets two
share an SM, one's promotion running while the other's wgmma does: the overlap the CuTe DSL expert gets from its
two consumer warpgroups (0.998x). The same tile without the persistent grid measured 0.673x.
"""

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

BLOCK = 128  # the contract's scale block along K (and along N for SB)

# PROGRAMS_PER_SM: with PERSISTENT, the grid is min(#tiles, PROGRAMS_PER_SM x #SMs) (two 88 KiB programs fit an SM).
CONFIG = {"BM": 128, "BN": 128, "GROUP_M": 8, "num_warps": 8, "num_stages": 4, "PERSISTENT": False,
          "PROGRAMS_PER_SM": 1}
FASTEST_SWEPT = {"BM": 64, "BN": 128, "GROUP_M": 8, "num_warps": 4, "num_stages": 3, "PERSISTENT": True,
                 "PROGRAMS_PER_SM": 2}


@triton.jit
def _tile(a_desc, b_desc, c_desc, SA, SB, M, N, K, tile,
          BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr):
    """One BM x BN tile of C, number `tile` in the grouped order."""
    tiles_m = tl.cdiv(M, BM)
    tiles_n = tl.cdiv(N, BN)
    per_group = GROUP_M * tiles_n
    first_m = (tile // per_group) * GROUP_M
    rows_in_group = tl.minimum(tiles_m - first_m, GROUP_M)
    tm = first_m + (tile % per_group) % rows_in_group
    tn = (tile % per_group) // rows_in_group
    off_m = tm * BM
    off_n = tn * BN
    k_blocks = K // BK
    rows = off_m + tl.arange(0, BM)
    sa_row = SA + rows.to(tl.int64) * k_blocks  # SA [M, K/128] row-major
    sb_row = SB + (off_n // BK) * k_blocks  # SB [ceil(N/128), K/128] row-major: this tile's row block (BN | 128)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for kb in range(k_blocks):
        a = a_desc.load([off_m, kb * BK])
        b = b_desc.load([off_n, kb * BK])
        partial = tl.dot(a, b.T)
        sa = tl.load(sa_row + kb, mask=rows < M, other=0.0)
        sb = tl.load(sb_row + kb)
        acc += partial * (sa * sb)[:, None]
    c_desc.store([off_m, off_n], acc.to(tl.bfloat16))


@triton.jit
def gemm_fp8_1d2d(a_desc, b_desc, c_desc, SA, SB, M, N, K,
                  BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr,
                  PERSISTENT: tl.constexpr):
    if PERSISTENT:
        n_tiles = tl.cdiv(M, BM) * tl.cdiv(N, BN)
        for tile in tl.range(tl.program_id(0), n_tiles, tl.num_programs(0), flatten=True):
            _tile(a_desc, b_desc, c_desc, SA, SB, M, N, K, tile, BM, BN, BK, GROUP_M)
    else:
        _tile(a_desc, b_desc, c_desc, SA, SB, M, N, K, tl.program_id(0), BM, BN, BK, GROUP_M)


_sms = {}


def _sm_count(device):
    # the static build answers for its target (backends/triton/static_build.py patches get_device_properties)
    index = device.index if device.index is not None else 0
    if index not in _sms:
        _sms[index] = torch.cuda.get_device_properties(index).multi_processor_count
    return _sms[index]


def launch(A, SA, B, SB, C, M, N, K, config=None):
    """C = the task's GEMM with `config` (keys of CONFIG; missing ones take CONFIG's)."""
    cfg = {**CONFIG, **(config or {})}
    BM, BN = cfg["BM"], cfg["BN"]
    assert BLOCK % BN == 0, "BN must divide 128: a tile's columns share one row block of SB"
    a_desc = TensorDescriptor.from_tensor(A, [BM, BLOCK])
    b_desc = TensorDescriptor.from_tensor(B, [BN, BLOCK])
    c_desc = TensorDescriptor.from_tensor(C, [BM, BN])
    tiles = triton.cdiv(M, BM) * triton.cdiv(N, BN)
    grid = (min(tiles, cfg["PROGRAMS_PER_SM"] * _sm_count(A.device)) if cfg["PERSISTENT"] else tiles,)
    gemm_fp8_1d2d[grid](a_desc, b_desc, c_desc, SA, SB, M, N, K, BM=BM, BN=BN, BK=BLOCK, GROUP_M=cfg["GROUP_M"],
                        PERSISTENT=cfg["PERSISTENT"], num_warps=cfg["num_warps"], num_stages=cfg["num_stages"])


def xlang_entry(A, SA, B, SB, C, M, N, K):
    launch(A, SA, B, SB, C, M, N, K)
