"""evaluate(): judge one candidate and return a Verdict.

Stages, each stopping at the first failure (categories from xlang.verdict):
  static screen (forbidden_call) -> build (compile_error) -> static census (missing_instructions)
  -> GPU of the architecture's compute capability present? (else static_ok)
  -> worker 'check' in a fresh process: correctness on every shape, then timing (runtime_error, timeout, incorrect)
  -> worker 'once' under compute-sanitizer memcheck on the smallest shape (memory_error)
  -> worker 'ncu' under Nsight Compute: kernels seen at run time (forbidden_call) and the required
     instruction families' predicated-on threads in the candidate's own kernels (not_executed) -> ok.

The parent never imports torch and never touches the GPU itself: every GPU step is a child process with a
hard wall-clock limit (xlang.sandbox), so a hang, a crash or a poisoned CUDA context ends with that child.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import xlang
from xlang import verdict as V
from xlang.profiler import gpu as gpu_mod
from xlang.profiler import ncu as ncu_mod
from xlang.profiler import sanitizer as san_mod
from xlang.sandbox import ChildResult, run_child
from xlang.toolchain import find_tool

# Run as a module of its own (`python -m xlang.profiler.worker`): xlang.child's resource import only
# resolves tasks/backends/arch_docs in a source checkout, not xlang's own subpackages.
WORKER_MODULE = "xlang.profiler.worker"


@dataclass
class EvalOptions:
    memcheck: bool = True
    ncu: bool = True
    timing: bool = True
    trials: int = 3
    seed: int | None = None  # base seed; random (and recorded) when None
    shapes: list[dict] | None = None  # correctness shapes; default: the shape and the task's test shapes
    require: tuple[str, ...] | None = None  # required families; default: the task's for the arch
    run: str = "auto"  # "auto": run when a GPU of the arch is present; "never": build and census only
    check_timeout_s: float = 300.0
    memcheck_timeout_s: float = 300.0
    ncu_timeout_s: float = 300.0
    timing_budget_s: float = 0.6  # per timed function (candidate, baseline)
    ncu_shape: str = "default"  # "default" (the timed shape) or "smallest"
    # Speed: run the correctness/timing worker while a Triton candidate's static build runs (the worker
    # loads the .py itself; the build's verdict still comes first), and memcheck beside ncu (neither is timed).
    overlap: bool = True
    workdir: Path | None = None
    label: str | None = None  # name for archived tool outputs
    archive: Path | None = None  # copy raw tool outputs here (also XLANG_PROFILER_ARCHIVE)
    extra_env: dict = field(default_factory=dict)


# ---- stage running ---------------------------------------------------------------------------------

@dataclass
class StageRun:
    child: ChildResult
    result: dict | None
    progress: str
    seconds: float

    @property
    def last_step(self) -> str:
        lines = [ln.split(" ", 1)[-1] for ln in self.progress.strip().splitlines() if ln.strip()]
        return lines[-1] if lines else "starting the worker"


def worker_command(spec_path: Path) -> list[str]:
    return [sys.executable, "-m", WORKER_MODULE, str(spec_path)]


def run_stage(spec: dict, workdir: Path, stage: str, timeout: float, wrapper: list[str] | None = None,
              env: dict | None = None, child_cmd: list[str] | None = None) -> StageRun:
    """Write the spec, run the worker (optionally under a tool), read its result."""
    spec = dict(spec)
    spec_path = workdir / f"{stage}.spec.json"
    spec["out"] = str(workdir / f"{stage}.result.json")
    spec["progress"] = str(workdir / f"{stage}.progress.txt")
    for key in ("out", "progress"):
        Path(spec[key]).unlink(missing_ok=True)
    spec_path.write_text(json.dumps(spec, default=str))
    cmd = (wrapper or []) + (child_cmd or worker_command(spec_path))
    start = time.monotonic()
    child = run_child(cmd, timeout, cwd=workdir, env=env)
    out = Path(spec["out"])
    result = None
    if out.is_file():
        try:
            result = json.loads(out.read_text())
        except json.JSONDecodeError:
            result = None
    progress = Path(spec["progress"]).read_text() if Path(spec["progress"]).is_file() else ""
    (workdir / f"{stage}.stdout.txt").write_text(child.stdout)
    (workdir / f"{stage}.stderr.txt").write_text(child.stderr)
    return StageRun(child, result, progress, time.monotonic() - start)


def _tail(text: str, lines: int = 15, chars: int = 2500) -> str:
    kept = [ln for ln in text.strip().splitlines() if ln.strip()][-lines:]
    out = "\n".join(kept)
    return out[-chars:]


def judge_stage(stage: str, run: StageRun, timeout: float) -> tuple[str, str] | None:
    """The category a worker stage earns (timeout, runtime_error, incorrect), or None when it passed."""
    if run.child.timed_out:
        return V.TIMEOUT, (f"the {stage} worker did not finish within {timeout:.0f} s and was killed "
                           f"(last step: {run.last_step})")
    if run.result is None:
        sig = run.child.crashed_by_signal
        how = f"killed by {sig}" if sig else f"exit code {run.child.returncode}"
        err = _tail(run.child.stderr or run.child.stdout)
        return V.RUNTIME_ERROR, (f"the {stage} worker died ({how}) during: {run.last_step}"
                                 + (f"\n{err}" if err else ""))
    status = run.result.get("status")
    if status == "ok":
        return None
    if status == "incorrect":
        return V.INCORRECT, run.result.get("detail", "incorrect")
    return V.RUNTIME_ERROR, run.result.get("detail", status or "runtime error")


# ---- the stages ---------------------------------------------------------------------------------------

def _smallest(shapes: list[dict]) -> dict:
    def size(s):
        n = 1
        for v in s.values():
            n *= v
        return n
    return min(shapes, key=size)


def _worker_env(options: EvalOptions, gpu: dict, extra: dict | None = None) -> dict:
    cache = Path(os.environ.get("XLANG_CACHE", Path.home() / ".cache" / "xlang"))
    env = {"TRITON_CACHE_DIR": str(cache / "triton-gpu")}
    if len(gpu_mod.gpus()) > 1:
        env.update(CUDA_DEVICE_ORDER="PCI_BUS_ID", CUDA_VISIBLE_DEVICES=str(gpu["index"]))
    env.update(options.extra_env)
    env.update(extra or {})
    return env


def memcheck_stage(spec: dict, workdir: Path, options: EvalOptions, gpu: dict) -> tuple[dict, tuple | None]:
    tool = find_tool("compute-sanitizer")
    if tool is None:
        return {"ran": False, "note": "compute-sanitizer not found"}, None
    spec = {**spec, "mode": "once", "shape": spec["memcheck_shape"], "seed": spec["seed"] + 500}
    spec_path = workdir / "memcheck.spec.json"
    child = worker_command(spec_path)
    # No caching allocator: every tensor is its own allocation, so a read past its end is out of bounds.
    env = _worker_env(options, gpu, {"PYTORCH_NO_CUDA_MEMORY_CACHING": "1"})
    run = run_stage(spec, workdir, "memcheck", options.memcheck_timeout_s,
                    child_cmd=san_mod.command(str(tool), child), env=env)
    raw = run.child.stdout + "\n" + run.child.stderr
    (workdir / "memcheck.txt").write_text(raw)
    parsed = san_mod.parse_memcheck(raw)
    info = {"ran": True, "shape": spec["shape"], "seed": spec["seed"], "seconds": round(run.seconds, 2),
            "errors": parsed["errors"], "kinds": parsed["kinds"], "reports": parsed["reports"][:5],
            "summary_found": parsed["summary_found"], "exit_code": run.child.returncode}
    if run.child.timed_out:
        info.update(ran=False, note=f"memcheck did not finish within {options.memcheck_timeout_s:.0f} s")
        return info, None
    if parsed["errors"]:
        info["summary"] = san_mod.describe(parsed)
        return info, (V.MEMORY_ERROR, info["summary"])
    judged = judge_stage("memcheck", run, options.memcheck_timeout_s)
    if judged is not None:
        info["note"] = f"the candidate failed under memcheck with no memcheck error: {judged[1][:500]}"
        if judged[0] == V.RUNTIME_ERROR:
            return info, (V.RUNTIME_ERROR, "under compute-sanitizer: " + judged[1])
    if not parsed["summary_found"]:
        info["note"] = "no ERROR SUMMARY line in the sanitizer output"
    return info, None


def _ncu_imports(tool: str, report: Path, workdir: Path) -> list:
    outputs = {}

    def page(key, cmd):
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
            outputs[key] = proc.stdout
            (workdir / f"ncu_{key}.csv").write_text(proc.stdout)
            if proc.stderr.strip():
                (workdir / f"ncu_{key}.stderr.txt").write_text(proc.stderr)
        except subprocess.TimeoutExpired:
            outputs[key] = ""

    with ThreadPoolExecutor(2) as pool:
        list(pool.map(lambda kc: page(*kc), (("source", ncu_mod.source_page_command(tool, str(report))),
                                             ("details", ncu_mod.details_page_command(tool, str(report))))))
    return ncu_mod.merge(ncu_mod.parse_source_page(outputs.get("source", "")),
                         ncu_mod.parse_details_page(outputs.get("details", "")))


def ncu_stage(spec: dict, workdir: Path, options: EvalOptions, gpu: dict, build, arch, required):
    tool = find_tool("ncu")
    if tool is None:
        return {"ran": False, "note": "ncu (Nsight Compute) not found"}, (
            V.RUNTIME_ERROR, "cannot verify executed instructions: ncu (Nsight Compute) not found")
    spec = {**spec, "mode": "ncu", "shape": spec["ncu_shape"], "seed": spec["seed"] + 700}
    spec_path = workdir / "ncu.spec.json"
    child = worker_command(spec_path)
    env = _worker_env(options, gpu)
    report = workdir / "ncu"
    attempts = []
    profiles: list = []
    run = None
    for replay, nvtx in (("kernel", True), ("application", True), ("kernel", False)):
        report_file = Path(str(report) + ".ncu-rep")
        report_file.unlink(missing_ok=True)
        cmd = ncu_mod.profile_command(str(tool), str(report), child, replay=replay, nvtx=nvtx)
        run = run_stage(spec, workdir, "ncu", options.ncu_timeout_s, child_cmd=cmd, env=env)
        (workdir / f"ncu_run_{replay}_{'nvtx' if nvtx else 'all'}.txt").write_text(
            run.child.stdout + "\n" + run.child.stderr)
        attempt = {"replay": replay, "nvtx": nvtx, "exit_code": run.child.returncode,
                   "seconds": round(run.seconds, 2), "timed_out": run.child.timed_out}
        attempts.append(attempt)
        if run.child.timed_out:
            break
        if report_file.is_file():
            profiles = _ncu_imports(str(tool), report_file, workdir)
            attempt["kernels"] = len(profiles)
            if profiles:
                break
        if run.result is not None and run.result.get("status") not in (None, "ok"):
            break  # the candidate itself failed: another replay mode will not help
    info = {"ran": bool(profiles), "attempts": attempts, "shape": spec["shape"], "seed": spec["seed"]}
    if not profiles:
        judged = judge_stage("ncu", run, options.ncu_timeout_s) if run else None
        why = judged[1] if judged else _tail(run.child.stdout + "\n" + run.child.stderr, 8) if run else ""
        info["note"] = "Nsight Compute profiled no kernel"
        cat = judged[0] if judged and judged[0] == V.TIMEOUT else V.RUNTIME_ERROR
        return info, (cat, f"Nsight Compute could not profile the candidate's call: {why}")
    names = [k.name for k in build.kernels] + list((run.result or {}).get("own_kernels") or [])
    summary = ncu_mod.summarize(profiles, names, arch.families, required)
    info.update(summary)
    if summary["forbidden_kernels"]:
        k = summary["forbidden_kernels"][0]
        return info, (V.FORBIDDEN_CALL, f"at run time the candidate's call launched {len(summary['forbidden_kernels'])} "
                                        f"vendor/torch compute kernel(s), e.g. {k['name'][:120]} ({k['why']})")
    if summary["missing"]:
        counts = ", ".join(f"{f}={summary['families'].get(f, 0):.0f}" for f in required)
        extra = f"; candidate kernels never launched: {', '.join(summary['not_launched'])}" \
            if summary["not_launched"] else ""
        return info, (V.NOT_EXECUTED, f"required famil{'y' if len(summary['missing']) == 1 else 'ies'} "
                                      f"{', '.join(summary['missing'])} executed by 0 threads at run time "
                                      f"(predicated-on threads: {counts}){extra}")
    return info, None


# ---- evaluate ---------------------------------------------------------------------------------------

_OPTION_ALIASES = {"no_memcheck": ("memcheck", lambda v: not v), "no_ncu": ("ncu", lambda v: not v),
                   "no_timing": ("timing", lambda v: not v)}


def coerce_options(options) -> EvalOptions:
    """EvalOptions from an EvalOptions, None, or a dict (the agent loop and the remote worker pass dicts):
    known fields are taken, 'timeout_s' (the whole evaluation's limit) is shared out among the stages."""
    if isinstance(options, EvalOptions):
        return options
    opts = EvalOptions()
    for key, value in dict(options or {}).items():
        if key in _OPTION_ALIASES:
            name, conv = _OPTION_ALIASES[key]
            setattr(opts, name, conv(value))
        elif key == "timeout_s" and value:
            per_stage = float(value) / 3.0
            opts.check_timeout_s = opts.memcheck_timeout_s = opts.ncu_timeout_s = per_stage
        elif key in EvalOptions.__dataclass_fields__:
            if key in ("workdir", "archive") and value is not None:
                value = Path(value)
            if key == "require" and value is not None:
                value = tuple(value)
            setattr(opts, key, value)
    return opts


def _coerce(task, arch):
    from xlang.archs import get_arch
    from xlang.task import get_task

    return (get_task(task) if isinstance(task, str) else task), (get_arch(arch) if isinstance(arch, str) else arch)


def _archive(workdir: Path, options: EvalOptions, label: str) -> None:
    target = options.archive or os.environ.get("XLANG_PROFILER_ARCHIVE")
    if not target:
        return
    dest = Path(target) / label
    dest.mkdir(parents=True, exist_ok=True)
    for p in workdir.iterdir():
        if p.is_file() and p.suffix in (".txt", ".csv", ".json") and p.stat().st_size < (8 << 20):
            shutil.copy2(p, dest / p.name)


def evaluate(source_or_build, lang: str, task, arch, shape: dict | None = None,
             options: EvalOptions | None = None) -> V.Verdict:
    """Judge a candidate (source text, a Path, or a BuildResult) for one task on one architecture."""
    from xlang.backend import BuildResult, build_candidate, get_backend

    options = coerce_options(options)
    task, arch = _coerce(task, arch)
    backend = get_backend(lang)
    started = time.monotonic()
    workdir = Path(options.workdir or tempfile.mkdtemp(prefix=f"xlang-eval-{lang}-{arch.name}-"))
    workdir.mkdir(parents=True, exist_ok=True)
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
    required = tuple(options.require or task.required_for(arch))
    seed = options.seed if options.seed is not None else random.SystemRandom().randrange(1, 2**31 - 10**6)
    verdict = V.Verdict(category=V.OK, lang=lang, task=task.name, arch=arch.name, shape=dict(shape))
    verdict.fingerprint = {"harness_version": xlang.HARNESS_VERSION, "xlang": xlang.__version__, "seed": seed,
                           "workdir": str(workdir)}

    pools: list = []
    held: list = []  # the GPU, while this evaluation uses it

    def finish(category: str, detail: str) -> V.Verdict:
        for p in pools:
            p.shutdown(wait=False)
        for lock in held:
            lock.release()
        verdict.category, verdict.detail = category, detail
        verdict.fingerprint["seconds"] = round(time.monotonic() - started, 2)
        try:
            (workdir / "verdict.json").write_text(json.dumps(verdict.to_dict(), indent=1, default=str))
            _archive(workdir, options, label)
        except OSError:
            pass
        return verdict

    if not source.strip():
        return finish(V.NO_CODE, "no candidate code")
    reasons = backend.screen(source)
    if reasons:
        return finish(V.FORBIDDEN_CALL, "static screen: " + "; ".join(reasons))
    gpu = gpu_mod.find_gpu(arch) if options.run != "never" else None
    shapes = options.shapes or task.test_shapes(shape)
    spec = {
        "lang": lang, "task": task.name, "arch": arch.name, "seed": seed,
        "trials": options.trials, "shapes": shapes, "memcheck_shape": _smallest(shapes),
        "ncu_shape": shapes[0] if options.ncu_shape == "default" else _smallest(shapes),
        "timing": {"enabled": options.timing, "budget_s": options.timing_budget_s},
    }
    early_check = None
    pool = ThreadPoolExecutor(2)
    pools.append(pool)

    def hold_gpu():  # one evaluation at a time per GPU: timings must not share the chip
        if not held:
            held.append(gpu_mod.Exclusive(gpu).acquire())
    if build is None and gpu is not None and options.overlap and lang == "triton":
        early = workdir / "early"
        early.mkdir(exist_ok=True)
        (early / f"candidate{backend.suffix}").write_text(source)
        provisional = BuildResult(True, lang, task.name, arch.name, dict(shape), str(early),
                                  load_path=str(early / f"candidate{backend.suffix}"))
        hold_gpu()
        early_check = pool.submit(run_stage, {**spec, "mode": "check", "build": provisional.to_dict()}, workdir,
                                  "check", options.check_timeout_s, env=_worker_env(options, gpu))
    if build is None:
        build = build_candidate(source, lang, task, arch, shape, required, workdir=workdir / "build")
    verdict.build = build.to_dict()
    if early_check is not None and (not build.ok or (build.census is not None and build.census.missing)):
        early_check.result()  # never leave a worker behind; its verdict is not needed
    spec["build"] = build.to_dict()
    if not build.ok:
        return finish(V.COMPILE_ERROR, build.error or "the build failed")
    if build.census is not None and build.census.missing:
        return finish(V.MISSING_INSTRUCTIONS,
                      f"static SASS census ({arch.sm}): required famil{'y' if len(build.census.missing) == 1 else 'ies'} "
                      f"{', '.join(build.census.missing)} not in any compiled kernel")

    # ---- runtime: only on a GPU of the architecture's compute capability
    if gpu is None:
        verdict.runtime_note = ("not run (runtime disabled)" if options.run == "never" else
                                f"not run (no GPU of compute capability {arch.compute_capability / 10:.1f} here)")
        return finish(V.STATIC_OK, f"compiled for {arch.sm} with {', '.join(required)} present; {verdict.runtime_note}")
    verdict.runtime_ran = True
    hold_gpu()
    fresh = gpu_mod._from_nvml() or [gpu]
    verdict.fingerprint["gpu"] = next((g for g in fresh if g.get("index") == gpu.get("index")), gpu)

    verdict.fingerprint.update(shapes=shapes, trials=options.trials,
                               seeds={"correctness": [[seed + 1000 * i + t for t in range(options.trials)]
                                                      for i in range(len(shapes))],
                                      "timing": seed + 999, "memcheck": seed + 500, "ncu": seed + 700})
    env = _worker_env(options, gpu)
    if early_check is not None:
        check = early_check.result()
    else:
        check = run_stage({**spec, "mode": "check"}, workdir, "check", options.check_timeout_s, env=env)
    if check.result:
        verdict.fingerprint.update(check.result.get("fingerprint") or {})
        verdict.correctness = _slim_correctness(check.result.get("correctness"))
        verdict.timing = check.result.get("timing")
    verdict.fingerprint["stage_seconds"] = {"check": round(check.seconds, 2)}
    judged = judge_stage("check", check, options.check_timeout_s)
    if judged:
        return finish(*judged)

    def timed_ncu():
        t0 = time.monotonic()
        out = ncu_stage(spec, workdir, options, gpu, build, arch, required)
        verdict.fingerprint["stage_seconds"]["ncu"] = round(time.monotonic() - t0, 2)
        return out

    # memcheck and ncu count events, not time: with options.overlap they run side by side.
    mem_future = pool.submit(memcheck_stage, spec, workdir, options, gpu) if options.memcheck else None
    if mem_future is not None and not options.overlap:
        mem_future.result()
    ncu_future = pool.submit(timed_ncu) if options.ncu else None
    failure: tuple | None = None
    if mem_future is not None:
        verdict.memcheck, failure = mem_future.result()
        verdict.fingerprint["stage_seconds"]["memcheck"] = verdict.memcheck.get("seconds")
    else:
        verdict.memcheck = {"ran": False, "note": "skipped (--no-memcheck)"}
    if ncu_future is not None:
        verdict.executed, ncu_failure = ncu_future.result()
        if ncu_failure and (failure is None or ncu_failure[0] == V.FORBIDDEN_CALL):
            failure = ncu_failure
    else:
        verdict.executed = {"ran": False, "note": "skipped (--no-ncu): instructions not verified at run time"}
    pool.shutdown()
    if failure:
        return finish(*failure)
    return finish(V.OK, _ok_detail(verdict, required))


def _slim_correctness(corr: dict | None) -> dict | None:
    """Keep what a person or a model reads: shapes, trials, worst errors, the first failure."""
    if not corr:
        return corr
    out = {k: corr[k] for k in ("passed", "shapes", "trials_per_shape", "worst", "failure") if k in corr}
    out["trials_run"] = len(corr.get("trials", []))
    failed = [t for t in corr.get("trials", []) if "failure" in t]
    if failed:
        out["failed_trial"] = failed[0]
    return out


def _ok_detail(verdict: V.Verdict, required) -> str:
    parts = []
    c = verdict.correctness or {}
    parts.append(f"correct on {len(c.get('shapes', []))} shapes x {c.get('trials_per_shape', 0)} trials")
    m = verdict.memcheck or {}
    parts.append("memcheck clean" if m.get("ran") else "memcheck not run")
    e = verdict.executed or {}
    if e.get("families"):
        parts.append("executed: " + ", ".join(f"{f} {e['families'].get(f, 0):,.0f} threads" for f in required))
    else:
        parts.append("executed instructions not verified")
    t = verdict.timing or {}
    if t.get("speedup"):
        parts.append(f"{t['speedup']:.3f}x {t['baseline_name']} ({t['tflops']:.0f} vs {t['baseline_tflops']:.0f} TFLOP/s)"
                     + (" [BEYOND ROOFLINE: suspicious]" if t.get("beyond_roofline") else ""))
    return "; ".join(parts)
