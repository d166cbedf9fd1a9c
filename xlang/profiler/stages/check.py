"""The check stage: the candidate's correctness on the shapes drawn for this evaluation, in the judge.

In the parent (CheckStage, run by the scheduler of xlang.profiler.pipeline): the judge process in mode "check"
(xlang.profiler.judge.run_check), which after the correctness trials times the candidate and the vendor (stages/
timing.py) and the task's peers (stages/peers.py). In the judge: every trial with fresh inputs of a value kind the
task declares, outputs compared with the fp32 reference (verify), the kernels the CUPTI observer saw checked for
provenance (Provenance), and the host-compute evidence of each call (call_evidence / host_evidence).
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

from xlang import verdict as V
from xlang.profiler.stages.base import Failure, StageBase
from xlang.profiler.stages.calls import _MEMORY_FAULT_CODES, GUARD_HINT, Call, Outcome, _make_inputs
from xlang.profiler.stages.launch import run_stage, stage_env, stage_failure
from xlang.profiler.stages.process import Runner
from xlang.task import format_shape


def seed_for(base: int, shape_index: int, trial: int) -> int:
    return base + 1000 * shape_index + trial


def compare_output(name: str, got, expected, atol: float, rtol: float, bound=None) -> dict:
    """Stats of one output against its fp32 reference; 'failure' set when it fails (NaN, Inf, mismatch). Per element
    |got - expected| <= atol + rtol |expected| (+ bound: the task's error bound of this output, a tensor of its
    shape, Task.error_bound, where it has one). max_ratio: the worst |got - expected| / allowed (1 or more fails)."""
    import torch

    g = got.float()
    e = expected.float()
    nan = torch.isnan(g)
    inf = torch.isinf(g)
    diff = (g - e).abs()
    allowed = atol + rtol * e.abs()
    if bound is not None:
        allowed = allowed + bound.float().to(allowed.device)
    ok_elem = diff <= allowed  # NaN compares False
    bad = ~ok_elem
    n_bad, n_nan, n_inf = int(bad.sum()), int(nan.sum()), int(inf.sum())
    finite = ~(nan | inf)
    fdiff = torch.where(finite, diff, torch.zeros_like(diff))
    rel = fdiff / e.abs().clamp_min(max(atol, 1e-30))
    stats = {
        "output": name, "elements": g.numel(),
        "max_abs_err": float(fdiff.max()) if g.numel() else 0.0,
        "max_rel_err": float(rel.max()) if g.numel() else 0.0,
        "max_ratio": float("inf") if n_nan or n_inf else float((diff / allowed.clamp_min(1e-30)).max())
        if g.numel() else 0.0,
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
        if bound is not None:
            stats["failure"]["allowed"] = float(allowed.flatten()[flat])
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
        if old.dtype.is_floating_point and old.element_size() == 1:
            # fp8: compared bit for bit, as bytes (not every torch build compares fp8 tensors on every device)
            old, new = old.view(torch.uint8), new.view(torch.uint8)
        if not torch.equal(old, new):
            changed = (old != new) & ~(torch.isnan(old) & torch.isnan(new))
            n = int(changed.sum())
            if not n:  # NaN inputs (attn_decode_paged's garbage pages) are never torch.equal to themselves
                continue
            flat = int(changed.flatten().nonzero()[0])
            return {"input": name, "changed": n, "elements": old.numel(),
                    "index": list(_unravel(flat, tuple(old.shape))),
                    "was": float(old.flatten()[flat].float()), "now": float(new.flatten()[flat].float())}
    return None


def describe_failure(stats: dict, shape: dict, trial: int, seed: int, atol: float, rtol: float,
                     bound_rule: str = "") -> str:
    f = stats["failure"]
    where = f"{stats['output']}[{', '.join(map(str, f['index']))}]"
    ctx = f"(shape {format_shape(shape)}, trial {trial}, seed {seed})"
    if f["kind"] == "nan":
        return (f"{stats['output']}: {stats['nan']} of {stats['elements']} elements are NaN (left unwritten, or "
                f"computed as NaN); first at {where}, expected {f['expected']:.6g} {ctx}")
    if f["kind"] == "inf":
        return f"{stats['output']}: {stats['inf']} elements are Inf; first at {where}, expected {f['expected']:.6g} {ctx}"
    if "allowed" in f:  # the task's error bound applies (Task.error_bound)
        return (f"{stats['output']}: {stats['mismatches']} of {stats['elements']} elements outside atol={atol} "
                f"rtol={rtol} plus the task's error bound ({bound_rule}); first at {where}: got {f['got']:.6g}, "
                f"expected {f['expected']:.6g}, allowed |err| {f['allowed']:.4g}; worst |err| / allowed "
                f"{stats['max_ratio']:.4g}, max abs err {stats['max_abs_err']:.4g} {ctx}")
    return (f"{stats['output']}: {stats['mismatches']} of {stats['elements']} elements outside atol={atol} "
            f"rtol={rtol}; first at {where}: got {f['got']:.6g}, expected {f['expected']:.6g}; "
            f"max abs err {stats['max_abs_err']:.4g}, max rel err {stats['max_rel_err']:.4g} {ctx}")


def verify(ctx, call: Call, inputs: dict, where: str, kind: str = "normal") -> dict:
    """Check one finished call against the judge's own copy of its inputs (of value kind `kind`): slack, inputs,
    outputs (each with its tolerance, Task.tolerance_for, and the task's error bound, Task.error_bound: both the
    reference and the bound come from the judge's `inputs`, never from the candidate's buffers)."""
    task = ctx["task"]
    call.check_slack(where)
    changed = compare_inputs(inputs, call.input_tensors())
    if changed:
        raise Outcome("incorrect", f"input {changed['input']} was modified by the candidate: {changed['changed']} of "
                                   f"{changed['elements']} elements changed, first at {changed['input']}"
                                   f"[{', '.join(map(str, changed['index']))}] ({where})")
    reference = task.reference(inputs, call.shape)
    bounds = task.error_bound(inputs, call.shape) if task.error_bound is not None else {}
    stats = []
    for name, got in call.output_tensors().items():
        atol, rtol = task.tolerance_for(name, kind)
        s = compare_output(name, got, reference[name], atol, rtol, bounds.get(name))
        stats.append(s)
        if "failure" in s:
            text = describe_failure(s, call.shape, -1, -1, atol, rtol, task.error_bound_rule)
            raise Outcome("incorrect", text[: text.rfind(" (shape ")] + f" ({where})")
    return {"outputs": stats}


class Provenance:
    """Whose kernels ran: a kernel is the candidate's only when the module it came from is one its own
    toolchain produced in this evaluation (the cubins nvcc built from its source; the cubins its JIT wrote
    into its private cache). Any other kernel that looks like math is forbidden_call, whatever its name."""

    def __init__(self, spec: dict, home: Path | None):
        self.own: set = set()
        self.kernels_on_disk = spec.get("kernels_on_disk", True)  # Backend.kernels_on_disk
        self.jit_prefix = spec.get("jit_kernel_prefix") or ""  # Backend.jit_kernel_prefix
        self.jit_cache = spec.get("jit_cache")  # Backend.jit_cache: where in home its JIT's cubins are its own
        # "<prefix><function>_" of each built kernel made from one of the candidate's own kernel functions
        # (KernelImage.meta["stem"]), longest first
        self.stems = sorted(spec.get("build_kernel_stems") or [], key=len, reverse=True)
        self.home = home
        self.scanned: set = set()
        # Kernels whose module the observer could not name ('-': launched through a statically linked cudart,
        # as nvcc's shared objects are): the candidate's only under a name its own build compiled.
        self.built = {n.strip() for n in spec.get("build_kernels", [])}
        for cubin in spec.get("own_cubins", []):
            self._add(Path(cubin))

    def _add(self, path: Path) -> None:
        from xlang.untrusted import read_untrusted_bytes

        data = read_untrusted_bytes(path, 64 << 20)
        if data:
            self.own.add(hashlib.sha256(data).hexdigest())  # as the observer hashes a loaded module

    def rescan(self) -> None:
        """Hash the cubins the language's JIT wrote into its cache in the candidate's home: only there, so a
        cubin of another toolchain (nvcc or Triton run by a CuTe DSL or cuda_ptx candidate) is not its own."""
        from xlang.untrusted import untrusted_files

        if self.home is None or not self.jit_cache:
            return
        for _rel, data in untrusted_files(self.home / self.jit_cache, ".cubin"):  # no link followed, by fds
            self.own.add(hashlib.sha256(data).hexdigest())

    def is_own(self, k) -> bool:
        """Whether the candidate's toolchain made this kernel: its module is one of the candidate's, or an
        unnamed module (static cudart) under a name its build compiled, or (a JIT with no files) any
        non-utility name. vet() has already rejected what is forbidden."""
        from xlang.profiler.observer_records import MODULE_UNKNOWN

        if k.module in self.own or (k.module == MODULE_UNKNOWN and k.name in self.built):
            return True
        return not self.kernels_on_disk and not _UTILITY_KERNEL.search(k.name)

    def _chosen_part(self, name: str) -> str:
        """The part of a run-time kernel name that the vendor screen reads, for a language whose JIT keeps
        kernels in memory (its names carry the JIT's prefix, the candidate's function and the static arguments
        of each specialisation): after the stem of one of the candidate's own kernel functions, else after the
        JIT's own prefix. Any other name is screened whole."""
        if self.kernels_on_disk:
            return name
        for stem in self.stems:
            if name.startswith(stem):
                return name[len(stem):]
        if self.jit_prefix and name.startswith(self.jit_prefix):
            return name[len(self.jit_prefix):]
        return name

    def vet(self, kernels) -> None:
        from xlang.profiler.ncu import forbidden_reason
        from xlang.profiler.observer_records import MODULE_UNKNOWN

        foreign = [k for k in kernels if k.module not in self.own]
        if foreign:
            self.rescan()
            foreign = [k for k in foreign if k.module not in self.own]
        for k in foreign:
            # A name the build compiled is trusted when its module is on disk (hashed); a JIT that keeps kernels
            # in memory compiled at build time whatever the candidate's code compiled, a library's kernels too,
            # so its names are screened all the same (after the stem of the candidate's own kernel function).
            screened = k.name not in self.built or not self.kernels_on_disk
            why = forbidden_reason(self._chosen_part(k.name)) if screened else None
            if why:
                raise Outcome("forbidden_call", f"at run time the candidate's process ran {k.name[:160]} ({why})")
            if k.module == MODULE_UNKNOWN and k.name in self.built:
                continue
            if (not self.kernels_on_disk and self.jit_prefix and k.name not in self.built
                    and not k.name.startswith(self.jit_prefix) and not _UTILITY_KERNEL.search(k.name)):
                raise Outcome("forbidden_call", f"at run time the candidate's process ran {k.name[:160]}, a kernel "
                                                f"its language's JIT did not make (every kernel it makes is named "
                                                f"{self.jit_prefix}...): another toolchain's code")
            if _UTILITY_KERNEL.search(k.name):
                continue  # torch's own elementwise / fill / copy kernels (a scratch tensor, a zero_())
            if not self.kernels_on_disk:
                continue  # a JIT that keeps its output in memory: no file to match, the name alone decides
            raise Outcome("forbidden_call", f"at run time the candidate's process ran {k.name[:160]}, a kernel from "
                                            "a module that matches nothing the candidate's build or its own JIT "
                                            "cache holds (not built from its source, or that evidence was changed)")


