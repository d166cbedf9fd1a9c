"""Build a CuTe DSL candidate to PTX + cubin on a machine with no GPU.

A candidate is a Python file exposing ``xlang_entry(A, B, C, M, N, K)`` that
wraps torch tensors with ``cutlass.cute.runtime.from_dlpack``, calls
``cute.compile(...)`` (once, cached) and then calls the compiled object.

``build_static`` runs that exact code path on CPU tensors with three patches:

1. ``CompileCallable._compile`` (what ``cute.compile(...)`` and
   ``cute.compile[...](...)`` end in) gets our options appended:
   ``--gpu-arch <arch> --keep-ptx --keep-cubin --dump-dir <dir>``; the PTX and
   cubin are saved and timed, and a no-op object is returned in place of the
   compiled function (so the candidate's launch does nothing).
2. ``cutlass.cute.runtime._Tensor.__init__`` (behind every ``from_dlpack``):
   a CPU torch tensor is presented through DLPack as a CUDA tensor, so the
   traced IR sees a ``gmem`` pointer exactly as on a GPU (a plain CPU tensor
   would give ``generic``, which changes kernel names and may change code).
   Shape, strides, dtype and the candidate's ``mark_*_dynamic`` calls are kept.
3. ``BaseDSL._func`` (the direct ``@cute.jit`` call path) raises a clear error
   when a ``@cute.jit`` function is called outside ``cute.compile``: it would
   compile for the default arch and then need a driver to run.
   ``torch.cuda.current_stream/default_stream/synchronize`` are also stubbed
   so candidates that ask torch for the stream still trace.

Usage (in a child process; patches are process-global and not undone)::

    from backends.cutedsl.static_build import build_static, gemm_args_factory
    res = build_static("cand.py", gemm_args_factory(4096, 4096, 4096), "sm_90a", "out/")
    # res["ok"], res["compiled"][i]["ptx"], ["cubin"], ["compile_s"], res["error"]

CLI: ``python -m backends.cutedsl.static_build CAND.py --arch sm_90a --out DIR
[--mnk 256,256,256]`` prints the result as JSON (exit 0 if ok, 1 if not).

Nothing heavy is imported at module import time; cutlass and torch are
imported inside ``build_static``.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
import traceback

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
MAX_ERROR_CHARS = 4000

# Tokens of cute.compile's option string that we own.
_OUR_FLAGS = ("--gpu-arch", "--dump-dir")
_OUR_SWITCHES = ("--keep-ptx", "--keep-cubin")


class StaticBuildError(Exception):
    """Raised inside the candidate when it does something a static build cannot do."""


def normalize_arch(arch: str) -> str:
    """'90a', 'sm90a', 'sm_90a', 'SM_100A' -> 'sm_90a' / 'sm_100a'."""
    a = arch.strip().lower()
    if a.startswith("sm_"):
        a = a[3:]
    elif a.startswith("sm"):
        a = a[2:]
    if not re.fullmatch(r"\d{2,3}[af]?", a):
        raise ValueError(f"bad arch {arch!r}; expected e.g. sm_90a or sm_100a")
    return "sm_" + a


def gemm_args_factory(M: int, N: int, K: int, dtype: str = "bfloat16"):
    """Factory for the GEMM contract: A [M,K], B [N,K], C [M,N] on CPU, plus M, N, K."""

    def make():
        import torch

        dt = getattr(torch, dtype)
        A = torch.empty(M, K, dtype=dt)
        B = torch.empty(N, K, dtype=dt)
        C = torch.empty(M, N, dtype=dt)
        return (A, B, C, M, N, K)

    return make


def _clean(msg: str) -> str:
    msg = _ANSI.sub("", msg).strip()
    # The DSL appends a GPU/driver diagnostic block that is noise on a CPU box.
    for marker in ("\U0001f4ca GPU Information:", "GPU Information:"):
        i = msg.find(marker)
        if i > 0:
            msg = msg[:i].rstrip()
    if len(msg) > MAX_ERROR_CHARS:
        half = MAX_ERROR_CHARS // 2
        msg = msg[:half] + "\n... [trimmed] ...\n" + msg[-half:]
    return msg


def _candidate_frame(tb, source_path: str):
    """Innermost traceback frame that lies in the candidate file, as 'file:line in func'."""
    src = os.path.realpath(source_path)
    where = None
    for fr in traceback.extract_tb(tb):
        if os.path.realpath(fr.filename) == src:
            where = f"{os.path.basename(fr.filename)}:{fr.lineno} in {fr.name}: {(fr.line or '').strip()}"
    return where


def _with_gpu_view(tensor):
    """Wrap a CPU torch tensor so DLPack reports it as a CUDA (device 0) tensor."""
    import ctypes

    import torch.utils.dlpack

    class _CudaDLPackView:
        def __init__(self, t):
            self._t = t

        def __dlpack_device__(self):
            return (2, 0)  # kDLCUDA, device 0

        def __dlpack__(self, stream=None, **_):
            cap = torch.utils.dlpack.to_dlpack(self._t)  # legacy "dltensor" capsule
            get = ctypes.pythonapi.PyCapsule_GetPointer
            get.restype = ctypes.c_void_p
            get.argtypes = [ctypes.py_object, ctypes.c_char_p]
            ptr = get(cap, b"dltensor")
            # DLManagedTensor starts with DLTensor {void* data; DLDevice {int32 type; int32 id}; ...}
            ctypes.c_int32.from_address(ptr + 8).value = 2
            ctypes.c_int32.from_address(ptr + 12).value = 0
            return cap

    return _CudaDLPackView(tensor)


class _NoopCompiled:
    """Stands in for the compiled function: calling it launches nothing."""

    def __init__(self, record):
        self.xlang_record = record

    def __call__(self, *args, **kwargs):
        return None

    def __getattr__(self, name):  # e.g. .set_name(), .export() -> harmless no-ops
        if name.startswith("__"):
            raise AttributeError(name)
        return lambda *a, **k: None


def _install_patches(arch: str, out_dir: str, records: list, state: dict):
    import cutlass.cute.runtime as cute_runtime
    from cutlass.base_dsl import compiler as dsl_compiler
    from cutlass.base_dsl import dsl as dsl_base

    orig_compile = dsl_compiler.CompileCallable._compile
    orig_tensor_init = cute_runtime._Tensor.__init__
    orig_func = dsl_base.BaseDSL._func

    def patched_compile(self, func, *args, **kwargs):
        idx = len(records)
        name = getattr(func, "__qualname__", None) or getattr(func, "__name__", "jit_fn")
        dump = os.path.join(out_dir, f"{idx:02d}_{_safe(name)}")
        os.makedirs(dump, exist_ok=True)
        ours = f"--gpu-arch {arch} --keep-ptx --keep-cubin --dump-dir {dump}"
        opts = kwargs.get("options")
        if isinstance(opts, str) and opts.strip():
            opts = _strip_our_flags(opts) + " " + ours
            kwargs["options"] = opts
            callee = self
        else:
            kwargs.pop("options", None)
            # Bracket form cute.compile[Opt, ...] keeps its options in the callable:
            # copy them and set ours on top.
            import copy

            callee = dsl_compiler.CompileCallable()
            callee._compile_options = copy.deepcopy(self._compile_options)
            o = callee._compile_options.options
            o[dsl_compiler.GPUArch] = dsl_compiler.GPUArch(arch)
            o[dsl_compiler.KeepPTX] = dsl_compiler.KeepPTX(True)
            o[dsl_compiler.KeepCUBIN] = dsl_compiler.KeepCUBIN(True)
            o[dsl_compiler.DumpDir] = dsl_compiler.DumpDir(dump)
            opts = f"(bracket options) + {ours}"
        rec = {"name": name, "options": opts, "dump_dir": dump}
        state["in_compile"] += 1
        t0 = time.perf_counter()
        try:
            compiled = orig_compile(callee, func, *args, **kwargs)
        finally:
            state["in_compile"] -= 1
        rec["compile_s"] = round(time.perf_counter() - t0, 3)
        ptx = getattr(compiled, "__ptx__", None)
        cubin = getattr(compiled, "__cubin__", None)
        if isinstance(ptx, str) and ptx.lstrip().startswith(("//", ".version")):
            p = os.path.join(out_dir, f"{idx:02d}_{_safe(name)}.{arch}.ptx")
            with open(p, "w") as f:
                f.write(ptx)
            rec["ptx"] = p
            rec["kernels"] = re.findall(r"\.entry\s+([A-Za-z_$][\w$]*)", ptx)
        else:
            rec["ptx"] = None
            rec["kernels"] = []
        rec["cubin"] = []
        if isinstance(cubin, (bytes, bytearray)) and cubin[:4] == b"\x7fELF":
            p = os.path.join(out_dir, f"{idx:02d}_{_safe(name)}.{arch}.cubin")
            with open(p, "wb") as f:
                f.write(cubin)
            rec["cubin"].append(p)
        records.append(rec)
        return _NoopCompiled(rec)

    def patched_tensor_init(self, tensor, *args, **kwargs):
        if _is_cpu_torch_tensor(tensor):
            tensor = _with_gpu_view(tensor)
        return orig_tensor_init(self, tensor, *args, **kwargs)

    def patched_func(self, funcBody, *args, **kwargs):
        from cutlass._mlir import ir

        top_level = ir.Context.current is None
        if top_level and state["in_compile"] == 0 and not kwargs.get("compile_only"):
            raise StaticBuildError(
                f"@cute.jit function '{getattr(funcBody, '__name__', '?')}' was called directly. "
                "Compile it with cute.compile(fn, *args) once and call the compiled object instead."
            )
        return orig_func(self, funcBody, *args, **kwargs)

    dsl_compiler.CompileCallable._compile = patched_compile
    cute_runtime._Tensor.__init__ = patched_tensor_init
    dsl_base.BaseDSL._func = patched_func
    _stub_torch_cuda()


def _stub_torch_cuda():
    try:
        import torch
    except ImportError:
        return
    if torch.cuda.is_available():
        return

    class _Stream:
        cuda_stream = 0
        device = None

        def synchronize(self):
            pass

        def wait_stream(self, *_):
            pass

    torch.cuda.current_stream = lambda *a, **k: _Stream()
    torch.cuda.default_stream = lambda *a, **k: _Stream()
    torch.cuda.synchronize = lambda *a, **k: None


def _is_cpu_torch_tensor(x) -> bool:
    mod = type(x).__module__ or ""
    if not mod.startswith("torch"):
        return False
    dev = getattr(x, "device", None)
    return getattr(dev, "type", None) == "cpu"


def _strip_our_flags(opts: str) -> str:
    toks = opts.split()
    out, i = [], 0
    while i < len(toks):
        t = toks[i]
        if t in _OUR_FLAGS:
            i += 2
            continue
        if any(t.startswith(f + "=") for f in _OUR_FLAGS) or t in _OUR_SWITCHES:
            i += 1
            continue
        out.append(t)
        i += 1
    return " ".join(out)


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)[:80]


def build_static(source_path: str, entry_args_factory, arch_sm: str, out_dir: str,
                 entry_name: str = "xlang_entry") -> dict:
    """Import the candidate at ``source_path``, call ``entry_name(*entry_args_factory())``
    with ``cute.compile`` redirected to a static build for ``arch_sm``, and return::

        {"ok": bool, "arch": "sm_90a", "out_dir": str, "total_s": float,
         "compiled": [{"name", "kernels", "ptx", "cubin": [paths], "compile_s",
                       "options", "dump_dir"}, ...],
         "error": None | str,           # trimmed compiler/candidate message
         "error_kind": None | "bad_arch" | "import_error" | "no_entry" | "args_error"
                       | "compile_error" | "candidate_error" | "direct_jit_call"
                       | "nothing_compiled" | "no_artifacts",
         "where": None | "cand.py:LINE in FUNC: source line"}

    ``compiled`` lists every ``cute.compile`` call in order (one entry per
    compiled @cute.jit host function; a host function can launch several
    kernels, listed under "kernels"). Call once per process: the patches are
    global. ``CUTE_DSL_CACHE_DIR`` defaults to ``<out_dir>/.cute_cache``.
    """
    t_start = time.perf_counter()
    out_dir = os.path.abspath(out_dir)
    os.makedirs(out_dir, exist_ok=True)
    res = {"ok": False, "arch": arch_sm, "out_dir": out_dir, "compiled": [],
           "error": None, "error_kind": None, "where": None, "total_s": 0.0}

    def fail(kind, msg, where=None):
        res["error_kind"], res["error"], res["where"] = kind, _clean(msg), where
        res["total_s"] = round(time.perf_counter() - t_start, 3)
        return res

    try:
        arch = normalize_arch(arch_sm)
    except ValueError as e:
        return fail("bad_arch", str(e))
    res["arch"] = arch
    os.environ.setdefault("CUTE_DSL_CACHE_DIR", os.path.join(out_dir, ".cute_cache"))
    os.environ["CUTE_DSL_ARCH"] = arch  # also covers any path that ignores options

    records: list = []
    state = {"in_compile": 0}
    _install_patches(arch, out_dir, records, state)
    res["compiled"] = records

    import importlib.util

    src = os.path.abspath(source_path)
    mod_name = "xlang_cutedsl_candidate_" + _safe(os.path.splitext(os.path.basename(src))[0])
    try:
        spec = importlib.util.spec_from_file_location(mod_name, src)
        module = importlib.util.module_from_spec(spec)
        sys.modules[mod_name] = module
        spec.loader.exec_module(module)
    except BaseException as e:  # noqa: BLE001 - report anything the import raises
        return fail("import_error", f"{type(e).__name__}: {e}", _candidate_frame(e.__traceback__, src))

    entry = getattr(module, entry_name, None)
    if not callable(entry):
        return fail("no_entry", f"{os.path.basename(src)} defines no callable {entry_name}(A, B, C, M, N, K)")

    try:
        args = tuple(entry_args_factory())
    except BaseException as e:  # noqa: BLE001
        return fail("args_error", f"argument factory failed: {type(e).__name__}: {e}")

    try:
        entry(*args)
    except StaticBuildError as e:
        return fail("direct_jit_call", str(e), _candidate_frame(e.__traceback__, src))
    except BaseException as e:  # noqa: BLE001
        where = _candidate_frame(e.__traceback__, src)
        kind = "compile_error" if state["in_compile"] or _is_dsl_error(e) else "candidate_error"
        state["in_compile"] = 0
        return fail(kind, f"{type(e).__name__}: {e}", where)

    if not records:
        return fail("nothing_compiled",
                    f"{entry_name} returned without calling cute.compile: nothing was built. "
                    "Wrap the torch tensors with cutlass.cute.runtime.from_dlpack, compile the "
                    "@cute.jit host function with cute.compile(...) and call the compiled object.")
    missing = [r["name"] for r in records if not r["ptx"] or not r["cubin"]]
    if missing:
        return fail("no_artifacts", f"cute.compile produced no PTX/cubin for: {', '.join(missing)}")
    res["ok"] = True
    res["total_s"] = round(time.perf_counter() - t_start, 3)
    return res


def _is_dsl_error(e: BaseException) -> bool:
    mod = type(e).__module__ or ""
    return mod.startswith("cutlass") or "DSL" in type(e).__name__


def _main(argv=None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("source")
    ap.add_argument("--arch", required=True, help="sm_90a or sm_100a")
    ap.add_argument("--out", required=True)
    ap.add_argument("--mnk", default="256,256,256")
    ap.add_argument("--dtype", default="bfloat16")
    a = ap.parse_args(argv)
    M, N, K = (int(x) for x in a.mnk.split(","))
    res = build_static(a.source, gemm_args_factory(M, N, K, a.dtype), a.arch, a.out)
    print(json.dumps(res, indent=2))
    return 0 if res["ok"] else 1


if __name__ == "__main__":
    sys.exit(_main())
