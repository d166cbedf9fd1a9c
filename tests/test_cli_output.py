"""What the terminal and the report's tables say (issue 48): ✓ only beside a passing verdict, ✗ beside a finished
failure, ○ where there is no verdict; a cell count whose factors multiply to it, with suites; suite runs apart from
plain runs in every score table; short model labels with the whole name in a footnote, so that `xlang rejudge` of a
store shows its figures on a 120-column terminal. Real builds (CliRunner, temp stores, static: no GPU)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from typer.testing import CliRunner

from report_records import records, run, verdict
from xlang.cli import app
from xlang.compare import CompareConfig, count_text, plan, validate
from xlang.report import marks, tables
from xlang.report.data import from_records

ROOT = Path(__file__).resolve().parent.parent


def test_marks_follow_the_verdict_categories():
    assert [marks.outcome(c) for c in ("ok", "static_ok")] == [marks.PASS] * 2
    assert {marks.outcome(c) for c in ("compile_error", "missing_instructions", "incorrect", "not_executed")} == \
        {marks.FAIL}
    # no verdict: the harness's own failure, a missing or unknown category, a run that never judged anything
    assert {marks.outcome(c) for c in ("harness_error", None, "", "missing", "error", "a_new_category")} == \
        {marks.NONE}
    assert marks.worst(["ok", "compile_error"]) == marks.FAIL and marks.worst(["ok", None]) == marks.NONE
    assert marks.worst(["static_ok", "ok"]) == marks.PASS and marks.worst([]) == marks.NONE
    fails = marks.failing_categories()
    assert "compile_error" in fails and "ok" not in fails and "static_ok" not in fails
    terms = [t for t, _ in marks.legend()]
    assert terms[:3] == ["✓", "✗", "○"] and {"static_ok", "not run", "missing", "harness_error"} <= set(terms)


def test_the_cell_count_adds_up_with_suites():
    """gemm carries llama3-8b and deepseek-v3, attn_fwd only llama3-8b: 3 task runs × 1 arch × 2 languages."""
    cfg = validate(CompareConfig(archs=["b200"], langs=["triton", "cuda_ptx"], tasks=["gemm", "attn_fwd"],
                                 suites=["llama3-8b", "deepseek-v3"]))
    cells = plan(cfg)
    text = count_text(cfg, cells)
    assert len(cells) == 6
    assert text == ("3 task run(s) (gemm: llama3-8b, deepseek-v3; attn_fwd: llama3-8b) × 1 arch(s) × 2 language(s) "
                    "= 6 cells"), text
    factors = [int(n) for n in re.findall(r"(\d+) (?:task run|arch|language)", text)]
    assert factors[0] * factors[1] * factors[2] == len(cells)
    plain = validate(CompareConfig(archs=["b200", "h100"], langs=["triton"], tasks=["gemm"]))
    assert count_text(plain, plan(plain)) == "1 task(s) × 2 arch(s) × 1 language(s) = 2 cells"


def test_suite_runs_are_a_separate_axis_in_every_table():
    """A suite run and a plain run of the same cell were one group of n=2 in the tables without a suite column."""
    suite = run("g-t-h-s", "gemm", "triton", "h100", 0, [verdict("ok", "h100", "triton", "gemm", 1.2)])
    suite["suite"] = "llama3-8b"
    ds = from_records([*records(), suite])
    for table in (tables.main_table(ds), tables.turn_limit_table(ds), tables.docs_table(ds), tables.cell_stats(ds)):
        assert "suite" in table.columns
        rows = table[(table["arch"] == "h100") & (table["lang"] == "triton")]
        assert set(rows["suite"]) == {"", "llama3-8b"}
        if "task" in table.columns:
            assert rows[rows["suite"] == "llama3-8b"]["n"].max() == 1
    _, lang_arch = tables.lang_arch_table(ds)
    assert "suite" in lang_arch.columns and len(lang_arch[lang_arch["task"] == "gemm"]) == 3  # 2 langs + suite row
    from xlang.report import compute_tables

    t = compute_tables(ds)
    for name in ("main_display", "turn_limits_display", "docs_display", "cells_display"):
        assert "suite" in t[name].columns, name
        assert not t[name].duplicated().any(), name


def test_rejudge_marks_failures_and_shows_figures_at_120_columns(tmp_path):
    folder = tmp_path / "cands" / "triton"
    folder.mkdir(parents=True)
    shutil.copy(ROOT / "tests/kernels/bad/syntax_error.py", folder / "gemm_syntax_error.py")
    old, new = tmp_path / "old.db", tmp_path / "new.db"
    runner = CliRunner()
    env = {"COLUMNS": "120", "XLANG_STORE": ""}
    r = runner.invoke(app, ["rejudge", str(folder.parent), "experts", "--task", "gemm", "--langs", "triton",
                            "--arch", "b200", "--profiler", "none", "--store", str(old)], env=env)
    assert r.exit_code == 0, r.output
    assert "2 cells (one per stored run, candidate file or expert" in r.output
    assert "✗ gemm · triton · b200: compile_error" in r.output
    assert "✓ gemm · triton · b200: static_ok" in r.output
    assert not re.search(r"✓ [^\n]*: (compile_error|missing_instructions)", r.output)
    assert "✓ passed (ok, static_ok) · ✗ finished but failed · static_ok: built" in r.output  # the marks shown

    r = runner.invoke(app, ["rejudge", str(old), "--profiler", "none", "--store", str(new)], env=env)
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert max(map(len, lines)) <= 120
    # short labels, the whole replay source in a footnote, and the figures beside them
    rows = [ln for ln in lines if ln.startswith(" gemm ") and "replay:old.db" in ln]
    assert len(rows) >= 2 and any("compile_error" in ln and "0% (0/1)" in ln and "✗" in ln for ln in rows), rows
    assert any("static_ok" in ln and "100%" in ln and "✓" in ln for ln in rows), rows
    assert any(re.match(rf"^[¹²³⁴⁵] replay:{re.escape(str(old.resolve()))}#", ln) for ln in lines), r.output


def test_a_missing_expert_is_no_verdict(tmp_path):
    r = CliRunner().invoke(app, ["compare", "--arch", "b200", "--langs", "gluon", "--tasks", "attn_decode_paged",
                                 "--store", str(tmp_path / "r.db")], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    assert "○ attn_decode_paged · gluon · b200: missing" in r.output and "✓ attn_decode_paged" not in r.output
    assert "○ no verdict (not run, missing, harness_error)" in r.output and "✓ passed" not in r.output
