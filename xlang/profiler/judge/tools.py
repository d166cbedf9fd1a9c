"""The judge's side of the tool stages (memcheck, ncu): the candidate's runner under the tool, a trial per shape;
the tool's log and report, and the cubins the candidate's JIT wrote in this stage, copied into the judge's folder
for the parent to read."""

from __future__ import annotations

from pathlib import Path

from xlang.profiler.judge.check import correctness
from xlang.profiler.judge.process import Runner
from xlang.profiler.judge.plan import Plan


def run_tool_stage(state, progress) -> dict:
    """memcheck / ncu: the runner under the tool (plan.tool, started by run()), a trial per shape; the
    tool's log and report are copied into the judge's folder and read by the parent."""
    plan = state.plan
    runner = state.runner
    try:
        runner.start(plan.hello)
        out = {"correctness": correctness(state, runner, None, None, progress, nvtx_last=plan.nvtx_last)}
    finally:
        runner.close(wait_s=float(plan.tool_exit_s))
        _collect_tool_output(runner, plan)
        if plan.mode == "ncu":  # also when a trial failed: the profile is still read, and judged by its code
            state.jit_modules = collect_jit_modules(runner.home, plan.jit_cache, Path(plan.stage_dir))
    out["runner_exit"] = runner.proc.returncode
    out["runner_stdout"] = runner.out.text(1.0)[-20000:]
    out["runner_stderr"] = runner.err.text(1.0)[-20000:]
    return out


def _collect_tool_output(runner: "Runner", plan: Plan) -> None:
    """The tool's log and report are copied out of the candidate's home into the judge's folder."""
    from xlang.untrusted import read_untrusted_bytes, write_new

    for source, name in ((runner.tool_log, "tool.log"), (Path(str(runner.tool_report) + ".ncu-rep"), "report.ncu-rep")):
        data = read_untrusted_bytes(source, 1 << 30) if source is not None else None
        if data:
            write_new(Path(plan.stage_dir) / name, data)


JIT_MODULES_MAX = 2000  # as Provenance.rescan


JIT_MODULES_MAX_BYTES = 1 << 30


def collect_jit_modules(home: Path | None, jit_cache: str | None, stage_dir: Path) -> list[str]:
    """Copies of the cubins the candidate's JIT wrote into its private cache during this stage (Backend.jit_cache
    in its home), in a folder of the judge's own made after the candidate's processes are gone: the modules a
    kernel Nsight Compute profiled may be, instruction for instruction (xlang.profiler.sass_identity.sass_identity). Walked
    and read by descriptors, never through a link (untrusted.untrusted_files), at most 64 MiB each; a candidate can
    put any cubin there, so a vendor cubin it copies in counts as its own (README, residual risks)."""
    import tempfile

    from xlang.untrusted import untrusted_files, write_new

    if home is None or not jit_cache:
        return []
    root = Path(home) / jit_cache
    if not root.is_dir() or root.is_symlink():  # a link would make any cubin on the machine "its own"
        return []
    found = sorted(untrusted_files(root, ".cubin", limit=64 << 20, max_files=JIT_MODULES_MAX))
    found = [data for _rel, data in found if data]
    if not found:
        return []
    folder = Path(tempfile.mkdtemp(prefix="jit-modules-", dir=stage_dir))  # new, 0700: nothing of the candidate's
    out, total = [], 0
    for i, data in enumerate(found):
        if total + len(data) > JIT_MODULES_MAX_BYTES:
            continue
        total += len(data)
        out.append(str(write_new(folder / f"{i:04d}.cubin", data, 0o600)))
    return out
