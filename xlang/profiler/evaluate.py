"""evaluate(): judge one candidate and return a Verdict.

The stages, declared once (xlang.profiler.pipeline.STAGES, a module each in xlang/profiler/stages/) and run by its
scheduler for `xlang eval`, the agent loop and the Ray path:

  screen    static screen of the source (forbidden_call)
  build     compile for the architecture with no GPU; Python languages run the candidate's code for it in a
            jail (compile_error)
  census    the required instruction families in the SASS: recorded (census_ok) and fed back, but it gates
            nothing: every candidate that compiles is run, as PTXBench scores; MMAs that accumulate in fp16
            where the contract says fp32 make it incorrect (decided in the declared order, with the rest)
  -- on a GPU of the architecture's compute capability only (else static_ok / missing_instructions, not run):
  check     the judge (xlang.profiler.judge, a trusted process) runs the candidate in its jail on shared
            buffers: correctness on shapes drawn for this evaluation with several value kinds; every kernel of
            the candidate's process seen by the CUPTI observer (forbidden_call for vendor kernels or kernels
            from modules the candidate did not build); then timing against the vendor baseline and the task's
            peers (public kernels, when installed; one that cannot run is recorded with why, never a failure)
            (runtime_error, timeout, incorrect, memory_error, forbidden_call)
  memcheck  the candidate's process under compute-sanitizer memcheck, its log in the judge's folder
            (memory_error; a memcheck that does not finish is a failure, never a pass)
  (every GPU stage: buffers between unmapped guard ranges, memory_error when an access faults; a second GPU
  process of the candidate's, forbidden_call; verdict.output keeps the end of what the candidate printed)
  ncu       the candidate's process under Nsight Compute: kernels whose SASS is no module of the candidate's
            toolchain, its build or its JIT cache (forbidden_call); fp16 accumulators executed (incorrect); its own
            kernels' FLOPs against the task's (the GPU computed the answer, else host_compute); the required
            families executed, their share of the executed math and their FLOPs against the task's (not_executed)

memcheck and ncu run beside the check's correctness trials (Stage.beside); its timing waits at a gate until they
have left the GPU (ncu's report is read while the timing runs: a failure found there still decides the verdict).
The parent never imports torch and never touches the GPU itself.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import tempfile
import time
from pathlib import Path

import xlang
from xlang import verdict as V
from xlang.backend import BuildResult, get_backend
from xlang.profiler import gpu as gpu_mod
from xlang.profiler.options import EvalOptions, coerce_options
from xlang.profiler.gpuwatch import wait_quiet
from xlang.profiler.judge.plan import Plan, TimingPlan
from xlang.profiler.pipeline import (STAGES, Context, Failure, Job, Result, conclude, first, record_gpu_start,
                                     record_not_run, record_retry, record_static_findings, run_stages,
                                     static_conclusion)
from xlang.profiler.stages.ncu import NCU_ATTEMPTS
from xlang.profiler.stages.peers import check_limit, peer_specs
from xlang.profiler.stages.timing import TimingGate
from xlang.sandbox import level as isolation_level
from xlang.untrusted import copy_untrusted_file, replace_file
from xlang.task import peer_library_folders


def evaluate(source_or_build, lang: str, task, arch, shape: dict | None = None,
             options: EvalOptions | None = None) -> V.Verdict:
    """Judge a candidate (source text, a Path, or a BuildResult) for one task on one architecture. With
    options.static (what the static stages concluded where the candidate was built: xlang.agent.runtime.assess),
    a BuildResult goes to the GPU stages only."""
    options = coerce_options(options)
    task, arch = _coerce(task, arch)
    backend = get_backend(lang)
    started = time.monotonic()
    workdir = Path(options.workdir or tempfile.mkdtemp(prefix=f"xlang-eval-{lang}-{arch.name}-"))
    workdir.mkdir(parents=True, exist_ok=True)
    os.chmod(workdir, 0o700)
    label = options.label or (Path(source_or_build).stem if isinstance(source_or_build, Path) else "candidate")

    if isinstance(source_or_build, BuildResult):
        build = source_or_build
        shape = shape or build.shape
        src = Path(build.workdir) / f"candidate{backend.suffix}"
        source = src.read_text() if src.is_file() else ""
    else:
        build = None
        source = Path(source_or_build).read_text() if isinstance(source_or_build, Path) else str(source_or_build)
        shape = shape or task.shape()
    job = Job.of(task, lang, arch, shape, options.require or task.required_for(arch))
    seed = options.seed if options.seed is not None else random.SystemRandom().randrange(1, 2**31 - 10**6)
    tolerance = dict(task.tolerance)  # what "correct" meant (it may change per task)
    if task.output_tolerance or task.kind_output_scale:
        tolerance.update(outputs=task.output_tolerance, kind_scales=task.kind_output_scale)
    if task.error_bound is not None:  # the per-element bound on top of atol / rtol, in words
        tolerance["error_bound"] = task.error_bound_rule
    stage_seconds: dict = {}
    fingerprint = {"harness_version": xlang.HARNESS_VERSION, "xlang": xlang.__version__, "seed": seed,
                   "workdir": str(workdir), "stages": [s.name for s in STAGES], "tolerance": tolerance,
                   "stage_seconds": stage_seconds}
    # which suite was asked, even where runtime cannot run; the check stage's record adds its figures
    suite = {**task.suite(options.suite).describe(), "summary": None} if options.suite else None
    verdict = V.Verdict(category=V.OK, lang=lang, task=task.name, arch=arch.name, shape=dict(shape),
                        fingerprint=fingerprint, suite=suite)
    ctx = Context(task, arch, backend, options, verdict, workdir, source, build, start_gpu=start_gpu, seed=seed,
                  stage_seconds=stage_seconds)
    static_stages, gpu_stages = [s for s in STAGES if not s.gpu], [s for s in STAGES if s.gpu]
    if options.static is not None and build is not None:  # screen, build and census ran where it was built
        record_static_findings(verdict, build.to_dict(), options.static.get("census_ok"))
        static = [tuple(f) for f in options.static.get("failures", ())]
    else:
        result = run_stages(static_stages, job, ctx)
        if result.stopped:
            return finish(ctx, *decide(result, job, ctx), started=started, label=label)
        static = result.failures
    before_gpu = verdict.to_dict()  # what a retry starts from: the static stages' findings
    result = run_stages(gpu_stages, job, ctx, static)
    category, detail = decide(result, job, ctx)
    if category == V.HARNESS_ERROR and result.ran_gpu and options.harness_retries > 0:
        # Another process held the GPU while the candidate ran (not the candidate's: stages/launch.py): judged
        # once more, from the static stages' findings, when the GPU has been quiet a while.
        index = (ctx.gpu or {}).get("index") or 0
        release(ctx)
        quiet = wait_quiet(index)
        retry = V.Verdict.from_dict(before_gpu)
        ctx = Context(task, arch, backend, options, retry, workdir, source, ctx.build, start_gpu=start_gpu,
                      seed=seed, stage_seconds={s.name: ctx.stage_seconds[s.name] for s in static_stages
                                                if s.name in ctx.stage_seconds})
        record_retry(retry, ctx.stage_seconds, detail, quiet)
        result = run_stages(gpu_stages, job, ctx, static)
        category, detail = decide(result, job, ctx)
    return finish(ctx, category, detail, started=started, label=label)


def decide(result: Result, job: Job, ctx: Context) -> Failure:
    """The verdict's category and detail from what the stages found (the first failure in STAGE_ORDER)."""
    verdict = ctx.verdict
    if result.stopped:
        return first(result.failures)
    if not result.ran_gpu:
        return static_conclusion(result.failures, verdict.runtime_note, ctx.arch, job.required)
    census = [f for f in result.failures if f[0] == V.MISSING_INSTRUCTIONS]
    others = [f for f in result.failures if f[0] != V.MISSING_INSTRUCTIONS]
    if others:  # the first in the declared order, the census's failure included
        chosen = first(others + census)
        if census and chosen is census[0] and verdict.correct:
            # What PTXBench counts apart: correct, yet without the target instructions.
            chosen = (chosen[0], chosen[1] + f" (the candidate is correct; also: {others[0][1][:300]})")
        return chosen
    if census:
        return census[0][0], census[0][1] + " (the candidate is correct: " + _ok_detail(verdict, job.required) + ")"
    return V.OK, _ok_detail(verdict, job.required)


