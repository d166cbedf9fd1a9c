"""The backend interface every language implements, the backend registry, and the shared build flow.

A language is one folder, backends/<lang>/ (backend.py defining BACKEND, prompt.md), or a third-party package
registering a Backend under the Python entry-point group `xlang.backends` (see backends() and ARCHITECTURE.md).
`Backend` is the only place the core learns anything about a language: every difference the core acts on is a
documented attribute or method of it (build, static screen, loading, which kernels are its own, where its JIT
writes, which docs it reads, the versions that decide a build, its colour in plots).
The shared flow here (build_candidate) runs compile() and then the static SASS census.
"""

from __future__ import annotations

import contextvars
import functools
import importlib.metadata
import json
import os
import re
import sys
import tempfile
import threading
import time
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass, field
from pathlib import Path

from xlang import build_cache, resources, untrusted
from xlang.archs import archs
from xlang.census import Census, CensusTimeout, DisassemblyError, take_census
from xlang.errors import XlangError
from xlang.toolchain import require_tool

ENTRY_POINT_GROUP = "xlang.backends"  # a third-party package adds a language here (name = BACKEND instance)

# The static screen for languages whose host code is Python: calls that would hand the
# work to torch's or a vendor's kernels. Run time has the last word (kernel names seen by Nsight Compute).
TORCH_COMPUTE_FORBIDDEN = (
    (r"\btorch\.(matmul|mm|bmm|addmm|baddbmm|einsum|tensordot|inner|outer|linalg)\b",
     "torch compute calls are not allowed: the result must come from the candidate's own kernels"),
    (r"\.(matmul|mm|bmm)\(", "matrix products through torch are not allowed"),
    (r"\b(scaled_dot_product_attention|flash_attn|torch\.nn\.functional|F\.softmax|torch\.softmax)\b",
     "torch / library attention or softmax is not allowed"),
    (r"\b(cublas|cudnn|flashinfer|deep_gemm)\b", "vendor libraries are not allowed"),  # flashinfer: serving baselines
    (r"\bquack\b", "the peers' libraries (quack, flash_attn) are not allowed: they are the comparison, not the answer"),
)

# Host round trips in Python host code (issue 40): the task's data brought to the host, where numpy or torch's
# CPU ops could compute the answer. Evidence in the build record (BuildResult.host_round_trip), never a failure
# by itself: an honest candidate may read a size or a flag this way, and only the run (Nsight Compute's FLOPs of
# its own kernels) decides whether the GPU computed the answer.
PYTHON_HOST_ROUND_TRIP = (
    (r"\.cpu\s*\(", "copies a tensor to the host (.cpu())"),
    (r"\.numpy\s*\(", "hands a tensor to numpy (.numpy())"),
    (r"\.tolist\s*\(", "reads a tensor into Python lists (.tolist())"),
    (r"\.item\s*\(", "reads a tensor element on the host (.item())"),
    (r"\.to\s*\(\s*(device\s*=\s*)?['\"]cpu", "moves a tensor to the CPU (.to('cpu'))"),
    (r"device\s*=\s*['\"]cpu['\"]", "makes a tensor on the CPU (device='cpu')"),
    (r"^\s*(import\s+numpy|from\s+numpy\b)", "imports numpy"),
)


@dataclass
class KernelImage:
    """One compiled GPU function of the candidate."""

    name: str  # the symbol as the driver (and Nsight Compute, mangled) sees it
    cubin: str  # path: a cubin, or a shared object that embeds the cubin
    ptx: str | None = None  # path
    meta: dict = field(default_factory=dict)  # num_warps, shared bytes, grid, autotune config, ...


