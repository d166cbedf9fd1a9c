"""The judge: one trusted process per stage, `python -m xlang.profiler.judge SPEC.json`.

It never imports the candidate. It allocates the task's inputs and outputs (xlang.profiler.buffers), starts
the candidate's process in its jail (xlang.sandbox.Jail; xlang.profiler.runner), shares exactly those buffers
with it, tells it when to call its entry point, and decides from what it reads itself:

  check     correctness on the shapes the parent drew for this evaluation, every trial with fresh inputs
            of a value kind the task declares (not only N(0,1)), outputs poisoned with NaN, the slack around
            every buffer poisoned and checked, inputs compared with the judge's private copy, the fp32
            reference computed here; then timing (after the gate: memcheck and Nsight Compute have left the
            GPU): every timed call gets fresh inputs (a fixed seed sequence, never repeating), the L2 is
            flushed before it, its GPU time is the span of the candidate process's kernels as the CUPTI
            observer recorded them (every stream and thread; the candidate's Python cannot switch it off),
            and a secret random subset of timed calls, the last one included, is verified afterwards. Then the
            candidate's process tree is killed and the vendor baseline is timed the same way, in a process of
            its own, with no candidate process alive (NVML lists the GPU's processes to prove it), and after it
            each of the task's peers that is installed (time_peers), the same way, one process each. With a
            suite (spec["suite"], --suite), its shapes are among the correctness trials, and each is timed after
            the timed shape, the candidate's and then the vendor's in the same processes (the peers: the timed
            shape only); result["suite"] holds the per-shape figures and the summary (xlang.suites).
  memcheck  the runner under compute-sanitizer memcheck (its log goes to the judge's folder), one trial on
            each memcheck shape.
  ncu       the runner under Nsight Compute, one call on the timed shape; every kernel of that process.

In every stage the buffers lie between unmapped guard ranges with canaries in their slack (xlang.profiler.buffers:
an access outside faults, memory_error), a poller watches the GPU's processes while the candidate's code runs
(xlang.profiler.gpuwatch: a second GPU process of the candidate's is forbidden_call), and the tail of the
candidate process's stdout and stderr is kept (candidate_output).

The result (spec["out"], JSON in the judge's own folder, which the candidate cannot reach) carries a status:
ok | incorrect | runtime_error | memory_error | forbidden_call | timeout | harness_error.
"""

from __future__ import annotations

import json
import os
import platform
import random
import sys
import time
import traceback
from pathlib import Path

from xlang.archs import get_arch
from xlang.profiler.gpuwatch import GPU_NOT_ALONE
from xlang.profiler.stages.calls import Outcome
from xlang.profiler.stages.check import Provenance, _observer, correctness
from xlang.profiler.stages.peers import time_peers
from xlang.profiler.stages.process import (CandidateError, Runner, RunnerGone, _gpu_watch, _process_names, _wait_alone,
                                           apply_watch, foreign_gpu_work, gpu_tenants)
from xlang.profiler.stages.timing import _timing_record, gpu_clocks, time_calls, wait_at_gate
from xlang.profiler.stages.tools import run_tool_stage
from xlang.suites import suite_result
from xlang.task import format_shape


class _Progress:
    def __init__(self, path: str | None):
        from xlang.untrusted import write_new

        self.path = path
        if path:
            write_new(path, "")  # in the judge's own (fresh) folder: a name already there is not ours

    def __call__(self, text: str) -> None:
        from xlang.untrusted import append_judge_file

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


