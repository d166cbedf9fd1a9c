"""CPU model of tasks/gemm_nvfp4/solutions/cuda_ptx_blackwell.cu (CUDA C++ / inline PTX NVFP4 GEMM, sm_100a): a torch
re-enactment of its tile / K-step loop and of its scale handling, against the task's reference at the task's tolerance
(the judge's own compare_output).

A PASS SHOWS THAT THE KERNEL'S SCALE INDEXING AGREES WITH THE RULES MODELLED HERE, NOT THAT THE KERNEL RUNS: no B200 is
in this workplace and the kernel has never run.

As tasks/gemm_mxfp8/verify/cuda_ptx_blackwell_model.py (whose pieces it reuses), it builds the expert with nvcc and
calls its exported rule functions (xl_rule_*):
  * scale staging: lane l, word j loads the 8 e4m3 bytes of K step kt of tile row xl_rule_scale_row(l, j) (e4m3 1.0
    past M or N); bytes 4 c .. 4 c + 3 (the scales of MMA c) go to word xl_rule_scale_word(l, j) of chunk c of the
    operand (slot s = kt % STAGES: SFA chunks 0, 1, then SFB chunks 0, 1, 512 bytes each);
  * tcgen05.cp.32x128b.warpx4 of each chunk to the column its scale operand names (descriptor decoded as there);
  * the MMA c of the step (kind::mxf4nvf4 .scale_vec::4X, K = 64): its descriptor decoded (M, N, E2M1 x E2M1, UE4M3
    scale type, scale-factor ids 0), row m of A takes bytes 0..3 of TMEM lane m, column (operand's) + m // 32, byte e
    scaling elements 16 e .. 16 e + 15 of the MMA's 64 (CUTLASS's make_tmem_layout_sfa for NVFP4, which
    check_cutlass_layouts() below reads at trace time), likewise B;
  * the packed operands as the MMA reads them from the TMA boxes: 64 bytes per row and K step, element 2 j of a byte
    pair in the low nibble (the task's packing; the swizzle is TMA's and the descriptor's, not modelled), zero past
    M and N; fp32 accumulation per 16-element block (internal order and precision NOT modelled), bf16 epilogue.
check_cutlass_layouts() (nvidia-cutlass-dsl, trace time): CUTLASS's NVFP4 shared-memory and tensor-memory scale
layouts for this tile put row m, scale e of MMA c where the expert's rules put them.
Not modelled: pipelines, barriers, the epilogue's TMEM loads, the hardware's reading of TMEM and of swizzled fp4 rows.

    python3 tasks/gemm_nvfp4/verify/cuda_ptx_blackwell_model.py          # cases (+ layouts); 0 = PASS
    python3 tasks/gemm_nvfp4/verify/cuda_ptx_blackwell_model.py --bugs   # every injected bug must FAIL
"""
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[3]
EXPERT = ROOT / "tasks/gemm_nvfp4/solutions/cuda_ptx_blackwell.cu"
sys.path.insert(0, str(ROOT))
from xlang.candidate import load_module  # noqa: E402

MX = load_module(ROOT / "tasks/gemm_mxfp8/verify/cuda_ptx_blackwell_model.py", "mxfp8_cuda_ptx_model_for_nvfp4")
SF_VEC = 16
SCALE_ONE = 0x38   # e4m3 1.0
UNWRITTEN = MX.UNWRITTEN


def build_rules_library(source=EXPERT, workdir=None):
    return MX.build_rules_library(source, workdir, task_name="gemm_nvfp4")


def Rules(so_path):
    return MX.Rules(so_path)


