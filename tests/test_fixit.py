"""Fixit (issue 17): failure -> fix data from stores made by the real agent loop with scripted litellm models (no
network), and BM25 fix-note retrieval in the loop.

Two stores are filled by `xlang.agent.loop.run` (real builds and SASS census) with a fake runtime in place of the
GPU profiler: its verdict is read from a marker line the script put in the candidate (`xlang-fake: correct 0.95`,
`xlang-fake: incorrect`), as in tests/test_report_store.py. Then the four commands run through the CLI (collect with
a cap of 1 per bucket, repair by a scripted teacher judged by the same fake runtime, explain by a scripted model,
export) and every file is checked record by record and against the published JSON Schemas. Finally a run with
--notes bm25+kernel (and a replay with --notes bm25) retrieves the exported notes and records them per turn.

Trajectories (gemm · triton · h100):
  store 1, model alpha, sample 0: compile_error (BAD) -> incorrect (FMA) -> ok (GOOD 0.95)
  store 1, model alpha, sample 1: missing_instructions (FMA, correct) -> no_code -> no_code   (unfixed)
  store 2, model beta,  sample 0: compile_error (BAD, the same code) -> incorrect (GOOD) -> ok (GOOD 0.90)
"""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from xlang import verdict as V
from xlang.agent.loop import RunConfig, run
from xlang.fixit import common as C
from xlang.store import Store

ROOT = Path(__file__).resolve().parent.parent
KERNELS = ROOT / "tests" / "kernels"
FMA = (KERNELS / "triton" / "fma_only.py").read_text()
GOOD = (KERNELS / "triton" / "gemm_tma.py").read_text()
BAD = ('import triton\nimport triton.language as tl\n\n@triton.jit\ndef k(C, N):\n'
       '    i = tl.arange(0, 128)\n    tl.store(C + i, undefined_tile_value)\n\n'
       'def xlang_entry(A, B, C, M, N, K):\n    k[(1,)](C, N)\n')
KINDS = {"bad": BAD, "fma": FMA, "good": GOOD}

# (model, sample) -> one reply per turn: (kind, marker) or None (prose, no code)
STUDENT = {
    ("alpha", 0): [("bad", ""), ("fma", "incorrect"), ("good", "correct 0.95")],
    ("alpha", 1): [("fma", "correct 0.50"), None, None],
    ("beta", 0): [("bad", ""), ("good", "incorrect"), ("good", "correct 0.90")],
    ("gamma", 0): [("bad", ""), ("good", "correct 0.90")],
}
# The teacher: a repair that is still incorrect (judged, not counted), then one that is ok.
TEACHER = {1: ("good", "incorrect"), 2: ("good", "correct 0.80")}
CALLS: list = []


def candidate(kind: str, marker: str) -> str:
    code = KINDS[kind]
    if marker:
        code = f"# xlang-fake: {marker}\n{code}"
    return f"My kernel:\n\n```python\n{code.rstrip()}\n```\n"


def note_for(category: str) -> str:
    return {"compile_error": "undefined_tile_value was never defined: the fix loads the tile with tl.load and "
                             "stores it through TMA descriptors.",
            "incorrect": "the result was wrong: the fix masks the K tail and accumulates in fp32.",
            "missing_instructions": "plain FMA loops never emit wgmma: the fix uses tl.dot on TMA-loaded tiles."
            }[category]


@pytest.fixture(scope="module")
def scripted():
    from xlang.agent.llm import litellm_module

    litellm = litellm_module()

    class Scripted(litellm.CustomLLM):
        def completion(self, *args, **kwargs):
            model, messages = kwargs["model"], kwargs["messages"]
            seed = int(kwargs.get("optional_params", {}).get("seed") or 0)
            CALLS.append((model, seed, messages))
            if model == "teacher":
                text = candidate(*TEACHER[seed])
            elif model == "explainer":
                category = re.search(r"failed with \*\*(\w+)\*\*", messages[-1]["content"]).group(1)
                text = note_for(category)
            else:
                turn = sum(1 for m in messages if m["role"] == "assistant") + 1
                step = STUDENT[(model, seed)][turn - 1]
                text = "Let me think first." if step is None else candidate(*step)
            return litellm.completion(model="gpt-4o", messages=messages, mock_response=text)

    old = list(litellm.custom_provider_map)
    litellm.custom_provider_map = old + [{"provider": "xlangfix", "custom_handler": Scripted()}]
    yield
    litellm.custom_provider_map = old


