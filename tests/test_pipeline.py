"""The verdict pipeline as declared (xlang.profiler.pipeline): the Job across a process boundary, a stage added with
one file and one line in the list, the scheduler's order and its `beside` dependency, and one static path for
`xlang eval` and the agent loop."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

import pipeline_example_stage as example
from plans import plan

from xlang import verdict as V
from xlang.archs import get_arch
from xlang.backend import BuildResult, get_backend
from xlang.profiler import evaluate as ev
from xlang.profiler import pipeline as P
from xlang.profiler.options import EvalOptions
from xlang.profiler.stages.base import StageBase
from xlang.task import get_task

ROOT = Path(__file__).resolve().parents[1]


def _ctx(tmp_path, source="x = 1\n", build=None, **options) -> P.Context:
    task, arch = get_task("gemm"), get_arch("h200")
    verdict = V.Verdict(V.OK, lang="triton", task=task.name, arch=arch.name)
    return P.Context(task, arch, get_backend("triton"), EvalOptions(**options), verdict, tmp_path, source, build)


def _failed_build(tmp_path) -> BuildResult:
    return BuildResult(False, "triton", "gemm", "h200", {"M": 64}, str(tmp_path), error="no such compiler here")


def test_job_crosses_a_process_boundary_unchanged():
    job = P.Job.of(get_task("gemm"), "triton", get_arch("h200"), {"M": 256, "N": 128, "K": 64},
                   options={"seed": 3, "static": {"failures": [["missing_instructions", "x"]], "census_ok": False}})
    assert job.required == get_task("gemm").required_for(get_arch("h200")) and job.task == "gemm"
    again = P.Job.from_spec(job.to_spec())
    assert again == job and again.shape_dict == {"M": 256, "N": 128, "K": 64}
    assert list(again.shape_dict) == ["M", "N", "K"]  # the order of the sizes is kept
    try:
        job.lang = "cuda_ptx"
        raise AssertionError("a Job is frozen")
    except AttributeError:
        pass


def test_every_category_is_concluded_by_a_declared_stage():
    """The list is the pipeline: every failing category of STAGE_ORDER has a stage that concludes it."""
    assert P.STAGE_NAMES == ("screen", "build", "census", "check", "memcheck", "ncu")
    failing = [c for c in V.STAGE_ORDER if c not in (V.OK, V.STATIC_OK)]
    assert sorted(P.CONCLUDES) == sorted(failing)
    assert [s.name for s in P.STAGES if s.gpu] == ["check", "memcheck", "ncu"]
    assert {s.name: s.beside for s in P.STAGES if s.beside} == {"memcheck": "check", "ncu": "check"}


def test_an_added_stage_runs_in_its_place(tmp_path):
    """tests/pipeline_example_stage.py plus one line in the list: it runs after the screen and before the build; its
    failure stops the pipeline there (the build never runs), and when it passes the next stage runs."""
    stages = (P.STATIC_STAGES[0],
              example.STAGE,  # the one line
              *P.STATIC_STAGES[1:])
    task, arch = get_task("gemm"), get_arch("h200")
    for shape, expected in (({"M": 20000, "N": 64, "K": 64}, ["screen", "size_cap"]),
                            ({"M": 64, "N": 64, "K": 64}, ["screen", "size_cap", "build"])):
        seen = []
        ctx = _ctx(tmp_path, build=_failed_build(tmp_path))
        ctx.on_stage = seen.append
        result = P.run_stages(stages, P.Job.of(task, "triton", arch, shape), ctx)
        assert seen == expected and result.stopped
    assert result.failures == [(V.COMPILE_ERROR, "no such compiler here")]  # the given build, taken as it is
    result = P.run_stages(stages, P.Job.of(task, "triton", arch, {"M": 20000, "N": 64, "K": 64}), _ctx(tmp_path))
    assert result.failures == [(V.RUNTIME_ERROR, "sizes above the cap of 16384: M=20000")]


def test_evaluate_takes_its_verdict_from_an_added_stage(tmp_path, monkeypatch):
    """evaluate() runs whatever the list holds: the added stage's category and detail are the verdict's, and the
    verdict's fingerprint names the stages it was judged by."""
    monkeypatch.setattr(ev, "STAGES", (P.STATIC_STAGES[0], example.STAGE, *P.STATIC_STAGES[1:], *P.GPU_STAGES))
    v = ev.evaluate("x = 1\n", "triton", "gemm", "h200", {"M": 20000, "N": 64, "K": 64},
                    {"workdir": tmp_path / "w", "run": "never"})
    assert (v.category, v.detail) == (V.RUNTIME_ERROR, "sizes above the cap of 16384: M=20000")
    assert v.fingerprint["stages"] == ["screen", "size_cap", "build", "census", "check", "memcheck", "ncu"]
    assert v.build is None  # stopped before the build


