"""Verdict categories and the result record every part of xlang shares (profiler, agent, store, reports).

One category per candidate evaluation, the first failing stage in this order:
  no_code -> compile_error -> forbidden_call -> missing_instructions (static census) -> runtime_error /
  timeout -> incorrect -> memory_error (memcheck) -> not_executed (ncu) -> ok.
`static_ok` is a candidate that compiled with its required families when runtime was not run (e.g. b200
on this workplace): never counted as correct.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

NO_CODE = "no_code"
COMPILE_ERROR = "compile_error"
FORBIDDEN_CALL = "forbidden_call"
MISSING_INSTRUCTIONS = "missing_instructions"
RUNTIME_ERROR = "runtime_error"
TIMEOUT = "timeout"
INCORRECT = "incorrect"
MEMORY_ERROR = "memory_error"
NOT_EXECUTED = "not_executed"
OK = "ok"
STATIC_OK = "static_ok"

CATEGORIES = (NO_CODE, COMPILE_ERROR, FORBIDDEN_CALL, MISSING_INSTRUCTIONS, RUNTIME_ERROR, TIMEOUT, INCORRECT,
              MEMORY_ERROR, NOT_EXECUTED, OK, STATIC_OK)
# Correct: computed the function on fresh random inputs at run time.
CORRECT = (MEMORY_ERROR, NOT_EXECUTED, OK)
# Correct and executed the architecture's required instructions at run time (memcheck clean too).
CORRECT_WITH_ARCH = (OK,)


@dataclass
class Verdict:
    category: str
    detail: str = ""  # what a person or a model can act on
    lang: str = ""
    task: str = ""
    arch: str = ""
    shape: dict = field(default_factory=dict)
    build: dict | None = None  # BuildResult.to_dict()
    correctness: dict | None = None  # trials, shapes checked, first failures (output, where, by how much)
    memcheck: dict | None = None  # ran, error count, summary
    executed: dict | None = None  # ncu: per family and per kernel, threads that executed (predicated on)
    timing: dict | None = None  # candidate and baseline median/spread (ms), speedup, TFLOP/s, roofline flag
    fingerprint: dict = field(default_factory=dict)  # GPU, clocks, driver, CUDA, versions, seeds, harness
    runtime_ran: bool = False
    runtime_note: str = ""  # e.g. "not run (no sm_100a device)"

    @property
    def correct(self) -> bool:
        return self.category in CORRECT

    @property
    def correct_with_arch(self) -> bool:
        return self.category in CORRECT_WITH_ARCH

    @property
    def speedup(self) -> float | None:
        return (self.timing or {}).get("speedup")

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "Verdict":
        return cls(**d)
