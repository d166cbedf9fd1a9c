"""The tool stages' parent side on the CPU (stages/memcheck.py memcheck_stage, stages/ncu.py, their record_report;
stages/check.py Check.record_report): what the judge's Report and the tool's files in the stage's folder become in
the verdict. Only the judge's process is faked (run_stage: the folder it made, the tool's log the judge copied into
it, the Report it wrote); the parsing and the records run as they do after a GPU run."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tests.plans import plan
from xlang import verdict as V
from xlang.children import ChildResult
from xlang.profiler import sanitizer
from xlang.profiler.judge.plan import Report
from xlang.profiler.options import EvalOptions
from xlang.profiler.stages import check as check_stage
from xlang.profiler.stages import launch, memcheck, ncu

SHAPES = [({"M": 64, "N": 64, "K": 64}, "normal", 500), ({"M": 128, "N": 64, "K": 256}, "normal", 501)]
CLEAN = "========= COMPUTE-SANITIZER\n========= ERROR SUMMARY: 0 errors\n"
FAULT = """========= COMPUTE-SANITIZER
========= Invalid __global__ write of size 4 bytes
=========     at gemm_tail+0x2f0
=========     by thread (7,0,0) in block (3,0,0)
=========     Address 0x7f0000001000 is out of bounds
=========
========= ERROR SUMMARY: 1 error
"""
WATCH = {"polls": 12, "seen": []}
OUTPUT = {"stdout": "candidate says hi", "stderr": ""}


def _judged(tmp_path, monkeypatch, report: Report | None, log: str | None):
    """memcheck_stage with the judge's process replaced by what it leaves: -> (info, failure, the plan it got)."""
    got = []

    def fake_run_stage(stage_plan, workdir, stage, timeout, **kw):
        got.append(stage_plan)
        folder = workdir / stage
        folder.mkdir()
        if log is not None:
            (folder / "tool.log").write_text(log)
        return launch.StageRun(ChildResult(0, "", "", False, 1.0), report, "", 1.0, folder)

    monkeypatch.setattr(memcheck, "find_tool", lambda name: "/usr/bin/compute-sanitizer")
    monkeypatch.setattr(memcheck, "run_stage", fake_run_stage)
    ctx = SimpleNamespace(plan=plan(memcheck_trials=SHAPES, trials=[SHAPES[0]] * 3))
    stage_plan = memcheck.STAGE.plan(None, ctx)
    info, failure = memcheck.memcheck_stage(stage_plan, tmp_path, EvalOptions(), {})
    return info, failure, got[0]


def _verdict() -> V.Verdict:
    return V.Verdict("ok", fingerprint={"stage_isolation": {"check": "bwrap+uid"}, "gpu": {}})


def test_a_clean_memcheck_is_recorded_with_the_judges_report(tmp_path, monkeypatch):
    report = Report("ok", isolation="bwrap+uid", jail_ladder=[{"variant": "all", "ok": True, "why": "ok"}],
                    gpu_watch=WATCH, candidate_output=OUTPUT, runner_exit=0)
    info, failure, sent = _judged(tmp_path, monkeypatch, report, CLEAN)
    assert failure is None
    assert sent.mode == "memcheck" and sent.trials == SHAPES and "{LOG}" in sent.tool
    assert info["ran"] and info["shapes"] == [s[0] for s in SHAPES] and info["errors"] == 0
    assert info["isolation"] == "bwrap+uid" and info["jail_ladder"][0]["variant"] == "all"
    assert info["gpu_watch"] == WATCH and info["summary_found"]
    verdict = _verdict()
    assert memcheck.STAGE.record_report(info, verdict, failure, {}) is None
    assert verdict.memcheck["errors"] == 0 and "candidate_output" not in verdict.memcheck
    assert verdict.output == {"memcheck": OUTPUT}
    assert verdict.fingerprint["stage_isolation"] == {"check": "bwrap+uid", "memcheck": "bwrap+uid"}


