"""The check stage in the judge: the candidate's correctness on the shapes the parent drew (correctness, every
trial with fresh inputs of a value kind the task declares, verified by verify.py, its kernels vetted by
observed.py), then the timing of the candidate, the vendor (time_vendor) and the task's peers (peers.py) after the
gate (run_check)."""

from __future__ import annotations

import os

from xlang.archs import get_arch
from xlang.profiler.judge.calls import Call, Outcome, make_inputs
from xlang.profiler.judge.observed import Provenance, call_evidence, flush_observed, host_evidence, make_observer, \
    process_cpu_ms
from xlang.profiler.judge.peers import time_peers
from xlang.profiler.judge.process import (CandidateError, Runner, RunnerGone, foreign_gpu_work, gpu_tenants,
                                          process_names, wait_alone)
from xlang.profiler.judge.timing import gpu_clocks, time_calls, timing_record, wait_at_gate
from xlang.profiler.judge.verify import verify
from xlang.suites import suite_result
from xlang.task import format_shape


def correctness(state, runner: Runner, observer, prov, progress, nvtx_last: str | None = None) -> dict:
    """Every trial of plan.trials; nvtx_last: the name of an NVTX range around the last call (the one
    Nsight Compute profiles: the calls before it take the JIT compilation and autotuning)."""
    plan, task = state.plan, state.task
    trials, calls, called = [], [], []
    for i, (shape, kind, seed) in enumerate(plan.trials):
        last = i == len(plan.trials) - 1
        where = f"shape {format_shape(shape)}, inputs '{kind}', seed {seed}"
        progress(f"trial {i}: {where}")
        call = Call(state, shape)
        try:
            inputs = make_inputs(task, shape, seed, state.kind, kind)
            call.fill(inputs)
            # Host CPU time only on a shape's later calls: its first one compiles (Triton's JIT, autotuning).
            warm = shape in called
            called.append(shape)
            cpu0 = process_cpu_ms(runner.uid) if warm else None
            call.run(runner, state.call_timeout_s, nvtx=nvtx_last if last else None, where=where)
            records = flush_observed(observer, prov)
            calls.append(call_evidence(records, process_cpu_ms(runner.uid) if warm else None, cpu0,
                                       call.input_bytes(), observer is not None))
            rec = verify(state, call, inputs, where, kind)
        finally:
            call.close([runner])
        trials.append({"shape": shape, "kind": kind, "seed": seed, **rec})
        del inputs
    worst: dict = {}
    for t in trials:
        for s in t["outputs"]:
            w = worst.setdefault(s["output"], {"max_abs_err": 0.0, "max_rel_err": 0.0})
            w["max_abs_err"] = max(w["max_abs_err"], s["max_abs_err"])
            w["max_rel_err"] = max(w["max_rel_err"], s["max_rel_err"])
    shapes = []
    for t in trials:
        if t["shape"] not in shapes:
            shapes.append(t["shape"])
    return {"passed": True, "trials": len(trials), "shapes": shapes, "kinds": sorted({t["kind"] for t in trials}),
            "worst": worst, "host": host_evidence(calls)}


