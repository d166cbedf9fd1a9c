"""Checks without a GPU for tasks/gemm_nvfp4/solutions/cutedsl_blackwell.py (CuTe DSL NVFP4 GEMM, sm_100a): trace-time
checks of the scale-chunk layouts its scale warps write by hand, then a CPU model of its tile / K-step loop and its
scale handling (the scale warps' word copies, the MMAs' read of the chunks, the per-16 block scaling, the packed e2m1
operands), against the task's reference at the task's tolerance (the judge's own compare_output).

A PASS SHOWS THAT THE KERNEL'S SCALE INDEXING AGREES WITH THE RULES MODELLED HERE, NOT THAT THE KERNEL RUNS: no
B200 is in this workplace and it has never run.

Part 1, layouts (trace time, nvidia-cutlass-dsl; the expert's own make_blockscaled_trivial_tiled_mma and
make_smem_layout_sfa / sfb calls, kind::mxf4nvf4 with 16-element e4m3 scales): stage s of the SFA and SFB
shared-memory layouts puts the scale of tile row m, scale e (elements 16 e .. 16 e + 15) of the K step's MMA c
(K = 64 each) at byte 1024 s + 512 c + 16 (m % 32) + 4 (m // 32) + e: chunk c is CuTe's BlockScaledBasicChunk for
16-element blocks (the PTX ISA's scale-factor layout for .scale_vec::4X, which tcgen05.cp .32x128b.warpx4 moves
row by row into tensor memory). That is where the scale warp's store of word _source_word(kt, c) of row
_chunk_row(lane, j) lands (word _chunk_word(lane, j, c), the expert's own functions). CUTLASS's tensor-memory
layouts (make_tmem_layout_sfa / sfb) put row m, scale e of MMA c at lane m % 32, column 4 c + m // 32, byte e:
where tcgen05.cp of chunk c to column 4 c puts that chunk byte, within the expert's 8 + 8 columns per stage.
Part 2, CPU model (torch, fp32; bf16 rounding where the kernel rounds):
  * the scale warps, per tile and K step kt: lane l, j < 4, c < 2 reads the little-endian word 2 kt + c of row
    min(tile * 128 + l + 32 j, rows - 1) of SA (SB) and stores it at word 128 c + 4 l + j of the stage's 1 KiB;
  * MMA c reads the scale of row m, scale e at byte 512 c + 16 (m % 32) + 4 (m // 32) + e (part 1's rule) as e4m3,
    and per 16-element block adds (a_blk @ b_blk^T) * sa * sb into an fp32 accumulator (the tensor core's internal
    summation order and precision are NOT modelled);
  * the operands as TMA boxes of 128 rows x 64 bytes, zero past M and N, element 2 j of a row from byte j's low
    nibble (the task's packing, taken to be the tensor core's order for 4-bit elements: PTX ISA, packed sub-byte
    data, lower index in the lower bits; not checkable here); bf16 epilogue, store clipped at M and N.
Not modelled: the pipelines, the shared-memory swizzle of the 64-byte operand rows (TMA's and the descriptors'),
tcgen05.cp's copies into the other lane quarters, how the MMA reads tensor memory (the PTX ISA's rule, as CUTLASS's
helpers encode it), the epilogue's TMEM path (the bf16 expert's).

    python3 tasks/gemm_nvfp4/verify/cutedsl_blackwell_emulate.py           # layouts + cases; 0 = PASS
    python3 tasks/gemm_nvfp4/verify/cutedsl_blackwell_emulate.py --bugs    # every injected bug must FAIL
    python3 tasks/gemm_nvfp4/verify/cutedsl_blackwell_emulate.py --no-layouts
"""
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[3]
EXPERT = ROOT / "tasks/gemm_nvfp4/solutions/cutedsl_blackwell.py"
BM, BN, BK, SF_VEC, MMA_K = 128, 128, 128, 16, 64
MMAS = BK // MMA_K                    # MMAs per K step, one 512-byte scale chunk each per operand
CHUNK = 512                           # bytes of one 128-row x 4-scale chunk
BUGS = (
    "chunk_word_per_row",      # the word of row r stored at word r (row-major) instead of 4 (r % 32) + r // 32
    "lane_rows_consecutive",   # lane l takes rows 4 l + j instead of l + 32 j (stored at the same words)
    "mma_words_swapped",       # MMA c's chunk from word 2 kt + 1 - c
    "one_word_per_step",       # both MMAs' chunks from word 2 kt (the MXFP8 expert's one word per K step)
    "sb_from_m_tile",          # SB chunks built from tile tm
    "bytes_reversed",          # the word's bytes read big-endian
    "scales_as_ue8m0",         # the scale bytes read as UE8M0 exponents (MXFP8's scale type)
    "a_nibbles_swapped",       # A's element 2 j from the high nibble (in both operands it would cancel: the same
)                              # permutation of K on both sides leaves each 16-block's dot product as it was)


