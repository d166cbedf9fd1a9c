"""Checks without a GPU for tasks/gemm_fp8_blockscale/solutions/cutedsl_blackwell.py (CuTe DSL fp8 1d2d GEMM, sm_100a):
a trace-time check of the register layout its promotion relies on, then a CPU model of its tile / K-block loop, its
per-block tensor-memory partials and their promotion with SA * SB, against the task's reference at the task's
tolerance (the judge's own compare_output).

A PASS SHOWS THAT THE KERNEL'S TILE WALK, SCALE INDEXING AND PROMOTION AGREE WITH THE RULES MODELLED HERE, NOT THAT
THE KERNEL RUNS: no B200 is in this workplace and it has never run.

Part 1, layout (trace time, nvidia-cutlass-dsl; the expert's own tiled MMA, partial layout and tcgen05.ld op): the
promotion scales all of a thread's elements by the SA of ONE row, the row of its first element (the expert's
`my_row`). That holds when the tcgen05.ld partition (32x32b, 32 columns per piece) gives thread t (t < 128) the
elements of tile row t only, in every piece: checked for every thread and element.
Part 2, CPU model (torch, fp32; bf16 rounding where the kernel rounds):
  * per tile (tm, tn) and K block kt: the partial A_blk @ B_blk^T of TMA boxes (128 x 128, zero past M and N), four
    MMAs of K = 32 summed in fp32 (the tensor core's internal summation order and precision are NOT modelled);
  * thread t's row r = min(tm * 128 + t, M - 1) adds partial[t] * SA[r, kt] * SB[tn, kt] into its fp32 total;
  * bf16 of the totals, store clipped at M and N.
Not modelled: the pipelines (operand ring, partial ring), the tcgen05.ld itself, the epilogue's smem / TMA path.

    python3 tasks/gemm_fp8_blockscale/verify/cutedsl_blackwell_emulate.py          # layout + cases; 0 = PASS
    python3 tasks/gemm_fp8_blockscale/verify/cutedsl_blackwell_emulate.py --bugs   # every injected bug must FAIL
    python3 tasks/gemm_fp8_blockscale/verify/cutedsl_blackwell_emulate.py --no-layouts
"""
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[3]
EXPERT = ROOT / "tasks/gemm_fp8_blockscale/solutions/cutedsl_blackwell.py"
BM, BN, BK = 128, 128, 128
BUGS = (
    "sa_of_next_block",        # SA[r, kt + 1] (clamped) instead of SA[r, kt]
    "sb_from_m_tile",          # SB[tm, kt] instead of SB[tn, kt]
    "rows_by_lane_only",       # thread t takes SA of row tm * 128 + t % 32 (the warp's lane only)
    "first_block_scales",      # every partial scaled by K block 0's SA * SB
    "one_partial_per_tile",    # the MMA accumulates the whole K in tensor memory, scaled once by the last block's
)


def thread_row(t):
    """The tile row whose partial elements promotion thread t (< 128) holds (part 1 checks the expert's layout)."""
    return t


def check_layouts():
    # CuTe DSL imported here: part 2 (the model) needs only torch, and nvidia-cutlass-dsl is absent on some machines
    import cutlass
    import cutlass.cute as cute
    import cutlass.utils.blackwell_helpers as sm100_utils
    from cutlass.cute.nvgpu import OperandMajorMode, tcgen05
    from cutlass.utils.layout import LayoutEnum

    from xlang.candidate import load_module

    expert = load_module(EXPERT, "cutedsl_blackwell_fp8_1d2d_expert")
    failures = []
    for name, want in (("BM", BM), ("BN", BN), ("BK", BK)):
        if getattr(expert, name) != want:
            failures.append(f"expert {name} = {getattr(expert, name)}, the model assumes {want}")
    if expert.EPI_WARPS * 32 != BM:
        failures.append(f"{expert.EPI_WARPS} promotion warps do not give one thread per tile row")

    @cute.jit
    def _check():
        mma = sm100_utils.make_trivial_tiled_mma(expert.AB, expert.AB, OperandMajorMode.K, OperandMajorMode.K,
                                                 expert.ACC, tcgen05.CtaGroup.ONE, (BM, BN))
        if cutlass.const_expr(cute.size(mma.shape_mnk, mode=[2]) * 4 != BK):
            failures.append(f"one MMA covers K = {cute.size(mma.shape_mnk, mode=[2])}, not {BK // 4}")
        acc_layout = mma.make_fragment_C(cute.append(mma.partition_shape_C((BM, BN)), expert.PARTIALS)).layout
        acc_all = cute.make_tensor(cute.make_ptr(expert.ACC, 0, cute.AddressSpace.tmem), acc_layout)
        t2r_atom = sm100_utils.get_tmem_load_op((BM, BN, BK), LayoutEnum.ROW_MAJOR, expert.OUT, expert.ACC,
                                                (expert.EPI_M, expert.EPI_N), False)
        acc_pieces = cute.flat_divide(acc_all[((None, None), 0, 0, None)], (expert.EPI_M, expert.EPI_N))
        t2r = tcgen05.make_tmem_copy(t2r_atom, acc_pieces[(None, None, 0, 0, 0)])
        coords = cute.flat_divide(cute.make_identity_tensor((BM, BN)), (expert.EPI_M, expert.EPI_N))
        for t in cutlass.range_constexpr(BM):
            mine = t2r.get_slice(t).partition_D(coords)
            seen = set()
            for i in cutlass.range_constexpr(cute.size(mine)):
                row, col = mine[i]
                seen.add(col)
                if cutlass.const_expr(row != thread_row(t)):
                    failures.append(f"thread {t} element {i}: row {row}, not {thread_row(t)}")
            if cutlass.const_expr(len(seen) != BN):
                failures.append(f"thread {t} holds {len(seen)} distinct columns, not {BN}")

    cute.compile(_check, options="--gpu-arch sm_100a")
    for f in failures[:20]:
        print("FAIL", f)
    print("layouts:", "PASS" if not failures else f"FAIL ({len(failures)} mismatches)")
    return not failures


