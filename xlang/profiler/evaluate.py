"""evaluate(): judge one candidate and return a Verdict.

Stages, each stopping at the first failure (categories from xlang.verdict):
  static screen (forbidden_call) -> build (compile_error) -> static census (missing_instructions)
  -> GPU of the architecture's compute capability present? (else static_ok)
  -> three workers, each a fresh process, side by side:
       'check': correctness on every shape (runtime_error, timeout, incorrect), then timing - which waits at a
                gate until the other two have left the GPU, so nothing runs beside the timed kernels;
       'once' under compute-sanitizer memcheck on the smallest shape (memory_error);
       'ncu' under Nsight Compute: kernels seen at run time (forbidden_call) and the required instruction
             families' predicated-on threads in the candidate's own kernels (not_executed)
  -> ok. The check's failure comes first; memcheck's and ncu's next (a failure there skips timing).

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
import threading
import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
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
    # Speed: memcheck and ncu run beside the correctness trials (they count events, not time) and timing
    # waits until they are done; a Triton candidate's GPU stages also start while its static build runs
    # (the worker loads the .py itself; the build's verdict still comes first). False: one stage at a time.
    overlap: bool = True
    # Timing inputs come from one fixed seed, so separate evaluations time the same data (random bf16 data
    # moves the power draw and so the clock); correctness always uses fresh seeds.
    timing_seed: int = 20_261_129
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
              env: dict | None = None, child_cmd: list[str] | None = None, cancel=None, deadline=None) -> StageRun:
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
    child = run_child(cmd, timeout, cwd=workdir, env=env, cancel=cancel,
                      deadline=deadline(start) if deadline else None)
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


class TimingGate:
    """The check worker times the candidate only when it has the GPU alone: memcheck and Nsight Compute run
    beside its correctness trials, and the worker waits at this gate (a file: 'go' or 'skip') until they are
    done. While it waits its clock stops, so its time limit covers its own work only."""

    def __init__(self, workdir: Path, limit_s: float):
        self.path, self.waiting = workdir / "timing.gate", workdir / "timing.waiting"
        self.limit_s = limit_s
        self.arrived: float | None = None
        self.opened: float | None = None
        for p in (self.path, self.waiting):
            p.unlink(missing_ok=True)

    def open(self, go: bool) -> None:
        if self.opened is None:
            tmp = self.path.with_suffix(".tmp")
            tmp.write_text("go" if go else "skip")
            tmp.replace(self.path)  # atomic: the worker never reads half a word
            self.opened = time.monotonic()

    def deadline(self, start: float):
        """The check worker's kill time, polled while it runs: start + limit + the time it waited here."""
        def kill_at() -> float:
            if self.arrived is None and self.waiting.exists():
                self.arrived = time.monotonic()
            if self.arrived is None:
                return start + self.limit_s
            if self.opened is None:
                return float("inf")
            return start + self.limit_s + max(0.0, self.opened - self.arrived)
        return kill_at


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


def memcheck_stage(spec: dict, workdir: Path, options: EvalOptions, gpu: dict,
                   cancel=None) -> tuple[dict, tuple | None]:
    tool = find_tool("compute-sanitizer")
    if tool is None:
        return {"ran": False, "note": "compute-sanitizer not found"}, None
    spec = {**spec, "mode": "once", "shape": spec["memcheck_shape"], "seed": spec["seed"] + 500}
    spec_path = workdir / "memcheck.spec.json"
    child = worker_command(spec_path)
    # No caching allocator: every tensor is its own allocation, so a read past its end is out of bounds.
    env = _worker_env(options, gpu, {"PYTORCH_NO_CUDA_MEMORY_CACHING": "1"})
    run = run_stage(spec, workdir, "memcheck", options.memcheck_timeout_s,
                    child_cmd=san_mod.command(str(tool), child), env=env, cancel=cancel)
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


# Nsight Compute replay modes, tried in turn until one profiles a kernel (kernel replay's memory save/restore
# fails on some candidates; without the NVTX filter every kernel of the call counts).
NCU_ATTEMPTS = (("kernel", True), ("application", True), ("kernel", False))


