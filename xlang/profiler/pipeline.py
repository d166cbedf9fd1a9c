"""The verdict pipeline: a Job (what is judged), the Stage protocol, the ordered stage list and its scheduler.

STAGES is the pipeline: `xlang eval` (xlang.profiler.evaluate.evaluate) and the agent loop (xlang.agent.runtime.
assess, which compare and the Ray path go through) run it with run_stages(). The static stages (screen, build,
census) run once per candidate, where it is built; the GPU stages run on a GPU of the architecture only
(Context.start_gpu finds one and writes the check's judge plan), each in a judge process of its own
(xlang.profiler.stages.launch). A stage's failure is a (category, detail); the verdict is the first of them in
xlang.verdict.STAGE_ORDER (evaluate.decide).

How the stages run (the declaration is the schedule):
  - in list order, a stage that `stops` ends the pipeline with its failure (screen, build, check);
  - a stage that does not stop keeps its failure for the end (census, memcheck, ncu);
  - a stage whose `beside` names another starts with it when options.overlap (memcheck and ncu beside the
    check's correctness trials), else right after it passed; the stage it runs beside is told once they have all
    left the GPU (`others_left`: the check opens its timing gate), or sooner when it failed;
  - `record` runs in the scheduler's thread, in list order, after the stage's work: it moves what the work found
    into the verdict and returns the failure that stands.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Protocol

from xlang import verdict as V
from xlang.profiler.judge.plan import Plan
from xlang.profiler.options import EvalOptions
from xlang.profiler.stages import build, census, check, memcheck, ncu, screen
from xlang.profiler.stages.base import Failure, StageBase  # noqa: F401 - StageBase: what a stage subclasses


@dataclass(frozen=True)
class Job:
    """What is judged: names and plain values only, so that it crosses a process boundary (to_spec / from_spec: the
    Ray verdict task) and every part agrees on it."""

    task: str
    lang: str
    arch: str
    shape: tuple[tuple[str, Any], ...]
    required: tuple[str, ...]
    options: tuple[tuple[str, Any], ...] = ()

    @classmethod
    def of(cls, task, lang: str, arch, shape: dict, required=None, options: dict | None = None) -> Job:
        """From a task and an arch (objects or names); required: the task's families for the arch by default."""
        if required is None:
            required = task.required_for(arch)
        return cls(getattr(task, "name", task), lang, getattr(arch, "name", arch), tuple(dict(shape).items()),
                   tuple(required), tuple(dict(options or {}).items()))

    @property
    def shape_dict(self) -> dict:
        return dict(self.shape)

    @property
    def options_dict(self) -> dict:
        return dict(self.options)

    def to_spec(self) -> dict:
        return {"task": self.task, "lang": self.lang, "arch": self.arch, "shape": self.shape_dict,
                "required": list(self.required), "options": self.options_dict}

    @classmethod
    def from_spec(cls, spec: dict) -> Job:
        return cls(spec["task"], spec["lang"], spec["arch"], tuple(dict(spec["shape"]).items()),
                   tuple(spec["required"]), tuple(dict(spec.get("options") or {}).items()))


class Stage(Protocol):
    name: str
    categories: tuple[str, ...]  # what it can conclude
    runs: str  # what it runs, in words
    gpu: bool  # runs only on a GPU of the architecture
    stops: bool  # its failure ends the pipeline (else it is kept for the end)
    beside: str | None  # the stage it runs beside (options.overlap), else None: after the stages before it

    def enabled(self, job: Job, ctx: Context) -> bool: ...
    def run(self, job: Job, ctx: Context) -> Failure | None: ...
    def record(self, job: Job, ctx: Context, failure: Failure | None) -> Failure | None: ...
    def others_left(self, job: Job, ctx: Context, failed: bool) -> None: ...


@dataclass
class Context:
    """One evaluation's live state, shared by its stages (the Job holds only what is judged)."""

    task: Any
    arch: Any
    backend: Any
    options: EvalOptions
    verdict: V.Verdict
    workdir: Path
    source: str
    build: Any = None  # the BuildResult: given, or the build stage's
    build_dir: Path | None = None  # where the build stage builds (default workdir / "build")
    build_fn: Callable | None = None  # (code, lang, task, arch, shape, workdir=) -> BuildResult; None: build_candidate
    start_gpu: Callable[[Job, Context], bool] | None = None  # finds the GPU, writes `plan`; False: none here
    on_stage: Callable[[str], None] | None = None  # told each stage's name before it runs (progress displays)
    stage_seconds: dict = field(default_factory=dict)
    pool: ThreadPoolExecutor = field(default_factory=lambda: ThreadPoolExecutor(3))
    held: list = field(default_factory=list)  # GPU locks, released by the verdict's finish
    cancel: dict = field(default_factory=dict)  # stage name -> Event, set when the verdict is known
    done: dict = field(default_factory=dict)  # stage name -> Event, set when its work ended
    off_gpu: dict = field(default_factory=dict)  # stage name -> Event a stage may set once it has left the GPU
    reports: dict = field(default_factory=dict)  # stage name -> what its work left for its record
    plan: Plan | None = None  # the check's judge plan (start_gpu); each GPU stage's plan() derives its own
    gpu: dict | None = None
    gate: Any = None  # the check's TimingGate, when stages run beside it
    check_limit_s: float = 0.0
    seed: int = 0


