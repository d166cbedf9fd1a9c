"""Scale-out on Ray (xlang.scaleout), on this CPU machine: one local Ray declaring two fake GPUs and
{"sm_90a": 2}, verdicts from tests/ray_fake_evaluator.py (XLANG_RAY_EVALUATOR). Scheduling across both GPUs
(never two verdicts on one GPU at a time), per-architecture routing (a b200 verdict is never placed on the
sm_90a-only node), a killed worker process whose verdict is retried, `xlang compare --ray` / `xlang run --ray`
in process, and a compare driver (joining the same cluster by address) killed with SIGKILL then resumed to the
same table."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from xlang import scaleout

ROOT = Path(__file__).resolve().parent.parent
TESTS = Path(__file__).resolve().parent
FAKE_ENV = {"XLANG_RAY_EVALUATOR": "ray_fake_evaluator:evaluate", "XLANG_FAKE_EVAL_SLEEP": "0.5"}


# ------------------------------------------------------------------------------------------- no Ray needed


def test_argv_specs_and_declared_resources(monkeypatch):
    assert scaleout.normalise_argv(["compare", "--ray"]) == ["compare", "--ray=local"]
    assert scaleout.normalise_argv(["compare", "--ray", "--arch", "h100"]) == ["compare", "--ray=local", "--arch",
                                                                              "h100"]
    assert scaleout.normalise_argv(["run", "--ray", "10.0.0.1:6379"]) == ["run", "--ray", "10.0.0.1:6379"]
    assert scaleout.profiler_spec("local") == "ray" and scaleout.profiler_spec("h:6379") == "ray:h:6379"
    assert scaleout.address_of("ray") == "local" and scaleout.address_of("ray:ray://h:10001") == "ray://h:10001"
    gpus = [{"index": 0, "name": "H100", "compute_capability": 90}, {"index": 1, "name": "H200", "compute_capability": 90},
            {"index": 2, "name": "B200", "compute_capability": 100}]
    assert scaleout.local_resources(gpus) == {"num_gpus": 3, "resources": {"sm_90a": 2, "sm_100a": 1}}
    # A Ray GPU task sees only the GPU Ray gave it (NVML would list them all).
    from xlang.profiler import gpu as gpu_mod

    monkeypatch.setenv("XLANG_FAKE_GPUS", json.dumps(gpus))
    monkeypatch.setenv("XLANG_GPUS", "1")
    assert [g["index"] for g in gpu_mod.gpus()] == [1]
    monkeypatch.delenv("XLANG_GPUS")
    assert len(gpu_mod.gpus()) == 3


def _join(address: str, tmp_path) -> tuple[int, str, float]:
    """`xlang compare --ray ADDRESS` in a fresh process (Ray's join limits apply before its first import)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("XLANG_STORE", None)
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "xlang", "compare", "--arch", "h100", "--langs", "triton",
                           "--tasks", "gemm", "--ray", address], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120)
    return proc.returncode, proc.stderr, time.monotonic() - start


@pytest.mark.slow
@pytest.mark.parametrize("scheme", ["", "ray://"])
def test_a_dead_or_foreign_address_is_one_line_within_seconds(tmp_path, scheme):
    """Nothing listening, or a listening port that is not Ray's (an HTTP server): exit 2 and one line, in well
    under 30 s (Ray's own defaults retried a dead address for more than ten minutes), nothing stored."""
    pytest.importorskip("ray")
    import http.server

    with socket.socket() as s:  # a port that was free a moment ago: nothing listens on it
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
    code, err, took = _join(f"{scheme}127.0.0.1:{dead}", tmp_path)
    assert code == 2 and took < 30, (code, took, err[-2000:])
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --ray") and "no Ray cluster answers" in lines[0], err
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        code, err, took = _join(f"{scheme}127.0.0.1:{server.server_address[1]}", tmp_path)
    finally:
        server.shutdown()
    assert code == 2 and took < 30, (code, took, err[-2000:])
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --ray") and "cannot join Ray" in lines[0], err
    assert not (tmp_path / "xlang-runs").exists()


