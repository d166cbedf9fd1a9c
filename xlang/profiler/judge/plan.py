"""What crosses the process boundary of a GPU stage, typed: the Plan (what the parent tells a stage's judge: the
spec file it writes in the judge's own folder, `python -m xlang.profiler.judge SPEC.json`) and the Report (what the
judge found: the result file it writes back). Both serialise to JSON and back strictly: a key the class does not
declare is an error (PlanError), and so is a required one that is missing, since each file crosses a trust boundary
(the candidate's processes run beside the judge). The JSON keys are the fields' names; the nested parts that go
into the verdict as they are (correctness, timing, suite...) stay plain JSON values."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any

Trial = tuple  # (shape: dict, value kind: str, seed: int); a list once it has crossed as JSON


class PlanError(ValueError):
    """A plan or report whose JSON is not what its class declares."""


def _strict(cls, data: Any, what: str):
    """cls(**data), where data is a JSON object holding every required field of cls and nothing else."""
    if not isinstance(data, dict):
        raise PlanError(f"{what}: a JSON object was expected, not {type(data).__name__}")
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise PlanError(f"{what}: unknown keys {unknown}")
    required = [f.name for f in dataclasses.fields(cls)
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    missing = [n for n in required if n not in data]
    if missing:
        raise PlanError(f"{what}: missing keys {missing}")
    return cls(**data)


def _loads(text: str, what: str):
    try:
        return json.loads(text)
    except (json.JSONDecodeError, TypeError) as e:
        raise PlanError(f"{what}: not JSON ({e})") from None


class _StrictJson:
    """JSON both ways for a dataclass that crosses the judge's process boundary, strict on reading (_strict):
    `what` names it in an error."""

    what = ""

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), default=str)

    @classmethod
    def from_dict(cls, data: dict):
        return _strict(cls, data, cls.what)

    @classmethod
    def from_json(cls, text: str):
        return cls.from_dict(_loads(text, cls.what))


@dataclass
class TimingPlan:
    """How the check's judge times (EvalOptions.timing*), and the gate it waits at (stages/timing.py TimingGate)."""

    enabled: bool = False
    budget_s: float = 0.6  # timed repetitions: about this long, within min_reps..max_reps
    seed: int = 20_261_129  # of the timed calls' inputs
    peer_budget_s: float = 180.0  # each peer's
    rest_ms: float = 0.0  # slept before every timed call of every side
    gate: str | None = None  # the gate's file ('go' / 'skip'); None: time at once
    gate_waiting: str | None = None  # the file the judge makes when it arrives at the gate
    gate_max_wait_s: float = 3600.0  # then the parent is taken for dead
    flush_min_bytes: int = 256 << 20  # the L2 flush buffer: at least this, and twice the L2
    sustain_s: float = 0.3  # of warm-up calls
    min_reps: int = 20
    max_reps: int = 200
    verify: int = 3  # secret timed calls verified (and the last one)


@dataclass
class PeerPlan:
    """One of the task's peers (stages/peers.py peer_specs): skip says why no process is started for it."""

    name: str
    display: str
    skip: str | None = None


@dataclass
class Plan(_StrictJson):
    """What one GPU stage's judge is to do (start_gpu writes the check's; each stage's plan() derives its own)."""

    what = "plan"

    mode: str  # the judge's mode: check | memcheck | ncu
    lang: str
    task: str
    arch: str
    hello: dict  # what the candidate's runner is told to load
    trials: list  # [(shape, value kind, seed)] this stage runs
    device: str = "cuda"
    gpu_index: int | None = None  # NVML's index of the GPU
    gpu_minor: int | None = None  # its /dev/nvidiaN: the jailed runners see that GPU only
    readable: list = field(default_factory=list)  # what the candidate's jail may read (the file it loads)
    seed_cache: str = ""  # the build's JIT cache, copied into the candidate's home
    own_cubins: list = field(default_factory=list)  # the candidate's own modules (Provenance)
    observer_library: str | None = None  # the CUPTI observer; None: timing by the judge's clock
    kernels_on_disk: bool = True  # Backend.kernels_on_disk
    jit_kernel_prefix: str = ""  # Backend.jit_kernel_prefix
    jit_cache: str | None = None  # Backend.jit_cache
    hidden: list = field(default_factory=list)  # folders the candidate's jail never shows (the peers')
    build_kernels: list = field(default_factory=list)  # the names its build compiled
    build_kernel_stems: list = field(default_factory=list)  # KernelImage.meta["stem"]
    build_modules: list = field(default_factory=list)  # its cubins / shared objects
    call_timeout_s: float = 120.0
    load_timeout_s: float = 180.0
    env: dict = field(default_factory=dict)  # added to the runner's environment (tests)
    # the check's: the timed shape, the timing, the peers, the suite (its shapes timed after the timed one)
    timed_shape: dict | None = None
    timing: TimingPlan = field(default_factory=TimingPlan)
    peers: list = field(default_factory=list)  # [PeerPlan]
    suite: dict | None = None  # xlang.suites Suite.describe()
    # the trials of the stages beside the check (their plan() takes them as theirs)
    memcheck_trials: list = field(default_factory=list)
    ncu_trials: list = field(default_factory=list)
    # a tool stage's: the tool's command (before the runner's), the NVTX range of the profiled call, its exit wait
    tool: list | None = None
    nvtx_last: str | None = None
    tool_exit_s: float = 240.0
    # where this run's judge works (stages/launch.py run_stage sets them)
    stage_dir: str = ""
    out: str | None = None  # the report's file
    progress: str | None = None  # the progress file
    parent_pid: int | None = None

    def __post_init__(self):
        if not isinstance(self.timing, TimingPlan):
            self.timing = _strict(TimingPlan, self.timing, "plan.timing")
        if not isinstance(self.peers, list):
            raise PlanError(f"plan.peers: a JSON array was expected, not {type(self.peers).__name__}")
        self.peers = [p if isinstance(p, PeerPlan) else _strict(PeerPlan, p, "plan.peers[]") for p in self.peers]

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def but(self, **changes) -> Plan:
        """A copy with these fields changed (a stage's own plan from the check's)."""
        return dataclasses.replace(self, **changes)


@dataclass
class Report(_StrictJson):
    """What a stage's judge found (its status, and what the parent's stage records in the verdict)."""

    what = "report"

    status: str  # ok | incorrect | runtime_error | memory_error | forbidden_call | timeout | harness_error
    detail: str | None = None
    harness: str | None = None  # harness_error: gpuwatch.GPU_NOT_ALONE when the environment held the GPU
    traceback: str | None = None  # harness_error: the judge's own failure
    pid: int | None = None  # the judge's
    mode: str | None = None
    fingerprint: dict | None = None  # the judge's environment (torch, CUDA, the device)
    isolation: str | None = None  # the jail the candidate's process got
    jail_ladder: list | None = None  # a tool stage's: the jails tried for its tool
    correctness: dict | None = None
    timing: dict | None = None
    suite: dict | None = None  # --suite: per-shape figures (xlang.suites.suite_result)
    timed_call_kernels: list | None = None  # the candidate's own kernels in the last timed call (the ncu stage's)
    timed_first_call_kernels: list | None = None  # ... in the first
    gpu_watch: dict | None = None  # who held the GPU while the stage ran
    candidate_output: dict | None = None  # the tail of the candidate's stdout and stderr
    jit_modules: list | None = None  # ncu: copies of the cubins its JIT wrote in this stage
    runner_exit: int | None = None  # a tool stage's: the tool's exit code
    runner_stdout: str | None = None
    runner_stderr: str | None = None

    def to_dict(self) -> dict:
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}

