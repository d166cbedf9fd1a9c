"""`xlang compare` end to end on this CPU-only machine: README's main command ends with a static table for triton
and cuda_ptx on b200 (a missing expert solution would show as missing); a run killed with SIGKILL mid-way and run again
ends with the same table, no duplicate rows, and nothing that was finished done again."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from xlang.compare import CompareConfig, cell_run_id, plan, validate

ROOT = Path(__file__).resolve().parent.parent
README_ARGS = ["compare", "--arch", "b200", "--langs", "triton,cuda_ptx"]
NOT_RUN = "not run (no sm_100a device)"


def _xlang(args, store, **kw):
    """Run xlang in the store's project folder; the store is the default one there (a relative path), and so
    is its build cache: a cache warmed by an earlier run would let the compare finish before a kill lands."""
    assert store.parent.name == "xlang-runs" and store.name == "results.db"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200",
           "XLANG_BUILD_CACHE": str(store.parent / "build-cache")}
    env.pop("XLANG_STORE", None)
    return subprocess.Popen([sys.executable, "-m", "xlang", *args], cwd=store.parent.parent, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True, **kw)


def _finish(proc, timeout=240):
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err[-3000:]
    return out, err


def _rows(db: Path, sql: str) -> list[tuple]:
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def _table(out: str) -> list[dict]:
    rows = json.loads(out)["table"]
    return sorted(rows, key=lambda r: (r["task"], r["arch"], r["lang"]))


def test_plan_and_run_ids_are_deterministic():
    cfg = validate(CompareConfig(archs=["b200", "h100"], langs=["triton", "cuda_ptx"], tasks=["gemm"]))
    cells = plan(cfg)
    assert [(c.arch, c.lang) for c in cells] == [("b200", "triton"), ("b200", "cuda_ptx"), ("h100", "triton"),
                                                 ("h100", "cuda_ptx")]
    assert cells[0].run_id == cell_run_id(cfg, "gemm", "triton", "b200")
    other = validate(CompareConfig(archs=["b200"], langs=["triton"], tasks=["gemm"], turns=4))
    assert cell_run_id(other, "gemm", "triton", "b200") != cells[0].run_id
    assert validate(CompareConfig(archs=["b200"], langs=["triton"])).tasks == sorted(validate(
        CompareConfig(archs=["b200"], langs=["triton"])).tasks)
    from xlang.errors import XlangError

    with pytest.raises(XlangError, match="unknown language"):
        validate(CompareConfig(archs=["b200"], langs=["fortran"]))
    with pytest.raises(XlangError, match="unknown architecture"):
        validate(CompareConfig(archs=["z9"], langs=["triton"]))


@pytest.mark.slow
def test_readme_command_then_sigkill_and_resume(tmp_path):
    # 1. README's main command, uninterrupted: every task, static table, runtime not run on b200.
    (tmp_path / "a").mkdir()
    store_a = tmp_path / "a" / "xlang-runs" / "results.db"
    out, err = _finish(_xlang(README_ARGS + ["--json"], store_a))
    table = _table(out)
    from xlang.task import task_names

    assert {r["task"] for r in table} == set(task_names()) and {r["arch"] for r in table} == {"b200"}
    gemm = {r["lang"]: r for r in table if r["task"] == "gemm"}
    for lang in ("triton", "cuda_ptx"):  # the expert solutions: compiled for sm_100a, required families present
        cell = gemm[lang]
        if lang == "triton" or not cell["missing"]:
            assert not cell["missing"] and cell["n"] == 1, lang
            assert cell["compile_rate"] == 1.0 and cell["static_rate"] == 1.0, lang
            assert not cell["runtime_ran"] and cell["runtime_note"] == NOT_RUN and cell["correctness_rate"] is None
    for r in table:
        assert r["missing"] or r["runtime_note"] == NOT_RUN
    assert NOT_RUN in err and "Blackwell runtime was not run" in err
    # Both languages have a Blackwell expert for every task since 2026-11-30; a missing one would show so.
    assert ("missing" in err) == any(r["missing"] for r in table)
    assert "gemm" in err and "triton" in err and "cuda_ptx" in err

    # 2. The same command on a fresh store, killed with SIGKILL once the cells before gemm are stored and a gemm
    #    cell is under way.
    (tmp_path / "b").mkdir()
    store_b = tmp_path / "b" / "xlang-runs" / "results.db"
    proc = _xlang(README_ARGS, store_b)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if _rows(store_b, "SELECT count(*) FROM runs WHERE task='gemm'")[0][0]:
                break
        except sqlite3.Error:
            pass
        time.sleep(0.02)
    assert proc.poll() is None, "the compare finished before it could be killed"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate()
    before = _rows(store_b, "SELECT run_id, sample_idx, status, started_at, finished_at FROM samples "
                            "WHERE status IN ('done', 'missing')")
    unfinished_runs = _rows(store_b, "SELECT count(*) FROM runs WHERE status != 'done'")[0][0]
    assert before and unfinished_runs >= 1, "the kill did not land mid-way"

    # 3. Resume: same command, same store.
    out_b, err_b = _finish(_xlang(README_ARGS + ["--json"], store_b))
    assert "already stored" in err_b
    assert _table(out_b) == table
    after = {r[:2]: r for r in _rows(store_b, "SELECT run_id, sample_idx, status, started_at, finished_at "
                                              "FROM samples")}
    for row in before:  # finished work was not done again
        assert after[row[:2]] == row
    n_cells = len(table)
    assert _rows(store_b, "SELECT count(*), count(DISTINCT task || lang || arch) FROM runs") == [(n_cells, n_cells)]
    assert _rows(store_b, "SELECT count(*) FROM samples")[0][0] == n_cells
    assert _rows(store_b, "SELECT count(*) FROM runs WHERE status != 'done'")[0][0] == 0
    # One stored turn per reference candidate, in both stores.
    turns_a = _rows(store_a, "SELECT r.task, r.lang, t.turn_idx, t.category FROM turns t JOIN runs r USING (run_id) "
                             "ORDER BY 1, 2, 3")
    turns_b = _rows(store_b, "SELECT r.task, r.lang, t.turn_idx, t.category FROM turns t JOIN runs r USING (run_id) "
                             "ORDER BY 1, 2, 3")
    assert turns_a == turns_b

    # 4. A report of the resumed store says what was not run.
    proc = _xlang(["report", "--store", str(store_b), "--out", str(tmp_path / "rep")], store_b)
    _finish(proc)
    html = (tmp_path / "rep" / "index.html").read_text()
    assert "Blackwell runtime was not run" in html and NOT_RUN in html


def test_a_new_harness_names_new_cell_runs(monkeypatch):
    """Verdicts of a harness that times differently are not resumed as if they were the new one's."""
    import xlang

    cfg = validate(CompareConfig(archs=["h100"], langs=["triton"], tasks=["gemm"]))
    now = cell_run_id(cfg, "gemm", "triton", "h100")
    current = xlang.HARNESS_VERSION
    monkeypatch.setattr(xlang, "HARNESS_VERSION", "3")
    before = cell_run_id(cfg, "gemm", "triton", "h100")
    monkeypatch.setattr(xlang, "HARNESS_VERSION", current + ".next")  # a later harness than the current one
    assert len({now, before, cell_run_id(cfg, "gemm", "triton", "h100")}) == 3


def test_a_missing_expert_is_marked_apart_from_a_finished_cell(tmp_path):
    """A cell with no expert solution (Gluon has no paged decode) is printed with '○' (no verdict), not the '✓'
    of a passing cell, so a log without colour does not read it as judged; nothing is judged for it."""
    from rich.console import Console

    from xlang.compare import run_compare

    cfg = CompareConfig(archs=["b200"], langs=["gluon"], tasks=["attn_decode_paged"], store=str(tmp_path / "r.db"))
    out = tmp_path / "out.txt"
    with open(out, "w") as f:
        result = run_compare(cfg, Console(file=f, width=200, no_color=True), progress=False)
    text = out.read_text()
    assert "○ attn_decode_paged · gluon · b200: missing: no expert solution" in text, text
    assert "✓ attn_decode_paged · gluon" not in text
    assert bool(result.stats.iloc[0]["missing"])
