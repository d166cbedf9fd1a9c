"""cuda_ptx: CUDA C++ with inline PTX, built by nvcc into a shared object the worker loads with ctypes.

The entry point is a C function (the task's contract rendered by Contract.c_signature) that launches the
candidate's kernels on the stream it is given. nvcc targets the arch-specific 'a' profile (sm_90a,
sm_100a): only those accept wgmma, setmaxnreg and tcgen05.
"""

from __future__ import annotations

import ctypes
import re
import shutil
import subprocess
from pathlib import Path

from xlang.backend import BUILD_TIMEOUT_MARK, CHILD_FOLDER, Backend, BuildResult, KernelImage, _build_limit, trim_log
from xlang.census import disassemble
from xlang.children import run_child
from xlang.sandbox import Jail, child_env, child_limits, kill_uid, limit_note, size_text
from xlang.task import ENTRY_POINT, peer_library_folders
from xlang.toolchain import require_tool
from xlang.untrusted import read_untrusted_below, remove_untrusted_tree, replace_file, write_new

# No import of xlang.agent here: the jailed runner loads this module without the agent package (sandbox._RUNNER_SKIP).
_FRAME_LINE = re.compile(r"\s+\d+ bytes stack frame, \d+ bytes spill stores, \d+ bytes spill loads")
_PTXAS_V_CHARS = 64000  # of ptxas -v's report kept in the build record (about 250 kernels)
_SO_LIMIT = 512 << 20  # of the shared object the judge copies out of the build's folder (the experts': 1-3 MB)
# How nvcc says that a tool it ran died (cicc, ptxas, the host compiler: a memory limit's kill or abort)
_KILLED = re.compile(r"died due to signal|died with status|terminated with signal|out of memory|bad_alloc|"
                     r"Cannot allocate memory|Killed|memory exhausted|File size limit exceeded|File too large", re.I)


def _limits_text() -> str:
    """The build's limits, as a failed build's error names them (a candidate that blew one sees which)."""
    lim = child_limits(gpu=False, own_uid=True)
    parts = [f"memory {size_text(lim['--as'])} per process" if "--as" in lim else "",
             f"files {size_text(lim['--fsize'])} each" if "--fsize" in lim else ""]
    return "the build's limits: " + ", ".join(p for p in parts if p)


def _fresh_folder(path: Path, mode: int) -> Path:
    """A new, empty folder of the judge's at path: what a rebuild in a kept folder left there goes first (never
    followed through a link, and without recursion: an earlier build's child folder is the candidate's)."""
    remove_untrusted_tree(path)
    path.mkdir(mode=mode)
    return path