@dataclass
class BuildResult:
    ok: bool
    lang: str
    task: str
    arch: str
    shape: dict
    workdir: str
    load_path: str | None = None  # what the GPU worker loads (Backend.load_entry): a .so, a .py, ...
    kernels: list[KernelImage] = field(default_factory=list)
    error: str | None = None  # the compiler's own message, trimmed to what helps
    log: str = ""  # warnings and notes of a successful build
    seconds: float = 0.0
    census: Census | None = None
    cached: bool = False  # reused from the build cache (xlang.build_cache), files verified
    # What the source or the host binary shows of a host round trip (Backend.host_round_trip): evidence, no verdict
    host_round_trip: list[str] = field(default_factory=list)
    ptxas_v: str = ""  # ptxas -v's report where the build asks for one (cuda_ptx): registers, spills, smem per kernel

    def to_dict(self) -> dict:
        d = asdict(self)
        d["census"] = self.census.to_dict() if self.census else None
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "BuildResult":
        d = dict(d)
        d["kernels"] = [KernelImage(**k) for k in d.get("kernels", [])]
        d["census"] = Census.from_dict(d["census"]) if d.get("census") else None
        return cls(**d)

    def save(self) -> Path:
        return untrusted.replace_file(Path(self.workdir) / "build.json", json.dumps(self.to_dict(), indent=1))


