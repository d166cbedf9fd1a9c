"""The profiler's orchestration on a CPU-only machine: crash and hang containment of worker processes,
categorisation of what a worker reports, and the static stages of evaluate()."""

import json
import os
import sys
import time
from pathlib import Path

import pytest

from xlang import verdict as V
from xlang.profiler import evaluate as ev
from xlang.sandbox import run_child

ROOT = Path(__file__).resolve().parent.parent
BAD = ROOT / "tests" / "kernels" / "bad"


def _stage(tmp_path, args, timeout=20.0):
    cmd = [sys.executable, "-m", "xlang.profiler.selftest", *args]
    return ev.run_stage({"mode": "x"}, tmp_path, "check", timeout, child_cmd=cmd)


def test_hanging_worker_is_killed_with_its_children(tmp_path):
    pidfile = tmp_path / "grandchild.pid"
    start = time.monotonic()
    run = _stage(tmp_path, ["hang_with_child", str(pidfile)], timeout=3.0)
    assert time.monotonic() - start < 15
    assert run.child.timed_out
    cat, detail = ev.judge_stage("check", run, 3.0)
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
    cat, detail = ev.judge_stage("check", run, 20.0)
    assert cat == V.RUNTIME_ERROR
    assert "SIGSEGV" in detail


def test_worker_exiting_without_a_result(tmp_path):
    run = _stage(tmp_path, ["exit", "7"])
    cat, detail = ev.judge_stage("check", run, 20.0)
    assert cat == V.RUNTIME_ERROR and "exit code 7" in detail


def test_sandbox_child_abort_is_contained():
    res = run_child([sys.executable, "-m", "xlang.profiler.selftest", "abort"], timeout=20)
    assert res.crashed_by_signal == "SIGABRT"


def _fake_run(result, progress="1.0 trial shape=M=8 trial=0 seed=1: candidate call\n"):
    from xlang.sandbox import ChildResult

    return ev.StageRun(ChildResult(0, "", "", False, 0.1), result, progress, 0.1)


def test_judge_stage_categories():
    assert ev.judge_stage("check", _fake_run({"status": "ok"}), 10) is None
    cat, detail = ev.judge_stage("check", _fake_run({"status": "incorrect", "detail": "C[0, 1] got 1 expected 2"}), 10)
    assert cat == V.INCORRECT and "C[0, 1]" in detail
    cat, _ = ev.judge_stage("check", _fake_run({"status": "runtime_error", "detail": "CUDA error"}), 10)
    assert cat == V.RUNTIME_ERROR
    from xlang.sandbox import ChildResult

    dead = ev.StageRun(ChildResult(-11, "", "boom", False, 0.1), None, "1.0 trial x: candidate call\n", 0.1)
    cat, detail = ev.judge_stage("check", dead, 10)
    assert cat == V.RUNTIME_ERROR and "SIGSEGV" in detail and "candidate call" in detail


def test_options_from_dict():
    o = ev.coerce_options({"no_memcheck": True, "ncu": False, "timeout_s": 600, "trials": 5, "unknown": 1})
    assert not o.memcheck and not o.ncu and o.trials == 5 and o.check_timeout_s == 200


# ---- evaluate() on this machine: static stages, and the runtime stages with a fake worker ----------

def test_static_screen_forbidden_call():
    v = ev.evaluate(BAD / "static_matmul.py", "triton", "gemm", "h200")
    assert v.category == V.FORBIDDEN_CALL and "static screen" in v.detail
    assert v.fingerprint["harness_version"]


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


@pytest.mark.slow
def test_static_ok_without_gpu_and_fake_worker_categories(tmp_path, monkeypatch):
    """Build the real Triton GEMM; with runtime off it is static_ok; with a fake GPU and a fake worker the
    worker's report becomes the verdict (incorrect / ok with timing), the parent never importing torch."""
    _need_triton()
    from xlang.archs import get_arch
    from xlang.backend import build_candidate
    from xlang.task import get_task

    gemm = ROOT / "tests" / "kernels" / "triton" / "gemm_tma.py"
    task, arch = get_task("gemm"), get_arch("h200")
    build = build_candidate(gemm.read_text(), "triton", task, arch, task.shape(), workdir=tmp_path / "b")
    assert build.ok, build.error
    v = ev.evaluate(build, "triton", task, arch, options={"run": "never"})
    assert v.category == V.STATIC_OK and not v.runtime_ran

    fake = tmp_path / "fake_worker.py"
    fake.write_text(
        "import json, sys, os\n"
        "spec = json.load(open(sys.argv[1]))\n"
        "status = os.environ['FAKE_STATUS']\n"
        "res = {'status': status, 'detail': 'C[3, 4] got 1 expected 2', 'fingerprint': {'torch': 'fake'},\n"
        "       'correctness': {'passed': status == 'ok', 'shapes': spec['shapes'], 'trials_per_shape': 3, 'trials': []}}\n"
        "if status == 'ok':\n"
        "    res['timing'] = {'speedup': 1.1, 'tflops': 700.0, 'baseline_tflops': 640.0, 'baseline_name': 'cuBLAS'}\n"
        "json.dump(res, open(spec['out'], 'w'))\n"
    )
    monkeypatch.setattr(ev.gpu_mod, "find_gpu", lambda arch: {"index": 0, "name": "Fake H200", "compute_capability": 90})
    monkeypatch.setattr(ev.gpu_mod, "_from_nvml", lambda: None)
    monkeypatch.setattr(ev, "worker_command", lambda spec_path: [sys.executable, str(fake), str(spec_path)])
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
