"""The CPU models of the cuda_ptx Blackwell block-scaled GEMM experts (issue 34):
tasks/gemm_mxfp8/verify/cuda_ptx_blackwell_model.py re-enacts the MXFP8 expert's tile / K-step loop, its scale
staging, tcgen05.cp and the MMAs' scale reads in torch, with the rule functions taken from the expert's own nvcc build
(xl_rule_*). It matches the task's reference at its tolerance on drawn inputs (both input kinds, tails in M and N),
every injected scale-indexing bug fails, and so does a copy of the .cu with one rule changed. The expert has never run
on a GPU: these show that the scale handling modelled here is right, not that the kernel runs."""

import shutil
from pathlib import Path

import pytest

from xlang.candidate import load_module

ROOT = Path(__file__).resolve().parents[1]
MXFP8 = load_module(ROOT / "tasks/gemm_mxfp8/verify/cuda_ptx_blackwell_model.py", "mxfp8_cuda_ptx_model")
# odd M and N: one partial tile in each, several K steps (and a second K step per scale warp at K = 1024)
CASES = (({"M": 7, "N": 272, "K": 384}, 2), ({"M": 130, "N": 144, "K": 256}, 11))

pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None and not Path("/usr/local/cuda/bin/nvcc").exists(),
                                reason="nvcc (CUDA toolkit) not installed")


@pytest.fixture(scope="module")
def mxfp8_rules(tmp_path_factory):
    return MXFP8.Rules(MXFP8.build_rules_library(workdir=tmp_path_factory.mktemp("mxfp8")))


def test_mxfp8_model_matches_the_reference(mxfp8_rules):
    assert MXFP8.run_cases(mxfp8_rules, cases=CASES + (({"M": 257, "N": 400, "K": 1024}, 3),), quiet=True)


@pytest.mark.parametrize("bug", MXFP8.BUGS)
def test_mxfp8_model_fails_when_the_scale_indexing_is_off(mxfp8_rules, bug):
    assert not MXFP8.run_cases(mxfp8_rules, (bug,), cases=CASES, quiet=True)


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
