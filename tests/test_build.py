"""Builds for sm_90a and sm_100a on a machine with no GPU, and the static SASS census of what they produce."""

import shutil
from pathlib import Path

import pytest

from xlang.archs import get_arch
from xlang.backend import build_candidate, get_backend
from xlang.census import classify, parse_sass
from xlang.errors import XlangError
from xlang.task import get_task

KERNELS = Path(__file__).parent / "kernels"
GEMM = get_task("gemm")
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None and not Path("/usr/local/cuda/bin/nvcc").exists(),
                                reason="nvcc (CUDA toolkit) not installed")

SASS_SAMPLE = """
	code for sm_90a
		Function : _Z4gemmPK13__nv_bfloat16
	.headerflags	@"EF_CUDA_TEXMODE_UNIFIED EF_CUDA_64BIT_ADDRESS EF_CUDA_SM90 EF_CUDA_VIRTUAL_SM(EF_CUDA_SM90)"
        /*0000*/                   LDC R1, c[0x0][0x28] ;                              /* 0x00000a00ff017b82 */
        /*0010*/              @!P0 SYNCS.EXCH.64 URZ, [UR4], UR6 ;                     /* 0x000000060400759c */
        /*0020*/                   UTMALDG.2D [UR8], [UR4] ;                           /* 0x00000008040075b4 */
        /*0030*/                   HGMMA.64x128x16.F32.BF16 R24, gdesc[UR4], RZ, !UPT ; /* 0x0fe0000004187df0 */
        /*0040*/                   HGMMA.64x128x16.F32.BF16 R24, gdesc[UR8], R24 ;     /* 0x0fe0000008187df0 */
        /*0050*/             @UP0 USETMAXREG.DEALLOC.CTAPOOL 0x28 ;                  /* 0x000000a0000075c8 */
        /*0060*/                   EXIT ;                                              /* 0x000000000000794d */
		Function : helper_kernel
        /*0000*/                   FFMA R2, R3, R4, R2 ;                               /* 0x0000000403027223 */
"""


def test_parse_sass_counts_opcodes_per_function_with_predicates():
    fns = parse_sass(SASS_SAMPLE)
    assert set(fns) == {"_Z4gemmPK13__nv_bfloat16", "helper_kernel"}
    gemm = fns["_Z4gemmPK13__nv_bfloat16"]
    assert gemm["HGMMA.64x128x16.F32.BF16"] == 2 and gemm["SYNCS.EXCH.64"] == 1
    assert gemm["USETMAXREG.DEALLOC.CTAPOOL"] == 1
    fams = classify(gemm, get_arch("h100").families)
    assert fams["wgmma"] == 2 and fams["tma"] == 1 and fams["mbarrier"] == 1 and fams["setmaxnreg"] == 1
    assert classify(fns["helper_kernel"], get_arch("h100").families)["ffma"] == 1


# (file, lang, arch) -> must the required families be present?
CASES = [
    ("triton/gemm_tma.py", "triton", "h100", True),
    ("triton/gemm_tma.py", "triton", "b200", True),
    ("triton/fma_only.py", "triton", "h100", False),
    ("triton/fma_only.py", "triton", "b200", False),
    ("cuda_ptx/gemm_tile_hopper.cu", "cuda_ptx", "h100", True),
    ("cuda_ptx/gemm_tile_blackwell.cu", "cuda_ptx", "b200", True),
    ("cuda_ptx/fma_only.cu", "cuda_ptx", "h100", False),
    ("cuda_ptx/fma_only.cu", "cuda_ptx", "b200", False),
    ("cutedsl/hopper_tma_wgmma.py", "cutedsl", "h100", True),
    ("cutedsl/blackwell_tma_tcgen05.py", "cutedsl", "b200", True),
    ("cutedsl/fma_only.py", "cutedsl", "h100", False),
    ("cutedsl/fma_only.py", "cutedsl", "b200", False),
]

