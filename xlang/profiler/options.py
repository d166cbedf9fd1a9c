"""What an evaluation is asked to do (EvalOptions), from a dict as the agent loop and the Ray worker pass it
(coerce_options)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class EvalOptions:
    memcheck: bool = True
    ncu: bool = True
    timing: bool = True
    trials: int = 2  # correctness trials per shape (value kinds cycle across them)
    drawn_shapes: int = 3  # shapes drawn per evaluation from the contract's space, besides the timed one
    seed: int | None = None  # base seed; random (and recorded) when None
    shapes: list[dict] | None = None  # correctness shapes instead of drawn ones (the first is timed)
    fixed: tuple[str, ...] = ()  # sizes the user set explicitly: drawn shapes keep them
    # A shape suite of the task (xlang.suites, --suite NAME): its shapes join the correctness trials and each is
    # timed against the vendor after the timed shape. None: none.
    suite: str | None = None
    require: tuple[str, ...] | None = None  # required families; default: the task's for the arch
    run: str = "auto"  # "auto": run when a GPU of the arch is present; "never": build and census only
    check_timeout_s: float = 300.0
    memcheck_timeout_s: float = 300.0
    ncu_timeout_s: float = 300.0
    timing_budget_s: float = 0.6  # GPU time per timed function (candidate, baseline, each peer)
    # Idle GPU time before each timed call, after its inputs and the L2 flush, the same for every side (ms). On a
    # power-capped card a kernel's clock depends on how long the GPU rested before it, and a side whose call
    # spends host time before its first kernel (cuDNN's backward: ~0.9 ms) rests longer unasked; a rest much
    # longer than that evens it out. 0: none (the timing of the published harness-3 figures).
    timing_rest_ms: float = 0.0
    # The task's peers (public kernels, Task.peers) timed after the vendor when installed; each within its own
    # budget (its process's start, its package's import and JIT, its calls), which the check stage's limit adds.
    peers: bool = True
    peer_timeout_s: float = 180.0
    overlap: bool = True  # memcheck and ncu beside the correctness trials (timing waits for them)
    # harness_error (a process that is not the candidate's held the GPU): the GPU stages run again this many times,
    # each once the GPU has been quiet a while (gpuwatch.wait_quiet)
    harness_retries: int = 1
    # Timed inputs: a fresh secret seed per evaluation (a published one lets a candidate precompute the timed
    # outputs at import time); an int here only for experiments.
    timing_seed: int | None = None
    workdir: Path | None = None
    label: str | None = None  # name for archived tool outputs
    archive: Path | None = None  # copy raw tool outputs here (also XLANG_PROFILER_ARCHIVE)
    extra_env: dict = field(default_factory=dict)
    # What the static stages (screen, build, census) concluded where the candidate was built (xlang.agent.runtime.
    # assess): {"failures": [[category, detail]], "census_ok": bool}; evaluate() then runs only the GPU stages.
    static: dict | None = None


_OPTION_ALIASES = {"no_memcheck": ("memcheck", lambda v: not v), "no_ncu": ("ncu", lambda v: not v),
                   "no_timing": ("timing", lambda v: not v), "no_peers": ("peers", lambda v: not v)}


def coerce_options(options) -> EvalOptions:
    """EvalOptions from an EvalOptions, None, or a dict (the agent loop and the remote worker pass dicts):
    known fields are taken, 'timeout_s' (the whole evaluation's limit) is shared out among the stages."""
    if isinstance(options, EvalOptions):
        return options
    opts = EvalOptions()
    for key, value in dict(options or {}).items():
        if key in _OPTION_ALIASES:
            name, conv = _OPTION_ALIASES[key]
            setattr(opts, name, conv(value))
        elif key == "timeout_s" and value:
            per_stage = float(value) / 3.0
            opts.check_timeout_s = opts.memcheck_timeout_s = opts.ncu_timeout_s = per_stage
        elif key in EvalOptions.__dataclass_fields__:
            if key in ("workdir", "archive") and value is not None:
                value = Path(value)
            if key == "require" and value is not None:
                value = tuple(value)
            setattr(opts, key, value)
    return opts
