"""Every table of the report, driven from one store filled by the real agent loop (litellm, builds, SASS census,
store) with scripted models: a litellm CustomLLM (no network) whose replies include candidates that compile
without the target instructions and are correct, so "correct but not with the target" is non-zero.

There is no GPU here, so the runtime step is a fake profiler registered with the loop: it returns the verdict
the profiler gives under issue 13's semantics (correct measured whatever the census says; census_ok from the
real build's census; category the first failing stage), with correctness and speed read from a marker line the
script put in the candidate (`xlang-fake: correct 0.95`, `xlang-fake: incorrect`, `xlang-fake: not-executed
0.70`). Everything else is the real thing, and each expected figure below is worked out by hand from the scripts.
"""

from __future__ import annotations

import math
import re
import threading
from pathlib import Path

import pandas as pd
import pytest

from xlang import verdict as V
from xlang.agent.loop import RunConfig, run
from xlang.store import Store

ROOT = Path(__file__).resolve().parent.parent
KERNELS = ROOT / "tests" / "kernels"
SOURCES = {
    ("gemm", "triton", "fma"): KERNELS / "triton" / "fma_only.py",  # compiles without wgmma / TMA
    ("gemm", "triton", "good"): KERNELS / "triton" / "gemm_tma.py",
    ("gemm", "cuda_ptx", "fma"): KERNELS / "agent" / "gemm_fma.cu",
    ("gemm", "cuda_ptx", "good"): KERNELS / "cuda_ptx" / "gemm_tile_hopper.cu",
    ("attn_fwd", "triton", "good"): ROOT / "tasks" / "attn_fwd" / "solutions" / "triton.py",
}
BAD_TRITON = ('import triton\nimport triton.language as tl\n\n@triton.jit\ndef k(C, N):\n'
              '    i = tl.arange(0, 128)\n    tl.store(C + i, undefined_tile_value)\n\n'
              'def xlang_entry(A, B, C, M, N, K):\n    k[(1,)](C, N)\n')
ALPHA, BETA = "xlangrep/alpha", "xlangrep/beta"

# (model, task, lang, arch, docs, variant, sample) -> one reply per turn: (kind, marker) or None (prose, no code).
# kind: "fma" | "good" | "bad"; marker: "correct 0.50" | "incorrect" | "not-executed 0.70".
G = ("gemm", "triton", "h100")
SCRIPTS = {
    # alpha, gemm · triton · h100, docs contracts, 3 samples with 3 prompt variants, 8 turns, target 0.9
    (ALPHA, *G, "contracts", "base", 0): [("fma", "correct 0.50"), ("good", "correct 0.95")],  # target at turn 2
    (ALPHA, *G, "contracts", "plan", 1): [("bad", ""), ("fma", "correct 0.60"), ("fma", "correct 0.70"),
                                          ("good", "correct 0.80"), ("good", "correct 0.92")],  # target at turn 5
    (ALPHA, *G, "contracts", "terse", 2): [None, ("bad", ""), ("fma", "incorrect"), ("good", "incorrect"),
                                           ("good", "not-executed 0.70"), ("good", "incorrect"),
                                           ("good", "incorrect"), ("good", "incorrect")],
    # alpha, the same cell with docs params: correct, never with the target instructions
    (ALPHA, *G, "params", "base", 0): [("fma", "correct 0.40"), ("fma", "correct 0.45")],
    # alpha, gemm · cuda_ptx · h100: 2 samples, 3 turns
    (ALPHA, "gemm", "cuda_ptx", "h100", "contracts", "base", 0): [("fma", "correct 0.30"), ("good", "correct 0.85"),
                                                                  ("good", "correct 0.88")],
    (ALPHA, "gemm", "cuda_ptx", "h100", "contracts", "base", 1): [None, ("fma", "incorrect"), ("fma", "correct 0.33")],
    # alpha, gemm · triton · b200: no runtime (static census only)
    (ALPHA, "gemm", "triton", "b200", "contracts", "base", 0): [("fma", ""), ("good", "")],
    # alpha, attn_fwd · triton · h100 at D=128 (2 samples), D=64, and GQA HKV=8 (group 6)
    (ALPHA, "attn_fwd", "triton", "h100", "contracts", "base", 0): [("good", "correct 0.81"), ("good", "correct 0.85")],
    (ALPHA, "attn_fwd", "triton", "h100", "contracts", "base", 1): [("good", "incorrect"), ("good", "not-executed 0.50")],
    # beta, gemm · triton · h100, context single-user, 2 samples, 4 turns; reports no reasoning tokens
    (BETA, *G, "contracts", "base", 0): [("fma", "correct 0.55"), ("fma", "correct 0.58"), ("good", "incorrect"),
                                         ("good", "not-executed 0.75")],
    (BETA, *G, "contracts", "base", 1): [None, None, None, ("fma", "correct 0.20")],
}
SHAPE_SCRIPTS = {"D=64": [("good", "correct 0.70")], "HKV=8": [("good", "incorrect")]}
CALLS: list = []


