"""MMAs that accumulate in fp16 on a task whose contract accumulates in fp32 (issue 31, item 6): the census flags
them (archs.toml `narrow_accumulate`, per family), and the verdict makes them incorrect, statically (in the SASS)
and at run time (executed under Nsight Compute). Spellings from nvcc 13.0 + cuobjdump builds of
tests/fixtures/census/accumulators.cu, kept as fixtures; rebuilt and compared where nvcc and cuobjdump are here."""

import dataclasses
import gzip
import shutil
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from xlang import census
from xlang.archs import families, get_arch
from xlang.toolchain import find_tool

FIX = Path(__file__).resolve().parent / "fixtures"
SOURCE = FIX / "census" / "accumulators.cu"
# function -> accumulates in fp16?
WGMMA = {"wgmma_f32_bf16": False, "wgmma_f32_f16": False, "wgmma_f16_f16": True, "wgmma_f16_e4m3": True,
         "wgmma_f32_e4m3": False}
MMA = {"mma_f32_bf16": False, "mma_f32_f16": False, "mma_f16_f16": True, "mma_f16_f16_k8": True}


def _flagged(sass_text: str, arch: str) -> dict[str, bool]:
    names = get_arch(arch).families
    return {fn: bool(census.narrow_accumulators(ops, names)) for fn, ops in census.parse_sass(sass_text).items()}


def test_the_rules_flag_fp16_accumulators_and_nothing_else():
    assert _flagged((FIX / "census" / "accumulators.sm_90a.sass").read_text(), "h100") == {**WGMMA, **MMA}
    assert _flagged((FIX / "census" / "accumulators.sm_100a.sass").read_text(), "b200") == MMA
    spelled = {op for ops in census.parse_sass((FIX / "census" / "accumulators.sm_90a.sass").read_text()).values()
               for op in ops if "MMA" in op}
    assert spelled == {"HGMMA.64x8x16.F32.BF16", "HGMMA.64x8x16.F32", "HGMMA.64x8x16.F16", "QGMMA.64x8x32.F16.E4M3.E4M3",
                       "QGMMA.64x8x32.F32.E4M3.E4M3", "HMMA.16816.F32.BF16", "HMMA.16816.F32", "HMMA.16816.F16",
                       "HMMA.1688.F16"}
    # tcgen05.mma keeps its accumulator type in the instruction descriptor (a register at run time): no rule.
    assert families()["tcgen05_mma"].narrow_accumulate is None
    # The experts' own spellings (H200 fixtures) are fp32 accumulators.
    page = gzip.open(FIX / "profiler" / "triton-gemm_tma.ncu_source.csv.gz", "rt").read()
    hgmma = [ln for ln in page.splitlines() if "HGMMA" in ln]
    assert hgmma and not any(families()["wgmma"].narrow_accumulate.search(ln.split('"')[3].strip()) for ln in hgmma)


@pytest.mark.skipif(not (shutil.which("nvcc") and find_tool("cuobjdump")), reason="needs nvcc and cuobjdump")
@pytest.mark.parametrize("arch,sm,flags", [("h100", "90a", ["-DXL_WGMMA"]), ("b200", "100a", [])])
def test_the_fixtures_are_what_nvcc_builds_here(arch, sm, flags, tmp_path):
    cubin = tmp_path / "a.cubin"
    subprocess.run(["nvcc", f"-gencode=arch=compute_{sm},code=sm_{sm}", *flags, "-cubin", "-o", str(cubin),
                    str(SOURCE)], check=True, capture_output=True, timeout=300)
    built = {fn: Counter({op: n for op, n in ops.items() if "MMA" in op}) for fn, ops in census.disassemble(cubin).items()}
    recorded = {fn: Counter({op: n for op, n in ops.items() if "MMA" in op})
                for fn, ops in census.parse_sass((FIX / "census" / f"accumulators.sm_{sm}.sass").read_text()).items()}
    assert built == recorded


