"""The remote GPU worker (xlang.remote): HTTP API, token, queue (one job per GPU at a time), a process per job,
crash and hang containment, and `xlang compare --profiler URL` end to end. No GPU: the evaluator is a stand-in
(tests/remote_fake_evaluator.py) and the GPUs are declared."""

from __future__ import annotations

import json
import re
import threading
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from xlang.errors import XlangError
from xlang.remote import RemoteProfiler, Worker, make_server

TESTS = Path(__file__).resolve().parent
H200 = {"index": 0, "name": "Fake H200", "compute_capability": 90}


@pytest.fixture
def worker_url(monkeypatch, tmp_path):
    servers = []

    def start(gpus=(H200,), token=None, slack_s=60.0):
        monkeypatch.setenv("PYTHONPATH", str(TESTS))
        worker = Worker(gpus=list(gpus), evaluator="remote_fake_evaluator:evaluate", workdir=tmp_path / "jobs",
                        slack_s=slack_s)
        server, worker = make_server("127.0.0.1", 0, token, worker)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append((server, worker))
        return f"http://127.0.0.1:{server.server_address[1]}"

    yield start
    for server, worker in servers:
        worker.stop()
        server.shutdown()
        server.server_close()


def _times(verdict) -> tuple[float, float]:
    m = re.search(r"start=([\d.]+) end=([\d.]+)", verdict.detail)
    return float(m.group(1)), float(m.group(2))


def test_health_evaluate_and_one_job_per_gpu(worker_url):
    url = worker_url()
    client = RemoteProfiler(url)
    health = client.health()
    assert health["api"] == "xlang-worker/1"
    assert health["archs"] == ["h100", "h200"]  # sm_90 runs both; no sm_100a device
    from xlang.archs import get_arch

    assert client.supports(get_arch("h100")) and not client.supports(get_arch("b200"))

    # Two jobs on one GPU: queued, and run one after the other, each in its own process.
    ids = [client.submit("print('ok')", "triton", "gemm", "h100", None, {"sleep": 0.4}) for _ in range(2)]
    verdicts = [client.wait(i, poll_s=5) for i in ids]
    assert [v.category for v in verdicts] == ["ok", "ok"]
    assert verdicts[0].runtime_ran and verdicts[0].speedup == 1.25
    (s0, e0), (s1, e1) = _times(verdicts[0]), _times(verdicts[1])
    assert e0 <= s1 or e1 <= s0, "jobs on one GPU overlapped"
    pids = {re.search(r"pid=(\d+)", v.detail).group(1) for v in verdicts}
    assert len(pids) == 2
    assert "gpu=0" in verdicts[0].detail


def test_crash_and_hang_are_contained(worker_url):
    client = RemoteProfiler(worker_url(slack_s=1.0))
    crashed = client.evaluate("CRASH", "cuda_ptx", "gemm", "h100", None, {})
    assert crashed.category == "runtime_error" and "code 3" in crashed.detail
    hung = client.evaluate("HANG", "cuda_ptx", "gemm", "h100", None, {"timeout_s": 0.5})
    assert hung.category == "timeout"
    # The GPU is healthy for the next job.
    assert client.evaluate("fine", "cuda_ptx", "gemm", "h100", None, {}).category == "ok"


def test_token_and_binding_rules(worker_url):
    url = worker_url(token="s3cret")
    with pytest.raises(XlangError, match="401"):
        RemoteProfiler(url, token="").health()
    with pytest.raises(XlangError, match="401"):
        RemoteProfiler(url, token="wrong").health()
    assert RemoteProfiler(url, token="s3cret").health()["gpus"][0]["name"] == "Fake H200"
    # Beyond loopback a token is required (nothing is bound: the check comes first).
    with pytest.raises(XlangError, match="needs a token"):
        make_server("0.0.0.0", 0, None, worker=object())


def test_bad_requests(worker_url):
    url = worker_url()
    client = RemoteProfiler(url)
    with pytest.raises(XlangError, match="422.*no sm_100a device"):
        client.submit("x", "triton", "gemm", "b200")
    with pytest.raises(XlangError, match="400.*unknown language"):
        client.submit("x", "fortran", "gemm", "h100")
    with pytest.raises(XlangError, match="404"):
        client.wait("nope", poll_s=0.1)
    req = urllib.request.Request(url + "/v1/jobs", data=b"[1]", method="POST")
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=10)
    assert e.value.code == 400 and "object" in json.loads(e.value.read())["error"]
    with pytest.raises(XlangError, match="unreachable"):
        RemoteProfiler("http://127.0.0.1:9").health()


@pytest.mark.slow
def test_compare_through_a_worker(worker_url, tmp_path):
    """`xlang compare --profiler URL`: Hopper runtime through the worker, Blackwell static with the reason."""
    from rich.console import Console

    from xlang.compare import CompareConfig, run_compare

    url = worker_url()
    cfg = CompareConfig(archs=["h100", "b200"], langs=["cuda_ptx"], tasks=["gemm"], store=str(tmp_path / "r.db"),
                        profiler=url)
    result = run_compare(cfg, Console(file=open(tmp_path / "out.txt", "w"), width=200), progress=False)
    stats = result.stats.set_index("arch")
    h100 = stats.loc["h100"]
    assert h100["runtime_ran"] and h100["correctness_rate"] == 1.0 and h100["correct_with_arch_rate"] == 1.0
    assert h100["best_speedup"] == 1.25 and h100["n_speedup"] == 1
    b200 = stats.loc["b200"]
    assert not b200["runtime_ran"]
    assert b200["missing"] or b200["runtime_note"].startswith("not run (no sm_100a device at http://127.0.0.1")
