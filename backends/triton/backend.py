"""triton: a Python module whose entry point launches @triton.jit kernels.

Building needs no GPU: static_build.py runs the entry point in a sandboxed child against a recording
driver for the target architecture, so each launched kernel is compiled by Triton itself for sm_90a or
sm_100a (Triton picks the 'a' variant for 9.0 and 10.0) and its cubin and PTX are kept.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from xlang.backend import Backend, BuildResult, KernelImage, trim_log
from xlang.sandbox import python_child

BUILD_TIMEOUT_S = 300


class TritonBackend(Backend):
    name = "triton"
    title = "Triton"
    suffix = ".py"
    fences = ("python", "py")
    forbidden = (
        (r"\btorch\.(matmul|mm|bmm|addmm|baddbmm|einsum|tensordot|inner|outer|linalg)\b",
         "torch compute calls are not allowed: the result must come from the candidate's own kernels"),
        (r"\.(matmul|mm|bmm)\(", "matrix products through torch are not allowed"),
        (r"\b(scaled_dot_product_attention|flash_attn|torch\.nn\.functional|F\.softmax|torch\.softmax)\b",
         "torch / library attention or softmax is not allowed"),
        (r"\b(cublas|cudnn|cutlass)\b", "vendor libraries are not allowed"),
    )

    def compile(self, source_path: Path, task, arch, shape, workdir: Path) -> BuildResult:
        result = BuildResult(False, self.name, task.name, arch.name, shape, str(workdir))
        cache = Path(os.environ.get("XLANG_CACHE", Path.home() / ".cache" / "xlang")) / "triton"
        child = python_child(
            "backends.triton.static_build",
            [str(source_path), task.name, arch.name, json.dumps(shape), str(workdir)],
            timeout=BUILD_TIMEOUT_S, cwd=workdir, env={"TRITON_CACHE_DIR": str(cache)},
        )
        report = workdir / "static_build.json"
        if child.timed_out:
            result.error = f"the build (import and entry point with the recording driver) exceeded {BUILD_TIMEOUT_S} s"
        elif not report.is_file():
            result.error = "the build process died: " + trim_log(child.stderr or child.stdout or
                                                                  f"exit code {child.returncode}")
        else:
            data = json.loads(report.read_text())
            result.ok = data["ok"]
            result.error = None if data["ok"] else trim_log(data["error"])
            result.kernels = [KernelImage(**k) for k in data.get("kernels", [])]
            result.log = trim_log(child.stdout)
            result.load_path = str(source_path)
        return result

    def load_entry(self, build: BuildResult):
        from xlang.candidate import load_module

        return load_module(build.load_path).xlang_entry


BACKEND = TritonBackend()