class Backend(ABC):
    """One kernel language. Subclasses set the attributes and implement compile() and load_entry(); every other
    method has a default that fits a language whose kernels the core can find on disk.

    Attributes:
      name      the language's key (`--lang`, store rows, solutions/<name>_<generation><suffix>); unique
      title     how people call it in reports and prompts
      suffix    the candidate file's suffix (".py", ".cu")
      fences    the code-block languages a model's reply may tag its code with
      forbidden (pattern, why) pairs of the static screen: calls that hand the work to a vendor library or torch
      rank      sort key of the language in tables and plots (lower first); ties by name
      color     its colour in plots (any matplotlib colour)
      tools     NVIDIA tools a build needs besides cuobjdump (checked before any work), e.g. ("nvcc",)
      distributions  Python distributions whose versions decide a build (see versions())
      fingerprint_packages  (distribution, short name) of the Python packages of this language that every
                toolchain record and verdict fingerprint lists (toolchain_packages(); torch is the core's)
      kernels_on_disk  True when every kernel the candidate launches comes from a module file the judge can hash
                (its build's cubins, or cubins its JIT writes into the candidate's private cache); False when
                the JIT keeps its output in memory, so a runtime kernel's provenance is judged by name alone
      jit_cache  the folder under the candidate's HOME where its JIT writes the cubins it compiles at run time
                (where child_env points the JIT's cache); the judge takes a module found on disk as the
                candidate's own only from its build or from there (None: its build only)
      jit_kernel_prefix  what the language's JIT puts before every kernel name it makes (see
                backends/cutedsl); for a JIT that keeps kernels in memory, every run-time kernel must carry it
                (or be a torch utility) and the vendor screen reads its name after it (or after the stem of the
                candidate's own kernel function, KernelImage.meta["stem"]), so the language's own word is not
                taken for a vendor's; the rest, which the candidate's source chose, is still screened
    """

    name: str = ""
    title: str = ""
    suffix: str = ""
    fences: tuple[str, ...] = ()
    forbidden: tuple[tuple[str, str], ...] = ()
    host_patterns: tuple[tuple[str, str], ...] = ()  # (pattern, what) of host round trips (host_round_trip)
    rank: int = 100
    color: str = "#888888"
    tools: tuple[str, ...] = ()
    distributions: tuple[str, ...] = ()
    fingerprint_packages: tuple[tuple[str, str], ...] = ()
    kernels_on_disk: bool = True
    jit_cache: str | None = None
    jit_kernel_prefix: str = ""

    @property
    def folder(self) -> Path:
        """The language's folder (prompt.md, doc templates, build code). A third-party backend overrides it."""
        return resources.folder("backends") / self.name

    def prompt_section(self, task, arch=None) -> str:
        """The language section of the prompt: prompt.md rendered (jinja2) with this task's contract and the
        target architecture (`arch`: title, sm, generation; None renders every registered architecture's
        target names through `archs`), so no prompt hard-codes an architecture."""
        from jinja2 import Template  # lazy: only prompts need it (start-up time of every other command)

        text = (self.folder / "prompt.md").read_text()
        targets = list(archs().values()) if arch is None else [arch]
        return Template(text, keep_trailing_newline=True).render(
            task=task, contract=task.contract, python_signature=task.contract.python_signature(),
            c_signature=task.contract.c_signature(), tensors=task.contract.describe_tensors(),
            arch=arch, archs=targets,
            targets=", ".join(dict.fromkeys(f"{a.sm} on {a.generation.capitalize()}" for a in targets)),
        )

    def doc_files(self, arch) -> list[str]:
        """The language's part of the architecture docs at level 'templates' and above: paths relative to
        arch_docs/ (a '*' marks files that should exist and do not). Default: <docs>/templates/<name>.md."""
        return [f"{arch.docs}/templates/{self.name}.md"]

    def host_round_trip(self, source: str, build: BuildResult) -> list[str]:
        """Where the candidate's host code brings the task's data to the host (`host_patterns` on the source):
        recorded in the build, decided by the run (issue 40)."""
        code = strip_comments(source, self.suffix)
        return [f"{why} (matched '{m.group(0).strip()}')" for pattern, why in self.host_patterns
                for m in [re.search(pattern, code, re.M)] if m]

    def screen(self, source: str) -> list[str]:
        """Static screen of the source: the reasons it is forbidden, empty when clean."""
        code = strip_comments(source, self.suffix)
        return [f"{why} (matched '{m.group(0)}')" for pattern, why in self.forbidden
                for m in [re.search(pattern, code)] if m]

    def versions(self) -> dict[str, str]:
        """The toolchain that decides a build of this language ({name: version}; "none" when absent): part of
        the build-cache key and of what a verdict records."""
        return {dist: _package_version(dist) for dist in self.distributions}

    def absent_packages(self) -> list[str]:
        """The Python distributions this language builds with that are not installed here."""
        return [d for d, v in self.versions().items() if d in self.distributions and v == "none"]

    def require_installed(self) -> None:
        """Stop with one clear message when a Python distribution this language builds with is absent (checked
        before any work: without it every build would fail and be stored as the candidate's compile error)."""
        absent = self.absent_packages()
        if absent:
            raise XlangError(f"{self.name} needs the Python package{'s' * (len(absent) > 1)} {', '.join(absent)}, not "
                             f"installed here (pip install 'xlang[{self.name}]' where that extra exists)")

    # Variables of ours, each naming a path of this language's compiler tools (its own ptxas, say), that every child
    # inherits, a jailed one only where its jail binds that path (sandbox.child_env); never secrets.
    tool_path_variables: tuple[str, ...] = ()

    def child_env(self, home: Path) -> dict[str, str]:
        """Environment variables a build or runner child whose HOME is `home` needs for this language: where its
        JIT keeps its caches, inside that home (a fresh folder per child: never a cache another candidate wrote
        or will read). Every child gets every language's (jit_env): a vendor's or peer's process may run
        another language's JIT."""
        return {}

    def cache_inputs(self, arch) -> list[Path]:
        """Files or folders besides the backend's own folder whose content decides a build (the build-cache key
        hashes them), e.g. headers the compiler includes."""
        return []

    @abstractmethod
    def compile(self, source_path: Path, task, arch, shape: dict, workdir: Path) -> BuildResult:
        """Turn the candidate at source_path into GPU code for `arch` with no GPU needed.

        Writes only inside `workdir` (fresh, absolute; the candidate is hostile: run its code through
        run_build_child). Returns a BuildResult: ok with `kernels` (each naming its cubin or the shared object
        embedding it, and its PTX when there is one) and `load_path` (what load_entry loads on the GPU machine),
        or not ok with `error`, the compiler's own message trimmed (trim_log) to what a model can act on.
        Must not raise for a bad candidate. build_candidate then takes the SASS census of the kernels."""

    @abstractmethod
    def load_entry(self, build: BuildResult):
        """On the GPU machine, inside the jailed runner: a callable taking (*tensors, *sizes) in the contract's
        order that runs the candidate on the current CUDA stream."""

    def own_cubins(self, build: BuildResult, folder: Path) -> list[str]:
        """Cubin files (written under `folder`) holding the kernels the build made from the candidate's source:
        the judge counts a kernel as the candidate's when its module is one of these or, for a JIT language, one
        its JIT wrote into the candidate's private cache. Default: none (the JIT's cache is found at run time)."""
        return []

    def seed_cache(self, build: BuildResult) -> Path | None:
        """A JIT cache this build filled (the judge's copy, inside build.workdir) that the runner may start from
        (copied into the candidate's private home as its JIT cache, `jit_cache`), or None."""
        return None