def test_the_ray_extra_carries_what_ray_client_needs():
    """`--ray ray://HEAD:10001` needs Ray Client's packages (grpcio): xlang[ray] is ray[client], pinned."""
    import tomllib

    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["ray"]
    assert extra == [f"ray[client]=={scaleout.RAY_PIN}"]
    pytest.importorskip("ray")
    import importlib.util

    assert importlib.util.find_spec("grpc") is not None, "ray[client] is not installed here: pip install 'xlang[ray]'"


def test_a_packed_build_moves_to_another_folder(tmp_path):
    from xlang.backend import BuildResult, KernelImage

    old = tmp_path / "node-a" / "t1"
    old.mkdir(parents=True)
    (old / "k.cubin").write_bytes(b"\x7fELF cubin")
    (old / "candidate.cu").write_text("// src")
    build = BuildResult(True, "cuda_ptx", "gemm", "h100", {}, str(old), load_path=str(old / "k.so"),
                        kernels=[KernelImage("k", str(old / "k.cubin"))])
    moved = scaleout.unpack(scaleout.pack(build), build, tmp_path / "node-b" / "build")
    assert moved.workdir == str((tmp_path / "node-b" / "build").resolve())
    assert moved.kernels[0].cubin == str(Path(moved.workdir) / "k.cubin")
    assert Path(moved.kernels[0].cubin).read_bytes() == b"\x7fELF cubin"
    assert moved.load_path == str(Path(moved.workdir) / "k.so")


# ------------------------------------------------------------------------------------------ on a local Ray


@pytest.fixture(scope="module")
def ray_local():
    ray = pytest.importorskip("ray")
    saved = {k: os.environ.get(k) for k in [*FAKE_ENV, "PYTHONPATH"]}
    os.environ.update(FAKE_ENV)
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(TESTS), str(ROOT), saved["PYTHONPATH"]) if p)
    ray.init(num_cpus=2, num_gpus=2, resources={"sm_90a": 2}, include_dashboard=False, log_to_driver=False)
    try:
        scaleout.connect("local")  # joins the initialised Ray
        _warm_up()
        yield ray
    finally:
        ray.shutdown()
        scaleout._state.clear()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _warm_up():
    """Two GPU workers started before the timed tests (a worker process's first start takes seconds here)."""
    from xlang.archs import get_arch
    from xlang.task import get_task

    runtime = scaleout.ray_runtime("ray", get_arch("h100"))
    threads = [threading.Thread(target=runtime.evaluate, args=("src", None, "cuda_ptx", get_task("gemm"),
                                                                get_arch("h100"), {}, {"sleep": 0.5}))
               for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    scaleout.MONITOR.done.clear()


def _gpu_and_times(verdict: dict) -> tuple[str, float, float, int]:
    m = re.search(r"pid=(\d+) start=([\d.]+) end=([\d.]+) gpu=(\S+)", verdict["detail"])
    return m.group(4), float(m.group(2)), float(m.group(3)), int(m.group(1))


def test_verdicts_spread_over_both_gpus_one_at_a_time_each(ray_local):
    from xlang.archs import get_arch
    from xlang.task import get_task

    h100, gemm = get_arch("h100"), get_task("gemm")
    runtime = scaleout.ray_runtime("ray", h100)
    assert runtime.available and runtime.build is not None
    results: list = [None] * 4

    def one(i):
        results[i] = runtime.evaluate("src", None, "cuda_ptx", gemm, h100, {}, {"sleep": 1.5})

    threads = [threading.Thread(target=one, args=(i,)) for i in range(4)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    snap = {}
    while time.monotonic() - t0 < 1.4:  # two on the GPUs, two queued: the progress display says so
        scaleout.MONITOR.poll()
        snap = scaleout.MONITOR.snapshot()
        if len(snap["evaluating"]) == 2:
            break
        time.sleep(0.05)
    for t in threads:
        t.join(60)
    wall = time.monotonic() - t0
    assert len(snap["evaluating"]) == 2 and snap["queued"] == 2, snap
    lines = scaleout.progress_lines(snap, scaleout.gpu_slots())
    assert lines[0].startswith("queued 2") and sum("evaluating gemm" in line for line in lines[1:]) == 2, lines
    runs = [_gpu_and_times(v) for v in results]
    assert all(v["category"] == "ok" for v in results)
    assert {g for g, *_ in runs} == {"0", "1"}, runs  # both fake GPUs used
    for gpu in ("0", "1"):  # one verdict per GPU at a time
        spans = sorted((s, e) for g, s, e, _ in runs if g == gpu)
        assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:])), spans
    assert wall < 4 * 1.5, wall  # two at a time, not one after the other