class _Lead(StageBase):
    """A GPU stage whose work takes a while; it notes when the stages beside it have left the GPU."""

    name, categories, runs, gpu = "lead", (V.RUNTIME_ERROR,), "waits", True

    def __init__(self, fail=False):
        self.fail, self.events = fail, []

    def run(self, job, ctx):
        self.events.append(("lead starts", time.monotonic()))
        ctx.cancel[self.name].wait(0.6)
        self.events.append(("lead ends", time.monotonic()))
        return (V.RUNTIME_ERROR, "the lead failed") if self.fail else None

    def others_left(self, job, ctx, failed):
        self.events.append(("others left" + (" after a failure" if failed else ""), time.monotonic()))

    def record(self, job, ctx, failure):
        self.events.append(("lead recorded", time.monotonic()))
        return failure


class _Side(StageBase):
    name, categories, runs, gpu, stops, beside = "side", (V.MEMORY_ERROR,), "a short tool", True, False, "lead"

    def __init__(self, lead, failure=None):
        self.lead, self.failure = lead, failure

    def run(self, job, ctx):
        self.lead.events.append(("side starts", time.monotonic()))
        time.sleep(0.1)
        return self.failure

    def record(self, job, ctx, failure):
        self.lead.events.append(("side recorded", time.monotonic()))
        return failure


def _gpu_ctx(tmp_path, **options):
    ctx = _ctx(tmp_path, **options)

    def start_gpu(job, c):
        c.plan = plan()  # any plan: the stages here are stand-ins
        return True

    ctx.start_gpu = start_gpu
    return ctx


def test_a_stage_beside_another_starts_with_it_and_the_lead_is_told_when_it_left(tmp_path):
    lead = _Lead()
    side = _Side(lead, (V.MEMORY_ERROR, "3 errors"))
    job = P.Job.of(get_task("gemm"), "triton", get_arch("h200"), {"M": 64, "N": 64, "K": 64})
    ctx = _gpu_ctx(tmp_path)
    result = P.run_stages((lead, side), job, ctx)
    names = [e[0] for e in lead.events]
    assert names.index("side starts") < names.index("lead ends")  # beside it, not after it
    assert names.index("others left after a failure") < names.index("lead ends")
    assert names[-2:] == ["lead recorded", "side recorded"]  # records in list order, in the scheduler's thread
    assert result == P.Result([(V.MEMORY_ERROR, "3 errors")], stopped=False, ran_gpu=True)
    assert set(ctx.stage_seconds) == {"lead", "side"}
    ctx.pool.shutdown()


def test_without_overlap_a_stage_beside_another_runs_after_it_passed(tmp_path):
    lead = _Lead()
    job = P.Job.of(get_task("gemm"), "triton", get_arch("h200"), {"M": 64, "N": 64, "K": 64})
    ctx = _gpu_ctx(tmp_path, overlap=False)
    P.run_stages((lead, _Side(lead)), job, ctx)
    names = [e[0] for e in lead.events]
    assert names.index("side starts") > names.index("lead recorded") and "others left" not in names
    ctx.pool.shutdown()
    failing = _Lead(fail=True)
    ctx = _gpu_ctx(tmp_path, overlap=False)
    result = P.run_stages((failing, _Side(failing)), job, ctx)
    assert result.stopped and result.failures == [(V.RUNTIME_ERROR, "the lead failed")]
    assert "side starts" not in [e[0] for e in failing.events]  # a failed lead: nothing runs after it
    ctx.pool.shutdown()


def test_no_gpu_gives_the_static_conclusion(tmp_path):
    job = P.Job.of(get_task("gemm"), "triton", get_arch("h200"), {"M": 64, "N": 64, "K": 64})
    ctx = _ctx(tmp_path)
    ctx.start_gpu = lambda job, c: False
    lead = _Lead()
    assert P.run_stages((lead,), job, ctx, [(V.MISSING_INSTRUCTIONS, "no wgmma")]) == \
        P.Result([(V.MISSING_INSTRUCTIONS, "no wgmma")], stopped=False, ran_gpu=False)
    assert lead.events == []
    assert P.static_conclusion([(V.MISSING_INSTRUCTIONS, "no wgmma"), (V.INCORRECT, "fp16")], "not run (x)",
                               get_arch("h200"), ("wgmma",)) == (V.INCORRECT, "fp16; not run (x)")
    assert P.static_conclusion([], "not run (x)", get_arch("h200"), ("wgmma", "tma")) == \
        (V.STATIC_OK, "compiled for sm_90a with wgmma, tma present; not run (x)")