def _first_prompt(messages) -> str:
    return next(m["content"] for m in messages if m["role"] == "user")


def _cell_of(messages) -> tuple:
    first = _first_prompt(messages)
    task = re.search(r"\(`(\w+)`\)", first).group(1)
    lang = "cuda_ptx" if "```cuda code block" in first else "triton"
    arch = "b200" if "`sm_100a`" in first else "h100"
    docs = m.group(1) if (m := re.search(r"level '(\w+)'", first)) else "none"
    variant = "plan" if "## Before the code" in first else "terse" if "## Reply length" in first else "base"
    timed = re.search(r"Timed at the default shape (\S+);", first).group(1)
    shape = "D=64" if "D=64" in timed else "HKV=8" if "HKV=8" in timed else ""
    return task, lang, arch, docs, variant, shape


def _turn_of(messages) -> int:
    """The turn being asked for: one after the last 'Result of turn N/' the model was shown (any context policy)."""
    seen = [int(n) for m in messages if m["role"] == "user" for n in re.findall(r"Result of turn (\d+)/", m["content"])]
    return max(seen) + 1 if seen else 1


def _candidate(task, lang, kind, marker) -> str:
    comment = "//" if lang == "cuda_ptx" else "#"
    code = BAD_TRITON if kind == "bad" else SOURCES[(task, lang, kind)].read_text()
    if marker:
        code = f"{comment} xlang-fake: {marker}\n{code}"
    fence = "cuda" if lang == "cuda_ptx" else "python"
    return f"My kernel:\n\n```{fence}\n{code.rstrip()}\n```\n"


def reply_text(model: str, messages, sample: int) -> tuple[str, int]:
    task, lang, arch, docs, variant, shape = _cell_of(messages)
    turn = _turn_of(messages)
    script = SHAPE_SCRIPTS[shape] if shape else SCRIPTS[(model, task, lang, arch, docs, variant, sample)]
    step = script[min(turn, len(script)) - 1]
    CALLS.append((model, task, lang, arch, docs, variant, shape, sample, turn))
    text = "Let me think about the tiling first." if step is None else _candidate(task, lang, *step)
    return text, turn


@pytest.fixture(scope="module")
def scripted():
    from xlang.agent.llm import litellm_module

    litellm = litellm_module()  # first: it keeps litellm offline (no cost-map fetch)
    from litellm.types.utils import CompletionTokensDetailsWrapper

    class Scripted(litellm.CustomLLM):
        def completion(self, *args, **kwargs):
            model = kwargs["model"]
            sample = int(kwargs.get("optional_params", {}).get("seed") or 0)
            text, turn = reply_text(f"xlangrep/{model}", kwargs["messages"], sample)
            resp = litellm.completion(model="gpt-4o", messages=kwargs["messages"], mock_response=text)
            if model == "alpha":  # a reasoning model: 100 reasoning tokens per turn number, and its text
                resp.usage.completion_tokens_details = CompletionTokensDetailsWrapper(reasoning_tokens=100 * turn)
                resp.choices[0].message.reasoning_content = f"alpha reasoning, turn {turn}"
            return resp

    old = list(litellm.custom_provider_map)
    litellm.custom_provider_map = old + [{"provider": "xlangrep", "custom_handler": Scripted()}]
    yield
    litellm.custom_provider_map = old