def run_check(ctx, progress) -> dict:
    spec, task = ctx["spec"], ctx["task"]
    observer = ctx.get("observer")
    runner = ctx.get("runner")
    vendor_runner = vendor_observer = None
    result: dict = {}
    try:
        before = gpu_tenants(spec.get("gpu_index") or 0)  # before any process of the candidate exists
        runner.start(spec["hello"])
        timing = spec.get("timing") or {}
        if timing.get("enabled") and ctx["kind"] == "cuda":
            # The vendor's process starts now and imports torch while the candidate is checked; it touches the
            # GPU only when its hello comes, after the candidate's tree is dead. Another uid and PID namespace:
            # the candidate can neither see nor signal it.
            vendor_observer = _observer(spec)
            vendor_runner = Runner(spec, "vendor", None, observer=vendor_observer)
        prov = Provenance(spec, runner.home) if observer is not None else None
        result["correctness"] = correctness(ctx, runner, observer, prov, progress)
        if vendor_runner is None or not wait_at_gate(timing, progress):
            return result
        shape = spec["timed_shape"]
        cand = time_calls(ctx, runner, observer, prov, shape, progress, "candidate")
        # --suite: each suite shape timed the same way, by the same process, before the GPU-tenant check below
        suite = spec.get("suite")
        cand_suite = [time_calls(ctx, runner, observer, prov, s["shape"], progress,
                                 f"candidate at {s['label']} {format_shape(s['shape'])}")
                      for s in suite["shapes"]] if suite else []
        tenants = gpu_tenants(spec.get("gpu_index") or 0)
        others = None if tenants is None else sorted(tenants)
        env, extra = foreign_gpu_work(before, tenants, os.getpid())
        # Only where NVML's PIDs are ours (it lists the judge itself): in a container they may be the host's.
        pids_ours = tenants is not None and os.getpid() in tenants
        if pids_ours and env:
            raise Outcome("harness_error", f"the GPU was not the judge's alone: {len(env)} processes held it from "
                                           f"before the candidate started until after it was timed "
                                           f"({_process_names(env)}); its timing would not be a fair one, so "
                                           "this candidate was not judged")
        if pids_ours and len(extra) > 1:  # the runner is one process; another one on the GPU works for the candidate unseen
            raise Outcome("forbidden_call", f"{len(extra)} processes besides the judge held the GPU while the "
                                            "candidate was timed: GPU work in a process the judge cannot observe "
                                            f"({_process_names(extra)})")
        if observer is not None and any(t["stats"]["median_ms"] > t["wall_stats"]["median_ms"] * 1.05 + 0.05
                                        for t in [cand, *cand_suite]):
            raise Outcome("runtime_error", "the observer's GPU time exceeds the judge's own wall clock around the "
                                           "same calls: the observer's records cannot be trusted")
        runner.close()
        runner = None
        # The vendor runs with no candidate process alive: wait until the GPU lists only us.
        alone = _wait_alone(progress, spec.get("gpu_index") or 0)
        base, base_suite, baseline_error = time_vendor(ctx, vendor_runner, vendor_observer, shape, suite, progress)
        vendor_runner = None  # time_vendor closed it
        result["timing"] = _timing_record(ctx, shape, cand, base, others, alone, baseline_error)
        result["timed_call_kernels"] = cand.get("call_kernels")
        result["timed_first_call_kernels"] = cand.get("first_call_kernels")
        result["timing"]["clocks"] = gpu_clocks(spec.get("gpu_index"))
        if suite:
            result["suite"] = suite_result(task, suite, cand_suite, base_suite,
                                           get_arch(result["timing"]["roofline_arch"]).figures)
        # The peers last: what they do (or fail to do) cannot touch the candidate's or the vendor's figures.
        result["timing"].update(time_peers(ctx, shape, cand["stats"]["median_ms"], progress))
        return result
    finally:
        for r in (runner, vendor_runner):
            if r is not None:
                r.kill()


def time_vendor(ctx, vendor_runner, vendor_observer, shape: dict, suite: dict | None, progress):
    """The vendor baseline timed at the timed shape, then at each suite shape, in its own process (closed here).
    -> (its timing at the shape or None, its timings at the suite shapes it got through, the failure or None). A
    failure of the baseline (its load, a call that raises, a fault, a timeout) is the baseline's: it is recorded,
    named, in the timing record (baseline_error), the candidate's figures stand and its speedup is None; it never
    becomes the candidate's verdict (the runner's errors name "the candidate": here they are the vendor's)."""
    task = ctx["task"]
    base, base_suite, where = None, [], f"at the timed shape {format_shape(shape)}"
    try:
        vendor_runner.start({"op": "vendor", "task": task.name, "device": "cuda"})
        base = time_calls(ctx, vendor_runner, vendor_observer, None, shape, progress, "vendor", verify_n=0)
        for s in (suite or {}).get("shapes", []):
            where = f"at suite shape {s['label']} {format_shape(s['shape'])}"
            base_suite.append(time_calls(ctx, vendor_runner, vendor_observer, None, s["shape"], progress,
                                         f"vendor at {s['label']} {format_shape(s['shape'])}", verify_n=0))
    except (Outcome, CandidateError, RunnerGone) as e:
        name = task.baseline_label(shape) if task.baseline_label is not None else task.baseline_name
        detail = getattr(e, "detail", None) or str(e)
        progress(f"vendor baseline failed {where}")
        return base, base_suite, (f"the vendor baseline ({name}) failed {where}, so nothing is compared with it "
                                  f"there (the baseline's failure, not the candidate's): {detail[:1500]}")
    finally:
        vendor_runner.close()
    return base, base_suite, None


