"""Issue 33 item 1: shape suites as an axis (tasks/<task>/suites.toml, xlang/suites.py, --suite in eval, run and
compare, the verdict's suite record, the report's suite tables). What runs on a GPU (the judge timing each suite
shape) is not tested here; the arithmetic it uses, the trials it is given and everything read back from a store
are."""

from __future__ import annotations

import dataclasses
import math
import random

import pytest

from xlang.errors import XlangError
from xlang.profiler.evaluate import correctness_trials
from xlang.suites import get_suite, load_file, suite_result, summarise, task_suites, worst_text
from xlang.task import get_task

GEMM_SUITES = {"llama3-8b": 20, "llama3-70b": 20, "qwen3-32b": 20, "deepseek-v3": 30}


def test_gemm_suites_resolve_with_their_sizes_and_sources():
    task = get_task("gemm")
    suites = task.suites()
    assert {name: len(s.shapes) for name, s in suites.items()} == GEMM_SUITES
    for s in suites.values():
        assert s.source.startswith("https://huggingface.co/") and s.source.split()[0].endswith("/config.json")
        assert len({tuple(x.shape.items()) for x in s.shapes}) == len(s.shapes)  # no shape twice
        for x in s.shapes:
            assert x.label and list(x.shape) == ["M", "N", "K"]
            assert task.shape(x.shape) == x.shape  # the task's own rules allow every one
        assert sorted({x.shape["M"] for x in s.shapes}) == [1, 16, 128, 1000, 8192]
    assert task.suite("llama3-8b") is suites["llama3-8b"]
    assert "deepseek-v3" not in get_task("attn_fwd").suites()  # MLA: not the attention tasks' contract


def test_gemm_suite_pairs_follow_from_the_quoted_configs():
    """Every (N, K) pair recomputed from the config.json values the suite quotes."""
    def dense(c):
        heads, kv, d, h, inter = (c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"], c["hidden_size"],
                                  c["intermediate_size"])
        return {"qkv_proj": ((heads + 2 * kv) * d, h), "o_proj": (h, heads * d), "gate_up": (2 * inter, h),
                "down_proj": (h, inter)}

    def mla(c):
        h, heads = c["hidden_size"], c["num_attention_heads"]
        return {"qkv_a_proj": (c["q_lora_rank"] + c["kv_lora_rank"] + c["qk_rope_head_dim"], h),
                "q_b_proj": (heads * (c["qk_nope_head_dim"] + c["qk_rope_head_dim"]), c["q_lora_rank"]),
                "kv_b_proj": (heads * (c["qk_nope_head_dim"] + c["v_head_dim"]), c["kv_lora_rank"]),
                "o_proj": (h, heads * c["v_head_dim"]), "gate_up": (2 * c["intermediate_size"], h),
                "down_proj": (h, c["intermediate_size"])}

    for name, suite in get_task("gemm").suites().items():
        c = suite.config
        if "head_dim" in c and "q_lora_rank" not in c and name.startswith("llama"):
            assert c["head_dim"] == c["hidden_size"] // c["num_attention_heads"]  # Llama 3 has no head_dim key
        expected = mla(c) if name == "deepseek-v3" else dense(c)
        got = {x.label: (x.shape["N"], x.shape["K"]) for x in suite.shapes}
        assert got == expected, name


def test_unknown_suite_is_one_line_listing_the_tasks_suites():
    with pytest.raises(XlangError, match=r"task gemm has no suite 'nope' \(its suites: llama3-8b, llama3-70b, "
                                         r"qwen3-32b, deepseek-v3"):
        get_suite(get_task("gemm"), "nope")
    with pytest.raises(XlangError, match="task attn_fwd has no suite 'deepseek-v3' \\(its suites: llama3-8b, "):
        get_task("attn_fwd").suite("deepseek-v3")
    without = dataclasses.replace(get_task("gemm"), suites_file="no_such_suites.toml")
    with pytest.raises(XlangError, match="its suites: none"):
        without.suite("llama3-8b")