def finish(ctx: Context, category: str, detail: str, started: float, label: str) -> V.Verdict:
    """The verdict is known: every stage still running is stopped, the GPU's lock released, the verdict written."""
    verdict = ctx.verdict
    release(ctx)
    conclude(verdict, category, detail, round(time.monotonic() - started, 2))
    try:
        replace_file(ctx.workdir / "verdict.json", json.dumps(verdict.to_dict(), indent=1, default=str))
        _archive(ctx.workdir, ctx.options, label)
    except OSError:
        pass
    return verdict


def release(ctx: Context) -> None:
    """Every stage still running is stopped, the timing gate closed, the stages' threads joined, the GPU's lock
    released (once the verdict is known, or before a retry)."""
    for event in ctx.cancel.values():
        event.set()
    if ctx.gate is not None:
        ctx.gate.open(go=False)
    ctx.pool.shutdown(wait=True)
    for lock in ctx.held:
        lock.release()
    ctx.held.clear()


def _coerce(task, arch):
    from xlang.archs import get_arch
    from xlang.task import get_task

    return (get_task(task) if isinstance(task, str) else task), (get_arch(arch) if isinstance(arch, str) else arch)


def start_gpu(job: Job, ctx: Context) -> bool:
    """Before the first GPU stage: the GPU of the architecture (False when none is here, and why in the verdict),
    the shapes and trials drawn for this evaluation, the check's judge plan, the timing gate, the GPU's lock."""
    options, task, arch, backend, verdict = ctx.options, ctx.task, ctx.arch, ctx.backend, ctx.verdict
    build, workdir, seed, lang = ctx.build, ctx.workdir, ctx.seed, job.lang
    gpu = gpu_mod.find_gpu(arch) if options.run != "never" else None
    if gpu is None:
        record_not_run(verdict, "not run (runtime disabled)" if options.run == "never" else
                       f"not run (no GPU of compute capability {arch.compute_capability / 10:.1f} here)")
        return False
    # ---- runtime: only on a GPU of the architecture's compute capability
    rng = random.Random(seed)
    shapes = options.shapes or task.draw_shapes(job.shape_dict, rng, options.drawn_shapes, fixed=options.fixed)
    kinds = list(getattr(task, "input_kinds", ("normal",)))
    suite = task.suite(options.suite).describe() if options.suite else None
    trials = correctness_trials(shapes, suite, kinds, seed, options.trials)
    smallest = min(shapes, key=lambda s: task.flops(s))
    drawn = [s for s in shapes[1:] if s != smallest]
    memcheck_trials = [(smallest, "normal", seed + 500)] + ([(max(drawn, key=task.flops), kinds[-1], seed + 501)]
                                                             if drawn else [])
    library, observer_note = _observer_library()
    timing_seed = options.timing_seed if options.timing_seed is not None else \
        random.SystemRandom().randrange(1, 2**31 - 10**6)
    load = build.load_path
    readable = [str(Path(load).resolve())]  # the file the runner loads: nothing else of the build folder
    peers = peer_specs(task, options) if options.timing else []
    timing = TimingPlan(enabled=options.timing, budget_s=options.timing_budget_s, seed=timing_seed,
                        peer_budget_s=options.peer_timeout_s, rest_ms=float(options.timing_rest_ms))
    ctx.check_limit_s = check_limit(options, peers) + (len(suite["shapes"]) * SUITE_SHAPE_S if suite else 0)
    side_by_side = options.overlap and (options.memcheck or options.ncu)
    if side_by_side and options.timing:
        ctx.gate = TimingGate(workdir, ctx.check_limit_s)
        longest = options.memcheck_timeout_s + len(NCU_ATTEMPTS) * options.ncu_timeout_s
        timing = dataclasses.replace(timing, gate=str(ctx.gate.path), gate_waiting=str(ctx.gate.waiting),
                                     gate_max_wait_s=longest + 60)
    plan = Plan(
        mode="check", lang=lang, task=task.name, arch=arch.name, device="cuda", gpu_index=gpu.get("index"),
        gpu_minor=gpu.get("minor"),  # its /dev/nvidiaN: the jailed runners see that GPU only
        hello={"op": "hello", "device": "cuda", "lang": lang, "load": str(Path(load).resolve())},
        readable=readable, seed_cache=str(backend.seed_cache(build) or ""),
        own_cubins=backend.own_cubins(build, workdir / "own-cubins"), observer_library=library,
        kernels_on_disk=backend.kernels_on_disk, jit_kernel_prefix=backend.jit_kernel_prefix,
        jit_cache=backend.jit_cache,
        hidden=[str(p) for p in peer_library_folders()],  # the candidate's jail never shows the peers
        build_kernels=[k.name for k in build.kernels],
        build_kernel_stems=sorted({k.meta["stem"] for k in build.kernels if k.meta.get("stem")}),
        build_modules=sorted({k.cubin for k in build.kernels if k.cubin}),  # its cubins / shared objects
        trials=trials, timed_shape=shapes[0], memcheck_trials=memcheck_trials,
        ncu_trials=[(shapes[0], "normal", seed + 700), (shapes[0], "normal", seed + 701)],
        timing=timing, peers=peers, call_timeout_s=options.check_timeout_s,
        suite=suite,  # the judge times each of its shapes after the timed one (candidate, then vendor)
    )
    ctx.held.append(gpu_mod.Exclusive(gpu).acquire())
    fresh = gpu_mod.from_nvml() or [gpu]
    record_gpu_start(verdict, isolation_level(), next((g for g in fresh if g.get("index") == gpu.get("index")), gpu),
                     shapes=shapes, trials=[[format_trial(t)] for t in trials], observer=library is not None,
                     observer_note=observer_note, seeds={"base": seed, "timing": timing_seed})
    ctx.plan, ctx.gpu = plan, gpu
    return True


