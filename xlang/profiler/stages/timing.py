"""The timing gate, in the parent: the check's judge times the candidate and the vendor only after the stages beside
it (memcheck, Nsight Compute) have left the GPU, and waits at this gate (TimingGate, a file) until then. The timed
calls and the timing record are the judge's (judge/timing.py)."""

from __future__ import annotations

import time
from pathlib import Path

from xlang.untrusted import replace_file


class TimingGate:
    """The check worker times the candidate only when it has the GPU alone: memcheck and Nsight Compute run
    beside its correctness trials, and the worker waits at this gate (a file: 'go' or 'skip') until they are
    done. While it waits its clock stops, so its time limit covers its own work only."""

    def __init__(self, workdir: Path, limit_s: float):
        self.path, self.waiting = workdir / "timing.gate", workdir / "timing.waiting"
        self.limit_s = limit_s
        self.arrived: float | None = None
        self.opened: float | None = None
        for p in (self.path, self.waiting):
            p.unlink(missing_ok=True)

    def open(self, go: bool) -> None:
        if self.opened is None:
            replace_file(self.path, "go" if go else "skip")  # atomic: the worker never reads half a word
            self.opened = time.monotonic()

    def deadline(self, start: float):
        """The check worker's kill time, polled while it runs: start + limit + the time it waited here."""
        def kill_at() -> float:
            if self.arrived is None and self.waiting.exists():
                self.arrived = time.monotonic()
            if self.arrived is None:
                return start + self.limit_s
            if self.opened is None:
                return float("inf")
            return start + self.limit_s + max(0.0, self.opened - self.arrived)
        return kill_at
