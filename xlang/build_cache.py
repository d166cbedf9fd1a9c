"""A content-addressed cache of successful builds, shared by build, eval, run and compare.

Key: sha256 over the candidate's source, language, task, architecture, shape, required families, and what
decides a build besides them: the toolchain (the language's Backend.versions(): nvcc's version line or its Python
packages' versions; Python) and the code that builds and takes the census (backends/<lang>/, the task's
definition, the architecture's template headers, xlang's build and census modules). Any change to one of them is
a new key.

Trust boundary: a candidate is hostile code and runs in the build child. The child only ever writes its own
fresh workdir; this cache lives elsewhere ($XLANG_BUILD_CACHE, default ~/.cache/xlang/builds, a folder no build
child is given) and only the parent writes it, after the build: it copies the files the result names into a new
entry (atomic rename; an existing entry is never overwritten). Each entry's manifest records its key and the
sha256 of every file; a lookup checks both before copying the files into the new build's own workdir, so a
tampered or torn entry is a miss, never a result. A different source is a different key, so a candidate can only
get its own (byte-identical) result. Failed builds are not cached (a timeout or a crash may not repeat).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import json
import os
import platform
import shutil
import tempfile
from pathlib import Path

import xlang
from xlang.toolchain import nvcc_version
from xlang.untrusted import copy_untrusted_file, replace_file, write_new

FORMAT = 1  # bumped when the entry layout changes
CACHE_ENV = "XLANG_BUILD_CACHE"
_PLACEHOLDER = "\x00WORKDIR\x00"


def cache_root() -> Path:
    base = os.environ.get(CACHE_ENV)
    if base:
        return Path(base)
    return Path(os.environ.get("XLANG_CACHE", Path.home() / ".cache" / "xlang")) / "builds"


def enabled() -> bool:
    return os.environ.get(CACHE_ENV, "").lower() not in ("0", "off", "none")


@functools.cache
def _nvcc_version() -> str:
    return nvcc_version() or "none"


@functools.cache
def _package(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "none"


def _tree_digest(paths) -> str:
    """sha256 over the (name, bytes) of every file under the given files / folders, in a stable order."""
    h = hashlib.sha256()
    for p in paths:
        p = Path(p)
        files = sorted(f for f in p.rglob("*") if f.is_file() and "__pycache__" not in f.parts) \
            if p.is_dir() else [p] if p.is_file() else []
        for f in files:
            h.update(str(f.relative_to(p.parent)).encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()


def toolchain(backend) -> dict:
    """What, besides the inputs, decides a build of this language (a Backend)."""
    out = {"python": platform.python_version(), "xlang": xlang.__version__}
    out.update(backend.versions())
    out["cuobjdump"] = _package("nvidia-cuda-cuobjdump")  # the census's disassembler
    return out


def key(source: str, backend, task, arch, shape: dict, required) -> str:
    """The key of a build of `source` by `backend` (a Backend: the caller has it; this module sits below the
    backend registry, which builds through it)."""
    here = Path(__file__).resolve().parent
    code = [backend.folder, *sorted(Path(task.folder()).glob("*.py")),
            here / "backend.py", here / "python_backend.py", here / "census.py", here / "candidate.py", here / "task.py",
            here / "archs.toml", here / "sandbox.py", here / "children.py", here / "untrusted.py",
            *backend.cache_inputs(arch)]
    material = {"format": FORMAT, "source": hashlib.sha256(source.encode()).hexdigest(), "lang": backend.name,
                "task": task.name, "arch": arch.name, "shape": sorted(shape.items()), "required": list(required),
                "toolchain": toolchain(backend), "code": _tree_digest(code)}
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _entry(k: str) -> Path:
    return cache_root() / k[:2] / k


def _rebase(text: str, old: str, new: str) -> str:
    return text.replace(json.dumps(old)[1:-1], json.dumps(new)[1:-1])


def _referenced(result) -> list[str]:
    paths = [result.load_path] + [p for k in result.kernels for p in (k.cubin, k.ptx)]
    return sorted({p for p in paths if p})


def store(k: str, result, candidate_folder: str) -> bool:
    """Keep a successful result's files (those it names) under key k; never a file of `candidate_folder`, the
    part of the build folder the candidate could write. False when not cacheable or on any error: the cache is an
    optimisation, a failure to write it never fails a build."""
    if not (enabled() and result.ok and result.census is not None):
        return False
    workdir = Path(result.workdir).resolve()
    final = _entry(k)
    if final.exists():
        if _verified(final, k) is not None:
            return True
        shutil.rmtree(final, ignore_errors=True)  # torn or tampered: replaced by this build's files
    try:
        rels = [Path(p).resolve().relative_to(workdir) for p in _referenced(result)]
    except ValueError:
        return False  # a file outside the workdir: nothing we can vouch for
    if any(p.is_symlink() for p in map(Path, _referenced(result))) or any(
            rel.parts[:1] == (candidate_folder,) for rel in rels):
        return False  # a link, or a file of the candidate's folder: the judge keeps only its own copies
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=final.parent))
        files = {}
        for rel in rels:  # the judge's own files of the build (never the child's folder)
            dest = tmp / "files" / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            if not copy_untrusted_file(workdir / rel, dest):
                raise OSError(f"{rel} is not a regular file")
            files[str(rel)] = _sha256(dest)
        text = _rebase(json.dumps(result.to_dict()), str(workdir), _PLACEHOLDER)
        write_new(tmp / "manifest.json", json.dumps({"key": k, "files": files, "result": text}))
        try:
            os.rename(tmp, final)
        except OSError:  # another process stored it first: keep theirs
            shutil.rmtree(tmp, ignore_errors=True)
        return True
    except OSError:
        return False


def _verified(entry: Path, k: str) -> dict | None:
    """The entry's manifest when it is for key k and every file has its recorded sha256, else None."""
    try:
        manifest = json.loads((entry / "manifest.json").read_text())
        if manifest.get("key") != k or not isinstance(manifest.get("files"), dict):
            return None
        for rel, digest in manifest["files"].items():
            src = entry / "files" / rel
            if Path(rel).is_absolute() or ".." in Path(rel).parts or src.is_symlink() or _sha256(src) != digest:
                return None
        return manifest
    except (OSError, ValueError, TypeError, AttributeError):
        return None


def lookup(k: str, workdir: Path, from_dict):
    """The cached result for key k with its files copied into workdir (verified first), else None. from_dict:
    BuildResult.from_dict (the caller's: a malformed entry is a miss)."""
    if not enabled():
        return None
    entry = _entry(k)
    try:
        manifest = _verified(entry, k)
        if manifest is None:
            return None
        files = manifest["files"]
        workdir = Path(workdir).resolve()
        for rel, digest in files.items():
            dest = workdir / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            replace_file(dest, (entry / "files" / rel).read_bytes())
            if _sha256(dest) != digest:  # changed between the check and the copy
                return None
        result = from_dict(json.loads(_rebase(manifest["result"], _PLACEHOLDER, str(workdir))))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    result.workdir = str(workdir)
    result.cached = True
    return result