def ncu_stage(spec: dict, workdir: Path, options: EvalOptions, gpu: dict, final_build, arch, required,
              cancel=None):
    """final_build: a callable giving the static build, asked for only after profiling (for a Triton
    candidate the profiling starts while the static build is still running)."""
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
    for replay, nvtx in NCU_ATTEMPTS:
        report_file = Path(str(report) + ".ncu-rep")
        report_file.unlink(missing_ok=True)
        cmd = ncu_mod.profile_command(str(tool), str(report), child, replay=replay, nvtx=nvtx)
        run = run_stage(spec, workdir, "ncu", options.ncu_timeout_s, child_cmd=cmd, env=env, cancel=cancel)
        (workdir / f"ncu_run_{replay}_{'nvtx' if nvtx else 'all'}.txt").write_text(
            run.child.stdout + "\n" + run.child.stderr)
        attempt = {"replay": replay, "nvtx": nvtx, "exit_code": run.child.returncode,
                   "seconds": round(run.seconds, 2), "timed_out": run.child.timed_out}
        attempts.append(attempt)
        if run.child.timed_out or run.child.cancelled:
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
    build = final_build()
    if build is None or not build.ok:
        return info, None  # the build failed: its verdict stands, nothing to judge here
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

    pool = ThreadPoolExecutor(3)
    held: list = []  # the GPU, while this evaluation uses it
    side_cancel, check_cancel = threading.Event(), threading.Event()
    gate: TimingGate | None = None
    stage_seconds: dict = {}
    verdict.fingerprint["stage_seconds"] = stage_seconds

    def finish(category: str, detail: str) -> V.Verdict:
        # Stop whatever still runs (a stage whose verdict is no longer needed) before the GPU is let go.
        side_cancel.set()
        check_cancel.set()
        if gate is not None:
            gate.open(go=False)
        pool.shutdown(wait=True)
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
        "gpu_index": gpu.get("index") if gpu else None,
        "timing": {"enabled": options.timing, "budget_s": options.timing_budget_s, "seed": options.timing_seed},
    }
    side_by_side = gpu is not None and options.overlap and (options.memcheck or options.ncu)
    if side_by_side and options.timing:
        gate = TimingGate(workdir, options.check_timeout_s)
        longest_side_s = options.memcheck_timeout_s + len(NCU_ATTEMPTS) * options.ncu_timeout_s
        spec["timing"].update(gate=str(gate.path), gate_waiting=str(gate.waiting), gate_max_wait_s=longest_side_s + 60)

    built = threading.Event()  # set once the static build is known (ncu names the candidate's kernels by it)
    final: dict = {}

    def final_build():
        built.wait()
        return final.get("build")

    def hold_gpu():  # one evaluation at a time per GPU: timings must not share the chip
        if not held:
            held.append(gpu_mod.Exclusive(gpu).acquire())

    def start_check(stage_spec: dict):
        return pool.submit(run_stage, {**stage_spec, "mode": "check"}, workdir, "check", options.check_timeout_s,
                           env=_worker_env(options, gpu), cancel=check_cancel,
                           deadline=gate.deadline if gate else None)

    def timed(name, fn, *args):
        t0 = time.monotonic()
        out = fn(*args)
        stage_seconds[name] = round(time.monotonic() - t0, 2)
        return out

    def start_side(stage_spec: dict):
        mem = pool.submit(timed, "memcheck", memcheck_stage, stage_spec, workdir, options, gpu, side_cancel) \
            if options.memcheck else None
        ncu = pool.submit(timed, "ncu", ncu_stage, stage_spec, workdir, options, gpu, final_build, arch, required,
                          side_cancel) if options.ncu else None
        return mem, ncu

    check_future = mem_future = ncu_future = None
    if build is None and gpu is not None and options.overlap and lang == "triton":
        # A Triton candidate is a .py the worker loads itself: its GPU stages start while the static
        # build (compile + census, a few seconds) runs; the build's verdict still comes first.
        early = workdir / "early"
        early.mkdir(exist_ok=True)
        (early / f"candidate{backend.suffix}").write_text(source)
        provisional = BuildResult(True, lang, task.name, arch.name, dict(shape), str(early),
                                  load_path=str(early / f"candidate{backend.suffix}"))
        hold_gpu()
        early_spec = {**spec, "build": provisional.to_dict()}
        check_future = start_check(early_spec)
        if side_by_side:
            mem_future, ncu_future = start_side(early_spec)
    if build is None:
        build = build_candidate(source, lang, task, arch, shape, required, workdir=workdir / "build")
    final["build"] = build
    built.set()
    verdict.build = build.to_dict()
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
                                      "timing": options.timing_seed, "memcheck": seed + 500, "ncu": seed + 700})

    # Correctness, memcheck and ncu side by side (they count events, not time); timing waits at the gate.
    if check_future is None:
        check_future = start_check(spec)
    if side_by_side and mem_future is None and ncu_future is None:
        mem_future, ncu_future = start_side(spec)
    side = [f for f in (mem_future, ncu_future) if f is not None]
    while side and not all(f.done() for f in side):
        wait([f for f in side + [check_future] if not f.done()], return_when=FIRST_COMPLETED)
        if check_future.done() and judge_stage("check", check_future.result(), options.check_timeout_s):
            break  # the check failed: that is the verdict, memcheck and ncu are stopped by finish()
    side_results = [f.result() if f.done() else None for f in (mem_future, ncu_future) if f is not None]
    if gate is not None and all(r is not None for r in side_results):
        gate.open(go=not any(failure for _, failure in side_results))

    check = check_future.result()
    if check.result:
        verdict.fingerprint.update(check.result.get("fingerprint") or {})
        verdict.correctness = _slim_correctness(check.result.get("correctness"))
        verdict.timing = check.result.get("timing")
        if (verdict.timing or {}).get("clocks"):
            verdict.fingerprint["gpu"] = {**verdict.fingerprint["gpu"], **verdict.timing["clocks"],
                                          "clocks_sampled": "after the timed repetitions"}
    stage_seconds["check"] = round(check.seconds, 2)
    judged = judge_stage("check", check, options.check_timeout_s)
    if judged:
        return finish(*judged)

    if not side_by_side:  # sequential: memcheck, then ncu, each after the check
        if options.memcheck:
            mem_future = pool.submit(timed, "memcheck", memcheck_stage, spec, workdir, options, gpu)
            mem_future.result()
        if options.ncu:
            ncu_future = pool.submit(timed, "ncu", ncu_stage, spec, workdir, options, gpu, final_build, arch,
                                     required)
    failure: tuple | None = None
    if mem_future is not None:
        verdict.memcheck, failure = mem_future.result()
    else:
        verdict.memcheck = {"ran": False, "note": "skipped (--no-memcheck)"}
    if ncu_future is not None:
        verdict.executed, ncu_failure = ncu_future.result()
        if ncu_failure and (failure is None or ncu_failure[0] == V.FORBIDDEN_CALL):
            failure = ncu_failure
    else:
        verdict.executed = {"ran": False, "note": "skipped (--no-ncu): instructions not verified at run time"}
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