def fake_evaluate(source, build, lang, task, arch, shape, options):
    m = re.search(r"xlang-fake: ([\w-]+)(?: ([\d.]+))?", source or "")
    kind, speedup = (m.group(1), float(m.group(2)) if m.group(2) else None) if m else ("incorrect", None)
    census_ok = not build.census.missing
    correct = kind == "correct"
    category = V.INCORRECT if not correct else V.MISSING_INSTRUCTIONS if not census_ok else V.OK
    return V.Verdict(category, detail=f"fake profiler: {kind}", lang=lang, task=task.name, arch=arch.name,
                     shape=dict(shape), runtime_ran=True, compiled=True, census_ok=census_ok, correct=correct,
                     executed_ok=census_ok and correct, timing={"speedup": speedup} if correct else None,
                     fingerprint={"harness_version": "test-h", "gpu": "fake H100 (tests/test_fixit.py)"})


@pytest.fixture(scope="module")
def env(scripted, tmp_path_factory):
    """The two stores, and builds patched to build each distinct candidate (marker line aside) once."""
    import xlang.backend
    from xlang.agent.runtime import Runtime, register_runtime

    register_runtime("fake-fixit", lambda spec, arch: Runtime("fake-fixit", True, evaluate=fake_evaluate))
    real_build, built, guard = xlang.backend.build_candidate, {}, threading.Lock()

    def build_once(code, lang, task, arch, shape=None, *args, **kwargs):
        plain = "\n".join(line for line in str(code).splitlines() if "xlang-fake:" not in line)
        key = (plain, lang, task.name, arch.name, tuple(sorted((shape or {}).items())))
        with guard:
            if key not in built:
                built[key] = real_build(code, lang, task, arch, shape, *args, **{**kwargs, "cache": False})
            return built[key]

    mp = pytest.MonkeyPatch()
    mp.setattr(xlang.backend, "build_candidate", build_once)
    root = tmp_path_factory.mktemp("fixit")
    s1, s2 = root / "s1.db", root / "s2.db"
    common = dict(task="gemm", lang="triton", arch="h100", turns=3, profiler="fake-fixit", concurrency=1, seed=0)
    run(RunConfig(model="xlangfix/alpha", samples=2, store=str(s1), run_id="alpha", **common))
    run(RunConfig(model="xlangfix/beta", store=str(s2), run_id="beta", **common))
    yield {"root": root, "s1": s1, "s2": s2}
    mp.undo()


def cli(*args):
    from xlang.cli import app

    res = CliRunner().invoke(app, [str(a) for a in args], env={"COLUMNS": "200"})
    assert res.exit_code == 0, (res.output, res.exception)
    return res.output


def validator(name: str):
    import jsonschema

    cls = jsonschema.Draft202012Validator
    cls.check_schema(C.schema(name))
    return cls(C.schema(name))


@pytest.fixture(scope="module")
def pipeline(env):
    """collect -> repair -> explain -> export through the CLI; what each step left behind."""
    folder, out = env["root"] / "fx", env["root"] / "fx" / "export"
    steps = {"collect": cli("fixit", "collect", "--store", env["s1"], "--store", env["s2"], "--out", folder,
                            "--cap", 1)}
    steps["pairs_after_collect"] = C.read_jsonl(folder / "pairs.jsonl")
    steps["manifest_after_collect"] = C.read_json(folder / "collect.json")
    steps["repair"] = cli("fixit", "repair", folder, "--model", "xlangfix/teacher", "--profiler", "fake-fixit",
                          "--attempts", 2)
    steps["explain"] = cli("fixit", "explain", folder, "--model", "xlangfix/explainer")
    steps["export"] = cli("fixit", "export", folder, "--out", out)
    return {"folder": folder, "out": out, **steps}


# ------------------------------------------------------------------------------------------- the stores


def test_stores_hold_the_scripted_trajectories(env):
    with Store(env["s1"], readonly=True) as db:
        cats = {k: [t["category"] for t in db.turns(run_id="alpha", sample_idx=k)] for k in (0, 1)}
    assert cats == {0: [V.COMPILE_ERROR, V.INCORRECT, V.OK], 1: [V.MISSING_INSTRUCTIONS, V.NO_CODE, V.NO_CODE]}
    with Store(env["s2"], readonly=True) as db:
        assert [t["category"] for t in db.turns(run_id="beta")] == [V.COMPILE_ERROR, V.INCORRECT, V.OK]
        assert db.run("beta")["notes_level"] == "none" and all(t["notes"] is None for t in db.turns())


