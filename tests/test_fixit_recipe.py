"""`xlang fixit build RECIPE` (issue 38): s0-s6-style datasets from scripted stores on CPU, in the ptxbench, chat and
ShareGPT layouts, with a repair loop whose teacher gets the judge's feedback between turns, bounded reasoning traces
by two scripted reasoning teachers, a token-length filter and per-category caps.

Stores (gemm · triton · h100), written with the Store API, each turn's code a distinct text:
  a.db, alpha, sample 0: compile_error -> ok            (pair, kernel)
  a.db, alpha, sample 1: incorrect -> ok                (pair, kernel)
  a.db, alpha, sample 2: incorrect (a long candidate) -> ok   (pair over the token limit, kernel)
  a.db, alpha, sample 3: missing_instructions           (unfixed: the code teacher repairs it)
  b.db, beta,  sample 0: incorrect -> ok                (pair whose trace by reasoner-b is over its bound, kernel)
The code teacher's first reply is judged incorrect (a fake runtime reads the verdict from a marker line; the build is
real), the judge's feedback goes back to it, and its second reply is ok.
"""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path

import pytest
from typer.testing import CliRunner

from xlang import verdict as V
from xlang.fixit import common as C
from xlang.store import Store

ROOT = Path(__file__).resolve().parent.parent
GOOD = (ROOT / "tests" / "kernels" / "triton" / "gemm_tma.py").read_text()
SYSTEM = "You write GPU kernels in Triton."
TASK = "Write a bf16 GEMM for H100 with entry point xlang_entry(A, B, C, M, N, K)."
CALLS: list = []


def code(tag: str, lines: int = 3) -> str:
    body = "\n".join(f"    v{tag}_{i} = tl.load(A + {i})" for i in range(lines))
    return f"import triton\nimport triton.language as tl\n\n@triton.jit\ndef k_{tag}(A):\n{body}\n"


# (store, model, sample) -> turns: (category, code, speedup)
TRAJECTORIES = {
    ("a", "alpha", 0): [(V.COMPILE_ERROR, code("ce"), None), (V.OK, code("okA", 4), 0.9)],
    ("a", "alpha", 1): [(V.INCORRECT, code("inc1"), None), (V.OK, code("okB", 5), 1.1)],
    ("a", "alpha", 2): [(V.INCORRECT, code("long", 700), None), (V.OK, code("okC", 6), 0.7)],
    ("a", "alpha", 3): [(V.MISSING_INSTRUCTIONS, code("fma"), None)],
    ("b", "beta", 0): [(V.INCORRECT, code("incB"), None), (V.OK, code("okD", 7), 1.2)],
}
LONG_TRACE = " ".join(["word"] * 80)


def trace(teacher: str, prompt: str) -> str:
    if teacher == "reasoner-b" and "vincB_0" in prompt:
        return LONG_TRACE  # over reasoner-b's bound of 60 words: left out
    return f"Trace by {teacher}: read what the judge said, find the cause, change the load and the tile."


@pytest.fixture(scope="module")
def scripted():
    from xlang.agent.llm import litellm_module

    litellm = litellm_module()

    class Scripted(litellm.CustomLLM):
        def completion(self, *args, **kwargs):
            model, messages = kwargs["model"], kwargs["messages"]
            CALLS.append((model, messages))
            if model == "coder":
                told = messages[-1]["content"]
                marker = "correct 0.85" if "Result of turn 1/3: **incorrect**" in told else "incorrect"
                text = f"```python\n# xlang-fake: {marker}\n{GOOD.rstrip()}\n```"
            else:
                text = trace(model, messages[-1]["content"])
            return litellm.completion(model="gpt-4o", messages=messages, mock_response=text)

    old = list(litellm.custom_provider_map)
    litellm.custom_provider_map = old + [{"provider": "xlangrecipe", "custom_handler": Scripted()}]
    yield
    litellm.custom_provider_map = old


def fake_evaluate(source, build, lang, task, arch, shape, options):
    m = re.search(r"xlang-fake: ([\w-]+)(?: ([\d.]+))?", source or "")
    kind, speedup = (m.group(1), float(m.group(2))) if m and m.group(2) else (m.group(1) if m else "incorrect", None)
    correct = kind == "correct"
    return V.Verdict(V.OK if correct else V.INCORRECT, detail=f"fake profiler: {kind} (C[0, 0] off by 3.0)",
                     lang=lang, task=task.name, arch=arch.name, shape=dict(shape), runtime_ran=True, compiled=True,
                     census_ok=True, correct=correct, executed_ok=correct,
                     timing={"speedup": speedup} if correct else None,
                     fingerprint={"harness_version": "test-h", "gpu": "fake H100 (tests/test_fixit_recipe.py)"})


