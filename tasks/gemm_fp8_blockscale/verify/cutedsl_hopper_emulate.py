"""Checks without a GPU for tasks/gemm_fp8_blockscale/solutions/cutedsl_hopper.py (CuTe DSL fp8 1d2d GEMM, sm_90a):
trace-time checks of the layouts its scale indexing assumes, then a CPU model of its tile / K-block loop, promotion
and scale indexing, against the task's reference at the task's tolerance (the judge's own compare_output).

A PASS SHOWS THAT THE KERNEL'S TILE WALK, SCALE INDEXING AND PROMOTION AGREE WITH THE RULES MODELLED HERE, NOT
THAT THE KERNEL RUNS: it has never run on a GPU.

Part 1, layouts (trace time, nvidia-cutlass-dsl; the expert's own make_trivial_tiled_mma call):
  * accumulator register i of consumer thread t (warpgroup t // 128, warp w, lane l) lies on tile row
    64 (t // 128) + 16 w + l // 4 + 8 ((i // 2) % 2), and the expert's own _first_row / _on_second_row (the rows
    it loads SA for, the register -> row rule of its promotion loop) give exactly those rows;
  * the persistent walk (_tile_of over cta, cta + n_cta, ...) visits every output tile exactly once.
Part 2, CPU model (torch, fp32; bf16 rounding where the kernel rounds):
  * TMA boxes of A and B (128 x 128 fp8) zero-filled past M and N; per K block kt the wgmma result `part` of the
    tile (fp32 sum of exact e4m3 products: the tensor core's own, narrower accumulation inside one block is NOT
    modelled), held per thread and register by the wgmma fragment rule;
  * per thread: s0 = SA[min(row0, M - 1), kt] * SB[tn, kt], s1 likewise for row0 + 8, and acc[i] += part[i] * s0
    or s1 by (i // 2) % 2, as the kernel's promotion loop; then bf16 and the clipped store.
Not modelled: the TMA / mbarrier pipeline, the epilogue's stmatrix path (the bf16 GEMM's, which ran on the H200),
summation order inside a wgmma.

    python3 tasks/gemm_fp8_blockscale/verify/cutedsl_hopper_emulate.py           # layouts + cases; 0 = PASS
    python3 tasks/gemm_fp8_blockscale/verify/cutedsl_hopper_emulate.py --bugs    # every injected bug must FAIL
    python3 tasks/gemm_fp8_blockscale/verify/cutedsl_hopper_emulate.py --no-layouts
"""
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[3]
EXPERT = ROOT / "tasks/gemm_fp8_blockscale/solutions/cutedsl_hopper.py"
BM, BN, BK = 128, 128, 128
GROUP_M = 8
CONSUMER_THREADS, REGS = 256, 64      # two consumer warpgroups; a 64 x 128 fp32 wgmma fragment is 64 registers
# Injected bugs (each must make the model fail):
BUGS = (
    "one_row_per_thread",     # both register rows scaled with the first row's SA
    "sa_next_k_block",        # SA[row, kt + 1] (clamped)
    "sb_from_m_tile",         # SB[tm, kt] instead of SB[tn, kt]
    "sb_row_not_block",       # SB indexed by the tile's first row n instead of its block n // 128
    "scale_once_at_end",      # sum the raw partials, scale by the last K block's scales only
)