def test_a_b200_verdict_is_never_placed_on_the_sm90a_node(ray_local):
    from xlang.archs import get_arch

    ray = ray_local
    b200 = scaleout.ray_runtime("ray", get_arch("b200"))
    assert not b200.available and b200.note == "not run (no sm_100a GPU in the Ray cluster)"
    assert b200.build is not None  # its builds still run as Ray CPU tasks
    # Submitted anyway, the verdict task waits for a node declaring sm_100a: it never starts on this one.
    verdict = scaleout._remotes()["verdict"]
    from xlang.profiler.pipeline import Job

    rest = (FAKE_ENV["XLANG_RAY_EVALUATOR"], scaleout._state["driver_node"], None)
    job = Job("gemm", "cuda_ptx", "b200", (), ())
    stuck = verdict.options(resources={"sm_100a": 1}).remote("j-b200", "src", None, None, job.to_spec(), *rest)
    placed = verdict.options(resources={"sm_90a": 1}).remote("j-h100", "src", None, None,
                                                             Job("gemm", "cuda_ptx", "h100", (), ()).to_spec(), *rest)
    ready, _ = ray.wait([stuck, placed], num_returns=2, timeout=4)
    assert ready == [placed]
    ray.cancel(stuck, force=True)


def test_a_killed_worker_process_is_retried(ray_local, tmp_path):
    from xlang.archs import get_arch
    from xlang.task import get_task

    h100 = get_arch("h100")
    marker = tmp_path / "killed"
    runtime = scaleout.ray_runtime("ray", h100)
    verdict = runtime.evaluate("src", None, "cuda_ptx", get_task("gemm"), h100, {}, {"kill_once": str(marker)})
    assert verdict["category"] == "ok"
    killed_pid = int(marker.read_text())  # the first attempt's worker SIGKILLed itself
    assert _gpu_and_times(verdict)[3] != killed_pid


def test_compare_and_run_in_process(ray_local, tmp_path, xlang):
    from rich.console import Console

    from xlang.compare import CompareConfig, run_compare

    cfg = CompareConfig(archs=["h100", "b200"], langs=["cuda_ptx"], tasks=["gemm"], store=str(tmp_path / "r.db"),
                        ray="local")
    out = tmp_path / "out.txt"
    result = run_compare(cfg, Console(file=open(out, "w"), width=200), progress=False)
    stats = result.stats.set_index("arch")
    h100, b200 = stats.loc["h100"], stats.loc["b200"]
    assert h100["runtime_ran"] and h100["correctness_rate"] == 1.0 and h100["best_speedup"] == 1.25
    assert not b200["runtime_ran"]
    assert b200["missing"] or b200["runtime_note"] == "not run (no sm_100a GPU in the Ray cluster)"
    text = out.read_text()
    assert "runtime: Ray" in text and "sm_90a ×2" in text and "Ray verdicts per GPU" in text
    rows = sqlite3.connect(cfg.store).execute("SELECT profiler FROM runs").fetchall()
    assert rows == [("ray",), ("ray",)]

    code, out, err = xlang("run", "--task", "gemm", "--lang", "cuda_ptx", "--arch", "h100", "--model", "reference",
                           "--ray", "--store", tmp_path / "run.db")
    assert code == 0, err
    assert "ok" in out and "speedup 1.25x" in out
    code, _, err = xlang("run", "--task", "gemm", "--lang", "cuda_ptx", "--arch", "h100", "--model", "reference",
                         "--ray", "--profiler", "none", "--store", tmp_path / "run2.db")
    assert code == 2 and "drop --profiler none" in err