# A plain-FMA GEMM that follows the contract: tensor cores and TMA both missing, on either architecture.
FMA_GEMM_CU = """
#include <cuda_bf16.h>
__global__ void gemm_fma(const __nv_bfloat16* A, const __nv_bfloat16* B, __nv_bfloat16* C, int M, int N, int K) {
  int m = blockIdx.y * blockDim.y + threadIdx.y, n = blockIdx.x * blockDim.x + threadIdx.x;
  if (m >= M || n >= N) return;
  float acc = 0.f;
  for (int k = 0; k < K; ++k) acc = fmaf(__bfloat162float(A[m * K + k]), __bfloat162float(B[n * K + k]), acc);
  C[m * N + n] = __float2bfloat16(acc);
}
extern "C" void xlang_entry(const __nv_bfloat16* A, const __nv_bfloat16* B, __nv_bfloat16* C,
                            int M, int N, int K, cudaStream_t stream) {
  dim3 block(16, 16), grid((N + 15) / 16, (M + 15) / 16);
  gemm_fma<<<grid, block, 0, stream>>>(A, B, C, M, N, K);
}
"""


@needs_nvcc
@pytest.mark.parametrize("path,lang,arch,has_families", CASES, ids=[f"{c[0]}-{c[2]}" for c in CASES])
def test_build_and_census(path, lang, arch, has_families, tmp_path):
    if lang == "cutedsl":
        pytest.importorskip("cutlass.cute", reason="nvidia-cutlass-dsl not installed")
    arch_obj = get_arch(arch)
    source = FMA_GEMM_CU if path == "cuda_ptx/fma_only.cu" else KERNELS / path
    # The CuTe DSL test kernels need M*N <= M*K (fma_only) and tile multiples: one square shape serves all.
    shape = GEMM.shape({"M": 1024, "N": 1024, "K": 1024}) if lang == "cutedsl" else None
    result = build_candidate(source, lang, GEMM, arch_obj, shape, workdir=tmp_path)
    assert result.ok, result.error
    census = result.census
    assert census.arch == arch and census.required == list(arch_obj.default_required)
    if has_families:
        assert census.ok, census.missing
        mma = "wgmma" if arch_obj.generation == "hopper" else "tcgen05_mma"
        assert census.families[mma] > 0 and census.families["tma"] > 0
        assert census.ptx[mma] > 0 and census.ptx["tma"] > 0
        # Both architectures' code is really for that architecture: no wgmma on Blackwell, no tcgen05 on Hopper.
        assert "tcgen05_mma" not in census.families if arch_obj.generation == "hopper" else "wgmma" not in census.families
    else:
        assert census.missing == list(arch_obj.default_required)
    assert (tmp_path / "build.json").is_file()


@needs_nvcc
def test_cuda_compile_error_is_the_compilers_message(tmp_path):
    bad = 'extern "C" void xlang_entry(const __nv_bfloat16* A, const __nv_bfloat16* B, __nv_bfloat16* C,' \
          ' int M, int N, int K, cudaStream_t stream) { undefined_thing<<<1, 1, 0, stream>>>(); }'
    result = build_candidate(bad, "cuda_ptx", GEMM, get_arch("h100"), workdir=tmp_path)
    assert not result.ok and "undefined_thing" in result.error and "candidate.cu" in result.error
    assert "Traceback" not in result.error and str(tmp_path) not in result.error


def test_triton_compile_error_points_into_the_candidate(tmp_path):
    source = (KERNELS / "triton" / "gemm_tma.py").read_text().replace("acc = tl.dot(a, b.T, acc)",
                                                                      "acc = tl.dot(a, b.T, acc, bogus=1)")
    result = build_candidate(source, "triton", GEMM, get_arch("h100"), workdir=tmp_path)
    assert not result.ok and "bogus" in result.error
    assert "xlang/" not in result.error and "static_build" not in result.error


def test_triton_host_error_shows_only_candidate_frames(tmp_path):
    source = "def helper():\n    raise ValueError('no kernels here')\n\ndef xlang_entry(A, B, C, M, N, K):\n    helper()\n"
    result = build_candidate(source, "triton", GEMM, get_arch("b200"), workdir=tmp_path)
    assert not result.ok
    assert "ValueError: no kernels here" in result.error and 'line 2, in helper' in result.error
    assert "static_build" not in result.error


def test_candidate_without_kernels_is_a_build_failure(tmp_path):
    result = build_candidate("def xlang_entry(A, B, C, M, N, K):\n    pass\n", "triton", GEMM, get_arch("h100"),
                             workdir=tmp_path)
    assert not result.ok and "no GPU kernel" in result.error