def correctness_trials(shapes: list[dict], suite: dict | None, kinds: list[str], seed: int, per_shape: int) -> list:
    """[(shape, value kind, seed)]: per_shape trials of each shape (the timed one, then the drawn ones), then of each
    shape of the suite that is not among them, the value kinds cycling across shapes and trials."""
    checked = list(shapes)
    for s in (x["shape"] for x in (suite or {}).get("shapes", [])):
        if s not in checked:
            checked.append(s)
    return [(s, kinds[(i + t) % len(kinds)], seed + 1000 * i + t) for i, s in enumerate(checked)
            for t in range(per_shape)]


# What each suite shape adds to the check stage's limit: its correctness trials and both sides' timed calls. A
# budget, not a measurement: no suite has run on a GPU yet (at the default shape the H200 took 1.3-1.6 s to time
# the candidate and 1.2 s the vendor, README "Verdict time"; the largest suite shapes hold ~1 GB of inputs).
SUITE_SHAPE_S = 30.0


def _archive(workdir: Path, options: EvalOptions, label: str) -> None:
    target = options.archive or os.environ.get("XLANG_PROFILER_ARCHIVE")
    if not target:
        return
    dest = Path(target) / label
    dest.mkdir(parents=True, exist_ok=True)
    for p in workdir.iterdir():
        if p.is_file() and not p.is_symlink() and p.suffix in (".txt", ".csv", ".json") \
                and p.stat().st_size < (8 << 20):
            copy_untrusted_file(p, dest / p.name)


