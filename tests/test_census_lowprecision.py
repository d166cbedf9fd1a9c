"""The low-precision tensor-core instructions (issue 34) as SASS spells them, from nvcc 13.0 + cuobjdump builds
of tests/fixtures/census/lowprecision.cu (2026-12-01), kept as fixtures and rebuilt where nvcc and cuobjdump are
here (PTX from `nvcc -ptx` of the same file). Which family each one is (archs.toml wgmma_fp8, tcgen05_f8f6f4,
tcgen05_block_scale, tcgen05_cp), and not its neighbours': on sm_100a the block-scaled MMA has the opcode of its
unscaled kind, and only its operands tell it apart (the census reads them, census.parse_operands)."""

import re
import shutil
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from xlang import census
from xlang.archs import families, get_arch
from xlang.profiler import executed
from xlang.toolchain import find_tool

CENSUS = Path(__file__).resolve().parent / "fixtures" / "census"
HOPPER = {"wgmma_e4m3_e4m3": "QGMMA.64x8x32.F32.E4M3.E4M3", "wgmma_e5m2_e5m2": "QGMMA.64x8x32.F32.E5M2.E5M2",
          "wgmma_e4m3_e5m2": "QGMMA.64x8x32.F32.E4M3.E5M2"}
BLACKWELL = {"tcgen05_f16": "UTCHMMA", "tcgen05_f8f6f4": "UTCQMMA", "tcgen05_mxf8f6f4": "UTCQMMA",
             "tcgen05_mxf4": "UTCOMMA", "tcgen05_mxf4nvf4": "UTCOMMA.4X"}


def _mma(text: str) -> dict[str, set[str]]:
    return {fn: {op for op in ops if "MMA" in op or op.startswith("UTCCP")} for fn, ops in census.parse_sass(text).items()}


def test_fp8_wgmma_and_the_tcgen05_kinds_are_spelled_as_built():
    hopper = _mma((CENSUS / "lowprecision.sm_90a.sass").read_text())
    assert hopper == {fn: {op} for fn, op in HOPPER.items()}
    blackwell = _mma((CENSUS / "lowprecision.sm_100a.sass").read_text())
    assert {fn: ops for fn, ops in blackwell.items() if fn in BLACKWELL} == {fn: {op} for fn, op in BLACKWELL.items()}
    # tcgen05.cp (the scale factors' copy from shared to tensor memory), two of its shapes
    assert blackwell["tcgen05_cp_scales"] == {"UTCCP.T.S.4x32dp128bit", "UTCCP.T.S"}


# function -> the one family its MMA (or copy) belongs to
FAMILY = {"wgmma_e4m3_e4m3": "wgmma_fp8", "wgmma_e5m2_e5m2": "wgmma_fp8", "wgmma_e4m3_e5m2": "wgmma_fp8",
          "tcgen05_f16": "tcgen05_mma", "tcgen05_f8f6f4": "tcgen05_f8f6f4", "tcgen05_mxf8f6f4": "tcgen05_block_scale",
          "tcgen05_mxf4": "tcgen05_block_scale", "tcgen05_mxf4nvf4": "tcgen05_block_scale", "tcgen05_cp_scales": "tcgen05_cp"}
NEW = ("wgmma", "wgmma_fp8", "tcgen05_mma", "tcgen05_f8f6f4", "tcgen05_block_scale", "tcgen05_cp")


def _census_counts(arch, path):
    text = (CENSUS / path).read_text()
    names = get_arch(arch).families
    operands = census.parse_operands(text, names)
    return {fn: census.classify(ops, names, operands.get(fn)) for fn, ops in census.parse_sass(text).items()}


def test_each_mma_is_counted_in_its_own_family_and_no_neighbour():
    for arch, path in (("h100", "lowprecision.sm_90a.sass"), ("b200", "lowprecision.sm_100a.sass")):
        for fn, counts in _census_counts(arch, path).items():
            want = {f: 0 for f in NEW if f in counts}
            if fn in FAMILY:
                want[FAMILY[fn]] = 2 if fn == "tcgen05_cp_scales" else 1
            assert {f: counts[f] for f in want} == want, (fn, counts)
            ops = census.parse_sass((CENSUS / path).read_text())[fn]
            assert not census.narrow_accumulators(ops, get_arch(arch).families), fn  # all accumulate in fp32


def test_the_bf16_and_fp16_wgmma_stay_wgmma_and_the_fp8_ones_are_wgmma_fp8():
    counts = _census_counts("h100", "accumulators.sm_90a.sass")
    for fn in ("wgmma_f32_bf16", "wgmma_f32_f16", "wgmma_f16_f16"):
        assert (counts[fn]["wgmma"], counts[fn]["wgmma_fp8"]) == (1, 0), fn
    for fn in ("wgmma_f16_e4m3", "wgmma_f32_e4m3"):
        assert (counts[fn]["wgmma"], counts[fn]["wgmma_fp8"]) == (0, 1), fn
    # an fp16-accumulating fp8 wgmma is still flagged, now by wgmma_fp8's rule
    assert families()["wgmma_fp8"].narrow_accumulate.search("QGMMA.64x8x32.F16.E4M3.E4M3")
    assert not families()["wgmma_fp8"].narrow_accumulate.search("QGMMA.64x8x32.F32.E4M3.E4M3")


