"""The CPU model of the CuTe DSL NVFP4 Blackwell expert (issue 34): tasks/gemm_nvfp4/verify/cutedsl_blackwell_emulate.py
re-enacts the expert's tile / K-step loop, its scale warps' word copies into the two 512-byte chunks per operand and
K step, and the MMAs' read of them, in torch. It matches the task's reference at its tolerance on drawn inputs (both
input kinds, tails in M and N), every injected scale-indexing bug fails, and the layouts the kernel assumes hold at
trace time. The expert has never run on a GPU: these show the scale handling modelled here is right, not that the
kernel runs."""

import shutil
from pathlib import Path

import pytest

from xlang.archs import get_arch
from xlang.backend import build_candidate
from xlang.candidate import load_module
from xlang.task import get_task

ROOT = Path(__file__).resolve().parents[1]
MODEL = load_module(ROOT / "tasks/gemm_nvfp4/verify/cutedsl_blackwell_emulate.py", "nvfp4_cutedsl_blackwell_model")
# odd M and N: one partial tile in each (M < 128 rows, N a multiple of 16 only); K of 2 and 3 steps
CASES = (({"M": 7, "N": 272, "K": 384}, 2), ({"M": 130, "N": 144, "K": 256}, 11))


def test_the_model_matches_the_reference():
    assert MODEL.run_cases(cases=CASES, quiet=True)


@pytest.mark.parametrize("bug", MODEL.BUGS)
def test_the_model_fails_when_the_scale_indexing_is_off(bug):
    assert not MODEL.run_cases((bug,), cases=CASES, quiet=True)


@pytest.mark.slow
def test_the_layouts_the_kernel_assumes_hold_at_trace_time():
    pytest.importorskip("cutlass.cute", reason="nvidia-cutlass-dsl not installed")
    assert MODEL.check_layouts()


def test_the_layout_check_can_fail(monkeypatch):
    pytest.importorskip("cutlass.cute", reason="nvidia-cutlass-dsl not installed")
    monkeypatch.setattr(MODEL, "chunk_byte", lambda m, e, c: 4 * m + e + 512 * c)   # row-major words
    assert not MODEL.check_layouts()


@pytest.mark.slow
@pytest.mark.parametrize("name,wrong", [
    ("_chunk_word", lambda lane, j, c: 128 * c + lane + 32 * j),   # the word of row r at word r
    ("_source_word", lambda kt, c: 2 * kt),                        # both MMAs from the step's first word
])
def test_the_layout_check_reads_the_experts_own_index_rules(monkeypatch, name, wrong):
    pytest.importorskip("cutlass.cute", reason="nvidia-cutlass-dsl not installed")
    import xlang.candidate

    load = xlang.candidate.load_module

    def load_tampered(path, module_name="x"):
        expert = load(path, module_name)
        setattr(expert, name, wrong)
        return expert

    monkeypatch.setattr(xlang.candidate, "load_module", load_tampered)
    assert not MODEL.check_layouts()


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs the CUDA toolkit (ptxas, cuobjdump)")
def test_the_expert_is_mxf4nvf4_block_scaled_and_copies_its_scales_with_tcgen05_cp(tmp_path):
    pytest.importorskip("cutlass.cute", reason="nvidia-cutlass-dsl not installed")
    task, arch = get_task("gemm_nvfp4"), get_arch("b200")
    solution = task.solution("cutedsl", arch.generation, ".py")
    assert solution.path.name == "cutedsl_blackwell.py"
    result = build_candidate(solution.text, "cutedsl", task, arch, task.shape(), workdir=tmp_path, cache=False)
    assert result.ok and result.census.ok, result.error
    fam = result.census.families
    assert fam["tcgen05_block_scale"] > 0 and fam["tcgen05_cp"] > 0
    assert fam["tcgen05_f8f6f4"] == 0 and fam["tcgen05_mma"] == 0
    ptx = "\n".join(p.read_text() for p in tmp_path.rglob("*.ptx"))
    assert "kind::mxf4nvf4.block_scale" in ptx and "kind::mxf8f6f4" not in ptx