def test_the_agent_loop_and_xlang_eval_decide_the_static_stages_alike(tmp_path):
    """One static path: the same screen, with the same words, whichever way the candidate comes."""
    from xlang.agent.runtime import assess, make_runtime

    source = (ROOT / "tests" / "kernels" / "bad" / "static_matmul.py").read_text()
    arch, task = get_arch("h200"), get_task("gemm")
    by_eval = ev.evaluate(source, "triton", task, arch, options={"workdir": tmp_path / "e", "run": "never"})
    by_agent = assess(source, "triton", task, arch, task.shape(), make_runtime("none", arch), tmp_path / "a").verdict
    assert by_eval.category == by_agent.category == V.FORBIDDEN_CALL
    assert by_eval.detail == by_agent.detail and by_eval.detail.startswith("static screen: ")
    empty = assess("  ", "triton", task, arch, task.shape(), make_runtime("none", arch), tmp_path / "b").verdict
    assert (empty.category, empty.detail, empty.compiled) == (V.NO_CODE, "no candidate code", False)


def test_given_the_static_stages_findings_evaluate_runs_only_the_gpu_stages(tmp_path, monkeypatch):
    """options.static (from xlang.agent.runtime.assess): the screen and census are not run again; without a GPU the
    kept census failure decides as it would have."""
    ran = []
    for s in P.STATIC_STAGES:
        monkeypatch.setattr(s, "run", lambda job, ctx, name=s.name: ran.append(name))
    build = BuildResult(True, "triton", "gemm", "h200", {"M": 64, "N": 64, "K": 64}, str(tmp_path), load_path="x.py")
    static = {"failures": [["missing_instructions", "static SASS census (sm_90a): required family wgmma not in any "
                            "compiled kernel"]], "census_ok": False}
    v = ev.evaluate(build, "triton", "gemm", "h200", options={"workdir": tmp_path / "w", "run": "never",
                                                             "static": static})
    assert ran == [] and v.category == V.MISSING_INSTRUCTIONS and v.census_ok is False and v.compiled
    assert v.detail.endswith("not in any compiled kernel; not run (runtime disabled)")


def test_the_scheduler_is_short():
    import inspect

    assert len(inspect.getsource(ev.evaluate).splitlines()) < 80


def test_decide_weighs_the_failures_in_stage_order_and_says_when_the_census_alone_failed(tmp_path):
    """evaluate.decide: a stopping failure decides with the kept ones; without a GPU, the static conclusion; after
    the GPU stages, the first in STAGE_ORDER, the run-time one on a tie, and a missing family of a correct
    candidate says so (PTXBench counts it apart)."""
    job = P.Job.of(get_task("gemm"), "triton", get_arch("h200"), {"M": 64, "N": 64, "K": 64})
    missing = (V.MISSING_INSTRUCTIONS, "static SASS census (sm_90a): required family tma not in any compiled kernel")
    narrow_static, narrow_run = (V.INCORRECT, "static: fp16"), (V.INCORRECT, "executed: fp16")
    ctx = _ctx(tmp_path)
    ctx.verdict.correct = True
    ctx.verdict.correctness = {"trials": 2, "shapes": [{"M": 64}], "kinds": ["normal"]}

    def decide(failures, stopped=False, ran_gpu=True):
        return ev.decide(P.Result(failures, stopped, ran_gpu), job, ctx)

    assert decide([(V.TIMEOUT, "t"), narrow_static], stopped=True) == (V.TIMEOUT, "t")
    ctx.verdict.runtime_note = "not run (runtime disabled)"
    assert decide([missing], ran_gpu=False) == (missing[0], missing[1] + "; not run (runtime disabled)")
    assert decide([narrow_run, narrow_static]) == narrow_run  # a tie: the run-time finding first
    category, detail = decide([(V.NOT_EXECUTED, "wgmma executed by 0 threads"), missing])
    assert category == V.MISSING_INSTRUCTIONS and detail.endswith(
        " (the candidate is correct; also: wgmma executed by 0 threads)")
    category, detail = decide([missing])
    assert category == V.MISSING_INSTRUCTIONS and detail.startswith(missing[1] + " (the candidate is correct: "
                                                                                 "correct in 2 trials on 1 shapes")
    assert decide([(V.MEMORY_ERROR, "3 errors"), missing]) == (V.MEMORY_ERROR, "3 errors")
    assert decide([])[0] == V.OK


