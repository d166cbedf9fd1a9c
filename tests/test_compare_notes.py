"""`xlang compare --notes none,bm25 --notes-store ...`: the fix-note level is an axis of the matrix (one cell per
level, each its own run), recorded per run, and the compare's table and the report keep the levels apart.

A scripted litellm model (no network) replies with a candidate that does not compile, then with one that compiles
(plain FMA: missing_instructions under --profiler none); the notes store holds one compile-error note, which the
bm25 cell's first feedback must carry and the none cell's must not."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from xlang.store import Store

ROOT = Path(__file__).resolve().parent.parent
FMA = (ROOT / "tests" / "kernels" / "triton" / "fma_only.py").read_text()
BAD = ('import triton\nimport triton.language as tl\n\n@triton.jit\ndef k(C, N):\n'
       '    i = tl.arange(0, 128)\n    tl.store(C + i, undefined_tile_value)\n\n'
       'def xlang_entry(A, B, C, M, N, K):\n    k[(1,)](C, N)\n')
NOTE = {"id": "n-undefined", "category": "compile_error", "task": "gemm", "lang": "triton", "arch": "h100",
        "error": "NameError: undefined_tile_value is not defined", "note": "define the tile before storing it",
        "fixed_code": FMA}


@pytest.fixture()
def scripted():
    from xlang.agent.llm import litellm_module

    litellm = litellm_module()

    class Scripted(litellm.CustomLLM):
        def completion(self, *args, **kwargs):
            messages = kwargs["messages"]
            turn = sum(1 for m in messages if m["role"] == "assistant")
            code = BAD if turn == 0 else FMA
            return litellm.completion(model="gpt-4o", messages=messages, mock_response=f"```python\n{code}\n```")

    old = list(litellm.custom_provider_map)
    litellm.custom_provider_map = old + [{"provider": "xlangnotes", "custom_handler": Scripted()}]
    yield
    litellm.custom_provider_map = old


def test_compare_notes_is_an_axis(scripted, tmp_path, monkeypatch):
    from xlang.cli import app
    from xlang.report import source, tables

    monkeypatch.setenv("XLANG_BUILD_CACHE", str(tmp_path / "cache"))
    notes = tmp_path / "notes.jsonl"
    notes.write_text(json.dumps(NOTE) + "\n")
    db = tmp_path / "r.db"
    args = ["compare", "--arch", "h100", "--langs", "triton", "--tasks", "gemm", "--model", "xlangnotes/student",
            "--turns", "2", "--profiler", "none", "--notes", "none,bm25", "--notes-store", str(notes),
            "--store", str(db), "--json", "--concurrency", "1"]
    res = CliRunner().invoke(app, args, env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    table = json.loads(res.stdout[res.stdout.index("{"):])["table"]
    assert sorted(r["notes"] for r in table) == ["bm25", "none"]  # two cells, not one pooled
    with Store(db, readonly=True) as s:
        runs = {r["notes_level"]: r for r in s.runs()}
        assert set(runs) == {"none", "bm25"} and runs["none"]["run_id"] != runs["bm25"]["run_id"]
        with_notes = s.turns(run_id=runs["bm25"]["run_id"])
        without = s.turns(run_id=runs["none"]["run_id"])
    assert with_notes[0]["category"] == "compile_error" and with_notes[0]["notes"][0]["id"] == "n-undefined"
    assert "define the tile before storing it" in with_notes[0]["feedback"]
    assert without[0]["notes"] is None and "Notes from earlier fixes" not in without[0]["feedback"]
    cells = tables.cell_stats(source.load(db))
    assert "notes" in cells.columns and len(cells) == 2
    # The same command again resumes: both cells are stored, nothing is run again.
    again = CliRunner().invoke(app, args, env={"COLUMNS": "200"})
    assert again.exit_code == 0 and "2 cell(s) already stored, 0 to run" in again.output
    # Other notes are other cell runs.
    notes.write_text(json.dumps({**NOTE, "note": "another note"}) + "\n")
    from xlang.compare import CompareConfig, plan, validate

    cfg = validate(CompareConfig(archs=["h100"], langs=["triton"], tasks=["gemm"], model="xlangnotes/student",
                                 turns=2, profiler="none", notes=["none", "bm25"], notes_store=str(notes)))
    keys = {c.notes: c.key for c in plan(cfg)}
    assert runs["none"]["run_id"].startswith(keys["none"] + "-t")
    assert not runs["bm25"]["run_id"].startswith(keys["bm25"])


def test_compare_notes_options_are_checked(tmp_path):
    from xlang.compare import CompareConfig, validate
    from xlang.errors import XlangError

    base = dict(archs=["h100"], langs=["triton"], tasks=["gemm"])
    with pytest.raises(XlangError, match="needs --notes-store"):
        validate(CompareConfig(notes=["none", "bm25"], **base))
    with pytest.raises(XlangError, match="unknown"):
        validate(CompareConfig(notes=["vectors"], notes_store=str(tmp_path / "n.jsonl"), **base))
    with pytest.raises(XlangError, match="no such notes file"):
        validate(CompareConfig(notes=["bm25"], notes_store=str(tmp_path / "n.jsonl"), **base))