# ------------------------------------------------------------------------------------------- collect


def test_collect_pairs_dedup_and_caps(env, pipeline):
    m, pairs = pipeline["manifest_after_collect"], pipeline["pairs_after_collect"]
    assert m["found"] == {"pairs": 4, "unfixed": 1, "kernels": 2}
    # beta's compile error is alpha's code again (a duplicate); beta's final kernel is alpha's (marker aside).
    assert m["after_dedup"] == {"pairs": 3, "unfixed": 1, "kernels": 1}
    assert m["kept"] == {"pairs": 2, "unfixed": 1, "kernels": 1}
    assert m["buckets"]["pairs"] == {"compile_error/gemm/triton/h100": {"available": 1, "kept": 1},
                                     "incorrect/gemm/triton/h100": {"available": 2, "kept": 1}}
    assert m["buckets"]["kernels"] == {"gemm/triton/h100": {"available": 1, "kept": 1}}
    assert m["cap"] == 1 and m["accept"] == "ok" and V.NO_CODE not in m["categories"]
    assert [s["runs"] for s in m["stores"]] == [1, 1] and m["stores"][0]["models"] == ["xlangfix/alpha"]
    (dup,) = m["duplicates"]["pairs"]
    by_cat = {p["category"]: p for p in pairs}
    assert dup["duplicate_of"] == by_cat[V.COMPILE_ERROR]["id"]
    ce = by_cat[V.COMPILE_ERROR]
    assert (ce["store"], ce["run_id"], ce["sample_idx"], ce["failed_turn"], ce["fixed_turn"]) == \
        (str(env["s1"]), "alpha", 0, 1, 3)
    assert ce["failed_code"].strip() == BAD.strip() and "undefined_tile_value" in ce["error"]
    assert ce["feedback"].startswith("Result of turn 1/3: **compile_error**")
    assert "correct 0.95" in ce["fixed_code"] and ce["fixed_category"] == V.OK and ce["fixed_speedup"] == 0.95
    assert ce["origin"] == "trajectory" and ce["fix_model"] and ce["explanation"] is None
    assert "xlang_entry" in ce["task_prompt"] and ce["system"]
    inc = by_cat[V.INCORRECT]  # one of alpha's (FMA, fixed at turn 3) and beta's (GOOD incorrect, fixed at 3)
    assert (inc["run_id"], inc["failed_turn"], inc["fixed_turn"]) in (("alpha", 2, 3), ("beta", 2, 3))
    # The same inputs keep the same pair (a seeded choice); another seed may choose the other.
    again = C.rebalance([{**p, "id": p["id"]} for p in pairs], 1, 0)[0]
    assert [p["id"] for p in again] == [p["id"] for p in pairs]
    (unfixed,) = C.read_jsonl(pipeline["folder"] / "unfixed.jsonl")
    assert (unfixed["run_id"], unfixed["sample_idx"], unfixed["failed_turn"], unfixed["category"]) == \
        ("alpha", 1, 1, V.MISSING_INSTRUCTIONS)
    for row in C.read_jsonl(pipeline["folder"] / "unfixed.jsonl"):
        validator("unfixed").validate(row)
    assert "kept 2 pairs, 1 unfixed, 1 kernels" in pipeline["collect"]


def test_collect_accept_category_pairs_the_next_stage(env, tmp_path):
    from xlang.fixit.collect import collect

    m = collect([str(env["s1"])], tmp_path, accept="category", cap=None, dedup=1.0)
    pairs = {(p["sample_idx"], p["failed_turn"]): (p["fixed_turn"], p["fixed_category"])
             for p in C.read_jsonl(tmp_path / "pairs.jsonl")}
    # compile_error is fixed by the next turn that compiles (incorrect), incorrect by ok.
    assert pairs == {(0, 1): (2, V.INCORRECT), (0, 2): (3, V.OK)}
    assert m["kept"]["unfixed"] == 1


# ------------------------------------------------------------------------------------------- repair


