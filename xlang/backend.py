"""The backend interface every language implements, the backend registry, and the shared build flow.

A backend (backends/<lang>/backend.py, defining BACKEND) owns everything about one language:
  - the language section of the prompt (backends/<lang>/prompt.md, rendered with the task's contract),
  - compile(): turn a candidate into cubins and PTX for an explicit architecture, with no GPU needed,
  - the verifier's hooks: a static screen for forbidden calls, and load_entry() on the GPU machine.
The shared flow here (build_candidate) runs compile() and then the static SASS census.
"""

from __future__ import annotations

import contextvars
import json
import os
import re
import tempfile
import time
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass, field
from pathlib import Path

from xlang import resources
from xlang.census import Census, take_census
from xlang.errors import XlangError

LANGS = ("triton", "cuda_ptx", "cutedsl")

# The static screen for languages whose host code is Python (triton, cutedsl): calls that would hand the
# work to torch's or a vendor's kernels. Run time has the last word (kernel names seen by Nsight Compute).
TORCH_COMPUTE_FORBIDDEN = (
    (r"\btorch\.(matmul|mm|bmm|addmm|baddbmm|einsum|tensordot|inner|outer|linalg)\b",
     "torch compute calls are not allowed: the result must come from the candidate's own kernels"),
    (r"\.(matmul|mm|bmm)\(", "matrix products through torch are not allowed"),
    (r"\b(scaled_dot_product_attention|flash_attn|torch\.nn\.functional|F\.softmax|torch\.softmax)\b",
     "torch / library attention or softmax is not allowed"),
    (r"\b(cublas|cudnn)\b", "vendor libraries are not allowed"),
)


@dataclass
class KernelImage:
    """One compiled GPU function of the candidate."""

    name: str  # the symbol as the driver (and Nsight Compute, mangled) sees it
    cubin: str  # path; for cuda_ptx the shared object that embeds the cubin
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
    load_path: str | None = None  # what the GPU worker loads: the .so (cuda_ptx) or the .py (triton, cutedsl)
    kernels: list[KernelImage] = field(default_factory=list)
    error: str | None = None  # the compiler's own message, trimmed to what helps
    log: str = ""  # warnings and notes of a successful build
    seconds: float = 0.0
    census: Census | None = None
    cached: bool = False  # reused from the build cache (xlang.build_cache), files verified

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
        path = Path(self.workdir) / "build.json"
        path.write_text(json.dumps(self.to_dict(), indent=1))
        return path


class Backend(ABC):
    """Base class: subclasses set the attributes and implement compile() and load_entry()."""

    name: str = ""
    title: str = ""
    suffix: str = ""  # candidate file suffix: ".py" or ".cu"
    fences: tuple[str, ...] = ()  # code-block languages a model's reply may use
    # (pattern, why): calls that would hand the work to a vendor library or to torch's own kernels.
    forbidden: tuple[tuple[str, str], ...] = ()

    @property
    def folder(self) -> Path:
        return resources.folder("backends") / self.name

    def prompt_section(self, task) -> str:
        """The language section of the prompt: prompt.md rendered with this task's contract."""
        from jinja2 import Template

        text = (self.folder / "prompt.md").read_text()
        return Template(text, keep_trailing_newline=True).render(
            task=task, contract=task.contract, python_signature=task.contract.python_signature(),
            c_signature=task.contract.c_signature(), tensors=task.contract.describe_tensors(),
        )

    def screen(self, source: str) -> list[str]:
        """Static screen of the source: the reasons it is forbidden, empty when clean."""
        code = strip_comments(source, self.suffix)
        return [f"{why} (matched '{m.group(0)}')" for pattern, why in self.forbidden
                for m in [re.search(pattern, code)] if m]

    @abstractmethod
    def compile(self, source_path: Path, task, arch, shape: dict, workdir: Path) -> BuildResult:
        """Turn the candidate into cubins and PTX for arch, with no GPU needed."""

    @abstractmethod
    def load_entry(self, build: BuildResult):
        """On the GPU machine: a callable taking (*tensors, *sizes) in contract order."""


class PythonModuleBackend(Backend):
    """A language whose candidate is a Python module exposing xlang_entry (triton, cutedsl)."""

    suffix = ".py"
    fences = ("python", "py")
    forbidden = TORCH_COMPUTE_FORBIDDEN

    def load_entry(self, build: BuildResult):
        from xlang.candidate import load_module

        return load_module(build.load_path).xlang_entry


