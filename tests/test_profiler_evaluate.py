"""The profiler's orchestration on a CPU-only machine: crash and hang containment of worker processes,
categorisation of what a worker reports, and the static stages of evaluate()."""

import json
import os
import sys
import time
from pathlib import Path

import pytest
from plans import plan

from xlang import verdict as V
from xlang.children import run_child
from xlang.profiler import evaluate as ev
from xlang.profiler.judge.plan import Report
from xlang.profiler.stages import launch, memcheck, ncu, timing

ROOT = Path(__file__).resolve().parent.parent
BAD = ROOT / "tests" / "kernels" / "bad"


def _stage(tmp_path, args, timeout=20.0):
    cmd = [sys.executable, "-m", "xlang.profiler.selftest", *args]
    return launch.run_stage(plan(mode="x"), tmp_path, "check", timeout, child_cmd=cmd)


def test_hanging_worker_is_killed_with_its_children(tmp_path):
    pidfile = tmp_path / "grandchild.pid"
    start = time.monotonic()
    run = _stage(tmp_path, ["hang_with_child", str(pidfile)], timeout=3.0)
    assert time.monotonic() - start < 15
    assert run.child.timed_out
    cat, detail = launch.stage_failure("check", run, 3.0)
    assert cat == V.TIMEOUT and "did not finish within 3 s" in detail
    pid = int(pidfile.read_text())
    for _ in range(50):  # the whole process group got SIGKILL
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        pytest.fail("the grandchild survived the timeout")


def test_segfaulting_worker_is_a_runtime_error(tmp_path):
    run = _stage(tmp_path, ["segfault"])
    cat, detail = launch.stage_failure("check", run, 20.0)
    assert cat == V.RUNTIME_ERROR
    assert "SIGSEGV" in detail


def test_worker_exiting_without_a_result(tmp_path):
    run = _stage(tmp_path, ["exit", "7"])
    cat, detail = launch.stage_failure("check", run, 20.0)
    assert cat == V.RUNTIME_ERROR and "exit code 7" in detail


def test_sandbox_child_abort_is_contained():
    res = run_child([sys.executable, "-m", "xlang.profiler.selftest", "abort"], timeout=20)
    assert res.crashed_by_signal == "SIGABRT"


def _fake_run(result, progress="1.0 trial shape=M=8 trial=0 seed=1: candidate call\n"):
    from xlang.children import ChildResult

    return launch.StageRun(ChildResult(0, "", "", False, 0.1), Report.from_dict(result), progress, 0.1)


def test_stage_failure_categories():
    assert launch.stage_failure("check", _fake_run({"status": "ok"}), 10) is None
    cat, detail = launch.stage_failure("check", _fake_run({"status": "incorrect", "detail": "C[0, 1] got 1 expected 2"}), 10)
    assert cat == V.INCORRECT and "C[0, 1]" in detail
    cat, _ = launch.stage_failure("check", _fake_run({"status": "runtime_error", "detail": "CUDA error"}), 10)
    assert cat == V.RUNTIME_ERROR
    from xlang.children import ChildResult

    dead = launch.StageRun(ChildResult(-11, "", "boom", False, 0.1), None, "1.0 trial x: candidate call\n", 0.1)
    cat, detail = launch.stage_failure("check", dead, 10)
    assert cat == V.RUNTIME_ERROR and "SIGSEGV" in detail and "candidate call" in detail


def test_options_from_dict():
    o = ev.coerce_options({"no_memcheck": True, "ncu": False, "timeout_s": 600, "trials": 5, "unknown": 1})
    assert not o.memcheck and not o.ncu and o.trials == 5 and o.check_timeout_s == 200


# ---- evaluate() on this machine: static stages, and the runtime stages with a fake worker ----------

def test_static_screen_forbidden_call():
    v = ev.evaluate(BAD / "static_matmul.py", "triton", "gemm", "h200")
    assert v.category == V.FORBIDDEN_CALL and "static screen" in v.detail
    assert v.fingerprint["harness_version"]


def test_the_serving_baselines_libraries_are_screened(tmp_path):
    """FlashInfer is attn_decode_paged's peer: a candidate importing it (or DeepGEMM) stops at the screen."""
    for lang, text in (("triton", "import flashinfer\n"), ("triton", "from deep_gemm import fp8_gemm_nt\n"),
                       ("cuda_ptx", "#include <flashinfer/attention/decode.cuh>\n")):
        v = ev.evaluate(text, lang, "attn_decode_paged", "h200")
        assert v.category == V.FORBIDDEN_CALL and "static screen" in v.detail, (lang, text, v.detail)


def test_no_code():
    assert ev.evaluate("   ", "triton", "gemm", "h200").category == V.NO_CODE



def _need_triton():
    pytest.importorskip("triton")
    pytest.importorskip("torch")