def _stores(root: Path) -> dict:
    paths = {"a": root / "a.db", "b": root / "b.db"}
    for (store, model, k), turns in TRAJECTORIES.items():
        with Store(paths[store]) as s:
            if k == 0:
                s.create_run(model, task="gemm", lang="triton", arch="h100", model=f"xlangrecipe/{model}",
                             source="llm", docs_level="contracts", turns_limit=2, samples=4, versions={"xlang": "t"})
            s.start_sample(model, k)
            for i, (cat, text, speed) in enumerate(turns, 1):
                feedback = f"Result of turn {i}/2: **{cat}** (scripted). The judge's detail for {cat}."
                verdict = {"category": cat, "detail": f"{cat} detail", "fingerprint": {"harness_version": "test-h"},
                           "timing": {"speedup": speed} if speed else None}
                msgs = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": TASK}] if i == 1 else []
                s.add_turn(model, k, i, messages=msgs, code=text, verdict=verdict, feedback=feedback, speedup=speed,
                           model=f"xlangrecipe/{model}")
            s.update_sample(model, k, status="done")
    return paths


RECIPE = """
name = "study"
out = "data"
formats = ["ptxbench", "chat", "sharegpt"]
max_tokens = 2000
tokenizer = "litellm:gpt-4o"

[sources]
stores = ["a.db", "b.db"]
dedup = 1.0

[teachers]
code = "xlangrecipe/coder"
reasoning = ["xlangrecipe/reasoner-a", "xlangrecipe/reasoner-b"]
max_words = 60
repair_turns = 3
profiler = "fake-recipe"

[[datasets]]
name = "s0"
mode = "direct"
reasoning = "xlangrecipe/reasoner-a"

[[datasets]]
name = "s1"
mode = "fix"
origins = ["trajectory"]
reasoning = "xlangrecipe/reasoner-a"

[[datasets]]
name = "s2"
mode = "fix"
reasoning = "xlangrecipe/reasoner-a"
cap = 1

[[datasets]]
name = "s3"
mode = "fix"
reasoning = "xlangrecipe/reasoner-b"

[[datasets]]
name = "s4"
mode = "fix"
formats = ["chat"]
"""


@pytest.fixture(scope="module")
def built(scripted, tmp_path_factory):
    import xlang.backend
    from xlang.agent.runtime import Runtime, register_runtime

    real_build, cache, guard = xlang.backend.build_candidate, {}, threading.Lock()

    def build_once(source, lang, task, arch, shape=None, *args, **kwargs):
        plain = "\n".join(line for line in str(source).splitlines() if "xlang-fake:" not in line)
        with guard:
            if plain not in cache:
                cache[plain] = real_build(source, lang, task, arch, shape, *args, **{**kwargs, "cache": False})
            return cache[plain]

    register_runtime("fake-recipe", lambda spec, arch: Runtime("fake-recipe", True, evaluate=fake_evaluate,
                                                               build=build_once))
    root = tmp_path_factory.mktemp("recipe")
    _stores(root)
    (root / "study.toml").write_text(RECIPE)
    from xlang.cli import app

    res = CliRunner().invoke(app, ["fixit", "build", str(root / "study.toml")], env={"COLUMNS": "200"})
    assert res.exit_code == 0, (res.output, res.exception)
    calls = list(CALLS)
    again = CliRunner().invoke(app, ["fixit", "build", str(root / "study.toml")], env={"COLUMNS": "200"})
    assert again.exit_code == 0, (again.output, again.exception)
    return {"root": root, "out": root / "data", "output": res.output, "again": again.output, "calls": calls,
            "calls_again": CALLS[len(calls):]}


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_repair_loop_takes_the_judges_feedback_between_turns(built):
    folder = built["out"] / "collection"
    rows = C.read_jsonl(folder / "repairs.jsonl")
    assert [(r["turn"], r["category"], r["accepted"]) for r in rows] == [(1, V.INCORRECT, False), (2, V.OK, True)]
    assert rows[0]["feedback"].startswith("Result of turn 1/3: **incorrect**") and rows[1]["feedback"] is None
    coder = [m for model, m in built["calls"] if model == "coder"]
    assert len(coder) == 2 and len(coder[0]) == 2
    # The second turn: the first reply and the judge's feedback on it, as the agent loop sends them.
    assert [m["role"] for m in coder[1]] == ["system", "user", "assistant", "user"]
    assert coder[1][2]["content"].startswith("```python\n# xlang-fake: incorrect")
    assert coder[1][3]["content"] == rows[0]["feedback"] and "fake profiler: incorrect" in rows[0]["feedback"]
    (repaired,) = [p for p in C.read_jsonl(folder / "pairs.jsonl") if p["origin"] == "repair"]
    assert repaired["repair_turn"] == 2 and repaired["category"] == V.MISSING_INSTRUCTIONS
    assert "correct 0.85" in repaired["fixed_code"] and repaired["fix_model"] == "xlangrecipe/coder"
    import jsonschema

    schema = jsonschema.Draft202012Validator(C.schema("pair"))
    for p in C.read_jsonl(folder / "pairs.jsonl"):
        schema.validate(p)