def run_build_child(module: str, source_path: Path, task, arch, shape: dict, workdir: Path, env: dict,
                    timeout_s: float, what: str) -> tuple[dict | None, str | None, str]:
    """Run a Python-hosted language's static build (MODULE.main(source, task, arch, shape_json, out_dir)) in a
    sandboxed child; it leaves OUT_DIR/static_build.json. Returns (that report, error, the child's stdout)."""
    from xlang.sandbox import Jail, inside, python_child, read_untrusted

    timeout_s = min(timeout_s, _build_limit.get())  # the caller's limit (build --timeout) wins when lower
    # The candidate's Python runs here: jailed, with the build folder as its own HOME (its private JIT
    # caches: never a cache another candidate wrote or will read).
    child = python_child(module, [str(source_path), task.name, arch.name, json.dumps(shape), str(workdir)],
                         timeout=timeout_s, cwd=workdir, env=env, jail=Jail(home=workdir))
    if child.timed_out:
        return None, f"the build ({what}) exceeded {timeout_s:.0f} s", child.stdout
    text = read_untrusted(workdir / "static_build.json", limit=8 << 20)
    try:
        report = json.loads(text) if text is not None else None
    except json.JSONDecodeError:
        report = None
    if not isinstance(report, dict):
        return None, "the build process died: " + trim_log(
            child.stderr or child.stdout or f"exit code {child.returncode}"), child.stdout
    outside = [p for p in _paths_in(report) if inside(p, workdir) is None]
    if outside:  # the report names files we would read (cubins, PTX): only the build's own, no links
        return None, f"the build named files outside its folder or through links: {outside[0][:200]}", ""
    return report, None, child.stdout


_FILE_KEYS = ("cubin", "ptx")


def _paths_in(value, key: str = "") -> list[str]:
    """The files a build report names for us to read (its cubins and PTX), wherever they sit in the JSON."""
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in _paths_in(v, k)]
    if isinstance(value, list):
        return [p for v in value for p in _paths_in(v, key)]
    return [value] if key in _FILE_KEYS and isinstance(value, str) else []


def cache_dir(name: str) -> Path:
    """Compiler caches shared by builds (XLANG_CACHE, default ~/.cache/xlang)."""
    return Path(os.environ.get("XLANG_CACHE", Path.home() / ".cache" / "xlang")) / name


def strip_comments(source: str, suffix: str) -> str:
    """Drop comments so that a forbidden name mentioned in a comment is not held against a candidate."""
    if suffix == ".py":
        return re.sub(r"#[^\n]*", "", source)
    return re.sub(r"//[^\n]*|/\*.*?\*/", "", source, flags=re.S)


def get_backend(lang: str) -> Backend:
    if lang not in LANGS:
        raise XlangError(f"unknown language '{lang}' (known: {', '.join(LANGS)})")
    return resources.import_module(f"backends.{lang}.backend").BACKEND


def trim_log(text: str, max_lines: int = 60, max_chars: int = 6000) -> str:
    """Keep the part of a compiler log a person (or a model) can act on."""
    lines = [ln.rstrip() for ln in text.strip().splitlines() if ln.strip()]
    if len(lines) > max_lines:
        lines = lines[: max_lines // 2] + [f"... ({len(lines) - max_lines} lines omitted) ..."] + lines[-max_lines // 2:]
    out = "\n".join(lines)
    return out if len(out) <= max_chars else out[: max_chars // 2] + "\n...\n" + out[-max_chars // 2:]


DEFAULT_BUILD_TIMEOUT_S = 60.0
# The limit of the build in progress on this thread (build_candidate sets it; run_build_child applies it).
_build_limit: contextvars.ContextVar[float] = contextvars.ContextVar("xlang_build_limit",
                                                                      default=DEFAULT_BUILD_TIMEOUT_S)


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
    from xlang import build_cache

    backend = get_backend(lang)
    shape = shape or task.shape()
    required = tuple(required or task.required_for(arch))
    # Absolute: the build children run with their own working directory.
    workdir = Path(workdir or tempfile.mkdtemp(prefix=f"xlang-{lang}-{arch.name}-")).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    source_text = read_source(source) if isinstance(source, Path) else source
    source_path = workdir / f"candidate{backend.suffix}"
    source_path.write_text(source_text)
    start = time.monotonic()
    key = build_cache.key(source_text, lang, task, arch, shape, required) if cache else None
    hit = build_cache.lookup(key, workdir) if key else None
    if hit is not None:
        hit.seconds = time.monotonic() - start
        hit.save()
        return hit
    token = _build_limit.set(float(timeout_s or DEFAULT_BUILD_TIMEOUT_S))
    try:
        result = backend.compile(source_path, task, arch, shape, workdir)
    finally:
        _build_limit.reset(token)
    if result.ok:
        if not result.kernels:
            result.ok, result.error = False, "the candidate compiled no GPU kernel"
        else:
            ptx = [Path(k.ptx).read_text() for k in result.kernels if k.ptx]
            binaries = sorted({k.cubin for k in result.kernels})
            result.census = take_census(binaries, ptx, arch, required)
    result.seconds = time.monotonic() - start
    if key:
        build_cache.store(key, result)
    result.save()
    return result
