"""The check stage's timed path in the judge (judge/timing.py time_calls, timing_record, judge/check.py's record
into a Report) on the CPU: the GPU-only code runs whole, with fakes only at its two boundaries: the candidate's
process (an in-process runner that maps the judge's buffers as the real runner does and answers the call with the
reference's result) and the CUPTI observer (records of the kernels that call launched, with timestamps)."""

from __future__ import annotations

import hashlib
import os

import pytest

from tests.plans import state
from xlang.profiler.buffers import Mapped
from xlang.profiler.gpuwatch import GPU_NOT_ALONE
from xlang.profiler.judge import timing as judge_timing
from xlang.profiler.judge.calls import Outcome
from xlang.profiler.judge.observed import Provenance
from xlang.profiler.judge.plan import Report
from xlang.profiler.judge.process import apply_watch
from xlang.profiler.observer_records import KernelRecord
from xlang.task import get_task

SHAPE = {"M": 32, "N": 48, "K": 64}
KERNEL_NS = 100_000  # each call's own kernel: 0.1 ms
GAP_NS = 3_000  # idle between the primer's end and the kernel's start
PRIMER_NS = 2_000


def _kernel(name, module, start, ns, grid=(4, 4, 1)):
    return KernelRecord(start=start, end=start + ns, device=0, ctx=1, stream=7, corr=start, grid=grid,
                        block=(128, 1, 1), dyn_smem=0, graph_id=0, device_launched=False, module=module, name=name)


class _Observer:
    """The CUPTI observer's side: what the candidate's calls launched since the last flush."""

    def __init__(self):
        self.pending, self.flushes = [], 0

    def flush(self, timeout):
        self.flushes += 1
        out, self.pending = self.pending, []
        return out


class _Candidate:
    """The candidate's process, in this process: the judge's buffers mapped as the runner maps them (its own
    descriptor of each), its call the task's reference written into the outputs; every call's kernel (and the
    runner's primer when asked) recorded for the observer."""

    def __init__(self, task, observer, module):
        self.task, self.observer, self.module = task, observer, module
        self.sets, self.calls, self.clock = {}, [], 10_000_000
        self.uid, self.home = None, None

    def request(self, message, fds=None, timeout=60.0):
        op = message["op"]
        if op == "map":
            self.sets[message["set"]] = [Mapped(meta, os.dup(fd)) for meta, fd in zip(message["buffers"], fds)]
            return {"op": "mapped"}
        if op == "unmap":
            for m in self.sets.pop(message["set"], []):
                m.close()
            return {"op": "unmapped"}
        assert op == "call"
        self.calls.append(message)
        bufs = {m.meta.name: m.tensor for m in self.sets[message["set"]]}
        ins = {t.name: bufs[t.name] for t in self.task.contract.inputs}
        for name, value in self.task.reference(ins, SHAPE).items():
            bufs[name].copy_(value.to(bufs[name].dtype))
        if message.get("primer"):
            self.observer.pending.append(_kernel("void at::native::vectorized_elementwise_kernel<fill>", "-",
                                                 self.clock, PRIMER_NS, grid=(1, 1, 1)))
            self.clock += PRIMER_NS + GAP_NS
        self.observer.pending.append(_kernel("gemm_kernel", self.module, self.clock, KERNEL_NS))
        self.clock += KERNEL_NS + 1_000_000
        return {"op": "done"}


@pytest.fixture
def timed(tmp_path):
    cubin = tmp_path / "own.cubin"
    cubin.write_bytes(b"the candidate's module")
    task = get_task("gemm")
    st = state(task, "cpu", secret=12345, own_cubins=[str(cubin)], build_kernels=["gemm_kernel"],
               timing={"enabled": True, "flush_min_bytes": 1 << 20, "min_reps": 6, "max_reps": 6, "verify": 2,
                       "sustain_s": 0.0, "seed": 77}, timed_shape=SHAPE)
    observer = _Observer()
    runner = _Candidate(task, observer, hashlib.sha256(cubin.read_bytes()).hexdigest())
    prov = Provenance(st.plan, None)
    lines = []
    out = judge_timing.time_calls(st, runner, observer, prov, SHAPE, lines.append, "candidate")
    return st, runner, observer, out, lines


