"""Build a Triton candidate for an explicit architecture on a machine with no GPU and no driver.

Runs in a sandboxed child (xlang.sandbox). The candidate is an ordinary Python module whose entry point
launches @triton.jit kernels. We call that entry point with CPU tensors of the task's shape while Triton's
active driver is a recording driver for the target architecture: every kernel the entry point launches
goes through Triton's own binder and compile() (so the specialisation is the one a GPU run would get),
and the launch itself is recorded instead of executed. An autotuner's benchmark compiles each config.

Usage (child): static_build SOURCE TASK ARCH SHAPE_JSON OUT_DIR  -> OUT_DIR/static_build.json, in the static-build
protocol of xlang.python_backend.PythonModuleBackend. Gluon (@gluon.jit, a JITFunction subclass) goes through the same path.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace


class _RecordingLauncher:
    def __init__(self, src, metadata):
        self.launches = 0

    def __call__(self, *args, **kwargs):
        self.launches += 1


class _RecordingUtils:
    def __init__(self, arch):
        smem = arch.figures["smem_per_block_kib"] * 1024
        self.props = {"max_shared_mem": smem, "multiprocessor_count": arch.figures["sms"],
                      "max_num_regs": arch.figures["registers_per_sm"], "warpSize": 32,
                      "sm_clock_rate": 0, "mem_clock_rate": 0, "mem_bus_width": 0}

    def get_device_properties(self, device):
        return dict(self.props)

    def load_binary(self, name, kernel, shared, device):
        # (module, function, n_regs, n_spills, n_max_threads): placeholders, nothing is loaded.
        return (1, 1, 0, 0, 1024)


def _make_driver(arch):
    from triton.backends.compiler import GPUTarget
    from triton.backends.driver import DriverBase
    from triton.backends.nvidia.driver import ty_to_cpp

    class RecordingDriver(DriverBase):
        def __init__(self):
            self.utils = _RecordingUtils(arch)
            self.launcher_cls = _RecordingLauncher

        @staticmethod
        def is_active():
            return True

        def get_current_target(self):
            return GPUTarget("cuda", arch.compute_capability, 32)

        def get_current_device(self):
            return 0

        def set_current_device(self, device):
            pass

        def get_current_stream(self, device=None):
            return 0

        def get_active_torch_device(self):
            import torch
            return torch.device("cpu")

        def get_device_interface(self):
            import torch
            return torch.cuda

        def map_python_to_cpp_type(self, ty):
            return ty_to_cpp(ty)

        def get_benchmarker(self):
            # The autotuner "benchmarks" every config: calling it compiles that config; all tie.
            def bench(fn, quantiles=None, **kwargs):
                fn()
                return [1.0] * len(quantiles) if quantiles else 1.0
            return bench

        def get_empty_cache_for_benchmark(self):
            import torch
            return torch.empty(1, dtype=torch.int32)

        def clear_cache(self, cache):
            pass

    return RecordingDriver()


def _fake_device_properties(arch):
    figures = arch.figures
    return SimpleNamespace(
        name=arch.title, major=arch.compute_capability // 10, minor=arch.compute_capability % 10,
        multi_processor_count=figures["sms"], total_memory=figures["memory_gib"] << 30,
        L2_cache_size=figures["l2_mib"] << 20, shared_memory_per_block_optin=figures["smem_per_block_kib"] * 1024,
    )


def compile_message(error: BaseException) -> str:
    """A compile error with its causes: an error inside a function the kernel calls (a Gluon warp_specialize
    partition, a @jit helper) is raised again at the call site, and the reason is only in the chain's last
    link, so every link is shown, outermost first."""
    parts, seen = [], set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        text = str(error) if type(error).__name__ == "CompilationError" else f"{type(error).__name__}: {error}"
        if text and text not in parts:
            parts.append(text)
        error = error.__cause__ or (None if error.__suppress_context__ else error.__context__)
    return "\n\n".join(parts)


def build(source: str, task_name: str, arch_name: str, shape: dict, out_dir: Path) -> dict:
    import torch
    import triton
    from triton.runtime import driver
    from triton.runtime.jit import JITFunction

    from xlang.archs import get_arch
    from xlang.candidate import candidate_trace, entry_arguments, load_module
    from xlang.task import get_task

    arch, task = get_arch(arch_name), get_task(task_name)
    driver.set_active(_make_driver(arch))
    # Host code commonly sizes a persistent grid from the device: answer as the target would.
    torch.cuda.get_device_properties = lambda *a, **k: _fake_device_properties(arch)
    torch.cuda.current_device = lambda: 0

    compiled = {}
    original_run = JITFunction.run

    def recording_run(self, *args, **kwargs):
        kernel = original_run(self, *args, **kwargs)
        if kernel is not None:
            entry = compiled.setdefault(kernel.hash, {"kernel": kernel, "launches": 0, "grid": None})
            if not kwargs.get("warmup"):
                entry["launches"] += 1
                grid = kwargs.get("grid")
                entry["grid"] = repr(grid) if callable(grid) else list(grid) if grid is not None else None
        return kernel

    JITFunction.run = recording_run
    try:
        module = load_module(source)
        entry = getattr(module, "xlang_entry", None)
        if entry is None:
            return {"ok": False, "error": f"no entry point: define {task.contract.python_signature()}", "kernels": []}
        entry(*entry_arguments(task, shape, device="cpu"))
    except triton.CompilationError as e:
        return {"ok": False, "error": compile_message(e).replace(source, "candidate.py"), "kernels": []}
    except Exception as e:  # noqa: BLE001 - the candidate's own failure, reported to the model
        return {"ok": False, "error": candidate_trace(e, {source}), "kernels": []}
    finally:
        JITFunction.run = original_run

    kernels = []
    for i, (khash, info) in enumerate(compiled.items()):
        k = info["kernel"]
        stem = out_dir / f"k{i}_{k.name}"
        Path(f"{stem}.cubin").write_bytes(k.asm["cubin"])
        Path(f"{stem}.ptx").write_text(k.asm["ptx"])
        meta = {"num_warps": k.metadata.num_warps, "num_stages": k.metadata.num_stages,
                "shared_bytes": k.metadata.shared, "launches": info["launches"], "grid": info["grid"],
                "hash": khash}
        kernels.append({"name": k.name, "cubin": f"{stem}.cubin", "ptx": f"{stem}.ptx", "meta": meta})
    return {"ok": True, "error": None, "kernels": kernels, "versions": {"triton": triton.__version__}}


def main(argv: list[str]) -> int:
    source, task_name, arch_name, shape_json, out_dir = argv
    out = Path(out_dir)
    result = build(source, task_name, arch_name, json.loads(shape_json), out)
    (out / "static_build.json").write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