_CANDIDATE = r'''
#include <cstdint>
#include <cuda_runtime.h>
#include <cuda_bf16.h>
// A GEMM-shaped candidate whose only MMA accumulates in fp16 (its numbers are not the point: the census is).
extern "C" __global__ void acc_kernel(uint64_t da, uint64_t db, uint32_t* out) {
  uint32_t d0 = 0, d1 = 0;
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
  asm volatile("wgmma.mma_async.sync.aligned.m64n8k16.ACC.f16.f16 {%0,%1}, %2, %3, 1, 1, 1, 0, 0;\n"
               : "+r"(d0), "+r"(d1) : "l"(da), "l"(db));
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
  out[threadIdx.x] = d0 ^ d1;
}
extern "C" void xlang_entry(const __nv_bfloat16* A, const __nv_bfloat16* B, __nv_bfloat16* C, int M, int N, int K,
                            cudaStream_t stream) {
  acc_kernel<<<1, 128, 0, stream>>>(0, 0, reinterpret_cast<uint32_t*>(C));
}
'''


@pytest.mark.skipif(not (shutil.which("nvcc") and find_tool("cuobjdump")), reason="needs nvcc and cuobjdump")
def test_a_static_verdict_with_an_fp16_accumulator_is_incorrect(tmp_path):
    from xlang.profiler.evaluate import EvalOptions, evaluate
    from xlang.task import get_task

    opts = EvalOptions(run="never", workdir=tmp_path / "f16")
    v = evaluate(_CANDIDATE.replace("ACC", "f16"), "cuda_ptx", get_task("gemm"), get_arch("h100"),
                 {"M": 128, "N": 128, "K": 64}, opts)
    assert v.category == "incorrect" and "HGMMA.64x8x16.F16" in v.detail and "accumulate in fp32" in v.detail
    assert v.build["census"]["kernels"][0]["narrow_accumulate"] == {"HGMMA.64x8x16.F16": 1}
    # The same kernel with an fp32 accumulator is only missing TMA (the census's own failure).
    f32 = _CANDIDATE.replace("ACC", "f32").replace("uint32_t d0 = 0, d1 = 0;", "float d0 = 0, d1 = 0, d2 = 0, d3 = 0;")
    f32 = f32.replace('{%0,%1}, %2, %3', '{%0,%1,%2,%3}, %4, %5').replace(
        ': "+r"(d0), "+r"(d1)', ': "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3)').replace("d0 ^ d1", "d0 + d3")
    v = evaluate(f32, "cuda_ptx", get_task("gemm"), get_arch("h100"), {"M": 128, "N": 128, "K": 64},
                 EvalOptions(run="never", workdir=tmp_path / "f32"))
    assert v.category == "missing_instructions", v.detail


def test_an_executed_fp16_accumulator_is_incorrect_under_nsight_compute():
    """The H200 profile of the Triton GEMM with its HGMMA rewritten to an fp16 accumulator (as a kernel its JIT
    compiled at run time, which the static census never saw, would show): incorrect, from the ncu stage."""
    from xlang.profiler import ncu
    from plans import plan

    from xlang.profiler.stages.ncu import ncu_judgement
    from xlang.task import get_task

    (profile,) = ncu.parse_source_page(gzip.open(FIX / "profiler" / "triton-gemm_tma.ncu_source.csv.gz", "rt").read())
    spec = plan(mode="ncu", build_kernels=["gemm_kernel"], kernels_on_disk=False, build_modules=[],
                trials=[[{"M": 8192, "N": 7168, "K": 5120}, "normal", 1]])
    info, judged = ncu_judgement({}, [profile], spec, get_arch("h200"), ("wgmma", "tma"), get_task("gemm"))
    assert judged is None and info["narrow_accumulate"] == []
    lines = [dataclasses.replace(ln, opcode=ln.opcode.replace(".F32.BF16", ".F16"),
                                 text=ln.text.replace(".F32.BF16", ".F16")) for ln in profile.lines]
    f16 = dataclasses.replace(profile, lines=lines)
    info, judged = ncu_judgement({}, [f16], spec, get_arch("h200"), ("wgmma", "tma"), get_task("gemm"))
    assert judged[0] == "incorrect" and "HGMMA.64x128x16.F16" in judged[1] and "executed" in judged[1]
    assert info["narrow_accumulate"][0]["threads"] > 0