def test_static_screen_flags_vendor_calls():
    assert get_backend("triton").screen("def xlang_entry(A, B, C, M, N, K):\n    torch.matmul(A, B.t(), out=C)\n")
    assert not get_backend("triton").screen("# torch.matmul would be cheating\nx = 1\n")
    assert get_backend("cuda_ptx").screen("#include <cublas_v2.h>\nvoid f() { cublasGemmEx(); }")
    with pytest.raises(XlangError, match="unknown language"):
        get_backend("fortran")


# Two kernels: one with a static shared tile and a barrier, one whose local array lives in a stack frame; `unused`
# draws a front-end warning, which stays in the build log.
PTXAS_CU = r'''
#include <cuda_bf16.h>
__global__ void tile_copy(__nv_bfloat16* C, int n) {
  __shared__ float tile[256];
  int i = blockIdx.x * 256 + threadIdx.x;
  tile[threadIdx.x] = i < n ? 1.0f : 0.0f;
  __syncthreads();
  if (i < n) C[i] = __float2bfloat16(tile[255 - threadIdx.x]);
}
__global__ void framed(__nv_bfloat16* C, int k) {
  float a[64];
  for (int j = 0; j < 64; j++) a[j] = __bfloat162float(C[threadIdx.x * j]);
  float s = 0;
  for (int j = 0; j < 64; j++) s += a[(j * k + threadIdx.x) % 64];
  C[threadIdx.x] = __float2bfloat16(s);
}
static int unused;
extern "C" void xlang_entry(const __nv_bfloat16* A, const __nv_bfloat16* B, __nv_bfloat16* C, int M, int N, int K,
                            cudaStream_t stream) {
  tile_copy<<<(M * N + 255) / 256, 256, 0, stream>>>(C, M * N);
  framed<<<1, 32, 0, stream>>>(C, K);
}
'''


@needs_nvcc
def test_cuda_ptx_build_keeps_ptxas_v_and_the_feedback_quotes_it(tmp_path):
    from xlang import verdict as V
    from xlang.agent import feedback as F
    from xlang.agent.buildinfo import kernel_resources

    result = build_candidate(PTXAS_CU, "cuda_ptx", GEMM, get_arch("h100"), workdir=tmp_path)
    assert result.ok, result.error
    assert "Compiling entry function '_Z9tile_copyP13__nv_bfloat16i' for 'sm_90a'" in result.ptxas_v
    assert "ptxas info" not in result.log and "unused" in result.log  # the report apart from the diagnostics
    resources = {r["kernel"]: r for r in kernel_resources(result.to_dict())}
    assert set(resources) == {"_Z9tile_copyP13__nv_bfloat16i", "_Z6framedP13__nv_bfloat16i"}
    tile, framed = resources["_Z9tile_copyP13__nv_bfloat16i"], resources["_Z6framedP13__nv_bfloat16i"]
    assert tile["source"] == "ptxas -v" and tile["shared"] == 1024 and tile["barriers"] == 1
    assert tile["registers"] > 1 and framed["stack"] == 256 and framed["shared"] == 0
    assert framed["lines"][0] == "256 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads"
    v = V.Verdict(V.INCORRECT, detail="wrong", compiled=True, census_ok=False, runtime_ran=True, correct=False,
                  build={**result.to_dict(), "resources": list(resources.values())})
    text = F.feedback_text(v, turn_idx=1, turns=4, backend=get_backend("cuda_ptx"), arch=get_arch("h100"),
                           code=PTXAS_CU)
    assert "(ptxas -v)" in text and "1024 bytes static shared memory" in text
    assert "`256 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads`" in text
    assert f"`Used {tile['registers']} registers, used 1 barriers, 1024 bytes smem" in text


def test_triton_resources_take_shared_memory_from_its_metadata(tmp_path):
    from xlang.agent.buildinfo import kernel_resources

    from xlang.toolchain import find_tool

    if find_tool("cuobjdump") is None:
        pytest.skip("cuobjdump not installed")
    result = build_candidate(KERNELS / "triton" / "gemm_tma.py", "triton", GEMM, get_arch("h100"), workdir=tmp_path)
    assert result.ok, result.error
    meta_shared = result.kernels[0].meta["shared_bytes"]
    (r,) = [x for x in kernel_resources(result.to_dict()) if x["kernel"] == result.kernels[0].name][:1]
    assert r["source"] == "cuobjdump -res-usage" and r["registers"] > 0
    assert r["shared"] == meta_shared > 0 and r["shared_source"] == "triton metadata"
