"""cutedsl: a Python module written with CuTe DSL (nvidia-cutlass-dsl) whose entry point compiles its
@cute.jit host function once with cute.compile and calls the compiled object.

Building needs no GPU: static_build.py runs the entry point in a sandboxed child with cute.compile
redirected to a static build for the target ('--gpu-arch sm_90a|sm_100a --keep-ptx --keep-cubin'), and
CPU tensors presented to the DSL as device tensors (see NOTES.md for the patch points and their limits).
"""

from __future__ import annotations

import json
from pathlib import Path

from xlang.python_backend import PythonModuleBackend


class CuteDslBackend(PythonModuleBackend):
    name = "cutedsl"
    title = "CuTe DSL"
    rank = 30
    color = "#3f9b5a"
    distributions = ("torch", "nvidia-cutlass-dsl")
    fingerprint_packages = (("nvidia-cutlass-dsl", "cutlass-dsl"),)
    static_build = "backends.cutedsl.backend"
    static_build_what = "import and entry point with cute.compile redirected"
    kernels_on_disk = False  # CuTe DSL keeps its JIT output in memory: a runtime kernel's name alone decides
    # Every kernel CuTe DSL compiles is named "kernel_" + "cutlass_" + the @cute.kernel function's name + its
    # static arguments (layouts, shapes: each drawn shape may give a new name) + a counter.
    jit_kernel_prefix = "kernel_cutlass_"

    def child_env(self, home: Path) -> dict[str, str]:
        return {"CUTE_DSL_CACHE_DIR": str(home / ".cute")}  # its JIT's cache (the child's own, never read back)


def kernel_functions(source: str) -> set[tuple[str, str | None]]:
    """(name, class) of each function the source decorates with @cute.kernel (or any decorator named kernel);
    class is the enclosing class's name for a method (None for a plain function)."""
    import ast

    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    classes = {id(f): c.name for c in ast.walk(tree) if isinstance(c, ast.ClassDef) for f in c.body}
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for d in node.decorator_list:
                d = d.func if isinstance(d, ast.Call) else d
                if (isinstance(d, ast.Attribute) and d.attr == "kernel") or (isinstance(d, ast.Name) and d.id == "kernel"):
                    found.add((node.name, classes.get(id(node))))
    return found


def _stem(kernel: str, functions) -> str | None:
    """The start of a kernel's name that the candidate's own source chose, when the kernel was made from one of
    its @cute.kernel functions: 'kernel_cutlass_<function>_', and for a method also the object it was called on
    ('<module><Class>_object_at_', how CuTe DSL prints `self`). The judge screens only the rest of a run-time
    name with this stem: the candidate's names ('gemm_kernel', 'HopperGemm') are no sign of a vendor."""
    import re

    prefix = CuteDslBackend.jit_kernel_prefix
    stems = []
    for name, cls in functions:
        head = f"{prefix}{name}_"
        if not kernel.startswith(head):
            continue
        if cls is None:
            stems.append(head)
        else:
            m = re.match(re.escape(head) + r"[A-Za-z0-9_]*?" + re.escape(cls) + "_object_at_", kernel)
            if m:
                stems.append(m.group(0))
    return max(stems, key=len) if stems else None


def report(result: dict, functions=()) -> dict:
    """build_static's result in the static-build protocol (xlang.python_backend.PythonModuleBackend); `functions`: the
    source's @cute.kernel function names (meta["stem"] of each kernel made from one)."""
    if not result["ok"]:
        where = f"\n(at {result['where']})" if result.get("where") else ""
        return {"ok": False, "error": f"{result['error_kind']}: {result['error']}{where}", "kernels": []}
    kernels = []
    for fn in result["compiled"]:
        # One host function may launch several kernels, all in its one cubin: each kernel is its own entry (the
        # judge accepts a CuTe DSL kernel at run time only under a name its build compiled).
        names, cubins = fn.get("kernels") or [fn["name"]], fn["cubin"]
        for i, name in enumerate(names if cubins else []):
            meta = {"host_function": fn["name"], "kernels": fn.get("kernels"), "compile_s": fn.get("compile_s")}
            stem = _stem(name, functions)
            if stem:
                meta["stem"] = stem
            kernels.append({"name": name, "cubin": cubins[i] if len(cubins) == len(names) else cubins[0],
                            "ptx": fn["ptx"], "meta": meta})
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
    functions = kernel_functions(Path(source).read_text(errors="replace"))
    (Path(out_dir) / "static_build.json").write_text(json.dumps(report(result, functions)))
    return 0


BACKEND = CuteDslBackend()
