"""The memcheck stage: the candidate's process under compute-sanitizer memcheck, its log in the judge's folder
(memory_error; a memcheck that does not finish is a failure, never a pass)."""

from __future__ import annotations

from pathlib import Path

from xlang import verdict as V
from xlang.profiler import sanitizer as san_mod
from xlang.profiler.options import EvalOptions
from xlang.profiler.judge.plan import Plan
from xlang.profiler.stages.base import Failure, GpuStage, take_output
from xlang.profiler.stages.launch import run_stage, stage_env, stage_failure
from xlang.toolchain import find_tool
from xlang.untrusted import read_untrusted


def memcheck_stage(plan: Plan, workdir: Path, options: EvalOptions, gpu: dict, cancel=None):
    """plan: the stage's (Memcheck.plan); the tool's command is added here, where the tool is found."""
    tool = find_tool("compute-sanitizer")
    if tool is None:
        return {"ran": False, "note": "compute-sanitizer not found"}, None
    prefix = san_mod.command(str(tool), []) + ["--log-file", "{LOG}"]
    # No caching allocator in the judge either way: the candidate's buffers are allocations of their own.
    run = run_stage(plan.but(tool=prefix), workdir, "memcheck", options.memcheck_timeout_s,
                    env=stage_env(options, gpu), cancel=cancel)
    report = run.result
    raw = read_untrusted(run.stage_dir / "tool.log", 256 << 20) or ""  # the judge's copy of the tool's log
    parsed = san_mod.parse_memcheck("\n".join("========= " + ln if not ln.startswith("=") else ln
                                               for ln in raw.splitlines()))
    info = {"ran": True, "shapes": [t[0] for t in plan.trials], "seconds": round(run.seconds, 2),
            "isolation": report and report.isolation, "jail_ladder": report and report.jail_ladder,
            "errors": parsed["errors"], "kinds": parsed["kinds"], "reports": parsed["reports"][:5],
            "summary_found": parsed["summary_found"]}
    if run.child.cancelled:
        return {**info, "ran": False, "note": "cancelled"}, None
    if run.child.timed_out:
        return {**info, "ran": False}, (V.TIMEOUT, f"memcheck did not finish within {options.memcheck_timeout_s:.0f} s:"
                                                  " a memory check that does not finish is not a pass")
    info["gpu_watch"] = report and report.gpu_watch
    info["candidate_output"] = report and report.candidate_output  # record_report moves it to verdict.output
    if report and report.status == "forbidden_call":  # a second GPU process: what the sanitizer saw is moot
        return info, (V.FORBIDDEN_CALL, "under compute-sanitizer: " + (report.detail or ""))
    if parsed["errors"]:
        info["summary"] = san_mod.describe(parsed)
        return info, (V.MEMORY_ERROR, info["summary"])
    judged = stage_failure("memcheck", run, options.memcheck_timeout_s)
    if judged is not None:
        return info, (judged[0], "under compute-sanitizer: " + judged[1])
    code = report and report.runner_exit
    if code not in (0, san_mod.ERROR_EXIT_CODE):  # the tool itself must end well, or its log is not its last word
        return info, (V.RUNTIME_ERROR, f"compute-sanitizer ended abnormally (exit {code}): the memory check is "
                                       "not complete")
    if not parsed["summary_found"]:
        return info, (V.RUNTIME_ERROR, "compute-sanitizer wrote no ERROR SUMMARY: the memory check is not complete")
    return info, None


class Memcheck(GpuStage):
    name, stops, beside = "memcheck", False, "check"
    categories = (V.MEMORY_ERROR, V.FORBIDDEN_CALL, V.TIMEOUT, V.RUNTIME_ERROR, V.HARNESS_ERROR)
    runs = "compute-sanitizer memcheck"

    def enabled(self, job, ctx) -> bool:
        return ctx.options.memcheck

    def plan(self, job, ctx) -> Plan:
        return ctx.plan.but(mode="memcheck", trials=ctx.plan.memcheck_trials)

    def launch(self, plan: Plan, job, ctx):
        """-> (its record of the run: the tool's log parsed, what the judge reported; its failure)."""
        return memcheck_stage(plan, ctx.workdir, ctx.options, ctx.gpu, ctx.cancel[self.name])

    def record_report(self, info, verdict, failure: Failure | None, reports: dict) -> Failure | None:
        if info is not None:
            verdict.memcheck = info
            take_output(verdict, "memcheck", verdict.memcheck)
        else:
            verdict.memcheck = {"ran": False, "note": "skipped (--no-memcheck)"}
        verdict.fingerprint["stage_isolation"]["memcheck"] = (verdict.memcheck or {}).get("isolation")
        return failure


STAGE = Memcheck()