def format_trial(trial) -> str:
    shape, kind, seed = trial
    return f"{','.join(f'{k}={v}' for k, v in shape.items())} {kind} seed={seed}"


def _ok_detail(verdict: V.Verdict, required) -> str:
    parts = []
    c = verdict.correctness or {}
    parts.append(f"correct in {c.get('trials', 0)} trials on {len(c.get('shapes', []))} shapes "
                 f"(inputs: {', '.join(c.get('kinds', []))})")
    m = verdict.memcheck or {}
    parts.append("memcheck clean" if m.get("ran") else "memcheck not run")
    e = verdict.executed or {}
    if e.get("families"):
        parts.append("executed: " + ", ".join(f"{f} {e['families'].get(f, 0):,.0f} threads" for f in required))
        if e.get("tc_share") is not None:
            other = f", other math {e['non_tc_to_task']:.3f}x" if e.get("non_tc_to_task") is not None else ""
            parts.append(f"tensor cores did {e['tc_share']:.0%} of the math ({e.get('tc_to_task') or 0:.2f}x the "
                         f"task's FLOPs{other})")
    else:
        parts.append("executed instructions not verified")
    parts.append(gpu_compute_text(e))
    t = verdict.timing or {}
    if t.get("speedup"):
        rate = (f"{t['gbps']:.0f} vs {t['baseline_gbps']:.0f} GB/s, {t['bandwidth_fraction']:.0%} of the bandwidth"
                if t.get("roofline_bound") == "memory" and t.get("gbps") and t.get("baseline_gbps")
                and t.get("bandwidth_fraction") else f"{t['tflops']:.0f} vs {t['baseline_tflops']:.0f} TFLOP/s")
        parts.append(f"{t['speedup']:.3f}x {t['baseline_name']} ({rate})"
                     + (f" [BEYOND ROOFLINE ({t.get('roofline_bound') or 'compute'} floor): suspicious]"
                        if t.get("beyond_roofline") else ""))
    if t.get("baseline_error"):
        parts.append(t["baseline_error"])
    best = t.get("best_peer")
    if best and best.get("speedup"):
        idle = best.get("idle_ms") or 0.0
        # A peer whose calls idle the GPU inside (its host launching the next kernel) is also compared by its GPU
        # time alone, stated beside: the span is the verdict's figure, the other what a fed GPU would show.
        alone = (f" ({best['speedup_gpu_time']:.3f}x its GPU time alone: its calls leave the GPU idle "
                 f"{idle:.2f} ms while the host launches)"
                 if best.get("speedup_gpu_time") and idle > 0.02 * best["ms"] else "")
        parts.append(f"{best['speedup']:.3f}x {best['display']} (the fastest peer){alone}")
    return "; ".join(parts)


def gpu_compute_text(executed: dict | None) -> str:
    """Whether the GPU was shown to compute the answer (its own kernels' FLOPs against the task's), in words."""
    gc = (executed or {}).get("gpu_compute") or {}
    if gc.get("status") == "ok":
        return f"GPU computed it ({gc['gpu_to_task']:.2f}x the task's FLOPs in its own kernels)"
    if gc.get("status") == "unverified":
        return "GPU computation not verified (" + gc.get("detail", "") + ")"
    return "GPU computation not verified (Nsight Compute did not run)"


def _observer_library() -> tuple[str | None, str]:
    try:
        from xlang.profiler.observer import build_library

        cache = Path(os.environ.get("XLANG_CACHE", Path.home() / ".cache" / "xlang")) / "observer"
        return str(build_library(cache)), ""
    except Exception as e:  # noqa: BLE001 - without it, timing falls back to the judge's clock; recorded
        return None, f"CUPTI observer unavailable: {e}"