_UTILITY_KERNEL = re.compile(r"at::native::|elementwise|vectorized_|fill|copy|memset|cast|index_|distribution_|"
                             r"reduce_kernel|arange|zero", re.I)


def _observer(spec):
    if spec["device"] != "cuda" or not spec.get("observer_library"):
        return None
    from xlang.profiler.observer import Observer

    return Observer(Path(spec["observer_library"]))


def _flush(observer, prov, timeout=60.0):
    """All the candidate's work so far is finished (the observer synchronised its contexts) and recorded."""
    if observer is None:
        return []
    from xlang.profiler.observer_records import ObserverError, errors, kernels

    try:
        records = observer.flush(timeout)
    except ObserverError as e:
        # The observer synchronises the candidate's contexts itself: a fault the candidate's own code swallowed
        # (its sync in a try) still shows as that sync's error code.
        codes = {x.code for x in errors(e.records or []) if x.what == "ctx_synchronize"}
        if codes & set(_MEMORY_FAULT_CODES):
            raise Outcome("memory_error", f"{GUARD_HINT}. The observer's synchronisation of the candidate's "
                                          f"contexts failed: {e}") from None
        raise Outcome("runtime_error", f"the kernel observer failed: {e}") from None
    if prov is not None:
        prov.vet(kernels(records))
    return records