def _marker(source: str) -> tuple[str, float | None]:
    m = re.search(r"xlang-fake: ([\w-]+)(?: ([\d.]+))?", source or "")
    if not m:
        return "incorrect", None
    return m.group(1), float(m.group(2)) if m.group(2) else None


def fake_evaluate(source, build, lang, task, arch, shape, options):
    """The profiler's verdict under issue 13's semantics, correctness and speed from the script's marker."""
    kind, speedup = _marker(source)
    census_ok = not build.census.missing
    correct = kind in ("correct", "not-executed")
    executed_ok = census_ok and kind == "correct"
    if not correct:
        category = V.INCORRECT
    elif not census_ok:
        category = V.MISSING_INSTRUCTIONS
    elif not executed_ok:
        category = V.NOT_EXECUTED
    else:
        category = V.OK
    return V.Verdict(category, detail=f"fake profiler: {kind}", lang=lang, task=task.name, arch=arch.name,
                     shape=dict(shape), runtime_ran=True, compiled=True, census_ok=census_ok, correct=correct,
                     executed_ok=executed_ok, timing={"speedup": speedup, "tflops": 100.0} if correct else None,
                     fingerprint={"gpu": "fake H100 (tests/test_report_store.py)"})


@pytest.fixture(scope="module")
def store(scripted, tmp_path_factory):
    """The one store every table is drawn from."""
    import xlang.backend
    from xlang.agent.runtime import Runtime, register_runtime

    def factory(spec, arch):
        if arch.generation != "hopper":
            return Runtime("fake", False, f"not run (no {arch.sm} device)")
        return Runtime("fake", True, evaluate=fake_evaluate)

    register_runtime("fake-h100", factory)
    # Builds are real; an identical candidate (marker line aside) is built once for the whole module.
    real_build, built, locks, guard = xlang.backend.build_candidate, {}, {}, threading.Lock()

    def build_once(code, lang, task, arch, shape=None, *args, **kwargs):
        plain = "\n".join(line for line in str(code).splitlines() if "xlang-fake:" not in line)
        key = (plain, lang, task.name, arch.name, tuple(sorted((shape or {}).items())))
        with guard:
            lock = locks.setdefault(key, threading.Lock())
        with lock:
            if key not in built:
                built[key] = real_build(code, lang, task, arch, shape, *args, **{**kwargs, "cache": False})
            return built[key]

    mp = pytest.MonkeyPatch()
    mp.setattr(xlang.backend, "build_candidate", build_once)
    db = tmp_path_factory.mktemp("rep") / "results.db"
    common = dict(profiler="fake-h100", store=str(db), concurrency=3, seed=0)
    try:
        run(RunConfig(task="gemm", lang="triton", arch="h100", model=ALPHA, turns=8, samples=3, docs="contracts",
                      prompt_variants="base,plan,terse", target_speedup=0.9, run_id="a-gemm-tri-h", **common))
        run(RunConfig(task="gemm", lang="triton", arch="h100", model=ALPHA, turns=2, docs="params",
                      run_id="a-gemm-tri-h-params", **common))
        run(RunConfig(task="gemm", lang="cuda_ptx", arch="h100", model=ALPHA, turns=3, samples=2,
                      run_id="a-gemm-cu-h", **common))
        run(RunConfig(task="gemm", lang="triton", arch="b200", model=ALPHA, turns=2, run_id="a-gemm-tri-b", **common))
        run(RunConfig(task="attn_fwd", lang="triton", arch="h100", model=ALPHA, turns=2, samples=2,
                      run_id="a-attn-d128", **common))
        run(RunConfig(task="attn_fwd", lang="triton", arch="h100", model=ALPHA, turns=1, shape={"D": 64},
                      run_id="a-attn-d64", **common))
        run(RunConfig(task="attn_fwd", lang="triton", arch="h100", model=ALPHA, turns=1, shape={"HKV": 8},
                      run_id="a-attn-gqa", **common))
        run(RunConfig(task="gemm", lang="triton", arch="h100", model=BETA, turns=4, samples=2, context="single-user",
                      run_id="b-gemm-tri-h", **common))
    finally:
        mp.undo()
    return db