def test_repair_is_judged_before_it_counts(pipeline):
    folder = pipeline["folder"]
    attempts = C.read_jsonl(folder / "repairs.jsonl")
    assert [(a["attempt"], a["category"], a["accepted"]) for a in attempts] == \
        [(1, V.INCORRECT, False), (2, V.OK, True)]
    assert all(a["runtime"] == "fake-fixit" and a["targeted"] == V.MISSING_INSTRUCTIONS for a in attempts)
    assert attempts[0]["verdict"]["detail"] == "fake profiler: incorrect"
    teacher = [c for c in CALLS if c[0] == "teacher"]
    assert [c[1] for c in teacher] == [1, 2]
    prompt = teacher[0][2][-1]["content"]
    assert "## A candidate that failed" in prompt and "xlang-fake: correct 0.50" in prompt
    assert "missing_instructions" in prompt
    repaired = [p for p in C.read_jsonl(folder / "pairs.jsonl") if p["origin"] == "repair"]
    assert len(repaired) == 1
    r = repaired[0]
    assert r["fixed_category"] == V.OK and "correct 0.80" in r["fixed_code"] and r["fix_model"] == "xlangfix/teacher"
    assert r["fixed_turn"] is None and r["repair_attempt"] == 2 and r["fix_harness_version"] == "test-h"
    # The repaired kernel is a near-duplicate of the kept final kernel: KernelGen does not grow.
    assert len(C.read_jsonl(folder / "kernels.jsonl")) == 1
    assert C.read_json(folder / "collect.json")["repair"]["accepted"] == 1
    assert "1 of 1 failures repaired (2 replies, 1 not counted" in pipeline["repair"]
    # A second repair run skips failures attempted already.
    assert "0 of 0 failures" in cli("fixit", "repair", folder, "--model", "xlangfix/teacher", "--profiler",
                                    "fake-fixit")


# ------------------------------------------------------------------------------------------- explain, export


def test_export_record_by_record(pipeline):
    folder, out = pipeline["folder"], pipeline["out"]
    pairs = C.read_jsonl(folder / "pairs.jsonl")
    assert len(pairs) == 3 and all(p["explained_by"] == "xlangfix/explainer" for p in pairs)
    assert {p["category"]: p["explanation"] for p in pairs} == {c: note_for(c) for c in
                                                                (V.COMPILE_ERROR, V.INCORRECT, V.MISSING_INSTRUCTIONS)}
    explain_prompts = [c[2][-1]["content"] for c in CALLS if c[0] == "explainer"]
    assert len(explain_prompts) == 3 and all("```diff" in p for p in explain_prompts)
    fixit = C.read_jsonl(out / "fixit.jsonl")
    kernelgen = C.read_jsonl(out / "kernelgen.jsonl")
    notes = C.read_jsonl(out / "notes.jsonl")
    by_id = {p["id"]: p for p in pairs}
    assert sorted(r["id"] for r in fixit) == sorted(by_id) == sorted(n["id"] for n in notes)
    v_fixit, v_kg, v_note, v_pair = (validator(n) for n in ("fixit", "kernelgen", "note", "pair"))
    for p in pairs:
        v_pair.validate(p)
    for rec in fixit:
        v_fixit.validate(rec)
        p = by_id[rec["id"]]
        system, user, assistant = rec["messages"]
        assert system == {"role": "system", "content": p["system"]}
        assert user["content"].startswith(p["task_prompt"])
        assert p["failed_code"].rstrip() in user["content"] and p["feedback"] in user["content"]
        assert assistant["content"] == f"{p['explanation']}\n\n```python\n{p['fixed_code'].rstrip()}\n```"
        assert rec["meta"]["category"] == p["category"] and rec["meta"]["origin"] == p["origin"]
        assert (rec["meta"]["run_id"], rec["meta"]["failed_turn"]) == (p["run_id"], p["failed_turn"])
    for n in notes:
        v_note.validate(n)
        assert n["note"] == by_id[n["id"]]["explanation"] and n["fixed_code"] == by_id[n["id"]]["fixed_code"]
    (kg,) = kernelgen
    v_kg.validate(kg)
    assert [m["role"] for m in kg["messages"]] == ["system", "user", "assistant"]
    assert "correct 0.95" in kg["messages"][2]["content"] and kg["meta"]["run_id"] == "alpha"
    assert (kg["meta"]["turn"], kg["meta"]["category"], kg["meta"]["speedup"]) == (3, V.OK, 0.95)
    # A record the schema must refuse: the checks can fail.
    import jsonschema

    broken = json.loads(json.dumps(fixit[0]))
    del broken["meta"]["category"]
    with pytest.raises(jsonschema.ValidationError):
        v_fixit.validate(broken)
    broken = {**kg, "messages": kg["messages"][:2]}
    with pytest.raises(jsonschema.ValidationError):
        v_kg.validate(broken)
    # Parquet holds the same records.
    pq = pd.read_parquet(out / "fixit.parquet")
    assert list(pq["id"]) == [r["id"] for r in fixit]
    assert [list(map(dict, m)) for m in pq["messages"]] == [r["messages"] for r in fixit]
    assert [json.loads(m) for m in pq["meta"]] == [r["meta"] for r in fixit]
    assert list(pd.read_parquet(out / "kernelgen.parquet")["id"]) == [kg["id"]]


