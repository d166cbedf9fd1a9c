"""The toolchain is part of a compare cell's identity (issue #32 item 1, #37 item 3): a compare under another
toolchain judges its cells again, `--rerun` judges chosen cells again, a cell judged without runtime is judged
again once runtime is available (here faked at the GPU boundary: XLANG_FAKE_GPUS and the profiler's evaluate), and
a store made before identities resumes as before. Builds and censuses are real (cuda_ptx gemm for h100, nvcc)."""

from __future__ import annotations

import io
import json
import sqlite3

import pytest
from rich.console import Console

from xlang.compare import CompareConfig, run_compare

pytestmark = pytest.mark.usefixtures("fresh_versions")


@pytest.fixture
def fresh_versions():
    from xlang.agent import buildinfo

    buildinfo.toolchain_versions.cache_clear()
    yield
    buildinfo.toolchain_versions.cache_clear()


def _compare(db, **kw):
    out = io.StringIO()
    cfg = CompareConfig(archs=["h100"], langs=["cuda_ptx"], tasks=["gemm"], store=str(db), **kw)
    result = run_compare(cfg, Console(file=out, width=200, no_color=True), progress=False)
    return result, out.getvalue()


def _runs(db):
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return con.execute("SELECT run_id, status, superseded_by, config_json FROM runs ORDER BY created_at").fetchall()
    finally:
        con.close()


def _report_runs(db) -> list[str]:
    from xlang.report import source

    return sorted({r.split("#")[0] for r in source.load(str(db)).runs["run_id"]})


def _new_nvcc(monkeypatch, release="V13.9.99"):
    """Another nvcc/ptxas release, at the one place versions are read from (the build itself is the real one)."""
    from xlang.agent import buildinfo

    real = buildinfo.tool_release.__wrapped__
    buildinfo.tool_release.cache_clear()
    buildinfo.toolchain_versions.cache_clear()
    monkeypatch.setattr(buildinfo, "tool_release", lambda name: release if name in ("nvcc", "ptxas") else real(name))


def test_another_toolchain_judges_the_cells_again(tmp_path, monkeypatch):
    db = tmp_path / "r.db"
    first, _ = _compare(db, profiler="none")
    assert [o.state for o in first.cells] == ["done"]
    again, log = _compare(db, profiler="none")
    assert [o.state for o in again.cells] == ["stored"] and "1 cell(s) already stored, 0 to run" in log

    _new_nvcc(monkeypatch)
    later, log = _compare(db, profiler="none")
    assert [o.state for o in later.cells] == ["done"], log
    assert "nvcc V13.0.88 -> V13.9.99" in log or "-> V13.9.99" in log, log
    runs = _runs(db)
    assert len(runs) == 2 and runs[0][2] == runs[1][0] and runs[1][2] is None  # the old run kept, superseded
    assert json.loads(runs[1][3])["toolchain"]["nvcc"] == "V13.9.99"
    assert _report_runs(db) == [runs[1][0]]  # reports count the cell once, under the new toolchain
    assert later.cells[0].cell.run_id != first.cells[0].cell.run_id
    _, log = _compare(db, profiler="none")
    assert "1 cell(s) already stored, 0 to run" in log


def test_rerun_judges_a_stored_cell_again(tmp_path):
    db = tmp_path / "r.db"
    first, _ = _compare(db, profiler="none")
    second, log = _compare(db, profiler="none", rerun=True)
    assert [o.state for o in second.cells] == ["done"] and "--rerun" in log
    runs = _runs(db)
    assert [r[0] for r in runs] == [first.cells[0].cell.run_id, first.cells[0].cell.run_id + "-r2"]
    assert runs[0][2] == runs[1][0]
    assert _report_runs(db) == [runs[1][0]]
    third, _ = _compare(db, profiler="none", rerun=True)
    assert third.cells[0].cell.run_id.endswith("-r3")


def test_a_static_only_cell_is_judged_again_when_runtime_is_available(tmp_path, monkeypatch):
    import xlang.profiler.evaluate as evaluate_mod
    from xlang import verdict as V

    db = tmp_path / "r.db"
    static, _ = _compare(db, profiler="none")
    assert static.cells[0].state == "done"
    assert not bool(static.stats.iloc[0]["runtime_ran"])

    calls = []

    def fake_evaluate(build, lang, task, arch, shape, options):  # the GPU side; the build and census are real
        calls.append(build.ok)
        return V.Verdict(V.OK, detail="fake GPU", lang=lang, task=task.name, arch=arch.name, shape=dict(shape),
                         runtime_ran=True, compiled=True, census_ok=True, correct=True, executed_ok=True,
                         timing={"speedup": 0.95}, fingerprint={"gpu": "fake H100"})

    monkeypatch.setenv("XLANG_FAKE_GPUS", json.dumps([{"index": 0, "name": "fake H100", "compute_capability": 90}]))
    monkeypatch.setattr(evaluate_mod, "evaluate", fake_evaluate)
    local, log = _compare(db, profiler="local")
    assert local.cells[0].state == "done" and calls == [True], log
    assert "runtime now available" in log
    assert bool(local.stats.iloc[0]["runtime_ran"]) and local.stats.iloc[0]["correctness_rate"] == 1.0
    runs = _runs(db)
    assert len(runs) == 2 and runs[0][2] == runs[1][0]
    # Judged with runtime: stored for a compare with runtime and for one without (it holds more).
    for profiler in ("local", "none"):
        result, log = _compare(db, profiler=profiler)
        assert [o.state for o in result.cells] == ["stored"], (profiler, log)
    assert calls == [True]


