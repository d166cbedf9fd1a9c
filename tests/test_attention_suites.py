"""Real-model shape suites beyond the bf16 GEMM (issue 33 item 1): the attention tasks' suites (one file the four
of them share), paged decode's and ragged prefill's, and the fp8 GEMM tasks reading the GEMM layers' file. What
runs on a GPU (each shape checked and timed by the judge) is not tested here; the shapes the judge is given are."""

from __future__ import annotations

import random

import pytest

from xlang.profiler.evaluate import correctness_trials
from xlang.task import get_task

MODELS = ("llama3-8b", "llama3-70b", "qwen3-32b")
ATTENTION = ("attn_fwd", "attn_fwd_causal", "attn_bwd", "attn_bwd_causal")


def _heads(config: dict) -> dict:
    """H, HKV and D as the suites files say they follow from a config.json (head_dim: its own key where the model
    has one, else hidden_size / num_attention_heads)."""
    d = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    return {"H": config["num_attention_heads"], "HKV": config["num_key_value_heads"], "D": d}


@pytest.mark.parametrize("task_name", [*ATTENTION, "attn_decode_paged", "attn_prefill_ragged"])
def test_each_models_heads_follow_from_its_quoted_config(task_name):
    task = get_task(task_name)
    suites = task.suites()
    assert set(suites) == set(MODELS)
    gemm = get_task("gemm").suites()
    for name, suite in suites.items():
        assert suite.source.startswith("https://huggingface.co/") and suite.source.split()[0].endswith("/config.json")
        assert suite.source.split()[0] == gemm[name].source.split()[0]  # the model the GEMM suite of that name is
        for key in ("hidden_size", "num_attention_heads", "num_key_value_heads"):
            assert suite.config[key] == gemm[name].config[key], (name, key)
        heads = _heads(suite.config)
        if name.startswith("llama"):  # Llama 3 has no head_dim key: the quoted one must follow from the others
            assert heads["D"] == suite.config["hidden_size"] // suite.config["num_attention_heads"]
        assert len(suite.shapes) == 4 and len({tuple(s.shape.items()) for s in suite.shapes}) == 4
        for s in suite.shapes:
            assert {k: s.shape[k] for k in heads} == heads, (name, s.label)
            assert task.shape(s.shape) == s.shape  # the task's own rules, derived sizes included, allow it


def test_the_four_attention_tasks_share_one_file_and_its_shapes():
    paths = {get_task(t).suites_path() for t in ATTENTION}
    assert len(paths) == 1 and next(iter(paths)).name == "_attention_suites.toml"
    shapes = {t: [s.shape for s in get_task(t).suite("llama3-70b").shapes] for t in ATTENTION}
    assert all(v == shapes["attn_fwd"] for v in shapes.values())
    by_label = {s.label: s.shape for s in get_task("attn_bwd").suite("llama3-8b").shapes}
    assert by_label["long-16k"]["S"] == 16384 and by_label["ragged"]["S"] % 64  # a long path and a tail in S


def test_decode_suite_shapes_get_their_derived_sizes():
    """MAXP = ceil(S / P) and NP = B * (MAXP + 1) are computed for every suite shape (the file gives neither)."""
    task = get_task("attn_decode_paged")
    for suite in task.suites().values():
        for s in suite.shapes:
            assert s.shape["P"] == 16
            assert s.shape["MAXP"] == -(-s.shape["S"] // 16) and s.shape["NP"] == s.shape["B"] * (s.shape["MAXP"] + 1)


def test_a_suite_that_gives_a_derived_size_wrongly_is_refused(tmp_path):
    from xlang.errors import XlangError
    from xlang.suites import load_file

    path = tmp_path / "suites.toml"
    path.write_text('[x]\nshapes = [ { label = "a", B = 2, S = 100, MAXP = 3 } ]\n')
    with pytest.raises(XlangError, match="MAXP = ceil"):
        load_file(path, get_task("attn_decode_paged"))
    path.write_text('[x]\nsizes = { Q = 1 }\nshapes = [ { label = "a", B = 2 } ]\n')
    with pytest.raises(XlangError, match="sets 'Q' for every shape, which task attn_decode_paged does not have"):
        load_file(path, get_task("attn_decode_paged"))


@pytest.mark.parametrize("task_name", ["gemm_fp8_blockscale", "gemm_mxfp8", "gemm_nvfp4"])
def test_the_fp8_tasks_time_the_gemm_layers_of_the_same_models(task_name):
    """DeepSeek-V3 publishes its weights as fp8 with 128x128 block scales: the fp8 tasks read the GEMM suites' file,
    and the block-scaled contracts (K a multiple of 128, N of 16) allow every one of its shapes."""
    task, gemm = get_task(task_name), get_task("gemm")
    assert task.suites_path() == gemm.suites_path()
    for name, suite in gemm.suites().items():
        mine = task.suite(name)
        assert [s.shape for s in mine.shapes] == [s.shape for s in suite.shapes]
        assert all(s.shape["K"] % 128 == 0 and s.shape["N"] % 16 == 0 for s in mine.shapes)


@pytest.mark.parametrize("task_name", ["attn_fwd_causal", "attn_decode_paged", "attn_prefill_ragged"])
def test_every_attention_suite_shape_joins_the_correctness_trials(task_name):
    task = get_task(task_name)
    suite = task.suite("llama3-8b").describe()
    shapes = task.draw_shapes(task.shape(), random.Random(0), 3)
    checked = [t[0] for t in correctness_trials(shapes, suite, list(task.input_kinds), seed=7, per_shape=1)]
    assert all(s["shape"] in checked for s in suite["shapes"])


def test_the_smallest_decode_suite_shape_is_drawn_ragged_and_paged_and_has_a_reference():
    """b1-8k (one sequence of 8192 tokens in 512 pages of 16): the inputs the judge draws for it are a shuffled
    page table, and the reference computes on them (CPU, fp32)."""
    import torch

    task = get_task("attn_decode_paged")
    shape = next(s.shape for s in task.suite("llama3-8b").shapes if s.label == "b1-8k")
    inputs = task.make_inputs(shape, 3, "cpu")
    table = inputs["block_table"][0, : shape["MAXP"]]
    assert int(inputs["seq_lens"][0]) == 8192 and len(set(table.tolist())) == 512
    assert (table.diff() != 1).any()  # not one contiguous run of pages
    out = task.reference(inputs, shape)["out"]
    assert out.shape[-1] == 128 and torch.isfinite(out).all()
