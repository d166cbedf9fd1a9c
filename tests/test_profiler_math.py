"""Math accounting from executed SASS (issue 12, item 4: "instructions executed means the work"): FLOPs per
opcode, the required tensor-core family's share of the candidate's math and its ratio to the task's FLOPs,
and the decision (executed.work_check). On the fixtures recorded on the H200 (tests/fixtures/profiler) and on
hand-made source pages. CPU only."""

import gzip
import json
import math
from pathlib import Path

import pytest

from xlang.archs import families, get_arch
from xlang.profiler import executed, ncu

FIX = Path(__file__).resolve().parent / "fixtures" / "profiler"
META = json.loads((FIX / "recorded.json").read_text())
H200 = get_arch("h200")
B200 = get_arch("b200")

# Shapes the fixtures were recorded at (tests/test_profiler_gpu.py: the correct GEMMs at the task's default
# 8192x7168x5120, the deliberately broken ones at SMALL = 2048x2048x1024).
BIG = 2 * 8192 * 7168 * 5120
SMALL = 2 * 2048 * 2048 * 1024


def _text(name: str) -> str:
    return gzip.open(FIX / name, "rt").read()


def _fixture_summary(label: str, task_flops: float) -> dict:
    profiles = ncu.merge(ncu.parse_source_page(_text(f"{label}.ncu_source.csv.gz")),
                         ncu.parse_details_page(_text(f"{label}.ncu_details.csv.gz")))
    names = META[label]["build_kernels"] + META[label]["own_kernels"]
    return executed.summarize(profiles, names, H200.families, ("wgmma", "tma"), task_flops=task_flops)


# ---- the recorded fixtures ---------------------------------------------------------------------------

@pytest.mark.parametrize("label", ["triton-gemm_tma", "cuda_ptx-gemm_tile_hopper"])
def test_fixture_hgmma_flops_equal_the_task(label):
    s = _fixture_summary(label, BIG)
    assert s["tc_families"] == ["wgmma"]
    assert s["tc_flops"] == pytest.approx(BIG, rel=0.02)  # in fact exact: 601,295,421,440
    assert s["math_flops"]["tensor_core"] == pytest.approx(BIG, rel=0.02)
    assert s["tc_share"] > 0.99 and s["tc_to_task"] == pytest.approx(1.0, rel=0.02)
    assert executed.work_check(s) is None
    # The counting rule, read from the fixture: each warpgroup HGMMA shows as 4 warp-level executions.
    hg = [ln for k in ncu.parse_source_page(_text(f"{label}.ncu_source.csv.gz")) for ln in k.lines
          if ln.opcode.startswith("HGMMA") and ln.threads > 0]
    warps = sum(ln.warp_instructions for ln in hg)
    assert warps / 4 * 2 * 64 * 128 * 16 == pytest.approx(BIG, rel=1e-9)
    assert sum(ln.threads for ln in hg) == 32 * warps


def test_fixture_vendor_kernel_math_is_not_the_candidates():
    s = _fixture_summary("triton-runtime_matmul", SMALL)
    nvjet = [k for k in s["kernels"] if not k["candidate"]]
    assert nvjet and nvjet[0]["math"]["tensor_core"] == pytest.approx(SMALL, rel=0.02)  # cuBLAS did it too
    assert s["tc_flops"] == pytest.approx(SMALL, rel=0.02)  # only the candidate's own gemm_kernel counts


@pytest.mark.parametrize("label", ["triton-dead_branch", "cuda_ptx-gemm_dead_wgmma"])
def test_fixture_fma_gemm_fails_the_work_check(label):
    s = _fixture_summary(label, SMALL)
    assert s["math_flops"]["tensor_core"] == 0
    assert s["math_flops"]["other"] == pytest.approx(SMALL, rel=0.02)  # the FFMA loop did the GEMM
    assert s["tc_share"] == 0 and s["tc_to_task"] == 0
    why = executed.work_check(s)
    assert why and "wgmma did 0.0% of the math" in why and "FFMA did the rest" in why