def correctness(ctx, runner: Runner, observer, prov, progress, nvtx_last: str | None = None) -> dict:
    """Every trial of spec["trials"]; nvtx_last: the name of an NVTX range around the last call (the one
    Nsight Compute profiles: the calls before it take the JIT compilation and autotuning)."""
    spec, task = ctx["spec"], ctx["task"]
    trials, calls, called = [], [], []
    for i, (shape, kind, seed) in enumerate(spec["trials"]):
        last = i == len(spec["trials"]) - 1
        where = f"shape {format_shape(shape)}, inputs '{kind}', seed {seed}"
        progress(f"trial {i}: {where}")
        call = Call(ctx, shape)
        try:
            inputs = _make_inputs(task, shape, seed, ctx["kind"], kind)
            call.fill(inputs)
            # Host CPU time only on a shape's later calls: its first one compiles (Triton's JIT, autotuning).
            warm = shape in called
            called.append(shape)
            cpu0 = process_cpu_ms(runner.uid) if warm else None
            call.run(runner, ctx["call_timeout_s"], nvtx=nvtx_last if last else None, where=where)
            records = _flush(observer, prov)
            calls.append(call_evidence(records, process_cpu_ms(runner.uid) if warm else None, cpu0,
                                       call.input_bytes(), observer is not None))
            rec = verify(ctx, call, inputs, where, kind)
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