def run_check(state, progress) -> dict:
    plan, task = state.plan, state.task
    observer = state.observer
    runner = state.runner
    vendor_runner = vendor_observer = None
    result: dict = {}
    try:
        before = gpu_tenants(plan.gpu_index or 0)  # before any process of the candidate exists
        runner.start(plan.hello)
        timing = plan.timing
        if timing.enabled and state.kind == "cuda":
            # The vendor's process starts now and imports torch while the candidate is checked; it touches the
            # GPU only when its hello comes, after the candidate's tree is dead. Another uid and PID namespace:
            # the candidate can neither see nor signal it.
            vendor_observer = make_observer(plan)
            vendor_runner = Runner(plan, "vendor", None, observer=vendor_observer)
        prov = Provenance(plan, runner.home) if observer is not None else None
        result["correctness"] = correctness(state, runner, observer, prov, progress)
        if vendor_runner is None or not wait_at_gate(timing, progress):
            return result
        shape = plan.timed_shape
        cand = time_calls(state, runner, observer, prov, shape, progress, "candidate")
        # --suite: each suite shape timed the same way, by the same process, before the GPU-tenant check below
        suite = plan.suite
        cand_suite = [time_calls(state, runner, observer, prov, s["shape"], progress,
                                 f"candidate at {s['label']} {format_shape(s['shape'])}")
                      for s in suite["shapes"]] if suite else []
        tenants = gpu_tenants(plan.gpu_index or 0)
        others = None if tenants is None else sorted(tenants)
        env, extra = foreign_gpu_work(before, tenants, os.getpid())
        # Only where NVML's PIDs are ours (it lists the judge itself): in a container they may be the host's.
        pids_ours = tenants is not None and os.getpid() in tenants
        if pids_ours and env:
            raise Outcome("harness_error", f"the GPU was not the judge's alone: {len(env)} processes held it from "
                                           f"before the candidate started until after it was timed "
                                           f"({process_names(env)}); its timing would not be a fair one, so "
                                           "this candidate was not judged")
        if pids_ours and len(extra) > 1:  # the runner is one process; another one on the GPU works for the candidate unseen
            raise Outcome("forbidden_call", f"{len(extra)} processes besides the judge held the GPU while the "
                                            "candidate was timed: GPU work in a process the judge cannot observe "
                                            f"({process_names(extra)})")
        if observer is not None and any(t["stats"]["median_ms"] > t["wall_stats"]["median_ms"] * 1.05 + 0.05
                                        for t in [cand, *cand_suite]):
            raise Outcome("runtime_error", "the observer's GPU time exceeds the judge's own wall clock around the "
                                           "same calls: the observer's records cannot be trusted")
        runner.close()
        runner = None
        # The vendor runs with no candidate process alive: wait until the GPU lists only us.
        alone = wait_alone(progress, plan.gpu_index or 0)
        base, base_suite, baseline_error = time_vendor(state, vendor_runner, vendor_observer, shape, suite, progress)
        vendor_runner = None  # time_vendor closed it
        result["timing"] = timing_record(state, shape, cand, base, others, alone, baseline_error)
        result["timed_call_kernels"] = cand.get("call_kernels")
        result["timed_first_call_kernels"] = cand.get("first_call_kernels")
        result["timing"]["clocks"] = gpu_clocks(plan.gpu_index)
        if suite:
            result["suite"] = suite_result(task, suite, cand_suite, base_suite,
                                           get_arch(result["timing"]["roofline_arch"]).figures)
        # The peers last: what they do (or fail to do) cannot touch the candidate's or the vendor's figures.
        result["timing"].update(time_peers(state, shape, cand["stats"]["median_ms"], progress,
                                           candidate_idle_ms=(cand.get("profile") or {}).get("idle_ms")))
        return result
    finally:
        for r in (runner, vendor_runner):
            if r is not None:
                r.kill()


def time_vendor(state, vendor_runner, vendor_observer, shape: dict, suite: dict | None, progress):
    """The vendor baseline timed at the timed shape, then at each suite shape, in its own process (closed here).
    -> (its timing at the shape or None, its timings at the suite shapes it got through, the failure or None). A
    failure of the baseline (its load, a call that raises, a fault, a timeout) is the baseline's: it is recorded,
    named, in the timing record (baseline_error), the candidate's figures stand and its speedup is None; it never
    becomes the candidate's verdict (the runner's errors name "the candidate": here they are the vendor's)."""
    task = state.task
    base, base_suite, where = None, [], f"at the timed shape {format_shape(shape)}"
    try:
        vendor_runner.start({"op": "vendor", "task": task.name, "device": "cuda"})
        base = time_calls(state, vendor_runner, vendor_observer, None, shape, progress, "vendor", verify_n=0)
        for s in (suite or {}).get("shapes", []):
            where = f"at suite shape {s['label']} {format_shape(s['shape'])}"
            base_suite.append(time_calls(state, vendor_runner, vendor_observer, None, s["shape"], progress,
                                         f"vendor at {s['label']} {format_shape(s['shape'])}", verify_n=0))
    except (Outcome, CandidateError, RunnerGone) as e:
        name = task.baseline_at(shape)
        detail = getattr(e, "detail", None) or str(e)
        progress(f"vendor baseline failed {where}")
        return base, base_suite, (f"the vendor baseline ({name}) failed {where}, so nothing is compared with it "
                                  f"there (the baseline's failure, not the candidate's): {detail[:1500]}")
    finally:
        vendor_runner.close()
    return base, base_suite, None
