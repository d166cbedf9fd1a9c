"""What the CUPTI observer saw of the candidate's calls, in the judge: whose kernels ran (Provenance), the
observer's records flushed and vetted (flush_observed), and the host-compute evidence of each call
(call_evidence / host_evidence)."""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

from xlang.profiler.judge.calls import GUARD_HINT, MEMORY_FAULT_CODES, Outcome
from xlang.profiler.judge.plan import Plan


class Provenance:
    """Whose kernels ran: a kernel is the candidate's only when the module it came from is one its own
    toolchain produced in this evaluation (the cubins nvcc built from its source; the cubins its JIT wrote
    into its private cache). Any other kernel that looks like math is forbidden_call, whatever its name."""

    def __init__(self, plan: Plan, home: Path | None):
        self.own: set = set()
        self.kernels_on_disk = plan.kernels_on_disk  # Backend.kernels_on_disk
        self.jit_prefix = plan.jit_kernel_prefix or ""  # Backend.jit_kernel_prefix
        self.jit_cache = plan.jit_cache  # Backend.jit_cache: where in home its JIT's cubins are its own
        # "<prefix><function>_" of each built kernel made from one of the candidate's own kernel functions
        # (KernelImage.meta["stem"]), longest first
        self.stems = sorted(plan.build_kernel_stems or [], key=len, reverse=True)
        self.home = home
        self.scanned: set = set()
        # Kernels whose module the observer could not name ('-': launched through a statically linked cudart,
        # as nvcc's shared objects are): the candidate's only under a name its own build compiled.
        self.built = {n.strip() for n in plan.build_kernels}
        for cubin in plan.own_cubins:
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
        return not self.kernels_on_disk and not UTILITY_KERNEL.search(k.name)

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
                    and not k.name.startswith(self.jit_prefix) and not UTILITY_KERNEL.search(k.name)):
                raise Outcome("forbidden_call", f"at run time the candidate's process ran {k.name[:160]}, a kernel "
                                                f"its language's JIT did not make (every kernel it makes is named "
                                                f"{self.jit_prefix}...): another toolchain's code")
            if UTILITY_KERNEL.search(k.name):
                continue  # torch's own elementwise / fill / copy kernels (a scratch tensor, a zero_())
            if not self.kernels_on_disk:
                continue  # a JIT that keeps its output in memory: no file to match, the name alone decides
            raise Outcome("forbidden_call", f"at run time the candidate's process ran {k.name[:160]}, a kernel from "
                                            "a module that matches nothing the candidate's build or its own JIT "
                                            "cache holds (not built from its source, or that evidence was changed)")


UTILITY_KERNEL = re.compile(r"at::native::|elementwise|vectorized_|fill|copy|memset|cast|index_|distribution_|"
                             r"reduce_kernel|arange|zero", re.I)


def make_observer(plan):
    if plan.device != "cuda" or not plan.observer_library:
        return None
    from xlang.profiler.observer import Observer

    return Observer(Path(plan.observer_library))


def flush_observed(observer, prov, timeout=60.0):
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
        if codes & set(MEMORY_FAULT_CODES):
            raise Outcome("memory_error", f"{GUARD_HINT}. The observer's synchronisation of the candidate's "
                                          f"contexts failed: {e}") from None
        raise Outcome("runtime_error", f"the kernel observer failed: {e}") from None
    if prov is not None:
        prov.vet(kernels(records))
    return records


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


def own_names(records, prov) -> list[str]:
    """The names of one call's kernels that the candidate's toolchain made (all of them for the vendor)."""
    return sorted(k.name for k in _kernels(records) if prov is None or prov.is_own(k))