def box(x, row0, rows, k0):
    """A TMA box of rows x 128 from x [R, K] at (row0, k0), zero past R."""
    out = torch.zeros(rows, BK)
    r1 = min(row0 + rows, x.shape[0])
    if r1 > row0:
        out[: r1 - row0] = x[row0:r1, k0:k0 + BK].float()
    return out


def model(inputs, shape, bugs=()):
    """C as the expert computes it, tile by tile and K block by K block."""
    A, B, SA, SB = inputs["A"], inputs["B"], inputs["SA"].float(), inputs["SB"].float()
    M, N, K = shape["M"], shape["N"], shape["K"]
    assert K % BK == 0
    k_blocks = K // BK
    C = torch.full((M, N), float("nan"))
    t = torch.arange(BM)
    for tm in range(-(-M // BM)):
        rows = (tm * BM + (t % 32 if "rows_by_lane_only" in bugs else thread_row(t))).clamp_max(M - 1)
        for tn in range(-(-N // BN)):
            total = torch.zeros(BM, BN)
            tmem = torch.zeros(BM, BN)
            for kt in range(k_blocks):
                partial = torch.zeros(BM, BN) if "one_partial_per_tile" not in bugs else tmem
                a, b = box(A, tm * BM, BM, kt * BK), box(B, tn * BN, BN, kt * BK)
                for kb in range(4):   # the four MMAs (K = 32) of the block, accumulating in tensor memory
                    ks = slice(32 * kb, 32 * kb + 32)
                    partial = partial + a[:, ks] @ b[:, ks].t()
                ka = 0 if "first_block_scales" in bugs else min(kt + 1, k_blocks - 1) if "sa_of_next_block" in bugs else kt
                sb = SB[min(tm, SB.shape[0] - 1) if "sb_from_m_tile" in bugs else tn, 0 if "first_block_scales" in bugs else kt]
                if "one_partial_per_tile" in bugs:
                    tmem = partial
                    if kt == k_blocks - 1:
                        total = partial * (SA[rows, ka] * sb)[:, None]
                else:
                    total = total + partial * (SA[rows, ka] * sb)[:, None]
            r1, c1 = min(BM, M - tm * BM), min(BN, N - tn * BN)
            C[tm * BM: tm * BM + r1, tn * BN: tn * BN + c1] = total[:r1, :c1].to(torch.bfloat16).float()
    return C


CASES = (({"M": 130, "N": 144, "K": 256}, 1), ({"M": 7, "N": 272, "K": 384}, 2), ({"M": 257, "N": 400, "K": 640}, 3),
         ({"M": 64, "N": 16, "K": 128}, 4))


def run_cases(bugs=(), cases=CASES, quiet=False):
    """True when the model matches the task's reference on every case and input kind."""
    from xlang.profiler.judge.verify import compare_output
    from xlang.task import get_task

    task = get_task("gemm_fp8_blockscale")
    ok = True
    for shape, seed in cases:
        task.check_shape(shape)
        for kind in task.input_kinds:
            x = task.make_inputs(shape, seed, "cpu", kind)
            stats = compare_output("C", model(x, shape, bugs), task.reference(x, shape)["C"], **task.tolerance,
                                   bound=task.bound_for("C", x, shape))
            good = "failure" not in stats
            ok &= good
            if not quiet:
                print(f"{'ok  ' if good else 'FAIL'} {shape} {kind}: max rel err {stats['max_rel_err']:.3g}")
    return ok


def main(argv):
    if "--bugs" in argv:
        caught = [b for b in BUGS if not run_cases((b,), quiet=True)]
        for b in BUGS:
            print(f"bug {b}: {'FAILS (caught)' if b in caught else 'PASSES (missed)'}")
        return 0 if len(caught) == len(BUGS) else 1
    good = True
    if "--no-layouts" not in argv:
        good &= check_layouts()
    good &= run_cases()
    print("PASS" if good else "FAIL")
    return 0 if good else 1


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main(sys.argv[1:]))
