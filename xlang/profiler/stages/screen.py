"""The screen stage: no code (no_code), and the language's static screen of the source (forbidden_call: calls that
hand the work to a vendor library or torch, Backend.screen)."""

from __future__ import annotations

from xlang import verdict as V
from xlang.profiler.stages.base import Failure, StageBase


class Screen(StageBase):
    name, categories, runs = "screen", (V.NO_CODE, V.FORBIDDEN_CALL), "a static screen of the source"

    def run(self, job, ctx) -> Failure | None:
        if not ctx.source.strip():
            return V.NO_CODE, "no candidate code"
        reasons = ctx.backend.screen(ctx.source)
        if reasons:
            return V.FORBIDDEN_CALL, "static screen: " + "; ".join(reasons)
        return None

    def record(self, job, ctx, failure: Failure | None) -> Failure | None:
        if failure is not None and failure[0] == V.NO_CODE:  # nothing to compile
            ctx.verdict.compiled = False
        return failure


STAGE = Screen()