class CudaPtxBackend(Backend):
    name = "cuda_ptx"
    title = "CUDA C++ with inline PTX"
    rank = 20
    color = "#d9822b"
    tools = ("nvcc",)
    suffix = ".cu"
    fences = ("cuda", "cu", "cpp", "c++", "c")
    forbidden = (
        (r"\bcublas\w*", "cuBLAS calls are not allowed: the candidate must compute with its own kernels"),
        (r"\bcudnn\w*", "cuDNN calls are not allowed: the candidate must compute with its own kernels"),
        (r"#\s*include\s*[<\"](cutlass|cute)/", "CUTLASS / CuTe C++ headers are another language (use cutedsl)"),
        (r"#\s*include\s*[<\"](flashinfer|deep_gemm)/", "FlashInfer / DeepGEMM are the baselines, not the answer"),
        (r"#\s*include\s*[<\"](torch|ATen|c10)/", "torch / ATen are not available to a cuda_ptx candidate"),
    )

    # Host round trips (issue 40: evidence in the build record, never a failure by itself).
    host_patterns = (
        (r"\bcudaMemcpyDeviceToHost\b", "copies device memory to the host (cudaMemcpyDeviceToHost)"),
        (r"\bcuMemcpyDtoH\w*", "copies device memory to the host (cuMemcpyDtoH)"),
        (r"\bcudaMemcpyDefault\b", "copies in a direction the pointers decide (cudaMemcpyDefault)"),
        (r"\bcuda(MallocHost|HostAlloc|HostRegister|MallocManaged)\b", "uses host-visible memory"),
    )

    def host_round_trip(self, source: str, build: BuildResult) -> list[str]:
        """The source's round trips and, from the shared object's host code (objdump, where installed), each
        call of cudaMemcpy / cudaMemcpyAsync whose kind argument (the fourth, %ecx in the x86-64 SysV ABI) is
        set to cudaMemcpyDeviceToHost (2) or cudaMemcpyDefault (4) just before it: the runtime is linked in
        statically, so the symbol alone says nothing (every build has it)."""
        found = super().host_round_trip(source, build)
        if build.load_path:
            found += host_copy_calls(build.load_path)
        return found

    def versions(self) -> dict[str, str]:
        from xlang.build_cache import _nvcc_version

        return {"nvcc": _nvcc_version()}

    def cache_inputs(self, arch) -> list[Path]:
        return list(arch.template_dirs)  # the headers nvcc includes

    def doc_files(self, arch) -> list[str]:
        """The architecture's CUDA template headers (templates/*.cuh, its own and the shared ones)."""
        from xlang import resources

        root = resources.folder("arch_docs")
        headers = [h.relative_to(root).as_posix() for d in arch.template_dirs for h in sorted(d.glob("*.cuh"))]
        return headers or [f"{arch.docs}/templates/*.cuh"]

    def own_cubins(self, build: BuildResult, folder: Path) -> list[str]:
        """The cubins nvcc embedded in the candidate's shared object, extracted with cuobjdump into folder."""
        from xlang.toolchain import find_tool

        if not build.load_path:
            return []
        tool = find_tool("cuobjdump")
        folder.mkdir(parents=True, exist_ok=True)
        if tool is None:
            return []
        subprocess.run([str(tool), "-xelf", "all", str(Path(build.load_path).resolve())], cwd=folder,
                       capture_output=True, timeout=120)
        return sorted(str(p) for p in folder.glob("*.cubin"))

    def nvcc_command(self, source: Path, output: Path, arch, include_dirs: list[Path] | None = None) -> list[str]:
        return [
            str(require_tool("nvcc")), "-O3", "-std=c++17", "-shared", "-Xcompiler", "-fPIC", "-lineinfo", arch.gencode,
            # The architecture's template headers (arch_docs/<docs>/templates, arch_docs/common/templates): in a
            # build, the judge's copies of them in the build folder (compile), never the repository's folders.
            *[arg for d in (arch.template_dirs if include_dirs is None else include_dirs) for arg in ("-I", str(d))],
            # No -lcuda: a CPU-only build machine has no libcuda, so driver functions (cuTensorMapEncodeTiled
            # for TMA) are reached through cudaGetDriverEntryPoint. -z defs turns a direct call into a link
            # error here instead of a load failure on the GPU machine.
            "-Xlinker", "-z,defs",
            # ptxas's own report per kernel (registers, spills, stack, shared memory): the build record keeps it
            # (BuildResult.ptxas_v) and the feedback quotes it (xlang.agent.buildinfo).
            "-Xptxas", "-v",
            "-o", str(output), str(source),
        ]

    def compile(self, source_path: Path, task, arch, shape, workdir: Path) -> BuildResult:
        """nvcc (and all it runs: the host compiler, cicc, ptxas, fatbinary, nvlink) in the jail of the Python
        builds, as the build's own uid, with the jail's limits: it sees the system folders and the CUDA toolkit,
        its own folder (workdir/child: a copy of the source, its output) and the judge's read-only copy of the
        architecture's template headers (workdir/include), nothing of the repository; an #include or an
        assembler .incbin of anything else finds nothing. The judge then reads the shared object out of the
        child's folder (never through a link) into its own file, on which cuobjdump and the census run."""
        result = BuildResult(False, self.name, task.name, arch.name, shape, str(workdir))
        source = source_path.read_text()
        if not re.search(rf'extern\s+"C"[^;{{]*\b{ENTRY_POINT}\s*\(', source):
            result.error = f"no entry point: define {task.contract.c_signature()}"
            return result
        include = _fresh_folder(workdir / "include", 0o755)
        include_dirs = []
        for i, folder in enumerate(arch.template_dirs):  # in the order of the include path (a name may shadow)
            copy = include / str(i)
            copy.mkdir(mode=0o755)
            for header in sorted(folder.iterdir()) if folder.is_dir() else []:
                if header.is_file() and not header.is_symlink():
                    write_new(copy / header.name, header.read_bytes(), 0o444)
            include_dirs.append(copy)
        child = _fresh_folder(workdir / CHILD_FOLDER, 0o700)
        child_source = write_new(child / source_path.name, source)
        so_name = "candidate.so"
        cmd = self.nvcc_command(child_source, child / so_name, arch, include_dirs)
        jail = Jail(home=child, readable=[include], hidden=peer_library_folders())
        jail.prepare()
        limit_s = _build_limit.get()
        try:
            proc = run_child(jail.command(cmd), limit_s, cwd=child, raw_env=child_env(jail=jail))
        finally:
            kill_uid(jail.uid)  # what it left (a jail without a PID namespace of its own)
        if proc.timed_out:
            result.error = f"the build (nvcc) exceeded {limit_s:.0f} s{BUILD_TIMEOUT_MARK}"
            return result
        log = (proc.stdout + proc.stderr).replace(str(child_source), source_path.name)
        # ptxas -v's report (`ptxas info` lines and the stack-frame lines under them) apart from the diagnostics: an
        # error or a warning is not lost among its info lines. xlang.agent.buildinfo reads the report.
        report = [ln.rstrip() for ln in log.splitlines() if ln.startswith("ptxas info")
                  or _FRAME_LINE.fullmatch(ln.rstrip())]
        diagnostics = "\n".join(ln for ln in log.splitlines() if not ln.startswith("ptxas info")
                                 and not _FRAME_LINE.fullmatch(ln.rstrip()))
        if proc.returncode != 0:
            result.error = trim_log(diagnostics or log or f"nvcc ended with exit code {proc.returncode}")
            note = limit_note(proc.returncode)
            if note or proc.crashed_by_signal or _KILLED.search(log):
                result.error += f"\n({note or 'nvcc or a tool it ran ran out of memory, hit a limit or was killed'}; {_limits_text()})"
            return result
        data = read_untrusted_below(child, so_name, _SO_LIMIT + 1)
        if data is None or len(data) > _SO_LIMIT:
            result.error = ("nvcc left no shared object of its own (a regular file, no link)" if data is None
                            else f"the shared object is larger than {_SO_LIMIT >> 20} MiB")
            return result
        so = replace_file(workdir / so_name, data, 0o755)  # the judge's copy: what cuobjdump and the runner read
        result.log = trim_log(diagnostics)
        result.ptxas_v = "\n".join(report)[:_PTXAS_V_CHARS]
        ptx = workdir / "candidate.ptx"
        ptx_proc = subprocess.run([str(require_tool("cuobjdump")), "-ptx", str(so)], capture_output=True, text=True)
        replace_file(ptx, ptx_proc.stdout)  # never through a link (untrusted.replace_file)
        result.kernels = [KernelImage(name, str(so), str(ptx)) for name in disassemble(so)]
        result.load_path = str(so)
        result.ok = True
        return result

    def load_entry(self, build: BuildResult):
        import torch

        lib = ctypes.CDLL(build.load_path)
        entry = getattr(lib, ENTRY_POINT)
        entry.restype = None

        def call(*args):
            converted = [ctypes.c_void_p(a.data_ptr()) if isinstance(a, torch.Tensor) else ctypes.c_int(a)
                         for a in args]
            entry(*converted, ctypes.c_void_p(torch.cuda.current_stream().cuda_stream))

        call.library = lib  # keep the library loaded as long as the callable lives
        return call


