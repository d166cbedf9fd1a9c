"""The GPU worker: one fresh process per stage, run as `python -m xlang.profiler.worker SPEC.json`.

Modes (spec["mode"]):
  check  correctness (several trials with fresh seeded inputs on every shape, NaN-poisoned outputs, inputs
         compared with a clone, allclose against the fp32 reference) then timing of the candidate and the
         vendor baseline, the same way, in this same process;
  once   one call on one shape (run under compute-sanitizer memcheck);
  ncu    one warm-up call, then one call inside the NVTX range Nsight Compute profiles.

It writes spec["out"] (JSON) and appends what it is doing to spec["progress"], so that a crash or a hang
is reported with the step it happened in. Runs under the GPU machine's own python: torch and the
candidate's language are imported here, lazily; never litellm.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
import traceback
from pathlib import Path

from xlang.candidate import candidate_trace
from xlang.task import format_shape

NVTX_RANGE = "xlang_candidate"  # the same string as xlang.profiler.ncu.NVTX_RANGE


class CandidateError(Exception):
    """The candidate's own code failed (import, host code, or a CUDA error its kernels caused)."""


class _Progress:
    def __init__(self, path: str | None):
        self.path = path

    def __call__(self, text: str) -> None:
        if self.path:
            with open(self.path, "a") as f:
                f.write(f"{time.monotonic():.3f} {text}\n")


def seed_for(base: int, shape_index: int, trial: int) -> int:
    return base + 1000 * shape_index + trial


# ---- correctness ------------------------------------------------------------------------------------

def compare_output(name: str, got, expected, atol: float, rtol: float) -> dict:
    """Stats of one output against its fp32 reference; 'failure' set when it fails (NaN, Inf, mismatch)."""
    import torch

    g = got.float()
    e = expected.float()
    nan = torch.isnan(g)
    inf = torch.isinf(g)
    diff = (g - e).abs()
    ok_elem = diff <= atol + rtol * e.abs()  # NaN compares False
    bad = ~ok_elem
    n_bad, n_nan, n_inf = int(bad.sum()), int(nan.sum()), int(inf.sum())
    finite = ~(nan | inf)
    fdiff = torch.where(finite, diff, torch.zeros_like(diff))
    rel = fdiff / e.abs().clamp_min(max(atol, 1e-30))
    stats = {
        "output": name, "elements": g.numel(),
        "max_abs_err": float(fdiff.max()) if g.numel() else 0.0,
        "max_rel_err": float(rel.max()) if g.numel() else 0.0,
        "mismatches": n_bad, "nan": n_nan, "inf": n_inf,
    }
    if n_bad or n_nan or n_inf:
        where = nan if n_nan else inf if n_inf else bad
        flat = int(where.flatten().nonzero()[0])
        index = list(_unravel(flat, tuple(g.shape)))
        kind = "nan" if n_nan else "inf" if n_inf else "mismatch"
        stats["failure"] = {
            "kind": kind, "index": index,
            "got": float(g.flatten()[flat]), "expected": float(e.flatten()[flat]),
        }
    return stats


def _unravel(flat: int, shape: tuple[int, ...]):
    out = []
    for size in reversed(shape):
        out.append(flat % size)
        flat //= size
    return tuple(reversed(out))


def compare_inputs(before: dict, after: dict) -> dict | None:
    import torch

    for name, old in before.items():
        new = after[name]
        if not torch.equal(old, new):
            changed = (old != new) & ~(torch.isnan(old) & torch.isnan(new))
            n = int(changed.sum())
            flat = int(changed.flatten().nonzero()[0]) if n else 0
            return {"input": name, "changed": n, "elements": old.numel(),
                    "index": list(_unravel(flat, tuple(old.shape))),
                    "was": float(old.flatten()[flat].float()), "now": float(new.flatten()[flat].float())}
    return None


def describe_failure(stats: dict, shape: dict, trial: int, seed: int, atol: float, rtol: float) -> str:
    f = stats["failure"]
    where = f"{stats['output']}[{', '.join(map(str, f['index']))}]"
    ctx = f"(shape {format_shape(shape)}, trial {trial}, seed {seed})"
    if f["kind"] == "nan":
        return (f"{stats['output']}: {stats['nan']} of {stats['elements']} elements are NaN (left unwritten, or "
                f"computed as NaN); first at {where}, expected {f['expected']:.6g} {ctx}")
    if f["kind"] == "inf":
        return f"{stats['output']}: {stats['inf']} elements are Inf; first at {where}, expected {f['expected']:.6g} {ctx}"
    return (f"{stats['output']}: {stats['mismatches']} of {stats['elements']} elements outside atol={atol} "
            f"rtol={rtol}; first at {where}: got {f['got']:.6g}, expected {f['expected']:.6g}; "
            f"max abs err {stats['max_abs_err']:.4g}, max rel err {stats['max_rel_err']:.4g} {ctx}")


