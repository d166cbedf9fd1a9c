"""Judging one candidate: build + static census here (no GPU needed), then the pluggable runtime step.

The runtime step is a `Runtime`: `available` says whether it can run this architecture's code, `note` why not,
and `evaluate(source, build, lang, task, arch, shape, options) -> Verdict` runs it. Built in:
  none   never runs ("not run (--profiler none)")
  local  xlang.profiler.evaluate.evaluate(build, lang, task, arch, shape, options) when a GPU of the arch's
         compute capability is on this machine
  ray    `--ray [ADDRESS]` (xlang.scaleout): builds as Ray CPU tasks, verdicts as Ray GPU tasks on a node that
         declares the architecture's SM; spec 'ray' (a local Ray) or 'ray:ADDRESS'
A Runtime's `build` (when set) replaces build_candidate for the static build (Ray runs it as a CPU task).
Others hook in with register_runtime(name, factory) (factory(spec, arch) -> Runtime) and `--profiler NAME`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from xlang import verdict as V
from xlang.agent.buildinfo import kernel_resources, toolchain_versions
from xlang.backend import get_backend
from xlang.errors import XlangError
from xlang.profiler.gpu import gpus_for
from xlang.profiler.options import EvalOptions
from xlang.profiler.pipeline import (STATIC_STAGES, Context, Job, record_build_resources, record_not_run,
                                     record_toolchain, run_stages, settle, static_conclusion)
from xlang.runtimes import Runtime
from xlang.scaleout import ray_runtime  # Ray itself is imported only when a Ray runtime is made


_FACTORIES: dict[str, Callable[[str, object], Runtime]] = {}


def register_runtime(name: str, factory: Callable[[str, object], Runtime]) -> None:
    _FACTORIES[name] = factory


def _no_runtime(spec: str, arch) -> Runtime:
    return Runtime("none", False, "not run (--profiler none)")


def _local_runtime(spec: str, arch) -> Runtime:
    gpus = gpus_for(arch)
    if not gpus:
        return Runtime("local", False, f"not run (no {arch.sm} device)")
    try:  # lazy: the profiler pulls the judge's modules in, needed only where a GPU of the arch is
        from xlang.profiler.evaluate import evaluate
    except ImportError as e:
        return Runtime("local", False, f"not run (the profiler xlang.profiler.evaluate is not available: {e})")

    def run(source, build, lang, task, arch_, shape, options):
        # The evaluation's files go beside the turn's build.
        options.setdefault("workdir", str(Path(build.workdir) / "eval"))
        return evaluate(build, lang, task, arch_, shape, options)

    return Runtime("local", True, evaluate=run, info={"gpus": gpus})


register_runtime("none", _no_runtime)
register_runtime("local", _local_runtime)


def make_runtime(spec: str, arch) -> Runtime:
    if spec in _FACTORIES:
        return _FACTORIES[spec](spec, arch)
    if spec == "ray" or spec.startswith("ray:"):
        return ray_runtime(spec, arch)
    if "://" in spec or ":" in spec:
        raise XlangError(f"--profiler {spec}: the HTTP worker (xlang worker) is gone; put the GPU machines in a Ray "
                         "cluster and pass --ray ADDRESS (README: Scale-out on Ray)")
    raise XlangError(f"unknown profiler '{spec}' (known: {', '.join(_FACTORIES)}; GPUs elsewhere: --ray ADDRESS)")


# ---------------------------------------------------------------------------------------------- assessing


@dataclass
class Assessment:
    verdict: V.Verdict
    build: object | None  # BuildResult
    build_seconds: float = 0.0
    eval_seconds: float = 0.0


def _fields(verdict: V.Verdict, **values) -> V.Verdict:
    """Set the verdict's scoring fields (compiled, census_ok, ...) that this Verdict has."""
    for name, value in values.items():
        if name in V.Verdict.__dataclass_fields__:
            setattr(verdict, name, value)
    return verdict


def assess(code: str | None, lang: str, task, arch, shape: dict, runtime: Runtime, workdir: Path,
           no_code_note: str = "", options: dict | None = None, on_stage=None) -> Assessment:
    """One candidate through the pipeline (xlang.profiler.pipeline): its static stages (screen, build, census) here,
    once, the same as `xlang eval` runs them; then, when the runtime is available, its GPU stages through the
    runtime (local, or a Ray GPU task), told what the static stages concluded.

    Every candidate that compiles (and passes the static screen) goes to the runtime when one is available,
    whatever its census says: correctness is measured for it, and the census is the verdict's own field
    (a candidate correct without the required families is correct, but not correct with the target
    instructions). Without a runtime, the static stages' first failure (missing_instructions, or incorrect for
    fp16 accumulators) or static_ok is the verdict. Each verdict records the toolchain it was made with
    (fingerprint.toolchain) and its build carries the registers and spills of each kernel (build.resources).
    on_stage(name) is told 'building', then 'evaluating' when the runtime judges it (progress displays)."""
    base = dict(lang=lang, task=task.name, arch=arch.name, shape=dict(shape), runtime_note=runtime.note)
    if code is None:
        return Assessment(_fields(V.Verdict(V.NO_CODE, detail=no_code_note or "no code block found", **base),
                                  compiled=False), None)
    stage = on_stage or (lambda name: None)
    job = Job.of(task, lang, arch, shape)
    # the suite asked for, also where no runtime judges it (evaluate() says the same)
    suite = {**task.suite(options["suite"]).describe(), "summary": None} if (options or {}).get("suite") else None
    verdict = V.Verdict(V.OK, suite=suite, **base)
    ctx = Context(task, arch, get_backend(lang), EvalOptions(), verdict, Path(workdir), code, build_dir=Path(workdir),
                  build_fn=runtime.build, on_stage=lambda name: stage("building") if name == "build" else None)
    result = run_stages(STATIC_STAGES, job, ctx)
    build, build_s = ctx.build, ctx.stage_seconds.get("build", 0.0)
    if build is not None:
        record_toolchain(verdict, toolchain_versions(), replace=True)
    if result.stopped:
        settle(verdict, result.failures[0])
        return Assessment(verdict, build, build_s)
    bd = verdict.build
    try:
        resources = kernel_resources(bd)
    except Exception:  # noqa: BLE001 - a missing register count never fails a judgement
        resources = []
    record_build_resources(verdict, bd, resources)
    if not runtime.available:
        settle(verdict, static_conclusion(result.failures, runtime.note, arch, job.required))
        return Assessment(verdict, build, build_s)
    stage(f"evaluating ({runtime.name})")
    start = time.monotonic()
    static = {"failures": [list(f) for f in result.failures], "census_ok": verdict.census_ok}
    try:
        verdict = runtime.evaluate(code, build, lang, task, arch, shape, {**dict(options or {}), "static": static})
        if isinstance(verdict, dict):
            verdict = V.Verdict.from_dict(verdict)
    except Exception as e:  # noqa: BLE001 - the evaluator's failure is ours, not the candidate's
        note = f"not run (the {runtime.name} profiler failed: {type(e).__name__}: {e})"
        record_not_run(verdict, note)
        settle(verdict, static_conclusion(result.failures, note, arch, job.required))
    record_build_resources(verdict, bd, bd["resources"])  # the runtime's verdict: the build as judged here
    record_toolchain(verdict, toolchain_versions(), replace=False)
    return Assessment(verdict, build, build_s, time.monotonic() - start)
