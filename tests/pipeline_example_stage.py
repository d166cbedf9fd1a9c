"""A verdict stage added the way ARCHITECTURE.md says (one file, one line in the list): it concludes a category
from the job alone. tests/test_pipeline.py puts it into the pipeline and shows the scheduler runs it in order."""

from __future__ import annotations

from xlang import verdict as V
from xlang.profiler.stages.base import Failure, StageBase


class SizeCap(StageBase):
    """A job whose shape has a size above `cap` is not run (runtime_error)."""

    name, categories, runs = "size_cap", (V.RUNTIME_ERROR,), "the job's sizes against a cap"

    def __init__(self, cap: int):
        self.cap = cap

    def run(self, job, ctx) -> Failure | None:
        over = [f"{k}={v}" for k, v in job.shape if v > self.cap]
        return (V.RUNTIME_ERROR, f"sizes above the cap of {self.cap}: {', '.join(over)}") if over else None


STAGE = SizeCap(16384)