@pytest.fixture(scope="module")
def ds(store):
    from xlang.report import source

    return source.load(store)


def _row(df, **keys):
    sel = df
    for k, v in keys.items():
        sel = sel[sel[k].astype(str) == str(v)]
    assert len(sel) == 1, (keys, len(sel))
    return sel.iloc[0]


# ------------------------------------------------------------------------------------------- the store


def test_store_records_loop_options(store):
    with Store(store, readonly=True) as db:
        samples = {(s["run_id"], s["sample_idx"]): s for s in db.samples()}
        assert [samples[("a-gemm-tri-h", k)]["prompt_variant"] for k in range(3)] == ["base", "plan", "terse"]
        # --target-speedup 0.9: sample 0 stopped at turn 2, sample 1 at turn 5, sample 2 ran its 8 turns.
        assert [samples[("a-gemm-tri-h", k)]["turns_done"] for k in range(3)] == [2, 5, 8]
        assert "reached at turn 2" in samples[("a-gemm-tri-h", 0)]["note"]
        # The best candidate of a sample: a correct one without the target families beats an incorrect one.
        cu1 = samples[("a-gemm-cu-h", 1)]
        assert (cu1["best_turn"], cu1["best_category"], cu1["best_speedup"]) == (3, V.MISSING_INSTRUCTIONS, 0.33)
        assert db.run("b-gemm-tri-h")["context"] == "single-user" and db.run("a-gemm-tri-h")["context"] == "trimmed"
        assert db.run("a-gemm-tri-h")["config"]["prompt_variants"] == ["base", "plan", "terse"]
        turns = db.turns(run_id="a-gemm-tri-h", sample_idx=1)
        assert [t["reasoning_tokens"] for t in turns] == [100, 200, 300, 400, 500]
        assert turns[2]["reasoning"] == "alpha reasoning, turn 3"
        beta = db.turns(run_id="b-gemm-tri-h", sample_idx=0)
        assert all(t["reasoning_tokens"] is None and t["reasoning"] is None for t in beta)
        # single-user context: one user message holding the previous reply and its result.
        assert [m["role"] for m in beta[2]["messages"]] == ["system", "user"]
        assert "Result of turn 2/4" in beta[2]["messages"][1]["content"]
        # The plain-FMA GEMM computed the right result and is judged correct, but not with the target instructions.
        fma = turns[1]
        assert fma["category"] == V.MISSING_INSTRUCTIONS
        assert V.scores(fma["verdict"])["correct"] and not V.scores(fma["verdict"])["correct_with_target"]
        assert "computed the correct result" in fma["feedback"] and "wgmma" in fma["feedback"]
        # Registers per kernel in the feedback (cuobjdump -res-usage: the build log has no ptxas -v), and the
        # toolchain in the verdict.
        assert re.search(r"gemm\w*: \d+ registers", fma["feedback"]), fma["feedback"]
        assert fma["build"]["resources"] and fma["build"]["resources"][0]["registers"] > 0
        assert fma["verdict"]["fingerprint"]["toolchain"]["triton"]
        assert {"nvcc", "ptxas", "triton", "cutlass-dsl", "torch", "driver"} <= \
            set(fma["verdict"]["fingerprint"]["toolchain"])
        cuda = db.turns(run_id="a-gemm-cu-h", sample_idx=0)[0]
        assert "registers" in cuda["feedback"] and cuda["build"]["resources"][0]["registers"] > 0


# ------------------------------------------------------------------------------------------- the tables


