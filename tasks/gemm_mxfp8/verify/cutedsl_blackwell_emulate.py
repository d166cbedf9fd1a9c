"""Checks without a GPU for tasks/gemm_mxfp8/solutions/cutedsl_blackwell.py (CuTe DSL MXFP8 GEMM, sm_100a): trace-time
checks of the scale-chunk layout its scale warp writes by hand, then a CPU model of its tile / K-step loop and its
scale handling (the scale warp's word copies, the MMA's read of the chunk, the per-32 block scaling), against the
task's reference at the task's tolerance (the judge's own compare_output).

A PASS SHOWS THAT THE KERNEL'S SCALE INDEXING AGREES WITH THE RULES MODELLED HERE, NOT THAT THE KERNEL RUNS: no
B200 is in this workplace and it has never run.

Part 1, layouts (trace time, nvidia-cutlass-dsl; the expert's own make_blockscaled_trivial_tiled_mma and
make_smem_layout_sfa / sfb calls): stage s of the SFA and SFB shared-memory layouts puts the scale of tile row m,
K block kb (32 elements each) at byte 512 s + 16 (m % 32) + 4 (m // 32) + kb, the same as CuTe's
BlockScaledBasicChunk tiled to 128 x 128 (the PTX ISA's scale-factor layout for tcgen05.mma .scale_vec::1X, which
tcgen05.cp .32x128b.warpx4 moves row by row into tensor memory). That is the address the scale warp's
`chunk[4 lane + j]` word store hits for row lane + 32 j (the expert's _chunk_word / _chunk_row). CUTLASS's tensor-memory layouts (make_tmem_layout_sfa / sfb)
put row m, block kb at lane m % 32, column m // 32, byte kb: where tcgen05.cp puts that chunk byte, within the
expert's 4 + 4 columns per stage.
Part 2, CPU model (torch, fp32; bf16 rounding where the kernel rounds):
  * the scale warps, per tile and K step kt (the g-th step by warp 6 + g % 4, once): lane l, j < 4 reads the
    little-endian word kt of row min(tile * 128 + l + 32 j, rows - 1) of SA (SB) and stores it at word 4 l + j of
    a 512-byte chunk;
  * the MMA reads the scale of row m, K block kb at chunk byte 16 (m % 32) + 4 (m // 32) + kb (part 1's rule),
    and per K block of 32 adds (A_blk @ B_blk^T) * 2**(sa - 127) * 2**(sb - 127) into an fp32 accumulator
    (the tensor core's internal summation order and precision are NOT modelled);
  * TMA boxes zero-filled past M and N, bf16 epilogue, store clipped at M and N.
Not modelled: the pipelines, tcgen05.cp's copies into the other lane quarters, how the MMA reads tensor memory
(the PTX ISA's rule, as CUTLASS's helpers encode it), the epilogue's TMEM path (the bf16 expert's).

    python3 tasks/gemm_mxfp8/verify/cutedsl_blackwell_emulate.py           # layouts + cases; 0 = PASS
    python3 tasks/gemm_mxfp8/verify/cutedsl_blackwell_emulate.py --bugs    # every injected bug must FAIL
    python3 tasks/gemm_mxfp8/verify/cutedsl_blackwell_emulate.py --no-layouts
"""
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[3]
EXPERT = ROOT / "tasks/gemm_mxfp8/solutions/cutedsl_blackwell.py"
BM, BN, BK, SF_VEC = 128, 128, 128, 32
CHUNK = 512                           # bytes of one 128-row x 4-block scale chunk
BUGS = (
    "chunk_word_per_row",      # the word of row r stored at word r (row-major) instead of 4 (r % 32) + r // 32
    "lane_rows_consecutive",   # lane l takes rows 4 l + j instead of l + 32 j (stored at the same words)
    "word_of_next_step",       # SA word kt + 1 (clamped) instead of kt
    "sb_from_m_tile",          # SB chunk built from tile tm
    "bytes_reversed",          # the word's bytes read big-endian
)