_CALL = re.compile(r"\bcall\s+[0-9a-f]+\s+<(cudaMemcpy(?:Async)?)(?:_ptds|_ptsz)?>")
_KIND = re.compile(r"\bmov\s+\$0x([0-9a-f]+),%ecx\b")
_KINDS = {2: "cudaMemcpyDeviceToHost", 4: "cudaMemcpyDefault"}


def host_copy_calls(so_path: str, window: int = 8) -> list[str]:
    """Calls in the host code of a shared object to cudaMemcpy(Async) with kind DeviceToHost or Default, read
    from `objdump -d` (the constant loaded into %ecx within `window` instructions before the call). [] when
    objdump is absent or fails: evidence only."""

    tool = shutil.which("objdump")
    if tool is None:
        return []
    try:
        text = subprocess.run([tool, "-d", "--no-show-raw-insn", so_path], capture_output=True, text=True,
                              timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    lines, seen = text.splitlines(), {}
    for i, line in enumerate(lines):
        m = _CALL.search(line)
        if not m:
            continue
        for before in reversed(lines[max(0, i - window):i]):
            if "call" in before:
                break  # a call in between clobbers %ecx
            k = _KIND.search(before)
            if k:
                kind = _KINDS.get(int(k.group(1), 16))
                if kind:
                    seen[(m.group(1), kind)] = seen.get((m.group(1), kind), 0) + 1
                break
    return [f"host code calls {fn} with {kind} ({n} call site{'s' * (n > 1)})"
            for (fn, kind), n in sorted(seen.items())]


BACKEND = CudaPtxBackend()