def test_suite_files_are_checked_against_the_task(tmp_path):
    task = get_task("gemm")
    bad = {"sweeps a size the task lacks": 'x = { sweep = { S = [1] }, shapes = [ { N = 64, K = 64 } ] }',
           "gives a size the task lacks": 'x = { shapes = [ { label = "a", Q = 8 } ] }',
           "a shape its rules refuse": 'x = { sweep = { M = [1] }, shapes = [ { N = 60, K = 64 } ] }',
           "no shapes": 'x = { title = "empty" }', "not TOML": "x = ["}
    for why, text in bad.items():
        path = tmp_path / "suites.toml"
        path.write_text(text)
        with pytest.raises(XlangError):
            load_file(path, task)
    path = tmp_path / "suites.toml"
    path.write_text('[s]\nsweep = { M = [3, 5] }\nshapes = [ { label = "a", N = 64 }, { label = "b", N = 8, K = 16 } ]\n')
    shapes = [(x.label, x.shape) for x in load_file(path, task)["s"].shapes]
    default_k = task.default_shape["K"]  # a size an entry leaves out is the task's default
    assert shapes == [("a", {"M": 3, "N": 64, "K": default_k}), ("a", {"M": 5, "N": 64, "K": default_k}),
                      ("b", {"M": 3, "N": 8, "K": 16}), ("b", {"M": 5, "N": 8, "K": 16})]


def test_every_suite_shape_joins_the_correctness_trials():
    task = get_task("gemm")
    shapes = task.draw_shapes(task.shape(), random.Random(1), 3)
    suite = task.suite("llama3-8b").describe()
    kinds = list(task.input_kinds)
    trials = correctness_trials(shapes, suite, kinds, 1000, 2)
    checked = [t[0] for t in trials]
    assert checked[: 2 * len(shapes)] == [s for s in shapes for _ in range(2)]  # the drawn shapes first, as before
    assert all(x["shape"] in checked for x in suite["shapes"])
    assert len(trials) == 2 * (len(shapes) + len(suite["shapes"]))
    assert {t[1] for t in trials[2 * len(shapes):]} == set(kinds)  # the value kinds cycle through the suite too
    assert len({t[2] for t in trials}) == len(trials)  # a seed of its own per trial
    # a suite shape already checked (the timed shape) is not checked twice
    again = correctness_trials([suite["shapes"][0]["shape"]], suite, kinds, 1000, 1)
    assert len(again) == len(suite["shapes"])
    assert correctness_trials(shapes, None, kinds, 1000, 2) == trials[: 2 * len(shapes)]


def test_summary_arithmetic_from_given_timings():
    shapes = [{"label": "a", "shape": {"M": 1}, "candidate_ms": 1.0, "baseline_ms": 0.5, "speedup": 0.5,
               "tflops": 10.0},
              {"label": "b", "shape": {"M": 2}, "candidate_ms": 1.0, "baseline_ms": 4.0, "speedup": 4.0,
               "tflops": 30.0},
              {"label": "c", "shape": {"M": 3}, "candidate_ms": None, "baseline_ms": 1.0, "speedup": None}]
    s = summarise(shapes)
    assert s["shapes"] == 3 and s["timed"] == 2
    assert s["geomean_speedup"] == pytest.approx(math.sqrt(2.0))
    assert s["time_weighted_speedup"] == pytest.approx(4.5 / 2.0)
    assert s["worst"] == {"label": "a", "shape": {"M": 1}, "speedup": 0.5}
    assert s["best"]["label"] == "b" and (s["tflops_min"], s["tflops_max"]) == (10.0, 30.0)
    assert worst_text(s) == "a M=1 0.50×"
    assert summarise([])["geomean_speedup"] is None and worst_text(None) == "–"


