"""Every expert solution builds for its architectures with no GPU, and its SASS census shows the families it
is meant to reach (Blackwell: the only evidence we have, since no B200 is lent here)."""

import shutil
from pathlib import Path

import pytest

from xlang.archs import get_arch
from xlang.backend import build_candidate
from xlang.task import get_task

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None and not Path("/usr/local/cuda/bin/nvcc").exists(),
                                reason="nvcc (CUDA toolkit) not installed")

HOPPER = {"wgmma", "tma"}
BLACKWELL = {"tcgen05_mma", "tma", "tmem"}
# (task, lang, arch, shape overrides, families that must appear in the SASS)
CASES = [
    ("gemm", "triton", "h100", None, HOPPER),
    ("gemm", "triton", "b200", None, BLACKWELL),
    ("gemm", "cuda_ptx", "h100", None, HOPPER | {"mbarrier", "setmaxnreg"}),
    ("gemm", "cuda_ptx", "b200", None, BLACKWELL | {"tcgen05_commit"}),
    ("gemm", "cutedsl", "h100", None, HOPPER | {"setmaxnreg"}),
    ("gemm", "cutedsl", "b200", None, BLACKWELL),
    ("gemm", "cutedsl", "h100", "M=1000,N=776,K=520", HOPPER),
    ("attn_fwd", "triton", "h100", None, HOPPER),
    ("attn_fwd", "triton", "b200", "D=96,HKV=8", BLACKWELL),
    ("attn_fwd_causal", "triton", "h100", "D=64", HOPPER),
    ("attn_fwd_causal", "triton", "b200", None, BLACKWELL),
    # Validated on the H200 (tasks/attn_fwd/NOTES_cuda_ptx.md, NOTES_cutedsl.md); here: they still build.
    ("attn_fwd", "cuda_ptx", "h100", None, HOPPER | {"mbarrier", "setmaxnreg"}),
    ("attn_fwd_causal", "cuda_ptx", "h100", "D=96,HKV=8", HOPPER | {"mbarrier", "setmaxnreg"}),
    ("attn_fwd", "cutedsl", "h100", "D=64", HOPPER | {"setmaxnreg"}),
    ("attn_fwd_causal", "cutedsl", "h100", None, HOPPER | {"setmaxnreg"}),
    # Attention backward in cuda_ptx: `ok` on the H200 (tasks/attn_bwd/NOTES_cuda_ptx.md); here: it builds.
    ("attn_bwd", "cuda_ptx", "h100", None, HOPPER | {"mbarrier"}),
    ("attn_bwd_causal", "cuda_ptx", "h100", "D=96,HKV=8", HOPPER | {"mbarrier"}),
    # Attention backward in CuTe DSL: `ok` on the H200 (tasks/attn_bwd/NOTES_cutedsl.md); here: it builds.
    ("attn_bwd", "cutedsl", "h100", None, HOPPER | {"mbarrier", "setmaxnreg", "stmatrix"}),
    ("attn_bwd_causal", "cutedsl", "h100", "D=96,S=1000,HKV=8", HOPPER | {"mbarrier", "setmaxnreg"}),
    ("attn_bwd", "cutedsl", "h100", "D=64", HOPPER),
    # Blackwell attention: no B200 here, so compile + census only (tasks/attn_fwd/NOTES_cuda_ptx_blackwell.md).
    ("attn_fwd", "cuda_ptx", "b200", None, BLACKWELL | {"mbarrier", "tcgen05_commit", "tmem_alloc"}),
    ("attn_fwd_causal", "cuda_ptx", "b200", "D=96,HKV=8", BLACKWELL | {"mbarrier", "tcgen05_commit", "tmem_alloc"}),
    ("attn_fwd", "cutedsl", "b200", "D=96", BLACKWELL | {"tcgen05_commit", "tmem_alloc"}),
    ("attn_fwd_causal", "cutedsl", "b200", "HKV=8,S=1000", BLACKWELL | {"tcgen05_commit", "tmem_alloc"}),
    # Blackwell attention backward in cuda_ptx: never run (tasks/attn_bwd/NOTES_cuda_ptx_blackwell.md); it builds.
    ("attn_bwd", "cuda_ptx", "b200", None, BLACKWELL | {"mbarrier", "tcgen05_commit", "tmem_alloc"}),
    ("attn_bwd_causal", "cuda_ptx", "b200", "D=96,S=1000,HKV=8", BLACKWELL | {"mbarrier", "tcgen05_commit", "tmem_alloc"}),
    # Blackwell attention backward in CuTe DSL: never run (tasks/attn_bwd/NOTES_cutedsl_blackwell.md); it builds.
    ("attn_bwd", "cutedsl", "b200", None, BLACKWELL | {"mbarrier", "tcgen05_commit", "tmem_alloc"}),
    ("attn_bwd_causal", "cutedsl", "b200", "D=96,S=300,H=2,HKV=1", BLACKWELL | {"mbarrier", "tcgen05_commit", "tmem_alloc"}),
    ("attn_bwd", "cutedsl", "b200", "D=64", BLACKWELL),
    # Gluon attention backward (issue 35): never run on a GPU; its CPU model is tests/test_attn_bwd_gluon_emulate.py.
    ("attn_bwd", "gluon", "h100", None, HOPPER | {"mbarrier"}),
    ("attn_bwd_causal", "gluon", "h100", "D=96,S=1000,HKV=8", HOPPER | {"mbarrier"}),
    ("attn_bwd", "gluon", "b200", None, BLACKWELL | {"mbarrier", "tcgen05_commit", "tmem_alloc"}),
    ("attn_bwd_causal", "gluon", "b200", "D=64,S=300,H=2,HKV=1", BLACKWELL | {"mbarrier", "tcgen05_commit"}),
    ("attn_bwd", "gluon", "b200", "D=96,S=77,H=4,HKV=2", BLACKWELL),
    # The serving attention tasks (issue 33): never run on a GPU; here they build with their required families.
    ("attn_decode_paged", "triton", "h100", None, {"cp_async", "mma_sync"}),
    ("attn_decode_paged", "triton", "h100", "D=256,P=1", {"cp_async"}),
    ("attn_decode_paged", "triton", "b200", "P=64,D=64", {"cp_async"}),
    # cuda_ptx decode (one source for every D and P, dispatched at run time; CPU model: tests/test_decode_cuda_ptx_model.py).
    ("attn_decode_paged", "cuda_ptx", "h100", None, {"cp_async", "mma_sync", "ldmatrix"}),
    ("attn_decode_paged", "cuda_ptx", "h100", "D=64,P=1", {"cp_async", "mma_sync", "ldmatrix"}),
    ("attn_decode_paged", "cuda_ptx", "h100", "D=256,P=64", {"cp_async", "mma_sync", "ldmatrix"}),
    # The same file (solutions/cuda_ptx.cu) built for sm_100a: never run on Blackwell (NOTES_cuda_ptx_blackwell.md).
    ("attn_decode_paged", "cuda_ptx", "b200", None, {"cp_async", "mma_sync", "ldmatrix"}),
    ("attn_decode_paged", "cuda_ptx", "b200", "D=256,P=1", {"cp_async", "mma_sync", "ldmatrix"}),
    # CuTe DSL decode (cp.async page gathers, FMA, split-KV; one compile per D, P, G): never run on a GPU; its CPU model
    # is tests/test_decode_cutedsl_model.py.
    ("attn_decode_paged", "cutedsl", "h100", None, {"cp_async"}),
    ("attn_decode_paged", "cutedsl", "h100", "D=256,P=1,H=16,HKV=2", {"cp_async"}),
    ("attn_decode_paged", "cutedsl", "h100", "D=64,P=64,H=8,HKV=8", {"cp_async"}),
    ("attn_prefill_ragged", "triton", "h100", None, HOPPER),
    ("attn_prefill_ragged", "triton", "h100", "D=256", HOPPER),
    ("attn_prefill_ragged", "triton", "b200", None, BLACKWELL),
    # cuda_ptx ragged prefill (the attn_fwd expert over cu_seqlens; D 256 with BN 64): never run on a GPU.
    ("attn_prefill_ragged", "cuda_ptx", "h100", None, HOPPER | {"mbarrier", "setmaxnreg"}),
    ("attn_prefill_ragged", "cuda_ptx", "h100", "D=256,HKV=4", HOPPER | {"mbarrier", "setmaxnreg"}),
    # cuda_ptx ragged prefill on Blackwell (attn_fwd's tcgen05 expert over cu_seqlens; D 256 with BN 64): never run;
    # its CPU model is tests/test_prefill_cuda_ptx_blackwell_model.py.
    ("attn_prefill_ragged", "cuda_ptx", "b200", None, BLACKWELL | {"mbarrier", "tcgen05_commit", "tmem_alloc"}),
    ("attn_prefill_ragged", "cuda_ptx", "b200", "D=256,HKV=4", BLACKWELL | {"mbarrier", "tcgen05_commit", "tmem_alloc"}),
    # CuTe DSL ragged prefill (attn_fwd's CuTe DSL expert over cu_seqlens; D 256 with BN 64): never run on a GPU; its
    # CPU model is tests/test_prefill_cutedsl_model.py.
    ("attn_prefill_ragged", "cutedsl", "h100", None, HOPPER | {"mbarrier", "setmaxnreg"}),
    ("attn_prefill_ragged", "cutedsl", "h100", "D=256,HKV=4", HOPPER | {"mbarrier", "setmaxnreg"}),
    # fp8 1d2d GEMM (issue 34): never run on a GPU; the interpreter check is tests/test_fp8_experts.py.
    ("gemm_fp8_blockscale", "triton", "h100", None, {"wgmma_fp8", "tma"}),
    ("gemm_fp8_blockscale", "triton", "h100", "M=77,N=208,K=384", {"wgmma_fp8", "tma"}),
    ("gemm_fp8_blockscale", "triton", "b200", None, {"tcgen05_f8f6f4", "tma", "tmem"}),
    ("gemm_fp8_blockscale", "cuda_ptx", "h100", None, {"wgmma_fp8", "tma", "mbarrier", "setmaxnreg"}),
    # cuda_ptx 1d2d on Blackwell (issue 34): never run on a GPU; its CPU model is
    # tasks/gemm_fp8_blockscale/verify/cuda_ptx_blackwell_model.py. kind::f8f6f4, not a block-scaled kind.
    ("gemm_fp8_blockscale", "cuda_ptx", "b200", None, {"tcgen05_f8f6f4", "tma", "tmem", "tcgen05_commit", "tmem_alloc",
                                                       "mbarrier", "ffma"}),
    ("gemm_fp8_blockscale", "cuda_ptx", "b200", "M=77,N=208,K=384", {"tcgen05_f8f6f4", "tma"}),
    ("gemm_mxfp8", "triton", "b200", None, {"tcgen05_block_scale", "tma", "tmem"}),
    ("gemm_mxfp8", "triton", "b200", "M=77,N=208,K=384", {"tcgen05_block_scale", "tma"}),
    # CuTe DSL fp8 experts (issue 34): never run on a GPU; CPU models in tasks/<task>/verify/ (test_fp8_cutedsl_models.py).
    ("gemm_fp8_blockscale", "cutedsl", "h100", None, {"wgmma_fp8", "tma", "mbarrier", "setmaxnreg", "stmatrix"}),
    ("gemm_fp8_blockscale", "cutedsl", "h100", "M=77,N=208,K=384", {"wgmma_fp8", "tma"}),
    ("gemm_fp8_blockscale", "cutedsl", "b200", None, {"tcgen05_f8f6f4", "tma", "tmem", "tcgen05_commit", "tmem_alloc"}),
    ("gemm_fp8_blockscale", "cutedsl", "b200", "M=77,N=208,K=384", {"tcgen05_f8f6f4", "tma"}),
    ("gemm_mxfp8", "cutedsl", "b200", None, {"tcgen05_block_scale", "tcgen05_cp", "tma", "tmem", "tcgen05_commit",
                                             "tmem_alloc"}),
    ("gemm_mxfp8", "cutedsl", "b200", "M=77,N=208,K=384", {"tcgen05_block_scale", "tcgen05_cp", "tma"}),
    # cuda_ptx MXFP8 (issue 34): never run on a GPU; its CPU model is tasks/gemm_mxfp8/verify/cuda_ptx_blackwell_model.py.
    ("gemm_mxfp8", "cuda_ptx", "b200", None, {"tcgen05_block_scale", "tcgen05_cp", "tma", "tmem", "tcgen05_commit",
                                              "tmem_alloc", "mbarrier"}),
    ("gemm_mxfp8", "cuda_ptx", "b200", "M=77,N=208,K=384", {"tcgen05_block_scale", "tcgen05_cp", "tma"}),
    # NVFP4 GEMM (issue 34): never run on a GPU; its CPU model is tasks/gemm_nvfp4/verify/triton_blackwell_emulate.py.
    ("gemm_nvfp4", "triton", "b200", None, {"tcgen05_block_scale", "tma", "tmem"}),
    ("gemm_nvfp4", "triton", "b200", "M=77,N=208,K=384", {"tcgen05_block_scale", "tma"}),
    ("gemm_nvfp4", "triton", "h100", None, {"wgmma", "tma"}),  # no fp4 MMA: dequantised to fp16 in registers
    # cuda_ptx NVFP4 (issue 34): never run on a GPU; its CPU model is tasks/gemm_nvfp4/verify/cuda_ptx_blackwell_model.py.
    ("gemm_nvfp4", "cuda_ptx", "b200", None, {"tcgen05_block_scale", "tcgen05_cp", "tma", "tmem", "tcgen05_commit",
                                              "tmem_alloc", "mbarrier"}),
    ("gemm_nvfp4", "cuda_ptx", "b200", "M=77,N=208,K=384", {"tcgen05_block_scale", "tcgen05_cp", "tma"}),
    # CuTe DSL NVFP4 (issue 34, kind::mxf4nvf4 scale_vec::4X, SASS UTCOMMA.4X): never run on a GPU; its CPU model is
    # tasks/gemm_nvfp4/verify/cutedsl_blackwell_emulate.py (tests/test_nvfp4_cutedsl_model.py).
    ("gemm_nvfp4", "cutedsl", "b200", None, {"tcgen05_block_scale", "tcgen05_cp", "tma", "tmem", "tcgen05_commit",
                                             "tmem_alloc"}),
    ("gemm_nvfp4", "cutedsl", "b200", "M=77,N=208,K=384", {"tcgen05_block_scale", "tcgen05_cp", "tma"}),
]


@needs_nvcc
@pytest.mark.parametrize("task_name,lang,arch,shape,families", CASES,
                         ids=[f"{c[0]}-{c[1]}-{c[2]}{'-' + c[3] if c[3] else ''}" for c in CASES])
def test_expert_builds_with_its_families(task_name, lang, arch, shape, families, tmp_path):
    if lang == "cutedsl":
        pytest.importorskip("cutlass.cute", reason="nvidia-cutlass-dsl not installed")
    from xlang.backend import get_backend
    from xlang.task import parse_shape

    task, arch_obj = get_task(task_name), get_arch(arch)
    solution = task.solution(lang, arch_obj.generation, get_backend(lang).suffix)
    assert solution is not None, f"no {lang} expert for {task_name} on {arch_obj.generation}"
    result = build_candidate(solution.text, lang, task, arch_obj, task.shape(parse_shape(shape)), workdir=tmp_path)
    assert result.ok, result.error
    assert result.census.ok, result.census.missing
    seen = {f for f, n in result.census.families.items() if n > 0}
    assert families <= seen, f"missing in SASS: {families - seen}"
