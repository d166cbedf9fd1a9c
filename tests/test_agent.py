"""The agent loop, driven for real (litellm, builds, census, store) through a scripted litellm CustomLLM: no network.

Each language's trajectory: turn 1 no code block, turn 2 a compile error, turn 3 code that compiles but lacks
wgmma/TMA (census), turn 4 a good kernel; the store must hold all four turns with those categories.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from xlang import verdict as V
from xlang.agent import feedback as F
from xlang.agent import prompt as P
from xlang.agent.loop import RunConfig, run
from xlang.archs import get_arch
from xlang.backend import get_backend
from xlang.errors import XlangError
from xlang.store import Store
from xlang.task import Task, get_task

ROOT = Path(__file__).resolve().parent.parent
KERNELS = ROOT / "tests" / "kernels"
GEMM = get_task("gemm")
H100 = get_arch("h100")

# name -> callable(turn_idx, messages) -> reply text (or an Exception instance to raise)
SCRIPTS: dict = {}
CALLS: list = []


@pytest.fixture(scope="module", autouse=True)
def scripted_provider():
    from xlang.agent.llm import litellm_module

    litellm = litellm_module()

    class Scripted(litellm.CustomLLM):
        def completion(self, *args, **kwargs):
            messages = kwargs["messages"]
            turn = sum(1 for m in messages if m["role"] == "assistant") + 1
            CALLS.append((kwargs["model"], turn, kwargs.get("optional_params", {})))
            out = SCRIPTS[kwargs["model"]](turn, messages)
            if isinstance(out, Exception):
                raise out
            # A real ModelResponse with usage, priced as gpt-4o (so completion_cost is not zero).
            return litellm.completion(model="gpt-4o", messages=messages, mock_response=out)

    old = list(litellm.custom_provider_map)
    litellm.custom_provider_map = old + [{"provider": "xlangtest", "custom_handler": Scripted()}]
    yield
    litellm.custom_provider_map = old


def fenced(tag: str, code: str, prose: str = "Here is my kernel.") -> str:
    return f"{prose}\n\n```{tag}\n{code.rstrip()}\n```\n"


BAD = {
    "triton": ('import triton\nimport triton.language as tl\n\n@triton.jit\ndef k(C, N):\n'
               '    i = tl.arange(0, 128)\n    tl.store(C + i, undefined_tile_value)\n\n'
               'def xlang_entry(A, B, C, M, N, K):\n    k[(1,)](C, N)\n'),
    "cuda_ptx": ('#include <cuda_bf16.h>\n__global__ void k(__nv_bfloat16* C) { int x = ; C[0] = x; }\n'
                 'extern "C" void xlang_entry(const __nv_bfloat16* A, const __nv_bfloat16* B, __nv_bfloat16* C,'
                 ' int M, int N, int K, cudaStream_t stream) { k<<<1, 1, 0, stream>>>(C); }\n'),
    "cutedsl": ('import cutlass\nimport cutlass.cute as cute\nfrom cutlass.cute.runtime import from_dlpack\n\n'
                '@cute.kernel\ndef k(c: cute.Tensor):\n    c[0] = undefined_tile_value\n\n'
                '@cute.jit\ndef host(c: cute.Tensor):\n    k(c).launch(grid=(1, 1, 1), block=(32, 1, 1))\n\n'
                'def xlang_entry(A, B, C, M, N, K):\n    cute.compile(host, from_dlpack(C))(from_dlpack(C))\n'),
}
BAD_MARK = {"triton": "undefined_tile_value", "cuda_ptx": "expected an expression", "cutedsl": "undefined_tile_value"}
NO_WGMMA = {"triton": KERNELS / "triton" / "fma_only.py", "cuda_ptx": KERNELS / "agent" / "gemm_fma.cu",
            "cutedsl": KERNELS / "cutedsl" / "fma_only.py"}
GOOD = {"triton": KERNELS / "triton" / "gemm_tma.py", "cuda_ptx": KERNELS / "cuda_ptx" / "gemm_tile_hopper.cu",
        "cutedsl": KERNELS / "cutedsl" / "hopper_tma_wgmma.py"}
TAG = {"triton": "python", "cuda_ptx": "cuda", "cutedsl": "python"}


def four_turn_script(lang: str):
    def script(turn, messages):
        if turn == 1:
            return "I will write a fast kernel using wgmma and TMA. Let me think about the tiling first."
        if turn == 2:
            return fenced(TAG[lang], BAD[lang])
        if turn == 3:
            return fenced(TAG[lang], NO_WGMMA[lang].read_text(), "Fixed. A simpler version:")
        return fenced(TAG[lang], GOOD[lang].read_text(), "Now with wgmma and TMA:")
    return script


def backend_ready(lang: str) -> str | None:
    try:
        b = get_backend(lang)
        (b.folder / "prompt.md").read_text()
    except Exception as e:  # noqa: BLE001
        return f"backend {lang} not ready: {e}"
    return None


@pytest.mark.parametrize("lang", ["triton", "cuda_ptx", "cutedsl"])
def test_four_turn_trajectory(lang, tmp_path):
    why = backend_ready(lang)
    if why:
        pytest.skip(why)
    if lang == "cutedsl" and not NO_WGMMA[lang].is_file():
        pytest.skip("tests/kernels/cutedsl/fma_only.py missing")
    SCRIPTS[f"four_{lang}"] = four_turn_script(lang)
    db = tmp_path / "r.db"
    shape = {"M": 1024, "N": 1024, "K": 1024} if lang == "cutedsl" else {}
    cfg = RunConfig(task="gemm", lang=lang, arch="h100", model=f"xlangtest/four_{lang}", turns=4, docs="templates",
                    profiler="none", store=str(db), shape=shape, temperature=0.3, seed=7, run_id=f"four-{lang}")
    result = run(cfg)
    assert result.status == "done"
    with Store(db) as store:
        turns = store.turns(run_id=f"four-{lang}")
        assert [t["category"] for t in turns] == [V.NO_CODE, V.COMPILE_ERROR, V.MISSING_INSTRUCTIONS, V.STATIC_OK]
        t1, t2, t3, t4 = turns
        # Exact prompts: turn 1 is system + task; turn n adds (reply, feedback) pairs.
        assert [m["role"] for m in t1["messages"]] == ["system", "user"]
        assert len(t4["messages"]) == 2 + 2 * 3
        first = t1["messages"][1]["content"]
        assert "xlang_entry" in first and "def reference" in first and "wgmma" in first
        assert get_backend(lang).title in first
        # Feedback travels to the next turn, verbatim.
        assert t2["messages"][-1]["content"] == t1["feedback"]
        assert t4["messages"][-1]["content"] == t3["feedback"]
        assert t1["code"] is None and "no fenced code block" in t1["feedback"]
        assert BAD_MARK[lang] in t2["feedback"], t2["feedback"]
        assert t2["build"]["ok"] is False
        assert "wgmma" in t3["feedback"] and "missing" in t3["feedback"].lower()
        assert t3["build"]["census"]["missing"] and "wgmma" in t3["build"]["census"]["missing"]
        assert t4["verdict"]["runtime_note"] == "not run (--profiler none)"
        assert t4["code"].strip() == GOOD[lang].read_text().strip()
        assert t4["build"]["census"]["present"] == ["wgmma", "tma"]
        for t in turns:
            assert t["seed"] == 7 and t["sampling"] == {"temperature": 0.3}
            assert t["total_tokens"] == 30 and t["cost_usd"] > 0
            assert t["verdict"]["category"] == t["category"]
        sample = store.samples(f"four-{lang}")[0]
        assert (sample["best_turn"], sample["best_category"], sample["turns_done"]) == (4, V.STATIC_OK, 4)
        run_row = store.run(f"four-{lang}")
        assert run_row["source"] == "llm" and run_row["status"] == "done"
        assert run_row["cost_usd"] == pytest.approx(sum(t["cost_usd"] for t in turns))
    # The seed and sampling parameters reached the provider.
    assert CALLS[-1][2].get("seed") == 7 and CALLS[-1][2].get("temperature") == 0.3

    # replay: the stored replies judged again give the same verdicts, with no LLM and no cost.
    replay = run(RunConfig(task="gemm", lang=lang, arch="h100", model=f"replay:{db}#four-{lang}", turns=8,
                           profiler="none", store=str(tmp_path / "replay.db"), shape=shape, run_id="rep"))
    with Store(tmp_path / "replay.db") as store:
        again = store.turns(run_id="rep")
        assert [t["category"] for t in again] == [t["category"] for t in turns]
        assert [t["code"] for t in again] == [t["code"] for t in turns]
        assert all(t["cost_usd"] == 0 for t in again)
        assert store.run("rep")["config"]["replay_of"]["run_id"] == f"four-{lang}"
    assert replay.status == "done"


def test_stop_on_ok_and_best(tmp_path):
    good = fenced("python", GOOD["triton"].read_text())
    SCRIPTS["stop"] = lambda turn, m: good if turn == 2 else "no code here"
    db = tmp_path / "r.db"
    res = run(RunConfig(task="gemm", lang="triton", arch="h100", model="xlangtest/stop", turns=5, profiler="none",
                        store=str(db), stop_on_ok=True, run_id="s"))
    assert [s.turns for s in res.samples] == [2]
    assert (res.samples[0].best_turn, res.samples[0].best_category) == (2, V.STATIC_OK)


def test_reference_and_replay(tmp_path, monkeypatch):
    solutions = tmp_path / "solutions"
    solutions.mkdir()
    (solutions / "triton.py").write_text(GOOD["triton"].read_text())

    def solution_path(self, lang, generation, suffix):
        p = solutions / f"{lang}{suffix}"
        return p if p.is_file() else None

    monkeypatch.setattr(Task, "solution_path", solution_path)
    db = tmp_path / "r.db"
    res = run(RunConfig(task="gemm", lang="triton", arch="h100", model="reference", turns=8, profiler="none",
                        store=str(db), run_id="ref-triton"))
    assert res.samples[0].status == "done" and res.samples[0].best_category == V.STATIC_OK
    # A missing expert solution is reported as missing (no turn), not as a failure.
    res2 = run(RunConfig(task="gemm", lang="cuda_ptx", arch="h100", model="reference", profiler="none",
                         store=str(db), run_id="ref-cuda"))
    assert res2.status == "done" and res2.samples[0].status == "missing"
    assert "cuda_ptx" in res2.samples[0].note
    with Store(db) as store:
        turns = store.turns(run_id="ref-triton")
        assert len(turns) == 1 and turns[0]["model"] == "reference" and turns[0]["cost_usd"] == 0
        assert turns[0]["code"] == GOOD["triton"].read_text()
        assert store.run("ref-triton")["turns_limit"] == 1  # one turn by construction, whatever --turns says
        assert store.turns(run_id="ref-cuda") == []
        assert store.samples("ref-cuda")[0]["status"] == "missing"
    # replay without a run id: the newest run of this task and language in the database.
    rep = run(RunConfig(task="gemm", lang="triton", arch="h100", model=f"replay:{db}", profiler="none",
                        store=str(tmp_path / "rep.db"), run_id="rep"))
    with Store(tmp_path / "rep.db") as store:
        assert [t["category"] for t in store.turns(run_id="rep")] == [V.STATIC_OK]
    assert rep.status == "done"
    with pytest.raises(XlangError, match="no run"):
        run(RunConfig(task="gemm", lang="triton", arch="h100", model=f"replay:{db}#nope", store=str(db)))


def test_max_cost_budget(tmp_path):
    SCRIPTS["cost"] = lambda turn, m: "thinking, no code yet"
    db = tmp_path / "r.db"
    # Each scripted call costs 0.000225 USD (priced as gpt-4o): the budget stops the sample after two calls.
    res = run(RunConfig(task="gemm", lang="triton", arch="h100", model="xlangtest/cost", turns=8, profiler="none",
                        store=str(db), max_cost=0.0004, run_id="c"))
    assert res.status == "budget" and res.samples[0].status == "budget"
    assert res.samples[0].turns == 2
    assert res.cost_usd == pytest.approx(0.00045)
    with Store(db) as store:
        assert [t["category"] for t in store.turns(run_id="c")] == [V.NO_CODE, V.NO_CODE]


def test_provider_errors_retried_then_recorded(tmp_path, monkeypatch):
    from xlang.agent import llm

    monkeypatch.setattr(llm, "_sleep", lambda s: None)
    litellm = llm.litellm_module()
    state = {"n": 0}

    def flaky(turn, m):
        state["n"] += 1
        if state["n"] == 1:
            return litellm.RateLimitError("slow down", llm_provider="xlangtest", model="flaky")
        if turn == 2:
            return litellm.BadRequestError("context too long", llm_provider="xlangtest", model="flaky")
        return "no code"

    SCRIPTS["flaky"] = flaky
    db = tmp_path / "r.db"
    res = run(RunConfig(task="gemm", lang="triton", arch="h100", model="xlangtest/flaky", turns=4, profiler="none",
                        store=str(db), run_id="f"))
    assert res.status == "error" and res.samples[0].status == "error"
    with Store(db) as store:
        turns = store.turns(run_id="f")
        assert [t["category"] for t in turns] == [V.NO_CODE, None]
        assert "BadRequestError" in turns[1]["error"]


def test_resume_continues_without_duplicates(tmp_path):
    SCRIPTS["resume"] = lambda turn, m: f"turn {turn}: still thinking"
    db = tmp_path / "r.db"
    cfg = dict(task="gemm", lang="triton", arch="h100", model="xlangtest/resume", profiler="none", store=str(db),
               run_id="res", samples=3, concurrency=3)
    run(RunConfig(turns=2, **cfg))
    with Store(db) as store:  # pretend sample 1 was killed mid-run: mark it running again
        store.update_sample("res", 1, status="running")
    run(RunConfig(turns=4, **cfg))
    with Store(db) as store:
        turns = store.turns(run_id="res")
        counts = {k: sum(1 for t in turns if t["sample_idx"] == k) for k in range(3)}
        assert counts == {0: 2, 1: 4, 2: 2}  # finished samples skipped, the interrupted one continued
        t3 = [t for t in turns if t["sample_idx"] == 1 and t["turn_idx"] == 3][0]
        assert "turn 2: still thinking" in t3["messages"][-2]["content"]
        assert len(t3["messages"]) == 2 + 2 * 2
    with pytest.raises(XlangError, match="exists"):
        run(RunConfig(turns=2, **{**cfg, "model": "xlangtest/other"}))


def test_missing_api_key_is_one_line_before_any_work(tmp_path):
    db = tmp_path / "never.db"
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY",)}
    proc = subprocess.run([sys.executable, "-m", "xlang", "run", "-t", "gemm", "-l", "triton", "-a", "h100",
                           "-m", "openai/gpt-4o-mini", "--store", str(db)], capture_output=True, text=True,
                          env={**env, "COLUMNS": "300"}, cwd=ROOT, timeout=120)
    assert proc.returncode == 2
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "OPENAI_API_KEY" in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr and not db.exists()


def test_cli_import_does_not_import_litellm():
    code = "import sys, xlang.cli; assert 'litellm' not in sys.modules; print('ok')"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert out.stdout.strip() == "ok", out.stderr


# ------------------------------------------------------------------------------------------- units


class _B:
    name, title, fences = "triton", "Triton", ("python", "py")


def test_extract_code():
    e = P.extract_code("text\n```python\nx = 1\n```\nmore\n```python\ndef xlang_entry(A):\n    pass\n```\n", _B)
    assert e.code.startswith("def xlang_entry")
    assert P.extract_code("```python\nimport triton\n", _B).code is None
    assert "unterminated" in P.extract_code("```python\nimport triton\n", _B).note
    assert "no fenced" in P.extract_code("just prose", _B).note
    assert "none in Triton" in P.extract_code("```cuda\nint x;\n```", _B).note
    assert P.extract_code("```\ndef xlang_entry(): pass\n```", _B).code == "def xlang_entry(): pass\n"
    assert P.extract_code("", _B).note == "The reply was empty."


def test_docs_levels_and_missing_docs(tmp_path, monkeypatch):
    from xlang import resources

    root = tmp_path / "arch_docs" / "h100"
    (root / "templates").mkdir(parents=True)
    (root / "params.md").write_text("PARAMS-TEXT")
    (root / "templates" / "wgmma.cuh").write_text("// WGMMA-HEADER")
    real = resources.folder
    monkeypatch.setattr(resources, "folder", lambda n: tmp_path / "arch_docs" if n == "arch_docs" else real(n))
    assert P.docs_section(H100, "triton", "none") == ""
    params = P.docs_section(H100, "triton", "params")
    assert "PARAMS-TEXT" in params and "WGMMA" not in params
    cuda = P.docs_section(H100, "cuda_ptx", "contracts")
    assert "WGMMA-HEADER" in cuda and '#include "wgmma.cuh"' in cuda
    assert "contracts.md is not available" in cuda
    assert "templates/triton.md is not available" in P.docs_section(H100, "triton", "templates")


def test_feedback_texts():
    arch, backend = H100, get_backend("triton")
    ok = V.Verdict(V.OK, timing={"ms": 0.8, "tflops": 700.0, "speedup": 0.86, "baseline_ms": 0.69})
    text = F.feedback_text(ok, turn_idx=3, turns=8, backend=backend, arch=arch, best=(3, V.OK, 0.86))
    assert "700 TFLOP/s" in text and "speedup 0.86x" in text and "faster" in text
    bad = V.Verdict(V.INCORRECT, detail="C: max abs error 3.1 at [1000, 17] (rtol 0.01)",
                    correctness={"first_failures": [{"output": "C", "where": [1000, 17]}]})
    text = F.feedback_text(bad, turn_idx=2, turns=8, backend=backend, arch=arch, best=(1, V.OK, 0.5))
    assert "max abs error 3.1" in text and "Best so far: turn 1 (ok, speedup 0.5x)" in text
    ne = V.Verdict(V.NOT_EXECUTED, executed={"wgmma": 0})
    assert "not executed" in F.feedback_text(ne, turn_idx=1, turns=1, backend=backend, arch=arch)
    assert F.rank_key(V.OK, 1.2) < F.rank_key(V.OK, 0.9) < F.rank_key(V.STATIC_OK, None) \
        < F.rank_key(V.COMPILE_ERROR, None) < F.rank_key(V.NO_CODE, None)


def test_runtime_selection(monkeypatch):
    from xlang.agent.runtime import make_runtime, register_runtime, Runtime

    monkeypatch.setenv("XLANG_FAKE_GPUS", "[]")
    assert make_runtime("none", H100).note == "not run (--profiler none)"
    local = make_runtime("local", get_arch("b200"))
    assert not local.available and local.note == "not run (no sm_100a device)"
    register_runtime("fake", lambda spec, arch: Runtime("fake", True, evaluate=lambda *a: V.Verdict(
        V.OK, timing={"speedup": 1.1})))
    assert make_runtime("fake", H100).available
    with pytest.raises(XlangError, match="unknown profiler"):
        make_runtime("bogus", H100)


def test_pluggable_runtime_reaches_ok(tmp_path):
    from xlang.agent.runtime import Runtime, register_runtime

    seen = []

    def evaluate(source, build, lang, task, arch, shape, options):
        seen.append((lang, task.name, arch.name, build.ok))
        return V.Verdict(V.OK, lang=lang, task=task.name, arch=arch.name, runtime_ran=True,
                         timing={"ms": 1.0, "tflops": 600.0, "speedup": 0.8})

    register_runtime("fake-ok", lambda spec, arch: Runtime("fake-ok", True, evaluate=evaluate))
    SCRIPTS["okrun"] = lambda turn, m: fenced("python", GOOD["triton"].read_text())
    db = tmp_path / "r.db"
    res = run(RunConfig(task="gemm", lang="triton", arch="h100", model="xlangtest/okrun", turns=2,
                        profiler="fake-ok", store=str(db), run_id="ok"))
    assert seen and seen[0] == ("triton", "gemm", "h100", True)
    assert res.samples[0].best_category == V.OK and res.samples[0].best_speedup == 0.8
    with Store(db) as store:
        t = store.turns(run_id="ok")
        assert t[0]["speedup"] == 0.8 and t[0]["verdict"]["build"]["ok"] is True
        assert "600 TFLOP/s" in t[0]["feedback"] and "faster" in t[0]["feedback"]


def _profiler_options_seen(tmp_path, option: str, name: str, values) -> list:
    """Runs one turn per value of RunConfig.<name> through a fake runtime; what the profiler's options held for
    `option` each time."""
    from xlang.agent.runtime import Runtime, register_runtime

    seen = []

    def evaluate(source, build, lang, task, arch, shape, options):
        seen.append(options.get(option))
        return V.Verdict(V.OK, lang=lang, task=task.name, arch=arch.name, runtime_ran=True,
                         timing={"ms": 1.0, "tflops": 600.0, "speedup": 0.8})

    register_runtime(f"fake-{name}", lambda spec, arch: Runtime(f"fake-{name}", True, evaluate=evaluate))
    SCRIPTS[f"{name}run"] = lambda turn, m: fenced("python", GOOD["triton"].read_text())
    for value in values:
        run(RunConfig(task="gemm", lang="triton", arch="h100", model=f"xlangtest/{name}run", turns=1,
                      profiler=f"fake-{name}", store=str(tmp_path / f"{name}{value}.db"), run_id="p",
                      **{name: value}))
    return seen


def _compare_run_id(tmp_path, **options) -> str:
    from xlang.compare import CompareConfig, cell_run_id

    return cell_run_id(CompareConfig(archs=["h100"], langs=["triton"], store=str(tmp_path / "c.db"), **options),
                       "gemm", "triton", "h100")


def test_no_peers_reaches_the_profiler_and_names_another_compare_run(tmp_path):
    """--no-peers (run and compare) asks each verdict for the vendor only; a compare with it is another run (its
    verdicts hold no peer timings), so it never resumes into a store's run that has them."""
    assert _profiler_options_seen(tmp_path, "no_peers", "peers", (True, False)) == [False, True]
    assert _compare_run_id(tmp_path) != _compare_run_id(tmp_path, peers=False)


