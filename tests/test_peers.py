"""Peers (issue 14, item 3): public kernels (FA4, quack) timed beside the vendor baseline. On the CPU: the absent
path (a reason, no process), the runner's peer entry on CPU tensors, the judge's peer records and their
arithmetic, the verdict's scores, the report's column and `xlang eval`'s lines. Timing a real peer needs a GPU
and its wheels (not run here)."""

from __future__ import annotations

import dataclasses
import socket
import threading
import time

import pytest
from plans import state

from xlang import verdict as V
from xlang.profiler import evaluate as ev
from xlang.profiler import runner
from xlang.profiler.judge import peers as judge_peers
from xlang.profiler.judge import timing
from xlang.profiler.stages import launch
from xlang.profiler.stages import peers as stage_peers
from xlang.task import Peer, get_task

NOT_INSTALLED = "flash-attn-4 (flash_attn.cute) not installed"


def _fake_peer(name="fake", modules=("json",), call=None, display=None):
    return Peer(name=name, display=display or name.upper(), distributions=(f"{name}-wheel",), modules=modules,
                call=call or (lambda inputs, shape: (lambda: None)))


def _with_peers(monkeypatch, task_name, *peers):
    """get_task(task_name) answers the real task with these peers instead of its own."""
    import xlang.task

    real = xlang.task.get_task
    task = dataclasses.replace(real(task_name), peers=tuple(peers))
    monkeypatch.setattr(xlang.task, "get_task", lambda name: task if name == task_name else real(name))
    return task


# ---- the tasks name their peers; absent ones cost nothing ---------------------------------------------------

def test_tasks_name_fa4_and_quack():
    for name in ("attn_fwd", "attn_fwd_causal", "attn_bwd", "attn_bwd_causal"):
        (peer,) = get_task(name).peers
        assert (peer.name, peer.modules, peer.distributions) == ("fa4", ("flash_attn.cute",), ("flash-attn-4",))
    (peer,) = get_task("gemm").peers
    assert peer.name == "quack" and peer.distributions == ("quack-kernels",)
    assert get_task("gemm").peer("quack") is peer
    with pytest.raises(Exception, match="no peer 'nope'"):
        get_task("gemm").peer("nope")


def test_a_missing_package_is_found_without_importing_anything(monkeypatch):
    import sys

    start = time.monotonic()
    assert _fake_peer(modules=("xlang_no_such_package.cute",)).missing() == \
        "fake-wheel (xlang_no_such_package.cute) not installed"
    assert _fake_peer(modules=("json", "xlang.profiler.judge")).missing() is None
    # A submodule that its (present) package lacks: found missing, the package's __init__ never run.
    monkeypatch.delitem(sys.modules, "xlang.report", raising=False)
    assert _fake_peer(modules=("xlang.report.no_such_module",)).missing() is not None
    assert "xlang.report" not in sys.modules
    assert time.monotonic() - start < 0.5
    fa4 = get_task("attn_fwd").peers[0]
    if fa4.missing() is not None:  # this machine has no flash-attn-4: the reason the issue asks for
        assert fa4.missing() == NOT_INSTALLED


def test_peer_specs_skip_what_is_absent_or_turned_off():
    task = dataclasses.replace(get_task("gemm"), peers=(_fake_peer("here"), _fake_peer("gone", ("xlang_no_pkg",))))
    specs = stage_peers.peer_specs(task, ev.EvalOptions())
    assert specs == [{"name": "here", "display": "HERE"},
                     {"name": "gone", "display": "GONE", "skip": "gone-wheel (xlang_no_pkg) not installed"}]
    off = stage_peers.peer_specs(task, ev.coerce_options({"no_peers": True}))
    assert [s["skip"] for s in off] == ["skipped (--no-peers)"] * 2
    # The check stage's limit grows by the budget of each peer it will start, and only those.
    opts = ev.EvalOptions(check_timeout_s=100, peer_timeout_s=50)
    assert stage_peers.check_limit(opts, off) == 100
    assert stage_peers.check_limit(opts, specs) == 100 + 50 + stage_peers.PEER_CLOSE_S


# ---- the runner: a peer's entry is the vendor's, over the judge's buffers ---------------------------------