def test_without_operands_neither_scaled_nor_plain_utcqmma_is_claimed():
    # Opcode counts alone (no operand text) cannot tell mxf8f6f4 from f8f6f4: neither family takes them.
    names = get_arch("b200").families
    for fn, ops in census.parse_sass((CENSUS / "lowprecision.sm_100a.sass").read_text()).items():
        counts = census.classify(ops, names)
        assert counts["tcgen05_f8f6f4"] == counts["tcgen05_block_scale"] == 0, fn
    fam = families()
    assert not fam["tcgen05_block_scale"].matches("UTCQMMA") and not fam["tcgen05_f8f6f4"].matches("UTCQMMA")
    # ncu's per-line classification gets the page's operand text (which may drop the commas)
    assert executed.classify_opcode("UTCQMMA", names, fam, "gdesc[UR14] gdesc[UR16] tmem[UR10] tmem[UR4] idesc[UR5] "
                               "tmem[UR8] UP0") == "tcgen05_block_scale"
    assert executed.classify_opcode("UTCQMMA", names, fam, "gdesc[UR10], gdesc[UR12], tmem[UR6], tmem[UR4], idesc[UR5], "
                               "UP0") == "tcgen05_f8f6f4"
    assert executed.classify_opcode("UTCQMMA", names, fam) is None  # the per-opcode metric: operands unknown


def test_the_ptx_rules_match_their_own_instructions_only():
    fam = families()
    lines = [ln.strip() for p in ("lowprecision.sm_90a.ptx", "lowprecision.sm_100a.ptx", "accumulators.sm_90a.ptx")
             for ln in (CENSUS / p).read_text().splitlines()
             if re.match(r"\s*(wgmma\.mma_async|tcgen05\.(mma|cp))", ln)]
    want = {".e4m3": "wgmma_fp8", ".e5m2": "wgmma_fp8", ".bf16.bf16": "wgmma", ".f16.f16 ": "wgmma",
            "kind::f16 ": "tcgen05_mma", "kind::f8f6f4 ": "tcgen05_f8f6f4", ".block_scale": "tcgen05_block_scale",
            "tcgen05.cp.": "tcgen05_cp"}
    assert len(lines) == 3 + 5 + 5 + 2
    for ln in lines:
        (expected,) = {f for key, f in want.items() if key in ln}
        assert [f for f in NEW if fam[f].ptx.search(ln)] == [expected], ln


def test_a_block_scaled_mma_differs_from_its_kind_only_by_the_scale_operand():
    listed = census.parse_listing((CENSUS / "lowprecision.sm_100a.sass").read_text())

    def mma_text(fn):
        (instructions,) = listed[fn]
        (text,) = [t for _, t in instructions if "MMA" in t]
        return text

    after_idesc = re.compile(r"idesc\[[^\]]*\],\s*tmem\[")  # the scale factors' tensor-memory operand
    for fn in ("tcgen05_mxf8f6f4", "tcgen05_mxf4", "tcgen05_mxf4nvf4"):
        assert after_idesc.search(mma_text(fn)), mma_text(fn)
    for fn in ("tcgen05_f16", "tcgen05_f8f6f4"):
        assert not after_idesc.search(mma_text(fn)), mma_text(fn)
    assert mma_text("tcgen05_f8f6f4").split()[0] == mma_text("tcgen05_mxf8f6f4").split()[0] == "UTCQMMA"


@pytest.mark.skipif(not (shutil.which("nvcc") and find_tool("cuobjdump")), reason="needs nvcc and cuobjdump")
@pytest.mark.parametrize("sm,flags", [("90a", ["-DXL_HOPPER"]), ("100a", [])])
def test_the_fixtures_are_what_nvcc_builds_here(sm, flags, tmp_path):
    cubin = tmp_path / "a.cubin"
    subprocess.run(["nvcc", f"-gencode=arch=compute_{sm},code=sm_{sm}", *flags, "-cubin", "-o", str(cubin),
                    str(CENSUS / "lowprecision.cu")], check=True, capture_output=True, timeout=300)
    built = {fn: Counter(ops) for fn, ops in census.disassemble(cubin).items()}
    recorded = {fn: Counter(ops) for fn, ops in census.parse_sass((CENSUS / f"lowprecision.sm_{sm}.sass").read_text()).items()}
    assert built == recorded
    ptx = tmp_path / "a.ptx"
    subprocess.run(["nvcc", f"-gencode=arch=compute_{sm},code=sm_{sm}", *flags, "-ptx", "-o", str(ptx),
                    str(CENSUS / "lowprecision.cu")], check=True, capture_output=True, timeout=300)
    mma = re.compile(r"^\s*(wgmma\.mma_async|tcgen05\.(mma|cp))")
    lines = [[ln.strip() for ln in t.splitlines() if mma.match(ln)]
             for t in (ptx.read_text(), (CENSUS / f"lowprecision.sm_{sm}.ptx").read_text())]
    assert lines[0] == lines[1] and lines[0]