def chunk_byte(m, e, c):
    """Byte of tile row m, scale e of MMA c in one stage's chunks (part 1 checks the expert's layouts say so)."""
    return CHUNK * c + 16 * (m % 32) + 4 * (m // 32) + e


# ============================================================================================= part 1: layouts
def check_layouts():
    # CuTe DSL imported here: part 2 (the model) needs only torch, and nvidia-cutlass-dsl is absent on some machines
    import cutlass
    import cutlass.cute as cute
    import cutlass.utils.blackwell_helpers as sm100_utils
    import cutlass.utils.blockscaled_layout as blockscaled_utils
    from cutlass.cute.nvgpu import OperandMajorMode, tcgen05

    from xlang.candidate import load_module

    expert = load_module(EXPERT, "cutedsl_blackwell_nvfp4_expert")
    failures = []
    for name, want in (("BM", BM), ("BN", BN), ("BK", BK), ("SF_VEC", SF_VEC), ("MMA_K", MMA_K), ("MMAS", MMAS)):
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
        if cutlass.const_expr(cute.size(mma.shape_mnk, mode=[2]) != MMA_K):
            failures.append(f"one MMA covers K = {cute.size(mma.shape_mnk, mode=[2])}, the kernel assumes {MMA_K}")
        for m in cutlass.range_constexpr(BM):
            for c in cutlass.range_constexpr(MMAS):
                for e in cutlass.range_constexpr(MMA_K // SF_VEC):
                    want = chunk_byte(m, e, c)
                    for k in (0, 9, 15):   # every element of the 16-block reads the same byte
                        kk = c * MMA_K + e * SF_VEC + k
                        if cutlass.const_expr(base((m, kk)) != want):
                            failures.append(f"BlockScaledBasicChunk ({m}, {kk}): {base((m, kk))} != {want}")
                        for name, lay in staged:
                            for s in cutlass.range_constexpr(stages):
                                got = lay(((m, e * SF_VEC + k), 0, c, s))
                                if cutlass.const_expr(got != 2 * CHUNK * s + want):
                                    failures.append(f"{name} row {m} MMA {c} scale {e} stage {s}: byte {got} != "
                                                    f"{2 * CHUNK * s + want}")
        # The tensor-memory side (addresses of 8-bit elements: lane at 2**18 = 4 bytes x 2**16, column at 4 bytes):
        # tile row m, scale e of MMA c at lane m % 32 (and its copies in the other lane quarters), column
        # 4 c + m // 32, byte e. tcgen05.cp .32x128b puts chunk row r (bytes 16 r .. 16 r + 15) into lane r, 4
        # columns (PTX ISA tcgen05.cp): chunk c copied to column 4 c puts byte 16 (m % 32) + 4 (m // 32) + e there.
        for name, lay in staged:
            tmem_of = blockscaled_utils.make_tmem_layout_sfa if name == "SFA" else blockscaled_utils.make_tmem_layout_sfb
            tlay = tmem_of(mma, (BM, BN, BK), SF_VEC, cute.slice_(lay, (None, None, None, 0)))
            for m in cutlass.range_constexpr(BM):
                for c in cutlass.range_constexpr(MMAS):
                    for e in cutlass.range_constexpr(MMA_K // SF_VEC):
                        want = (m % 32) * (1 << 18) + 4 * (4 * c + m // 32) + e
                        got = tlay(((m, e * SF_VEC), 0, c))
                        if cutlass.const_expr(got != want):
                            failures.append(f"{name} tensor memory row {m} MMA {c} scale {e}: {got} != {want}")
        for name, lay in staged:
            if cutlass.const_expr(cute.cosize(cute.filter_zeros(lay)) != MMAS * CHUNK * stages):
                failures.append(f"{name}: {cute.cosize(cute.filter_zeros(lay))} bytes, not {MMAS * CHUNK} per stage")

    cute.compile(_check, options="--gpu-arch sm_100a")
    # the expert's own copy rule (its _chunk_row / _chunk_word / _source_word): every row and MMA once, at the byte
    # the layouts give, from the word holding that MMA's four scales
    placed = sorted((expert._chunk_row(lane, j), c, 4 * expert._chunk_word(lane, j, c))
                    for lane in range(32) for j in range(4) for c in range(MMAS))
    if placed != [(m, c, chunk_byte(m, 0, c)) for m in range(BM) for c in range(MMAS)]:
        failures.append("the scale warp's words do not land where the chunk layouts put their rows")
    for kt in (0, 1, 5):
        for c in range(MMAS):
            if expert._source_word(kt, c) != MMAS * kt + c:   # word w of a row: scales 4 w .. 4 w + 3, K 64 w ..
                failures.append(f"K step {kt} MMA {c} reads scale word {expert._source_word(kt, c)}")
    for name, rows, cols in (("SFA", BM, expert.SFA_COLS), ("SFB", BN, expert.SFB_COLS)):
        if 4 * (MMAS - 1) + (rows - 1) // 32 >= cols:   # the last MMA's last row's column
            failures.append(f"{name}: more tensor-memory columns than the {cols} the expert reserves")
    if expert.SF_COL0 + expert.STAGES * expert.SF_STAGE_COLS > expert.TMEM_COLS:
        failures.append("the scale columns run past the tensor memory the expert allocates")
    for f in failures[:20]:
        print("FAIL", f)
    print("layouts:", "PASS" if not failures else f"FAIL ({len(failures)} mismatches)")
    return not failures


# ============================================================================================= part 2: model
E2M1 = torch.tensor((0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0))


def packed_box(x, row0, rows, byte0, swapped=False):
    """A TMA box of rows x 64 bytes of packed x [R, K/2] at (row0, byte0), zero past R, as e2m1 values [rows, 128]."""
    raw = torch.zeros(rows, BK // 2, dtype=torch.uint8)
    r1 = min(row0 + rows, x.shape[0])
    if r1 > row0:
        raw[: r1 - row0] = x[row0:r1, byte0:byte0 + BK // 2]
    lo, hi = raw & 0xF, raw >> 4
    if swapped:
        lo, hi = hi, lo
    codes = torch.stack((lo, hi), dim=-1).flatten(-2).long()
    return torch.where(codes >= 8, -E2M1[codes & 7], E2M1[codes & 7])


def scale_warp_chunks(scales, rows, tile, kt, bugs):
    """The 1 KiB (two 512-byte chunks) the scale warps write for one operand, tile and K step (_scale_chunks)."""
    raw = scales.view(torch.uint8)
    words = raw.shape[1] // 4
    chunks = torch.full((MMAS * CHUNK,), -1, dtype=torch.int32)      # -1: never written
    for lane in range(32):
        for j in range(4):
            r = 4 * lane + j if "lane_rows_consecutive" in bugs else lane + 32 * j
            row = min(tile * BM + r, rows - 1)
            for c in range(MMAS):
                w = MMAS * kt + (1 - c if "mma_words_swapped" in bugs else 0 if "one_word_per_step" in bugs else c)
                assert w < words
                word = raw[row, 4 * w: 4 * w + 4].to(torch.int32)   # little-endian: byte b at + b
                if "bytes_reversed" in bugs:
                    word = word.flip(0)
                at = CHUNK * c + (4 * r if "chunk_word_per_row" in bugs else 4 * (4 * lane + j))
                chunks[at: at + 4] = word
    return chunks


def chunk_scales(chunks, bugs):
    """[128 rows, 8 scales] (MMA c's scale e at 4 c + e) as the MMAs read them from the chunks."""
    m = torch.arange(BM)[:, None]
    e = torch.arange(MMA_K // SF_VEC)[None, :]
    byte = torch.cat([chunks[chunk_byte(m, e, c)] for c in range(MMAS)], dim=1)
    assert (byte >= 0).all(), "the MMA reads a scale byte the scale warps never wrote"
    if "scales_as_ue8m0" in bugs:
        return (byte.float() - 127.0).exp2()
    return byte.to(torch.uint8).view(torch.float8_e4m3fn).float()


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
                sa = chunk_scales(scale_warp_chunks(SA, M, tm, kt, bugs), bugs)
                sb = chunk_scales(scale_warp_chunks(SB, N, tm if "sb_from_m_tile" in bugs else tn, kt, bugs), bugs)
                a = packed_box(A, tm * BM, BM, kt * BK // 2, "a_nibbles_swapped" in bugs)
                b = packed_box(B, tn * BN, BN, kt * BK // 2)
                for blk in range(BK // SF_VEC):   # MMA blk // 4, its scale blk % 4
                    ks = slice(blk * SF_VEC, (blk + 1) * SF_VEC)
                    acc = acc + (a[:, ks] @ b[:, ks].t()) * (sa[:, blk:blk + 1] * sb[:, blk][None, :])
            r1, c1 = min(BM, M - tm * BM), min(BN, N - tn * BN)
            C[tm * BM: tm * BM + r1, tn * BN: tn * BN + c1] = acc[:r1, :c1].to(torch.bfloat16).float()
    return C


CASES = (({"M": 130, "N": 144, "K": 256}, 1), ({"M": 7, "N": 272, "K": 384}, 2), ({"M": 257, "N": 400, "K": 640}, 3),
         ({"M": 64, "N": 16, "K": 128}, 4))


def run_cases(bugs=(), cases=CASES, quiet=False):
    """True when the model matches the task's reference on every case and input kind."""
    from xlang.profiler.judge.verify import compare_output
    from xlang.task import get_task

    task = get_task("gemm_nvfp4")
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
