"""Verdict categories and the result record every part of xlang shares (profiler, agent, store, reports).

Every candidate that compiles is run (on a GPU of its architecture) whatever its static census says, and the
verdict keeps the scoring fields apart, as PTXBench counts them: `compiled`, `census_ok` (the required
instruction families are in its SASS), `correct` (it computed the function on fresh inputs at run time, on the GPU),
`executed_ok` (the required families executed at run time and did the work: their share of the math and
their FLOPs against the task's), and the timing.

Its one `category` is the first failing stage, in this declared order (STAGE_ORDER):
  no_code -> forbidden_call (static screen; vendor kernels at run time) -> compile_error -> runtime_error /
  timeout -> incorrect -> host_compute (ncu: its outputs match, but its own kernels executed far less math than
  the task's: the answer was computed off the GPU; never correct) -> memory_error -> missing_instructions
  (census; the candidate may still be correct) -> not_executed (ncu: the families did not do the work) -> ok.
`static_ok` is a candidate that compiled with its required families when runtime was not run (e.g. b200
on this workplace): never counted as correct.
`harness_error` is no verdict on the candidate: the judge could not judge it fairly (a process that is not the
candidate's held the GPU while it ran; the evaluation is retried once when the GPU is quiet, and this is what
stays when the retry met one too). It comes first in STAGE_ORDER (nothing measured beside it stands), is never
correct nor incorrect, and its runtime counts as not run (runtime_ran False, runtime_note "not run (...)"), so
the tables leave it out of every runtime rate.
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
HOST_COMPUTE = "host_compute"  # computed off the GPU (xlang.profiler.executed.gpu_compute_check)
MEMORY_ERROR = "memory_error"
NOT_EXECUTED = "not_executed"
OK = "ok"
STATIC_OK = "static_ok"
HARNESS_ERROR = "harness_error"  # not judged: not the candidate's doing (see above)

# The order in which categories are decided (the first failing one is the verdict's category).
STAGE_ORDER = (HARNESS_ERROR, NO_CODE, FORBIDDEN_CALL, COMPILE_ERROR, RUNTIME_ERROR, TIMEOUT, INCORRECT, HOST_COMPUTE,
               MEMORY_ERROR, MISSING_INSTRUCTIONS, NOT_EXECUTED, OK, STATIC_OK)
CATEGORIES = (NO_CODE, COMPILE_ERROR, FORBIDDEN_CALL, MISSING_INSTRUCTIONS, RUNTIME_ERROR, TIMEOUT, INCORRECT,
              HOST_COMPUTE, MEMORY_ERROR, NOT_EXECUTED, OK, STATIC_OK, HARNESS_ERROR)
# Correct (for verdicts stored before the scoring fields existed): computed the function at run time.
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
    # candidate and baseline median/spread (ms), speedup, TFLOP/s, roofline flag; "peers" (each peer: ran, ms,
    # TFLOP/s, speedup_vs_peer, or why it did not run) and "best_peer" (the fastest that ran) since peers exist
    timing: dict | None = None
    fingerprint: dict = field(default_factory=dict)  # GPU, clocks, driver, CUDA, versions, seeds, harness
    runtime_ran: bool = False
    runtime_note: str = ""  # e.g. "not run (no sm_100a device)"
    # The scoring fields (None: not known, e.g. never ran).
    compiled: bool | None = None
    census_ok: bool | None = None
    correct: bool | None = None
    executed_ok: bool | None = None
    isolation: str = ""  # the jail the candidate ran in (xlang.sandbox levels), "" when nothing ran
    # per GPU stage (check, memcheck, ncu): {"stdout", "stderr"}, the last 6 KiB of what the candidate's process
    # printed (judge/process.py OUTPUT_TAIL_CHARS); None when nothing ran
    output: dict | None = None
    # With --suite (xlang.suites): {"name", "title", "source", "shapes": [per shape: label, shape, candidate_ms,
    # baseline_ms, speedup, tflops, gbps, ...], "summary": summarise()}. The suite's shapes are among the
    # correctness trials, so `correct` covers every one of them; the timings exist only when the check passed and
    # timing ran. None: no suite (and every verdict stored before suites existed).
    suite: dict | None = None

    @property
    def correct_with_arch(self) -> bool:
        return bool(self.correct and self.census_ok and self.executed_ok)

    @property
    def speedup(self) -> float | None:
        return (self.timing or {}).get("speedup")

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "Verdict":
        known = cls.__dataclass_fields__
        return cls(**{k: v for k, v in d.items() if k in known})


def not_judged(verdict: Verdict, detail: str) -> Verdict:
    """Make `verdict` a harness_error (no verdict on the candidate, see the module's doc): neither correct nor
    not, its runtime counted as not run so that no runtime rate counts it."""
    verdict.category, verdict.detail = HARNESS_ERROR, detail
    verdict.correct = verdict.executed_ok = None
    verdict.runtime_ran = False
    verdict.runtime_note = "not run (harness_error: " + detail.split(": ", 1)[-1][:300] + ")"
    return verdict


def scores(verdict: dict | None) -> dict:
    """The scoring fields of a stored verdict (a Verdict.to_dict(), read defensively), as the tables count them:

      compiled             the candidate built
      census_ok            the required families are in its SASS (None: not known, e.g. it did not compile)
      correct              it computed the function on fresh random inputs at run time, on the GPU (never for
                           host_compute, whatever a stored field says)
      executed_ok          the required families executed at run time (None: not measured)
      correct_with_target  correct AND census_ok AND executed_ok is True (never for a static-only verdict)
      speedup              over the vendor baseline, when correct (else None)
      peer_speedup         over the fastest peer that ran (timing["best_peer"]), when correct (else None)
      runtime_ran          the runtime stages ran

    A field the verdict carries as a bool (compiled, census_ok, correct, executed_ok) is read as it is; one that is
    absent (a verdict stored before the fields existed) or None (not known) is derived from the category and the
    build's census."""
    v = verdict or {}
    category = v.get("category") or ""
    build = v.get("build") or {}
    census = build.get("census") or {}

    if isinstance(v.get("compiled"), bool):
        compiled = v["compiled"]
    elif build:
        compiled = bool(build.get("ok"))
    else:
        compiled = category not in ("", NO_CODE, COMPILE_ERROR, HARNESS_ERROR)  # harness_error: not known

    if isinstance(v.get("census_ok"), bool):
        census_ok = v["census_ok"]
    elif not compiled:
        census_ok = None
    elif census:
        census_ok = not census.get("missing")
    elif category == MISSING_INSTRUCTIONS:
        census_ok = False
    elif category in CATEGORIES[CATEGORIES.index(MISSING_INSTRUCTIONS) + 1:] and category != HARNESS_ERROR:
        census_ok = True  # a later stage was reached, so the census passed
    else:
        census_ok = None

    correct = v["correct"] if isinstance(v.get("correct"), bool) else category in CORRECT
    correct = correct and category != HOST_COMPUTE  # matching outputs computed off the GPU are not a correct kernel

    if isinstance(v.get("executed_ok"), bool):
        executed_ok = v["executed_ok"]
    elif category == OK:
        executed_ok = True
    elif category == NOT_EXECUTED:
        executed_ok = False
    else:
        executed_ok = None

    speedup = (v.get("timing") or {}).get("speedup") if correct else None
    peer_speedup = ((v.get("timing") or {}).get("best_peer") or {}).get("speedup") if correct else None
    return {
        "compiled": compiled,
        "census_ok": census_ok,
        "correct": correct,
        "executed_ok": executed_ok,
        "correct_with_target": bool(correct and census_ok is True and executed_ok is True),
        "speedup": speedup,
        "peer_speedup": peer_speedup,
        "runtime_ran": bool(v.get("runtime_ran")),
    }


def peer_note(verdict: dict | None) -> str:
    """Why a timed verdict has no peer speedup, as a "not run (...)" note ("" when a peer ran, or when nothing was
    timed): each peer's reason, or that the verdict was stored before peers were timed (no "peers" key)."""
    timing = (verdict or {}).get("timing") or {}
    if not timing.get("speedup") or timing.get("best_peer"):
        return ""
    if "peers" not in timing:
        return "not run (no peer timed: a verdict from before peers)"
    if not timing["peers"]:
        return "not run (the task names no peer)"
    return "not run (" + "; ".join(f"{p.get('display') or p.get('name')}: {p.get('reason') or 'failed'}"
                                   for p in timing["peers"]) + ")"


def output_tails(output: dict | None, lines: int = 20, chars: int = 2000) -> list[tuple[str, str, str]]:
    """[(stage, stream, text)]: the end of what the candidate's process printed (verdict.output), at most `lines`
    lines and `chars` characters per stage and stream; a text an earlier stage showed is not repeated."""
    shown, out = set(), []
    for stage, streams in (output or {}).items():
        for stream in ("stderr", "stdout"):
            text = "\n".join(((streams or {}).get(stream) or "").rstrip().splitlines()[-lines:])[-chars:]
            if text.strip() and text not in shown:
                shown.add(text)
                out.append((stage, stream, text))
    return out
