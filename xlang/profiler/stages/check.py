"""The check stage, in the parent: its judge (mode "check": xlang.profiler.judge.check.run_check) checks the
candidate's correctness on the shapes drawn for this evaluation, then times the candidate, the vendor
(judge/timing.py) and the task's peers (judge/peers.py) once the stages beside it have left the GPU (the gate,
stages/timing.py); its report's findings go into the verdict here (record_report)."""

from __future__ import annotations

from xlang import verdict as V
from xlang.profiler.judge.plan import Plan
from xlang.profiler.stages.base import Failure, GpuStage
from xlang.profiler.stages.launch import run_stage, stage_env, stage_failure


class Check(GpuStage):
    name = "check"
    categories = (V.RUNTIME_ERROR, V.TIMEOUT, V.INCORRECT, V.MEMORY_ERROR, V.FORBIDDEN_CALL, V.HARNESS_ERROR)
    runs = "the judge: correctness on drawn shapes, observed kernels, timing against the vendor"

    def plan(self, job, ctx) -> Plan:
        return ctx.plan.but(mode="check")

    def timeout_s(self, ctx) -> float:
        return ctx.check_limit_s  # its own limit, the peers' budgets and the suite's shapes (evaluate.start_gpu)

    def launch(self, plan: Plan, job, ctx):
        # Its clock stops while it waits at the timing gate (TimingGate.deadline).
        run = run_stage(plan, ctx.workdir, "check", self.timeout_s(ctx), env=stage_env(ctx.options, ctx.gpu),
                        cancel=ctx.cancel[self.name], deadline=ctx.gate.deadline if ctx.gate else None)
        return run, stage_failure("check", run, self.timeout_s(ctx))

    def others_left(self, job, ctx, failed: bool) -> None:
        """memcheck and ncu have left the GPU: the timing may start ('go'), unless one of them has failed."""
        if ctx.gate is not None:
            ctx.gate.open(go=not failed)

    def record_report(self, run, verdict, failure: Failure | None, reports: dict) -> Failure | None:
        report = run.result  # the judge's Report, None when it wrote none
        if report:
            if report.isolation is not None:  # what the judge itself could use
                verdict.isolation = report.isolation
            verdict.fingerprint.update(report.fingerprint or {})
            verdict.correctness = report.correctness
            verdict.timing = report.timing
            if report.suite:  # --suite: the per-shape timings (xlang.suites.suite_result)
                verdict.suite = report.suite
            verdict.fingerprint["gpu_watch"] = report.gpu_watch  # who held the GPU while it ran
            verdict.output = {"check": report.candidate_output}
            if (verdict.timing or {}).get("clocks"):
                verdict.fingerprint["gpu"] = {**verdict.fingerprint["gpu"], **verdict.timing["clocks"],
                                              "clocks_sampled": "after the timed repetitions"}
        # incorrect in a verified timed call after correct trials included: correct is False
        verdict.correct = bool(verdict.correctness and verdict.correctness.get("passed")) and \
            (failure is None or failure[0] not in (V.INCORRECT, V.RUNTIME_ERROR, V.TIMEOUT, V.FORBIDDEN_CALL,
                                                  V.HARNESS_ERROR))
        if failure is None:
            # The jail of every stage (a tool stage takes the strongest its tool works in: tool_jail_variant).
            verdict.fingerprint["stage_isolation"] = {"check": verdict.isolation}
        return failure


STAGE = Check()