def test_suite_result_gives_tflops_and_gbps_per_shape():
    """What the judge records from its timings (time_calls' stats per shape and side): speedups alternating 0.5x
    and 2x give a geomean of 1 and a time-weighted speedup of 1.25."""
    task = get_task("gemm")
    suite = task.suite("llama3-8b").describe()
    cand = [{"stats": {"median_ms": 1.0}} for _ in suite["shapes"]]
    base = [{"stats": {"median_ms": 0.5 if i % 2 == 0 else 2.0}} for i in range(len(suite["shapes"]))]
    rec = suite_result(task, suite, cand, base)
    assert rec["name"] == "llama3-8b" and len(rec["shapes"]) == 20
    first = rec["shapes"][0]
    M, N, K = first["shape"]["M"], first["shape"]["N"], first["shape"]["K"]
    assert first["tflops"] == pytest.approx(2.0 * M * N * K / 1e-3 / 1e12)
    assert first["gbps"] == pytest.approx(2.0 * (M * K + N * K + M * N) / 1e-3 / 1e9)
    assert first["speedup"] == pytest.approx(0.5)
    assert rec["summary"]["geomean_speedup"] == pytest.approx(1.0)
    assert rec["summary"]["time_weighted_speedup"] == pytest.approx(1.25)
    assert rec["summary"]["worst"]["label"] == "qkv_proj"
    untimed = suite_result(task, suite, [], [])  # timing did not run: every shape there, none timed
    assert untimed["summary"]["timed"] == 0 and len(untimed["shapes"]) == 20


def _suite_verdict(task, suite_name, category, speedups):
    """A stored verdict as the check stage records one with a suite (correct when category is ok)."""
    suite = task.suite(suite_name).describe()
    cand = [{"stats": {"median_ms": 1.0}} for _ in suite["shapes"]]
    base = [{"stats": {"median_ms": speedups[i % len(speedups)]}} for i in range(len(suite["shapes"]))]
    v = {"category": category, "lang": "triton", "task": task.name, "arch": "h100", "shape": task.shape(),
         "runtime_ran": True, "correct": category == "ok", "census_ok": True, "executed_ok": category == "ok",
         "compiled": True, "timing": {"speedup": 0.99, "tflops": 790.0, "candidate_ms": 0.76},
         "build": {"ok": True, "census": {"missing": [], "kernels": []}}, "fingerprint": {"harness_version": "6"}}
    v["suite"] = suite_result(task, suite, cand, base)
    return v


def _store(path, with_old_run=True, with_suite_run=True):
    from xlang.store import Store

    task = get_task("gemm")
    with Store(path) as store:
        runs = [("s-1", {"suite": "llama3-8b"}, [_suite_verdict(task, "llama3-8b", "incorrect", [3.0]),
                                                 _suite_verdict(task, "llama3-8b", "ok", [0.5, 2.0]),
                                                 _suite_verdict(task, "llama3-8b", "ok", [0.8])])][:int(with_suite_run)]
        if with_old_run:  # a run stored before suites: no suite in its config, no suite field in its verdict
            old = _suite_verdict(task, "llama3-8b", "ok", [1.0])
            del old["suite"]
            runs.append(("old-1", {}, [old]))
        for run_id, config, verdicts in runs:
            store.create_run(run_id, task="gemm", lang="triton", arch="h100", model="reference", source="reference",
                             turns_limit=len(verdicts), samples=1, shape=task.shape(), config=config)
            store.start_sample(run_id, 0)
            for i, v in enumerate(verdicts, 1):
                store.add_turn(run_id, 0, i, messages=[], verdict=v, speedup=v["timing"]["speedup"])
            store.update_sample(run_id, 0, status="done")
            store.finish_run(run_id)


