"""evaluate(): judge one candidate and return a Verdict.

The stages, declared once (STAGES) and run in this order by `xlang eval`, the agent loop and the remote path:

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

memcheck and ncu run beside the check's correctness trials; its timing waits at a gate until they have left
the GPU (ncu's report is read while the timing runs: a failure found there still decides the verdict). The parent never imports torch and never touches the GPU itself.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import xlang
from xlang import verdict as V
from xlang.profiler import gpu as gpu_mod
from xlang.profiler import ncu as ncu_mod
from xlang.profiler import sanitizer as san_mod
from xlang.sandbox import (ChildResult, copy_untrusted_file, kill_uid, level as isolation_level, read_untrusted,
                           replace_file, run_child, write_new)
from xlang.toolchain import find_tool

JUDGE_MODULE = "xlang.profiler.judge"


@dataclass(frozen=True)
class Stage:
    name: str
    categories: tuple[str, ...]  # what it can conclude
    runs: str  # what it runs, in words
    gpu: bool


STAGES = (
    Stage("screen", (V.NO_CODE, V.FORBIDDEN_CALL), "a static screen of the source", False),
    Stage("build", (V.COMPILE_ERROR,), "the language's compiler for the target (Python languages: jailed)", False),
    Stage("census", (V.INCORRECT, V.MISSING_INSTRUCTIONS), "cuobjdump -sass of every kernel: the required families "
          "present; MMAs accumulating in fp16 where the contract says fp32 (incorrect)", False),
    Stage("check", (V.RUNTIME_ERROR, V.TIMEOUT, V.INCORRECT, V.MEMORY_ERROR, V.FORBIDDEN_CALL),
          "the judge: correctness on drawn shapes, observed kernels, timing against the vendor", True),
    Stage("memcheck", (V.MEMORY_ERROR, V.FORBIDDEN_CALL, V.TIMEOUT, V.RUNTIME_ERROR), "compute-sanitizer memcheck",
          True),
    Stage("ncu", (V.INCORRECT, V.HOST_COMPUTE, V.NOT_EXECUTED, V.FORBIDDEN_CALL, V.TIMEOUT, V.RUNTIME_ERROR),
          "Nsight Compute", True),
)


@dataclass
class EvalOptions:
    memcheck: bool = True
    ncu: bool = True
    timing: bool = True
    trials: int = 2  # correctness trials per shape (value kinds cycle across them)
    drawn_shapes: int = 3  # shapes drawn per evaluation from the contract's space, besides the timed one
    seed: int | None = None  # base seed; random (and recorded) when None
    shapes: list[dict] | None = None  # correctness shapes instead of drawn ones (the first is timed)
    fixed: tuple[str, ...] = ()  # sizes the user set explicitly: drawn shapes keep them
    require: tuple[str, ...] | None = None  # required families; default: the task's for the arch
    run: str = "auto"  # "auto": run when a GPU of the arch is present; "never": build and census only
    check_timeout_s: float = 300.0
    memcheck_timeout_s: float = 300.0
    ncu_timeout_s: float = 300.0
    timing_budget_s: float = 0.6  # GPU time per timed function (candidate, baseline, each peer)
    # Idle GPU time before each timed call, after its inputs and the L2 flush, the same for every side (ms). On a
    # power-capped card a kernel's clock depends on how long the GPU rested before it, and a side whose call
    # spends host time before its first kernel (cuDNN's backward: ~0.9 ms) rests longer unasked; a rest much
    # longer than that evens it out. 0: none (the timing of the published harness-3 figures).
    timing_rest_ms: float = 0.0
    # The task's peers (public kernels, Task.peers) timed after the vendor when installed; each within its own
    # budget (its process's start, its package's import and JIT, its calls), which the check stage's limit adds.
    peers: bool = True
    peer_timeout_s: float = 180.0
    overlap: bool = True  # memcheck and ncu beside the correctness trials (timing waits for them)
    # Timed inputs: a fresh secret seed per evaluation (a published one lets a candidate precompute the timed
    # outputs at import time); an int here only for experiments.
    timing_seed: int | None = None
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
    stage_dir: Path | None = None  # the judge's folder of this run (fresh per run: ncu, ncu-2, ...)

    @property
    def last_step(self) -> str:
        lines = [ln.split(" ", 1)[-1] for ln in self.progress.strip().splitlines() if ln.strip()]
        return lines[-1] if lines else "starting the judge"


def judge_command(spec_path: Path) -> list[str]:
    return [sys.executable, "-m", JUDGE_MODULE, str(spec_path)]


def run_stage(spec: dict, workdir: Path, stage: str, timeout: float, env: dict | None = None, cancel=None,
              deadline=None, child_cmd: list[str] | None = None) -> StageRun:
    """Write the spec, run the judge for one stage (it starts the candidate's process itself), read its result.
    The stage's folder is the judge's own (0700, made fresh for this run: `stage`, else `stage-2`, ...): the
    candidate's processes get homes of their own inside it and can write nothing else there."""
    stage_dir = _fresh_folder(workdir, stage)
    spec = dict(spec, mode=spec.get("mode", stage), stage_dir=str(stage_dir),
                out=str(stage_dir / "result.json"), progress=str(stage_dir / "progress.txt"), parent_pid=os.getpid())
    spec_path = write_new(stage_dir / "spec.json", json.dumps(spec, default=str))
    start = time.monotonic()
    cmd = child_cmd or judge_command(spec_path)  # child_cmd: tests only
    child = run_child(cmd, timeout, cwd=stage_dir, env=env,
                      cancel=cancel, deadline=deadline(start) if deadline else None)
    # A judge stopped at its limit (or cancelled) never cleaned up: whatever runs as its stage's uids goes now.
    from xlang.profiler.judge import stage_uids

    for uid in stage_uids(spec):
        kill_uid(uid)
    result = None
    text = read_untrusted(Path(spec["out"]), 64 << 20)
    if text is not None:
        try:
            result = json.loads(text)
        except json.JSONDecodeError:
            result = None
    progress = read_untrusted(Path(spec["progress"]), 4 << 20) or ""
    write_new(stage_dir / "stdout.txt", child.stdout)
    write_new(stage_dir / "stderr.txt", child.stderr)
    return StageRun(child, result, progress, time.monotonic() - start, stage_dir)


def _fresh_folder(workdir: Path, name: str) -> Path:
    """A new folder of the judge's under workdir: `name`, or `name-2`, `name-3`... when taken (mkdir makes it
    or fails: never a folder, or a link, that was there)."""
    for n in range(1, 1000):
        folder = workdir / (name if n == 1 else f"{name}-{n}")
        try:
            folder.mkdir(mode=0o700)
            return folder
        except FileExistsError:
            continue
    raise RuntimeError(f"no fresh folder for stage {name} in {workdir}")


def _tail(text: str, lines: int = 15, chars: int = 2500) -> str:
    kept = [ln for ln in text.strip().splitlines() if ln.strip()][-lines:]
    return "\n".join(kept)[-chars:]


_STATUS = {"incorrect": V.INCORRECT, "runtime_error": V.RUNTIME_ERROR, "memory_error": V.MEMORY_ERROR,
           "forbidden_call": V.FORBIDDEN_CALL, "timeout": V.TIMEOUT}


def judge_stage(stage: str, run: StageRun, timeout: float) -> tuple[str, str] | None:
    """The category a stage earns, or None when it passed."""
    if run.child.timed_out:
        return V.TIMEOUT, (f"the {stage} stage did not finish within {timeout:.0f} s and was stopped "
                           f"(last step: {run.last_step})")
    if run.result is None:
        sig = run.child.crashed_by_signal
        how = f"killed by {sig}" if sig else f"exit code {run.child.returncode}"
        err = _tail(run.child.stderr or run.child.stdout)
        return V.RUNTIME_ERROR, (f"the {stage} stage's judge died ({how}) during: {run.last_step}"
                                 + (f"\n{err}" if err else ""))
    status = run.result.get("status")
    if status == "ok":
        return None
    if status == "harness_error":
        raise RuntimeError(f"the {stage} judge failed: {run.result.get('detail')}\n{run.result.get('traceback', '')}")
    return _STATUS.get(status, V.RUNTIME_ERROR), run.result.get("detail", status or "runtime error")


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
            replace_file(self.path, "go" if go else "skip")  # atomic: the worker never reads half a word
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

def _stage_env(options: EvalOptions, gpu: dict) -> dict:
    env = {}
    # Always the GPU NVML named (PCI order, as NVML counts): with XLANG_GPUS keeping one GPU of several, the
    # judge must not fall back to CUDA's device 0 while its NVML checks look at another.
    if gpu.get("index") is not None and (len(gpu_mod.gpus()) > 1 or os.environ.get("XLANG_GPUS") is not None):
        env.update(CUDA_DEVICE_ORDER="PCI_BUS_ID", CUDA_VISIBLE_DEVICES=str(gpu["index"]))
    env.update(options.extra_env)
    return env


def memcheck_stage(spec: dict, workdir: Path, options: EvalOptions, gpu: dict, cancel=None):
    tool = find_tool("compute-sanitizer")
    if tool is None:
        return {"ran": False, "note": "compute-sanitizer not found"}, None
    prefix = san_mod.command(str(tool), []) + ["--log-file", "{LOG}"]
    spec = {**spec, "mode": "memcheck", "tool": prefix, "trials": spec["memcheck_trials"]}
    # No caching allocator in the judge either way: the candidate's buffers are allocations of their own.
    run = run_stage(spec, workdir, "memcheck", options.memcheck_timeout_s, env=_stage_env(options, gpu),
                    cancel=cancel)
    raw = read_untrusted(run.stage_dir / "tool.log", 256 << 20) or ""  # the judge's copy of the tool's log
    parsed = san_mod.parse_memcheck("\n".join("========= " + ln if not ln.startswith("=") else ln
                                               for ln in raw.splitlines()))
    info = {"ran": True, "shapes": [t[0] for t in spec["trials"]], "seconds": round(run.seconds, 2),
            "isolation": (run.result or {}).get("isolation"), "jail_ladder": (run.result or {}).get("jail_ladder"),
            "errors": parsed["errors"], "kinds": parsed["kinds"], "reports": parsed["reports"][:5],
            "summary_found": parsed["summary_found"]}
    if run.child.cancelled:
        return {**info, "ran": False, "note": "cancelled"}, None
    if run.child.timed_out:
        return {**info, "ran": False}, (V.TIMEOUT, f"memcheck did not finish within {options.memcheck_timeout_s:.0f} s:"
                                                  " a memory check that does not finish is not a pass")
    info["gpu_watch"] = (run.result or {}).get("gpu_watch")
    info["candidate_output"] = (run.result or {}).get("candidate_output")  # evaluate() moves it to verdict.output
    if (run.result or {}).get("status") == "forbidden_call":  # a second GPU process: what the sanitizer saw is moot
        return info, (V.FORBIDDEN_CALL, "under compute-sanitizer: " + run.result.get("detail", ""))
    if parsed["errors"]:
        info["summary"] = san_mod.describe(parsed)
        return info, (V.MEMORY_ERROR, info["summary"])
    judged = judge_stage("memcheck", run, options.memcheck_timeout_s)
    if judged is not None:
        return info, (judged[0], "under compute-sanitizer: " + judged[1])
    code = (run.result or {}).get("runner_exit")
    if code not in (0, san_mod.ERROR_EXIT_CODE):  # the tool itself must end well, or its log is not its last word
        return info, (V.RUNTIME_ERROR, f"compute-sanitizer ended abnormally (exit {code}): the memory check is "
                                       "not complete")
    if not parsed["summary_found"]:
        return info, (V.RUNTIME_ERROR, "compute-sanitizer wrote no ERROR SUMMARY: the memory check is not complete")
    return info, None


def ncu_stage(spec: dict, workdir: Path, options: EvalOptions, gpu: dict, arch, required, task, cancel=None,
              gpu_free: threading.Event | None = None, check_done: threading.Event | None = None):
    """The profiled call is the last of spec["ncu_trials"] (an NVTX range; the calls before it compile and
    autotune). Its kernels are compared with an observed timed call's at the end of evaluate().
    gpu_free is set once a report is written and the profiled process is gone: reading the report needs no
    GPU, so the check's timing need not wait for it. A later attempt then waits for check_done, so that no
    profile ever runs beside the timing."""
    tool = find_tool("ncu")
    if tool is None:
        return {"ran": False, "note": "ncu (Nsight Compute) not found"}, (
            V.RUNTIME_ERROR, "cannot verify executed instructions: ncu (Nsight Compute) not found")
    attempts, profiles, run = [], [], None
    for replay in NCU_ATTEMPTS:
        if gpu_free is not None and gpu_free.is_set() and check_done is not None:
            while not check_done.wait(0.2) and not (cancel is not None and cancel.is_set()):
                pass  # the check may be timing now; a cancelled verdict needs no second profile
        prefix = ncu_mod.profile_command(str(tool), "{REPORT}", [], replay=replay, nvtx=True)
        run = run_stage({**spec, "mode": "ncu", "tool": prefix, "trials": spec["ncu_trials"],
                         "nvtx_last": ncu_mod.NVTX_RANGE},
                        workdir, "ncu", options.ncu_timeout_s, env=_stage_env(options, gpu), cancel=cancel)
        report_file = run.stage_dir / "report.ncu-rep"  # the judge copied it here from where ncu wrote it
        attempt = {"replay": replay, "seconds": round(run.seconds, 2), "timed_out": run.child.timed_out,
                   "isolation": (run.result or {}).get("isolation"),
                   "jail_ladder": (run.result or {}).get("jail_ladder")}
        attempts.append(attempt)
        if run.child.timed_out or run.child.cancelled:
            break
        if report_file.is_file():
            if gpu_free is not None:
                gpu_free.set()
            profiles = _ncu_imports(str(tool), report_file, run.stage_dir)
            attempt["kernels"] = len(profiles)
            if profiles:
                break
        elif _ncu_saw_no_kernel("".join((run.result or {}).get(k) or "" for k in ("runner_stdout", "runner_stderr"))):
            attempt["kernels"] = 0
        if run.result is not None and run.result.get("status") not in (None, "ok"):
            break  # the candidate itself failed: another replay mode will not help
    info = {"ran": bool(profiles), "attempts": attempts, "shape": spec["ncu_trials"][0][0],
            "gpu_watch": (run.result or {}).get("gpu_watch") if run else None,
            "candidate_output": (run.result or {}).get("candidate_output") if run else None,
            "isolation": attempts[-1].get("isolation") if attempts else None}
    if run is not None and (run.result or {}).get("status") == "forbidden_call":  # whatever the report says
        return info, (V.FORBIDDEN_CALL, "under Nsight Compute: " + run.result.get("detail", ""))
    if not profiles and run is not None and (run.result or {}).get("status") == "ok" \
            and any(a.get("kernels") == 0 for a in attempts):
        # The call ran and passed, yet no kernel was launched by the calling thread inside it (NVTX ranges
        # are per thread): the work went to another thread, where no instruction count can be tied to the call.
        return info, (V.NOT_EXECUTED, "Nsight Compute saw no kernel launched by the calling thread during the "
                                      "profiled call: the work runs on another thread, so its instructions cannot "
                                      "be shown to execute (the contract: launch on the calling thread)")
    if not profiles:
        judged = judge_stage("ncu", run, options.ncu_timeout_s) if run else None
        why = judged[1] if judged else _tail(run.child.stdout + "\n" + run.child.stderr, 8) if run else ""
        cat = judged[0] if judged and judged[0] in (V.TIMEOUT, V.INCORRECT, V.MEMORY_ERROR) else V.RUNTIME_ERROR
        return info, (cat, f"Nsight Compute could not profile the candidate's call: {why}")
    return ncu_judgement(info, profiles, spec, arch, required, task,
                         jit_modules=(run.result or {}).get("jit_modules") or [])


def _ncu_saw_no_kernel(tool_output: str) -> bool:
    """ncu profiled nothing and said so, with no error of its own: it writes no report then, only its warning, on
    the output it shares with the runner. After an error of ncu's (counters not permitted, a kernel it failed to
    profile) it says the same, and that is the tool's failure, not the candidate's. (A candidate that prints
    these lines itself only moves its own failure between not_executed and runtime_error.)"""
    return "No kernels were profiled" in tool_output and "==ERROR==" not in tool_output


def ncu_judgement(info: dict, profiles, spec: dict, arch, required, task, jit_modules=()):
    """The instructions the profiled call executed, and what they say. Every kernel in it is the candidate's doing
    (the runner launches nothing of its own). Whose code each kernel is, is decided by its code, not its name
    (ncu_provenance): a kernel whose SASS is, instruction for instruction, a function of a module the candidate's
    own toolchain produced in this evaluation (its build; the cubins its JIT wrote into its private cache during
    this stage) is the candidate's whatever its name ('gemm_kernel', 'cublas_like'); any other kernel is forbidden
    whatever its name, but for torch's utility kernels (fill, copy, elementwise: counted in the math, as the
    candidate's call launched them) and, for a JIT that keeps its code in memory (CuTe DSL: no module on disk for
    a specialisation its build did not make), a kernel under a name its build compiled. _same_kernels then ties
    this call to an observed one."""
    decided, forbidden = ncu_provenance(profiles, spec, jit_modules)
    names = sorted({d["name"] for d in decided if d["by"] != "forbidden"})
    shape = spec["ncu_trials"][-1][0]
    summary = ncu_mod.summarize(profiles, names, arch.families, required, task_flops=task.flops(shape))
    info = {**info, "profiled_names": sorted(p.name for p in profiles), **summary, "provenance": decided}
    # every launch under a name must be the candidate's code (an impostor first and the real kernel after is False)
    identity: dict[str, bool] = {}
    for d in decided:
        if d["by"] in ("code", "forbidden"):
            identity[d["name"]] = identity.get(d["name"], True) and d["by"] == "code"
    info["sass_identity"] = identity
    if forbidden:
        d = forbidden[0]
        return info, (V.FORBIDDEN_CALL, f"at run time the candidate's call launched {len(forbidden)} kernel(s) that "
                                        f"are not its own code, e.g. {d['name'][:120]}: {d['why']}")
    if getattr(task, "accumulator", "fp32") == "fp32":
        from xlang.archs import families

        executed = executed_narrow_accumulate(profiles, set(names), {f: families()[f] for f in arch.families})
        info["narrow_accumulate"] = executed
        if executed:
            return info, (V.INCORRECT, narrow_accumulate_detail(executed, "Nsight Compute, executed"))
    # The GPU computed the answer (issue 40): before the families, since a token kernel also misses them.
    info["gpu_compute"] = ncu_mod.gpu_compute_check(summary, task.min_gpu_flops_ratio)
    info["share_rule"] = {"min_share": task.min_tc_share, "ratio": list(task.tc_flops_ratio),
                          "other_bound": ncu_mod.other_math_bound(task.min_tc_share, task.tc_flops_ratio[1])}
    if info["gpu_compute"]["status"] == "off_gpu":
        return info, (V.HOST_COMPUTE, info["gpu_compute"]["detail"] + ": the answer was not computed on the GPU")
    if summary["missing"]:
        counts = ", ".join(f"{f}={summary['families'].get(f, 0):.0f}" for f in required)
        extra = f"; candidate kernels never launched: {', '.join(summary['not_launched'])}" \
            if summary["not_launched"] else ""
        return info, (V.NOT_EXECUTED, f"required famil{'y' if len(summary['missing']) == 1 else 'ies'} "
                                      f"{', '.join(summary['missing'])} executed by 0 threads at run time "
                                      f"(predicated-on threads: {counts}){extra}")
    why = ncu_mod.work_check(summary, min_share=task.min_tc_share, ratio=task.tc_flops_ratio)
    if why:
        return info, (V.NOT_EXECUTED, why)
    return info, None


def narrow_accumulate_detail(found: list[dict], where: str) -> str:
    """The verdict's words for MMAs that accumulate in fp16 ([{kernel, opcode, count or threads}])."""
    ops = sorted({f["opcode"] for f in found})
    kernels = sorted({f["kernel"] for f in found})
    return (f"{where}: {', '.join(ops[:3])} in {len(kernels)} kernel(s) (e.g. {kernels[0][:100]}) accumulate in "
            "fp16, where the contract says accumulate in fp32 (fp16 holds 65504 at most and 11 significant bits): a "
            "contract violation, incorrect whatever the trials show")


def executed_narrow_accumulate(profiles, own_names, families) -> list[dict]:
    """The fp16-accumulating MMAs (archs.toml narrow_accumulate) that the candidate's own kernels executed."""
    rules = [f.narrow_accumulate for f in families.values() if getattr(f, "narrow_accumulate", None) is not None]
    found: dict = {}
    for p in profiles:
        if p.name not in own_names:
            continue
        for ln in p.lines:
            if ln.threads > 0 and any(r.search(ln.opcode) for r in rules):
                key = (p.name, ln.opcode)
                found[key] = found.get(key, 0.0) + ln.threads
    return [{"kernel": k, "opcode": op, "threads": n} for (k, op), n in sorted(found.items())]


def ncu_provenance(profiles, spec: dict, jit_modules=()) -> tuple[list[dict], list[dict]]:
    """Per profiled launch: {name, by, ...} with by 'code' (its SASS is a function of the candidate's build or
    JIT-cache modules: `matched` names it), 'utility' (torch's fill / copy / elementwise kernels), 'name' (no SASS
    listing on the page, or a JIT that keeps kernels in memory: the name rule of before), or 'forbidden' (`why`);
    and the forbidden ones. The build's modules are disassembled first, the JIT's only when a kernel matches none."""
    from xlang import census
    from xlang.profiler.judge import _UTILITY_KERNEL

    built = [n for n in spec.get("build_kernels", []) if n]
    on_disk = spec.get("kernels_on_disk", True)
    sources = {"build": list(spec.get("build_modules") or []), "jit": [str(m) for m in jit_modules]}
    index: dict = {}
    read: set = set()

    def load(which: str) -> None:
        if which in read:
            return
        read.add(which)
        listings = []
        for path in sources[which]:
            try:
                listings.append(census.listing(Path(path)))
            except (OSError, RuntimeError, subprocess.SubprocessError):
                continue  # a module that cannot be disassembled matches nothing
        for n, entries in ncu_mod.module_index(listings).items():
            index.setdefault(n, []).extend(entries)

    decided, forbidden = [], []
    for p in profiles:
        load("build")
        matched = ncu_mod.sass_identity(p, index)
        if matched is False and sources["jit"]:
            load("jit")
            matched = ncu_mod.sass_identity(p, index)
        entry = {"name": p.name}
        if isinstance(matched, str):
            entry.update(by="code", matched=matched)
        elif _UTILITY_KERNEL.search(p.name) and not ncu_mod.forbidden_reason(p.name):
            entry.update(by="utility")
        elif matched is None or not on_disk:
            # No listing to compare (the page lacks this kernel's SASS), or CuTe DSL's in-memory JIT: the name rule
            # of before (a name its build compiled, or one unlike a vendor's) is all there is.
            why = ncu_mod.forbidden_reason(p.name)
            if ncu_mod.is_candidate_kernel(p.name, built) or not why:
                entry.update(by="name", note="no SASS listing on the source page" if matched is None else
                             "its JIT keeps kernels in memory: judged by name")
            else:
                entry.update(by="forbidden", why=f"{why}, and its build compiled no kernel of that name")
        else:
            differs = ncu_mod.first_difference(p, index)
            entry.update(by="forbidden", why="its SASS matches, instruction for instruction, none of the modules the "
                                             "candidate's toolchain produced in this evaluation (its build, the "
                                             "cubins its JIT wrote into its cache)"
                                             + (f"; against its build's kernel of that name, {differs}" if differs else ""))
        decided.append(entry)
        if entry["by"] == "forbidden":
            forbidden.append(entry)
    return decided, forbidden


def _same_kernels(executed: dict | None, observed: list | None, observed_first: list | None = None):
    """One observed world: the kernels Nsight Compute profiled in its call must be, name for name and count for
    count, the candidate's own kernels the observer saw in a timed call (`observed`: the last one;
    `observed_first`: the first, a fresh set of buffers as the profiled call has, where lazy per-buffer work is
    honest). Both lists hold only kernels from the candidate's own modules (judge._own_names), so a kernel of
    its own is compared whatever its name; on the Nsight Compute side, which has names only, a torch-utility
    name (fill, copy, index...) the candidate's own modules never ran is torch's and left out (it only adds
    non-tensor-core math under the profiler). A candidate that behaves differently under the profiler, or
    hides work outside the profiled range, fails here. None when either side is missing."""
    from xlang.profiler.judge import _UTILITY_KERNEL

    profiled = (executed or {}).get("profiled_names")
    if not profiled or observed is None:
        return None

    def norm(names):
        return sorted("".join(x.split())[:200] for x in names)

    own = set(norm(observed)) | set(norm(observed_first or []))
    ncu = [n for n in norm(profiled) if n in own or not _UTILITY_KERNEL.search(n)]
    if any(ncu == norm(o) for o in (observed, observed_first) if o is not None):
        return None
    only_ncu = sorted(set(ncu) - set(norm(observed)))
    only_obs = sorted(set(norm(observed)) - set(ncu))
    return (V.NOT_EXECUTED, f"the call profiled by Nsight Compute ran other kernels than a timed call: "
                            f"{len(ncu)} vs {len(norm(observed))} launches of the candidate's own kernels; "
                            f"only under ncu: {only_ncu[:3]}; only when timed: {only_obs[:3]}")


def _observer_library() -> tuple[str | None, str]:
    try:
        from xlang.profiler.observer import build_library

        cache = Path(os.environ.get("XLANG_CACHE", Path.home() / ".cache" / "xlang")) / "observer"
        return str(build_library(cache)), ""
    except Exception as e:  # noqa: BLE001 - without it, timing falls back to the judge's clock; recorded
        return None, f"CUPTI observer unavailable: {e}"


def _ncu_imports(tool: str, report: Path, workdir: Path) -> list:
    outputs = {}

    def page(key, cmd):
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
            outputs[key] = proc.stdout
            write_new(workdir / f"ncu_{key}.csv", proc.stdout)
            if proc.stderr.strip():
                write_new(workdir / f"ncu_{key}.stderr.txt", proc.stderr)
        except subprocess.TimeoutExpired:
            outputs[key] = ""

    with ThreadPoolExecutor(2) as pool:
        list(pool.map(lambda kc: page(*kc), (("source", ncu_mod.source_page_command(tool, str(report))),
                                             ("details", ncu_mod.details_page_command(tool, str(report))))))
    return ncu_mod.merge(ncu_mod.parse_source_page(outputs.get("source", "")),
                         ncu_mod.parse_details_page(outputs.get("details", "")))


# Nsight Compute replay modes, tried in turn until one profiles a kernel (kernel replay's memory save/restore
# fails on some candidates; without the NVTX filter every kernel of the call counts).
NCU_ATTEMPTS = ("kernel", "application")  # every kernel of the runner process


_OPTION_ALIASES = {"no_memcheck": ("memcheck", lambda v: not v), "no_ncu": ("ncu", lambda v: not v),
                   "no_timing": ("timing", lambda v: not v), "no_peers": ("peers", lambda v: not v)}


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


def peer_specs(task, options: EvalOptions) -> list[dict]:
    """What the judge is told of the task's peers: name, display, and `skip` (why no process is to be started for
    it) where its package is not installed in this Python (found without importing it: well under a second) or
    peers are off. The judge's own runner still decides for the others (its load fails if the import does)."""
    out = []
    for peer in task.peers:
        skip = "skipped (--no-peers)" if not options.peers else peer.missing()
        out.append({"name": peer.name, "display": peer.display, **({"skip": skip} if skip else {})})
    return out


PEER_CLOSE_S = 30.0  # a peer's process is given this long to leave after its budget (Runner.close)


def check_limit(options: EvalOptions, peers: list[dict]) -> float:
    """The check stage's limit: its own, plus each peer's budget for the peers it is to start."""
    running = sum(1 for p in peers if not p.get("skip"))
    return options.check_timeout_s + running * (options.peer_timeout_s + PEER_CLOSE_S)


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
        if p.is_file() and not p.is_symlink() and p.suffix in (".txt", ".csv", ".json") \
                and p.stat().st_size < (8 << 20):
            copy_untrusted_file(p, dest / p.name)



def evaluate(source_or_build, lang: str, task, arch, shape: dict | None = None,
             options: EvalOptions | None = None) -> V.Verdict:
    """Judge a candidate (source text, a Path, or a BuildResult) for one task on one architecture."""
    from xlang.backend import BuildResult, build_candidate, get_backend
    from xlang.task import peer_library_folders

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
    required = tuple(options.require or task.required_for(arch))
    seed = options.seed if options.seed is not None else random.SystemRandom().randrange(1, 2**31 - 10**6)
    verdict = V.Verdict(category=V.OK, lang=lang, task=task.name, arch=arch.name, shape=dict(shape))
    verdict.fingerprint = {"harness_version": xlang.HARNESS_VERSION, "xlang": xlang.__version__, "seed": seed,
                           "workdir": str(workdir), "stages": [s.name for s in STAGES]}
    stage_seconds: dict = {}
    verdict.fingerprint["tolerance"] = dict(task.tolerance)  # what "correct" meant (it may change per task)
    if task.output_tolerance or task.kind_output_scale:
        verdict.fingerprint["tolerance"].update(outputs=task.output_tolerance, kind_scales=task.kind_output_scale)
    verdict.fingerprint["stage_seconds"] = stage_seconds
    pool = ThreadPoolExecutor(3)
    held: list = []
    side_cancel, check_cancel = threading.Event(), threading.Event()
    gate: TimingGate | None = None

    def finish(category: str, detail: str) -> V.Verdict:
        side_cancel.set()
        check_cancel.set()
        if gate is not None:
            gate.open(go=False)
        pool.shutdown(wait=True)
        for lock in held:
            lock.release()
        verdict.category, verdict.detail = category, detail
        if category in (V.FORBIDDEN_CALL, V.INCORRECT, V.HOST_COMPUTE):
            # Wherever found (the ncu stage too, after the timing): a vendor's work, a wrong answer under the
            # profiler or an answer computed off the GPU is not a correct candidate, and its timing is never a
            # speedup of one.
            verdict.correct = False
        if category == V.HOST_COMPUTE:
            verdict.detail = detail + host_evidence_text(verdict)
        verdict.fingerprint["seconds"] = round(time.monotonic() - started, 2)
        try:
            replace_file(workdir / "verdict.json", json.dumps(verdict.to_dict(), indent=1, default=str))
            _archive(workdir, options, label)
        except OSError:
            pass
        return verdict

    # ---- screen, build, census (no GPU)
    if not source.strip():
        verdict.compiled = False
        return finish(V.NO_CODE, "no candidate code")
    reasons = backend.screen(source)
    if reasons:
        return finish(V.FORBIDDEN_CALL, "static screen: " + "; ".join(reasons))
    if build is None:
        t0 = time.monotonic()
        build = build_candidate(source, lang, task, arch, shape, required, workdir=workdir / "build")
        stage_seconds["build"] = round(time.monotonic() - t0, 2)
    verdict.build = build.to_dict()
    verdict.compiled = bool(build.ok)
    if not build.ok:
        return finish(V.COMPILE_ERROR, build.error or "the build failed")
    missing = list(build.census.missing) if build.census is not None else []
    verdict.census_ok = build.census is not None and not missing
    census_failure = (V.MISSING_INSTRUCTIONS,
                      f"static SASS census ({arch.sm}): required famil{'y' if len(missing) == 1 else 'ies'} "
                      f"{', '.join(missing)} not in any compiled kernel") if missing else None
    # The contract accumulates in fp32: an MMA that accumulates in fp16 in any compiled kernel is a violation
    # whether or not a trial happens to expose it (it cannot be told for every input), so it is incorrect here.
    narrow = build.census.narrow_accumulate if build.census is not None and task.accumulator == "fp32" else []
    accumulate_failure = (V.INCORRECT, narrow_accumulate_detail(narrow, f"static SASS census ({arch.sm})")) \
        if narrow else None

    gpu = gpu_mod.find_gpu(arch) if options.run != "never" else None
    if gpu is None:
        verdict.runtime_note = ("not run (runtime disabled)" if options.run == "never" else
                                f"not run (no GPU of compute capability {arch.compute_capability / 10:.1f} here)")
        if accumulate_failure:
            return finish(accumulate_failure[0], accumulate_failure[1] + "; " + verdict.runtime_note)
        if census_failure:
            return finish(census_failure[0], census_failure[1] + "; " + verdict.runtime_note)
        return finish(V.STATIC_OK, f"compiled for {arch.sm} with {', '.join(required)} present; {verdict.runtime_note}")

    # ---- runtime: only on a GPU of the architecture's compute capability
    verdict.runtime_ran = True
    verdict.isolation = isolation_level()
    rng = random.Random(seed)
    shapes = options.shapes or task.draw_shapes(dict(shape), rng, options.drawn_shapes, fixed=options.fixed)
    kinds = list(getattr(task, "input_kinds", ("normal",)))
    trials = [(s, kinds[(i + t) % len(kinds)], seed + 1000 * i + t)
              for i, s in enumerate(shapes) for t in range(options.trials)]
    smallest = min(shapes, key=lambda s: task.flops(s))
    drawn = [s for s in shapes[1:] if s != smallest]
    memcheck_trials = [(smallest, "normal", seed + 500)] + ([(max(drawn, key=task.flops), kinds[-1], seed + 501)]
                                                             if drawn else [])
    library, observer_note = _observer_library()
    timing_seed = options.timing_seed if options.timing_seed is not None else \
        random.SystemRandom().randrange(1, 2**31 - 10**6)
    load = build.load_path
    readable = [str(Path(load).resolve())]  # the file the runner loads: nothing else of the build folder
    spec = {
        "lang": lang, "task": task.name, "arch": arch.name, "device": "cuda", "gpu_index": gpu.get("index"),
        "gpu_minor": gpu.get("minor"),  # its /dev/nvidiaN: the jailed runners see that GPU only
        "hello": {"op": "hello", "device": "cuda", "lang": lang, "load": str(Path(load).resolve())},
        "readable": readable, "seed_cache": str(backend.seed_cache(build) or ""),
        "own_cubins": backend.own_cubins(build, workdir / "own-cubins"), "observer_library": library,
        "kernels_on_disk": backend.kernels_on_disk, "jit_kernel_prefix": backend.jit_kernel_prefix,
        "jit_cache": backend.jit_cache,
        "hidden": [str(p) for p in peer_library_folders()],  # the candidate's jail never shows the peers
        "build_kernels": [k.name for k in build.kernels],
        "build_kernel_stems": sorted({k.meta["stem"] for k in build.kernels if k.meta.get("stem")}),
        "build_modules": sorted({k.cubin for k in build.kernels if k.cubin}),  # its cubins / shared objects
        "trials": trials, "timed_shape": shapes[0], "memcheck_trials": memcheck_trials,
        "ncu_trials": [(shapes[0], "normal", seed + 700), (shapes[0], "normal", seed + 701)],
        "timing": {"enabled": options.timing, "budget_s": options.timing_budget_s, "seed": timing_seed,
                   "peer_budget_s": options.peer_timeout_s, "rest_ms": float(options.timing_rest_ms)},
        "peers": peer_specs(task, options) if options.timing else [],
        "call_timeout_s": options.check_timeout_s,
    }
    check_limit_s = check_limit(options, spec["peers"])
    side_by_side = options.overlap and (options.memcheck or options.ncu)
    if side_by_side and options.timing:
        gate = TimingGate(workdir, check_limit_s)
        longest = options.memcheck_timeout_s + len(NCU_ATTEMPTS) * options.ncu_timeout_s
        spec["timing"].update(gate=str(gate.path), gate_waiting=str(gate.waiting), gate_max_wait_s=longest + 60)
    held.append(gpu_mod.Exclusive(gpu).acquire())
    fresh = gpu_mod._from_nvml() or [gpu]
    verdict.fingerprint["gpu"] = next((g for g in fresh if g.get("index") == gpu.get("index")), gpu)
    verdict.fingerprint.update(shapes=shapes, trials=[[format_trial(t)] for t in trials], observer=library is not None,
                               observer_note=observer_note, isolation=verdict.isolation,
                               seeds={"base": seed, "timing": timing_seed})

    check_done, ncu_profiled = threading.Event(), threading.Event()
    check_box: dict = {}

    def run_check():
        t0 = time.monotonic()
        try:
            check_box["run"] = run_stage({**spec, "mode": "check"}, workdir, "check", check_limit_s,
                                         env=_stage_env(options, gpu), cancel=check_cancel,
                                         deadline=gate.deadline if gate else None)
        finally:
            stage_seconds["check"] = round(time.monotonic() - t0, 2)
            check_done.set()

    def timed(name, fn, *args, **kwargs):
        t0 = time.monotonic()
        try:
            return fn(*args, **kwargs)
        finally:
            stage_seconds[name] = round(time.monotonic() - t0, 2)

    check_future = pool.submit(run_check)
    mem_future = ncu_future = None
    if side_by_side:
        if options.memcheck:
            mem_future = pool.submit(timed, "memcheck", memcheck_stage, spec, workdir, options, gpu, side_cancel)
        if options.ncu:
            ncu_future = pool.submit(timed, "ncu", ncu_stage, spec, workdir, options, gpu, arch, required, task,
                                     side_cancel, gpu_free=ncu_profiled, check_done=check_done)
    side = [f for f in (mem_future, ncu_future) if f is not None]

    def off_the_gpu() -> bool:  # memcheck finished, Nsight Compute finished or at least its profile taken
        return all(f.done() or (f is ncu_future and ncu_profiled.is_set()) for f in side)

    # Timing waits at the gate until memcheck and ncu have left the GPU; a failed check stops them. A failure
    # already known skips the timing; the ncu report's reading can still fail the candidate after it.
    while side and not off_the_gpu():
        if check_done.is_set() and judge_stage("check", check_box["run"], check_limit_s):
            break
        time.sleep(0.02)
    if gate is not None and side and off_the_gpu():
        gate.open(go=not any(f.result()[1] for f in side if f.done()))
    check_future.result()
    check = check_box["run"]
    if check.result:
        verdict.isolation = check.result.get("isolation", verdict.isolation)  # what the judge itself could use
        verdict.fingerprint.update(check.result.get("fingerprint") or {})
        verdict.correctness = check.result.get("correctness")
        verdict.timing = check.result.get("timing")
        verdict.fingerprint["gpu_watch"] = check.result.get("gpu_watch")  # who held the GPU while it ran
        verdict.output = {"check": check.result.get("candidate_output")}
        if (verdict.timing or {}).get("clocks"):
            verdict.fingerprint["gpu"] = {**verdict.fingerprint["gpu"], **verdict.timing["clocks"],
                                          "clocks_sampled": "after the timed repetitions"}
    judged = judge_stage("check", check, check_limit_s)
    verdict.correct = bool(verdict.correctness and verdict.correctness.get("passed")) and \
        (judged is None or judged[0] not in (V.INCORRECT, V.RUNTIME_ERROR, V.TIMEOUT, V.FORBIDDEN_CALL))
    if judged:  # incorrect in a verified timed call after correct trials included: correct is False above
        return finish(*min([judged] + [accumulate_failure] * bool(accumulate_failure),
                           key=lambda f: V.STAGE_ORDER.index(f[0])))
    if not side_by_side:
        if options.memcheck:
            mem_future = pool.submit(timed, "memcheck", memcheck_stage, spec, workdir, options, gpu)
        if options.ncu:
            ncu_future = pool.submit(timed, "ncu", ncu_stage, spec, workdir, options, gpu, arch, required, task)
    failures = []
    if mem_future is not None:
        verdict.memcheck, failure = mem_future.result()
        _take_output(verdict, "memcheck", verdict.memcheck)
        failures.append(failure)
    else:
        verdict.memcheck = {"ran": False, "note": "skipped (--no-memcheck)"}
    # The jail of every stage (a tool stage takes the strongest its tool works in: judge.tool_jail_variant).
    verdict.fingerprint["stage_isolation"] = {"check": verdict.isolation,
                                              "memcheck": (verdict.memcheck or {}).get("isolation"), "ncu": None}
    if ncu_future is not None:
        verdict.executed, failure = ncu_future.result()
        _take_output(verdict, "ncu", verdict.executed)
        verdict.fingerprint["stage_isolation"]["ncu"] = (verdict.executed or {}).get("isolation")
        verdict.executed_ok = True if failure is None else \
            False if failure[0] in (V.NOT_EXECUTED, V.HOST_COMPUTE) else None
        failures.append(failure)
    else:
        verdict.executed = {"ran": False, "note": "skipped (--no-ncu): instructions not verified at run time, nor "
                                                  "that the GPU computed the answer (its FLOPs against the task's)"}
    world = _same_kernels(verdict.executed, (check.result or {}).get("timed_call_kernels"),
                          (check.result or {}).get("timed_first_call_kernels"))
    if world:
        failures.append(world)
    failures = [f for f in failures if f] + [accumulate_failure] * bool(accumulate_failure)
    if failures:  # the first in the declared order, the census's failure included
        first = min(failures + [census_failure] * bool(census_failure), key=lambda f: V.STAGE_ORDER.index(f[0]))
        if first is census_failure and verdict.correct:
            # What PTXBench counts apart: correct, yet without the target instructions.
            first = (first[0], first[1] + f" (the candidate is correct; also: {failures[0][1][:300]})")
        return finish(*first)
    if census_failure:
        return finish(census_failure[0], census_failure[1] + " (the candidate is correct: "
                      + _ok_detail(verdict, required) + ")")
    return finish(V.OK, _ok_detail(verdict, required))


def _take_output(verdict: V.Verdict, stage: str, info: dict | None) -> None:
    """A tool stage's tail of the candidate's output, from its info into verdict.output (kept once)."""
    out = (info or {}).pop("candidate_output", None) if isinstance(info, dict) else None
    if out is not None:
        verdict.output = {**(verdict.output or {}), stage: out}


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
        parts.append(f"{t['speedup']:.3f}x {t['baseline_name']} ({t['tflops']:.0f} vs {t['baseline_tflops']:.0f} TFLOP/s)"
                     + (" [BEYOND ROOFLINE: suspicious]" if t.get("beyond_roofline") else ""))
    best = t.get("best_peer")
    if best and best.get("speedup"):
        parts.append(f"{best['speedup']:.3f}x {best['display']} (the fastest peer)")
    return "; ".join(parts)


def gpu_compute_text(executed: dict | None) -> str:
    """Whether the GPU was shown to compute the answer (its own kernels' FLOPs against the task's), in words."""
    gc = (executed or {}).get("gpu_compute") or {}
    if gc.get("status") == "ok":
        return f"GPU computed it ({gc['gpu_to_task']:.2f}x the task's FLOPs in its own kernels)"
    if gc.get("status") == "unverified":
        return "GPU computation not verified (" + gc.get("detail", "") + ")"
    return "GPU computation not verified (Nsight Compute did not run)"


def host_evidence_text(verdict: V.Verdict) -> str:
    """What the observed calls showed of a host round trip (judge.host_evidence), for a host_compute detail."""
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
