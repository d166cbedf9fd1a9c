"""What every stage module shares: a failure's shape, the defaults of a Stage (xlang.profiler.pipeline) and of a
GPU stage (GpuStage: plan -> its judge's process -> record)."""

from __future__ import annotations

from typing import Any

from xlang.profiler.judge.plan import Plan
from xlang.profiler.stages.launch import run_stage, stage_env, stage_failure

Failure = tuple[str, str]  # (category, detail)


class StageBase:
    """Defaults for a Stage: runs always, stops on failure, beside nothing, records nothing."""

    gpu, stops, beside = False, True, None

    def enabled(self, job, ctx) -> bool:
        return True

    def record(self, job, ctx, failure: Failure | None) -> Failure | None:
        return failure

    def others_left(self, job, ctx, failed: bool) -> None:
        pass


class GpuStage(StageBase):
    """A GPU stage, one typed unit in three steps, each on its side of the process boundary:
      plan(job, ctx) -> Plan        in the parent: what its judge is to do (from ctx.plan, start_gpu's)
      its judge's work              in the judge process: xlang.profiler.judge.main.MODES[plan.mode](state)
                                    -> the Report (xlang.profiler.judge.plan) it writes back
      record(report, verdict, ...)  in the parent, in the scheduler's thread: the report into the verdict
    launch(plan, job, ctx) runs the judge (stages/launch.py run_stage) and says what the run earned: the default
    runs it once with the stage's limit (timeout_s); a stage that reads a tool's files as well overrides it."""

    gpu = True

    def plan(self, job, ctx) -> Plan:
        raise NotImplementedError

    def timeout_s(self, ctx) -> float:
        raise NotImplementedError

    def launch(self, plan: Plan, job, ctx) -> tuple[Any, Failure | None]:
        """-> (what record() reads: here the StageRun, whose .result is the judge's Report; its failure)."""
        run = run_stage(plan, ctx.workdir, self.name, self.timeout_s(ctx), env=stage_env(ctx.options, ctx.gpu),
                        cancel=ctx.cancel[self.name])
        return run, stage_failure(self.name, run, self.timeout_s(ctx))

    def run(self, job, ctx) -> Failure | None:
        ctx.reports[self.name], failure = self.launch(self.plan(job, ctx), job, ctx)
        return failure

    def record(self, job, ctx, failure: Failure | None) -> Failure | None:
        return self.record_report(ctx.reports.get(self.name), ctx.verdict, failure, ctx.reports)

    def record_report(self, report, verdict, failure: Failure | None, reports: dict) -> Failure | None:
        """What its launch left (None: it did not run, being off) into the verdict; returns the failure that
        stands. reports: every stage's (the ncu stage compares its kernels with the check's)."""
        return failure


def take_output(verdict, stage: str, info: dict | None) -> None:
    """A tool stage's tail of the candidate's output, from its info into verdict.output (kept once)."""
    out = (info or {}).pop("candidate_output", None) if isinstance(info, dict) else None
    if out is not None:
        verdict.output = {**(verdict.output or {}), stage: out}
