"""Typed judge plans and states for tests that call the judge's functions directly (xlang.profiler.judge.plan.Plan,
xlang.profiler.judge.state.JudgeState): the fields a test names, the required rest filled with a GEMM's."""

from __future__ import annotations

from xlang.profiler.judge.plan import Plan
from xlang.profiler.judge.state import JudgeState
from xlang.task import get_task

REQUIRED = {"mode": "check", "lang": "triton", "task": "gemm", "arch": "h100", "hello": {}, "trials": []}


def plan(**fields) -> Plan:
    """Strict, as the judge reads its spec file: a field Plan does not declare is an error."""
    return Plan.from_dict({**REQUIRED, **fields})


def state(task=None, kind: str = "cpu", secret: int = 0, **fields) -> JudgeState:
    task = task or get_task(fields.get("task", "gemm"))
    return JudgeState(plan(task=task.name, **fields), task, kind, secret=secret)