@pytest.mark.slow
def test_compile_error(tmp_path):
    _need_triton()
    v = ev.evaluate(BAD / "syntax_error.py", "triton", "gemm", "h200", options={"workdir": tmp_path})
    assert v.category == V.COMPILE_ERROR


# A stand-in for the GPU worker: reports FAKE_STATUS; when ok, waits at the timing gate (if any) first.
FAKE_WORKER = (
    "import json, os, sys, time\n"
    "from xlang.profiler.judge.plan import TimingPlan\n"
    "from xlang.profiler.judge.timing import wait_at_gate\n"
    "spec = json.load(open(sys.argv[1]))\n"
    "status = os.environ['FAKE_STATUS']\n"
    "res = {'status': status, 'detail': 'C[3, 4] got 1 expected 2', 'fingerprint': {'torch': 'fake'},\n"
    "       'isolation': 'fake', 'correctness': {'passed': status == 'ok', 'trials': len(spec['trials']),\n"
    "                                            'shapes': [t[0] for t in spec['trials']], 'kinds': ['normal']}}\n"
    "if status == 'ok' and wait_at_gate(TimingPlan(**spec['timing']), lambda text: None):\n"
    "    res['timing'] = {'speedup': 1.1, 'tflops': 700.0, 'baseline_tflops': 640.0, 'baseline_name': 'cuBLAS',\n"
    "                     'started': time.time(), 'rest_ms': spec['timing'].get('rest_ms')}\n"
    "json.dump(res, open(spec['out'], 'w'))\n"
)


def _gemm_build_on_a_fake_gpu(tmp_path, monkeypatch):
    """The real Triton GEMM built for h200, with evaluate() pointed at a fake H200 and FAKE_WORKER."""
    _need_triton()
    from xlang.archs import get_arch
    from xlang.backend import build_candidate
    from xlang.task import get_task

    gemm = ROOT / "tests" / "kernels" / "triton" / "gemm_tma.py"
    task, arch = get_task("gemm"), get_arch("h200")
    build = build_candidate(gemm.read_text(), "triton", task, arch, task.shape(), workdir=tmp_path / "b")
    assert build.ok, build.error
    fake = tmp_path / "fake_worker.py"
    fake.write_text(FAKE_WORKER)
    monkeypatch.setattr(ev.gpu_mod, "find_gpu", lambda arch: {"index": 0, "name": "Fake H200", "compute_capability": 90})
    monkeypatch.setattr(ev.gpu_mod, "from_nvml", lambda: None)
    monkeypatch.setattr(launch, "judge_command", lambda spec_path: [sys.executable, str(fake), str(spec_path)])
    monkeypatch.setattr(ev, "_observer_library", lambda: (None, "no observer in this test"))
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))  # the per-GPU lock file
    return task, arch, build


@pytest.mark.slow
def test_timing_rest_reaches_the_judge(tmp_path, monkeypatch):
    """EvalOptions.timing_rest_ms is in the judge's spec (the judge sleeps that long before each timed call of every
    side: GPU-only, tests/test_profiler_gpu.py runs a full verdict); 0 when not asked for."""
    task, arch, build = _gemm_build_on_a_fake_gpu(tmp_path, monkeypatch)
    opts = {"memcheck": False, "ncu": False, "extra_env": {"FAKE_STATUS": "ok"}, "seed": 5}
    assert ev.evaluate(build, "triton", task, arch, options={**opts, "timing_rest_ms": 40}).timing["rest_ms"] == 40.0
    assert ev.evaluate(build, "triton", task, arch, options=opts).timing["rest_ms"] == 0.0


@pytest.mark.slow
def test_static_ok_without_gpu_and_fake_worker_categories(tmp_path, monkeypatch):
    """Build the real Triton GEMM; with runtime off it is static_ok; with a fake GPU and a fake worker the
    worker's report becomes the verdict (incorrect / ok with timing), the parent never importing torch."""
    task, arch, build = _gemm_build_on_a_fake_gpu(tmp_path, monkeypatch)
    v = ev.evaluate(build, "triton", task, arch, options={"run": "never"})
    assert v.category == V.STATIC_OK and not v.runtime_ran

    opts = {"memcheck": False, "ncu": False, "extra_env": {"FAKE_STATUS": "incorrect"}, "seed": 11}
    v = ev.evaluate(build, "triton", task, arch, options=opts)
    assert v.category == V.INCORRECT and "C[3, 4]" in v.detail and v.runtime_ran
    assert v.fingerprint["seed"] == 11 and v.fingerprint["torch"] == "fake"
    opts["extra_env"] = {"FAKE_STATUS": "ok"}
    v = ev.evaluate(build, "triton", task, arch, options=opts)
    assert v.category == V.OK and v.speedup == 1.1
    assert "not verified" in v.detail
    json.dumps(v.to_dict())