def test_ptxbench_layout_and_masks(built):
    out = built["out"]
    records = _jsonl(out / "s1" / "ptxbench.jsonl")
    pairs = {p["id"]: p for p in C.read_jsonl(out / "collection" / "pairs.jsonl")}
    assert len(records) == 3
    for rec in records:
        m = rec["messages"]
        p = pairs[rec["id"]]
        assert [x["role"] for x in m] == ["system", "user", "assistant", "user", "assistant"]
        assert [x["step_loss_mask"] for x in m] == [0, 0, 0, 0, 1]
        assert m[0]["content"] == SYSTEM and m[1]["content"] == TASK
        assert m[2]["content"] == f"```python\n{p['failed_code'].rstrip()}\n```"
        assert m[3]["content"] == p["feedback"]
        assert m[4]["content"] == (f"<think>\n{trace('reasoner-a', '')}\n</think>\n\n"
                                   f"```python\n{p['fixed_code'].rstrip()}\n```")
        assert rec["meta"]["reasoning_model"] == "xlangrecipe/reasoner-a" and rec["meta"]["tokens"] <= 2000
        assert rec["meta"]["reasoning_max_words"] == 60 and rec["format"] == "fixit-ptxbench"
    direct = _jsonl(out / "s0" / "ptxbench.jsonl")
    assert len(direct) == 5
    for rec in direct:
        assert [(x["role"], x["step_loss_mask"]) for x in rec["messages"]] == [("system", 0), ("user", 0),
                                                                              ("assistant", 1)]
        assert rec["messages"][2]["content"].startswith("<think>\nTrace by reasoner-a")
    share = json.loads((out / "s1" / "sharegpt.json").read_text())
    assert [c["from"] for c in share[0]["conversations"]] == ["human", "gpt", "human", "gpt"]
    assert share[0]["system"] == SYSTEM
    assert share[0]["conversations"][-1]["value"] == records[0]["messages"][-1]["content"]
    info = json.loads((out / "dataset_info.json").read_text())
    assert info["study_s1"]["file_name"] == "s1/sharegpt.json" and info["study_s1"]["mask_history"] is True
    assert info["study_s1"]["formatting"] == "sharegpt" and "study_s4" not in info
    chat = _jsonl(out / "s4" / "chat.jsonl")
    assert all([x["role"] for x in r["messages"]] == ["system", "user", "assistant"] for r in chat)
    assert all("step_loss_mask" not in x for r in chat for x in r["messages"])
    assert not (out / "s4" / "ptxbench.jsonl").exists()


def test_summary_says_what_went_in(built):
    s = json.loads((built["out"] / "summary.json").read_text())
    counts = {name: d["counts"] for name, d in s["datasets"].items()}
    assert counts["s0"] == {"available": 5, "no_trace": 0, "too_long": 0, "capped_out": 0, "kept": 5}
    assert counts["s1"] == {"available": 4, "no_trace": 0, "too_long": 1, "capped_out": 0, "kept": 3}
    assert counts["s2"] == {"available": 5, "no_trace": 0, "too_long": 1, "capped_out": 1, "kept": 3}
    assert counts["s3"] == {"available": 5, "no_trace": 1, "too_long": 1, "capped_out": 0, "kept": 3}
    assert counts["s4"] == {"available": 5, "no_trace": 0, "too_long": 1, "capped_out": 0, "kept": 4}
    assert s["datasets"]["s2"]["buckets"]["incorrect"] == {"available": 2, "kept": 1, "cap": 1}
    assert s["datasets"]["s2"]["by_origin"] == {"repair": 1, "trajectory": 2}
    # The second build asks reasoner-b again for the trace it left out (over the bound), and leaves it out again.
    assert s["reasoning"]["xlangrecipe/reasoner-b"]["over_limit"] == 1
    # summary.json is the second build's: its repair had nothing left to do; the collection keeps the history.
    assert s["repair"]["failures"] == 0 and s["recipe"]["teachers"]["repair_turns"] == 3
    assert [(r["accepted"], r["turns"]) for r in s["collection"]["repairs"]] == [(1, 3), (0, 3)]
    md = (built["out"] / "SUMMARY.md").read_text()
    assert "| s3 | fix | xlangrecipe/reasoner-b | trajectory, repair | 5 | 1 | 1 | 0 | 3 |" in md
    assert "s1 (fix, reasoning xlangrecipe/reasoner-a): 3 of 4 rows" in built["output"]