def test_runner_peer_entry_calls_the_peer_once_per_buffer_set(monkeypatch):
    torch = pytest.importorskip("torch")
    made = []

    def quack_like(inputs, shape):  # a CPU stand-in for quack: C = A @ B.T into its own output
        made.append(shape)
        out = torch.empty(shape["M"], shape["N"])
        return lambda: torch.matmul(inputs["A"].float(), inputs["B"].float().t(), out=out)

    _with_peers(monkeypatch, "gemm", _fake_peer("cpu", call=quack_like))
    entry, files = runner._load({"op": "peer", "task": "gemm", "peer": "cpu"})
    assert files == set()
    A, B, C = torch.randn(8, 16), torch.randn(24, 16), torch.empty(8, 24)
    for _ in range(3):
        entry(A, B, C, 8, 24, 16)
    assert made == [{"M": 8, "N": 24, "K": 16}]  # its setup once for these buffers (untimed), then calls only
    entry(A.clone(), B, C, 8, 24, 16)
    assert len(made) == 2  # new buffers, a new call
    vendor, _ = runner._load({"op": "vendor", "task": "gemm"})  # the vendor through the same function
    vendor(A.bfloat16(), B.bfloat16(), C.bfloat16(), 8, 24, 16)


def test_runner_refuses_a_peer_whose_package_is_missing_on_load(monkeypatch):
    pytest.importorskip("torch")
    _with_peers(monkeypatch, "gemm", _fake_peer("gone", modules=("xlang_no_such_package",)))
    judge_end, runner_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    served = threading.Thread(target=runner.serve, args=(runner_end,), daemon=True)
    served.start()
    runner.send(judge_end, {"op": "peer", "task": "gemm", "peer": "gone", "device": "cpu"})
    reply, _ = runner.receive(judge_end)
    served.join(10)
    assert reply["op"] == "error" and "loading the peer gone failed" in reply["detail"]
    assert "No module named 'xlang_no_such_package'" in reply["detail"]
    judge_end.close()
    runner_end.close()


# ---- the judge: records, best peer, and never the candidate's verdict -------------------------------------

class _NoRunner:
    def __init__(self, *a, **k):
        raise AssertionError("a process was started for a peer that is skipped")


def _ctx(peers, budget=60.0):
    return state(get_task("gemm"), "cuda", peers=peers, timing={"peer_budget_s": budget}, device="cuda",
                 call_timeout_s=120.0)


def test_skipped_peers_are_recorded_without_a_process(monkeypatch):
    monkeypatch.setattr(judge_peers, "Runner", _NoRunner)
    start = time.monotonic()
    out = judge_peers.time_peers(_ctx([{"name": "fa4", "display": "FA4", "skip": NOT_INSTALLED},
                                 {"name": "quack", "display": "quack GEMM", "skip": "skipped (--no-peers)"}]),
                           {"M": 8, "N": 8, "K": 8}, 1.0, lambda text: None)
    assert time.monotonic() - start < 0.5
    assert out == {"peers": [{"name": "fa4", "display": "FA4", "ran": False, "reason": NOT_INSTALLED},
                             {"name": "quack", "display": "quack GEMM", "ran": False,
                              "reason": "skipped (--no-peers)"}],
                   "best_peer": None}


class _FakeRunner:
    started: list = []

    def __init__(self, spec, role, hello, observer=None, home_env=None):
        self.role, self.load_timeout_s, self.home = role, 180.0, None

    def start(self, hello):
        _FakeRunner.started.append(hello)
        if hello["peer"] == "broken":
            raise judge_peers.CandidateError("loading the peer broken failed:\nModuleNotFoundError: No module named 'x'")

    def close(self):
        pass


