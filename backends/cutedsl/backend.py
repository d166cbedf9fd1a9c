"""cutedsl: a Python module written with CuTe DSL (nvidia-cutlass-dsl) whose entry point compiles its
@cute.jit host function once with cute.compile and calls the compiled object.

Building needs no GPU: static_build.py runs the entry point in a sandboxed child with cute.compile
redirected to a static build for the target ('--gpu-arch sm_90a|sm_100a --keep-ptx --keep-cubin'), and
CPU tensors presented to the DSL as device tensors (see NOTES.md for the patch points and their limits).
"""

from __future__ import annotations

import json
from pathlib import Path

from xlang.backend import BuildResult, KernelImage, PythonModuleBackend, run_build_child, trim_log

BUILD_TIMEOUT_S = 300


class CuteDslBackend(PythonModuleBackend):
    name = "cutedsl"
    title = "CuTe DSL"
    def compile(self, source_path: Path, task, arch, shape, workdir: Path) -> BuildResult:
        result = BuildResult(False, self.name, task.name, arch.name, shape, str(workdir))
        data, result.error, stdout = run_build_child(
            "backends.cutedsl.backend", source_path, task, arch, shape, workdir,
            env={}, timeout_s=BUILD_TIMEOUT_S,
            what="import and entry point with cute.compile redirected")
        if data is None:
            return result
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
        result.ok, result.load_path, result.log = True, str(source_path), trim_log(stdout)
        return result



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
