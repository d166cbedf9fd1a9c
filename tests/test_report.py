"""Report tables, files and the store adapter (xlang.report), on hand-made records."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from report_records import NOT_RUN, records
from xlang.report import mix, parquet_engine, provenance, tables, turn_tables, write_report
from xlang.report.data import from_records


@pytest.fixture(scope="module")
def ds():
    return from_records(records(), [{"host": "test-box", "python": "3.11"}], source="test")


def _cell(stats, task, arch, lang):
    row = stats[(stats.task == task) & (stats.arch == arch) & (stats.lang == lang)]
    assert len(row) == 1
    return row.iloc[0]


def test_cell_stats_follow_ptxbench(ds):
    stats = tables.cell_stats(ds)
    t = _cell(stats, "gemm", "h100", "triton")
    assert t.n == 2 and t.runtime_ran and t.n_runtime == 2
    assert t.correctness_rate == 1.0 and t.correct_with_arch_rate == 1.0
    assert t.best_speedup == pytest.approx(1.1) and t.n_speedup == 2
    assert t.best_speedup_correct == pytest.approx(1.1) and t.n_speedup_correct == 2
    # 2/2: the Wilson interval of 2 successes in 2 (z = 1.96) is [0.342, 1].
    assert t.correctness_lo == pytest.approx(0.3424, abs=1e-3) and t.correctness_hi == 1.0
    assert t.compile_rate == 1.0 and t.static_rate == 1.0
    c = _cell(stats, "gemm", "h100", "cuda_ptx")
    assert c.correctness_rate == 0.0 and c.n_speedup == 0 and math.isnan(c.best_speedup)
    tb = _cell(stats, "gemm", "b200", "triton")
    assert not tb.runtime_ran and tb.runtime_note == NOT_RUN and math.isnan(tb.correctness_rate)
    assert tb.static_rate == 1.0
    assert _cell(stats, "gemm", "b200", "cuda_ptx").static_rate == 0.0
    assert _cell(stats, "attn_fwd", "h100", "cuda_ptx").missing
    unfinished = _cell(stats, "attn_fwd", "h100", "triton")
    assert unfinished.n == 0 and unfinished.unfinished == 1


def test_turn_limits(ds):
    # Within 1 turn: sample 1 was correct (not_executed) but without the arch instructions; nothing else. Its
    # speedup counts among all correct candidates, not among those correct with the target instructions.
    one = tables.cell_stats(ds, limit=1)
    t = _cell(one, "gemm", "h100", "triton")
    assert t.correctness_rate == 0.5 and t.correct_with_arch_rate == 0.0
    assert math.isnan(t.best_speedup) and t.n_speedup == 0
    assert t.best_speedup_correct == 0.5 and t.n_speedup_correct == 1
    four = _cell(tables.cell_stats(ds, limit=4), "gemm", "h100", "triton")
    assert four.correct_with_arch_rate == 0.5
    table = tables.turn_limit_table(ds)
    row = table[(table.arch == "h100") & (table.lang == "triton")].set_index("turns")
    assert list(row.index) == [1, 4, 8]
    assert list(row.correct_with_arch_rate) == [0.0, 0.5, 1.0]
    # b200 runs had a turn limit of 1: they speak for limit 1 only, and with no runtime.
    b = table[table.arch == "b200"]
    assert set(b.turns) == {1} and (b.n_runtime == 0).all()


def test_display_says_missing_and_not_run(ds):
    display = tables.format_cells(tables.cell_stats(ds))
    row = display[(display.task == "gemm") & (display.arch == "b200") & (display.lang == "triton")].iloc[0]
    assert row["correct"] == NOT_RUN and row[tables.COL_SPEED] == NOT_RUN and row[tables.COL_SPEED_ALL] == NOT_RUN
    assert row[tables.COL_STATIC] == "100% (1/1)"
    missing = display[(display.task == "attn_fwd") & (display.lang == "cuda_ptx")].iloc[0]
    assert set(missing.drop(["task", "arch", "lang", "n", tables.COL_MARK])) == {"missing"}
    assert missing[tables.COL_MARK] == "○"  # no verdict: neither the ✓ of a pass nor the ✗ of a failure
    assert (row[tables.COL_MARK], row[tables.COL_VERDICT]) == ("✓", "static_ok")
    t = display[(display.task == "gemm") & (display.arch == "h100") & (display.lang == "triton")].iloc[0]
    assert t["correct"] == "100% (2/2) [34–100%]" and t[tables.COL_SPEED].startswith("1.10× (2/2) [")
    # Order: task, then arch in registry order (h100 before b200), then language (triton, cuda_ptx, cutedsl).
    gemm = display[display.task == "gemm"]
    assert list(zip(gemm.arch, gemm.lang)) == [("h100", "triton"), ("h100", "cuda_ptx"), ("b200", "triton"),
                                               ("b200", "cuda_ptx")]


def test_instruction_mix_classes_are_read_from_archs_toml():
    """mix.py names no opcode (issue 48): every class and its opcodes come from archs.toml, and a class's entries
    decide what it takes (first class first: WARPSYNC is listed under barriers and control, barriers wins)."""
    import re
    import tomllib

    import xlang

    toml = tomllib.loads((Path(xlang.__file__).parent / "archs.toml").read_text())["mix"]
    source = Path(mix.__file__).read_text()
    for name, opcodes in toml["classes"].items():
        assert name in mix.MIX_ORDER
        for op in opcodes:
            assert not re.search(rf"\b{re.escape(op)}\b", source), f"mix.py names {op}"
        for op in opcodes:
            if re.fullmatch(r"[A-Z0-9_]+", op):  # a plain name: the first class that lists it takes it
                first = next(n for n, ops in toml["classes"].items() if op in ops)
                assert mix.mix_class(op) == first
    assert mix.mix_class("WARPSYNC") == "barriers and sync" and mix.mix_class("BRA") == "control"
    assert mix.MIX_OTHER == toml["other"] == mix.mix_class("IMAD") and mix.MIX_ORDER[-1] == mix.MIX_OTHER


def test_instruction_mix_and_not_run(ds):
    table = mix.instruction_mix(ds)
    for _, r in table.iterrows():
        assert sum(r[c] for c in mix.MIX_ORDER) == pytest.approx(1.0)
    b = table[(table.arch == "b200") & (table.lang == "triton")].iloc[0]
    assert b["tensor core: wgmma / tcgen05"] == pytest.approx(24 / 144)
    assert mix.mix_class("HGMMA") == mix.mix_class("UTCHMMA") == "tensor core: wgmma / tcgen05"
    assert mix.mix_class("UTMALDG") == "TMA and bulk copies"
    nr = provenance.not_run(ds)
    assert set(nr.what) == {"runtime", "candidate", "run", "peer"}
    # these records' timed verdicts predate peers: each such cell says so
    assert (nr[nr.what == "peer"].reason == "not run (no peer timed: a verdict from before peers)").all()
    assert (nr[nr.what == "runtime"].reason == NOT_RUN).all()
    banners = provenance.runtime_banners(ds)
    assert any("Blackwell runtime was not run (no sm_100a device)" in b for b in banners)
    assert not any(b.startswith("h100") for b in banners)


def test_blackwell_absent_is_still_said(ds):
    hopper_only = from_records([r for r in records() if r["arch"] == "h100"])
    assert any("b200" in b and "Blackwell runtime was not run" in b for b in provenance.runtime_banners(hopper_only))


def test_write_report_files(ds, tmp_path):
    rep = write_report(ds, tmp_path / "out")
    html = rep.index.read_text()
    assert "Blackwell runtime was not run" in html and "not run (no sm_100a device)" in html
    # 5 plots: these records hold no token counts (reference runs), so the tokens plot is left out (issue 37)
    assert html.count('class="plot"') == 5 and "test-box" in html and "NVIDIA H200" in html
    for name in ("main", "cells", "turn_limits", "docs", "lang_arch", "shapes", "errors", "transitions", "tokens",
                 "cost"):
        assert f'id="{name}-table"' in html, name
    md = rep.markdown.read_text()
    assert "| gemm | b200 | triton | 1 |" in md and "Blackwell runtime was not run" in md
    for p in rep.plots:
        assert p.stat().st_size > 5000 and p.read_bytes()[:4] == b"\x89PNG"
    cells = pd.read_csv(tmp_path / "out" / "data" / "cells.csv")
    assert len(cells) == len(tables.cell_stats(ds))
    main = pd.read_csv(tmp_path / "out" / "data" / "main.csv")
    assert len(main) == len(tables.main_table(ds))
    names = {p.stem for p in rep.csv}
    assert {"main", "main_display", "cells", "turn_limits", "docs", "lang_arch", "shapes", "errors", "transitions",
            "tokens", "cost", "instruction_mix", "not_run", "environment", "runs", "turns"} <= names
    if parquet_engine():
        assert {p.stem for p in rep.parquet} == names
        assert len(pd.read_parquet(tmp_path / "out" / "data" / "turns.parquet")) == len(ds.turns)
    else:
        assert not rep.parquet and "Parquet not written" in html


def test_empty_report(tmp_path):
    rep = write_report(from_records([]), tmp_path / "empty")
    assert "Blackwell runtime was not run" in rep.index.read_text()
    # Runs but no evaluated turn (every expert solution missing): the tables still come out.
    only_missing = from_records([r for r in records() if r["status"] == "missing"])
    rep = write_report(only_missing, tmp_path / "missing")
    cells = tables.cell_stats(only_missing)
    assert len(cells) == 1 and cells.iloc[0]["missing"] and "missing" in rep.markdown.read_text()


def test_load_from_store(tmp_path):
    """The adapter reads what the agent loop writes (xlang.store): samples become report runs."""
    from xlang.report import source
    from xlang.store import Store

    db = tmp_path / "r.db"
    with Store(db) as store:
        for rec in records():
            run_id = rec["run_id"]
            store.create_run(run_id, task=rec["task"], lang=rec["lang"], arch=rec["arch"], model="reference",
                             source="reference", docs_level="contracts", turns_limit=rec["turns_limit"], samples=1,
                             versions={"python": "3.11", "triton": "3.6.0"})
            store.start_sample(run_id, 0)
            for t in rec["turns"]:
                store.add_turn(run_id, 0, t["turn"], messages=[], verdict=t["verdict"],
                               build=t["verdict"]["build"])
            store.update_sample(run_id, 0, status=rec["status"])
            store.finish_run(run_id)
    loaded = source.load(db)
    assert len(loaded.runs) == len(records()) and len(loaded.turns) == len(from_records(records()).turns)
    a = tables.format_cells(tables.cell_stats(loaded)).drop(columns=[])
    b = tables.format_cells(tables.cell_stats(from_records(records())))
    pd.testing.assert_frame_equal(a, b)
    assert {"recorded by": "xlang run", "python": "3.11", "triton": "3.6.0"} in loaded.environments
    only = source.load(db, ["g-t-b-0"])
    assert list(only.runs.run_id) == ["g-t-b-0#0"]
    with pytest.raises(Exception, match="no results store"):
        source.load(tmp_path / "nope.db")


def test_load_reads_several_stores_as_one_and_refuses_a_run_twice(tmp_path):
    """Compares run apart (one per GPU or machine) report as one: --store a.db,b.db. A run in two stores is
    an error, never counted twice."""
    from xlang.errors import XlangError
    from xlang.report import source
    from xlang.store import Store

    recs = records()
    halves = {"a": recs[: len(recs) // 2], "b": recs[len(recs) // 2:]}
    for name, part in halves.items():
        with Store(tmp_path / f"{name}.db") as store:
            for rec in part:
                store.create_run(rec["run_id"], task=rec["task"], lang=rec["lang"], arch=rec["arch"],
                                 model="reference", source="reference", docs_level="contracts",
                                 turns_limit=rec["turns_limit"], samples=1)
                store.start_sample(rec["run_id"], 0)
                for t in rec["turns"]:
                    store.add_turn(rec["run_id"], 0, t["turn"], messages=[], verdict=t["verdict"],
                                   build=t["verdict"]["build"])
                store.update_sample(rec["run_id"], 0, status=rec["status"])
    both = source.load(f"{tmp_path / 'a.db'},{tmp_path / 'b.db'}")
    assert sorted(both.runs.run_id) == sorted(f"{r['run_id']}#0" for r in recs)
    pd.testing.assert_frame_equal(tables.format_cells(tables.cell_stats(both)),
                                  tables.format_cells(tables.cell_stats(from_records(recs))))
    with pytest.raises(XlangError, match="in both"):
        source.load(f"{tmp_path / 'a.db'},{tmp_path / 'a.db'}")


def test_a_report_names_the_harness_of_its_verdicts_and_says_when_they_are_mixed(ds, tmp_path):
    """Harness versions time differently: the report says which one judged its verdicts, and when they mix."""
    assert provenance.harness_versions(ds) == ""  # the hand-made records carry no fingerprint
    one = from_records(records(), [{"host": "test-box"}], source="test")
    one.turns["harness"] = "4"
    assert provenance.harness_versions(one) == "4"
    mixed = from_records(records(), [{"host": "test-box"}], source="test")
    mixed.turns["harness"] = ["3"] + ["4"] * (len(mixed.turns) - 1)
    assert provenance.harness_versions(mixed) == "3, 4 (mixed: their timings were taken differently)"
    md = write_report(mixed, tmp_path / "out").markdown.read_text()
    assert "; harness 3, 4 (mixed: their timings were taken differently)." in md


def test_harness_and_call_idle_come_from_the_stored_verdicts(tmp_path):
    """The harness version and the call profiles' idle are read out of each verdict (fingerprint, timing), not
    only set by hand: a report of stored verdicts names their harness."""
    recs = records()
    for r in recs:
        for i, t in enumerate(r["turns"]):
            v = t["verdict"]
            if v["fingerprint"]:
                v["fingerprint"]["harness_version"] = "3" if r["run_id"] == "g-t-h-0" and i == 0 else "4"
            if v["timing"]:
                v["timing"]["candidate_profile"] = {"activities": [], "idle_ms": 0.002, "calls": 9}
                v["timing"]["baseline_profile"] = {"activities": [], "idle_ms": 0.065, "calls": 9}
    stored = from_records(recs, [{"host": "test-box"}], source="test")
    timed = stored.turns[stored.turns.speedup.notna()]
    assert len(timed) and (timed.idle_ms == 0.002).all() and (timed.vendor_idle_ms == 0.065).all()
    assert provenance.harness_versions(stored) == "3, 4 (mixed: their timings were taken differently)"
    html = write_report(stored, tmp_path / "out").index.read_text()
    assert "3, 4 (mixed: their timings were taken differently)" in html and "not recorded" not in html


def test_a_host_compute_candidate_is_not_correct_in_the_tables():
    """Outputs matched, but the GPU did not compute them (issue 40): 0 correct, and the error table lists it."""
    from report_records import run, verdict

    host = verdict("host_compute", "h100", "triton", "gemm", 0.01)
    host["correct"] = True  # even a stored field saying otherwise
    ds = from_records([run("g-t-h-host", "gemm", "triton", "h100", 0, [host])], [{"host": "test-box"}], source="t")
    t = _cell(tables.cell_stats(ds), "gemm", "h100", "triton")
    assert t.n_runtime == 1 and t.correctness_rate == 0.0 and t.n_speedup_correct == 0
    errors = turn_tables.error_table(ds)
    assert "host_compute" in errors.columns and errors["host_compute"].sum() == 1