def test_main_table_at_turn_limits(ds):
    from xlang.report import tables

    main = tables.main_table(ds)
    cell = dict(model=ALPHA, task="gemm", arch="h100", lang="triton")
    one, four, eight = (_row(main, **cell, turns=t) for t in (1, 4, 8))
    # Turn 1: only sample 0's plain-FMA kernel is correct, and not with the target instructions.
    assert (one.n, one.n_correct, one.n_correct_with_arch) == (4, 2, 0)  # docs=params counts too (same cell)
    assert one.best_speedup_correct == pytest.approx(0.50) and math.isnan(one.best_speedup)
    # Within 4 turns: samples 0 (0.95 at turn 2) and 1 (0.80 at turn 4) are correct with the target.
    assert (four.n, four.n_correct, four.n_correct_with_arch) == (3, 2, 2)  # the params run had 2 turns: left out
    assert four.best_speedup == pytest.approx(0.95) and four.n_speedup == 2
    # Within 8: sample 2's turn-5 candidate is correct but its families did not execute.
    assert (eight.n, eight.n_correct, eight.n_correct_with_arch) == (3, 3, 2)
    assert eight.correctness_rate > eight.correct_with_arch_rate
    lo, hi = tables.wilson(2, 3)
    assert (eight.correct_with_arch_lo, eight.correct_with_arch_hi) == (pytest.approx(lo), pytest.approx(hi))
    assert 0.0 <= eight.best_speedup_lo <= eight.best_speedup <= eight.best_speedup_hi == pytest.approx(0.95)
    # The cuda_ptx cell had 3 turns: it has a turn-1 row only.
    assert set(main[(main.model == ALPHA) & (main.lang == "cuda_ptx")].turns) == {1}
    display = tables.format_scores(main, ["model", "task", "arch", "lang", "turns"])
    row = _row(display, model=ALPHA, task="gemm", arch="h100", lang="triton", turns=8)
    assert row["correct"].startswith("100% (3/3) [") and row[tables.COL_TARGET].startswith("67% (2/3) [")
    assert row[tables.COL_SPEED].startswith("0.95× (2/3) [") and row[tables.COL_SPEED_ALL].startswith("0.95× (3/3)")


def test_cells_and_blackwell_static(ds):
    from xlang.report import tables

    cells = tables.cell_stats(ds)
    cu = _row(cells, model=ALPHA, task="gemm", arch="h100", lang="cuda_ptx")
    assert (cu.n, cu.n_correct, cu.n_correct_with_arch) == (2, 2, 1)
    assert cu.best_speedup == pytest.approx(0.88) and cu.best_speedup_correct == pytest.approx(0.88)
    b = _row(cells, model=ALPHA, task="gemm", arch="b200", lang="triton")
    assert not b.runtime_ran and b.runtime_note == "not run (no sm_100a device)" and b.static_rate == 1.0
    beta = _row(cells, model=BETA, task="gemm", arch="h100", lang="triton")
    assert (beta.n, beta.n_correct, beta.n_correct_with_arch) == (2, 2, 0)  # correct, never with the target
    assert math.isnan(beta.best_speedup) and beta.best_speedup_correct == pytest.approx(0.75)


def test_docs_ablation(ds):
    from xlang.report import tables

    docs = tables.docs_table(ds)
    params = _row(docs, model=ALPHA, task="gemm", arch="h100", lang="triton", docs="params")
    contracts = _row(docs, model=ALPHA, task="gemm", arch="h100", lang="triton", docs="contracts")
    assert (params.n, params.n_correct, params.n_correct_with_arch) == (1, 1, 0)
    assert params.best_speedup_correct == pytest.approx(0.45) and params.n_speedup == 0
    assert (contracts.n, contracts.n_correct, contracts.n_correct_with_arch) == (3, 3, 2)


def test_lang_vs_arch_for_one_model(ds):
    from xlang.report import tables

    model, table = tables.lang_arch_table(ds)
    assert model == ALPHA  # the model with the most samples
    gemm_triton = _row(table, task="gemm", lang="triton")
    assert gemm_triton["h100"] == "100% / 50% / 0.95× (n=4)"
    assert gemm_triton["b200"] == "not run (no sm_100a device); static 100% (n=1)"
    assert _row(table, task="gemm", lang="cuda_ptx")["h100"] == "100% / 50% / 0.88× (n=2)"
    assert _row(table, task="gemm", lang="cuda_ptx")["b200"] == "–"
    _, beta = tables.lang_arch_table(ds, BETA)
    assert list(beta.columns) == ["task", "lang", "h100"] and _row(beta, task="gemm", lang="triton")["h100"] == \
        "100% / 0% / – (n=2)"