def test_timing_rest_reaches_the_profiler_and_names_another_compare_run(tmp_path):
    """--timing-rest-ms (run and compare) reaches each verdict's options; a compare with it is another run (its
    verdicts were timed another way), and without it the run names stay those of stores made before it."""
    assert _profiler_options_seen(tmp_path, "timing_rest_ms", "timing_rest_ms", (0.0, 40.0)) == [0.0, 40.0]
    assert _compare_run_id(tmp_path) == _compare_run_id(tmp_path, timing_rest_ms=0.0)
    assert _compare_run_id(tmp_path) != _compare_run_id(tmp_path, timing_rest_ms=40.0)


def test_trajectory_command(tmp_path):
    from typer.testing import CliRunner

    from xlang.cli import app

    SCRIPTS["show"] = lambda turn, m: "no code, turn %d" % turn
    db = tmp_path / "r.db"
    run(RunConfig(task="gemm", lang="triton", arch="h100", model="xlangtest/show", turns=2, profiler="none",
                  store=str(db), run_id="show"))
    runner = CliRunner()
    out = runner.invoke(app, ["trajectory", "--store", str(db)], env={"COLUMNS": "200"})
    assert out.exit_code == 0 and "show" in out.output
    out = runner.invoke(app, ["trajectory", "show", "--store", str(db)], env={"COLUMNS": "200"})
    assert out.exit_code == 0 and out.output.count("no_code") == 2
    out = runner.invoke(app, ["trajectory", "show", "--store", str(db), "--turn", "2", "--show", "prompt"])
    assert out.exit_code == 0 and "no code, turn 1" in out.output
