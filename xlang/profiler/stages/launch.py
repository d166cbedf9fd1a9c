"""In the parent: one judge process per GPU stage (`python -m xlang.profiler.judge SPEC.json`) in a fresh folder of
its own, its result read back, and the category a stage's run earns (stage_failure)."""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from xlang import verdict as V
from xlang.children import ChildResult, run_child
from xlang.profiler import gpu as gpu_mod
from xlang.profiler.gpuwatch import GPU_NOT_ALONE
from xlang.profiler.judge.plan import Plan, PlanError, Report
from xlang.profiler.options import EvalOptions
from xlang.profiler.judge.process import stage_uids
from xlang.sandbox import kill_uid
from xlang.untrusted import read_untrusted, write_new

JUDGE_MODULE = "xlang.profiler.judge"


@dataclass
class StageRun:
    child: ChildResult
    result: Report | None  # None: the judge wrote no (readable) report
    progress: str
    seconds: float
    stage_dir: Path | None = None  # the judge's folder of this run (fresh per run: ncu, ncu-2, ...)

    @property
    def last_step(self) -> str:
        lines = [ln.split(" ", 1)[-1] for ln in self.progress.strip().splitlines() if ln.strip()]
        return lines[-1] if lines else "starting the judge"


def judge_command(spec_path: Path) -> list[str]:
    return [sys.executable, "-m", JUDGE_MODULE, str(spec_path)]


def run_stage(plan: Plan, workdir: Path, stage: str, timeout: float, env: dict | None = None, cancel=None,
              deadline=None, child_cmd: list[str] | None = None) -> StageRun:
    """Write the stage's plan, run the judge for one stage (it starts the candidate's process itself), read its
    report. The stage's folder is the judge's own (0700, made fresh for this run: `stage`, else `stage-2`, ...):
    the candidate's processes get homes of their own inside it and can write nothing else there."""
    stage_dir = _fresh_folder(workdir, stage)
    plan = plan.but(stage_dir=str(stage_dir), out=str(stage_dir / "result.json"),
                    progress=str(stage_dir / "progress.txt"), parent_pid=os.getpid())
    spec_path = write_new(stage_dir / "spec.json", plan.to_json())
    start = time.monotonic()
    cmd = child_cmd or judge_command(spec_path)  # child_cmd: tests only
    child = run_child(cmd, timeout, cwd=stage_dir, env=env,
                      cancel=cancel, deadline=deadline(start) if deadline else None)
    # A judge stopped at its limit (or cancelled) never cleaned up: whatever runs as its stage's uids goes now.
    for uid in stage_uids(plan):
        kill_uid(uid)
    result = None
    text = read_untrusted(Path(plan.out), 64 << 20)
    if text is not None:
        try:
            result = Report.from_json(text)
        except PlanError:  # unreadable, or not a report: as if the judge had written none
            result = None
    progress = read_untrusted(Path(plan.progress), 4 << 20) or ""
    write_new(stage_dir / "stdout.txt", child.stdout)
    write_new(stage_dir / "stderr.txt", child.stderr)
    return StageRun(child, result, progress, time.monotonic() - start, stage_dir)


def _fresh_folder(workdir: Path, name: str) -> Path:
    """A new folder of the judge's under workdir: `name`, or `name-2`, `name-3`... when taken (mkdir makes it
    or fails: never a folder, or a link, that was there)."""
    for n in range(1, 1000):
        folder = workdir / (name if n == 1 else f"{name}-{n}")
        try:
            folder.mkdir(mode=0o700)
            return folder
        except FileExistsError:
            continue
    raise RuntimeError(f"no fresh folder for stage {name} in {workdir}")


def last_lines(text: str, lines: int = 15, chars: int = 2500) -> str:
    kept = [ln for ln in text.strip().splitlines() if ln.strip()][-lines:]
    return "\n".join(kept)[-chars:]


_STATUS = {"incorrect": V.INCORRECT, "runtime_error": V.RUNTIME_ERROR, "memory_error": V.MEMORY_ERROR,
           "forbidden_call": V.FORBIDDEN_CALL, "timeout": V.TIMEOUT}


def stage_failure(stage: str, run: StageRun, timeout: float) -> tuple[str, str] | None:
    """The category a stage earns, or None when it passed."""
    if run.child.timed_out:
        return V.TIMEOUT, (f"the {stage} stage did not finish within {timeout:.0f} s and was stopped "
                           f"(last step: {run.last_step})")
    if run.result is None:
        sig = run.child.crashed_by_signal
        how = f"killed by {sig}" if sig else f"exit code {run.child.returncode}"
        err = last_lines(run.child.stderr or run.child.stdout)
        return V.RUNTIME_ERROR, (f"the {stage} stage's judge died ({how}) during: {run.last_step}"
                                 + (f"\n{err}" if err else ""))
    status = run.result.status
    if status == "ok":
        return None
    if status == "harness_error":
        if run.result.harness == GPU_NOT_ALONE:  # another process took the GPU: no verdict, not a bug of ours
            return V.HARNESS_ERROR, f"the {stage} stage: {run.result.detail}"
        raise RuntimeError(f"the {stage} judge failed: {run.result.detail}\n{run.result.traceback or ''}")
    return _STATUS.get(status, V.RUNTIME_ERROR), (run.result.detail if run.result.detail is not None
                                                  else status or "runtime error")


def stage_env(options: EvalOptions, gpu: dict) -> dict:
    env = {}
    # Always the GPU NVML named (PCI order, as NVML counts): with XLANG_GPUS keeping one GPU of several, the
    # judge must not fall back to CUDA's device 0 while its NVML checks look at another.
    if gpu.get("index") is not None and (len(gpu_mod.gpus()) > 1 or os.environ.get("XLANG_GPUS") is not None):
        env.update(CUDA_DEVICE_ORDER="PCI_BUS_ID", CUDA_VISIBLE_DEVICES=str(gpu["index"]))
    env.update(options.extra_env)
    return env