def test_head_dim_and_gqa_table(ds):
    from xlang.report import tables

    shapes = tables.shape_table(ds)
    assert set(shapes.task) == {"attn_fwd"}
    assert sorted(zip(shapes.D, shapes.gqa)) == [("128", "1"), ("128", "6"), ("64", "1")]
    d128 = _row(shapes, D=128, gqa=1)
    assert (d128.n, d128.n_correct, d128.n_correct_with_arch) == (2, 2, 1)  # one not executed
    assert d128.best_speedup == pytest.approx(0.85)
    assert _row(shapes, D=64, gqa=1).best_speedup == pytest.approx(0.70)
    assert _row(shapes, D=128, gqa=6).n_correct == 0


def test_error_categories_and_transitions(ds):
    from xlang.report import turn_tables

    errors = turn_tables.error_table(ds.filter({"model": [ALPHA], "task": ["gemm"], "lang": ["triton"],
                                           "arch": ["h100"], "docs": ["contracts"]}))
    one = _row(errors, turn=1)
    assert one.n == 3 and (one.missing_instructions, one.compile_error, one.no_code) == (1, 1, 1)
    five = _row(errors, turn=5)
    assert five.n == 2 and (five.ok, five.not_executed) == (1, 1)
    assert list(errors.turn) == list(range(1, 9))
    trans = turn_tables.transitions_table(ds.filter({"model": [BETA]}))
    got = {(r["from"], r["to"]): r["count"] for r in trans.to_dict("records")}
    # beta sample 0: missing, missing, incorrect, not_executed; sample 1: no_code x3, missing.
    assert got == {("missing_instructions", "missing_instructions"): 1, ("missing_instructions", "incorrect"): 1,
                   ("incorrect", "not_executed"): 1, ("no_code", "no_code"): 2,
                   ("no_code", "missing_instructions"): 1}
    share = trans[(trans["from"] == "missing_instructions")].set_index("to")["share"]
    assert share.to_dict() == {"incorrect": 0.5, "missing_instructions": 0.5}


def test_tokens_and_cost(ds, store):
    import sqlite3

    from xlang.report import turn_tables

    tokens = turn_tables.tokens_table(ds)
    a = _row(tokens, model=ALPHA, task="gemm", arch="h100", lang="triton")
    # 15 + 2 turns; reasoning tokens 100 x turn number: (1+2) + (1..5) + (1..8) + (1+2) = 57 hundred.
    assert a.turns == 17 and a.reasoning_tokens_per_turn == pytest.approx(5700 / 17)
    assert a.completion_tokens_per_turn == 20  # the mock response's usage
    assert math.isnan(_row(tokens, model=BETA, task="gemm", arch="h100", lang="triton").reasoning_tokens_per_turn)
    cost = turn_tables.cost_table(ds)
    c = _row(cost, model=ALPHA, task="gemm", arch="h100", lang="triton")
    con = sqlite3.connect(f"file:{store}?mode=ro", uri=True)
    spent = con.execute("SELECT sum(cost_usd), count(*) FROM turns WHERE run_id IN ('a-gemm-tri-h', "
                        "'a-gemm-tri-h-params')").fetchone()
    con.close()
    assert spent[1] == 17 and spent[0] > 0  # litellm's price of each reply (gpt-4o's, as the mock reports)
    assert c.samples == 4 and c.turns == 17 and c.cost_usd == pytest.approx(spent[0])
    assert c.usd_per_correct_with_target == pytest.approx(c.cost_usd / 2)
    assert math.isnan(_row(cost, model=BETA, task="gemm", arch="h100", lang="triton").usd_per_correct_with_target)