def process_cpu_ms(uid: int | None) -> float | None:
    """CPU time (user + system, reaped children included) of every live process of a jail uid, in ms, from
    /proc/PID/stat (fields 14-17, clock ticks). None where the uid is not a jail's own (not root: the candidate
    then shares the judge's uid, whose time would count the judge too)."""
    from xlang.sandbox import CANDIDATE_UID_BASE, uid_processes

    if uid is None or os.geteuid() != 0 or not CANDIDATE_UID_BASE <= uid < CANDIDATE_UID_BASE + 1000:
        return None
    ticks = 0
    for pid, _ in uid_processes(uid):
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            ticks += sum(int(f) for f in fields[11:15])  # utime stime cutime cstime (after pid, comm, state)
        except (OSError, ValueError, IndexError):
            continue  # it ended between the scan and the read
    return ticks * 1e3 / os.sysconf("SC_CLK_TCK")


def call_evidence(records: list, cpu_after_ms: float | None, cpu_before_ms: float | None, input_bytes: int,
                  observed: bool) -> dict:
    """What one call showed of a host round trip (issue 40): bytes it copied to the host (CUPTI's copy kinds),
    the candidate's host CPU time and the GPU's busy time (the span less its idle gaps: host work between a
    copy to the host and the copy back is idle GPU time inside the span). Evidence only: Nsight Compute's FLOPs
    decide."""
    from xlang.profiler.observer_records import TO_HOST, ObserverError, activities, copied_bytes, span

    copies = copied_bytes(records) if observed else {}
    cpu = None if cpu_after_ms is None or cpu_before_ms is None else max(0.0, cpu_after_ms - cpu_before_ms)
    try:
        gpu_ms = (span(records) - sum(a[1] for a in activities(records))) / 1e6 if observed else None
    except ObserverError:  # an untimed record: the timing's own span() says so where it counts
        gpu_ms = None
    return {"dtoh_bytes": sum(copies.get(k, 0) for k in TO_HOST) if observed else None,
            "htod_bytes": copies.get("HtoD", 0) if observed else None, "input_bytes": input_bytes,
            "cpu_ms": cpu, "gpu_ms": gpu_ms}


# A call's host CPU time this many times its GPU time (and at least HOST_CPU_MIN_MS) is called far above it: a
# GPU kernel's call costs the host a launch or a few (tens of us), not the kernel's own time. /proc counts CPU
# time in clock ticks (10 ms at the usual 100 Hz), so one call reads 0 or 10 ms whatever it did: on the H200
# (2026-12-01) an honest 0.76 ms GEMM read one tick in 2 of 200 timed calls. The floor is five ticks, so rounding
# alone never makes a call "far above"; a host GEMM of the task's shapes takes seconds.
HOST_CPU_FACTOR = 10.0


HOST_CPU_MIN_MS = max(5.0, 5 * 1e3 / os.sysconf("SC_CLK_TCK"))