def _sync_or_raise(torch):
    try:
        torch.cuda.synchronize()
    except Exception as e:  # noqa: BLE001 - a CUDA error raised by the candidate's kernels
        raise CandidateError(f"CUDA error after the candidate's call: {str(e).strip().splitlines()[0]}") from e


def _call(entry, args, torch, candidate_files):
    try:
        entry(*args)
    except CandidateError:
        raise
    except Exception as e:  # noqa: BLE001 - the candidate's own failure
        raise CandidateError(candidate_trace(e, candidate_files)) from e
    _sync_or_raise(torch)


def check_once(ctx, shape: dict, seed: int, shape_index: int, trial: int) -> dict:
    """One trial: fresh inputs, poisoned outputs, one call, every check. Returns a trial record."""
    import torch

    from xlang.candidate import allocate_outputs, arguments

    task, entry, atol, rtol = ctx["task"], ctx["entry"], ctx["atol"], ctx["rtol"]
    ctx["progress"](f"trial shape={format_shape(shape)} trial={trial} seed={seed}: inputs")
    inputs = task.make_inputs(shape, seed, ctx["device"])
    clones = {k: v.clone() for k, v in inputs.items()}
    outputs = allocate_outputs(task, shape, ctx["device"])
    args = arguments(task, shape, {**inputs, **outputs})
    ctx["progress"](f"trial shape={format_shape(shape)} trial={trial} seed={seed}: candidate call")
    _call(entry, args, torch, ctx["files"])
    ctx["progress"](f"trial shape={format_shape(shape)} trial={trial} seed={seed}: checking")
    record = {"shape": shape, "trial": trial, "seed": seed, "outputs": []}
    changed = compare_inputs(clones, inputs)
    if changed:
        record["failure"] = (f"input {changed['input']} was modified by the candidate: {changed['changed']} of "
                             f"{changed['elements']} elements changed, first at {changed['input']}"
                             f"[{', '.join(map(str, changed['index']))}]: {changed['was']:.6g} -> {changed['now']:.6g} "
                             f"(shape {format_shape(shape)}, trial {trial}, seed {seed})")
        record["input_modified"] = changed
        return record
    reference = task.reference(clones, shape)
    for name in [t.name for t in task.contract.outputs]:
        stats = compare_output(name, outputs[name], reference[name], atol, rtol)
        record["outputs"].append(stats)
        if "failure" in stats and "failure" not in record:
            record["failure"] = describe_failure(stats, shape, trial, seed, atol, rtol)
    del reference, outputs, inputs, clones
    return record


def run_correctness(ctx, shapes: list[dict], base_seed: int, trials: int) -> dict:
    records = []
    for si, shape in enumerate(shapes):
        for trial in range(trials):
            rec = check_once(ctx, shape, seed_for(base_seed, si, trial), si, trial)
            records.append(rec)
            if "failure" in rec:
                return {"passed": False, "trials": records, "failure": rec["failure"],
                        "shapes": shapes, "trials_per_shape": trials}
    worst = {}
    for rec in records:
        for s in rec["outputs"]:
            w = worst.setdefault(s["output"], {"max_abs_err": 0.0, "max_rel_err": 0.0})
            w["max_abs_err"] = max(w["max_abs_err"], s["max_abs_err"])
            w["max_rel_err"] = max(w["max_rel_err"], s["max_rel_err"])
    return {"passed": True, "trials": records, "shapes": shapes, "trials_per_shape": trials, "worst": worst}


# ---- timing -------------------------------------------------------------------------------------------

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