def test_peers_that_ran_give_speedups_and_the_fastest_is_best(monkeypatch):
    shape = {"M": 1024, "N": 1024, "K": 1024}
    medians = {"peer slow": 3.0, "peer fast": 1.5, "peer hangs": None}

    def fake_time_calls(ctx, runner_, observer, prov, shape_, progress, who, verify_n=None, deadline=None):
        assert verify_n == 0 and prov is None and shape_ == shape and deadline is not None
        if medians[who] is None:
            raise judge_peers.Outcome("timeout", "the candidate's call: no answer within 60 s")
        return {"stats": {"median_ms": medians[who]}, "method": "cupti_kernel_span", "wall_stats": {}}

    _FakeRunner.started = []
    monkeypatch.setattr(judge_peers, "Runner", _FakeRunner)
    monkeypatch.setattr(judge_peers, "make_observer", lambda spec: None)
    monkeypatch.setattr(judge_peers, "wait_alone", lambda progress, index=0: {"checked": True, "others": []})
    monkeypatch.setattr(judge_peers, "time_calls", fake_time_calls)
    peers = [{"name": n, "display": n.title()} for n in ("slow", "fast", "broken", "hangs")]
    out = judge_peers.time_peers(_ctx(peers), shape, 2.0, lambda text: None)
    assert [h["peer"] for h in _FakeRunner.started] == ["slow", "fast", "broken", "hangs"]
    assert all(h["op"] == "peer" and h["task"] == "gemm" for h in _FakeRunner.started)
    slow, fast, broken, hangs = out["peers"]
    assert slow["ran"] and slow["ms"] == 3.0 and slow["speedup_vs_peer"] == pytest.approx(1.5)  # 3.0 / 2.0
    assert fast["speedup_vs_peer"] == pytest.approx(0.75)  # 1.5 / 2.0: the candidate is slower than it
    assert fast["tflops"] == pytest.approx(2 * 1024 ** 3 / 1.5e-3 / 1e12)
    assert broken == {"name": "broken", "display": "Broken", "ran": False,
                      "reason": "could not load: ModuleNotFoundError: No module named 'x'"}
    assert not hangs["ran"] and hangs["reason"].startswith("failed: ") and "no answer" in hangs["reason"]
    assert out["best_peer"] == {"name": "fast", "display": "Fast", "ms": 1.5, "speedup": pytest.approx(0.75),
                                "idle_ms": None, "speedup_gpu_time": None}


def test_a_peer_that_idles_the_gpu_inside_its_call_is_also_compared_by_its_gpu_time_alone():
    # FA4's backward on the H200: a span of 7.18 ms of which 0.83 ms the GPU idled between its first two kernels
    task = get_task("attn_bwd")
    shape = task.shape({})
    peer = judge_peers.PeerPlan(name="fa4", display="FA4")
    timed = {"stats": {"median_ms": 7.18}, "method": "cupti_kernel_span", "profile": {"idle_ms": 0.83}}
    rec = judge_peers.peer_record(task, shape, peer, timed, candidate_ms=7.43, candidate_idle_ms=0.01)
    assert rec["speedup_vs_peer"] == pytest.approx(7.18 / 7.43)  # the verdict's figure: span against span
    assert rec["idle_ms"] == 0.83 and rec["speedup_vs_peer_gpu_time"] == pytest.approx((7.18 - 0.83) / (7.43 - 0.01))
    best = judge_peers.best_peer([rec])
    assert best["speedup_gpu_time"] == rec["speedup_vs_peer_gpu_time"] and best["idle_ms"] == 0.83
    verdict = V.Verdict(category=V.OK, detail="", lang="cuda_ptx", task="attn_bwd", arch="h100", shape=shape,
                        correctness={"trials": 8, "shapes": [shape], "kinds": ["normal"]},
                        timing={"best_peer": best}, memcheck={"ran": True}, executed={})
    text = ev._ok_detail(verdict, ())
    assert "0.966x FA4 (the fastest peer) (0.856x its GPU time alone: its calls leave the GPU idle 0.83 ms" in text
    # a peer without idle inside its calls gets no second figure
    rec = judge_peers.peer_record(task, shape, peer, {**timed, "profile": {"idle_ms": 0.0}}, 7.43)
    verdict.timing = {"best_peer": judge_peers.best_peer([rec])}
    assert "GPU time alone" not in ev._ok_detail(verdict, ())


def test_a_peers_budget_bounds_its_calls():
    ctx = state(call_timeout_s=120.0)
    assert timing._call_timeout(ctx, None) == 120.0
    assert 9.0 < timing._call_timeout(ctx, time.monotonic() + 10) <= 10.0
    with pytest.raises(judge_peers.RunnerGone) as e:
        timing._call_timeout(ctx, time.monotonic() - 1)
    assert e.value.timed_out


# ---- the verdict's scores, old and new ----------------------------------------------------------------------

def _timed(category="ok", peers=None, best=None, speedup=1.2):
    timing = {"speedup": speedup, "tflops": 600.0}
    if peers is not None:
        timing.update(peers=peers, best_peer=best)
    return {"category": category, "runtime_ran": True, "timing": timing}


