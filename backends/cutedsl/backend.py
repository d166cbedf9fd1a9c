"""cutedsl: a Python module written with CuTe DSL (nvidia-cutlass-dsl) whose entry point compiles its
@cute.jit host function once with cute.compile and calls the compiled object.

Building needs no GPU: static_build.py runs the entry point in a sandboxed child with cute.compile
redirected to a static build for the target ('--gpu-arch sm_90a|sm_100a --keep-ptx --keep-cubin'), and
CPU tensors presented to the DSL as device tensors (see NOTES.md for the patch points and their limits).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from xlang.backend import Backend, BuildResult, KernelImage, trim_log
from xlang.sandbox import python_child

BUILD_TIMEOUT_S = 300


class CuteDslBackend(Backend):
    name = "cutedsl"
    title = "CuTe DSL"
    suffix = ".py"
    fences = ("python", "py")
    forbidden = (
        (r"\btorch\.(matmul|mm|bmm|addmm|baddbmm|einsum|tensordot|linalg)\b",
         "torch compute calls are not allowed: the result must come from the candidate's own kernels"),
        (r"\.(matmul|mm|bmm)\(", "matrix products through torch are not allowed"),
        (r"\b(scaled_dot_product_attention|flash_attn|torch\.nn\.functional|F\.softmax|torch\.softmax)\b",
         "torch / library attention or softmax is not allowed"),
        (r"\b(cublas|cudnn)\b", "vendor libraries are not allowed"),
    )

    def compile(self, source_path: Path, task, arch, shape, workdir: Path) -> BuildResult:
        result = BuildResult(False, self.name, task.name, arch.name, shape, str(workdir))
        cache = Path(os.environ.get("XLANG_CACHE", Path.home() / ".cache" / "xlang")) / "cute"
        child = python_child("backends.cutedsl.backend",
                             [str(source_path), task.name, arch.name, json.dumps(shape), str(workdir)],
                             timeout=BUILD_TIMEOUT_S, cwd=workdir, env={"CUTE_DSL_CACHE_DIR": str(cache)})
        report = workdir / "static_build.json"
        if child.timed_out:
            result.error = f"the build (import and entry point with cute.compile redirected) exceeded {BUILD_TIMEOUT_S} s"
            return result
        if not report.is_file():
            result.error = "the build process died: " + trim_log(child.stderr or child.stdout or
                                                                  f"exit code {child.returncode}")
            return result
        data = json.loads(report.read_text())
        if not data["ok"]:
            where = f"\n(at {data['where']})" if data.get("where") else ""
            result.error = trim_log(f"{data['error_kind']}: {data['error']}{where}")
            return result
        for fn in data["compiled"]:
            for i, cubin in enumerate(fn["cubin"]):
                kernels = fn.get("kernels") or [fn["name"]]
                result.kernels.append(KernelImage(kernels[i] if i < len(kernels) else fn["name"], cubin, fn["ptx"],
                                                  {"host_function": fn["name"], "kernels": fn.get("kernels"),
                                                   "compile_s": fn.get("compile_s")}))
        result.ok, result.load_path, result.log = True, str(source_path), trim_log(child.stdout)
        return result

    def load_entry(self, build: BuildResult):
        from xlang.candidate import load_module

        return load_module(build.load_path).xlang_entry


def main(argv: list[str]) -> int:
    """Child process: static build of one candidate (see CuteDslBackend.compile)."""
    from xlang.archs import get_arch
    from xlang.candidate import entry_arguments
    from xlang.resources import import_module
    from xlang.task import get_task

    source, task_name, arch_name, shape_json, out_dir = argv
    task, arch, shape = get_task(task_name), get_arch(arch_name), json.loads(shape_json)
    static_build = import_module("backends.cutedsl.static_build")
    result = static_build.build_static(source, lambda: entry_arguments(task, shape, "cpu"), arch.sm, out_dir)
    (Path(out_dir) / "static_build.json").write_text(json.dumps(result))
    return 0


BACKEND = CuteDslBackend()
