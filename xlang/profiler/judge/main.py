"""The judge process's entry (python -m xlang.profiler.judge SPEC.json: __main__.py): read the plan, start the
candidate's process, run the stage's mode, write the result (plan.out). The package's docstring says what each
mode does."""

from __future__ import annotations

import os
import platform
import random
import sys
import time
import traceback
from pathlib import Path

from xlang.children import die_with_parent
from xlang.profiler.gpuwatch import GPU_NOT_ALONE
from xlang.profiler.judge.calls import Outcome
from xlang.profiler.judge.check import run_check
from xlang.profiler.judge.observed import make_observer
from xlang.profiler.judge.plan import Plan, Report
from xlang.profiler.judge.process import CandidateError, Runner, RunnerGone, apply_watch, stage_gpu_watch
from xlang.profiler.judge.state import JudgeState
from xlang.profiler.judge.tools import run_tool_stage
from xlang.sandbox import level
from xlang.task import get_task
from xlang.untrusted import append_judge_file, replace_file, write_new


class _Progress:
    def __init__(self, path: str | None):
        self.path = path
        if path:
            write_new(path, "")  # in the judge's own (fresh) folder: a name already there is not ours

    def __call__(self, text: str) -> None:
        if self.path:
            append_judge_file(self.path, f"{time.monotonic():.3f} {text}\n")


def fingerprint(torch) -> dict:
    from importlib import metadata

    from xlang.backend import toolchain_packages

    fp = {"python": platform.python_version(), "torch": torch.__version__, "cuda_runtime": torch.version.cuda}
    try:
        fp["cudnn"] = torch.backends.cudnn.version()
    except Exception:  # noqa: BLE001
        pass
    languages = [(dist, name.replace("-", "_")) for dist, name in toolchain_packages().items()]
    for dist, key in (*languages, ("cuda-python", "cuda_python"), ("cuda-bindings", "cuda_bindings")):
        try:
            fp[key] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    props = torch.cuda.get_device_properties(0)
    fp.update({"device_name": props.name, "device_cc": f"{props.major}.{props.minor}",
               "sms": props.multi_processor_count, "l2_bytes": getattr(props, "L2_cache_size", None),
               "device_memory_mib": props.total_memory >> 20})
    return fp


# The judge's work for each mode: what a GPU stage's plan asks for (its Plan.mode) -> the report's findings.
MODES = {"check": run_check, "memcheck": run_tool_stage, "ncu": run_tool_stage}


def run(plan: Plan, progress) -> Report:
    """The stage's work in this process: the candidate's runner started, the mode's work, what the GPU watch saw."""
    runner = observer = None
    if plan.mode in MODES:
        # The candidate's process first: it starts Python and imports torch while we do the same here.
        progress("start the candidate's process")
        if plan.mode == "check":
            observer = make_observer(plan)
            runner = Runner(plan, "candidate", None, observer=observer)
        else:
            runner = Runner(plan, plan.mode, None, tool=list(plan.tool))
        runner.watch = stage_gpu_watch(plan, runner.uid)
    try:
        result = _run(plan, progress, runner, observer)
    finally:
        if runner is not None:
            runner.kill()
    if runner is not None:
        apply_watch(result, runner.watch)
        result["candidate_output"] = runner.output_tail()
    return Report.from_dict(result)


def _run(plan: Plan, progress, runner, observer) -> dict:
    kind = plan.device
    if kind == "cuda":
        progress("import torch")
        import torch  # the judge's CUDA torch: imported only here, after the candidate's process has started

        if not torch.cuda.is_available():
            return {"status": "harness_error", "detail": "torch sees no CUDA device in the judge"}
        torch.cuda.init()
        torch.empty(1, device="cuda")
        fp = fingerprint(torch)
    else:
        fp = {"python": platform.python_version(), "device": "cpu"}
    state = JudgeState(plan, get_task(plan.task), kind, secret=random.SystemRandom().randrange(1 << 30),
                       observer=observer, runner=runner)
    # The jail the candidate's process got in this stage (a tool stage: the strongest its tool works in).
    isolation = runner.isolation if runner is not None else level()
    result: dict = {"status": "ok", "fingerprint": fp, "mode": plan.mode, "isolation": isolation}
    if runner is not None and runner.ladder is not None:
        result["jail_ladder"] = runner.ladder
    if plan.mode not in MODES:
        return {"status": "harness_error", "detail": f"unknown judge mode {plan.mode}"}
    try:
        result.update(MODES[plan.mode](state, progress))
    except Outcome as o:
        result.update(status=o.status, detail=o.detail)
        if o.status == "harness_error":  # run_check's: the environment's processes held the GPU the whole time
            result["harness"] = GPU_NOT_ALONE
    except CandidateError as e:
        result.update(status="runtime_error", detail=str(e))
    except RunnerGone as e:
        result.update(status="timeout" if e.timed_out else "runtime_error", detail=str(e))
    if state.jit_modules:
        result["jit_modules"] = state.jit_modules
    progress("done")
    return result


def main(argv: list[str]) -> int:
    plan = Plan.from_json(Path(argv[0]).read_text())  # strict: a key it does not declare is an error
    die_with_parent(plan.parent_pid)  # a judge whose caller was killed must not keep the GPU
    progress = _Progress(plan.progress)
    try:
        report = run(plan, progress)
    except Exception as e:  # noqa: BLE001 - our own failure
        report = Report("harness_error", detail="judge failed: " + "".join(
            traceback.format_exception_only(type(e), e)).strip()[:3000], traceback=traceback.format_exc()[-6000:])
    report.pid = os.getpid()
    replace_file(plan.out, report.to_json())
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1:])