def test_fixture_move_idiom_is_not_math():
    # cuda_ptx-gemm_dead_wgmma executes 'HFMA2.MMA Rd, -RZ, RZ, 0, 0' (ptxas's constant load).
    k = ncu.parse_source_page(_text("cuda_ptx-gemm_dead_wgmma.ncu_source.csv.gz"))[0]
    moves = [ln for ln in k.lines if ln.opcode == "HFMA2.MMA" and ln.threads > 0]
    assert moves and all("RZ" in ln.operands for ln in moves)
    assert "HFMA2.MMA" not in executed.kernel_math(k)["by_opcode"]


# ---- the price of each instruction -------------------------------------------------------------------

@pytest.mark.parametrize("opcode, operands, per_thread", [
    ("HGMMA.64x128x16.F32.BF16", "R24, gdesc[UR4], R24", 2 * 64 * 128 * 16 / 128),
    ("HGMMA.64x256x16.F32.BF16", "", 2 * 64 * 256 * 16 / 128),
    ("HGMMA.64x64x8.F32.TF32", "", 2 * 64 * 64 * 8 / 128),
    ("QGMMA.64x128x32.F32.E4M3.E4M3", "", 2 * 64 * 128 * 32 / 128),
    ("IGMMA.64x128x32.S32.S8.S8", "", 2 * 64 * 128 * 32 / 128),
    ("HMMA.16816.F32.BF16", "R0, R4, R8, R0", 2 * 16 * 8 * 16 / 32),
    ("HMMA.1688.F32.TF32", "", 2 * 16 * 8 * 8 / 32),
    ("HMMA.16832.F32.E4M3", "", 2 * 16 * 8 * 32 / 32),
    ("IMMA.16832.S32.S8", "", 2 * 16 * 8 * 32 / 32),
    ("IMMA.8816.S32.S8", "", 2 * 8 * 8 * 16 / 32),
    ("DMMA.884", "", 2 * 8 * 8 * 4 / 32),
    ("FFMA", "R1, R2, R3, R4", 2),
    ("FFMA.FTZ", "R1, R2, 0.5, R4", 2),
    ("FFMA2", "R2, R4, R6, R8", 4),
    ("FMUL", "R1, R2, R3", 1),
    ("FADD.FTZ", "R1, R2, R3", 1),
    ("HFMA2", "R1, R2, R3, R4", 4),
    ("HFMA2.MMA", "R1, R2, R3, -RZ", 4),  # an RZ addend is still a product
    ("HFMA2.BF16_V2", "R1, R2, R3, R4", 4),
    ("DFMA", "R2, R4, R6, R8", 2),
    ("FFMA", "R1, RZ, R3, R4", 0),  # an RZ multiplicand: a move
    ("HFMA2.MMA", "R2, -RZ, RZ, 0, 0", 0),
    ("HADD2.F32", "R0, -RZ, R2.H0_H0", 0),  # the cvt idiom
    ("FADD", "R1, -RZ, |R2|", 0),
])
def test_instruction_flops(opcode, operands, per_thread):
    rule, flops = executed.instruction_flops(opcode, operands)
    assert flops == per_thread
    assert rule.source  # every rule says where its shape comes from


@pytest.mark.parametrize("opcode", ["IMAD", "IMAD.WIDE.U32", "MUFU.EX2", "FMNMX", "LDS", "F2FP.BF16.F32.PACK_AB",
                                    "UTMALDG.2D", "FSETP.GT.AND", "WARPGROUP.ARRIVE", "BRA"])
def test_not_math(opcode):
    assert executed.instruction_flops(opcode, "R1, R2, R3") is None


@pytest.mark.parametrize("opcode", ["UTCHMMA", "UTCQMMA.2CTA", "UTCIMMA", "HGMMA", "HMMA", "HMMA.999.F32"])
def test_math_of_unknown_size(opcode):
    rule, flops = executed.instruction_flops(opcode, "")
    assert rule is not None and flops is None


def test_every_rule_is_documented_and_matches_its_family():
    fams = families()
    for rule in executed.MATH_RULES:
        assert rule.kind in ("tensor_core", "other") and rule.source
    for op, fam in (("HGMMA.64x128x16.F32.BF16", "wgmma"), ("HMMA.16816.F32.BF16", "mma_sync"),
                    ("UTCHMMA", "tcgen05_mma")):
        assert fams[fam].sass.search(op) and executed.math_rule(op).kind == "tensor_core"