def test_report_reads_suites_from_stored_rows(tmp_path):
    from xlang.report import source, suite_tables, tables

    db = tmp_path / "r.db"
    _store(db)
    ds = source.load(db)
    assert sorted(ds.runs["suite"]) == ["", "llama3-8b"]
    assert len(ds.suite_shapes) == 40  # the two correct turns' 20 shapes each; the incorrect one has none
    stats = tables.cell_stats(ds)
    assert "suite" in stats.columns
    display = tables.format_cells(stats)
    row = display[display["suite"] == "llama3-8b"].iloc[0]
    assert row[tables.COL_SUITE] == "1.000"  # the best geomean among candidates correct with target (turn 2)
    assert display[display["suite"] == "–"].iloc[0][tables.COL_SUITE] == "–"  # the old run: no suite
    summary = suite_tables.suite_table(ds)
    assert len(summary) == 1
    s = summary.iloc[0]
    assert (s["suite"], s["shapes"], s["geomean× vendor"], s["time-weighted× vendor"]) == ("llama3-8b", "20", "1.000",
                                                                                          "1.250")
    assert s["candidate"] == "s-1#0 turn 2" and s["worst shape"].startswith("qkv_proj M=1,N=6144,K=4096 0.50")
    per_shape = suite_tables.suite_shape_table(ds)
    assert len(per_shape) == 20 and list(per_shape.columns[-8:]) == ["layer", "shape", "ms", "vendor ms", "TFLOP/s",
                                                                      "vendor TFLOP/s", "GB/s", "× vendor"]
    first = per_shape.iloc[0]
    assert (first["layer"], first["shape"], first["ms"], first["× vendor"]) == ("qkv_proj", "M=1,N=6144,K=4096",
                                                                               "1.0000", "0.500")
    assert first["GB/s"] == f"{2.0 * (4096 + 6144 * 4096 + 6144) / 1e-3 / 1e9:.0f}"
    only = ds.filter({"suite": ["llama3-8b"]})  # the suite is a report axis
    assert list(only.runs["run_id"]) == ["s-1#0"] and len(only.suite_shapes) == 40


def test_report_command_writes_the_suite_tables(xlang, tmp_path):
    db = tmp_path / "r.db"
    _store(db)
    out = tmp_path / "rep"
    code, _, err = xlang("report", "--store", db, "--out", out, "--by", "task,suite,arch,lang")
    assert code == 0, err
    md = (out / "report.md").read_text()
    assert "## Shape suites: summary per cell" in md and "## Shape suites: per shape" in md
    assert "| qkv_proj | M=1,N=6144,K=4096 |" in md
    assert len((out / "data" / "suite_shapes.csv").read_text().splitlines()) == 21
    assert "Shape suites: per shape" in (out / "index.html").read_text()
    assert (out / "plots" / "suite_speedups.png").stat().st_size > 0 and "suite_speedups.png" in md
    code, _, err = xlang("report", "--store", db, "--out", tmp_path / "r2", "--where", "suite=nope")
    assert code == 2 and "suite values: '', llama3-8b" in err


def test_report_without_suites_has_no_suite_sections(xlang, tmp_path):
    from xlang.report import source, suite_tables, tables

    db = tmp_path / "r.db"
    _store(db)
    ds = source.load(db).filter({"suite": [""]})
    assert suite_tables.suite_table(ds).empty and "suite" not in tables.cell_stats(ds).columns
    old = tmp_path / "old.db"
    _store(old, with_suite_run=False)  # a store of runs made before suites
    out = tmp_path / "rep"
    code, _, err = xlang("report", "--store", old, "--out", out)
    assert code == 0, err
    md = (out / "report.md").read_text()
    assert "Shape suites" not in md and not (out / "plots" / "suite_speedups.png").exists()