def run(spec: dict, progress) -> dict:
    ctx: dict = {}
    runner = None
    if spec["mode"] in ("check", "memcheck", "ncu"):
        # The candidate's process first: it starts Python and imports torch while we do the same here.
        progress("start the candidate's process")
        if spec["mode"] == "check":
            ctx["observer"] = _observer(spec)
            runner = ctx["runner"] = Runner(spec, "candidate", None, observer=ctx["observer"])
        else:
            runner = ctx["runner"] = Runner(spec, spec["mode"], None, tool=list(spec["tool"]))
        runner.watch = _gpu_watch(spec, runner.uid)
    try:
        result = _run(spec, progress, ctx)
    finally:
        if runner is not None:
            runner.kill()
    if runner is not None:
        apply_watch(result, runner.watch)
        result["candidate_output"] = runner.output_tail()
    return result


def _run(spec: dict, progress, ctx: dict) -> dict:
    from xlang.task import get_task

    kind = spec["device"]
    if kind == "cuda":
        progress("import torch")
        import torch

        if not torch.cuda.is_available():
            return {"status": "harness_error", "detail": "torch sees no CUDA device in the judge"}
        torch.cuda.init()
        torch.empty(1, device="cuda")
        fp = fingerprint(torch)
    else:
        fp = {"python": platform.python_version(), "device": "cpu"}
    task = get_task(spec["task"])
    ctx.update({"spec": spec, "task": task, "kind": kind, "atol": task.tolerance["atol"],
                "rtol": task.tolerance["rtol"], "call_timeout_s": float(spec.get("call_timeout_s", 120)),
                "secret": random.SystemRandom().randrange(1 << 30)})
    from xlang.sandbox import level

    # The jail the candidate's process got in this stage (a tool stage: the strongest its tool works in).
    runner = ctx.get("runner")
    isolation = runner.isolation if runner is not None else level()
    result: dict = {"status": "ok", "fingerprint": fp, "mode": spec["mode"], "isolation": isolation}
    if runner is not None and runner.ladder is not None:
        result["jail_ladder"] = runner.ladder
    try:
        if spec["mode"] == "check":
            result.update(run_check(ctx, progress))
        elif spec["mode"] in ("memcheck", "ncu"):
            result.update(run_tool_stage(ctx, progress))
        else:
            return {"status": "harness_error", "detail": f"unknown judge mode {spec['mode']}"}
    except Outcome as o:
        result.update(status=o.status, detail=o.detail)
        if o.status == "harness_error":  # run_check's: the environment's processes held the GPU the whole time
            result["harness"] = GPU_NOT_ALONE
    except CandidateError as e:
        result.update(status="runtime_error", detail=str(e))
    except RunnerGone as e:
        result.update(status="timeout" if e.timed_out else "runtime_error", detail=str(e))
    if ctx.get("jit_modules"):
        result["jit_modules"] = ctx["jit_modules"]
    progress("done")
    return result


def main(argv: list[str]) -> int:
    spec = json.loads(Path(argv[0]).read_text())
    from xlang.children import die_with_parent

    die_with_parent(spec.get("parent_pid"))  # a judge whose caller was killed must not keep the GPU
    progress = _Progress(spec.get("progress"))
    try:
        result = run(spec, progress)
    except Exception as e:  # noqa: BLE001 - our own failure
        result = {"status": "harness_error", "detail": "judge failed: " + "".join(
            traceback.format_exception_only(type(e), e)).strip()[:3000], "traceback": traceback.format_exc()[-6000:]}
    result["pid"] = os.getpid()
    from xlang.untrusted import replace_file

    replace_file(spec["out"], json.dumps(result, default=str))
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1:])
