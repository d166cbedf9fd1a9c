"""cutedsl: a Python module written with CuTe DSL (nvidia-cutlass-dsl) whose entry point compiles its
@cute.jit host function once with cute.compile and calls the compiled object.

Building needs no GPU: static_build.py runs the entry point in a sandboxed child with cute.compile
redirected to a static build for the target ('--gpu-arch sm_90a|sm_100a --keep-ptx --keep-cubin'), and
CPU tensors presented to the DSL as device tensors (see NOTES.md for the patch points and their limits).
"""

from __future__ import annotations

import json
from pathlib import Path

from xlang.backend import PythonModuleBackend


class CuteDslBackend(PythonModuleBackend):
    name = "cutedsl"
    title = "CuTe DSL"
    rank = 30
    color = "#3f9b5a"
    distributions = ("torch", "nvidia-cutlass-dsl")
    static_build = "backends.cutedsl.backend"
    static_build_what = "import and entry point with cute.compile redirected"
    kernels_on_disk = False  # CuTe DSL keeps its JIT output in memory: a runtime kernel's name alone decides


def report(result: dict) -> dict:
    """build_static's result in the static-build protocol (xlang.backend.PythonModuleBackend)."""
    if not result["ok"]:
        where = f"\n(at {result['where']})" if result.get("where") else ""
        return {"ok": False, "error": f"{result['error_kind']}: {result['error']}{where}", "kernels": []}
    kernels = []
    for fn in result["compiled"]:
        # One host function may launch several kernels, all in its one cubin: each kernel is its own entry (the
        # judge accepts a CuTe DSL kernel at run time only under a name its build compiled).
        names, cubins = fn.get("kernels") or [fn["name"]], fn["cubin"]
        for i, name in enumerate(names if cubins else []):
            kernels.append({"name": name, "cubin": cubins[i] if len(cubins) == len(names) else cubins[0],
                            "ptx": fn["ptx"], "meta": {"host_function": fn["name"], "kernels": fn.get("kernels"),
                                                       "compile_s": fn.get("compile_s")}})
    return {"ok": True, "error": None, "kernels": kernels, "versions": {}}


def main(argv: list[str]) -> int:
    """Child process: static build of one candidate, reported in the static-build protocol."""
    from xlang.archs import get_arch
    from xlang.candidate import entry_arguments
    from xlang.resources import import_module
    from xlang.task import get_task

    source, task_name, arch_name, shape_json, out_dir = argv
    task, arch, shape = get_task(task_name), get_arch(arch_name), json.loads(shape_json)
    static_build = import_module("backends.cutedsl.static_build")
    result = static_build.build_static(source, lambda: entry_arguments(task, shape, "cpu"), arch.sm, out_dir)
    (Path(out_dir) / "static_build.json").write_text(json.dumps(report(result)))
    return 0


BACKEND = CuteDslBackend()
