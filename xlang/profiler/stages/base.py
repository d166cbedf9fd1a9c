"""What every stage module shares: a failure's shape and the defaults of a Stage (xlang.profiler.pipeline)."""

from __future__ import annotations

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


def take_output(verdict, stage: str, info: dict | None) -> None:
    """A tool stage's tail of the candidate's output, from its info into verdict.output (kept once)."""
    out = (info or {}).pop("candidate_output", None) if isinstance(info, dict) else None
    if out is not None:
        verdict.output = {**(verdict.output or {}), stage: out}
