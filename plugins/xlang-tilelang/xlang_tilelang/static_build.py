"""Build a TileLang candidate for an explicit architecture on a machine with no GPU and no driver.

Runs in a jailed child (xlang.backend.run_build_child): HOME and OUT_DIR are its own fresh folder, and
TILELANG_CACHE_DIR (TileLangBackend.child_env) points TileLang's cache inside it. The candidate's entry point is
called with CPU tensors of the task's shape, with two patches (tilelang 0.1.15):
  * tilelang.backend.module.create_backend_context: every compile (tilelang.compile, @tilelang.jit, lazy or eager,
    the autotuner) resolves its target there; the target becomes {"kind": "cuda", "arch": <the arch's sm>}
    whatever the candidate passed ("auto" would look for a GPU). Its execution backend is kept.
  * tilelang.jit.kernel.JITKernel.__call__: a compiled kernel's call is counted and returns placeholder outputs
    (CPU tensors of its out_idx parameters' static shapes) instead of launching.
Every compile writes <cache>/<version>/cuda-binaries/<key>/kernel.cubin (nvcc's output, the bytes the runtime loads
later); the report names each of those cubins with the kernels cuobjdump finds in it. TileLang keeps no PTX (nvcc
compiles straight to a cubin), so the report gives none and the census reads the SASS alone.

Known limits: a candidate that calls a kernel's adapter or torch_function directly (not the kernel object) launches
for real and fails here with TileLang's own error; host code that queries the GPU (torch.cuda.get_device_properties
is answered with the target's figures) beyond that fails as on any machine without one.

Usage (child): static_build SOURCE TASK ARCH SHAPE_JSON OUT_DIR  -> OUT_DIR/static_build.json, in the static-build
protocol of xlang.python_backend.PythonModuleBackend.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from types import SimpleNamespace


def _fake_device_properties(arch):
    figures = arch.figures
    return SimpleNamespace(
        name=arch.title, major=arch.compute_capability // 10, minor=arch.compute_capability % 10,
        multi_processor_count=figures["sms"], total_memory=figures["memory_gib"] << 30,
        L2_cache_size=figures["l2_mib"] << 20, shared_memory_per_block_optin=figures["smem_per_block_kib"] * 1024,
    )


def _stub_torch_cuda(torch, arch) -> None:
    """Host code sizes grids from the device and asks for the current stream: answer as the target would."""
    class _Stream:
        cuda_stream = 0
        device = None

        def synchronize(self):
            pass

    torch.cuda.get_device_properties = lambda *a, **k: _fake_device_properties(arch)
    torch.cuda.current_device = lambda: 0
    torch.cuda.current_stream = lambda *a, **k: _Stream()
    torch.cuda.synchronize = lambda *a, **k: None


def _placeholder_outputs(kernel, torch):
    """What a lazy kernel with out_idx returns: CPU tensors of its output parameters (static shapes only)."""
    out_idx = kernel.out_idx
    if out_idx is None:
        return None
    idx = [out_idx] if isinstance(out_idx, int) else list(out_idx)
    outs = []
    for i in idx:
        param = kernel.params[i]
        try:
            shape = [int(s) for s in param.shape]
            outs.append(torch.empty(shape, dtype=param.torch_dtype()))
        except (TypeError, ValueError, AttributeError):
            outs.append(None)  # a dynamic dimension: no size to allocate without the launch's arguments
    return outs[0] if len(outs) == 1 else outs


def _device_functions(kernel) -> list[str]:
    """The device kernels' names of one compiled program (their global symbols), best effort."""
    try:
        mod = kernel.artifact.device_mod
        return sorted(str(gv.name_hint) for gv in mod.functions)
    except AttributeError:
        return []


def error_text(e: BaseException, source: str) -> str:
    """TileLang's (TVM's) message with the candidate's own frames; C++ frames of TVM's traceback dropped."""
    from xlang.candidate import candidate_trace

    text = candidate_trace(e, {source})
    keep = [ln for ln in text.splitlines() if not ln.lstrip().startswith(("File \"<unknown>\"", "File \"/project/"))]
    return "\n".join(keep).replace(source, "candidate.py")


def build(source: str, task_name: str, arch_name: str, shape: dict, out_dir: Path) -> dict:
    import torch

    from xlang.archs import get_arch
    from xlang.candidate import entry_arguments, load_module
    from xlang.census import disassemble
    from xlang.task import get_task

    arch, task = get_arch(arch_name), get_task(task_name)
    cache = Path(os.environ["TILELANG_CACHE_DIR"])  # TileLangBackend.child_env: inside out_dir
    start = time.monotonic()
    import tilelang
    from tilelang.backend import module as backend_module
    from tilelang.jit.kernel import JITKernel
    import_s = time.monotonic() - start

    target = {"kind": "cuda", "arch": arch.sm}
    original_context = backend_module.create_backend_context

    def forced_context(_target, target_host=None, *args, **kwargs):
        return original_context(target, target_host, *args, **kwargs)

    compiled: list = []  # every JITKernel made (an autotuner's configs too), with its calls
    original_init, original_call = JITKernel.__init__, JITKernel.__call__

    def recording_init(self, *args, **kwargs):
        original_init(self, *args, **kwargs)
        compiled.append({"kernel": self, "calls": 0})

    def recording_call(self, *args, **kwargs):
        for entry in compiled:
            if entry["kernel"] is self:
                entry["calls"] += 1
        return _placeholder_outputs(self, torch)

    backend_module.create_backend_context = forced_context
    JITKernel.__init__, JITKernel.__call__ = recording_init, recording_call
    _stub_torch_cuda(torch, arch)
    try:
        module = load_module(source)
        entry = getattr(module, "xlang_entry", None)
        if entry is None:
            return {"ok": False, "error": f"no entry point: define {task.contract.python_signature()}", "kernels": []}
        entry(*entry_arguments(task, shape, device="cpu"))
    except Exception as e:  # noqa: BLE001 - the candidate's or TileLang's failure, reported to the model
        return {"ok": False, "error": error_text(e, source), "kernels": []}
    finally:
        backend_module.create_backend_context = original_context
        JITKernel.__init__, JITKernel.__call__ = original_init, original_call

    by_function = {name: entry for entry in compiled for name in _device_functions(entry["kernel"])}
    kernels = []
    for cubin in sorted(cache.glob("*/cuda-binaries/*/kernel.cubin")):
        for name in disassemble(cubin):
            entry = by_function.get(name)
            meta = {"cache_key": cubin.parent.name, "target": arch.sm}
            if entry is not None:
                k = entry["kernel"]
                meta.update(calls=entry["calls"], execution_backend=str(k.execution_backend),
                            program=str(k.prim_func.attrs.get("global_symbol", "")) if k.prim_func.attrs else "")
            kernels.append({"name": name, "cubin": str(cubin), "ptx": None, "meta": meta})
    versions = {"tilelang": tilelang.__version__}
    if not kernels and compiled:
        return {"ok": False, "error": "TileLang compiled programs but left no cubin in its cache (a fatbin target, "
                                      "or its cache disabled?): the judge finds TileLang kernels only there",
                "kernels": [], "versions": versions}
    return {"ok": True, "error": None, "kernels": kernels, "versions": versions,
            "import_s": round(import_s, 2), "total_s": round(time.monotonic() - start, 2)}


def main(argv: list[str]) -> int:
    source, task_name, arch_name, shape_json, out_dir = argv
    out = Path(out_dir)
    result = build(source, task_name, arch_name, json.loads(shape_json), out)
    (out / "static_build.json").write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
