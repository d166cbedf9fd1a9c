"""The agent loop's options and feedback details (issue 13, item 3), without builds: context policies, prompt
variants, reasoning capture from litellm, ptxas -v / cuobjdump -res-usage parsing, memcheck source lines.
(The loop end to end with these options: tests/test_report_store.py.)"""

from __future__ import annotations

import pytest

from xlang import verdict as V
from xlang.agent import buildinfo as B
from xlang.agent import feedback as F
from xlang.agent import prompt as P
from xlang.archs import get_arch
from xlang.backend import get_backend
from xlang.errors import XlangError

HISTORY = [{"turn_idx": i, "reply": f"reply {i}", "feedback": f"feedback {i}", "category": V.INCORRECT}
           for i in (1, 2, 3)]

# nvcc 13.0 -Xptxas -v on tests/kernels/agent/gemm_fma.cu (sm_90a), as printed.
PTXAS_V = """ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '_Z8gemm_fmaPK13__nv_bfloat16S1_PS_iii' for 'sm_90a'
ptxas info    : Function properties for _Z8gemm_fmaPK13__nv_bfloat16S1_PS_iii
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 30 registers, used 0 barriers
ptxas info    : Compile time = 19.810 ms
ptxas info    : Compiling entry function '_Z6spillyPf' for 'sm_90a'
ptxas info    : Function properties for _Z6spillyPf
    48 bytes stack frame, 44 bytes spill stores, 40 bytes spill loads
ptxas info    : Used 255 registers, used 1 barriers
"""
# cuobjdump -res-usage of a Triton cubin (tests/kernels/triton/gemm_tma.py for sm_90a), as printed.
RES_USAGE = """
Resource usage:
 Common:
  GLOBAL:0
 Function gemm_kernel:
  REG:90 STACK:0 SHARED:1024 LOCAL:0 CONSTANT[0]:1144 TEXTURE:0 SURFACE:0 SAMPLER:0
"""


def test_context_policies():
    roles = {c: [m["role"] for m in P.build_messages("TASK", HISTORY, c)] for c in P.CONTEXT_POLICIES}
    assert roles["full"] == roles["trimmed"] == ["system", "user"] + ["assistant", "user"] * 3
    assert roles["latest-pair"] == ["system", "user", "assistant", "user"]
    assert roles["single-user"] == ["system", "user"]
    trimmed = P.build_messages("TASK", HISTORY, "trimmed")
    assert "omitted" in trimmed[2]["content"] and trimmed[4]["content"] == "reply 2"  # older replies stubbed
    assert [m["content"] for m in P.build_messages("TASK", HISTORY, "full")[2::2]] == ["reply 1", "reply 2",
                                                                                       "reply 3"]
    latest = P.build_messages("TASK", HISTORY, "latest-pair")
    assert (latest[2]["content"], latest[3]["content"]) == ("reply 3", "feedback 3")
    single = P.build_messages("TASK", HISTORY, "single-user")[1]["content"]
    assert single.startswith("TASK") and "reply 3" in single and "feedback 3" in single and "reply 2" not in single
    assert P.build_messages("TASK", [], "single-user") == P.build_messages("TASK", [], "full")
    with pytest.raises(ValueError, match="unknown context policy"):
        P.build_messages("TASK", HISTORY, "everything")


def test_prompt_variants(tmp_path):
    assert list(P.parse_prompt_variants(None)) == ["base"]
    variants = P.parse_prompt_variants("base,plan,terse")
    assert list(variants) == ["base", "plan", "terse"] and variants["base"] == ""
    assert P.with_variant("FIRST", variants["base"]) == "FIRST"
    assert P.with_variant("FIRST", variants["plan"]).startswith("FIRST\n\n## Before the code")
    (tmp_path / "mine.md").write_text("Use a persistent kernel.\n")
    assert P.parse_prompt_variants(f"base,mine={tmp_path / 'mine.md'}")["mine"] == "Use a persistent kernel."
    with pytest.raises(XlangError, match="unknown prompt variant 'fancy'"):
        P.parse_prompt_variants("base,fancy")
    with pytest.raises(XlangError, match="no such file"):
        P.parse_prompt_variants(f"x={tmp_path / 'missing.md'}")


def test_run_config_rejects_bad_options(tmp_path):
    from xlang.agent.loop import Run, RunConfig

    base = dict(task="gemm", lang="triton", arch="h100", model="reference", profiler="none",
                store=str(tmp_path / "r.db"))
    with pytest.raises(XlangError, match="unknown context policy"):
        Run(RunConfig(context="all", **base))
    with pytest.raises(XlangError, match="target-speedup"):
        Run(RunConfig(target_speedup=0, **base))
    with pytest.raises(XlangError, match="unknown prompt variant"):
        Run(RunConfig(prompt_variants="nope", **base))


