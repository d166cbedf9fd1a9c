"""Timing, in the judge: the candidate and the vendor timed the same way, after the gate (wait_at_gate; the parent's
side is stages/timing.py TimingGate): the timed calls (time_calls: fresh inputs every call, L2 flushed, GPU time
from the observer, a secret subset verified) and the timing record (timing_record)."""

from __future__ import annotations

import os
import random
import time
from pathlib import Path

from xlang.profiler.judge.calls import Call, make_inputs
from xlang.profiler.judge.observed import (UTILITY_KERNEL, call_evidence, flush_observed, host_evidence, own_names,
                                           process_cpu_ms)
from xlang.profiler.judge.plan import TimingPlan
from xlang.profiler.judge.process import Runner, RunnerGone
from xlang.profiler.judge.verify import verify


def _stats(ms: list[float]) -> dict:
    xs = sorted(ms)
    n = len(xs)

    def q(p):
        if n == 1:
            return xs[0]
        pos = p * (n - 1)
        lo = int(pos)
        hi = min(lo + 1, n - 1)
        return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)

    med = q(0.5)
    return {"median_ms": med, "q20_ms": q(0.2), "q80_ms": q(0.8), "min_ms": xs[0], "max_ms": xs[-1],
            "mean_ms": sum(xs) / n, "reps": n, "spread_pct": (q(0.8) - q(0.2)) / med * 100 if med > 0 else 0.0}


def wait_at_gate(timing: TimingPlan, progress) -> bool:
    """Time only when the GPU is ours alone: the parent runs memcheck and Nsight Compute beside the
    correctness trials and opens this gate (a file holding 'go' or 'skip') once they are done.
    Without a gate (nothing runs beside us) timing starts at once."""
    gate = timing.gate
    if not gate:
        return True
    progress("timing: waiting for memcheck and Nsight Compute to leave the GPU")
    from xlang.untrusted import write_new

    try:
        write_new(timing.gate_waiting, "")  # the parent stops our clock while we wait
    except FileExistsError:
        pass
    give_up = time.monotonic() + float(timing.gate_max_wait_s)  # the parent died
    while not Path(gate).is_file():
        if time.monotonic() > give_up:
            return False
        time.sleep(0.005)
    return Path(gate).read_text().strip() == "go"


def gpu_clocks(nvml_index) -> dict:
    """The GPU as NVML sees it (clocks, temperature) right after the timed repetitions: read before them, an
    idle GPU reports its idle clock."""
    from xlang.profiler.gpu import from_nvml

    return next((g for g in from_nvml() or () if g.get("index") == nvml_index), {})


def _call_timeout(state, deadline: float | None) -> float:
    """The limit of the next call: the stage's per-call limit, or less where a deadline (a peer's budget) is near."""
    if deadline is None:
        return state.call_timeout_s
    left = deadline - time.monotonic()
    if left <= 0:
        raise RunnerGone("its time budget was spent", timed_out=True)
    return min(state.call_timeout_s, left)


