"""The ncu stage: the candidate's process under Nsight Compute. Kernels whose SASS is no module of the candidate's
toolchain, its build or its JIT cache (forbidden_call); fp16 accumulators executed (incorrect); its own kernels'
FLOPs against the task's (the GPU computed the answer, else host_compute); the required families executed, their
share of the executed math and their FLOPs against the task's (not_executed); the profiled call's kernels against
an observed timed call's (not_executed)."""

from __future__ import annotations

import subprocess
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from xlang import verdict as V
from xlang.profiler import executed, sass_identity
from xlang.profiler import ncu as ncu_mod
from xlang.profiler.options import EvalOptions
from xlang.profiler.judge.plan import Plan
from xlang.profiler.stages.base import Failure, GpuStage, take_output
from xlang.profiler.stages.census import narrow_accumulate_detail
from xlang.profiler.gpuwatch import GPU_NOT_ALONE
from xlang.profiler.judge.observed import UTILITY_KERNEL
from xlang.profiler.stages.launch import last_lines, run_stage, stage_env, stage_failure
from xlang.toolchain import find_tool
from xlang.untrusted import write_new


def ncu_stage(plan: Plan, workdir: Path, options: EvalOptions, gpu: dict, arch, required, task, cancel=None,
              gpu_free: threading.Event | None = None, check_done: threading.Event | None = None):
    """plan: the stage's (Ncu.plan); each attempt adds its tool's command. The profiled call is the last of
    plan.trials (an NVTX range; the calls before it compile and autotune). Its kernels are compared with an observed timed call's in Ncu.record.
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
        run = run_stage(plan.but(tool=prefix), workdir, "ncu", options.ncu_timeout_s, env=stage_env(options, gpu),
                        cancel=cancel)
        report_file = run.stage_dir / "report.ncu-rep"  # the judge copied it here from where ncu wrote it
        attempt = {"replay": replay, "seconds": round(run.seconds, 2), "timed_out": run.child.timed_out,
                   "isolation": run.result and run.result.isolation,
                   "jail_ladder": run.result and run.result.jail_ladder}
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
        elif _ncu_saw_no_kernel("".join(x or "" for x in ((run.result.runner_stdout, run.result.runner_stderr)
                                                            if run.result else ()))):
            attempt["kernels"] = 0
        if run.result is not None and run.result.status not in (None, "ok"):
            break  # the candidate itself failed: another replay mode will not help
    report = run.result if run else None
    info = {"ran": bool(profiles), "attempts": attempts, "shape": plan.trials[0][0],
            "gpu_watch": report and report.gpu_watch,
            "candidate_output": report and report.candidate_output,
            "isolation": attempts[-1].get("isolation") if attempts else None}
    if report and report.status == "forbidden_call":  # whatever the profile says
        return info, (V.FORBIDDEN_CALL, "under Nsight Compute: " + (report.detail or ""))
    if report and report.harness == GPU_NOT_ALONE:  # a profile may be there: not judged
        return info, stage_failure("ncu", run, options.ncu_timeout_s)
    if not profiles and report and report.status == "ok" \
            and any(a.get("kernels") == 0 for a in attempts):
        # The call ran and passed, yet no kernel was launched by the calling thread inside it (NVTX ranges
        # are per thread): the work went to another thread, where no instruction count can be tied to the call.
        return info, (V.NOT_EXECUTED, "Nsight Compute saw no kernel launched by the calling thread during the "
                                      "profiled call: the work runs on another thread, so its instructions cannot "
                                      "be shown to execute (the contract: launch on the calling thread)")
    if not profiles:
        judged = stage_failure("ncu", run, options.ncu_timeout_s) if run else None
        why = judged[1] if judged else last_lines(run.child.stdout + "\n" + run.child.stderr, 8) if run else ""
        cat = judged[0] if judged and judged[0] in (V.TIMEOUT, V.INCORRECT, V.MEMORY_ERROR, V.HARNESS_ERROR) \
            else V.RUNTIME_ERROR
        return info, (cat, f"Nsight Compute could not profile the candidate's call: {why}")
    return ncu_judgement(info, profiles, plan, arch, required, task, jit_modules=(report and report.jit_modules) or [])


def _ncu_saw_no_kernel(tool_output: str) -> bool:
    """ncu profiled nothing and said so, with no error of its own: it writes no report then, only its warning, on
    the output it shares with the runner. After an error of ncu's (counters not permitted, a kernel it failed to
    profile) it says the same, and that is the tool's failure, not the candidate's. (A candidate that prints
    these lines itself only moves its own failure between not_executed and runtime_error.)"""
    return "No kernels were profiled" in tool_output and "==ERROR==" not in tool_output


def ncu_judgement(info: dict, profiles, plan: Plan, arch, required, task, jit_modules=()):
    """The instructions the profiled call executed, and what they say. Every kernel in it is the candidate's doing
    (the runner launches nothing of its own). Whose code each kernel is, is decided by its code, not its name
    (ncu_provenance): a kernel whose SASS is, instruction for instruction, a function of a module the candidate's
    own toolchain produced in this evaluation (its build; the cubins its JIT wrote into its private cache during
    this stage) is the candidate's whatever its name ('gemm_kernel', 'cublas_like'); any other kernel is forbidden
    whatever its name, but for torch's utility kernels (fill, copy, elementwise: counted in the math, as the
    candidate's call launched them) and, for a JIT that keeps its code in memory (CuTe DSL: no module on disk for
    a specialisation its build did not make), a kernel under a name its build compiled. _same_kernels then ties
    this call to an observed one."""
    decided, forbidden = ncu_provenance(profiles, plan, jit_modules)
    names = sorted({d["name"] for d in decided if d["by"] != "forbidden"})
    shape = plan.trials[-1][0]  # the profiled call's
    summary = executed.summarize(profiles, names, arch.families, required, task_flops=task.flops(shape))
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

        narrow = executed_narrow_accumulate(profiles, set(names), {f: families()[f] for f in arch.families})
        info["narrow_accumulate"] = narrow
        if narrow:
            return info, (V.INCORRECT, narrow_accumulate_detail(narrow, "Nsight Compute, executed"))
    # The GPU computed the answer (issue 40): before the families, since a token kernel also misses them.
    info["gpu_compute"] = executed.gpu_compute_check(summary, task.min_gpu_flops_ratio)
    info["share_rule"] = {"min_share": task.min_tc_share, "ratio": list(task.tc_flops_ratio),
                          "other_bound": executed.other_math_bound(task.min_tc_share, task.tc_flops_ratio[1])}
    if info["gpu_compute"]["status"] == "off_gpu":
        return info, (V.HOST_COMPUTE, info["gpu_compute"]["detail"] + ": the answer was not computed on the GPU")
    if summary["missing"]:
        counts = ", ".join(f"{f}={summary['families'].get(f, 0):.0f}" for f in required)
        extra = f"; candidate kernels never launched: {', '.join(summary['not_launched'])}" \
            if summary["not_launched"] else ""
        return info, (V.NOT_EXECUTED, f"required famil{'y' if len(summary['missing']) == 1 else 'ies'} "
                                      f"{', '.join(summary['missing'])} executed by 0 threads at run time "
                                      f"(predicated-on threads: {counts}){extra}")
    why = executed.work_check(summary, min_share=task.min_tc_share, ratio=task.tc_flops_ratio)
    if why:
        return info, (V.NOT_EXECUTED, why)
    return info, None


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


def ncu_provenance(profiles, plan: Plan, jit_modules=()) -> tuple[list[dict], list[dict]]:
    """Per profiled launch: {name, by, ...} with by 'code' (its SASS is a function of the candidate's build or
    JIT-cache modules: `matched` names it), 'utility' (torch's fill / copy / elementwise kernels), 'name' (no SASS
    listing on the page, or a JIT that keeps kernels in memory: the name rule of before), or 'forbidden' (`why`);
    and the forbidden ones. The build's modules are disassembled first, the JIT's only when a kernel matches none."""
    from xlang import census
    built = [n for n in plan.build_kernels if n]
    on_disk = plan.kernels_on_disk
    sources = {"build": list(plan.build_modules or []), "jit": [str(m) for m in jit_modules]}
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
        for n, entries in sass_identity.module_index(listings).items():
            index.setdefault(n, []).extend(entries)

    decided, forbidden = [], []
    for p in profiles:
        load("build")
        matched = sass_identity.sass_identity(p, index)
        if matched is False and sources["jit"]:
            load("jit")
            matched = sass_identity.sass_identity(p, index)
        entry = {"name": p.name}
        if isinstance(matched, str):
            entry.update(by="code", matched=matched)
        elif UTILITY_KERNEL.search(p.name) and not ncu_mod.forbidden_reason(p.name):
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
            differs = sass_identity.first_difference(p, index)
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
    honest). Both lists hold only kernels from the candidate's own modules (check.own_names), so a kernel of
    its own is compared whatever its name; on the Nsight Compute side, which has names only, a torch-utility
    name (fill, copy, index...) the candidate's own modules never ran is torch's and left out (it only adds
    non-tensor-core math under the profiler). A candidate that behaves differently under the profiler, or
    hides work outside the profiled range, fails here. None when either side is missing."""
    profiled = (executed or {}).get("profiled_names")
    if not profiled or observed is None:
        return None

    def norm(names):
        return sorted("".join(x.split())[:200] for x in names)

    own = set(norm(observed)) | set(norm(observed_first or []))
    ncu = [n for n in norm(profiled) if n in own or not UTILITY_KERNEL.search(n)]
    if any(ncu == norm(o) for o in (observed, observed_first) if o is not None):
        return None
    only_ncu = sorted(set(ncu) - set(norm(observed)))
    only_obs = sorted(set(norm(observed)) - set(ncu))
    return (V.NOT_EXECUTED, f"the call profiled by Nsight Compute ran other kernels than a timed call: "
                            f"{len(ncu)} vs {len(norm(observed))} launches of the candidate's own kernels; "
                            f"only under ncu: {only_ncu[:3]}; only when timed: {only_obs[:3]}")


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