def test_reasoning_captured_from_litellm():
    from xlang.agent.llm import LLMClient, litellm_module

    litellm = litellm_module()  # first: it keeps litellm offline (no cost-map fetch)
    from litellm.types.utils import CompletionTokensDetailsWrapper

    class Thinking(litellm.CustomLLM):
        def completion(self, *args, **kwargs):
            resp = litellm.completion(model="gpt-4o", messages=kwargs["messages"], mock_response="done")
            if kwargs["model"] == "think":
                resp.usage.completion_tokens_details = CompletionTokensDetailsWrapper(reasoning_tokens=12)
                resp.choices[0].message.reasoning_content = "first the tiling"
            return resp

    old = list(litellm.custom_provider_map)
    litellm.custom_provider_map = old + [{"provider": "xlangthink", "custom_handler": Thinking()}]
    try:
        msgs = [{"role": "user", "content": "hi"}]
        think = LLMClient("xlangthink/think").complete(msgs)
        plain = LLMClient("xlangthink/plain").complete(msgs)
    finally:
        litellm.custom_provider_map = old
    assert (think.text, think.reasoning_tokens, think.reasoning) == ("done", 12, "first the tiling")
    assert (plain.reasoning_tokens, plain.reasoning) == (None, None)


def test_ptxas_and_res_usage_parsing():
    assert B.parse_ptxas_v(PTXAS_V) == [
        {"kernel": "_Z8gemm_fmaPK13__nv_bfloat16S1_PS_iii", "source": "ptxas -v", "stack": 0, "spill_stores": 0,
         "spill_loads": 0, "registers": 30, "barriers": 0, "shared": 0,
         "lines": ["0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads", "Used 30 registers, used 0 barriers"]},
        {"kernel": "_Z6spillyPf", "source": "ptxas -v", "stack": 48, "spill_stores": 44, "spill_loads": 40,
         "registers": 255, "barriers": 1, "shared": 0,
         "lines": ["48 bytes stack frame, 44 bytes spill stores, 40 bytes spill loads", "Used 255 registers, used 1 barriers"]}]
    # Lines a candidate could have the compiler echo (a diagnostic quotes a source line) never form a whole block in
    # ptxas's order, and a kernel reported twice keeps its last block (ptxas runs after the front end).
    forged = ("candidate.cu(3): warning\nptxas info    : Used 1 registers, used 0 barriers\n"
              "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
              "ptxas info    : Compiling entry function '_Z6spillyPf' for 'sm_90a'\n"
              "ptxas info    : Function properties for _Z6spillyPf\n"
              "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
              "ptxas info    : Used 2 registers, used 0 barriers, 64 bytes smem\n")
    assert B.parse_ptxas_v("ptxas info    : Used 1 registers, used 0 barriers\n") == []
    assert [(r["kernel"], r["registers"]) for r in B.parse_ptxas_v(forged + PTXAS_V)] == [
        ("_Z8gemm_fmaPK13__nv_bfloat16S1_PS_iii", 30), ("_Z6spillyPf", 255)]
    assert B.parse_ptxas_v(forged)[0]["shared"] == 64
    assert B.parse_res_usage(RES_USAGE) == [{"kernel": "gemm_kernel", "source": "cuobjdump -res-usage",
                                             "registers": 90, "local": 0, "stack": 0, "shared": 1024}]
    assert B.parse_ptxas_v("") == [] and B.parse_res_usage("garbage") == []
    # The log wins over cuobjdump when it has ptxas -v lines (no tool is run then).
    assert B.kernel_resources({"ok": True, "log": PTXAS_V, "kernels": []})[1]["spill_stores"] == 44
    assert B.kernel_resources({"ok": True, "ptxas_v": PTXAS_V, "kernels": [{"name": "_Z6spillyPf"}]})[0][
        "registers"] == 255  # only the kernels the binary has
    assert B.kernel_resources({"ok": False, "log": PTXAS_V}) == []
    text = B.resources_text(B.parse_ptxas_v(PTXAS_V))
    assert "_Z6spillyPf: 255 registers, 44 bytes spill stores, 40 bytes spill loads, 48 bytes stack" in text