def test_cli_refuses_an_unknown_suite_before_any_work(xlang, tmp_path):
    db = tmp_path / "r.db"
    code, _, err = xlang("eval", "expert", "--lang", "triton", "--task", "gemm", "--arch", "b200", "--suite", "nope")
    assert code == 2 and "task gemm has no suite 'nope' (its suites: llama3-8b" in err
    code, _, err = xlang("run", "--task", "gemm", "--lang", "triton", "--arch", "b200", "--model", "reference",
                         "--profiler", "none", "--store", db, "--suite", "nope")
    assert code == 2 and "its suites: llama3-8b" in err
    code, _, err = xlang("compare", "--arch", "b200", "--langs", "triton", "--tasks", "gemm,attn_fwd", "--profiler",
                         "none", "--store", db, "--suite", "llama3-8b,nope")
    assert code == 2 and "--suite nope: no selected task has such a suite" in err and "gemm: llama3-8b" in err
    if db.exists():  # the store may have been opened, but nothing was run into it
        from xlang.store import Store

        with Store(db, readonly=True) as store:
            assert store.runs() == []


def test_compare_plans_a_suite_cell_per_task_that_carries_it(tmp_path):
    from xlang.compare import CompareConfig, cell_key, cell_label, plan, validate

    base = dict(archs=["b200"], langs=["triton"], tasks=["gemm", "attn_fwd"], profiler="none",
                store=str(tmp_path / "r.db"))
    cfg = validate(CompareConfig(**base, suites=["llama3-8b", "deepseek-v3"]))
    cells = plan(cfg)
    assert [(c.task, c.suite) for c in cells] == [("gemm", "llama3-8b"), ("gemm", "deepseek-v3"),
                                                  ("attn_fwd", "llama3-8b")]
    assert cell_label(cells[0]) == "gemm · triton · b200 · suite llama3-8b"
    # a task that carries none of the named suites runs once without one
    only_gemm = plan(validate(CompareConfig(**base, suites=["deepseek-v3"])))
    assert [(c.task, c.suite) for c in only_gemm] == [("gemm", "deepseek-v3"), ("attn_fwd", "")]
    plain = validate(CompareConfig(**base))
    # without a suite a cell's key is what it was before suites existed (stored compares resume), with one another
    assert cell_key(cfg, "attn_fwd", "triton", "b200") == cell_key(plain, "attn_fwd", "triton", "b200")
    assert cell_key(cfg, "gemm", "triton", "b200", suite="llama3-8b") != cell_key(plain, "gemm", "triton", "b200")
    assert len({c.key for c in cells}) == 3


def test_eval_prints_the_per_shape_table_and_the_summary(capsys, monkeypatch):
    from rich.console import Console

    from xlang.profiler import commands
    from xlang.profiler.commands import print_suite
    from xlang.verdict import Verdict

    monkeypatch.setattr(commands, "console", Console(width=250))

    task = get_task("gemm")
    v = Verdict.from_dict(_suite_verdict(task, "llama3-8b", "ok", [0.5, 2.0]))
    print_suite(v.suite, v)
    out = capsys.readouterr().out
    assert "suite llama3-8b: 20 shapes" in out and "qkv_proj" in out and "M=8192,N=4096,K=14336" in out
    assert "correct on all 20 shapes · geomean 1.000x vendor over 20 timed" in out
    assert "time-weighted 1.250x" in out
    static = Verdict(category="static_ok", task="gemm", runtime_note="not run (no GPU of compute capability 9.0 here)",
                     suite={**task.suite("llama3-8b").describe(), "summary": None})
    print_suite(static.suite, static)
    assert "correctness and timing not run (no GPU of compute capability 9.0 here)" in capsys.readouterr().out


def test_old_verdicts_read_without_a_suite():
    from xlang.verdict import Verdict

    v = Verdict.from_dict({"category": "ok", "task": "gemm"})  # a row stored before suites
    assert v.suite is None and "suite" in v.to_dict()


def test_task_suites_is_read_again_when_the_file_changes(tmp_path, monkeypatch):
    task = get_task("gemm")
    monkeypatch.setattr(type(task), "folder", lambda self: tmp_path)
    assert task_suites(task) == {}
    (tmp_path / "suites.toml").write_text('s = { shapes = [ { label = "a", M = 1, N = 8, K = 8 } ] }\n')
    assert list(task_suites(task)) == ["s"]


