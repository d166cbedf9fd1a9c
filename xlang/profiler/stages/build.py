"""The build stage: the candidate compiled for the architecture with no GPU (Python languages run the candidate's
code for it in a jail), cached by content (compile_error). A build given to the evaluation is taken as it is."""

from __future__ import annotations

import time

import xlang.backend  # build_candidate is looked up when called: tests wrap it
from xlang import verdict as V
from xlang.profiler.stages.base import Failure, StageBase


class Build(StageBase):
    name, categories = "build", (V.COMPILE_ERROR,)
    runs = "the language's compiler for the target (Python languages: jailed)"

    def run(self, job, ctx) -> Failure | None:
        if ctx.build is None:
            t0 = time.monotonic()
            where = ctx.build_dir or ctx.workdir / "build"
            if ctx.build_fn is not None:  # the agent loop's runtime (Ray: a CPU task) builds with the task's families
                ctx.build = ctx.build_fn(ctx.source, job.lang, ctx.task, ctx.arch, job.shape_dict, workdir=where)
            else:
                ctx.build = xlang.backend.build_candidate(ctx.source, job.lang, ctx.task, ctx.arch, job.shape_dict,
                                                          job.required, workdir=where)
            ctx.stage_seconds["build"] = round(time.monotonic() - t0, 2)
        if not ctx.build.ok:
            return V.COMPILE_ERROR, ctx.build.error or "the build failed"
        return None

    def record(self, job, ctx, failure: Failure | None) -> Failure | None:
        ctx.verdict.build = ctx.build.to_dict()
        ctx.verdict.compiled = bool(ctx.build.ok)
        return failure


STAGE = Build()