@dataclass
class Result:
    failures: list  # weighed in this order on a tie: the stopping one, the GPU stages' (list order), the static ones'
    stopped: bool  # a stage that stops failed: failures[0] is its failure
    ran_gpu: bool  # the GPU stages ran (else none of this architecture's GPUs was here)


STATIC_STAGES = (screen.STAGE, build.STAGE, census.STAGE)
GPU_STAGES = (check.STAGE, memcheck.STAGE, ncu.STAGE)
STAGES = STATIC_STAGES + GPU_STAGES
STAGE_NAMES = tuple(s.name for s in STAGES)
CONCLUDES = tuple(dict.fromkeys(c for s in STAGES for c in s.categories))  # every category a stage can conclude


def _run_timed(stage: Stage, job: Job, ctx: Context) -> Failure | None:
    """A GPU stage's work in a worker thread: its seconds, then its done event."""
    t0 = time.monotonic()
    try:
        return stage.run(job, ctx)
    finally:
        ctx.stage_seconds[stage.name] = round(time.monotonic() - t0, 2)
        ctx.done[stage.name].set()


def run_stages(stages, job: Job, ctx: Context, static_failures=()) -> Result:
    """Run `stages` as declared (the module's docstring). static_failures: the kept failures of static stages that
    ran elsewhere (evaluate's options.static)."""
    for s in stages:
        for events in (ctx.cancel, ctx.done, ctx.off_gpu):
            events.setdefault(s.name, threading.Event())
    static_kept, gpu_kept, finished = list(static_failures), [], set()
    for stage in stages:
        if stage.name in finished:
            continue
        if stage.gpu and ctx.plan is None and not (ctx.start_gpu and ctx.start_gpu(job, ctx)):
            return Result(static_kept, stopped=False, ran_gpu=False)
        if ctx.on_stage:
            ctx.on_stage(stage.name)
        followers = [s for s in stages if s.beside == stage.name]
        started = [s for s in followers if s.enabled(job, ctx)]
        side: list = []
        if not stage.gpu:
            failure = stage.run(job, ctx)
        else:
            lead = ctx.pool.submit(_run_timed, stage, job, ctx)
            side = [ctx.pool.submit(_run_timed, s, job, ctx) for s in started] if ctx.options.overlap else []
            if side:
                # What runs beside it leaves the GPU (its work is done, or it said so sooner: ncu, once its profile
                # is taken) before the stage's later part (the check's timing) starts; the stage's failure ends the wait.
                while not all(f.done() or ctx.off_gpu[s.name].is_set() for s, f in zip(started, side)):
                    if lead.done() and (lead.exception() or lead.result()):
                        break
                    time.sleep(0.02)
                else:
                    stage.others_left(job, ctx, failed=any(f.result() for f in side if f.done()))
            failure = lead.result()
        failure = stage.record(job, ctx, failure)
        if failure and stage.stops:
            return Result([failure] + gpu_kept + static_kept, stopped=True, ran_gpu=ctx.plan is not None)
        if failure:
            (gpu_kept if stage.gpu else static_kept).append(failure)
        if started and not side:
            side = [ctx.pool.submit(_run_timed, s, job, ctx) for s in started]
        works = dict(zip([s.name for s in started], side)) if started else {}
        for s in followers:  # in list order; one that is off records why it did not run
            kept = s.record(job, ctx, works[s.name].result() if s.name in works else None)
            if kept:
                (gpu_kept if s.gpu else static_kept).append(kept)
            finished.add(s.name)
    return Result(gpu_kept + static_kept, stopped=False, ran_gpu=ctx.plan is not None)


def first(failures) -> Failure:
    """The failure that decides: the first in xlang.verdict.STAGE_ORDER (the earlier one on a tie)."""
    return min(failures, key=lambda f: V.STAGE_ORDER.index(f[0]))


def static_conclusion(failures, note: str, arch, required) -> Failure:
    """The verdict when the GPU stages did not run (note: why): the static stages' first failure, else static_ok."""
    if failures:
        category, detail = first(failures)
        return category, detail + "; " + note
    return V.STATIC_OK, f"compiled for {arch.sm} with {', '.join(required)} present; {note}"


