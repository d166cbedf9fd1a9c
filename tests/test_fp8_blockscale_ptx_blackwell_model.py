"""The cuda_ptx Blackwell expert of gemm_fp8_blockscale (issue 34) and its CPU model,
tasks/gemm_fp8_blockscale/verify/cuda_ptx_blackwell_model.py: the expert builds for sm_100a with the plain fp8 MMA
(tcgen05_f8f6f4, never the block-scaled kinds: the 1d2d scales are fp32 per 128, promoted on the CUDA cores); the
model, with the rule functions taken from the expert's own nvcc build (xl_rule_*), matches the task's reference at
the task's tolerance on drawn inputs (both input kinds, tails in M and N, both TMEM buffers reused); every injected
scale-indexing / buffer bug fails, and so does a copy of the .cu with one rule changed. The kernel has never run on a
GPU: these show that the loop and scale handling modelled here are right, not that the kernel runs."""

import shutil
from pathlib import Path

import pytest

from xlang.candidate import load_module

ROOT = Path(__file__).resolve().parents[1]
MODEL = load_module(ROOT / "tasks/gemm_fp8_blockscale/verify/cuda_ptx_blackwell_model.py", "fp8bs_cuda_ptx_model")
CASES = MODEL.CASES[:2]

pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None and not Path("/usr/local/cuda/bin/nvcc").exists(),
                                reason="nvcc (CUDA toolkit) not installed")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return MODEL.build_expert(workdir=tmp_path_factory.mktemp("fp8bs"))


@pytest.fixture(scope="module")
def rules(built):
    return MODEL.Rules(built.load_path)


def test_expert_issues_the_plain_fp8_mma_not_a_block_scaled_one(built):
    families = built.census.families
    assert built.census.ok, built.census.missing
    assert families.get("tcgen05_f8f6f4", 0) > 0 and families.get("tma", 0) > 0
    assert families.get("tcgen05_block_scale", 0) == 0 and families.get("tcgen05_mma", 0) == 0


def test_model_matches_the_reference(rules):
    assert MODEL.run_cases(rules, quiet=True)


@pytest.mark.parametrize("bug", MODEL.BUGS)
def test_model_fails_when_the_scale_indexing_or_buffering_is_off(rules, bug):
    assert not MODEL.run_cases(rules, (bug,), cases=CASES, quiet=True)


def test_the_overlapped_schedule_is_what_catches_a_shared_buffer(rules):
    # In the serial order (promote K block kb before the MMAs of kb + 1) one TMEM buffer would do; the model runs the
    # order the kernel's barriers allow, MMA(kb + 1) first, so the shared buffer fails there (previous test).
    assert MODEL.run_cases(rules, ("buffers_shared", "promote_before_mma_of_next"), cases=CASES[:1], quiet=True)


def test_model_reads_the_rules_from_the_source(tmp_path):
    # SB's row taken from the K block instead of the tile column in a copy of the .cu: it still builds, and the model
    # of that build fails.
    text = MODEL.EXPERT.read_text()
    rule = "return static_cast<long long>(tn * BN / SCALE_BLOCK) * kblocks + kb;"
    assert rule in text
    tampered = tmp_path / "tampered.cu"
    tampered.write_text(text.replace(rule, "return static_cast<long long>(kb) * kblocks + tn;"))
    rules = MODEL.Rules(MODEL.build_expert(tampered, workdir=tmp_path / "build").load_path)
    assert rules.sb_index(1, 0, 3) == 1
    assert not MODEL.run_cases(rules, cases=CASES[:1], quiet=True)


def test_instruction_descriptor_is_the_one_tritons_compiler_emits(rules, tmp_path):
    # An independent encoder: Triton's Blackwell lowering of the task's Triton expert (tl.dot on 128x128 e4m3 tiles,
    # BK 128) issues the same tcgen05.mma kind::f8f6f4 M 128 N 128 with an immediate descriptor in its PTX.
    pytest.importorskip("triton")
    import re

    from xlang.archs import get_arch
    from xlang.backend import build_candidate
    from xlang.task import get_task

    task = get_task("gemm_fp8_blockscale")
    result = build_candidate(ROOT / "tasks/gemm_fp8_blockscale/solutions/triton.py", "triton", task, get_arch("b200"),
                             task.shape(), workdir=tmp_path)
    assert result.ok, result.error
    ptx = "\n".join(p.read_text() for p in tmp_path.glob("*.ptx"))
    regs = set(re.findall(r"tcgen05\.mma\.cta_group::1\.kind::f8f6f4 \[[^\]]*\], %rd\d+, %rd\d+, (%r\d+)", ptx))
    assert regs, "no kind::f8f6f4 MMA in Triton's PTX"
    values = {int(m) for r in regs for m in re.findall(rf"mov\.b32\s+{re.escape(r)}, (\d+);", ptx)}
    assert values == {rules.idesc()}, f"Triton {sorted(map(hex, values))}, expert {hex(rules.idesc())}"
