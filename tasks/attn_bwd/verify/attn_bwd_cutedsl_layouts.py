"""Trace-time layout checks for tasks/attn_bwd/solutions/cutedsl_hopper.py, with no GPU (nvidia-cutlass-dsl).

Builds the expert's two TiledMmas and shared-memory layouts exactly as its `_bwd_host` does (the calls are
repeated here) and checks, on static thread indices, that
  1. the accumulator fragment of the 128 x 64 SS wgmma (S^T, dP^T, S, dP) and the register-A fragment of the
     RS wgmma (P^T, dS^T, dS as A over K = 64) give every one of the 256 consumer threads the same (row, col)
     for every register: the kernel converts the fp32 accumulator to bf16 and re-views it as
     ((2,2,2),1,4), so the flat orders must agree;
  2. register i = c + 2r + 4v of thread t is (64 wg + 16 w + lane // 4 + 8 r, 2 (lane % 4) + c + 8 v), the
     map the kernel's LSE/Delta indices (j = c + 2 v; row r) and attn_bwd_cutedsl_emulate.py use, and it
     covers the tile once;
  3. the 128 x DP accumulator of the RS wgmma follows the same rule (the epilogue re-views it for stmatrix);
  4. the K-major B layout of a 64-row tile (the TMA destination) and the MN-major B layout used for the
     same bytes have the same swizzle and transposed modes, so (row, col, stage) maps to the same offset.

    python3 tasks/attn_bwd/verify/attn_bwd_cutedsl_layouts.py      # ~3 s; prints the layouts, exit 0 = PASS
"""
import sys

import cutlass
import cutlass.cute as cute
import cutlass.utils.hopper_helpers as sm90_utils
from cutlass.cute.nvgpu import warpgroup
from cutlass.utils.layout import LayoutEnum

AB, ACC = cutlass.BFloat16, cutlass.Float32
FAILURES = []


@cute.jit
def _check(dp: cutlass.Constexpr, stages: cutlass.Constexpr):
    K_MAJ, MN_MAJ = warpgroup.OperandMajorMode.K, warpgroup.OperandMajorMode.MN
    mma_s = sm90_utils.make_trivial_tiled_mma(AB, AB, K_MAJ, K_MAJ, ACC, (2, 1, 1), tiler_mn=(64, 64))
    mma_acc = sm90_utils.make_trivial_tiled_mma(
        AB, AB, K_MAJ, MN_MAJ, ACC, (2, 1, 1), tiler_mn=(64, dp), a_source=warpgroup.OperandSource.RMEM
    )
    lay64 = sm90_utils.make_smem_layout_b(LayoutEnum.ROW_MAJOR, (128, 64, dp), AB, stages)
    lay64_t = sm90_utils.make_smem_layout_b(LayoutEnum.COL_MAJOR, (128, dp, 64), AB, stages)
    print(f"dp={dp}: K-major 64-row tile  ", lay64)
    print(f"dp={dp}: its MN-major view    ", lay64_t)
    print(f"dp={dp}: thread 37 S acc  ", mma_s.get_slice(37).partition_C(cute.make_identity_tensor((128, 64))))
    print(f"dp={dp}: thread 37 A of RS", mma_acc.get_slice(37).partition_A(cute.make_identity_tensor((128, 64))))
    print(f"dp={dp}: thread 37 RS acc ", mma_acc.get_slice(37).partition_C(cute.make_identity_tensor((128, dp))))
    seen = set()
    for t in cutlass.range_constexpr(256):
        cs = mma_s.get_slice(t).partition_C(cute.make_identity_tensor((128, 64)))
        aa = mma_acc.get_slice(t).partition_A(cute.make_identity_tensor((128, 64)))
        ca = mma_acc.get_slice(t).partition_C(cute.make_identity_tensor((128, dp)))
        wg, w, lane = t // 128, (t % 128) // 32, t % 32
        for i in cutlass.range_constexpr(dp // 2):
            c, r, v = i % 2, (i // 2) % 2, i // 4
            want = (64 * wg + 16 * w + lane // 4 + 8 * r, 2 * (lane % 4) + c + 8 * v)
            if cutlass.const_expr(tuple(ca[i]) != want):
                FAILURES.append(f"dp={dp} RS accumulator t={t} i={i}: {tuple(ca[i])} != {want}")
            if cutlass.const_expr(i < 32):
                if cutlass.const_expr(tuple(cs[i]) != want):
                    FAILURES.append(f"dp={dp} SS accumulator t={t} i={i}: {tuple(cs[i])} != {want}")
                if cutlass.const_expr(tuple(aa[i]) != want):
                    FAILURES.append(f"dp={dp} register A t={t} i={i}: {tuple(aa[i])} != {want}")
                seen.add(want)
    if cutlass.const_expr(len(seen) != 128 * 64):
        FAILURES.append(f"dp={dp}: the 128 x 64 map covers {len(seen)} positions")
    for s in cutlass.range_constexpr(stages):
        for row in cutlass.range_constexpr(0, 64, 3):
            for col in cutlass.range_constexpr(0, dp, 5):
                a = lay64((row, col, s))
                b = lay64_t((col, row, s))
                if cutlass.const_expr(a != b):
                    FAILURES.append(f"dp={dp} smem views differ at ({row},{col},{s}): {a} != {b}")


def main():
    for dp, stages in ((128, 2), (64, 3)):
        cute.compile(_check, dp, stages, options="--gpu-arch sm_90a")
    for f in FAILURES[:20]:
        print("FAIL", f)
    print("PASS" if not FAILURES else f"FAIL ({len(FAILURES)} mismatches)")
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