def host_evidence(calls: list[dict]) -> dict | None:
    """Over several calls (call_evidence): the most bytes one call copied to the host and its inputs' size, how
    many calls copied at least half their inputs' bytes to the host, the median host CPU and GPU times, and how
    many calls spent host CPU time far above their GPU time. None without calls."""
    if not calls:
        return None

    def median(xs):
        xs = sorted(x for x in xs if x is not None)
        return xs[len(xs) // 2] if xs else None

    most = max(calls, key=lambda c: c.get("dtoh_bytes") or 0)
    far = [c for c in calls if c.get("cpu_ms") is not None and c.get("gpu_ms") is not None
           and c["cpu_ms"] >= max(HOST_CPU_MIN_MS, HOST_CPU_FACTOR * c["gpu_ms"])]
    return {"calls": len(calls), "dtoh_bytes": most.get("dtoh_bytes"), "input_bytes": most.get("input_bytes"),
            "input_sized_dtoh_calls": sum(1 for c in calls if (c.get("dtoh_bytes") or 0) >= 0.5 * c["input_bytes"] > 0),
            "cpu_ms": median(c.get("cpu_ms") for c in calls), "gpu_ms": median(c.get("gpu_ms") for c in calls),
            "cpu_far_above_gpu_calls": len(far)}


def _kernels(records):
    from xlang.profiler.observer_records import kernels

    return kernels(records)


def _own_names(records, prov) -> list[str]:
    """The names of one call's kernels that the candidate's toolchain made (all of them for the vendor)."""
    return sorted(k.name for k in _kernels(records) if prov is None or prov.is_own(k))


# ---- in the parent: the stage ---------------------------------------------------------------------------------

class Check(StageBase):
    name, gpu = "check", True
    categories = (V.RUNTIME_ERROR, V.TIMEOUT, V.INCORRECT, V.MEMORY_ERROR, V.FORBIDDEN_CALL, V.HARNESS_ERROR)
    runs = "the judge: correctness on drawn shapes, observed kernels, timing against the vendor"

    def run(self, job, ctx) -> Failure | None:
        ctx.reports[self.name] = run_stage({**ctx.spec, "mode": "check"}, ctx.workdir, "check", ctx.check_limit_s,
                                           env=stage_env(ctx.options, ctx.gpu), cancel=ctx.cancel[self.name],
                                           deadline=ctx.gate.deadline if ctx.gate else None)
        return stage_failure("check", ctx.reports[self.name], ctx.check_limit_s)

    def others_left(self, job, ctx, failed: bool) -> None:
        """memcheck and ncu have left the GPU: the timing may start ('go'), unless one of them has failed."""
        if ctx.gate is not None:
            ctx.gate.open(go=not failed)

    def record(self, job, ctx, failure: Failure | None) -> Failure | None:
        verdict, check = ctx.verdict, ctx.reports[self.name]
        if check.result:
            verdict.isolation = check.result.get("isolation", verdict.isolation)  # what the judge itself could use
            verdict.fingerprint.update(check.result.get("fingerprint") or {})
            verdict.correctness = check.result.get("correctness")
            verdict.timing = check.result.get("timing")
            if check.result.get("suite"):  # --suite: the per-shape timings (xlang.suites.suite_result)
                verdict.suite = check.result["suite"]
            verdict.fingerprint["gpu_watch"] = check.result.get("gpu_watch")  # who held the GPU while it ran
            verdict.output = {"check": check.result.get("candidate_output")}
            if (verdict.timing or {}).get("clocks"):
                verdict.fingerprint["gpu"] = {**verdict.fingerprint["gpu"], **verdict.timing["clocks"],
                                              "clocks_sampled": "after the timed repetitions"}
        # incorrect in a verified timed call after correct trials included: correct is False
        verdict.correct = bool(verdict.correctness and verdict.correctness.get("passed")) and \
            (failure is None or failure[0] not in (V.INCORRECT, V.RUNTIME_ERROR, V.TIMEOUT, V.FORBIDDEN_CALL,
                                                  V.HARNESS_ERROR))
        if failure is None:
            # The jail of every stage (a tool stage takes the strongest its tool works in: tool_jail_variant).
            verdict.fingerprint["stage_isolation"] = {"check": verdict.isolation}
        return failure


STAGE = Check()