def test_tensor_core_family_comes_from_archs_toml():
    assert executed.tensor_core_families(H200.default_required, families()) == ["wgmma"]
    assert executed.tensor_core_families(B200.default_required, families()) == ["tcgen05_mma"]
    assert executed.tensor_core_families(("tma", "mbarrier"), families()) == []
    assert executed.family_math("ffma", families()) == "cuda_core"


# ---- synthetic source pages --------------------------------------------------------------------------

HEADER = ('"Address","Source","Instructions Executed","Thread Instructions Executed",'
          '"Predicated-On Thread Instructions Executed"')


def _page(kernel: str, rows) -> str:
    """rows: (source text, warp-level executions, predicated-on threads)."""
    out = [f'"Kernel Name","{kernel}"', HEADER]
    for i, (src, warps, threads) in enumerate(rows):
        out.append(f'"0x{i * 16:x}","      {src}","{warps}","{threads}","{threads}"')
    return "\n".join(out) + "\n"


def _summary(page: str, task_flops=None, arch=H200, names=("gemm_kernel",)) -> dict:
    return executed.summarize(ncu.parse_source_page(page), list(names), arch.families, arch.default_required,
                         families(), task_flops=task_flops)


M, N, K = 4096, 4096, 4096
TASK = 2 * M * N * K
ISSUES = M * N * K // (64 * 128 * 16)  # warpgroup HGMMA.64x128x16 issues that do the task
FMAS = M * N * K  # thread FFMAs that do the task


def _hgmma(issues: int):
    return ("HGMMA.64x128x16.F32.BF16 R24, gdesc[UR4], R24, gsb0", 4 * issues, 128 * issues)