def test_rejudge_on_ray(ray_local, tmp_path):
    """xlang rejudge runs through compare's Ray path: a static store's candidates judged again with runtime on the
    cluster's (fake) sm_90a GPUs, into a new store; the sm_100a one stays static."""
    from rich.console import Console

    from xlang.compare import CompareConfig, run_compare
    from xlang.rejudge import run_rejudge

    static = CompareConfig(archs=["h100", "b200"], langs=["cuda_ptx"], tasks=["gemm"], store=str(tmp_path / "a.db"),
                           profiler="none")
    run_compare(static, Console(file=open(tmp_path / "a.txt", "w"), width=200), progress=False)
    out = tmp_path / "b.txt"
    result = run_rejudge([static.store], str(tmp_path / "b.db"), ray="local",
                         console=Console(file=open(out, "w"), width=300), progress=False)
    stats = result.stats.set_index("arch")
    assert stats.loc["h100", "runtime_ran"] and stats.loc["h100", "correctness_rate"] == 1.0
    assert not stats.loc["b200", "runtime_ran"]
    assert "runtime: Ray" in out.read_text() and "Ray verdicts per GPU" in out.read_text()
    from xlang.diff import diff

    d = diff(static.store, tmp_path / "b.db").candidates.set_index("arch")
    assert (d.loc["h100", "old"], d.loc["h100", "new"]) == ("static_ok", "ok")
    assert d.loc["b200", "old"] == d.loc["b200", "new"] == "static_ok"


def _xlang(args, cwd, env):
    return subprocess.Popen([sys.executable, "-m", "xlang", *args], cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


def _rows(db: Path, sql: str) -> list[tuple]:
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


@pytest.mark.slow
def test_compare_driver_killed_then_resumed_gives_the_same_table(ray_local, tmp_path):
    """Drivers joining the cluster by address: one uninterrupted; one SIGKILLed once some cells are stored and
    others not, then run again: the same table, nothing finished done again, no half-written turn."""
    address = ray_local.get_runtime_context().gcs_address
    env = {**os.environ, "PYTHONPATH": f"{TESTS}{os.pathsep}{ROOT}", "COLUMNS": "200"}
    env.pop("XLANG_STORE", None)
    args = ["compare", "--arch", "h100,b200", "--langs", "cuda_ptx", "--tasks", "gemm,attn_fwd",
            "--ray", address]

    def table(out: str) -> list[dict]:
        return sorted(json.loads(out)["table"], key=lambda r: (r["task"], r["arch"], r["lang"]))

    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    proc = _xlang(args + ["--json"], a, env)
    out_a, err_a = proc.communicate(timeout=240)
    assert proc.returncode == 0, err_a[-3000:]
    store_b = b / "xlang-runs" / "results.db"
    proc = _xlang(args, b, env)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if _rows(store_b, "SELECT count(*) FROM runs WHERE status = 'done'")[0][0]:
                break
        except sqlite3.Error:
            pass
        time.sleep(0.02)
    assert proc.poll() is None, "the compare finished before it could be killed"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate()
    before = _rows(store_b, "SELECT run_id, sample_idx, status, started_at, finished_at FROM samples "
                            "WHERE status IN ('done', 'missing')")
    assert before and _rows(store_b, "SELECT count(*) FROM runs WHERE status != 'done'")[0][0] >= 1
    # Every stored turn is whole: a verdict and a category, never one without the other.
    assert _rows(store_b, "SELECT count(*) FROM turns WHERE category IS NULL OR verdict_json IS NULL") == [(0,)]
    proc = _xlang(args + ["--json"], b, env)
    out_b, err_b = proc.communicate(timeout=240)
    assert proc.returncode == 0, err_b[-3000:]
    assert "already stored" in err_b
    assert table(out_b) == table(out_a)
    after = {r[:2]: r for r in _rows(store_b, "SELECT run_id, sample_idx, status, started_at, finished_at "
                                              "FROM samples")}
    for row in before:
        assert after[row[:2]] == row
    assert _rows(store_b, "SELECT count(*) FROM runs") == [(4,)]
    assert _rows(store_b, "SELECT count(*) FROM runs WHERE status != 'done'") == [(0,)]
    assert {r["arch"]: r["runtime_ran"] for r in table(out_b)} == {"h100": True, "b200": False}