class Timer:
    """How a function is timed (candidate and baseline alike), in the manner of triton.testing.do_bench:
    batches of back-to-back calls on the harness stream, the L2 flushed before every call, a CUDA event pair
    around each call, one device-wide synchronisation per batch. The host enqueues ahead of the GPU, so a
    Python launch cost does not show as idle GPU time. Work on other streams is invisible to those events:
    side_work() compares wall clock with events first, and a candidate caught there is timed by wall_rep
    (device-wide sync around every call) instead."""

    def __init__(self, torch, flush_bytes: int):
        self.torch = torch
        self.flush = torch.empty(flush_bytes, dtype=torch.int8, device="cuda")
        self.start = torch.cuda.Event(enable_timing=True)
        self.end = torch.cuda.Event(enable_timing=True)

    def event_batch(self, fn, n: int) -> list[float]:
        torch = self.torch
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
        torch.cuda.synchronize()
        for start, end in zip(starts, ends):
            self.flush.zero_()  # evicts the L2
            start.record()
            fn()
            end.record()
        torch.cuda.synchronize()
        return [s.elapsed_time(e) for s, e in zip(starts, ends)]

    def wall_rep(self, fn) -> float:
        torch = self.torch
        torch.cuda.synchronize()
        self.flush.zero_()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        return (time.perf_counter() - t0) * 1e3

    def side_work(self, fn, n: int = 7) -> dict:
        """Median of (wall clock with device sync) - (events on the harness stream) for the same call."""
        torch = self.torch
        gaps, events = [], []
        for _ in range(n):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            self.start.record()
            fn()
            self.end.record()
            torch.cuda.synchronize()
            wall = (time.perf_counter() - t0) * 1e3
            ev = self.start.elapsed_time(self.end)
            gaps.append(wall - ev)
            events.append(ev)
        gaps.sort()
        events.sort()
        return {"gap_ms": gaps[n // 2], "event_ms": events[n // 2]}


def run_timing(ctx, shape: dict, seed: int, spec_timing: dict) -> dict:
    import torch

    from xlang.archs import get_arch
    from xlang.candidate import allocate_outputs, arguments

    task, entry = ctx["task"], ctx["entry"]
    progress = ctx["progress"]
    progress(f"timing shape={format_shape(shape)} seed={seed}: setup")
    inputs = task.make_inputs(shape, seed, ctx["device"])
    clones = {k: v.clone() for k, v in inputs.items()}
    outputs = allocate_outputs(task, shape, ctx["device"])
    args = arguments(task, shape, {**inputs, **outputs})
    cand = lambda: entry(*args)  # noqa: E731
    base = task.baseline(inputs, shape)
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    flush_bytes = int(max(spec_timing.get("flush_min_bytes", 256 << 20), 2 * l2))
    timer = Timer(torch, flush_bytes)

    progress("timing: warm-up")
    for fn in (cand, base):
        for _ in range(spec_timing.get("warmup_calls", 3)):
            fn()
        _sync_or_raise(torch)
    est = {key: sorted(timer.event_batch(fn, 5))[2] for key, fn in (("candidate", cand), ("baseline", base))}

    side = {k: timer.side_work(fn) for k, fn in (("candidate", cand), ("baseline", base))}
    cg = side["candidate"]
    # Work outside the harness stream (or host work after the last launch) shows as wall >> events.
    suspect = cg["gap_ms"] > max(0.05, 0.15 * cg["event_ms"]) + max(0.0, side["baseline"]["gap_ms"])
    method = "wall_clock_device_sync" if suspect else "cuda_events_back_to_back"

    budget_ms = spec_timing.get("budget_s", 0.6) * 1e3
    rounds = max(1, spec_timing.get("rounds", 4))
    samples = {"candidate": [], "baseline": []}
    reps_for = {}
    for key in samples:
        per_rep = est[key] + flush_bytes / 3.0e9 + (0.08 if suspect else 0.0)  # + flush (+ sync) (ms)
        reps_for[key] = int(min(spec_timing.get("max_reps", 2000),
                                max(spec_timing.get("min_reps", 30), budget_ms / per_rep)))
    # Bring the GPU to the clock it holds under sustained load (it starts an evaluation cool) before measuring.
    warm_ms = spec_timing.get("sustain_s", 0.3) * 1e3
    for key, fn in (("candidate", cand), ("baseline", base)):
        timer.event_batch(fn, int(min(2000, max(3, warm_ms / 2 / (est[key] + flush_bytes / 3.0e9)))))
    progress(f"timing: {reps_for} reps in {rounds} alternating rounds ({method})")
    for _ in range(rounds):
        for key, fn in (("baseline", base), ("candidate", cand)):
            n = max(1, reps_for[key] // rounds)
            if suspect:
                samples[key].extend(timer.wall_rep(fn) for _ in range(n))
            else:
                samples[key].extend(timer.event_batch(fn, n))
    _sync_or_raise(torch)

    # The timed calls must still compute the function: poison the outputs, call once, check again
    # (a candidate that skips work when it sees the same pointers again fails here).
    progress("timing: re-check after timing")
    for t in outputs.values():
        t.fill_(float("nan"))
    _call(entry, args, torch, ctx["files"])
    recheck = None
    changed = compare_inputs(clones, inputs)
    if changed:
        recheck = f"input {changed['input']} was modified during the timed calls"
    else:
        ref = task.reference(clones, shape)
        for name, out in outputs.items():
            stats = compare_output(name, out, ref[name], ctx["atol"], ctx["rtol"])
            if "failure" in stats:
                recheck = "after the timed calls: " + describe_failure(stats, shape, -1, seed, ctx["atol"],
                                                                        ctx["rtol"])
                break

    arch = get_arch(ctx["arch"])
    flops = task.flops(shape)
    cand_stats, base_stats = _stats(samples["candidate"]), _stats(samples["baseline"])
    peak = arch.figures.get("peak_dense_bf16_tflops")
    bw = arch.figures.get("mem_bandwidth_tbs")
    floors = []
    if peak:
        floors.append(flops / (peak * 1e12) * 1e3)
    if bw and task.min_bytes is not None:
        floors.append(task.min_bytes(shape) / (bw * 1e12) * 1e3)
    floor = max(floors) if floors else None
    c_ms, b_ms = cand_stats["median_ms"], base_stats["median_ms"]
    return {
        "method": method,
        "shape": shape,
        "seed": seed,
        "candidate_ms": c_ms,
        "baseline_ms": b_ms,
        "candidate": cand_stats,
        "baseline": base_stats,
        "baseline_name": task.baseline_name,
        "speedup": b_ms / c_ms if c_ms > 0 else None,
        "tflops": flops / (c_ms * 1e-3) / 1e12 if c_ms > 0 else None,
        "baseline_tflops": flops / (b_ms * 1e-3) / 1e12 if b_ms > 0 else None,
        "flops": flops,
        "roofline_floor_ms": floor,
        "beyond_roofline": bool(floor is not None and c_ms < floor),
        "side_work": side,
        "side_stream_suspect": bool(suspect),
        "flush_bytes": flush_bytes,
        "recheck_failure": recheck,
    }


def wait_at_gate(spec_timing: dict, progress) -> bool:
    """Time only when the GPU is ours alone: the parent runs memcheck and Nsight Compute beside the
    correctness trials and opens this gate (a file holding 'go' or 'skip') once they are done.
    Without a gate (nothing runs beside us) timing starts at once."""
    gate = spec_timing.get("gate")
    if not gate:
        return True
    progress("timing: waiting for memcheck and Nsight Compute to leave the GPU")
    Path(spec_timing["gate_waiting"]).touch()  # the parent stops our clock while we wait
    give_up = time.monotonic() + float(spec_timing.get("gate_max_wait_s", 3600))  # the parent died
    while not Path(gate).is_file():
        if time.monotonic() > give_up:
            return False
        time.sleep(0.005)
    return Path(gate).read_text().strip() == "go"


def gpu_clocks(nvml_index) -> dict:
    """The GPU as NVML sees it (clocks, temperature) right after the timed repetitions: read before them, an
    idle GPU reports its idle clock."""
    from xlang.profiler.gpu import _from_nvml

    return next((g for g in _from_nvml() or () if g.get("index") == nvml_index), {})


# ---- fingerprint --------------------------------------------------------------------------------------

def fingerprint(torch) -> dict:
    from importlib import metadata

    fp = {"python": platform.python_version(), "torch": torch.__version__, "cuda_runtime": torch.version.cuda}
    try:
        fp["cudnn"] = torch.backends.cudnn.version()
    except Exception:  # noqa: BLE001
        pass
    for dist, key in (("triton", "triton"), ("nvidia-cutlass-dsl", "cutlass_dsl"), ("cuda-python", "cuda_python"),
                      ("cuda-bindings", "cuda_bindings")):
        try:
            fp[key] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    props = torch.cuda.get_device_properties(0)
    fp.update({"device_name": props.name, "device_cc": f"{props.major}.{props.minor}",
               "sms": props.multi_processor_count, "l2_bytes": getattr(props, "L2_cache_size", None),
               "device_memory_mib": props.total_memory >> 20})
    return fp


def own_kernel_names(entry) -> list[str]:
    """Names of the @triton.jit functions the candidate's module defines (launched for every shape or not)."""
    module = sys.modules.get(getattr(entry, "__module__", "") or "")
    names = []
    for value in vars(module).values() if module is not None else ():
        fn = value
        for _ in range(4):  # Autotuner / Heuristics wrap the JITFunction in .fn
            if type(fn).__name__ == "JITFunction":
                inner = getattr(fn, "fn", None)
                name = getattr(inner, "__name__", None) or getattr(fn, "__name__", None)
                if name:
                    names.append(name)
                break
            fn = getattr(fn, "fn", None)
            if fn is None:
                break
    return sorted(set(names))


# ---- entry ----------------------------------------------------------------------------------------------

def run(spec: dict, progress) -> dict:
    progress("import torch")
    import torch

    from xlang.backend import BuildResult, get_backend
    from xlang.task import get_task

    if not torch.cuda.is_available():
        return {"status": "harness_error", "detail": "torch sees no CUDA device in the worker"}
    task = get_task(spec["task"])
    build = BuildResult.from_dict(spec["build"])
    backend = get_backend(spec["lang"])
    torch.cuda.init()
    fp = fingerprint(torch)
    files = {str(Path(build.load_path).resolve()), build.load_path} if build.load_path else set()
    progress("load candidate")
    try:
        entry = backend.load_entry(build)
    except Exception as e:  # noqa: BLE001
        return {"status": "runtime_error", "detail": "loading the candidate failed:\n" + candidate_trace(e, files),
                "fingerprint": fp}
    own = own_kernel_names(entry)
    ctx = {"task": task, "entry": entry, "device": "cuda", "atol": task.tolerance["atol"],
           "rtol": task.tolerance["rtol"], "progress": progress, "files": files, "arch": spec["arch"]}
    mode = spec["mode"]
    result: dict = {"status": "ok", "fingerprint": fp, "mode": mode, "own_kernels": own}
    try:
        if mode == "check":
            shapes = spec["shapes"]
            corr = run_correctness(ctx, shapes, spec["seed"], spec.get("trials", 3))
            result["correctness"] = corr
            if not corr["passed"]:
                result.update(status="incorrect", detail=corr["failure"])
                return result
            spec_timing = spec.get("timing", {})
            if spec_timing.get("enabled", True) and wait_at_gate(spec_timing, progress):
                timing = run_timing(ctx, shapes[0], spec_timing.get("seed", spec["seed"] + 999), spec_timing)
                timing["clocks"] = gpu_clocks(spec.get("gpu_index"))
                result["timing"] = timing
                if timing["recheck_failure"]:
                    result.update(status="incorrect", detail=timing["recheck_failure"])
        elif mode == "once":
            rec = check_once(ctx, spec["shape"], spec["seed"], 0, 0)
            result["trial"] = rec
            if "failure" in rec:
                result.update(status="incorrect", detail=rec["failure"])
        elif mode == "ncu":
            from xlang.candidate import allocate_outputs, arguments

            shape = spec["shape"]
            inputs = task.make_inputs(shape, spec["seed"], "cuda")
            outputs = allocate_outputs(task, shape, "cuda")
            args = arguments(task, shape, {**inputs, **outputs})
            progress("ncu: warm-up call")
            _call(entry, args, torch, files)
            progress("ncu: profiled call")
            torch.cuda.nvtx.range_push(NVTX_RANGE)
            try:
                _call(entry, args, torch, files)
            finally:
                torch.cuda.nvtx.range_pop()
        else:
            return {"status": "harness_error", "detail": f"unknown worker mode {mode}"}
    except CandidateError as e:
        result.update(status="runtime_error", detail=str(e))
    except torch.cuda.OutOfMemoryError as e:
        result.update(status="runtime_error", detail=f"out of GPU memory: {str(e).splitlines()[0]}")
    progress("done")
    try:
        import gc

        gc.collect()
        torch.cuda.synchronize()
    except Exception as e:  # noqa: BLE001 - a late asynchronous error still belongs to the candidate
        if result["status"] == "ok":
            result.update(status="runtime_error", detail=f"CUDA error at the end: {str(e).splitlines()[0]}")
    return result


def main(argv: list[str]) -> int:
    spec = json.loads(Path(argv[0]).read_text())
    progress = _Progress(spec.get("progress"))
    try:
        result = run(spec, progress)
    except Exception as e:  # noqa: BLE001 - our own failure, or the candidate's escaping our guards
        result = {"status": "runtime_error", "detail": "worker failed: " + "".join(
            traceback.format_exception_only(type(e), e)).strip()[:3000],
                  "traceback": traceback.format_exc()[-6000:]}
    result["pid"] = os.getpid()
    Path(spec["out"]).write_text(json.dumps(result, default=str))
    sys.stdout.flush()
    # Skip interpreter teardown: a candidate's broken CUDA state can hang or crash at exit.
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1:])