class _Bugged:
    """The expert's rules with one replaced by a plausible wrong one."""

    def __init__(self, rules, bug):
        self.__dict__.update(rules.__dict__)
        self.bug, self.base = bug, rules

    def scale_row(self, lane, j):
        return 4 * lane + j if self.bug == "lane_rows_consecutive" else self.base.scale_row(lane, j)

    def scale_word(self, lane, j):
        return lane + 32 * j if self.bug == "chunk_row_major" else self.base.scale_word(lane, j)

    def scale_operand(self, tmem, s, operand, c):
        if self.bug == "both_mmas_one_chunk":   # the second MMA of the step reads the first MMA's scales
            return self.base.scale_operand(tmem, s, operand, 0)
        if self.bug == "columns_shared":        # one set of scale columns for every slot
            return self.base.scale_operand(tmem, 0, operand, c)
        return self.base.scale_operand(tmem, s, operand, c)

    def idesc(self, sfa, sfb):
        d = self.base.idesc(sfa, sfb)
        return d | (1 << 23) if self.bug == "scales_as_ue8m0" else d   # the scale-type bit says UE8M0

    def chunk_desc(self, addr):
        d = self.base.chunk_desc(addr)
        return (d & ~(0x3FFF << 32)) | (16 << 32) if self.bug == "chunk_sbo_256" else d


LOOP_BUGS = ("sb_from_m_tile", "scale_words_swapped")   # the kernel's loop code, re-enacted here
BUGS = ("lane_rows_consecutive", "chunk_row_major", "both_mmas_one_chunk", "columns_shared", "scales_as_ue8m0",
        "chunk_sbo_256") + LOOP_BUGS


def chunk_addr(rules, s, operand, c):
    return MX.SF_BASE + s * 2 * rules.CHUNKS * rules.CHUNK + (operand * rules.CHUNKS + c) * rules.CHUNK


def check_static(rules):
    """Each (slot, operand, MMA) has its own 4 scale columns, outside the accumulator and inside the allocation."""
    failures, spans = [], {}
    for s in range(rules.STAGES):
        for operand in (0, 1):
            for c in range(rules.CHUNKS):
                col = rules.scale_operand(0, s, operand, c) & 0xFFFF
                spans[(s, operand, c)] = set(range(col, col + 4))
                if col < rules.ACC_COLS or col + 4 > rules.TMEM_COLS:
                    failures.append(f"{(s, operand, c)}: scale columns {col}..{col + 3} outside "
                                    f"[{rules.ACC_COLS}, {rules.TMEM_COLS})")
    keys = sorted(spans)
    for i, a in enumerate(keys):
        for b in keys[i + 1:]:
            if spans[a] & spans[b]:
                failures.append(f"scale columns of {a} and {b} overlap")
    return failures


def stage(smem, scales, rows, row0, kt, s, operand, rules, bugs):
    """The scale warp's stores of one operand's chunks for one K step (its stage_scales)."""
    per_step = 4 * rules.CHUNKS
    raw = scales.view(torch.uint8)
    for lane in range(32):
        for j in range(4):
            row = row0 + rules.scale_row(lane, j)
            step = raw[row, per_step * kt: per_step * (kt + 1)].long() if row < rows \
                else torch.full((per_step,), SCALE_ONE)
            for c in range(rules.CHUNKS):
                word = step[4 * (rules.CHUNKS - 1 - c): 4 * (rules.CHUNKS - c)] if "scale_words_swapped" in bugs \
                    else step[4 * c: 4 * c + 4]
                at = chunk_addr(rules, s, operand, c) + 4 * rules.scale_word(lane, j)
                smem[at: at + 4] = word