class Ncu(GpuStage):
    name, stops, beside = "ncu", False, "check"
    categories = (V.INCORRECT, V.HOST_COMPUTE, V.NOT_EXECUTED, V.FORBIDDEN_CALL, V.TIMEOUT, V.RUNTIME_ERROR,
                  V.HARNESS_ERROR)
    runs = "Nsight Compute"

    def enabled(self, job, ctx) -> bool:
        return ctx.options.ncu

    def plan(self, job, ctx) -> Plan:
        return ctx.plan.but(mode="ncu", trials=ctx.plan.ncu_trials, nvtx_last=ncu_mod.NVTX_RANGE)

    def launch(self, plan: Plan, job, ctx):
        """-> (its record of the profile: what executed, whose code it was; its failure)."""
        # Beside the check: its GPU is free once the profile is taken (off_gpu), and a second attempt waits until
        # the check (and its timing) is done, so that no profile ever runs beside the timing.
        beside = {"gpu_free": ctx.off_gpu[self.name], "check_done": ctx.done[self.beside]} if ctx.options.overlap \
            else {}
        return ncu_stage(plan, ctx.workdir, ctx.options, ctx.gpu, ctx.arch, job.required, ctx.task,
                         ctx.cancel[self.name], **beside)

    def record_report(self, info, verdict, failure: Failure | None, reports: dict) -> Failure | None:
        """Its own failure, else the profiled call's kernels against an observed timed call's (not_executed,
        which no failure of its own comes after)."""
        if info is None:
            verdict.executed = {"ran": False, "note": "skipped (--no-ncu): instructions not verified at run time, "
                                                      "nor that the GPU computed the answer (its FLOPs against the "
                                                      "task's)"}
            verdict.fingerprint["stage_isolation"]["ncu"] = None
            return None
        verdict.executed = info
        take_output(verdict, "ncu", verdict.executed)
        verdict.fingerprint["stage_isolation"]["ncu"] = (verdict.executed or {}).get("isolation")
        verdict.executed_ok = True if failure is None else \
            False if failure[0] in (V.NOT_EXECUTED, V.HOST_COMPUTE) else None
        check = reports["check"].result  # the check's judge's Report (None: it wrote none)
        return failure or _same_kernels(verdict.executed, check and check.timed_call_kernels,
                                        check and check.timed_first_call_kernels)


STAGE = Ncu()
