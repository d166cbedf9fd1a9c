"""tilelang: a Python module whose entry point compiles TileLang programs (@T.prim_func, through @tilelang.jit or
tilelang.compile) and calls the compiled kernels. A language plugin: this package registers BACKEND under the
entry-point group `xlang.backends` (pyproject.toml), so nothing in xlang/ names it.

Building needs no GPU: static_build.py runs the entry point in a jailed child with TileLang's target forced to
the architecture's ({"kind": "cuda", "arch": "sm_90a" | "sm_100a"}) and the compiled kernels' calls recorded
instead of run; TileLang lowers each program to CUDA C++ and compiles it with nvcc into a cubin, which it keeps in
its cache (TILELANG_CACHE_DIR, in the child's own home) and which the build reports.

Provenance at run time: TileLang's runtime loads that same cubin (embedded byte for byte in the host library it
builds) with cuModuleLoadData, so the observer's hash of a TileLang kernel's module is the SHA-256 of a
`kernel.cubin` in the candidate's private TileLang cache: kernels on disk, like Triton's.
"""

from __future__ import annotations

from pathlib import Path

from xlang.backend import TORCH_COMPUTE_FORBIDDEN, BuildResult
from xlang.python_backend import PythonModuleBackend


class TileLangBackend(PythonModuleBackend):
    name = "tilelang"
    title = "TileLang"
    rank = 40
    color = "#d35400"
    tools = ("nvcc",)  # TileLang compiles its CUDA C++ with nvcc (its `nvcc` extra is not installed)
    distributions = ("torch", "tilelang", "apache-tvm-ffi")
    fingerprint_packages = (("tilelang", "tilelang"),)
    static_build = "xlang_tilelang.static_build"  # this package's own module (xlang.resources.import_module)
    static_build_what = "import and entry point with TileLang's target forced"
    build_timeout_s = 600  # nvcc on TileLang's CUTLASS-based templates: 3-8 s per kernel on a shared 2-core box
    jit_cache = ".tilelang"  # TILELANG_CACHE_DIR in the child's home: <version>/cuda-binaries/<key>/kernel.cubin
    forbidden = TORCH_COMPUTE_FORBIDDEN + (
        (r"\bcutlass\b", "CUTLASS / CuTe is another language here (cutedsl)"),
        # TileLang can wrap hand-written CUDA C++ as a kernel or call into it: that is the cuda_ptx language here
        (r"\b(CUDASourceCodeKernel|import_source|call_extern)\b",
         "CUDA C++ source inside TileLang is another language here (cuda_ptx): write the kernel in TileLang"),
        (r"execution_backend\s*=\s*['\"]cutedsl['\"]|TILELANG_EXECUTION_BACKEND",
         "TileLang's CuTe DSL execution backend is another language here (cutedsl)"),
        (r"TILELANG_DISABLE_CACHE|TILELANG_CACHE_DIR",
         "TileLang's kernel cache must stay where the harness put it (the judge finds the candidate's kernels there)"),
    )

    @property
    def folder(self) -> Path:
        return Path(__file__).resolve().parent  # prompt.md and this code: an installed package, not backends/

    def child_env(self, home: Path) -> dict[str, str]:
        # its JIT's cache (kernels, host libraries, cubins) in the child's own home; no banner per compiled kernel
        return {"TILELANG_CACHE_DIR": str(home / self.jit_cache), "TILELANG_PRINT_ON_COMPILATION": "0"}

    def seed_cache(self, build: BuildResult) -> Path | None:
        # Not seeded: the build's host libraries (executable.so) were linked on the build machine, against its
        # python and tvm-ffi; the runner's TileLang compiles its own (nvcc on the GPU machine) on the first call.
        return None


BACKEND = TileLangBackend()