def time_calls(state, runner: Runner, observer, prov, shape: dict, progress, who: str, verify_n: int | None = None,
               deadline: float | None = None) -> dict:
    """Fresh inputs every call, L2 flushed before it, GPU time from the observer; a secret subset verified
    (verify_n = 0 for the vendor and the peers: their calls write into outputs of their own, and they are not
    the candidate). deadline (time.monotonic()): no call may end after it (a peer's budget)."""
    import torch

    task, timing = state.task, state.plan.timing
    # Where the buffers live: "cuda" in the judge (run_check times only there), "cpu" in the CPU tests of this path
    device = state.kind
    l2_bytes = torch.cuda.get_device_properties(0).L2_cache_size if device == "cuda" else 0
    flush = torch.empty(int(max(timing.flush_min_bytes, 2 * l2_bytes)), dtype=torch.int8, device=device)
    seed0 = int(timing.seed)
    rest_s = max(0.0, float(timing.rest_ms or 0.0)) / 1e3  # EvalOptions.timing_rest_ms: every side alike
    call = Call(state, shape)
    wall, spans, profiles, host_calls = [], [], [], []

    def one(k: int, check: bool):
        inputs = make_inputs(task, shape, seed0 + k, device, "normal")
        call.fill(inputs)
        flush.zero_()
        if device == "cuda":
            torch.cuda.synchronize()
        if rest_s:
            time.sleep(rest_s)
        # Host CPU time only around the verified calls (a /proc scan each) and outside the wall clock, which
        # checks the observer's span; the copies are in the records of every call.
        cpu0 = process_cpu_ms(runner.uid) if check else None
        t0 = time.perf_counter()
        where = f"timed call {k} of the {who}"
        call.run(runner, _call_timeout(state, deadline), primer=True, where=where)
        records = without_primer(flush_observed(observer, prov))
        wall_ms = (time.perf_counter() - t0) * 1e3
        host_calls.append(call_evidence(records, process_cpu_ms(runner.uid) if check else None, cpu0,
                                        call.input_bytes(), observer is not None))
        if check:
            verify(state, call, inputs, where)
        else:
            call.check_slack(where)  # the canaries after every call, verified or not
        from xlang.profiler.observer_records import span

        return (span(records) / 1e6 if observer is not None else None), wall_ms, records

    try:
        progress(f"timing {who}: first calls")
        first_call = None
        for k in range(2):  # JIT compilation, autotuning, module loads
            records = one(k, check=k == 1 and verify_n != 0)[2]
            if k == 0:  # a fresh set of buffers, as the call Nsight Compute profiles has
                first_call = own_names(records, prov)
        est = max(1e-3, one(2, check=False)[0 if observer is not None else 1] or 1e-3)
        records = []
        warm = int(min(200, max(3, timing.sustain_s * 1e3 / est)))
        reps = int(min(timing.max_reps, max(timing.min_reps, timing.budget_s * 1e3 / est)))
        rng = random.Random(state.secret + hash(who) % 1000)
        n_verify = int(timing.verify) if verify_n is None else verify_n
        verified = (set(rng.sample(range(reps), min(reps, n_verify))) | {reps - 1}) if n_verify else set()
        progress(f"timing {who}: {warm} warm-up calls, {reps} timed, {len(verified)} of them verified")
        # Warm-up only brings the clocks to their sustained state: the last inputs again, back to back, one
        # observer flush at the end (its kernels are still judged for provenance). Untimed, so a candidate
        # that tells these calls apart only spoils its own warm-up.
        for _ in range(warm):
            call.run(runner, _call_timeout(state, deadline), primer=True, where=f"a warm-up call of the {who}")
        flush_observed(observer, prov)
        call.check_slack(f"the warm-up calls of the {who}")  # not re-poisoned between them: damage stays
        from xlang.profiler.gpu import PowerSampler
        from xlang.profiler.observer_records import activities

        # The card's clock and power while these calls are timed: under a power cap they decide a kernel's speed
        # as much as its code does, and each side is timed at its own time.
        with PowerSampler(state.plan.gpu_index or 0) as power:
            for k in range(reps):
                span, w, records = one(3 + k, check=k in verified)
                spans.append(span)
                wall.append(w)
                if observer is not None:
                    profiles.append(activities(records))
        last_call = own_names(records, prov)
    finally:
        call.close([runner])
    samples = spans if observer is not None else wall
    return {"stats": _stats(samples), "method": "cupti_kernel_span" if observer is not None else "wall_clock_ipc",
            "reps": len(samples), "verified_calls": sorted(verified), "wall_stats": _stats(wall),
            "power": power.summary(),
            "profile": call_profile(profiles) if profiles else None,
            "host": host_evidence(host_calls[3:]),  # the timed calls (the first three compile and estimate)
            "call_kernels": last_call if observer is not None else None,
            "first_call_kernels": first_call if observer is not None else None}


PRIMER_MAX_NS = 20_000


def without_primer(records: list) -> list:
    """A timed call's records less the runner's primer (runner._primer: a one-block fill that ends before the
    call's first activity starts). The runner lives in the candidate's process, so the primer is recognised by
    what the judge can check, never by what the runner says: the call's first activity, a one-block utility
    kernel of at most 20 us that ends before anything else starts. A candidate that makes its own first kernel
    look like that hides at most 20 us of GPU work; one that drops the primer is timed as before it existed."""
    from xlang.profiler.observer_records import KernelRecord, gpu_work

    timed = gpu_work(records)
    if not timed:
        return records
    first = timed[0]
    if (isinstance(first, KernelRecord) and first.grid == (1, 1, 1) and 0 < first.end - first.start <= PRIMER_MAX_NS
            and UTILITY_KERNEL.search(first.name) and all(r.start >= first.end for r in timed[1:])):
        return [r for r in records if r is not first]
    return records


