"""triton: a Python module whose entry point launches @triton.jit kernels.

Building needs no GPU: static_build.py runs the entry point in a sandboxed child against a recording
driver for the target architecture, so each launched kernel is compiled by Triton itself for sm_90a or
sm_100a (Triton picks the 'a' variant for 9.0 and 10.0) and its cubin and PTX are kept.
"""

from __future__ import annotations

from pathlib import Path

from xlang.backend import TORCH_COMPUTE_FORBIDDEN
from xlang.python_backend import PythonModuleBackend


class TritonBackend(PythonModuleBackend):
    name = "triton"
    title = "Triton"
    rank = 10
    color = "#3b6fb6"
    distributions = ("torch", "triton")
    static_build = "backends.triton.static_build"
    fingerprint_packages = (("triton", "triton"),)
    jit_cache = ".triton"  # its JIT's cubins at run time (TRITON_CACHE_DIR in the jail, child_env)
    # Triton runs the ptxas / cuobjdump / nvdisasm these name instead of its bundled ones, when they are set.
    tool_path_variables = ("TRITON_PTXAS_PATH", "TRITON_CUOBJDUMP_PATH", "TRITON_NVDISASM_PATH")
    static_build_what = "import and entry point with the recording driver"
    forbidden = TORCH_COMPUTE_FORBIDDEN + (
        (r"\bcutlass\b", "CUTLASS / CuTe is another language here (cutedsl)"),
    )

    def child_env(self, home: Path) -> dict[str, str]:
        return {"TRITON_CACHE_DIR": str(home / self.jit_cache)}


BACKEND = TritonBackend()
