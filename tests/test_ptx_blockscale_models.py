"""The CPU models of the cuda_ptx Blackwell block-scaled GEMM experts (issue 34):
tasks/gemm_mxfp8/verify/cuda_ptx_blackwell_model.py and tasks/gemm_nvfp4/verify/cuda_ptx_blackwell_model.py re-enact
each expert's tile / K-step loop, its scale staging, tcgen05.cp and the MMAs' scale reads in torch, with the rule
functions taken from the expert's own nvcc build (xl_rule_*). Each matches its task's reference at the task's tolerance
on drawn inputs (both input kinds, tails in M and N, slot reuse), every injected scale-indexing bug fails, and so does
a copy of the .cu with one rule changed; CUTLASS's NVFP4 scale layouts agree with the NVFP4 expert's rules at trace
time. Neither expert has run on a GPU: these show that the scale handling modelled here is right, not that the kernels
run."""

import shutil
from pathlib import Path

import pytest

from xlang.candidate import load_module

ROOT = Path(__file__).resolve().parents[1]
MXFP8 = load_module(ROOT / "tasks/gemm_mxfp8/verify/cuda_ptx_blackwell_model.py", "mxfp8_cuda_ptx_model")
NVFP4 = load_module(ROOT / "tasks/gemm_nvfp4/verify/cuda_ptx_blackwell_model.py", "nvfp4_cuda_ptx_model")
# odd M and N: one partial tile in each, several K steps (and a second K step per scale warp at K = 1024)
CASES = (({"M": 7, "N": 272, "K": 384}, 2), ({"M": 130, "N": 144, "K": 256}, 11))

pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None and not Path("/usr/local/cuda/bin/nvcc").exists(),
                                reason="nvcc (CUDA toolkit) not installed")


@pytest.fixture(scope="module")
def mxfp8_rules(tmp_path_factory):
    return MXFP8.Rules(MXFP8.build_rules_library(workdir=tmp_path_factory.mktemp("mxfp8")))


@pytest.fixture(scope="module")
def nvfp4_rules(tmp_path_factory):
    return NVFP4.Rules(NVFP4.build_rules_library(workdir=tmp_path_factory.mktemp("nvfp4")))


def test_mxfp8_model_matches_the_reference(mxfp8_rules):
    assert MXFP8.run_cases(mxfp8_rules, cases=CASES + (({"M": 257, "N": 400, "K": 1024}, 3),), quiet=True)


@pytest.mark.parametrize("bug", MXFP8.BUGS)
def test_mxfp8_model_fails_when_the_scale_indexing_is_off(mxfp8_rules, bug):
    assert not MXFP8.run_cases(mxfp8_rules, (bug,), cases=CASES, quiet=True)


def test_mxfp8_chunk_is_the_layout_checked_against_cutlass(mxfp8_rules):
    # tasks/gemm_mxfp8/verify/cutedsl_blackwell_emulate.py checks chunk_byte(m, kb) against CUTLASS's 1X scale layouts
    # at trace time (tests/test_fp8_cutedsl_models.py); this expert's scale warps put row m's word at that byte.
    cute_model = load_module(ROOT / "tasks/gemm_mxfp8/verify/cutedsl_blackwell_emulate.py", "mxfp8_cutedsl_model_for_ptx")
    placed = {mxfp8_rules.scale_row(lane, j): 4 * mxfp8_rules.scale_word(lane, j) for lane in range(32) for j in range(4)}
    assert placed == {m: cute_model.chunk_byte(m, 0) for m in range(128)}


def test_mxfp8_model_reads_the_rules_from_the_source(tmp_path):
    # The rows a scale lane loads changed in a copy of the .cu (consecutive rows per lane, stored where rows
    # lane + 32 j belong): it still builds, and the model of that build fails.
    text = MXFP8.EXPERT.read_text()
    rule = "scale_row(int lane, int j) { return lane + 32 * j; }"
    assert rule in text
    tampered = tmp_path / "tampered.cu"
    tampered.write_text(text.replace(rule, "scale_row(int lane, int j) { return 4 * lane + j; }"))
    rules = MXFP8.Rules(MXFP8.build_rules_library(tampered, workdir=tmp_path / "build"))
    assert rules.scale_row(1, 0) == 4
    assert not MXFP8.run_cases(rules, cases=CASES[:1], quiet=True)


def test_nvfp4_model_matches_the_reference(nvfp4_rules):
    assert NVFP4.run_cases(nvfp4_rules, cases=CASES + (({"M": 257, "N": 400, "K": 1152}, 3),), quiet=True)


@pytest.mark.parametrize("bug", NVFP4.BUGS)
def test_nvfp4_model_fails_when_the_scale_indexing_is_off(nvfp4_rules, bug):
    assert not NVFP4.run_cases(nvfp4_rules, (bug,), cases=CASES, quiet=True)


def test_nvfp4_model_reads_the_rules_from_the_source(tmp_path):
    # The rows a scale lane loads changed in a copy of the .cu (consecutive rows per lane, stored where rows
    # lane + 32 j belong). (Swapping the two MMAs' columns would not do: the copies follow the same rule, so the
    # scales still meet their MMA.)
    text = NVFP4.EXPERT.read_text()
    rule = "scale_row(int lane, int j) { return lane + 32 * j; }"
    assert rule in text
    tampered = tmp_path / "tampered.cu"
    tampered.write_text(text.replace(rule, "scale_row(int lane, int j) { return 4 * lane + j; }"))
    rules = NVFP4.Rules(NVFP4.build_rules_library(tampered, workdir=tmp_path / "build"))
    assert rules.scale_row(1, 0) == 4
    assert not NVFP4.run_cases(rules, cases=CASES[:1], quiet=True)


@pytest.mark.slow
def test_cutlass_nvfp4_scale_layouts_agree_with_the_expert(nvfp4_rules):
    pytest.importorskip("cutlass.cute", reason="nvidia-cutlass-dsl not installed")
    assert NVFP4.check_cutlass_layouts(nvfp4_rules) == []


@pytest.mark.slow
@pytest.mark.parametrize("bug", ["chunk_row_major", "both_mmas_one_chunk"])
def test_the_cutlass_layout_check_can_fail(nvfp4_rules, bug):
    pytest.importorskip("cutlass.cute", reason="nvidia-cutlass-dsl not installed")
    assert NVFP4.check_cutlass_layouts(NVFP4._Bugged(nvfp4_rules, bug))
