"""gluon: a Python module whose entry point launches @gluon.jit kernels (triton.experimental.gluon, Triton 3.6).

Gluon is Triton's lower-level tile language: layouts, shared and tensor memory, TMA, mbarriers, wgmma and tcgen05
are explicit. Its kernels are JITFunction subclasses compiled by Triton's own compiler, so building needs no GPU
and reuses Triton's recording driver (backends/triton/static_build.py) unchanged; at run time the JIT writes its
cubins into the candidate's private Triton cache, where the judge finds them, exactly as for Triton.
"""

from __future__ import annotations

from pathlib import Path

from xlang.backend import TORCH_COMPUTE_FORBIDDEN
from xlang.python_backend import PythonModuleBackend


class GluonBackend(PythonModuleBackend):
    name = "gluon"
    title = "Gluon"
    rank = 15
    color = "#8e44ad"
    distributions = ("torch", "triton")
    static_build = "backends.gluon.static_build"
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


BACKEND = GluonBackend()
