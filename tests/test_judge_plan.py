"""The typed boundary of a GPU stage's judge process (xlang.profiler.judge.plan): a Plan and a Report go to JSON
and back unchanged, and anything their classes do not declare is refused, since each file crosses a trust
boundary (issue 48)."""

from __future__ import annotations

import json

import pytest
from plans import plan

from xlang.profiler.judge.plan import PeerPlan, Plan, PlanError, Report, TimingPlan


def test_a_plan_round_trips_through_json_with_its_nested_parts_typed():
    p = plan(trials=[({"M": 8, "N": 8, "K": 8}, "normal", 3)], timing={"enabled": True, "seed": 7},
             peers=[{"name": "quack", "display": "quack GEMM"}], suite=None, gpu_index=1)
    assert isinstance(p.timing, TimingPlan) and p.timing.enabled and p.timing.budget_s == 0.6
    assert p.peers == [PeerPlan("quack", "quack GEMM")]
    back = Plan.from_json(p.to_json())
    assert back == Plan.from_dict(json.loads(json.dumps(p.to_dict())))
    assert back.trials == [[{"M": 8, "N": 8, "K": 8}, "normal", 3]] and back.timing == p.timing
    assert back.but(mode="memcheck").mode == "memcheck" and back.mode == "check"


@pytest.mark.parametrize("bad,word", [
    ({"mode": "check"}, "missing keys"),
    ({**plan().to_dict(), "gpu": 0}, "unknown keys ['gpu']"),
    ({**plan().to_dict(), "timing": {"enabled": True, "gate_file": "x"}}, "plan.timing: unknown keys"),
    ({**plan().to_dict(), "peers": [{"name": "x"}]}, "plan.peers[]: missing keys ['display']"),
    ({**plan().to_dict(), "timing": [1]}, "a JSON object was expected"),
])
def test_a_plan_with_what_its_class_does_not_declare_is_refused(bad, word):
    with pytest.raises(PlanError, match=word.replace("[", r"\[").replace("]", r"\]")):
        Plan.from_json(json.dumps(bad))
    with pytest.raises(PlanError, match="not JSON"):
        Plan.from_json("{")


def test_a_report_round_trips_and_refuses_an_unknown_key():
    r = Report("incorrect", detail="C[0, 1] got 1", correctness={"passed": False}, pid=12)
    assert Report.from_json(r.to_json()) == r
    assert "timing" not in json.loads(r.to_json())  # what the judge did not find is left out, as before
    with pytest.raises(PlanError, match="unknown keys"):
        Report.from_json(json.dumps({"status": "ok", "verdict": "ok"}))
    with pytest.raises(PlanError, match="missing keys"):
        Report.from_json(json.dumps({"detail": "no status"}))


def test_a_report_the_judge_wrote_wrongly_reads_as_none(tmp_path):
    """launch.run_stage: a result file that is not a Report is as if the judge had written none (runtime_error:
    'the judge died'), as unreadable JSON was before."""
    import sys

    from xlang import verdict as V
    from xlang.profiler.stages import launch

    script = ("import json, sys\nspec = json.load(open(sys.argv[1]))\n"
              "json.dump({'status': 'ok', 'extra': 1}, open(spec['out'], 'w'))\n")
    run = launch.run_stage(plan(), tmp_path, "check", 30, child_cmd=[sys.executable, "-c", script,
                                                                      str(tmp_path / "check" / "spec.json")])
    assert run.result is None
    assert launch.stage_failure("check", run, 30)[0] == V.RUNTIME_ERROR