def call_profile(profiles: list) -> dict:
    """Medians over the timed calls (each observer.activities: [(label, idle ns before it, ns)]) whose activities
    are the last call's, in the same order: each activity's time and the idle time before it; and the median of
    a call's total idle time."""
    labels = [a[0] for a in profiles[-1]]
    same = [acts for acts in profiles if [a[0] for a in acts] == labels]

    def median_ms(ns: list) -> float:
        return round(_stats([x / 1e6 for x in ns])["median_ms"], 4)

    return {"activities": [{"name": label[:120], "idle_before_ms": median_ms([acts[i][1] for acts in same]),
                            "median_ms": median_ms([acts[i][2] for acts in same])} for i, label in enumerate(labels)],
            "idle_ms": median_ms([sum(a[1] for a in acts) for acts in profiles]), "calls": len(same)}


def tflops_of(flops: float, ms: float) -> float | None:
    return flops / (ms * 1e-3) / 1e12 if ms > 0 else None


def per_s(amount, ms: float | None, unit: float) -> float | None:
    return amount / (ms * 1e-3) / unit if amount is not None and ms else None


def _device_name() -> str | None:
    """The name of the GPU this judge times on, where torch sees one (the figures of the roofline follow it)."""
    try:
        import torch  # the judge's process has CUDA torch; a CPU test's has none

        return torch.cuda.get_device_name() if torch.cuda.is_available() else None
    except (ImportError, RuntimeError):
        return None


def timing_record(state, shape, cand, base, others, alone, baseline_error: str | None = None) -> dict:
    """The timed shape's record. base None: the vendor baseline failed (baseline_error says how, naming it); the
    candidate's figures stand and its speedup is None (a baseline's failure is never the candidate's)."""
    from xlang.archs import device_arch, get_arch
    from xlang.suites import roofline

    task = state.task
    flops = task.flops(shape)
    nbytes = task.min_bytes(shape) if task.min_bytes is not None else None
    c_ms = cand["stats"]["median_ms"]
    b_ms = base["stats"]["median_ms"] if base else None
    arch = device_arch(get_arch(state.plan.arch), _device_name())
    roof = roofline(task, shape, arch.figures)
    floor = roof["floor_ms"]
    datasheet_tbs = arch.figures.get("mem_bandwidth_tbs")
    gbps = per_s(nbytes, c_ms, 1e9)
    me = os.getpid()
    extra = [p for p in (others or []) if p != me]
    return {
        "method": cand["method"], "shape": shape, "seed": state.plan.timing.seed,
        "candidate_ms": c_ms, "baseline_ms": b_ms, "candidate": cand["stats"], "baseline": base["stats"] if base else None,
        "candidate_wall": cand["wall_stats"], "baseline_wall": base["wall_stats"] if base else None,
        "candidate_power": cand.get("power"), "baseline_power": (base or {}).get("power"),
        "candidate_profile": cand.get("profile"), "baseline_profile": (base or {}).get("profile"),
        "candidate_host": cand.get("host"), "baseline_host": (base or {}).get("host"),
        "rest_ms": state.plan.timing.rest_ms,
        "verified_calls": {"candidate": cand["verified_calls"], "baseline": base["verified_calls"] if base else []},
        "baseline_name": task.baseline_at(shape),
        "baseline_error": baseline_error,
        "speedup": b_ms / c_ms if c_ms > 0 and b_ms else None,
        "tflops": tflops_of(flops, c_ms), "baseline_tflops": tflops_of(flops, b_ms) if b_ms else None,
        # Memory-bound tasks are read in GB/s (Task.min_bytes over the median) against the bandwidth
        "min_bytes": nbytes, "gbps": gbps, "baseline_gbps": per_s(nbytes, b_ms, 1e9),
        "bandwidth_fraction": gbps / (datasheet_tbs * 1e3) if gbps and datasheet_tbs else None,
        "flops": flops, "roofline_floor_ms": floor, "roofline_bound": roof["bound"],
        "roofline_ceilings": {"tflops": roof["tflops_ceiling"], "tbs": roof["bandwidth_ceiling_tbs"]},
        "roofline_arch": arch.name,  # whose figures: the GPU present's (archs.device_arch)
        "beyond_roofline": bool(floor is not None and c_ms < floor),
        "gpu_processes_during_candidate": len(extra) if others is not None else None,
        "vendor_alone": alone,
    }