def test_a_store_from_before_identities_resumes(tmp_path, monkeypatch):
    """A run stored under the cell key alone, with only its versions recorded (as every store before identities):
    the same toolchain finds it stored; another one judges the cell again and supersedes it."""
    db = tmp_path / "r.db"
    first, _ = _compare(db, profiler="none")
    run_id = first.cells[0].cell.run_id
    key = first.cells[0].cell.key
    con = sqlite3.connect(db)
    with con:
        con.execute("PRAGMA foreign_keys=OFF")
        for table in ("runs", "samples", "turns"):
            con.execute(f"UPDATE {table} SET run_id=? WHERE run_id=?", (key, run_id))
        con.execute("UPDATE runs SET config_json=json_remove(config_json, '$.toolchain'), superseded_by=NULL")
    con.close()
    again, log = _compare(db, profiler="none")
    assert [o.state for o in again.cells] == ["stored"] and again.cells[0].cell.run_id == key, log
    _new_nvcc(monkeypatch)
    later, log = _compare(db, profiler="none")
    assert [o.state for o in later.cells] == ["done"] and "V13.9.99" in log
    assert dict((r[0], r[2]) for r in _runs(db))[key] == later.cells[0].cell.run_id


def test_identity_rules():
    from xlang.identity import satisfies

    tc = {"harness": "4", "torch": "2.13.0", "triton": "3.6.0", "cuobjdump": "V13.5.37"}
    static_run = {"config": {"runtime": "none", "runtime_note": "not run (--profiler none)",
                             "toolchain": {**tc, "runtime": False}}}
    gpu_run = {"profiler": "local", "config": {"runtime": "local", "runtime_note": "",
                                               "toolchain": {**tc, "runtime": True, "driver": "580"}}}
    assert satisfies(static_run, [], {**tc, "runtime": False})
    assert not satisfies(static_run, [], {**tc, "runtime": True, "driver": "580"})
    assert satisfies(gpu_run, [], {**tc, "runtime": True, "driver": "580"})
    assert not satisfies(gpu_run, [], {**tc, "runtime": True, "driver": "590"})
    assert satisfies(gpu_run, [], {**tc, "runtime": False})
    assert not satisfies(gpu_run, [], {**tc, "triton": "3.9.0", "runtime": False})
    lost = [{"verdict": {"build": {"ok": True}, "category": "static_ok",
                         "runtime_note": "not run (the ray profiler failed: RayTaskError)"}}]
    assert not satisfies(gpu_run, lost, {**tc, "runtime": True, "driver": "580"})
    legacy = {"profiler": "none", "versions": {"python": "3.11", "triton": "3.6.0", "torch": "2.13.0",
                                               "nvcc": "V13.0.88", "driver": "none"},
              "config": {"runtime": "none", "runtime_note": "not run (--profiler none)"}}
    assert satisfies(legacy, [], {**tc, "runtime": False})
    assert not satisfies(legacy, [], {**tc, "triton": "3.9.0", "runtime": False})


def test_compare_rerun_on_the_command_line(tmp_path):
    """`xlang compare ... --rerun` (the flag #37 asked for): the stored cell is judged again, the old run kept."""
    from typer.testing import CliRunner

    from xlang.cli import app

    db = tmp_path / "r.db"
    args = ["compare", "--arch", "h100", "--langs", "cuda_ptx", "--tasks", "gemm", "--profiler", "none",
            "--store", str(db)]
    runner = CliRunner()
    first = runner.invoke(app, args, env={"COLUMNS": "300"})
    assert first.exit_code == 0, first.output
    again = runner.invoke(app, args + ["--rerun"], env={"COLUMNS": "300"})
    assert again.exit_code == 0 and "1 cell(s): --rerun" in again.output, again.output
    runs = _runs(db)
    assert len(runs) == 2 and runs[0][2] == runs[1][0] and runs[1][2] is None
