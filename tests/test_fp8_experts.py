"""The gemm_fp8_blockscale experts on CPU (issue 34): the Triton expert computes the task under Triton's interpreter
(TRITON_INTERPRET=1, in a child process); the Triton (h100, b200), cuda_ptx and cutedsl (h100) static builds reach
the fp8 families and not their neighbours. None of them has run on a GPU (the cuda_ptx one has no CPU check of its
results; the cutedsl one has a CPU model of its scale handling, tests/test_fp8_cutedsl_models.py)."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from xlang.archs import get_arch
from xlang.backend import build_candidate
from xlang.task import get_task

ROOT = Path(__file__).resolve().parents[1]
TASK = get_task("gemm_fp8_blockscale")

# Run in a child: TRITON_INTERPRET is read when triton.jit decorates. Triton 3.6's interpreter converts a scalar
# argument with int(array of one element), which numpy 2.4 refuses; the shim (the tests', not the expert's) takes
# the element (tests/test_hostile_new_tasks.py starts its children with it too). Its fp8 tl.dot widens e4m3 to fp16
# exactly and multiplies in fp32.
INTERPRETER_SHIM = r'''
import sys
import numpy as np
import torch
from triton.runtime import interpreter

_patch = interpreter._patch_lang_tensor
def _patch_index(tensor, scope):
    _patch(tensor, scope)
    scope.set_attr(tensor, "__index__", lambda self: int(np.asarray(self.handle.data).reshape(-1)[0]))
interpreter._patch_lang_tensor = _patch_index
'''
_INTERPRET = INTERPRETER_SHIM + r'''
import json

from xlang.candidate import load_module
from xlang.profiler.judge.verify import compare_output
from xlang.task import get_task

task = get_task("gemm_fp8_blockscale")
expert = load_module(sys.argv[1])
# argv[2], where given: a JSON list of configurations for the expert's launch(config=...) (the sweep's knobs). The
# interpreter has no GPU to count SMs on: a persistent grid (the default's too) sees 3, so its programs walk
# several tiles each
configs = json.loads(sys.argv[2]) if len(sys.argv) > 2 else [None]
expert._sm_count = lambda device: 3
for cfg in configs:
    for kind in task.input_kinds:
        for shape in ({"M": 130, "N": 144, "K": 256}, {"M": 7, "N": 272, "K": 384}):
            x = task.make_inputs(shape, 5, "cpu", kind)
            C = torch.full((shape["M"], shape["N"]), float("nan"), dtype=torch.bfloat16)
            args = (x["A"], x["SA"], x["B"], x["SB"], C, shape["M"], shape["N"], shape["K"])
            expert.xlang_entry(*args) if cfg is None else expert.launch(*args, config=cfg)
            stats = compare_output("C", C, task.reference(x, shape)["C"], **task.tolerance,
                                   bound=task.bound_for("C", x, shape))
            print(kind, shape, "ok" if "failure" not in stats else stats["failure"], stats["max_rel_err"])
'''


@pytest.mark.slow
def test_the_triton_expert_computes_the_task_under_the_interpreter(tmp_path):
    pytest.importorskip("triton")
    script = tmp_path / "interpret.py"
    script.write_text(_INTERPRET)
    expert = TASK.solution("triton", "hopper", ".py").path
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, str(script), str(expert)], capture_output=True, text=True, timeout=600,
                          env=env, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 4 and all(" ok " in ln for ln in lines), proc.stdout


@pytest.mark.slow
def test_the_triton_experts_other_configurations_compute_the_task_under_the_interpreter(tmp_path):
    """The knobs benchmarks/fp8_blockscale_sweep.py turns (a persistent grid of one or two programs per SM, BN 64,
    the old 128 x 128 default): each still computes the task, tails in M and N included."""
    pytest.importorskip("triton")
    script = tmp_path / "interpret.py"
    script.write_text(_INTERPRET)
    expert = TASK.solution("triton", "hopper", ".py").path
    configs = [{"PERSISTENT": True}, {"PERSISTENT": True, "PROGRAMS_PER_SM": 2, "GROUP_M": 1},
               {"BM": 128, "BN": 128, "num_warps": 8, "num_stages": 4}, {"BN": 64},
               {"BM": 128, "BN": 64, "PERSISTENT": True}]
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, str(script), str(expert), json.dumps(configs)], capture_output=True,
                          text=True, timeout=900, env=env, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 4 * len(configs) and all(" ok " in ln for ln in lines), proc.stdout


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs the CUDA toolkit (ptxas, cuobjdump)")
@pytest.mark.parametrize("lang, arch_name, present, absent", [
    ("triton", "h100", ("wgmma_fp8", "tma"), ("wgmma",)),
    ("triton", "b200", ("tcgen05_f8f6f4", "tma", "tmem"), ("tcgen05_mma", "tcgen05_block_scale")),
    ("cuda_ptx", "h100", ("wgmma_fp8", "tma", "mbarrier"), ("wgmma",)),
    ("cutedsl", "h100", ("wgmma_fp8", "tma", "mbarrier"), ("wgmma",)),
    # never run on a GPU: its CPU model is tasks/gemm_fp8_blockscale/verify/cutedsl_blackwell_emulate.py
    ("cutedsl", "b200", ("tcgen05_f8f6f4", "tma", "tmem"), ("tcgen05_mma", "tcgen05_block_scale", "tcgen05_cp")),
])
def test_the_experts_sass_has_the_fp8_family_and_not_its_neighbours(lang, arch_name, present, absent, tmp_path):
    from xlang.backend import get_backend

    if lang == "cutedsl":
        pytest.importorskip("cutlass.cute", reason="nvidia-cutlass-dsl not installed")

    arch = get_arch(arch_name)
    solution = TASK.solution(lang, arch.generation, get_backend(lang).suffix)
    result = build_candidate(solution.text, lang, TASK, arch, TASK.shape(), workdir=tmp_path)
    assert result.ok, result.error
    assert result.census.ok and tuple(result.census.required) == TASK.required_for(arch)
    assert all(result.census.families[f] > 0 for f in present), result.census.families
    assert all(result.census.families[f] == 0 for f in absent), result.census.families
    assert all(result.census.ptx[f] > 0 for f in present if f not in ("tma", "tmem"))  # the PTX says so too
    assert not result.census.narrow_accumulate


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs the CUDA toolkit (ptxas, cuobjdump)")
@pytest.mark.parametrize("defines", ["#define FP8GEMM_PERSISTENT 0\n#define FP8GEMM_STAGES 4\n",
                                     "#define FP8GEMM_PERSISTENT 1\n", "#define FP8GEMM_SCALES_AHEAD 1\n",
                                     "#define FP8GEMM_PERSISTENT 1\n#define FP8GEMM_STAGES 6\n"])
def test_the_cuda_ptx_experts_persistent_variant_builds_with_the_fp8_families(defines, tmp_path):
    """The compile-time switch of the Hopper cuda_ptx expert (benchmarks/fp8_blockscale_sweep.py times it against
    the default): set before the source's #ifndef defaults, built by the backend, its census still has the
    required families and no spills."""
    arch = get_arch("h100")
    solution = TASK.solution("cuda_ptx", arch.generation, ".cu")
    result = build_candidate(defines + solution.text, "cuda_ptx", TASK, arch, TASK.shape(), workdir=tmp_path)
    assert result.ok, result.error
    assert result.census.ok and all(result.census.families[f] > 0 for f in ("wgmma_fp8", "tma", "mbarrier",
                                                                            "setmaxnreg"))
    assert result.census.families["wgmma"] == 0 and not result.census.narrow_accumulate
    assert "0 bytes spill stores" in result.ptxas_v