def test_memcheck_source_lines_and_feedback():
    code = "\n".join(f"line {i}" for i in range(1, 50)) + "\n"
    memcheck = {"errors": 2, "reports": [
        {"kind": "Invalid __global__ write of size 2 bytes", "kernel": "gemm_fma",
         "location": "at gemm_fma(...)+0x1b0 in /tmp/w/candidate.cu:42"},
        {"kind": "Invalid __global__ read", "file": "candidate.cu", "line": 7},
        {"kind": "Invalid __global__ read", "kernel": "k", "location": "in /usr/include/cuda_bf16.hpp:120"}]}
    assert B.memcheck_locations(memcheck) == [("candidate.cu", 7), ("/tmp/w/candidate.cu", 42),
                                              ("/usr/include/cuda_bf16.hpp", 120)]
    lines = B.memcheck_source_lines(memcheck, code)
    assert "- candidate.cu:42: `line 42`" in lines and "- candidate.cu:7: `line 7`" in lines
    assert "- cuda_bf16.hpp:120" in lines and "`line 120`" not in lines  # not the candidate's file: not quoted
    assert B.memcheck_source_lines({"errors": 1, "reports": [{"kind": "x", "kernel": "k"}]}, code) == ""
    v = V.Verdict(V.MEMORY_ERROR, detail="compute-sanitizer memcheck: 2 error(s)", memcheck=memcheck,
                  build={"ok": True, "resources": B.parse_ptxas_v(PTXAS_V)})
    text = F.feedback_text(v, turn_idx=2, turns=8, backend=get_backend("cuda_ptx"), arch=get_arch("h100"),
                           code=code)
    assert "memcheck points at:" in text and "`line 42`" in text and "255 registers" in text


def test_feedback_for_a_correct_candidate_missing_the_target():
    v = V.Verdict(V.MISSING_INSTRUCTIONS, detail="Missing: wgmma, tma.", compiled=True, census_ok=False,
                  correct=True, runtime_ran=True, timing={"speedup": 0.41, "tflops": 300.0},
                  build={"ok": True, "census": {"required": ["wgmma", "tma"], "present": [],
                                                "missing": ["wgmma", "tma"], "kernels": []}})
    text = F.feedback_text(v, turn_idx=1, turns=4, backend=get_backend("triton"), arch=get_arch("h100"))
    assert "computed the correct result (300 TFLOP/s, speedup 0.41x" in text
    assert "does not count as correct for this target" in text and "missing: wgmma, tma" in text
    assert V.scores(v.to_dict())["correct"] and not V.scores(v.to_dict())["correct_with_target"]
    wrong = V.Verdict(V.MISSING_INSTRUCTIONS, detail="Missing: wgmma.", compiled=True, census_ok=False)
    assert "computed the correct result" not in F.feedback_text(wrong, turn_idx=1, turns=4,
                                                                backend=get_backend("triton"), arch=get_arch("h100"))


def test_scores_of_old_and_new_verdicts():
    # An old row: only the category. A new one: the fields, which win over the category.
    assert V.scores({"category": V.OK})["correct_with_target"]
    assert not V.scores({"category": V.NOT_EXECUTED})["correct_with_target"]
    assert V.scores({"category": V.NOT_EXECUTED})["correct"]
    assert not V.scores({"category": V.STATIC_OK})["correct"]
    old_missing = V.scores({"category": V.MISSING_INSTRUCTIONS})
    assert old_missing["census_ok"] is False and not old_missing["correct"]
    new_missing = V.scores({"category": V.MISSING_INSTRUCTIONS, "compiled": True, "census_ok": False, "correct": True,
                            "executed_ok": None, "timing": {"speedup": 0.4}})
    assert new_missing["correct"] and new_missing["speedup"] == 0.4 and not new_missing["correct_with_target"]
    unknown = V.scores({"category": V.OK, "census_ok": None, "executed_ok": None, "correct": None})
    assert unknown["correct_with_target"]  # None: derived from the category, as for an old row


def test_best_candidate_ranking():
    correct_missing = {"category": V.MISSING_INSTRUCTIONS, "compiled": True, "census_ok": False, "correct": True}
    never_ran = {"category": V.MISSING_INSTRUCTIONS, "compiled": True, "census_ok": False}
    assert F.rank_key(V.OK, 0.5, {"category": V.OK}) < F.rank_key(V.MISSING_INSTRUCTIONS, 0.9, correct_missing) \
        < F.rank_key(V.INCORRECT, None, {"category": V.INCORRECT}) \
        < F.rank_key(V.MISSING_INSTRUCTIONS, None, never_ran)
    assert F.rank_key(V.MISSING_INSTRUCTIONS, 0.9, correct_missing) < F.rank_key(V.MISSING_INSTRUCTIONS, 0.4,
                                                                                correct_missing)