def test_one_evaluation_at_a_time_per_gpu(tmp_path, monkeypatch):
    """Concurrent samples (threads) and runs (processes) share a GPU only one evaluation at a time."""
    import threading
    import time

    from xlang.profiler.gpu import Exclusive

    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    events = []

    def hold(n):
        lock = Exclusive({"index": 7}).acquire()
        events.append(("start", n))
        time.sleep(0.2)
        events.append(("end", n))
        lock.release()

    threads = [threading.Thread(target=hold, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # Never two holders at once: every start is followed by its own end.
    assert all(events[i][0] == "start" and events[i + 1] == ("end", events[i][1]) for i in range(0, 6, 2))


def test_cancelled_child_is_killed_at_once():
    import threading

    cancel = threading.Event()
    threading.Timer(0.5, cancel.set).start()
    start = time.monotonic()
    res = run_child([sys.executable, "-m", "xlang.profiler.selftest", "hang"], timeout=60, cancel=cancel)
    assert res.cancelled and not res.timed_out and res.returncode is None
    assert time.monotonic() - start < 10


def _gate_child(tmp_path, gate, before, after):
    cmd = [sys.executable, "-m", "xlang.profiler.selftest", "gate", str(gate.path), str(gate.waiting),
           str(before), str(after)]
    start = time.monotonic()
    return run_child(cmd, timeout=999, deadline=gate.deadline(start))


def test_timing_gate_stops_the_check_workers_clock_while_it_waits(tmp_path):
    """The check worker has 3 s of its own; it waits 5 s at the gate and is not killed for that."""
    import threading

    gate = timing.TimingGate(tmp_path, limit_s=3.0)
    threading.Timer(5.0, gate.open, kwargs={"go": True}).start()
    res = _gate_child(tmp_path, gate, before=0.5, after=0.5)
    assert not res.timed_out and res.returncode == 0 and res.stdout.strip() == "go"
    assert res.seconds > 5.0


def test_timing_gate_still_kills_a_worker_that_hangs_before_it(tmp_path):
    gate = timing.TimingGate(tmp_path, limit_s=1.5)
    res = _gate_child(tmp_path, gate, before=30, after=0)
    assert res.timed_out and res.seconds < 10


def test_timing_gate_kills_a_worker_that_hangs_after_it(tmp_path):
    """After the gate opens, the remaining own time still applies (timing a kernel that never ends)."""
    gate = timing.TimingGate(tmp_path, limit_s=2.0)
    gate.open(go=False)
    res = _gate_child(tmp_path, gate, before=0.2, after=30)
    assert res.timed_out and res.stdout.strip() == "skip" and res.seconds < 10


@pytest.mark.slow
def test_memcheck_and_ncu_run_beside_the_check_and_timing_waits_for_them(tmp_path, monkeypatch):
    """The orchestration of a full verdict with a fake GPU: the check worker's correctness runs while memcheck
    and ncu run; its timing starts only after memcheck is done and Nsight Compute's profile is taken ('go'),
    is skipped when a failure is known by then ('skip'), and a failed check stops memcheck and ncu at once.
    Reading the ncu report needs no GPU: timing may overlap it, and a failure found there still decides."""
    task, arch, build = _gemm_build_on_a_fake_gpu(tmp_path, monkeypatch)
    seen = {}

    def fake_side(name, seconds, failure, reading_s=0.0):
        def stage(spec, workdir, options, gpu, *rest, gpu_free=None, check_done=None):
            cancel = rest[-1]
            cancelled = cancel.wait(seconds)
            seen[name] = {"ended": time.time(), "cancelled": cancelled}
            if gpu_free is not None and not cancelled:
                gpu_free.set()  # the profile is taken; its reading follows
                seen[name]["profiled"] = time.time()
                time.sleep(reading_s)
                seen[name]["ended"] = time.time()
            return {"ran": not cancelled, "families": {"wgmma": 1.0, "tma": 1.0}}, failure
        return stage

    def run(status, mem_failure=None, ncu_seconds=1.5, ncu_failure=None, reading_s=0.0):
        seen.clear()
        monkeypatch.setattr(memcheck, "memcheck_stage", fake_side("memcheck", 0.5, mem_failure))
        monkeypatch.setattr(ncu, "ncu_stage", fake_side("ncu", ncu_seconds, ncu_failure, reading_s))
        opts = {"extra_env": {"FAKE_STATUS": status}, "seed": 5}
        return ev.evaluate(build, "triton", task, arch, options=opts)

    v = run("ok")
    assert v.category == V.OK, v.detail
    assert v.timing["started"] >= max(seen["memcheck"]["ended"], seen["ncu"]["profiled"])  # waited for both
    v = run("ok", mem_failure=(V.MEMORY_ERROR, "3 errors"))
    assert v.category == V.MEMORY_ERROR and v.timing is None  # told to skip timing
    # The report's reading (4 s) fails the candidate after timing began: timing did not wait, the failure stands.
    v = run("ok", ncu_failure=(V.NOT_EXECUTED, "wgmma executed by 0 threads"), reading_s=4.0)
    assert v.category == V.NOT_EXECUTED and "0 threads" in v.detail
    assert seen["ncu"]["profiled"] <= v.timing["started"] < seen["ncu"]["ended"]
    start = time.monotonic()
    v = run("incorrect", ncu_seconds=60)
    assert v.category == V.INCORRECT and "C[3, 4]" in v.detail
    assert seen["ncu"]["cancelled"] and time.monotonic() - start < 30


def test_ncu_that_profiled_no_kernel_in_the_calling_threads_range_is_not_executed(tmp_path, monkeypatch):
    """A call that ran and passed while its kernels went to another thread: Nsight Compute's NVTX range (per
    thread) holds no kernel, it writes no report and says so. That is not_executed with the reason, not a
    runtime error with an empty explanation (H200, 2026-11-30: gemm_side_thread.py)."""
    from xlang.children import ChildResult

    calls = []

    def fake_run_stage(spec, workdir, stage, timeout, **kw):
        calls.append(stage)
        # ncu's own lines reach the judge on the pipe it shares with the runner it started (judge.run_tool_stage)
        tool_out = "==PROF== Disconnected from process 1\n==WARNING== No kernels were profiled.\n"
        return launch.StageRun(ChildResult(0, "", "", False, 1.0), Report("ok", runner_stdout=tool_out), "", 1.0,
                               tmp_path / stage)  # the run's folder: no report in it

    monkeypatch.setattr(ncu, "find_tool", lambda name: "/usr/bin/true")
    monkeypatch.setattr(ncu, "run_stage", fake_run_stage)
    spec = plan(mode="ncu", trials=[[{"M": 64, "N": 64, "K": 64}, "normal", 1]])
    from xlang.archs import get_arch
    from xlang.task import get_task

    info, failure = ncu.ncu_stage(spec, tmp_path, ev.EvalOptions(), {}, get_arch("h100"), ("wgmma", "tma"),
                                 get_task("gemm"))
    assert failure[0] == V.NOT_EXECUTED and "calling thread" in failure[1]
    assert [a["kernels"] for a in info["attempts"]] == [0] * len(calls)
    # The same warning after an error of ncu's own is the tool's failure, not the candidate's.
    assert ncu._ncu_saw_no_kernel("==ERROR== ERR_NVGPUCTRPERM\n==WARNING== No kernels were profiled.\n") is False


@pytest.mark.slow
def test_an_answer_computed_off_the_gpu_is_never_correct_and_no_ncu_says_it_was_not_verified(tmp_path, monkeypatch):
    """Issue 40 through evaluate() with a fake GPU: the check passed (outputs matched, timed), Nsight Compute found
    the candidate's kernels far below the task's FLOPs: host_compute, correct false, not timed. With
    --no-ncu the verdict says the GPU computation was not verified instead of passing it silently."""
    task, arch, build = _gemm_build_on_a_fake_gpu(tmp_path, monkeypatch)

    def fake_ncu(spec, workdir, options, gpu, *rest, gpu_free=None, check_done=None):
        if gpu_free is not None:
            gpu_free.set()
        info = {"ran": True, "families": {"wgmma": 1.0, "tma": 1.0},
                "gpu_compute": {"status": "off_gpu", "gpu_to_task": 1e-6, "min_ratio": 0.5, "detail": "tiny"}}
        return info, (V.HOST_COMPUTE, "the candidate's own kernels executed 1e-06x the task's FLOPs")

    monkeypatch.setattr(memcheck, "memcheck_stage", lambda *a, **k: ({"ran": True, "errors": 0}, None))
    monkeypatch.setattr(ncu, "ncu_stage", fake_ncu)
    v = ev.evaluate(build, "triton", task, arch, options={"extra_env": {"FAKE_STATUS": "ok"}, "seed": 5})
    assert v.category == V.HOST_COMPUTE and "1e-06x" in v.detail, v.detail
    assert v.correct is False and v.executed_ok is False and v.timing is None  # known before the timing: skipped
    sc = V.scores(v.to_dict())
    assert sc["correct"] is False and sc["speedup"] is None and not sc["correct_with_target"]
    v = ev.evaluate(build, "triton", task, arch, options={"extra_env": {"FAKE_STATUS": "ok"}, "seed": 5,
                                                          "no_ncu": True})
    assert v.category == V.OK and "GPU computation not verified" in v.detail, v.detail
    assert "nor that the GPU computed the answer" in v.executed["note"]
