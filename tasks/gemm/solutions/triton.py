"""Expert Triton GEMM for the xlang `gemm` task: C[M,N] = A[M,K] . B[N,K]^T (bf16, fp32 accumulation).

Design, top-down:
* Operands move through TMA: host-built tensor descriptors (TensorDescriptor) for A [M,K], B [N,K] and
  C [M,N]. The descriptors zero-fill loads outside the matrix and clip stores, so every shape the
  contract allows (any M >= 1; N, K multiples of 8) is handled without masks.
* tl.dot on the loaded tiles lowers to wgmma on sm_90a and to tcgen05.mma (accumulator in tensor
  memory) on sm_100a; B is K-major, so `b.T` is a free view.
* Persistent grid (one program per SM) walking the output tiles in a grouped order (GROUP_M row-tiles
  per column band) so concurrently running programs share A and B tiles in L2. The tile loop is
  flattened with the K loop, so the software pipeline keeps loading the next tile's first K blocks
  while the current tile's epilogue runs.
* The epilogue may split the 128x256 tile into two 128x128 halves (EPI_SPLIT) to halve the shared
  memory the store staging needs, which leaves room for one more pipeline stage.
* Configs come from a small heuristic on the shape and the architecture (no autotuning sweep).
"""

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor


@triton.jit
def _tile_coords(tile, tiles_m, tiles_n, GROUP_M: tl.constexpr):
    per_group = GROUP_M * tiles_n
    group = tile // per_group
    first_m = group * GROUP_M
    rows = tl.minimum(tiles_m - first_m, GROUP_M)
    r = tile % per_group
    return first_m + r % rows, r // rows


@triton.jit
def gemm_persistent(a_desc, b_desc, c_desc, M, N, K,
                    BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr,
                    NUM_PROGRAMS: tl.constexpr, EPI_SPLIT: tl.constexpr, WARP_SPECIALIZE: tl.constexpr):
    tiles_m = tl.cdiv(M, BM)
    tiles_n = tl.cdiv(N, BN)
    k_blocks = tl.cdiv(K, BK)
    for tile in tl.range(tl.program_id(0), tiles_m * tiles_n, NUM_PROGRAMS, flatten=True,
                         warp_specialize=WARP_SPECIALIZE):
        tm, tn = _tile_coords(tile, tiles_m, tiles_n, GROUP_M)
        off_m = tm * BM
        off_n = tn * BN
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for kb in range(k_blocks):
            a = a_desc.load([off_m, kb * BK])
            b = b_desc.load([off_n, kb * BK])
            acc = tl.dot(a, b.T, acc)
        if EPI_SPLIT:
            halves = tl.reshape(acc, (BM, 2, BN // 2))
            halves = tl.permute(halves, (0, 2, 1))
            left, right = tl.split(halves)
            c_desc.store([off_m, off_n], left.to(tl.bfloat16))
            c_desc.store([off_m, off_n + BN // 2], right.to(tl.bfloat16))
        else:
            c_desc.store([off_m, off_n], acc.to(tl.bfloat16))


@triton.jit
def gemm_tiles(a_desc, b_desc, c_desc, M, N, K,
               BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr):
    """One program per output tile (non-persistent), grouped order; for comparison and small grids."""
    tm, tn = _tile_coords(tl.program_id(0), tl.cdiv(M, BM), tl.cdiv(N, BN), GROUP_M)
    off_m = tm * BM
    off_n = tn * BN
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for kb in range(tl.cdiv(K, BK)):
        a = a_desc.load([off_m, kb * BK])
        b = b_desc.load([off_n, kb * BK])
        acc = tl.dot(a, b.T, acc)
    c_desc.store([off_m, off_n], acc.to(tl.bfloat16))


def _sm_count(device):
    return torch.cuda.get_device_properties(device).multi_processor_count


def _capability(device):
    props = torch.cuda.get_device_properties(device)
    return props.major * 10 + props.minor


def choose_config(M, N, K, capability, sms):
    """A small heuristic in place of autotuning."""
    big = triton.cdiv(M, 128) * triton.cdiv(N, 256) >= sms
    if capability >= 100:
        # tcgen05: 128x256 accumulator lives in tensor memory; 4 warps drain it.
        return dict(BM=128, BN=256, BK=64, GROUP_M=8, num_warps=4, num_stages=3, persistent=True,
                    EPI_SPLIT=True, WARP_SPECIALIZE=False)
    if big:
        return dict(BM=128, BN=256, BK=64, GROUP_M=8, num_warps=8, num_stages=4, persistent=True,
                    EPI_SPLIT=True, WARP_SPECIALIZE=False)
    return dict(BM=128, BN=128, BK=64, GROUP_M=8, num_warps=8, num_stages=4, persistent=True,
                EPI_SPLIT=False, WARP_SPECIALIZE=False)


def launch(A, B, C, M, N, K, BM, BN, BK, GROUP_M, num_warps, num_stages, persistent=True,
           EPI_SPLIT=False, WARP_SPECIALIZE=False, sms=None):
    a_desc = TensorDescriptor.from_tensor(A, [BM, BK])
    b_desc = TensorDescriptor.from_tensor(B, [BN, BK])
    c_desc = TensorDescriptor.from_tensor(C, [BM, BN // 2 if (EPI_SPLIT and persistent) else BN])
    tiles = triton.cdiv(M, BM) * triton.cdiv(N, BN)
    if persistent:
        programs = min(sms or _sm_count(A.device), tiles)
        gemm_persistent[(programs,)](a_desc, b_desc, c_desc, M, N, K, BM=BM, BN=BN, BK=BK, GROUP_M=GROUP_M,
                                     NUM_PROGRAMS=programs, EPI_SPLIT=EPI_SPLIT,
                                     WARP_SPECIALIZE=WARP_SPECIALIZE, num_warps=num_warps,
                                     num_stages=num_stages)
    else:
        gemm_tiles[(tiles,)](a_desc, b_desc, c_desc, M, N, K, BM=BM, BN=BN, BK=BK, GROUP_M=GROUP_M,
                             num_warps=num_warps, num_stages=num_stages)


def xlang_entry(A, B, C, M, N, K):
    cfg = choose_config(M, N, K, _capability(A.device), _sm_count(A.device))
    launch(A, B, C, M, N, K, **cfg)