# A GPU stage's judge on the CPU: the spec the parent wrote made the CPU twin of the GPU's (as
# tests/test_judge_isolation.py does), the candidate each stage loads named by the stage's folder.
_CPU_JUDGE = """import json, sys
from pathlib import Path
from xlang.profiler.judge.main import main
spec = json.load(open(sys.argv[1]))
load = {loads!r}[Path(spec["stage_dir"]).name.split("-")[0]]
spec.update(device="cpu", gpu_index={slot}, readable=[{build!r}], observer_library=None,
            hello={{"op": "hello", "device": "cpu", "lang": "triton", "load": load}},
            env={{"XLANG_TEST_OOB": "write-before:C"}})
open(sys.argv[1], "w").write(json.dumps(spec))
main(sys.argv[1:])
"""


def _evaluate_with_a_gpu_stage_added(tmp_path, monkeypatch, guard_loads: str):
    """evaluate() with tests/pipeline_example_gpu_stage.py added by one line after the GPU stages, on a stand-in
    GPU whose judges are the real one run on the CPU: the check judges cpu_gemm_honest.py, the added stage
    `guard_loads` (tests/kernels/isolation)."""
    import random
    import sys

    import pipeline_example_gpu_stage as gpu_example

    from xlang.profiler.stages import launch

    kernels = ROOT / "tests" / "kernels" / "isolation"
    build = tmp_path / "build"
    build.mkdir(parents=True)
    loads = {}
    for stage, name in (("check", "cpu_gemm_honest.py"), ("guard", guard_loads)):
        loads[stage] = str(build / f"{stage}_{name}")
        Path(loads[stage]).write_text((kernels / name).read_text())
    wrapper = tmp_path / "cpu_judge.py"
    slot = random.SystemRandom().randrange(20, 240)  # uids of a slot of this test's own (test_judge_isolation)
    wrapper.write_text(_CPU_JUDGE.format(loads=loads, slot=slot, build=str(build)))
    monkeypatch.setattr(ev, "STAGES", (*P.STATIC_STAGES, *P.GPU_STAGES,
                                       gpu_example.STAGE))  # the one line
    monkeypatch.setattr(ev.gpu_mod, "find_gpu", lambda arch: {"index": 0, "name": "Stand-in", "compute_capability": 90})
    monkeypatch.setattr(ev.gpu_mod, "from_nvml", lambda: None)
    monkeypatch.setattr(launch, "judge_command", lambda spec_path: [sys.executable, str(wrapper), str(spec_path)])
    monkeypatch.setattr(ev, "_observer_library", lambda: (None, "no observer in this test"))
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))  # the per-GPU lock file
    given = BuildResult(True, "triton", "gemm", "h100", {}, str(build), load_path=loads["check"])
    return ev.evaluate(given, "triton", "gemm", "h100", {"M": 40, "N": 48, "K": 56},
                       {"memcheck": False, "ncu": False, "timing": False, "workdir": tmp_path / "w", "seed": 3,
                        "shapes": [{"M": 40, "N": 48, "K": 56}],
                        "static": {"failures": [], "census_ok": True}})


@pytest.mark.slow
def test_an_added_gpu_stage_is_picked_up_and_its_failure_decides(tmp_path, monkeypatch):
    """tests/pipeline_example_gpu_stage.py plus one line in the list: its plan reaches a judge process of its own
    (its folder, its report), its record writes the verdict, and its failure (a canary in the slack before C
    damaged: memory_error) is the verdict's, after a check that passed."""
    v = _evaluate_with_a_gpu_stage_added(tmp_path / "a", monkeypatch, "cpu_gemm_honest.py")
    assert v.category == V.OK and v.correct, v.detail
    assert v.fingerprint["stages"][-1] == "guard" and "guard" in v.fingerprint["stage_seconds"]
    assert v.fingerprint["stage_isolation"]["guard"] == v.fingerprint["stage_isolation"]["check"]
    spec = json.loads((tmp_path / "a" / "w" / "guard" / "spec.json").read_text())
    assert spec["mode"] == "check" and len(spec["trials"]) == 1 and spec["timing"]["enabled"] is False
    v = _evaluate_with_a_gpu_stage_added(tmp_path / "b", monkeypatch, "cpu_gemm_out_of_bounds.py")
    assert v.category == V.MEMORY_ERROR and "wrote outside C" in v.detail, v.detail
    assert v.correctness["passed"]  # the check passed: the added stage found it
