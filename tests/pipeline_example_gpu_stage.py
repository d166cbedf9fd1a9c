"""A GPU verdict stage added the way ARCHITECTURE.md says (one file, one line in the list): once the check has
passed, the candidate is called once more by a judge of its own, on the smallest drawn shape, and the canaries in
the slack around its buffers are checked after the call (the check's judge mode, without timing: a write outside
a buffer is memory_error). tests/test_pipeline.py puts it into the pipeline on a stand-in GPU with the real judge
run on the CPU. It is not in xlang's pipeline: every verdict's fingerprint lists its stages, so a stage added there
changes every verdict (and adds a judge process to each)."""

from __future__ import annotations

from xlang import verdict as V
from xlang.profiler.judge.plan import Plan, TimingPlan
from xlang.profiler.stages.base import Failure, GpuStage


class GuardCanary(GpuStage):
    name, stops = "guard", False
    categories = (V.MEMORY_ERROR, V.RUNTIME_ERROR, V.TIMEOUT, V.INCORRECT, V.FORBIDDEN_CALL, V.HARNESS_ERROR)
    runs = "one more call of the candidate on guarded buffers, its canaries checked after it"

    def plan(self, job, ctx) -> Plan:
        smallest = ctx.plan.memcheck_trials[0]  # evaluate.start_gpu: the smallest drawn shape, normal inputs
        return ctx.plan.but(mode="check", trials=[smallest], timing=TimingPlan(), peers=[], suite=None)

    def timeout_s(self, ctx) -> float:
        return ctx.options.check_timeout_s

    def record_report(self, run, verdict, failure: Failure | None, reports: dict) -> Failure | None:
        verdict.fingerprint["stage_isolation"]["guard"] = run.result.isolation if run.result else None
        return failure


STAGE = GuardCanary()