def test_time_calls_times_the_observed_kernel_without_the_primer_and_verifies_a_secret_subset(timed):
    st, runner, observer, out, lines = timed
    assert out["method"] == "cupti_kernel_span"
    # 3 untimed calls (2 compile, 1 estimates), 3 warm-up calls (the floor), 6 timed ones, each with the primer
    assert len(runner.calls) == 3 + 3 + 6 and all(c["primer"] for c in runner.calls)
    assert out["reps"] == 6 and out["stats"]["reps"] == 6
    assert out["stats"]["median_ms"] == pytest.approx(KERNEL_NS / 1e6)  # the primer is not the candidate's time
    assert out["wall_stats"]["reps"] == 6 and out["wall_stats"]["median_ms"] > 0
    assert len(out["verified_calls"]) >= 2 and 5 in out["verified_calls"]  # the last one always
    assert out["call_kernels"] == ["gemm_kernel"] and out["first_call_kernels"] == ["gemm_kernel"]
    prof = out["profile"]
    assert [a["name"] for a in prof["activities"]] == ["gemm_kernel"] and prof["calls"] == 6
    assert prof["activities"][0]["median_ms"] == pytest.approx(KERNEL_NS / 1e6) and prof["idle_ms"] == 0.0
    assert out["host"]["calls"] == 6 and out["host"]["dtoh_bytes"] == 0
    assert out["power"] is None  # no NVML here: recorded as nothing, never a failure
    assert any("6 timed" in ln for ln in lines)


def test_a_timed_candidate_makes_a_timing_record_and_a_report_the_parent_reads(timed):
    st, _runner, _observer, cand, _lines = timed
    base = {**cand, "stats": {**cand["stats"], "median_ms": 2 * cand["stats"]["median_ms"]}}
    rec = judge_timing.timing_record(st, SHAPE, cand, base, [], {"checked": False})
    assert rec["speedup"] == pytest.approx(2.0) and rec["seed"] == 77 and rec["method"] == "cupti_kernel_span"
    assert rec["candidate_profile"] == cand["profile"] and rec["verified_calls"]["candidate"] == cand["verified_calls"]
    rec["clocks"] = judge_timing.gpu_clocks(st.plan.gpu_index)
    # what run_check returns, through the report file and back (strict: a key Report lacks is an error)
    result = {"status": "ok", "mode": "check", "correctness": {"passed": True}, "timing": rec,
              "timed_call_kernels": cand["call_kernels"], "timed_first_call_kernels": cand["first_call_kernels"]}
    report = Report.from_json(Report.from_dict(result).to_json())
    assert report.timing["speedup"] == pytest.approx(2.0) and report.timed_call_kernels == ["gemm_kernel"]


def test_a_foreign_kernel_in_a_timed_call_is_forbidden(tmp_path):
    """The observer's kernels are vetted in every timed call, not only in the correctness trials."""
    task = get_task("gemm")
    st = state(task, "cpu", timing={"flush_min_bytes": 1 << 20, "min_reps": 2, "max_reps": 2, "sustain_s": 0.0},
               build_kernels=["gemm_kernel"])
    observer = _Observer()
    runner = _Candidate(task, observer, "f" * 64)  # a module the candidate's build never produced
    with pytest.raises(Outcome) as e:
        judge_timing.time_calls(st, runner, observer, Provenance(st.plan, None), SHAPE, lambda t: None, "candidate")
    assert e.value.status == "forbidden_call" and "gemm_kernel" in e.value.detail


class _Watch:
    """The stage's GPU watch as apply_watch reads it: its record, and what it found (gpuwatch.GpuWatch.finding)."""

    def __init__(self, found):
        self.found = found

    def record(self):
        return {"polls": 40, "seen": []}

    def finding(self):
        return self.found


@pytest.mark.parametrize("found, status, harness", [
    (None, "ok", None),
    (("forbidden_call", "a second GPU process of the candidate's"), "forbidden_call", None),
    (("harness_error", "a stranger held the GPU"), "harness_error", GPU_NOT_ALONE),
    (("memory_error", "the driver reported an illegal address"), "memory_error", None),
])
def test_what_the_gpu_watch_found_reaches_the_parent_in_the_report(found, status, harness):
    result = {"status": "ok", "mode": "check", "correctness": {"passed": True, "trials": 2}}
    apply_watch(result, _Watch(found))
    report = Report.from_json(Report.from_dict(result).to_json())
    assert report.status == status and report.gpu_watch == {"polls": 40, "seen": []}
    assert report.harness == harness
    assert report.correctness["passed"] is (status in ("ok", "memory_error"))
