"""Judging one candidate: build + static census here (no GPU needed), then the pluggable runtime step.

The runtime step is a `Runtime`: `available` says whether it can run this architecture's code, `note` why not,
and `evaluate(source, build, lang, task, arch, shape, options) -> Verdict` runs it. Built in:
  none   never runs ("not run (--profiler none)")
  local  xlang.profiler.evaluate.evaluate(build, lang, task, arch, shape, options) when a GPU of the arch's
         compute capability is on this machine
  URL    an `xlang worker` (xlang.remote.RemoteProfiler), which receives the source
Others hook in with register_runtime(name, factory) (factory(spec, arch) -> Runtime) and `--profiler NAME`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from xlang import verdict as V
from xlang.errors import XlangError


@dataclass
class Runtime:
    name: str
    available: bool
    note: str = ""  # why it does not run, e.g. "not run (no sm_100a device)"
    evaluate: Callable | None = None  # (source, build, lang, task, arch, shape, options) -> Verdict
    info: dict = field(default_factory=dict)


_FACTORIES: dict[str, Callable[[str, object], Runtime]] = {}


def register_runtime(name: str, factory: Callable[[str, object], Runtime]) -> None:
    _FACTORIES[name] = factory


def _no_runtime(spec: str, arch) -> Runtime:
    return Runtime("none", False, "not run (--profiler none)")


def _local_runtime(spec: str, arch) -> Runtime:
    from xlang.profiler.gpu import gpus_for

    gpus = gpus_for(arch)
    if not gpus:
        return Runtime("local", False, f"not run (no {arch.sm} device)")
    try:
        from xlang.profiler.evaluate import evaluate
    except ImportError as e:
        return Runtime("local", False, f"not run (the profiler xlang.profiler.evaluate is not available: {e})")

    def run(source, build, lang, task, arch_, shape, options):
        # The evaluation's files go beside the turn's build (a remote worker keeps its own).
        options.setdefault("workdir", str(Path(build.workdir) / "eval"))
        return evaluate(build, lang, task, arch_, shape, options)

    return Runtime("local", True, evaluate=run, info={"gpus": gpus})


def _remote_runtime(spec: str, arch) -> Runtime:
    try:
        from xlang.remote import RemoteProfiler
    except ImportError as e:
        raise XlangError(f"--profiler {spec}: the remote worker client (xlang.remote) is not available: {e}") from None
    client = RemoteProfiler(spec)
    health = client.health()  # unreachable: XlangError now, before any work
    if not client.supports(arch):
        return Runtime("remote", False, f"not run (no {arch.sm} device at {client.url})", info={"health": health})

    def run(source, build, lang, task, arch_, shape, options):
        return client.evaluate(source, lang, task, arch_, shape, options)

    return Runtime("remote", True, evaluate=run, info={"url": client.url, "health": health})


register_runtime("none", _no_runtime)
register_runtime("local", _local_runtime)


def make_runtime(spec: str, arch) -> Runtime:
    if spec in _FACTORIES:
        return _FACTORIES[spec](spec, arch)
    if "://" in spec or ":" in spec:
        return _remote_runtime(spec, arch)
    raise XlangError(f"unknown profiler '{spec}' (known: {', '.join(_FACTORIES)}, or a worker URL http://HOST:PORT)")


# ---------------------------------------------------------------------------------------------- judging


@dataclass
class Judgement:
    verdict: V.Verdict
    build: object | None  # BuildResult
    build_seconds: float = 0.0
    eval_seconds: float = 0.0


def judge(code: str | None, lang: str, task, arch, shape: dict, runtime: Runtime, workdir: Path,
          no_code_note: str = "", options: dict | None = None) -> Judgement:
    """Category order as in xlang.verdict: no_code -> compile_error -> forbidden_call -> missing_instructions ->
    (runtime: the profiler's verdict) | static_ok."""
    from xlang.backend import build_candidate, get_backend

    base = dict(lang=lang, task=task.name, arch=arch.name, shape=dict(shape), runtime_note=runtime.note)
    if code is None:
        return Judgement(V.Verdict(V.NO_CODE, detail=no_code_note or "no code block found", **base), None)
    backend = get_backend(lang)
    start = time.monotonic()
    build = build_candidate(code, lang, task, arch, shape, workdir=workdir)
    build_s = time.monotonic() - start
    bd = build.to_dict()
    if not build.ok:
        return Judgement(V.Verdict(V.COMPILE_ERROR, detail=build.error or "the build failed", build=bd, **base),
                         build, build_s)
    reasons = backend.screen(code)
    if reasons:
        return Judgement(V.Verdict(V.FORBIDDEN_CALL, detail="; ".join(reasons), build=bd, **base), build, build_s)
    census = build.census
    if census is not None and census.missing:
        detail = (f"Missing: {', '.join(census.missing)}"
                  + (f" (present: {', '.join(census.present)})" if census.present else "") + ".")
        return Judgement(V.Verdict(V.MISSING_INSTRUCTIONS, detail=detail, build=bd, **base), build, build_s)
    if not runtime.available:
        return Judgement(V.Verdict(V.STATIC_OK, detail=f"compiled for {arch.sm}; required families present",
                                   build=bd, **base), build, build_s)
    start = time.monotonic()
    try:
        verdict = runtime.evaluate(code, build, lang, task, arch, shape, dict(options or {}))
        if isinstance(verdict, dict):
            verdict = V.Verdict.from_dict(verdict)
    except Exception as e:  # noqa: BLE001 - the evaluator's failure is ours, not the candidate's
        verdict = V.Verdict(V.STATIC_OK, detail=f"compiled for {arch.sm}; required families present", build=bd,
                            **{**base, "runtime_note": f"not run (the {runtime.name} profiler failed: "
                                                       f"{type(e).__name__}: {e})"})
    if verdict.build is None:
        verdict.build = bd
    return Judgement(verdict, build, build_s, time.monotonic() - start)