def test_filters_and_custom_axes(ds):
    from xlang.errors import XlangError
    from xlang.report import tables
    from xlang.report.data import parse_axes, parse_where

    where = parse_where("model=xlangrep/alpha,docs=params|none")
    assert where == {"model": [ALPHA], "docs": ["params", "none"]}
    only = ds.filter(where)
    assert set(only.runs.run_id.str.split("#").str[0]) == {"a-gemm-tri-h-params"}
    by = parse_axes("prompt,turns")
    assert by == ["prompt_variant", "turns"]
    variants = tables.score(ds.filter({"run_id": [f"a-gemm-tri-h#{k}" for k in range(3)]}), by)
    plan8 = _row(variants, prompt_variant="plan", turns=8)
    assert (plan8.n, plan8.n_correct_with_arch, plan8.best_speedup) == (1, 1, pytest.approx(0.92))
    with pytest.raises(XlangError, match="unknown report axis"):
        parse_where("colour=red")
    ctx = tables.score(ds, ["model", "context"])
    assert set(zip(ctx.model, ctx.context)) == {(ALPHA, "trimmed"), (BETA, "single-user")}


def test_report_command_renders_every_table(store, tmp_path):
    from typer.testing import CliRunner

    from xlang.cli import app

    out = tmp_path / "report"
    res = CliRunner().invoke(app, ["report", "--store", str(store), "--out", str(out), "--by", "model,docs",
                                   "--where", "task=gemm"], env={"COLUMNS": "220"})
    assert res.exit_code == 0, res.output
    assert "by model, docs" in res.output and "xlangrep/alpha" in res.output and "params" in res.output
    html = (out / "index.html").read_text()
    for name in ("custom", "main", "cells", "turn_limits", "docs", "lang_arch", "shapes", "errors", "transitions",
                 "tokens", "cost"):
        assert f'id="{name}-table"' in html, name
    assert html.count('class="plot"') == 6 and "Filter: <code>task=gemm</code>" in html
    custom = pd.read_csv(out / "data" / "custom.csv")
    assert set(zip(custom.model, custom.docs)) == {(ALPHA, "contracts"), (ALPHA, "params"), (BETA, "contracts")}
    assert set(pd.read_csv(out / "data" / "runs.csv").task) == {"gemm"}
    md = (out / "report.md").read_text()
    assert "## Docs-level ablation" in md and "xlang report --by model,task,arch,lang,docs" in md
    bad = CliRunner().invoke(app, ["report", "--store", str(store), "--out", str(out), "--by", "colour"])
    assert bad.exit_code != 0 and "unknown report axis" in str(bad.exception or bad.output)


def test_turn_rows_carry_the_clock_each_side_was_timed_at():
    """The report's turn data keeps the card's SM clock while the candidate and the vendor were timed, the idle
    before each timed call, the idle inside a call's span and the harness version; verdicts from before these were
    recorded give empty cells, not errors."""
    from xlang.report.data import _turn_row

    run = {"run_id": "r", "task": "attn_bwd", "lang": "cuda_ptx", "arch": "h100"}
    timing = {"speedup": 0.89, "tflops": 521.0, "rest_ms": 50.0,
              "candidate_power": {"sm_clock_mhz": 1776, "power_w": 692.0}, "baseline_power": {"sm_clock_mhz": 1696},
              "candidate_profile": {"activities": [], "idle_ms": 0.002, "calls": 80},
              "baseline_profile": {"activities": [], "idle_ms": 0.067, "calls": 83}}
    verdict = {"category": "ok", "compiled": True, "census_ok": True, "executed_ok": True, "runtime_ran": True,
               "correct": True, "timing": timing, "fingerprint": {"harness_version": "4"}}
    row = _turn_row(run, {"turn": 1, "verdict": verdict})
    assert (row["sm_clock_mhz"], row["vendor_sm_clock_mhz"], row["timing_rest_ms"]) == (1776, 1696, 50.0)
    assert (row["idle_ms"], row["vendor_idle_ms"], row["harness"]) == (0.002, 0.067, "4")
    old = _turn_row(run, {"turn": 1, "verdict": {**verdict, "timing": {"speedup": 0.89, "tflops": 521.0},
                                                 "fingerprint": {"harness_version": "3"}}})
    assert (old["sm_clock_mhz"], old["vendor_sm_clock_mhz"], old["timing_rest_ms"]) == (None, None, None)
    assert (old["idle_ms"], old["vendor_idle_ms"], old["harness"]) == (None, None, "3")