def test_a_second_build_reuses_everything(built):
    assert "the same stores and settings: kept" in built["again"]
    # Every failure was attempted and every row but one has its traces: the teachers are asked nothing again but the
    # one trace reasoner-b's reply overran (a row without a trace is asked for again).
    assert [(model, "vincB_0" in m[-1]["content"]) for model, m in built["calls_again"]] == [("reasoner-b", True)]
    assert json.loads((built["out"] / "summary.json").read_text())["datasets"]["s2"]["counts"]["kept"] == 3


def test_export_writes_the_layouts_too(built, tmp_path):
    from xlang.fixit.export import export

    card = export(built["out"] / "collection", tmp_path, require_explanation=False,
                  formats=["chat", "ptxbench", "sharegpt"], reasoning_model="xlangrecipe/reasoner-b", max_tokens=2000)
    assert card["layouts"]["fixit"]["records"] == 3 and card["layouts"]["fixit"]["no_trace"] == 1
    assert card["layouts"]["chat_too_long"]["fixit"] == 1
    assert "fixit layouts fixit/ptxbench.jsonl, fixit/sharegpt.json: 3 records" in (tmp_path / "DATACARD.md").read_text()
    rec = _jsonl(tmp_path / "fixit" / "ptxbench.jsonl")[0]
    assert [x["step_loss_mask"] for x in rec["messages"]] == [0, 0, 0, 0, 1]
    assert json.loads((tmp_path / "dataset_info.json").read_text())["xlang_fixit"]["file_name"] == \
        "fixit/sharegpt.json"


def test_reason_command(built, tmp_path):
    import shutil

    from xlang.cli import app

    folder = tmp_path / "collection"
    shutil.copytree(built["out"] / "collection", folder)
    res = CliRunner().invoke(app, ["fixit", "reason", str(folder), "--model", "xlangrecipe/reasoner-c",
                                   "--max-words", "5", "--what", "kernels"], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    assert "0 of 5 traces written (5 over 5 words" in res.output  # the bound is kept: nothing is cut
    res = CliRunner().invoke(app, ["fixit", "reason", str(folder), "--model", "xlangrecipe/reasoner-c",
                                   "--what", "kernels", "--limit", "2"], env={"COLUMNS": "200"})
    assert "2 of 2 traces written" in res.output
    traces = [k["reasoning"].get("xlangrecipe/reasoner-c") for k in C.read_jsonl(folder / "kernels.jsonl")]
    assert sum(t is not None for t in traces) == 2
    assert all(t["max_words"] == 600 and t["words"] <= 600 for t in traces if t)


def test_recipes_are_checked(tmp_path):
    from xlang.errors import XlangError
    from xlang.fixit.recipe import load_recipe

    (tmp_path / "a.db").write_bytes(b"")
    cases = {
        'bogus = 1\n[sources]\nstores = ["a.db"]\n[[datasets]]\nname = "s0"\n': "unknown key",
        '[sources]\nstores = ["nope.db"]\n[[datasets]]\nname = "s0"\n': "no such store",
        '[sources]\nstores = ["a.db"]\n': "no \\[\\[datasets\\]\\]",
        '[sources]\nstores = ["a.db"]\n[[datasets]]\nname = "s0"\nreasoning = "x/y"\n': "not one of",
        '[sources]\nstores = ["a.db"]\n[[datasets]]\nname = "s0"\n': "name reasoning = MODEL",
        '[sources]\nstores = ["a.db"]\n[[datasets]]\nname = "s0"\nmode = "other"\nformats = ["chat"]\n': "mode",
        '[sources]\nstores = ["a.db"]\n[[datasets]]\nname = "../x"\nformats = ["chat"]\n': "letters, digits",
    }
    for text, message in cases.items():
        (tmp_path / "r.toml").write_text(text)
        with pytest.raises(XlangError, match=message):
            load_recipe(tmp_path / "r.toml")


def test_the_example_recipe_is_a_whole_study(tmp_path):
    from xlang.fixit.recipe import load_recipe

    example = (ROOT / "xlang" / "fixit" / "recipes" / "study.toml").read_text()
    (tmp_path / "r.db").write_bytes(b"")
    (tmp_path / "study.toml").write_text(example.replace('"../../../xlang-runs/results.db"', '"r.db"'))
    r = load_recipe(tmp_path / "study.toml")
    assert [d["name"] for d in r["datasets"]] == [f"s{i}" for i in range(7)]
    assert {d["mode"] for d in r["datasets"]} == {"direct", "fix"}
    assert len({d["reasoning"] for d in r["datasets"]}) == 3  # two teachers and none
    assert any(d["cap"] for d in r["datasets"]) and any(d["cap"] is None for d in r["datasets"])