def mma_scales(tmem, operand_addr, sf_id, rows, scale_type):
    """[rows, 4] scale factors an MMA .scale_vec::4X reads: row m, entry e at TMEM lane m, column + m // 32, byte e."""
    assert sf_id == 0, "a .scale_vec::4X MMA here reads all four bytes of the column (scale-factor id 0)"
    assert scale_type == 0, "the descriptor's scale type is not UE4M3"
    col = operand_addr & 0xFFFF
    assert (operand_addr >> 16) & 0xFFFF == 0, "scale operand with a lane offset or an id in bits 30-31"
    m = torch.arange(rows)
    byte = tmem[m, col + m // 32, :]
    assert (byte != UNWRITTEN).all(), "the MMA reads a scale byte nothing wrote"
    return byte.to(torch.uint8).view(torch.float8_e4m3fn).float()


def packed_box(x, row0, rows, byte0, width):
    """A TMA box of rows x width bytes from packed x [R, K/2], zero past R, as e2m1 values [rows, 2 width]."""
    from tasks.gemm_nvfp4 import unpack_e2m1

    out = torch.zeros(rows, width, dtype=torch.uint8)
    r1 = min(row0 + rows, x.shape[0])
    if r1 > row0:
        out[: r1 - row0] = x[row0:r1, byte0:byte0 + width]
    return unpack_e2m1(out)


def model(inputs, shape, rules, bugs=()):
    A, B, SA, SB = inputs["A"], inputs["B"], inputs["SA"], inputs["SB"]
    M, N, K = shape["M"], shape["N"], shape["K"]
    BM, BN, BK, MMA_K = rules.BM, rules.BN, rules.BK, rules.MMA_K
    C = torch.full((M, N), float("nan"))
    for tm in range(-(-M // BM)):
        for tn in range(-(-N // BN)):
            smem = torch.full((1 << 18,), UNWRITTEN, dtype=torch.long)
            tmem = torch.full((MX.TMEM_LANES, rules.TMEM_COLS, 4), UNWRITTEN, dtype=torch.long)
            acc = torch.zeros(BM, BN)
            for kt in range(K // BK):
                s = kt % rules.STAGES
                stage(smem, SA, M, tm * BM, kt, s, 0, rules, bugs)
                stage(smem, SB, N, (tm * BM) if "sb_from_m_tile" in bugs else tn * BN, kt, s, 1, rules, bugs)
                for operand in (0, 1):
                    for c in range(rules.CHUNKS):
                        MX.copy_to_tmem(tmem, smem, rules.scale_operand(0, s, operand, c) & 0xFFFF,
                                        rules.chunk_desc(chunk_addr(rules, s, operand, c)))
                a = packed_box(A, tm * BM, BM, kt * BK // 2, BK // 2)
                b = packed_box(B, tn * BN, BN, kt * BK // 2, BK // 2)
                for c in range(BK // MMA_K):
                    sfa, sfb = rules.scale_operand(0, s, 0, c), rules.scale_operand(0, s, 1, c)
                    d = MX.decode_idesc(rules.idesc(sfa, sfb))
                    assert (d["m"], d["n"], d["a_type"], d["b_type"], d["a_major"], d["b_major"], d["other"]) == \
                        (BM, BN, 1, 1, 0, 0, 0), f"instruction descriptor {d}"
                    sa = mma_scales(tmem, sfa, d["a_sf_id"], BM, d["scale_type"])
                    sb = mma_scales(tmem, sfb, d["b_sf_id"], BN, d["scale_type"])
                    for e in range(MMA_K // SF_VEC):
                        ks = slice(c * MMA_K + e * SF_VEC, c * MMA_K + (e + 1) * SF_VEC)
                        acc = acc + (a[:, ks] @ b[:, ks].t()) * (sa[:, e:e + 1] * sb[:, e][None, :])
            r1, c1 = min(BM, M - tm * BM), min(BN, N - tn * BN)
            C[tm * BM: tm * BM + r1, tn * BN: tn * BN + c1] = acc[:r1, :c1].to(torch.bfloat16).float()
    return C


def check_cutlass_layouts(rules):
    """CUTLASS's NVFP4 scale layouts (nvidia-cutlass-dsl, trace time) against the expert's rules: shared memory (row m,
    element k of MMA c: byte 512 c + 4 scale_word + k // 16 of the slot's SFA chunks) and tensor memory (lane m % 32,
    byte 4 (column of MMA c - column of MMA 0) + 4 (m // 32) + k // 16, with copies in the other lane quarters)."""
    import cutlass
    import cutlass.cute as cute
    import cutlass.utils.blackwell_helpers as sm100_utils
    import cutlass.utils.blockscaled_layout as blockscaled_utils
    from cutlass.cute.nvgpu import OperandMajorMode, tcgen05

    BM, BN, BK, CHUNKS, CHUNK = rules.BM, rules.BN, rules.BK, rules.CHUNKS, rules.CHUNK
    smem_byte = {rules.scale_row(lane, j): 4 * rules.scale_word(lane, j) for lane in range(32) for j in range(4)}
    col0 = rules.scale_operand(0, 0, 0, 0) & 0xFFFF
    tmem_col = [(rules.scale_operand(0, 0, 0, c) & 0xFFFF) - col0 for c in range(CHUNKS)]
    failures = []
    if sorted(smem_byte) != list(range(BM)):
        failures.append("the scale warp's loads do not cover the tile's rows once each")

    @cute.jit
    def _check():
        mma = sm100_utils.make_blockscaled_trivial_tiled_mma(
            cutlass.Float4E2M1FN, cutlass.Float4E2M1FN, OperandMajorMode.K, OperandMajorMode.K, cutlass.Float8E4M3FN,
            SF_VEC, tcgen05.CtaGroup.ONE, (BM, BN))
        if cutlass.const_expr(cute.size(mma.shape_mnk, mode=[2]) != rules.MMA_K):
            failures.append(f"CUTLASS's MMA covers K = {cute.size(mma.shape_mnk, mode=[2])}")
        sfa = blockscaled_utils.make_smem_layout_sfa(mma, (BM, BN, BK), SF_VEC, 2)
        tsfa = blockscaled_utils.make_tmem_layout_sfa(mma, (BM, BN, BK), SF_VEC, cute.slice_(sfa, (None, None, None, 0)))
        for m in cutlass.range_constexpr(BM):
            for c in cutlass.range_constexpr(CHUNKS):
                for k in (0, 7, 16, 31, 47, 63):
                    want = CHUNK * c + smem_byte.get(m, -999) + k // SF_VEC
                    if cutlass.const_expr(sfa(((m, k), 0, c, 0)) != want):
                        failures.append(f"smem row {m} MMA {c} element {k}: CUTLASS {sfa(((m, k), 0, c, 0))}, "
                                        f"the expert {want}")
                    want_t = (m % 32) * (1 << 18) + 4 * (tmem_col[c] + m // 32) + k // SF_VEC
                    if cutlass.const_expr(tsfa(((m, k), 0, c)) != want_t):
                        failures.append(f"tmem row {m} MMA {c} element {k}: CUTLASS {tsfa(((m, k), 0, c))}, "
                                        f"the expert {want_t}")

    cute.compile(_check, options="--gpu-arch sm_100a")
    return failures


# K = 1152: 9 K steps over 8 slots (slot reuse). It was chosen when the task's first draws (block magnitudes 2**-4 to
# 2**8 per operand) made one element of 102800 miss the tolerance at M=257, N=400, K=1280 in this model and in the
# task's own honest emulation (fp32 sums of partials up to ~1e6 cancelling to ~0.1, below atol's reach); the draws
# are lower since 2026-12-02 (LOW_EXP, HIGH_EXP in tasks/gemm_nvfp4/__init__.py; tests/test_block_scaled_depth.py).
CASES = (({"M": 130, "N": 144, "K": 256}, 1), ({"M": 7, "N": 272, "K": 384}, 2),
         ({"M": 257, "N": 400, "K": 1152}, 3), ({"M": 64, "N": 16, "K": 128}, 4))


def run_cases(rules, bugs=(), cases=CASES, quiet=False):
    from xlang.profiler.judge.verify import compare_output
    from xlang.task import get_task

    task = get_task("gemm_nvfp4")
    for bug in bugs:
        if bug not in LOOP_BUGS:
            rules = _Bugged(rules, bug)
    failures = check_static(rules)
    for f in failures if not quiet else ():
        print("FAIL static:", f)
    ok = not failures
    for shape, seed in cases:
        task.check_shape(shape)
        for kind in task.input_kinds:
            x = task.make_inputs(shape, seed, "cpu", kind)
            try:
                got = model(x, shape, rules, bugs)
            except AssertionError as e:
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
    rules = Rules(build_rules_library())
    if "--bugs" in argv:
        caught = [b for b in BUGS if not run_cases(rules, (b,), cases=CASES[:2], quiet=True)]
        for b in BUGS:
            print(f"bug {b}: {'FAILS (caught)' if b in caught else 'PASSES (missed)'}")
        return 0 if len(caught) == len(BUGS) else 1
    good = True
    if "--no-layouts" not in argv:
        failures = check_cutlass_layouts(rules)
        for f in failures[:20]:
            print("FAIL", f)
        print("layouts:", "PASS" if not failures else f"FAIL ({len(failures)} mismatches)")
        good &= not failures
    good &= run_cases(rules)
    print("PASS" if good else "FAIL")
    return 0 if good else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
