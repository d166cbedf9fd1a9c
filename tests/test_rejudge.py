"""`xlang rejudge`: a folder of candidate files and the experts judged into a store (real builds and censuses,
cuda_ptx gemm for h100, static), that store judged again into a second one (replayed candidates), resumed, and
compared with `xlang diff` (the same toolchain: every candidate matched, nothing changed)."""

from __future__ import annotations

import io
import shutil
from pathlib import Path

from rich.console import Console

ROOT = Path(__file__).resolve().parent.parent


def _rejudge(paths, store, **kw):
    from xlang.rejudge import run_rejudge

    out = io.StringIO()
    result = run_rejudge([str(p) for p in paths], str(store), profiler="none",
                         console=Console(file=out, width=400, no_color=True), progress=False, **kw)
    return result, out.getvalue()


def test_rejudge_files_and_experts_then_a_store(tmp_path):
    folder = tmp_path / "cands" / "cuda_ptx"
    folder.mkdir(parents=True)
    shutil.copy(ROOT / "tests/kernels/agent/gemm_fma.cu", folder / "gemm_fma.cu")
    a, b = tmp_path / "a.db", tmp_path / "b.db"
    first, log = _rejudge([folder.parent, "experts"], a, archs=["h100"], langs=["cuda_ptx"], tasks=["gemm"])
    assert sorted(o.state for o in first.cells) == ["done", "done"], log
    cats = {o.cell.options["model"].split("/")[-1]: o.summary for o in first.cells}
    assert cats["reference"].startswith("static_ok") and cats["gemm_fma.cu"].startswith("missing_instructions")
    again, log = _rejudge([folder.parent, "experts"], a, archs=["h100"], langs=["cuda_ptx"], tasks=["gemm"])
    assert [o.state for o in again.cells] == ["stored", "stored"] and "2 cell(s) already stored, 0 to run" in log

    second, log = _rejudge([a], b)
    assert [o.state for o in second.cells] == ["done", "done"], log
    assert all(o.cell.options["model"].startswith(f"replay:{a.resolve()}#") for o in second.cells)
    from xlang.diff import diff

    d = diff(a, b)
    assert len(d.candidates) == 2 and (d.candidates["old"] == d.candidates["new"]).all()
    assert set(d.candidates["candidate"]) == {"expert", "gemm_fma.cu"} and not d.only_new
    (text,) = d.sentences()
    assert "2/2 candidates matched" in text and "no family gained or lost" in text
    assert not any(d.candidates["lost"]) and not any(d.candidates["gained"])
    _, log = _rejudge([a], b)
    assert "2 cell(s) already stored, 0 to run" in log


def test_rejudge_says_what_it_cannot_judge(tmp_path):
    import pytest

    from xlang.errors import XlangError

    with pytest.raises(XlangError, match="needs --arch"):
        _rejudge(["experts"], tmp_path / "x.db")
    with pytest.raises(XlangError, match="no such store, file or folder"):
        _rejudge([tmp_path / "nothing.db"], tmp_path / "x.db")
    odd = tmp_path / "odd"
    odd.mkdir()
    (odd / "kernel.py").write_text("x = 1\n")
    with pytest.raises(XlangError, match="which language"):
        _rejudge([odd], tmp_path / "x.db", archs=["h100"])


def test_a_build_stopped_by_its_limit_is_told_apart_from_a_compile_error(monkeypatch):
    """$XLANG_BUILD_TIMEOUT_S sets the default build limit (a shared machine); a build it stops says so, and
    xlang diff counts it as a time-out, not as a compile error."""
    from xlang.archs import get_arch
    from xlang.backend import BUILD_TIMEOUT_ENV, build_candidate, build_timed_out
    from xlang.task import get_task

    monkeypatch.setenv(BUILD_TIMEOUT_ENV, "0.01")
    code = (ROOT / "tests/kernels/triton/gemm_tma.py").read_text()
    result = build_candidate(code, "triton", get_task("gemm"), get_arch("h100"), cache=False)
    assert not result.ok and build_timed_out(result.error), result.error
    assert not build_timed_out("error: identifier \"wgmma\" is undefined")


def test_task_filters_the_experts_and_stores_as_the_readme_says(tmp_path):
    """README's `xlang rejudge experts tests/kernels/triton --task gemm --langs triton,gluon --arch h100,b200` judged
    all 44 expert cells (issue 48): --task is the candidate files' task and, for the experts and a store's runs, a
    filter. The README line plans the gemm experts in triton and gluon and the two files, for both archs: 8 cells."""
    from typer.testing import CliRunner

    from xlang.cli import app
    from xlang.compare import CompareConfig
    from xlang.rejudge import plan_cells, sources

    cfg = CompareConfig(archs=["h100", "b200"], langs=["triton", "gluon"])
    cells = plan_cells(cfg, sources(["experts", str(ROOT / "tests/kernels/triton")], ["h100", "b200"],
                                    ["triton", "gluon"], [], "gemm", None))
    assert {c[0] for c in cells} == {"gemm"} and len(cells) == 8, [c[:3] for c in cells]
    assert sorted({(c[1], c[2]) for c in cells}) == [("gluon", "b200"), ("gluon", "h100"), ("triton", "b200"),
                                                     ("triton", "h100")]
    store = tmp_path / "old.db"
    r = CliRunner().invoke(app, ["rejudge", "experts", "--task", "gemm", "--langs", "triton", "--arch", "b200",
                                 "--profiler", "none", "--store", str(store)], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    assert "1 cells (one per stored run, candidate file or expert, across 1 task(s)" in r.output
    assert "✓ gemm · triton · b200: static_ok" in r.output
    # ... and the store's runs judged again are filtered the same way
    cells = plan_cells(cfg, sources([str(store)], [], [], [], "attn_fwd", None))
    assert cells == []