def _fragment_rows():
    """[256 threads, 64 registers] tile row and column of each consumer register (the wgmma D fragment rule)."""
    t = torch.arange(CONSUMER_THREADS)[:, None]
    wg, w, lane = t // 128, (t % 128) // 32, t % 32
    i = torch.arange(REGS)[None, :]
    row = 64 * wg + 16 * w + lane // 4 + 8 * ((i // 2) % 2)
    col = 8 * (i // 4) + 2 * (lane % 4) + i % 2
    return row.expand(CONSUMER_THREADS, REGS), col.expand(CONSUMER_THREADS, REGS)


ROW, COL = _fragment_rows()


# ============================================================================================= part 1: layouts
def check_layouts():
    # CuTe DSL imported here: part 2 (the model) needs only torch, and nvidia-cutlass-dsl is absent on some machines
    import cutlass
    import cutlass.cute as cute
    import cutlass.utils.hopper_helpers as sm90_utils
    from cutlass.cute.nvgpu import warpgroup

    from xlang.candidate import load_module

    expert = load_module(EXPERT, "cutedsl_hopper_fp8_expert")
    failures = []
    for name, want in (("BM", BM), ("BN", BN), ("BK", BK), ("GROUP_M", GROUP_M), ("CONSUMER_THREADS", 256)):
        if getattr(expert, name) != want:
            failures.append(f"expert {name} = {getattr(expert, name)}, the model assumes {want}")

    @cute.jit
    def _check():
        k_major = warpgroup.OperandMajorMode.K
        mma = sm90_utils.make_trivial_tiled_mma(expert.AB, expert.AB, k_major, k_major, expert.ACC, (2, 1, 1),
                                                tiler_mn=(64, BN))
        for t in cutlass.range_constexpr(CONSUMER_THREADS):
            coords = mma.get_slice(t).partition_C(cute.make_identity_tensor((BM, BN)))
            if cutlass.const_expr(cute.size(coords) != REGS):
                failures.append(f"thread {t}: {cute.size(coords)} accumulator registers, the model has {REGS}")
            for i in cutlass.range_constexpr(REGS):
                want = (int(ROW[t, i]), int(COL[t, i]))
                if cutlass.const_expr(tuple(coords[i]) != want):
                    failures.append(f"thread {t} register {i}: tile {tuple(coords[i])}, the kernel assumes {want}")

    cute.compile(_check, options="--gpu-arch sm_90a")
    # the expert's own row rules (its _first_row / _on_second_row) against the fragment rule checked above
    for t in range(CONSUMER_THREADS):
        first = expert._first_row(t + 128)
        for i in range(REGS):
            want = int(ROW[t, i])
            if first + (8 if expert._on_second_row(i) else 0) != want:
                failures.append(f"thread {t + 128} register {i}: the expert scales it with row "
                                f"{first + (8 if expert._on_second_row(i) else 0)}, the fragment has row {want}")
    for m_tiles, n_tiles, n_cta in ((1, 1, 132), (33, 5, 132), (9, 17, 7), (8, 3, 24)):
        seen = sorted(tile_of(t, m_tiles, n_tiles) for c in range(n_cta) for t in range(c, m_tiles * n_tiles, n_cta))
        if seen != [(m, n) for m in range(m_tiles) for n in range(n_tiles)]:
            failures.append(f"the persistent walk over {m_tiles} x {n_tiles} tiles with {n_cta} CTAs misses or repeats")
    for f in failures[:20]:
        print("FAIL", f)
    print("layouts:", "PASS" if not failures else f"FAIL ({len(failures)} mismatches)")
    return not failures


def tile_of(t, m_tiles, n_tiles):
    """The expert's _tile_of, transliterated."""
    span = GROUP_M * n_tiles
    group = t // span
    first = group * GROUP_M
    rows = min(m_tiles - first, GROUP_M)
    r = t - group * span
    return first + r % rows, r // rows


# ============================================================================================= part 2: model
def box(x, row0, rows, k0):
    """A TMA box of rows x 128 from x [R, K] at (row0, k0), zero past R."""
    out = torch.zeros(rows, BK)
    r1 = min(row0 + rows, x.shape[0])
    if r1 > row0:
        out[: r1 - row0] = x[row0:r1, k0:k0 + BK].float()
    return out


def model(inputs, shape, bugs=()):
    """C as the expert computes it, tile by tile, thread by thread."""
    A, B, SA, SB = inputs["A"], inputs["B"], inputs["SA"], inputs["SB"]
    M, N, K = shape["M"], shape["N"], shape["K"]
    assert K % BK == 0
    m_tiles, n_tiles, k_tiles = -(-M // BM), -(-N // BN), K // BK
    C = torch.full((M, N), float("nan"))
    row0 = ROW[:, 0:1]                                # the thread's first row (register 0)
    second = ((torch.arange(REGS) // 2) % 2 == 1)[None, :].expand(CONSUMER_THREADS, REGS)
    for tm in range(m_tiles):
        for tn in range(n_tiles):
            acc = torch.zeros(CONSUMER_THREADS, REGS)
            raw = torch.zeros(CONSUMER_THREADS, REGS)
            rows0 = (tm * BM + row0).clamp(max=M - 1)             # row0 = min(tm * BM + row_in_tile, M - 1)
            rows1 = (tm * BM + row0 + 8).clamp(max=M - 1)
            for kt in range(k_tiles):
                ka = min(kt + 1, k_tiles - 1) if "sa_next_k_block" in bugs else kt
                sb_row = tm if "sb_from_m_tile" in bugs else tn
                if "sb_row_not_block" in bugs:
                    sb_row = min(tn * BN, SB.shape[0] - 1)
                sb = SB[sb_row, kt]
                s0 = SA[rows0, ka] * sb
                s1 = (s0 if "one_row_per_thread" in bugs else SA[rows1, ka] * sb)
                part_tile = box(A, tm * BM, BM, kt * BK) @ box(B, tn * BN, BN, kt * BK).t()
                part = part_tile[ROW, COL]                            # the wgmma fragment of each thread
                scale = torch.where(second, s1.expand(-1, REGS), s0.expand(-1, REGS))
                if "scale_once_at_end" in bugs:
                    raw = raw + part
                    if kt == k_tiles - 1:
                        acc = raw * scale
                else:
                    acc = acc + part * scale
            tile = torch.empty(BM, BN)
            tile[ROW, COL] = acc.to(torch.bfloat16).float()         # epilogue: registers -> tile, bf16
            r1, c1 = min(BM, M - tm * BM), min(BN, N - tn * BN)     # the TMA store clips at M and N
            C[tm * BM: tm * BM + r1, tn * BN: tn * BN + c1] = tile[:r1, :c1]
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
            try:
                got = model(x, shape, bugs)
            except AssertionError as e:  # the model found the kernel reading what it never wrote
                ok = False
                if not quiet:
                    print(f"FAIL {shape} {kind}: {e}")
                continue
            stats = compare_output("C", got, task.reference(x, shape)["C"], **task.tolerance,
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