# ---- the pipeline's own writes to the verdict; every other write is a stage's record (stages/*.py) ------------

def record_static_findings(verdict: V.Verdict, build: dict, census_ok: bool | None) -> None:
    """What the static stages found where the candidate was built (options.static: xlang.agent.runtime.assess)."""
    verdict.build, verdict.compiled, verdict.census_ok = build, True, census_ok


def record_not_run(verdict: V.Verdict, note: str) -> None:
    """The GPU stages did not run, and why (no GPU of the architecture here, runtime off, the runtime failed)."""
    verdict.runtime_note = note


def record_gpu_start(verdict: V.Verdict, isolation: str, gpu: dict, **fingerprint) -> None:
    """The GPU stages start (Context.start_gpu): the jail level here, the GPU, the shapes, trials and seeds drawn."""
    verdict.runtime_ran = True
    verdict.isolation = isolation
    verdict.fingerprint["gpu"] = gpu
    shapes, trials = fingerprint.pop("shapes"), fingerprint.pop("trials")
    verdict.fingerprint.update(shapes=shapes, trials=trials, observer=fingerprint.pop("observer"),
                               observer_note=fingerprint.pop("observer_note"), isolation=isolation, **fingerprint)


def record_retry(verdict: V.Verdict, stage_seconds: dict, first_detail: str, quiet: dict) -> None:
    """A verdict judged again after a harness_error (evaluate): the static stages' seconds, why and how long the
    GPU was waited for."""
    verdict.fingerprint["stage_seconds"] = stage_seconds
    verdict.fingerprint["harness_retry"] = {"first": first_detail[:2000], **quiet}


def conclude(verdict: V.Verdict, category: str, detail: str, seconds: float | None = None) -> None:
    """The verdict is known (evaluate.finish): its category and detail, and what follows from them."""
    verdict.category, verdict.detail = category, detail
    if category == V.HARNESS_ERROR:
        V.not_judged(verdict, detail)
    if category in (V.FORBIDDEN_CALL, V.INCORRECT, V.HOST_COMPUTE):
        # Wherever found (the ncu stage too, after the timing): a vendor's work, a wrong answer under the
        # profiler or an answer computed off the GPU is not a correct candidate, and its timing is never a
        # speedup of one.
        verdict.correct = False
    if category == V.HOST_COMPUTE:
        verdict.detail = detail + host_evidence_text(verdict)
    if seconds is not None:
        verdict.fingerprint["seconds"] = seconds


def settle(verdict: V.Verdict, failure: Failure) -> None:
    """A conclusion reached without the GPU stages (the agent loop's static paths): its category and detail only."""
    verdict.category, verdict.detail = failure


def record_toolchain(verdict: V.Verdict, versions: dict, replace: bool) -> None:
    """The toolchain the verdict was made with (xlang.agent.buildinfo.toolchain_versions): the fingerprint's
    only entry after the static stages (replace), else kept where the runtime's verdict has it already."""
    if replace:
        verdict.fingerprint = {"toolchain": versions}
    else:
        verdict.fingerprint = {**(verdict.fingerprint or {})}
        verdict.fingerprint.setdefault("toolchain", versions)


def record_build_resources(verdict: V.Verdict, build: dict, resources: list) -> None:
    """The registers and spills of each kernel (xlang.agent.buildinfo.kernel_resources) in the verdict's build:
    `build` is the static stages' record of it, for a verdict (the runtime's) that has none or has it without them."""
    if verdict.build is None:
        verdict.build = build
    elif verdict.build is build:
        build["resources"] = resources
    elif "resources" not in verdict.build:
        verdict.build = {**verdict.build, "resources": resources}


def host_evidence_text(verdict: V.Verdict) -> str:
    """What the observed calls showed of a host round trip (judge/observed.py host_evidence), for a host_compute detail."""
    parts = []
    for where, ev in (("the correctness trials", (verdict.correctness or {}).get("host")),
                      ("the timed calls", (verdict.timing or {}).get("candidate_host"))):
        if not ev:
            continue
        said = []
        if ev.get("dtoh_bytes"):
            said.append(f"device-to-host copies of up to {ev['dtoh_bytes']:,} bytes per call (its inputs: "
                        f"{ev.get('input_bytes', 0):,} bytes)")
        if ev.get("cpu_ms") is not None and ev.get("gpu_ms") is not None:
            said.append(f"host CPU time {ev['cpu_ms']:.3g} ms per call against {ev['gpu_ms']:.3g} ms of GPU time")
        if said:
            parts.append(f"in {where}: " + "; ".join(said))
    return ("; evidence " + "; ".join(parts)) if parts else ""