def chunk_byte(m, kb):
    """Byte of tile row m, K block kb in a scale chunk (BlockScaledBasicChunk; part 1 checks the expert's layouts)."""
    return 16 * (m % 32) + 4 * (m // 32) + kb


# ============================================================================================= part 1: layouts
def check_layouts():
    # CuTe DSL imported here: part 2 (the model) needs only torch, and nvidia-cutlass-dsl is absent on some machines
    import cutlass
    import cutlass.cute as cute
    import cutlass.utils.blackwell_helpers as sm100_utils
    import cutlass.utils.blockscaled_layout as blockscaled_utils
    from cutlass.cute.nvgpu import OperandMajorMode, tcgen05

    from xlang.candidate import load_module

    expert = load_module(EXPERT, "cutedsl_blackwell_mxfp8_expert")
    failures = []
    for name, want in (("BM", BM), ("BN", BN), ("BK", BK), ("SF_VEC", SF_VEC)):
        if getattr(expert, name) != want:
            failures.append(f"expert {name} = {getattr(expert, name)}, the model assumes {want}")
    stages = expert.STAGES

    @cute.jit
    def _check():
        mma = sm100_utils.make_blockscaled_trivial_tiled_mma(
            expert.AB, expert.AB, OperandMajorMode.K, OperandMajorMode.K, expert.SF, SF_VEC, tcgen05.CtaGroup.ONE,
            (BM, BN))
        base = cute.tile_to_shape(blockscaled_utils.BlockScaledBasicChunk(SF_VEC).layout, (BM, BK), (2, 1))
        staged = (("SFA", blockscaled_utils.make_smem_layout_sfa(mma, (BM, BN, BK), SF_VEC, stages)),
                  ("SFB", blockscaled_utils.make_smem_layout_sfb(mma, (BM, BN, BK), SF_VEC, stages)))
        if cutlass.const_expr(cute.size(mma.shape_mnk, mode=[2]) != SF_VEC):
            failures.append(f"one MMA covers K = {cute.size(mma.shape_mnk, mode=[2])}, the kernel assumes {SF_VEC}")
        for m in cutlass.range_constexpr(BM):
            for kb in cutlass.range_constexpr(BK // SF_VEC):
                want = chunk_byte(m, kb)
                for k in (0, 17, 31):   # every element of the 32-block reads the same byte
                    if cutlass.const_expr(base((m, kb * SF_VEC + k)) != want):
                        failures.append(f"BlockScaledBasicChunk ({m}, {kb * SF_VEC + k}): {base((m, kb * SF_VEC + k))} != {want}")
                for name, lay in staged:
                    for s in cutlass.range_constexpr(stages):
                        got = lay(((m, 0), 0, kb, s))
                        if cutlass.const_expr(got != CHUNK * s + want):
                            failures.append(f"{name} row {m} block {kb} stage {s}: byte {got} != {CHUNK * s + want}")
        # The tensor-memory side (addresses of 8-bit elements: lane at 2**18 = 4 bytes x 2**16, column at 4 bytes):
        # tile row m, block kb at lane m % 32 (and its copies in the other lane quarters), column m // 32, byte kb.
        # tcgen05.cp .32x128b puts chunk row r (bytes 16 r .. 16 r + 15) into lane r, 4 columns (PTX ISA tcgen05.cp),
        # so byte 16 (m % 32) + 4 (m // 32) + kb lands there: the 4 + 4 columns per stage the expert reserves.
        for name, lay in staged:
            tmem_of = blockscaled_utils.make_tmem_layout_sfa if name == "SFA" else blockscaled_utils.make_tmem_layout_sfb
            tlay = tmem_of(mma, (BM, BN, BK), SF_VEC, cute.slice_(lay, (None, None, None, 0)))
            for m in cutlass.range_constexpr(BM):
                for kb in cutlass.range_constexpr(BK // SF_VEC):
                    want = (m % 32) * (1 << 18) + 4 * (m // 32) + kb
                    if cutlass.const_expr(tlay(((m, 0), 0, kb)) != want):
                        failures.append(f"{name} tensor memory row {m} block {kb}: {tlay(((m, 0), 0, kb))} != {want}")
        for name, lay in staged:
            if cutlass.const_expr(cute.cosize(cute.filter_zeros(lay)) != CHUNK * stages):
                failures.append(f"{name}: {cute.cosize(cute.filter_zeros(lay))} bytes, not {CHUNK} per stage")

    cute.compile(_check, options="--gpu-arch sm_100a")
    # the expert's own copy rule (its _chunk_row / _chunk_word): every row once, at the byte the layouts give
    placed = sorted((expert._chunk_row(lane, j), 4 * expert._chunk_word(lane, j)) for lane in range(32) for j in range(4))
    if placed != [(m, chunk_byte(m, 0)) for m in range(BM)]:
        failures.append("the scale warp's words do not land where the chunk layout puts their rows")
    for name, rows, cols in (("SFA", BM, expert.SFA_COLS), ("SFB", BN, expert.SFB_COLS)):
        if 4 * ((rows - 1) // 32) + 3 >= 4 * cols:   # the last row's last byte (column rows // 32 - 1, byte 3)
            failures.append(f"{name}: more tensor-memory columns than the {cols} the expert reserves")
    for f in failures[:20]:
        print("FAIL", f)
    print("layouts:", "PASS" if not failures else f"FAIL ({len(failures)} mismatches)")
    return not failures


# ============================================================================================= part 2: model
def box(x, row0, rows, k0):
    """A TMA box of rows x 128 from x [R, K] at (row0, k0), zero past R."""
    out = torch.zeros(rows, BK)
    r1 = min(row0 + rows, x.shape[0])
    if r1 > row0:
        out[: r1 - row0] = x[row0:r1, k0:k0 + BK].float()
    return out


def scale_warp_chunk(scales, rows, tile, kt, bugs):
    """The 512-byte chunk the scale warp writes for one operand, tile and K step (the expert's _scale_chunk)."""
    k_steps = scales.shape[1] // 4
    chunk = torch.full((CHUNK,), -1, dtype=torch.int32)      # -1: never written
    for lane in range(32):
        for j in range(4):
            r = 4 * lane + j if "lane_rows_consecutive" in bugs else lane + 32 * j
            row = min(tile * BM + r, rows - 1)
            step = min(kt + 1, k_steps - 1) if "word_of_next_step" in bugs else kt
            word = scales[row, 4 * step: 4 * step + 4].to(torch.int32)   # little-endian: byte b at + b
            if "bytes_reversed" in bugs:
                word = word.flip(0)
            at = 4 * r if "chunk_word_per_row" in bugs else 4 * (4 * lane + j)
            chunk[at: at + 4] = word
    return chunk


def chunk_scales(chunk):
    """[128 rows, 4 blocks] scale factors as the MMA reads them from the chunk (2 ** (byte - 127))."""
    m = torch.arange(BM)[:, None]
    kb = torch.arange(BK // SF_VEC)[None, :]
    byte = chunk[chunk_byte(m, kb)]
    assert (byte >= 0).all(), "the MMA reads a scale byte the scale warp never wrote"
    return (byte.float() - 127.0).exp2()


def model(inputs, shape, bugs=()):
    """C as the expert computes it, tile by tile and K step by K step."""
    A, B, SA, SB = inputs["A"], inputs["B"], inputs["SA"], inputs["SB"]
    M, N, K = shape["M"], shape["N"], shape["K"]
    assert K % BK == 0
    C = torch.full((M, N), float("nan"))
    for tm in range(-(-M // BM)):
        for tn in range(-(-N // BN)):
            acc = torch.zeros(BM, BN)
            for kt in range(K // BK):
                sa = chunk_scales(scale_warp_chunk(SA, M, tm, kt, bugs))
                sb = chunk_scales(scale_warp_chunk(SB, N, tm if "sb_from_m_tile" in bugs else tn, kt, bugs))
                a, b = box(A, tm * BM, BM, kt * BK), box(B, tn * BN, BN, kt * BK)
                for kb in range(BK // SF_VEC):   # one tcgen05.mma (K = 32) per scale block
                    blk = slice(kb * SF_VEC, (kb + 1) * SF_VEC)
                    acc = acc + (a[:, blk] @ b[:, blk].t()) * (sa[:, kb:kb + 1] * sb[:, kb][None, :])
            r1, c1 = min(BM, M - tm * BM), min(BN, N - tn * BN)
            C[tm * BM: tm * BM + r1, tn * BN: tn * BN + c1] = acc[:r1, :c1].to(torch.bfloat16).float()
    return C


CASES = (({"M": 130, "N": 144, "K": 256}, 1), ({"M": 7, "N": 272, "K": 384}, 2), ({"M": 257, "N": 400, "K": 640}, 3),
         ({"M": 64, "N": 16, "K": 128}, 4))


def run_cases(bugs=(), cases=CASES, quiet=False):
    """True when the model matches the task's reference on every case and input kind."""
    from xlang.profiler.judge.verify import compare_output
    from xlang.task import get_task

    task = get_task("gemm_mxfp8")
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
