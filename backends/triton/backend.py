"""triton: a Python module whose entry point launches @triton.jit kernels.

Building needs no GPU: static_build.py runs the entry point in a sandboxed child against a recording
driver for the target architecture, so each launched kernel is compiled by Triton itself for sm_90a or
sm_100a (Triton picks the 'a' variant for 9.0 and 10.0) and its cubin and PTX are kept.
"""

from __future__ import annotations

from pathlib import Path

from xlang.backend import (TORCH_COMPUTE_FORBIDDEN, BuildResult, KernelImage, PythonModuleBackend,
                           run_build_child, trim_log)

BUILD_TIMEOUT_S = 300


class TritonBackend(PythonModuleBackend):
    name = "triton"
    title = "Triton"
    forbidden = TORCH_COMPUTE_FORBIDDEN + (
        (r"\bcutlass\b", "CUTLASS / CuTe is another language here (cutedsl)"),
    )

    def compile(self, source_path: Path, task, arch, shape, workdir: Path) -> BuildResult:
        result = BuildResult(False, self.name, task.name, arch.name, shape, str(workdir))
        data, result.error, stdout = run_build_child(
            "backends.triton.static_build", source_path, task, arch, shape, workdir,
            env={}, timeout_s=BUILD_TIMEOUT_S,
            what="import and entry point with the recording driver")
        if data is not None:
            result.ok = data["ok"]
            result.error = None if data["ok"] else trim_log(data["error"])
            result.kernels = [KernelImage(**k) for k in data.get("kernels", [])]
            result.log = trim_log(stdout)
            result.load_path = str(source_path)
        return result


BACKEND = TritonBackend()