def test_token_wgmma_with_fma_work_fails_the_share():
    page = _page("gemm_kernel", [_hgmma(1), ("UTMALDG.2D [UR8], [UR4]", 1, 1),
                                 ("FFMA R1, R2, R3, R1", FMAS // 32, FMAS)])
    s = _summary(page, TASK)
    assert s["missing"] == []  # the old check (more than zero threads) alone would say ok
    assert s["tc_share"] < 1e-5 and s["tc_to_task"] < 1e-5
    why = executed.work_check(s)
    assert why.startswith("wgmma did 0.0% of the math") and "FFMA did the rest" in why and "GFLOP" in why


def test_mma_sync_only_candidate_has_no_wgmma_share():
    hmma = FMAS * 2 // (2 * 16 * 8 * 16)  # warp-level HMMA.16816 that do the task
    page = _page("gemm_kernel", [_hgmma(1), ("UTMALDG.2D [UR8], [UR4]", 1, 1),
                                 ("HMMA.16816.F32.BF16 R0, R4, R8, R0", hmma, 32 * hmma)])
    s = _summary(page, TASK)
    assert s["math_flops"]["tensor_core"] == pytest.approx(TASK, rel=1e-3)  # tensor cores did it, but mma.sync
    assert s["tc_share"] < 1e-5
    why = executed.work_check(s)
    assert why and "HMMA did the rest" in why


def test_honest_wgmma_gemm_with_epilogue_passes():
    epilogue = M * N  # one FMUL per output (alpha), plus the accumulator zeroing idiom
    page = _page("gemm_kernel", [_hgmma(ISSUES), ("UTMALDG.2D [UR8], [UR4]", 100, 100),
                                 ("FMUL R1, R2, c[0x0][0x180]", epilogue // 32, epilogue),
                                 ("HFMA2.MMA R5, -RZ, RZ, 0, 0", 10_000, 320_000)])
    s = _summary(page, TASK)
    assert s["tc_to_task"] == pytest.approx(1.0) and s["tc_share"] > 0.999
    assert executed.work_check(s) is None
    assert executed.work_check(s, min_share=0.9999999) is not None  # the threshold is the caller's, and it bites


@pytest.mark.parametrize("factor, ok", [(0.25, False), (0.5, True), (1.0, True), (2.0, True), (4.0, False)])
def test_ratio_to_the_task(factor, ok):
    s = _summary(_page("gemm_kernel", [_hgmma(int(ISSUES * factor)), ("UTMALDG.2D [UR8], [UR4]", 1, 1)]), TASK)
    why = executed.work_check(s, ratio=(0.5, 2.0))
    assert (why is None) is ok, why
    if not ok:
        assert f"{factor:g}x the task's FLOPs" in why


def test_half_share_is_the_boundary():
    page = _page("gemm_kernel", [_hgmma(ISSUES), ("UTMALDG.2D [UR8], [UR4]", 1, 1),
                                 ("FFMA R1, R2, R3, R1", FMAS // 32 + 1, FMAS + 32)])
    s = _summary(page, TASK)
    assert s["tc_share"] < 0.5 and "wgmma did 50.0% of the math" in executed.work_check(s)


def test_without_task_flops_only_the_share_is_checked():
    s = _summary(_page("gemm_kernel", [_hgmma(4 * ISSUES), ("UTMALDG.2D [UR8], [UR4]", 1, 1)]))
    assert s["task_flops"] is None and s["tc_to_task"] is None and executed.work_check(s) is None


def test_no_tensor_core_family_required_is_not_checked():
    s = executed.summarize(ncu.parse_source_page(_page("k", [("FFMA R1, R2, R3, R1", 10, 320)])), ["k"],
                      H200.families, ("tma",), families(), task_flops=TASK)
    assert s["tc_families"] == [] and s["tc_share"] is None and executed.work_check(s) is None


def test_math_in_other_kernels_counts_against_the_candidate():
    # The token wgmma in one of its kernels, the work in another of its own kernels.
    page = (_page("gemm_tc", [_hgmma(1), ("UTMALDG.2D [UR8], [UR4]", 1, 1)])
            + _page("gemm_fma", [("FFMA R1, R2, R3, R1", FMAS // 32, FMAS)]))
    s = _summary(page, TASK, names=("gemm_tc", "gemm_fma"))
    assert "FFMA did the rest" in executed.work_check(s)


def test_no_math_at_all_fails():
    s = _summary(_page("gemm_kernel", [("UTMALDG.2D [UR8], [UR4]", 1, 1)]), TASK)
    assert "no math" in executed.work_check(s)


def test_fp8_wgmma_is_priced_at_k32_and_counts_only_for_wgmma_fp8():
    # QGMMA.64x128x32 (fp8, archs.toml wgmma_fp8): 2*64*128*32 FLOPs per warpgroup issue, half the issues of K=16.
    qgmma = ("QGMMA.64x128x32.F32.E4M3.E4M3 R24, gdesc[UR4], R24, gsb0", 4 * (ISSUES // 2), 128 * (ISSUES // 2))
    page = _page("gemm_kernel", [qgmma, ("UTMALDG.2D [UR8], [UR4]", 1, 1)])
    fp8 = executed.summarize(ncu.parse_source_page(page), ["gemm_kernel"], H200.families, ("wgmma_fp8", "tma"),
                        families(), task_flops=TASK)
    assert fp8["missing"] == [] and fp8["tc_families"] == ["wgmma_fp8"]
    assert fp8["tc_to_task"] == pytest.approx(1.0) and fp8["tc_share"] > 0.999 and executed.work_check(fp8) is None
    # The bf16 task's wgmma is not satisfied by fp8 MMAs: missing, and their math is not its share.
    bf16 = _summary(page, TASK)
    assert bf16["missing"] == ["wgmma"] and bf16["tc_share"] == 0 and executed.work_check(bf16)


def test_blackwell_block_scaled_and_plain_f8f6f4_are_told_apart_by_their_operands():
    plain = "UTCQMMA gdesc[UR10], gdesc[UR12], tmem[UR6], tmem[UR4], idesc[UR5], UP0"
    scaled = "UTCQMMA gdesc[UR14], gdesc[UR16], tmem[UR10], tmem[UR4], idesc[UR5], tmem[UR8], UP0"
    for text, family in ((plain, "tcgen05_f8f6f4"), (scaled, "tcgen05_block_scale")):
        s = executed.summarize(ncu.parse_source_page(_page("k", [(text, 10, 320)])), ["k"], B200.families,
                          ("tcgen05_f8f6f4", "tcgen05_block_scale"), families())
        assert [f for f in ("tcgen05_f8f6f4", "tcgen05_block_scale") if f not in s["missing"]] == [family], text
        assert s["tc_unknown"] == "descriptor"  # either kind keeps its shape in the instruction descriptor


def test_blackwell_tcgen05_flops_are_unknown_but_the_sound_bound_holds():
    honest = _page("gemm_kernel", [("UTCHMMA gdesc[UR4], gdesc[UR6], tmem[UR8], idesc[UR10]", 1000, 1000),
                                   ("UTMALDG.2D [UR8], [UR4]", 1, 1)])
    s = _summary(honest, TASK, arch=B200)
    assert s["tc_families"] == ["tcgen05_mma"] and s["tc_flops"] is None and s["tc_unknown"] == "descriptor"
    assert "descriptor" in s["math_note"] and s["tc_share"] is None and s["tc_to_task"] is None
    assert executed.work_check(s) is None
    # FFMA work above 0.5x the task (at 80% share, 2x ratio; 3x here) fails whatever tcgen05 did.
    heavy = _page("gemm_kernel", [("UTCHMMA gdesc[UR4], gdesc[UR6], tmem[UR8], idesc[UR10]", 1, 1),
                                  ("FFMA R1, R2, R3, R1", 3 * FMAS // 32, 3 * FMAS)])
    why = executed.work_check(_summary(heavy, TASK, arch=B200))
    assert why and "exceeds" in why


def test_wgmma_without_its_shape_fails_closed():
    # Only the details page (base opcodes, no shapes): the share cannot be computed, so it is not a pass.
    prof = ncu.KernelProfile(name="gemm_kernel", per_opcode={"HGMMA": 128.0, "FFMA": 1e9, "UTMALDG": 1.0},
                             per_opcode_warps={"HGMMA": 4.0})
    s = executed.summarize([prof], ["gemm_kernel"], H200.families, ("wgmma", "tma"), families(), task_flops=TASK)
    assert s["tc_flops"] is None and s["tc_unknown"] == "no_shape"
    assert "cannot be checked" in executed.work_check(s)


def test_unknown_math_outside_the_family_fails_closed():
    page = _page("gemm_kernel", [_hgmma(ISSUES), ("UTMALDG.2D [UR8], [UR4]", 1, 1),
                                 ("HMMA.999.F32 R0, R4, R8, R0", 10, 320)])
    s = _summary(page, TASK)
    assert s["tc_flops"] == pytest.approx(TASK) and s["tc_share"] is None
    assert "cannot be checked" in executed.work_check(s)


def test_malformed_rows_are_ignored_safely():
    page = _page("gemm_kernel", [
        _hgmma(ISSUES), ("UTMALDG.2D [UR8], [UR4]", 1, 1),
        ("FFMA R1, R2, R3, R1", "-5", "-1,000,000,000"),  # negative: not a count
        ("FFMA R1, R2, R3, R1", "nan", "nan"),
        ("FFMA R1, R2, R3, R1", "inf", "inf"),
        ("FFMA R1, R2, R3, R1", "1", "1e30"),  # more threads than 32 per warp execution: clamped to 32
        ("FFMA R1, R2, R3, R1", "-", "-"),
        ("", "1", "1"), ("???", "1", "1"), ("HGMMA.64xZZx16.F32", "1", "128"),
    ])
    page += '"0x999","FFMA R1, R2, R3, R1"\n"just","garbage","row"\n'
    s = _summary(page, TASK)
    assert math.isfinite(s["math_flops"]["other"]) and s["math_flops"]["other"] == 2 * 32
    assert s["tc_flops"] is None and s["tc_unknown"] == "no_shape"  # the shapeless HGMMA row: fail closed
    assert executed.work_check(s) is not None


def test_summary_keys_are_json():
    page = _page("gemm_kernel", [_hgmma(ISSUES), ("UTMALDG.2D [UR8], [UR4]", 1, 1)])
    s = _summary(page, TASK)
    for key in ("math_flops", "math_by_opcode", "math_unmeasured", "math_rest", "tc_families", "tc_flops",
                "tc_unknown", "tc_share", "tc_to_task", "task_flops", "math_note"):
        assert key in s
    json.dumps(s)
    assert s["kernels"][0]["math"] == {"tensor_core": pytest.approx(TASK), "other": 0.0}


# Which profiled kernels are the candidate's (by their code, not their name): tests/test_profiler_provenance.py.


def test_fixture_source_page_printing_a_kernel_twice_counts_each_launch_once():
    """H200, 2026-11-30: the cuda_ptx attention-backward expert's source page holds each of its 3 kernels twice
    (identical blocks), its details page 3 launches. Counted per block, wgmma did 2.8x the task's FLOPs and the
    verdict was not_executed; per launch it is the FA2 split's 1.4x (dK/dV: 4 matmuls, dQ: 3; the task: 5)."""
    from xlang.task import get_task

    label = "cuda_ptx-attn_bwd_hopper"
    source = ncu.parse_source_page(_text(f"{label}.ncu_source.csv.gz"))
    details = ncu.parse_details_page(_text(f"{label}.ncu_details.csv.gz"))
    assert len(source) == 6 and len(details) == 3
    profiles = ncu.merge(source, details)
    assert [p.name for p in profiles] == [d.name for d in details]
    for p in profiles:  # each launch kept its SASS lines, and they add up to its own executed total
        assert p.lines and sum(ln.threads for ln in p.lines) == sum(p.per_opcode.values())
    task_flops = get_task("attn_bwd").flops(META[label]["shape"])
    s = executed.summarize(profiles, META[label]["build_kernels"], H200.families, ("wgmma", "tma"), task_flops=task_flops)
    assert s["tc_to_task"] == pytest.approx(1.4, rel=0.01) and s["tc_share"] > 0.99
    assert executed.work_check(s) is None


def test_merge_pairs_launches_by_their_own_totals():
    """Two launches of one kernel with different counts, each printed twice on the source page (A A B B): each
    launch gets the block whose counts are its own, never the other's."""
    def block(name, n):
        return ncu.KernelProfile(name=name, lines=[ncu.SassLine("0x0", "FFMA", n / 32, n)])

    def launch(name, n, i):
        return ncu.KernelProfile(name=name, per_opcode={"FFMA": n}, index=i)

    source = [block("k", 64), block("k", 64), block("k", 128), block("k", 128)]
    merged = ncu.merge(source, [launch("k", 64, 0), launch("k", 128, 1)])
    assert [sum(ln.threads for ln in p.lines) for p in merged] == [64, 128]
    # one launch printed once: unchanged pairing
    merged = ncu.merge([block("k", 64)], [launch("k", 64, 0)])
    assert len(merged) == 1 and merged[0].per_opcode == {"FFMA": 64}


def test_tensor_core_opcodes_come_from_archs_toml_for_the_math_and_the_mix():
    from xlang.archs import tensor_core_opcodes
    from xlang.report.mix import mix_class

    listed = tensor_core_opcodes()
    assert [r.name for r in executed.MATH_RULES if r.kind == "tensor_core"] == [op.name for op in listed]
    # The spellings ncu and the report used before they were read from archs.toml, and the three each lacked.
    assert [op.name for op in listed] == ["HGMMA", "IGMMA", "BGMMA", "QGMMA", "HMMA", "IMMA", "DMMA", "BMMA", "QMMA",
                                          "OMMA", "UTCMMA"]
    for opcode, mix in (("HGMMA", "wgmma / tcgen05"), ("UTCHMMA", "wgmma / tcgen05"), ("UTCQMMA", "wgmma / tcgen05"),
                        ("HMMA", "mma.sync"), ("DMMA", "mma.sync"), ("BMMA", "mma.sync"), ("OMMA", "mma.sync")):
        assert mix_class(opcode) == f"tensor core: {mix}"
        assert executed.math_rule(opcode).kind == "tensor_core"
    assert executed.instruction_flops("QMMA.16832.F32.E4M3.E4M3", "")[1] == 2 * 16 * 8 * 32 / 32
    assert mix_class("IMAD") == "integer, address and other" and executed.math_rule("IMAD") is None