def test_data_card(pipeline, env):
    card = C.read_json(pipeline["out"] / "datacard.json")
    validator("datacard").validate(card)
    assert card["counts"] == {"fixit": 3, "kernelgen": 1, "notes": 3, "pairs": 3, "pairs_without_explanation": 0,
                              "pairs_left_out": 0}
    assert card["buckets"]["fixit"] == {"compile_error/gemm/triton/h100": 1, "incorrect/gemm/triton/h100": 1,
                                        "missing_instructions/gemm/triton/h100": 1}
    assert card["buckets"]["fixit_by_origin"] == {"repair": 1, "trajectory": 2}
    assert card["buckets"]["kernelgen"] == {"gemm/triton/h100": 1}
    assert [s["path"] for s in card["sources"]["stores"]] == [str(env["s1"].resolve()), str(env["s2"].resolve())]
    assert card["models"]["teacher"] == ["xlangfix/teacher"]
    assert card["models"]["explanations"] == ["xlangfix/explainer"]
    assert set(card["models"]["trajectories"]) <= {"xlangfix/alpha", "xlangfix/beta"}
    assert card["versions"]["harness"] == ["test-h"]
    assert card["collection"]["cap"] == 1 and card["repairs"][0]["accepted"] == 1
    md = (pipeline["out"] / "DATACARD.md").read_text()
    assert "incorrect/gemm/triton/h100: 1" in md and "xlangfix/teacher" in md


# ------------------------------------------------------------------------------------------- retrieval


def test_bm25_returns_the_planted_note():
    from xlang.fixit.notes import NoteIndex

    distractors = [
        {"id": f"d{i}", "note": f"distractor {i}", "category": cat, "task": task, "lang": lang, "arch": "h100",
         "error": err}
        for i, (cat, task, lang, err) in enumerate([
            ("incorrect", "gemm", "triton", "C: max abs error 3.1 at [1000, 17] (rtol 0.01)"),
            ("memory_error", "attn_fwd", "cuda_ptx", "Invalid __global__ write of size 2 bytes at gemm.cu:41"),
            ("timeout", "attn_fwd", "triton", "the candidate passed its 60 s limit"),
            ("compile_error", "gemm", "cuda_ptx", "error: identifier \"wgmma_fence\" is undefined"),
        ])]
    planted = {"id": "planted", "note": "declare the shared-memory barrier before the mbarrier.try_wait loop",
               "category": "runtime_error", "task": "gemm", "lang": "cuda_ptx", "arch": "h100",
               "error": "CUDA error: an illegal instruction was encountered (mbarrier try_wait parity)"}
    index = NoteIndex(distractors + [planted])
    hits = index.search(error="RuntimeError: CUDA error: an illegal instruction was encountered in mbarrier "
                              "try_wait", category="runtime_error", task="gemm", lang="cuda_ptx", arch="h100", k=3)
    assert hits[0].note["id"] == "planted" and hits[0].score > hits[1].score > 0
    assert len(hits) == 3 and hits[0].record()["category"] == "runtime_error"
    assert NoteIndex([]).search(error="x", category="incorrect", task="gemm", lang="triton", arch="h100") == []


