"""The census stage: the required instruction families in the build's SASS (cuobjdump -sass, taken by the build).
It gates nothing: every candidate that compiles is run, as PTXBench scores, and a census without the families is
kept for the end (missing_instructions, after the run-time categories). MMAs that accumulate in fp16 where the
contract says fp32 make the candidate incorrect whatever the trials show (kept the same way)."""

from __future__ import annotations

from xlang import verdict as V
from xlang.profiler.stages.base import Failure, StageBase


class Census(StageBase):
    name, categories, stops = "census", (V.INCORRECT, V.MISSING_INSTRUCTIONS), False
    runs = ("cuobjdump -sass of every kernel: the required families present; MMAs accumulating in fp16 where the "
            "contract says fp32 (incorrect)")

    def run(self, job, ctx) -> Failure | None:
        """The fp16 accumulators if any (incorrect comes before missing_instructions in STAGE_ORDER), else the
        families missing, else None."""
        build, arch = ctx.build, ctx.arch
        missing = list(build.census.missing) if build.census is not None else []
        # The contract accumulates in fp32: an MMA that accumulates in fp16 in any compiled kernel is a violation
        # whether or not a trial happens to expose it (it cannot be told for every input), so it is incorrect here.
        narrow = build.census.narrow_accumulate if build.census is not None and ctx.task.accumulator == "fp32" else []
        if narrow:
            return V.INCORRECT, narrow_accumulate_detail(narrow, f"static SASS census ({arch.sm})")
        if missing:
            return (V.MISSING_INSTRUCTIONS, f"static SASS census ({arch.sm}): required famil"
                    f"{'y' if len(missing) == 1 else 'ies'} {', '.join(missing)} not in any compiled kernel")
        return None

    def record(self, job, ctx, failure: Failure | None) -> Failure | None:
        census = ctx.build.census
        ctx.verdict.census_ok = census is not None and not list(census.missing)
        return failure


def narrow_accumulate_detail(found: list[dict], where: str) -> str:
    """The verdict's words for MMAs that accumulate in fp16 ([{kernel, opcode, count or threads}])."""
    ops = sorted({f["opcode"] for f in found})
    kernels = sorted({f["kernel"] for f in found})
    return (f"{where}: {', '.join(ops[:3])} in {len(kernels)} kernel(s) (e.g. {kernels[0][:100]}) accumulate in "
            "fp16, where the contract says accumulate in fp32 (fp16 holds 65504 at most and 11 significant bits): a "
            "contract violation, incorrect whatever the trials show")


STAGE = Census()