def test_scores_peer_speedup_only_when_correct_and_old_verdicts_say_why_not():
    best = {"name": "fa4", "display": "FA4", "ms": 1.0, "speedup": 0.9}
    ran = [{"name": "fa4", "display": "FA4", "ran": True, "ms": 1.0, "speedup_vs_peer": 0.9}]
    assert V.scores(_timed(peers=ran, best=best))["peer_speedup"] == 0.9
    assert V.scores(_timed("incorrect", peers=ran, best=best))["peer_speedup"] is None
    assert V.peer_note(_timed(peers=ran, best=best)) == ""
    absent = [{"name": "fa4", "display": "FA4", "ran": False, "reason": NOT_INSTALLED}]
    assert V.scores(_timed(peers=absent))["peer_speedup"] is None
    assert V.peer_note(_timed(peers=absent)) == f"not run (FA4: {NOT_INSTALLED})"
    old = _timed()  # stored before peers: no "peers" key
    assert V.scores(old)["peer_speedup"] is None and V.scores(old)["speedup"] == 1.2
    assert V.peer_note(old) == "not run (no peer timed: a verdict from before peers)"
    assert V.peer_note({"category": "incorrect", "timing": None}) == ""  # nothing timed: nothing to explain


# ---- the report: the column beside the best speedups ---------------------------------------------------------

def _records(peers_by_run):
    from report_records import run, verdict

    out = []
    for run_id, (task, timing_extra) in peers_by_run.items():
        v = verdict("ok", "h100", "triton", task, 1.1)
        if timing_extra is not None:
            v["timing"].update(timing_extra)
        out.append(run(run_id, task, "triton", "h100", 0, [verdict("incorrect", "h100", "triton", task), v]))
    return out


def test_report_shows_the_peer_column_and_not_run_with_the_reason(tmp_path):
    from xlang.report import plots, provenance, tables
    from xlang.report.data import from_records

    ran = {"peers": [{"name": "quack", "display": "quack GEMM", "ran": True, "ms": 1.3, "speedup_vs_peer": 1.25}],
           "best_peer": {"name": "quack", "display": "quack GEMM", "ms": 1.3, "speedup": 1.25}}
    absent = {"peers": [{"name": "fa4", "display": "FA4", "ran": False, "reason": NOT_INSTALLED}],
              "best_peer": None}
    ds = from_records(_records({"g": ("gemm", ran), "a": ("attn_fwd", absent), "c": ("attn_fwd_causal", None)}))
    stats = tables.cell_stats(ds)
    cells = tables.format_cells(stats).set_index("task")
    # the cells table has the fastest target candidate's TFLOP/s and GB/s beside its speedup (issue 37)
    assert list(cells.columns[-5:]) == [tables.COL_SPEED, tables.COL_TFLOPS, tables.COL_GBPS, tables.COL_SPEED_ALL,
                                        tables.COL_SPEED_PEER]
    assert cells.loc["gemm", tables.COL_SPEED] == "1.10× (1/1)"
    assert cells.loc["gemm", tables.COL_SPEED_PEER] == "1.25× (1/1)"
    assert cells.loc["attn_fwd", tables.COL_SPEED_PEER] == f"not run (FA4: {NOT_INSTALLED})"
    # A verdict stored before peers (no "peers" key) still loads and reports, its peer column saying why.
    assert cells.loc["attn_fwd_causal", tables.COL_SPEED] == "1.10× (1/1)"
    assert cells.loc["attn_fwd_causal", tables.COL_SPEED_PEER] == \
        "not run (no peer timed: a verdict from before peers)"
    row = stats.set_index("task").loc["gemm"]
    assert row["best_peer_speedup"] == 1.25 and row["n_peer_speedup"] == 1
    # "What was not run" lists each cell whose peers timed nothing, with the reason
    nr = provenance.not_run(ds)
    peers = nr[nr["what"] == "peer"].set_index("task")["reason"].to_dict()
    assert peers == {"attn_fwd": f"not run (FA4: {NOT_INSTALLED})",
                     "attn_fwd_causal": "not run (no peer timed: a verdict from before peers)"}
    plot = plots.speedup_plot(stats, ds.archs(), ds.langs(), ds.tasks(), tmp_path / "best_speedup.png")
    assert plot.stat().st_size > 1000  # × vendor bars with the × best peer marker beside them


