"""The low-precision tensor-core instructions (issue 34) as SASS spells them, from nvcc 13.0 + cuobjdump builds
of tests/fixtures/census/lowprecision.cu (2026-12-01), kept as fixtures and rebuilt where nvcc and cuobjdump are
here. What today's families already see of them, and what a block-scaled family will have to read: on sm_100a
the block-scaled MMA has the opcode of its unscaled kind, and only its operands tell it apart."""

import re
import shutil
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from xlang import census
from xlang.archs import get_arch
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


def test_todays_families_count_them_and_flag_no_narrow_accumulator():
    for arch, path, names in (("h100", "lowprecision.sm_90a.sass", HOPPER), ("b200", "lowprecision.sm_100a.sass", BLACKWELL)):
        family_names = get_arch(arch).families
        family = "wgmma" if arch == "h100" else "tcgen05_mma"
        for fn, ops in census.parse_sass((CENSUS / path).read_text()).items():
            if fn in names:
                assert census.classify(ops, family_names)[family] == 1, (fn, ops)
                assert not census.narrow_accumulators(ops, family_names), fn  # all accumulate in fp32


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