def test_run_with_notes_records_them_per_turn(env, pipeline):
    from xlang.report import source, tables

    notes_store = pipeline["out"] / "notes.jsonl"
    ce_id = next(p["id"] for p in C.read_jsonl(pipeline["folder"] / "pairs.jsonl")
                 if p["category"] == V.COMPILE_ERROR)
    db = env["root"] / "notes.db"
    res = run(RunConfig(task="gemm", lang="triton", arch="h100", model="xlangfix/gamma", turns=2,
                        profiler="fake-fixit", store=str(db), run_id="gamma", notes="bm25+kernel",
                        notes_store=str(notes_store), notes_k=2))
    assert res.status == "done"
    with Store(db, readonly=True) as s:
        t1, t2 = s.turns(run_id="gamma")
        assert s.run("gamma")["notes_level"] == "bm25+kernel"
        assert s.run("gamma")["config"]["notes_count"] == 3
    assert t1["category"] == V.COMPILE_ERROR and t2["category"] == V.OK
    assert t1["notes"][0]["id"] == ce_id and t1["notes"][0]["category"] == V.COMPILE_ERROR
    assert len(t1["notes"]) == 2 and t1["notes"][0]["score"] > t1["notes"][1]["score"]
    assert "## Notes from earlier fixes" in t1["feedback"] and note_for(V.COMPILE_ERROR) in t1["feedback"]
    assert "The fixed kernel of note 1:" in t1["feedback"] and "correct 0.95" in t1["feedback"]
    assert t2["messages"][-1]["content"] == t1["feedback"]  # the model was shown them
    assert t2["notes"] is None  # an ok turn gets no notes
    out = cli("trajectory", "gamma", "--store", db)
    assert "notes" in out and ce_id in out
    shown = cli("trajectory", "gamma", "--store", db, "--turn", 1, "--show", "notes")
    assert json.loads(shown.split("\n", 1)[1])[0]["id"] == ce_id
    # The notes level is a report axis: this run's samples are bm25+kernel, the stores' runs none.
    ds = source.load(db)
    assert list(ds.runs.notes) == ["bm25+kernel"]
    by = tables.score(ds, ["notes"])
    assert list(by.notes) == ["bm25+kernel"] and int(by.n.iloc[0]) == 1
    assert set(source.load(env["s1"]).runs.notes) == {"none"}


def test_replay_with_notes(env, pipeline):
    db = env["root"] / "replay.db"
    run(RunConfig(task="gemm", lang="triton", arch="h100", model=f"replay:{env['s2']}#beta", turns=8,
                  profiler="fake-fixit", store=str(db), run_id="rep", notes="bm25",
                  notes_store=str(pipeline["out"] / "notes.jsonl")))
    with Store(db, readonly=True) as s:
        turns = s.turns(run_id="rep")
    assert [t["category"] for t in turns] == [V.COMPILE_ERROR, V.INCORRECT, V.OK]
    assert turns[0]["notes"] and turns[1]["notes"] and turns[2]["notes"] is None
    assert "## Notes from earlier fixes" in turns[0]["feedback"]
    assert "The fixed kernel of note" not in turns[0]["feedback"]  # bm25: notes alone


def test_notes_options_are_checked(tmp_path):
    from xlang.errors import XlangError

    cfg = dict(task="gemm", lang="triton", arch="h100", model="reference", profiler="none",
               store=str(tmp_path / "x.db"))
    with pytest.raises(XlangError, match="needs --notes-store"):
        run(RunConfig(notes="bm25", **cfg))
    with pytest.raises(XlangError, match="unknown"):
        run(RunConfig(notes="vectors", notes_store=str(tmp_path / "n.jsonl"), **cfg))
    with pytest.raises(XlangError, match="no such notes file"):
        run(RunConfig(notes="bm25", notes_store=str(tmp_path / "n.jsonl"), **cfg))
    (tmp_path / "n.jsonl").write_text('{"id": "a"}\n')
    with pytest.raises(XlangError, match="not a note"):
        run(RunConfig(notes="bm25", notes_store=str(tmp_path / "n.jsonl"), **cfg))
    assert not (tmp_path / "x.db").exists()


# ------------------------------------------------------------------------------------------- units


def test_fixes_and_near_duplicates():
    assert C.fixes(V.COMPILE_ERROR, V.OK, "ok") and not C.fixes(V.COMPILE_ERROR, V.STATIC_OK, "ok")
    assert C.fixes(V.COMPILE_ERROR, V.STATIC_OK, "static_ok") and not C.fixes(V.INCORRECT, V.INCORRECT, "category")
    assert C.fixes(V.COMPILE_ERROR, V.INCORRECT, "category") and not C.fixes(V.INCORRECT, V.COMPILE_ERROR, "category")
    dd = C.Deduper(0.9)
    dd.remember(("b",), "a", GOOD)
    relaid = "# a new comment\n" + GOOD.replace("    ", "  ")  # layout and comments only
    assert dd.seen(("b",), relaid) == "a"
    assert dd.seen(("other",), relaid) is None  # per bucket
    assert dd.seen(("b",), FMA) is None
    assert C.jaccard(C.shingles(GOOD), C.shingles(FMA)) < 0.5