# The layout of a build folder (BuildResult.workdir, the judge's: the candidate never had write access to it):
#   candidate.<suffix>, build.json, the compiler's outputs and the judge's copies of a static build's files
#   (k<i>.cubin, k<i>.ptx: names the judge chose), jit-cache/ (the copy of the child's JIT cache), and
#   child/: the static-build child's HOME and output folder, the only folder the candidate could write, which
#   the judge never writes into once the child started and reads only through read_untrusted_* (no links).
CHILD_FOLDER = "child"
JIT_CACHE_COPY = "jit-cache"


def cache_dir(name: str) -> Path:
    """Compiler caches shared by builds (XLANG_CACHE, default ~/.cache/xlang)."""
    return Path(os.environ.get("XLANG_CACHE", Path.home() / ".cache" / "xlang")) / name


def strip_comments(source: str, suffix: str) -> str:
    """Drop comments so that a forbidden name mentioned in a comment is not held against a candidate."""
    if suffix == ".py":
        return re.sub(r"#[^\n]*", "", source)
    return re.sub(r"//[^\n]*|/\*.*?\*/", "", source, flags=re.S)


_registered: dict[str, Backend] = {}


def register_backend(backend: Backend) -> Backend:
    """Add a backend at run time (tests, embedding applications); wins over a discovered one of that name."""
    if not isinstance(backend, Backend) or not backend.name:
        raise TypeError("register_backend needs a Backend instance with a name")
    _registered[backend.name] = backend
    backends.cache_clear()
    return backend


def unregister_backend(name: str) -> None:
    _registered.pop(name, None)
    backends.cache_clear()


def _package_version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "none"


def require_build_tools(langs) -> None:
    """Before any work: every tool a build of these languages needs (Backend.tools; cuobjdump for the census)
    and the Python packages they build with (Backend.distributions)."""
    for tool in dict.fromkeys(t for lang in langs for t in get_backend(lang).tools):
        require_tool(tool)
    require_tool("cuobjdump")
    for lang in langs:
        get_backend(lang).require_installed()


@functools.cache
def backends() -> dict[str, Backend]:
    """Every language, in display order (rank, then name): the folders under backends/ that have a backend.py
    (each defining BACKEND), then entry points of group `xlang.backends` (each loading to a Backend instance or
    class), then register_backend(). A later source replaces an earlier one of the same name. A plugin that
    fails to load is skipped with a warning on stderr, never silently."""
    found: dict[str, Backend] = {}
    root = resources.folder("backends")
    for folder in sorted(p for p in root.iterdir() if (p / "backend.py").is_file() and not p.name.startswith("_")):
        backend = resources.import_module(f"backends.{folder.name}.backend").BACKEND
        if backend.name != folder.name:
            raise XlangError(f"backends/{folder.name}/backend.py: BACKEND.name is '{backend.name}', "
                             f"not its folder's name")
        found[backend.name] = backend
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        try:
            obj = ep.load()
            backend = obj() if isinstance(obj, type) else obj
            if not isinstance(backend, Backend) or not backend.name:
                raise TypeError(f"{ep.value} is not a named xlang Backend")
        except Exception as e:  # noqa: BLE001 - a broken plugin must not take the other languages down
            print(f"xlang: skipping language plugin '{ep.name}': {e}", file=sys.stderr)
            continue
        found[backend.name] = backend
    found.update(_registered)
    return dict(sorted(found.items(), key=lambda kv: (kv[1].rank, kv[0])))