def test_memchecks_errors_are_a_memory_error_naming_the_kernel(tmp_path, monkeypatch):
    report = Report("ok", runner_exit=sanitizer.ERROR_EXIT_CODE)
    info, failure, _ = _judged(tmp_path, monkeypatch, report, FAULT)
    assert failure[0] == V.MEMORY_ERROR and "gemm_tail" in failure[1] and info["errors"] == 1


@pytest.mark.parametrize("report, log, category, words", [
    (Report("forbidden_call", detail="a second GPU process"), CLEAN, V.FORBIDDEN_CALL, "a second GPU process"),
    (Report("ok", runner_exit=1), CLEAN, V.RUNTIME_ERROR, "ended abnormally (exit 1)"),
    (Report("ok", runner_exit=0), "========= COMPUTE-SANITIZER\n", V.RUNTIME_ERROR, "no ERROR SUMMARY"),
    (Report("runtime_error", detail="the candidate's call failed"), CLEAN, V.RUNTIME_ERROR, "call failed"),
    (None, None, V.RUNTIME_ERROR, "judge died"),
])
def test_a_memcheck_that_is_not_a_clean_pass_fails(tmp_path, monkeypatch, report, log, category, words):
    _info, failure, _ = _judged(tmp_path, monkeypatch, report, log)
    assert failure[0] == category and words in failure[1]


def _check_run(report: Report | None) -> launch.StageRun:
    return launch.StageRun(ChildResult(0, "", "", False, 1.0), report, "", 1.0, None)


@pytest.mark.parametrize("observed, first, expected", [
    (["gemm_kernel"], ["gemm_kernel"], None),
    (["gemm_kernel", "gemm_kernel"], ["gemm_kernel"], None),  # the first timed call's (fresh buffers) is the same
    (["gemm_kernel", "gemm_kernel"], ["gemm_kernel", "fixup"], V.NOT_EXECUTED),  # neither timed call's is
])
def test_ncu_compares_its_profiled_call_with_the_checks_timed_call(observed, first, expected):
    info = {"ran": True, "isolation": "bwrap+uid", "profiled_names": ["gemm_kernel"], "candidate_output": OUTPUT}
    check = _check_run(Report("ok", timed_call_kernels=observed, timed_first_call_kernels=first))
    verdict = _verdict()
    failure = ncu.STAGE.record_report(info, verdict, None, {"check": check})
    assert (failure and failure[0]) == expected
    assert verdict.executed_ok is True and verdict.output == {"ncu": OUTPUT}
    assert verdict.fingerprint["stage_isolation"]["ncu"] == "bwrap+uid"
    # a check that wrote no report (or timed nothing) leaves nothing to compare with
    assert ncu.STAGE.record_report(dict(info), _verdict(), None, {"check": _check_run(None)}) is None


def test_the_checks_report_fills_the_verdict(tmp_path):
    timing = {"candidate_ms": 1.0, "baseline_ms": 2.0, "speedup": 2.0, "clocks": {"sm_clock_mhz": 1980}}
    report = Report.from_json(Report("ok", isolation="bwrap+uid", fingerprint={"torch": "2.13"},
                                     correctness={"passed": True, "trials": 3}, timing=timing,
                                     suite={"name": "s", "shapes": []}, gpu_watch=WATCH,
                                     candidate_output=OUTPUT).to_json())
    verdict = V.Verdict("ok", fingerprint={"gpu": {"name": "H200"}})
    assert check_stage.STAGE.record_report(_check_run(report), verdict, None, {}) is None
    assert verdict.correct and verdict.isolation == "bwrap+uid" and verdict.timing["speedup"] == 2.0
    assert verdict.suite == {"name": "s", "shapes": []} and verdict.output == {"check": OUTPUT}
    assert verdict.fingerprint["gpu"] == {"name": "H200", "sm_clock_mhz": 1980,
                                          "clocks_sampled": "after the timed repetitions"}
    assert verdict.fingerprint["torch"] == "2.13" and verdict.fingerprint["gpu_watch"] == WATCH
    assert verdict.fingerprint["stage_isolation"] == {"check": "bwrap+uid"}