def test_compare_table_footnotes_the_peer_reason():
    from rich.console import Console

    from xlang.compare import CompareResult
    from xlang.compare_output import print_table
    from xlang.report import tables
    from xlang.report.data import from_records

    absent = {"peers": [{"name": "fa4", "display": "FA4", "ran": False, "reason": NOT_INSTALLED}],
              "best_peer": None}
    ds = from_records(_records({"a": ("attn_fwd", absent)}))
    console = Console(width=200, record=True, file=open("/dev/null", "w"))
    print_table(CompareResult([], ds, tables.cell_stats(ds), 0.0), console)
    text = console.export_text()
    assert "best× peer (target)" in text and "not run¹" in text
    assert f"¹ not run (FA4: {NOT_INSTALLED})" in text


# ---- xlang eval's lines --------------------------------------------------------------------------------------

def test_eval_prints_x_vendor_beside_x_peer_or_why_not():
    from xlang.profiler.commands import peers_not_run, speedups_line

    t = {"speedup": 0.95, "baseline_name": "cuBLAS (torch.matmul)",
         "peers": [{"name": "quack", "display": "quack GEMM", "ran": True, "speedup_vs_peer": 1.02},
                   {"name": "other", "display": "Other", "ran": False, "reason": "failed: boom"}],
         "best_peer": {"name": "quack", "display": "quack GEMM", "ms": 1.0, "speedup": 1.02}}
    assert speedups_line(t) == "0.950x vendor (cuBLAS (torch.matmul)) · 1.020x quack GEMM (best peer)"
    assert peers_not_run(t) == ["x Other: not run (failed: boom)"]
    assert peers_not_run({"speedup": 1.0}) == ["peers: not run (a verdict from before peers)"]


# ---- evaluate() -> the judge -> the verdict, with a fake GPU: an absent peer costs no process -------------

PEER_WORKER = (
    "import json, sys\n"
    "from xlang.profiler.judge import peers\n"
    "from xlang.profiler.judge.plan import Plan\n"
    "from xlang.profiler.judge.state import JudgeState\n"
    "spec = json.load(open(sys.argv[1]))\n"
    "peers.Runner = None  # a peer process started here would fail loudly\n"
    "timing = {'speedup': 1.1, 'tflops': 700.0, 'baseline_tflops': 640.0, 'baseline_name': 'cuBLAS'}\n"
    "timing.update(peers.time_peers(JudgeState(Plan.from_dict({**spec, 'call_timeout_s': 1.0}), None, 'cuda'),\n"
    "                               spec['timed_shape'],\n"
    "                               1.0, lambda text: None))\n"
    "json.dump({'status': 'ok', 'fingerprint': {}, 'isolation': 'fake', 'timing': timing,\n"
    "           'correctness': {'passed': True, 'trials': 1, 'shapes': [], 'kinds': ['normal']}},\n"
    "          open(spec['out'], 'w'))\n"
)


@pytest.mark.slow
def test_evaluate_records_an_absent_peer_and_the_verdict_stays_ok(tmp_path, monkeypatch):
    import sys

    from test_profiler_evaluate import _gemm_build_on_a_fake_gpu

    task, arch, build = _gemm_build_on_a_fake_gpu(tmp_path, monkeypatch)
    if task.peers[0].missing() is None:
        pytest.skip("quack is installed here: its absent path cannot be shown")
    worker = tmp_path / "peer_worker.py"
    worker.write_text(PEER_WORKER)
    monkeypatch.setattr(launch, "judge_command", lambda spec_path: [sys.executable, str(worker), str(spec_path)])
    opts = {"memcheck": False, "ncu": False, "seed": 3}
    v = ev.evaluate(build, "triton", task, arch, options=opts)
    assert v.category == V.OK and v.speedup == 1.1
    reason = "quack-kernels (quack.gemm_interface) not installed"
    assert v.timing["peers"] == [{"name": "quack", "display": "quack GEMM", "ran": False, "reason": reason}]
    assert v.timing["best_peer"] is None
    assert V.peer_note(v.to_dict()) == f"not run (quack GEMM: {reason})"
    v = ev.evaluate(build, "triton", task, arch, options={**opts, "no_peers": True})
    assert v.category == V.OK and v.timing["peers"][0]["reason"] == "skipped (--no-peers)"