@pytest.mark.slow
def test_compare_with_a_suite_on_cpu_stores_it_and_shows_the_axis(xlang, tmp_path, monkeypatch):
    """No GPU: the static stages once per build; the suite is recorded in the run and the verdict, never timed."""
    import json

    from xlang.store import Store

    monkeypatch.setenv("COLUMNS", "200")
    db = tmp_path / "r.db"
    code, out, err = xlang("compare", "--arch", "b200", "--langs", "triton", "--tasks", "gemm", "--profiler", "none",
                           "--suite", "llama3-8b", "--store", db, "--json")
    assert code == 0, err
    data = json.loads(out)
    assert [c["suite"] for c in data["cells"]] == ["llama3-8b"]
    assert data["table"][0]["suite"] == "llama3-8b"
    with Store(db, readonly=True) as store:
        (run,) = store.runs()
        (turn,) = store.turns(run_id=run["run_id"], messages=False)
    assert run["config"]["suite"] == "llama3-8b"
    assert turn["verdict"]["suite"]["name"] == "llama3-8b" and turn["verdict"]["suite"]["summary"] is None
    assert len(turn["verdict"]["suite"]["shapes"]) == 20


def test_the_models_feedback_names_the_suites_geomean_and_worst_shape():
    from xlang.agent import feedback as F
    from xlang.archs import get_arch
    from xlang.backend import get_backend
    from xlang.verdict import Verdict

    v = Verdict.from_dict(_suite_verdict(get_task("gemm"), "llama3-8b", "ok", [0.5, 2.0]))
    text = F.feedback_text(v, turn_idx=1, turns=4, backend=get_backend("triton"), arch=get_arch("h100"))
    assert "Across the 20 shapes of suite llama3-8b: geomean speedup 1" in text
    assert "worst qkv_proj M=1,N=6144,K=4096 0.50×" in text


def test_a_suite_shape_faster_than_the_roofline_is_flagged():
    from xlang.archs import get_arch

    task = get_task("gemm")
    suite = task.suite("llama3-8b").describe()
    figures = get_arch("h100").figures
    cand = [{"stats": {"median_ms": 1e-6 if i == 4 else 10.0}} for i in range(len(suite["shapes"]))]
    rec = suite_result(task, suite, cand, [{"stats": {"median_ms": 10.0}}] * len(suite["shapes"]), figures)
    big = rec["shapes"][4]  # qkv_proj M=8192: 2 * 8192 * 6144 * 4096 FLOPs cannot take a nanosecond
    assert big["beyond_roofline"] and big["roofline_floor_ms"] == pytest.approx(
        max(task.flops(big["shape"]) / (figures["peak_dense_bf16_tflops"] * 1e12) * 1e3,
            task.min_bytes(big["shape"]) / (figures["mem_bandwidth_tbs"] * 1e12) * 1e3))
    assert rec["beyond_roofline"] == ["qkv_proj M=8192,N=6144,K=4096"]
    assert not any(s["beyond_roofline"] for i, s in enumerate(rec["shapes"]) if i != 4)


def test_compare_prints_the_suite_tables_at_80_columns_without_cutting_a_word(tmp_path):
    from rich.console import Console

    from xlang.compare_output import print_suites
    from xlang.report import source

    db = tmp_path / "r.db"
    _store(db)
    console = Console(width=80, record=True, file=open(tmp_path / "out.txt", "w"))
    print_suites(source.load(db), console)
    text = console.export_text()
    assert "…" not in text and max(len(line) for line in text.splitlines()) <= 80
    assert "suite gemm · llama3-8b · h100 · triton · reference: s-1#0 turn 2" in text.replace("\n", " ")
    assert text.count("qkv_proj") >= 6 and "K=14336" in text  # every shape's row (and the worst shape's line)
