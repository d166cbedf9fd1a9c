"""A language whose candidate is a Python module (Triton, Gluon, CuTe DSL, ...): PythonModuleBackend builds it in a
jailed static-build child that imports the candidate with the target faked and reports its kernels in the
static-build protocol; the judge copies the files the report names (only the child's own, never through a link)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from xlang import children, sandbox, untrusted
from xlang.backend import (BUILD_MAX_BYTES, BUILD_TIMEOUT_MARK, CHILD_FOLDER, JIT_CACHE_COPY, POST_BUILD_SLACK_S,
                           PYTHON_HOST_ROUND_TRIP, TORCH_COMPUTE_FORBIDDEN, Backend, BuildResult, KernelImage,
                           _build_limit, build_budget_problem, jit_env, past_deadline, refused, trim_log)
from xlang.candidate import load_module
from xlang.task import peer_library_folders


class PythonModuleBackend(Backend):
    """A language whose candidate is a Python module exposing xlang_entry, built by a static-build child.

    `static_build` names a module (relative to xlang, e.g. "backends.<lang>.static_build") with
    main([source, task, arch, shape_json, out_dir]) that imports the candidate, calls its entry point with the
    target faked, and writes OUT_DIR/static_build.json in the one static-build protocol (STATIC_BUILD_PROTOCOL):
      {"ok": bool, "error": str | null,                   # the candidate's or compiler's message when not ok
       "kernels": [{"name": str, "cubin": path, "ptx": path | null, "meta": {...}}],  # files inside OUT_DIR
       "versions": {dist: version}}
    """

    suffix = ".py"
    fences = ("python", "py")
    forbidden = TORCH_COMPUTE_FORBIDDEN
    host_patterns = PYTHON_HOST_ROUND_TRIP
    distributions = ("torch",)
    static_build: str = ""
    static_build_what: str = "import and entry point with the target faked"
    build_timeout_s: float = 300

    def compile(self, source_path: Path, task, arch, shape, workdir: Path) -> BuildResult:
        """Run `static_build` in a jailed child (run_build_child) and read its report (the protocol above)."""
        result = BuildResult(False, self.name, task.name, arch.name, shape, str(workdir))
        data, result.error, stdout = run_build_child(
            self.static_build, source_path, task, arch, shape, workdir, env={}, timeout_s=self.build_timeout_s,
            what=self.static_build_what, jit_cache=self.jit_cache)
        if data is None:
            return result
        problem = check_static_build_report(data)
        if problem:
            result.error = f"the build report does not follow the static-build protocol: {problem}"
            return result
        if not data["ok"]:
            result.error = trim_log(data.get("error") or "the build failed without a message")
            return result
        result.kernels = [KernelImage(k["name"], k["cubin"], k.get("ptx"), dict(k.get("meta") or {}))
                          for k in data["kernels"]]
        result.ok, result.load_path, result.log = True, str(source_path), trim_log(stdout)
        return result

    def load_entry(self, build: BuildResult):
        return load_module(build.load_path).xlang_entry

    def seed_cache(self, build: BuildResult) -> Path | None:
        """The judge's copy of the build child's JIT cache (`jit_cache` in its home), when it made one."""
        copy = Path(build.workdir) / JIT_CACHE_COPY
        return copy if self.jit_cache and copy.is_dir() else None


STATIC_BUILD_PROTOCOL = 1


def check_static_build_report(data: dict) -> str | None:
    """Why a static build's report breaks the protocol (PythonModuleBackend's docstring), or None."""
    if not isinstance(data.get("ok"), bool):
        return "'ok' must be true or false"
    if not data["ok"]:
        return None if isinstance(data.get("error"), str) else "a failed build must give 'error' (a string)"
    kernels = data.get("kernels")
    if not isinstance(kernels, list):
        return "'kernels' must be a list"
    for k in kernels:
        if not isinstance(k, dict) or not isinstance(k.get("name"), str) or not isinstance(k.get("cubin"), str):
            return "each kernel needs 'name' and 'cubin' (strings)"
        if k.get("ptx") is not None and not isinstance(k["ptx"], str):
            return "a kernel's 'ptx' must be a path or null"
        if k.get("meta") is not None and not isinstance(k["meta"], dict):
            return "a kernel's 'meta' must be an object"
    return None


def run_build_child(module: str, source_path: Path, task, arch, shape: dict, workdir: Path, env: dict,
                    timeout_s: float, what: str, jit_cache: str | None = None) -> tuple[dict | None, str | None, str]:
    """Run a Python-hosted language's static build (MODULE.main(source, task, arch, shape_json, out_dir)) in a
    sandboxed child whose HOME and OUT_DIR is a fresh workdir/child; it leaves OUT_DIR/static_build.json.
    The files that report names (cubins, PTX) and the child's JIT cache (`jit_cache` in its home) are copied
    into workdir under names the judge chooses (k<i>.cubin, k<i>.ptx, jit-cache/), never through a link, and
    the report returned names the copies. Returns (that report, error, the child's stdout)."""
    timeout_s = min(timeout_s, _build_limit.get())  # the caller's limit (build --timeout) wins when lower
    # The candidate's Python runs here: jailed, with a fresh folder of its own as HOME (its private JIT
    # caches: never a cache another candidate wrote or will read); it reads its source, never writes beside it.
    child_dir = workdir / CHILD_FOLDER
    untrusted.remove_untrusted_tree(child_dir)  # a rebuild in a kept folder: the old child's files go
    child_dir.mkdir(mode=0o700)
    child = children.python_child(module, [str(source_path), task.name, arch.name, json.dumps(shape), str(child_dir)],
                                 timeout=timeout_s, cwd=child_dir, env={**jit_env(child_dir), **env},
                                 jail=sandbox.Jail(home=child_dir, readable=[source_path],
                                                   hidden=peer_library_folders()))
    if child.timed_out:
        return None, f"the build ({what}) exceeded {timeout_s:.0f} s{BUILD_TIMEOUT_MARK}", child.stdout
    text = untrusted.read_untrusted(child_dir / "static_build.json", limit=8 << 20)
    try:
        report = json.loads(text) if text is not None else None
    except (json.JSONDecodeError, RecursionError):  # RecursionError: nested deeper than the decoder goes
        report = None
    if not isinstance(report, dict):
        note = sandbox.limit_note(child.returncode)
        killed = f" (killed by {child.crashed_by_signal})" if child.crashed_by_signal and not note else ""
        return None, f"the build process died{killed}: " + trim_log(
            child.stderr or child.stdout or f"exit code {child.returncode}") + (f" ({note})" if note else ""), child.stdout
    outside = [p for p in _paths_in(report) if _below(p, child_dir) is None]
    if outside:  # the report names files we would read (cubins, PTX): only the build's own, no links
        return None, f"the build named files outside its folder or through links: {outside[0][:200]}", ""
    kernels = report.get("kernels") if report.get("ok") and isinstance(report.get("kernels"), list) else []
    problem = build_budget_problem([k for k in kernels if isinstance(k, dict)])
    if problem:  # before any copy: each named file costs the judge a copy and a disassembly
        return None, refused(problem), ""
    copies: dict[str, str] = {}  # what the report named -> the judge's copy (a file named twice is copied once)
    copied = 0  # bytes
    for k in kernels:
        for key in ("cubin", "ptx"):
            if not isinstance(k, dict) or not isinstance(k.get(key), str):
                continue
            if k[key] not in copies:
                if past_deadline():
                    return None, (f"the build ({what}) with the judge's copies of its files exceeded "
                                  f"{timeout_s:.0f} s + {POST_BUILD_SLACK_S:.0f} s{BUILD_TIMEOUT_MARK}"), ""
                data = untrusted.read_untrusted_below(child_dir, _below(k[key], child_dir),
                                                      min(64 << 20, BUILD_MAX_BYTES - copied + 1))
                if data is None:
                    return None, f"the build named a file that is not a regular file of its own: {k[key][:200]}", ""
                copied += len(data)
                if copied > BUILD_MAX_BYTES:
                    return None, refused(f"the files it names hold more than {BUILD_MAX_BYTES >> 20} MiB"), ""
                copies[k[key]] = str(untrusted.replace_file(workdir / f"k{len(copies)}.{key}", data))
            k[key] = copies[k[key]]
    if jit_cache and report.get("ok"):
        old = workdir / JIT_CACHE_COPY
        untrusted.remove_untrusted_tree(old)  # a rebuild in a kept folder
        try:
            untrusted.copy_untrusted_tree(child_dir / jit_cache, old, max_files=JIT_CACHE_MAX_FILES,
                                          max_bytes=JIT_CACHE_MAX_BYTES, strict=True)
        except untrusted.OverLimit as e:
            return None, refused(f"its JIT cache ({jit_cache} in its home) has {e}"), ""
    return report, None, child.stdout


# The judge's copy of a build's JIT cache (what the runner starts from): the experts' hold at most 24 files and
# 2.2 MB (docs/robustness.md); a cache past these, or deeper or wider than untrusted.walk_untrusted goes, is refused.
JIT_CACHE_MAX_FILES = 1000
JIT_CACHE_MAX_BYTES = 128 << 20


def _below(path, folder: Path) -> str | None:
    """path relative to folder when it names something below it by its spelling alone (absolute, no '..'),
    else None. What is there is then opened component by component without following links."""
    if not isinstance(path, str) or not os.path.isabs(path) or ".." in Path(path).parts:
        return None
    rel = os.path.relpath(os.path.normpath(path), folder)
    return None if rel == "." or rel.startswith("..") else rel


_FILE_KEYS = ("cubin", "ptx")


def _paths_in(value) -> list[str]:
    """The files a build report names for us to read (its cubins and PTX), wherever they sit in the JSON: walked
    with a list, not by recursion (a report nested thousands deep is the candidate's to write)."""
    found, todo = [], [("", value)]
    while todo:
        key, v = todo.pop()
        if isinstance(v, dict):
            todo.extend(v.items())
        elif isinstance(v, list):
            todo.extend((key, x) for x in v)
        elif key in _FILE_KEYS and isinstance(v, str):
            found.append(v)
    return found
