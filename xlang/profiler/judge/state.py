"""One judge process's live state (JudgeState), shared by its stage's work: the plan it was given, the task, the
candidate's runner and observer. The only `state` in xlang/profiler/judge/; the parent's is pipeline.Context."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from xlang.profiler.judge.plan import Plan


@dataclass
class JudgeState:
    plan: Plan
    task: Any  # xlang.task.Task
    kind: str  # "cuda" or "cpu": where the buffers live (plan.device)
    secret: int = 0  # picks the verified timed calls: drawn in the judge, never in the plan the candidate could read
    observer: Any = None  # the candidate runner's CUPTI observer (check)
    runner: Any = None  # the candidate's runner (process.Runner)
    jit_modules: list = field(default_factory=list)  # ncu: copies of the cubins its JIT wrote (tools.py)

    @property
    def call_timeout_s(self) -> float:
        return float(self.plan.call_timeout_s)