def jit_env(home: Path) -> dict[str, str]:
    """Every language's child_env(home): the environment of any build or runner child whose HOME is `home`."""
    env: dict[str, str] = {}
    for backend in backends().values():
        env.update(backend.child_env(home))
    return env


def tool_path_variables() -> tuple[str, ...]:
    """Every language's tool_path_variables: what sandbox.child_env lets a child inherit besides its own list."""
    return tuple(dict.fromkeys(v for backend in backends().values() for v in backend.tool_path_variables))


def toolchain_packages() -> dict[str, str]:
    """{distribution: short name} of every language's fingerprint_packages, in display order: what toolchain
    records (xlang.agent.buildinfo) and verdict fingerprints (the judge; '_' for '-' there) list."""
    return {dist: name for backend in backends().values() for dist, name in backend.fingerprint_packages}


def lang_names() -> tuple[str, ...]:
    """The known languages in display order."""
    return tuple(backends())


def get_backend(lang: str) -> Backend:
    known = backends()
    if lang not in known:
        raise XlangError(f"unknown language '{lang}' (known: {', '.join(known)})")
    return known[lang]


def __getattr__(name: str):
    if name == "LANGS":  # the older spelling: the registry's names, in display order
        return lang_names()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def trim_log(text: str, max_lines: int = 60, max_chars: int = 6000) -> str:
    """Keep the part of a compiler log a person (or a model) can act on."""
    lines = [ln.rstrip() for ln in text.strip().splitlines() if ln.strip()]
    if len(lines) > max_lines:
        lines = lines[: max_lines // 2] + [f"... ({len(lines) - max_lines} lines omitted) ..."] + lines[-max_lines // 2:]
    out = "\n".join(lines)
    return out if len(out) <= max_chars else out[: max_chars // 2] + "\n...\n" + out[-max_chars // 2:]


DEFAULT_BUILD_TIMEOUT_S = 60.0
BUILD_TIMEOUT_ENV = "XLANG_BUILD_TIMEOUT_S"  # the default limit, when set (a slow or shared machine)
# Ends the error of a build stopped by its wall-clock limit: a time-out, not the compiler's refusal (xlang diff).
BUILD_TIMEOUT_MARK = " (the build's time limit)"


def build_timed_out(error: str | None) -> bool:
    """The build error is its wall-clock limit's, not the compiler's."""
    return bool(error) and (BUILD_TIMEOUT_MARK in error or " exceeded " in error and error.startswith("the build ("))
# The limit of the build in progress on this thread (build_candidate sets it; run_build_child applies it).
_build_limit: contextvars.ContextVar[float] = contextvars.ContextVar("xlang_build_limit",
                                                                      default=DEFAULT_BUILD_TIMEOUT_S)
# When the whole build (the compiler, then the judge's copies and census) must have ended: the build's start plus
# its limit plus POST_BUILD_SLACK_S (build_candidate sets it; run_build_child's copying and the census check it).
_build_deadline: contextvars.ContextVar[float | None] = contextvars.ContextVar("xlang_build_deadline", default=None)

# What the judge takes from one build: the kernels a build may name, the distinct modules (cubins / shared objects)
# it copies and disassembles, the bytes of those and of their PTX, and the seconds its copying and census may run
# past the build's limit. A candidate's build report can name any number of files and each costs the judge a copy
# and a cuobjdump (1500 named took 618 s, issue 46). The experts need at most 6 kernels, 3 modules and 1.5 MB
# (modules and PTX; docs/robustness.md has the table): every figure is 20x or more above that, and a build past
# one is refused (compile_error), never judged on a part of it.
BUILD_MAX_KERNELS = 256
BUILD_MAX_MODULES = 64
BUILD_MAX_BYTES = 64 << 20
POST_BUILD_SLACK_S = 15.0


def build_budget_problem(kernels) -> str | None:
    """Why the kernels a build names (KernelImage-like: .name, .cubin, .ptx; or the report's dicts) are more
    than the judge copies and disassembles (BUILD_MAX_*), else None. Counts only: the bytes are checked where
    the files are read."""
    def field(k, key):
        return k.get(key) if isinstance(k, dict) else getattr(k, key, None)

    modules = {field(k, "cubin") for k in kernels} - {None}
    ptx = {field(k, "ptx") for k in kernels} - {None}
    if len(kernels) > BUILD_MAX_KERNELS:
        return f"it names {len(kernels)} kernels, more than the judge takes from one build ({BUILD_MAX_KERNELS})"
    if max(len(modules), len(ptx)) > BUILD_MAX_MODULES:
        return (f"it names {len(modules)} modules and {len(ptx)} PTX files, more than the judge copies and "
                f"disassembles for one build ({BUILD_MAX_MODULES} of each)")
    return None


def refused(problem: str) -> str:
    """The error of a build the judge refuses for its size (BUILD_MAX_*): the candidate's, said plainly."""
    return f"the build was refused: {problem} (the judge's limits for one build are far above what a kernel needs)"


def past_deadline() -> bool:
    """The build in progress on this thread has run past its deadline (_build_deadline)."""
    deadline = _build_deadline.get()
    return deadline is not None and time.monotonic() > deadline


class BuildInterrupted(KeyboardInterrupt):
    """The build in progress was interrupted (Ctrl-C reached this process while it ran): no verdict, so nothing
    is stored or cached, and a resumed compare builds it again. A KeyboardInterrupt, so that no caller's
    `except Exception` turns it into a verdict or a sample's error."""


# Interrupts this process has seen (note_interrupt: the main thread's KeyboardInterrupt), for the builds running in
# worker threads: a Ctrl-C kills the compiler of the terminal's process group (nvcc's gcc "died due to signal 2")
# and that failure must not be taken for the candidate's compile error.
_interrupts = threading.Condition()
_interrupt_count = 0
INTERRUPT_GRACE_S = 1.0  # how long a build that failed like an interrupted one waits to hear of the interrupt
_LOOKS_INTERRUPTED = re.compile(r"signal (2|15)\b|SIGINT|SIGTERM|KeyboardInterrupt")


def note_interrupt() -> None:
    """The main thread received a KeyboardInterrupt: every build in progress is interrupted (BuildInterrupted)."""
    global _interrupt_count
    with _interrupts:
        _interrupt_count += 1
        _interrupts.notify_all()


def interrupts_seen() -> int:
    with _interrupts:
        return _interrupt_count


def interrupted_since(mark: int, suspect: bool = False) -> bool:
    """An interrupt came since interrupts_seen() was `mark`. suspect (a build that failed the way a killed compiler
    does): the main thread may not have run its handler yet, so wait INTERRUPT_GRACE_S for it. Only this process's
    own interrupt counts: a candidate whose build child kills itself with SIGINT is judged as any other failure."""
    with _interrupts:
        if suspect and _interrupt_count == mark:
            _interrupts.wait_for(lambda: _interrupt_count != mark, timeout=INTERRUPT_GRACE_S)
        return _interrupt_count != mark


def read_source(path: Path) -> str:
    """A candidate file's text: one clear line for a folder, a missing or a binary file."""
    if path.is_dir():
        raise XlangError(f"{path} is a directory, not a candidate source file")
    if not path.is_file():
        raise XlangError(f"no such file: {path}")
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise XlangError(f"{path} is not UTF-8 text (a binary file?): a candidate is a source file") from None
    except OSError as e:
        raise XlangError(f"cannot read {path}: {e.strerror or e}") from None


def build_candidate(source: str | Path, lang: str, task, arch, shape: dict | None = None,
                    required: tuple[str, ...] | None = None, workdir: Path | None = None,
                    timeout_s: float | None = None, cache: bool = True) -> BuildResult:
    """Compile a candidate for arch (no GPU needed) and take its static census.

    timeout_s: the wall-clock limit of a sandboxed build child (default DEFAULT_BUILD_TIMEOUT_S).
    cache: reuse an identical earlier build (xlang.build_cache: same source, toolchain and build code)."""
    backend = get_backend(lang)
    shape = shape or task.shape()
    required = tuple(required or task.required_for(arch))
    # Absolute: the build children run with their own working directory.
    workdir = Path(workdir or tempfile.mkdtemp(prefix=f"xlang-{lang}-{arch.name}-")).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    source_text = read_source(source) if isinstance(source, Path) else source
    source_path = workdir / f"candidate{backend.suffix}"
    untrusted.replace_file(source_path, source_text)
    start = time.monotonic()
    key = build_cache.key(source_text, backend, task, arch, shape, required) if cache else None
    hit = build_cache.lookup(key, workdir, BuildResult.from_dict) if key else None
    if hit is not None:
        hit.seconds = time.monotonic() - start
        hit.save()
        return hit
    mark = interrupts_seen()
    limit = float(timeout_s or os.environ.get(BUILD_TIMEOUT_ENV) or DEFAULT_BUILD_TIMEOUT_S)
    deadline = start + limit + POST_BUILD_SLACK_S
    tokens = _build_limit.set(limit), _build_deadline.set(deadline)
    try:
        result = backend.compile(source_path, task, arch, shape, workdir)
        if result.ok:
            _post_process(result, backend, source_text, arch, required, limit, deadline)
    finally:
        _build_limit.reset(tokens[0])
        _build_deadline.reset(tokens[1])
    if interrupted_since(mark, suspect=not result.ok and bool(_LOOKS_INTERRUPTED.search(result.error or ""))):
        raise BuildInterrupted(f"the {lang} build was interrupted: no verdict (the compiler said: "
                               f"{(result.error or 'nothing')[:200]})")
    result.seconds = time.monotonic() - start
    if key:
        build_cache.store(key, result, CHILD_FOLDER)
    result.save()
    return result


def _post_process(result: BuildResult, backend, source_text: str, arch, required, limit: float,
                  deadline: float) -> None:
    """The judge's own work on a successful build, within its budget (BUILD_MAX_*) and deadline: the PTX read,
    the census of every module, the host round trips. Past either the build is refused (result.ok False)."""
    if not result.kernels:
        result.ok, result.error = False, "the candidate compiled no GPU kernel"
        return
    problem = build_budget_problem(result.kernels)
    ptx_files = sorted({k.ptx for k in result.kernels if k.ptx})
    binaries = sorted({k.cubin for k in result.kernels})
    size = sum(os.lstat(p).st_size for p in [*ptx_files, *binaries] if os.path.lexists(p))
    if problem is None and size > BUILD_MAX_BYTES:
        problem = f"its modules and PTX hold {size >> 20} MiB, more than the judge takes ({BUILD_MAX_BYTES >> 20} MiB)"
    if problem:
        result.ok, result.error, result.kernels = False, refused(problem), []
        return
    try:
        if time.monotonic() > deadline:
            raise CensusTimeout("the compiler returned after the deadline")
        ptx = [Path(p).read_text(errors="replace") for p in ptx_files]
        result.census = take_census(binaries, ptx, arch, required, deadline=deadline)
    except CensusTimeout as e:
        result.ok, result.kernels = False, []
        result.error = (f"the build (with the judge's census of its {len(binaries)} module(s)) exceeded "
                        f"{limit:.0f} s + {POST_BUILD_SLACK_S:.0f} s: {e}{BUILD_TIMEOUT_MARK}")
        return
    except DisassemblyError as e:  # cuobjdump refused a module the build named: no GPU module, whoever made it
        result.ok, result.kernels = False, []
        result.error = f"the build's modules cannot be disassembled: {e}"
        return
    result.host_round_trip = backend.host_round_trip(source_text, result)
