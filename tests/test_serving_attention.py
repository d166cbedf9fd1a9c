"""The serving attention tasks of issue 33 on the CPU: attn_decode_paged (paged GQA decode) and attn_prefill_ragged
(causal prefill over cu_seqlens).

Drawn page tables and sequence offsets are valid and non-trivial; the judge's own pass/fail rule (compare_output)
fails the shortcuts they exist to catch (contiguous pages, a whole last page, the table's padding, a batch taken as
one sequence) and passes an honest computation; int32 tensors and NaN-holding inputs go through the judge/runner
split (memfd buffers, as CUDA VMM ones on a GPU) end to end; the contracts render in every language's prompt.
"""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from xlang.backend import get_backend, lang_names  # noqa: E402
from xlang.profiler.judge.verify import compare_inputs, compare_output  # noqa: E402
from xlang.task import get_task  # noqa: E402
from tasks.attn_decode_paged import GARBAGE, csr_pages, sequence_lengths  # noqa: E402
from tasks.attn_prefill_ragged import FA2_NAME, FALLBACK_NAME, baseline_plan  # noqa: E402
from tasks.attn_prefill_ragged import sequence_lengths as prefill_lengths  # noqa: E402

DECODE = get_task("attn_decode_paged")
PREFILL = get_task("attn_prefill_ragged")
DECODE_SHAPES = [DECODE.shape(s) for s in (
    {"B": 6, "H": 8, "HKV": 2, "D": 64, "P": 16, "S": 200},
    {"B": 5, "H": 4, "HKV": 4, "D": 128, "P": 1, "S": 70},
    {"B": 7, "H": 6, "HKV": 1, "D": 64, "P": 64, "S": 300},
)]


def _fails(task, outputs: dict, inputs: dict, shape: dict, kind: str = "normal") -> bool:
    """The judge's rule (xlang.profiler.judge.verify.compare_output): any output outside its tolerance, NaN or Inf."""
    ref = task.reference(inputs, shape)
    for name, got in outputs.items():
        atol, rtol = task.tolerance_for(name, kind)
        if "failure" in compare_output(name, got, ref[name], atol, rtol):
            return True
    return False


# ---- attn_decode_paged: shapes and page tables -------------------------------------------------------------

def test_decode_sizes_follow_the_page_size_and_a_wrong_one_is_refused():
    assert DECODE.shape({"P": 1})["MAXP"] == 4096 and DECODE.shape({"P": 64})["NP"] == 64 * (64 + 1)
    assert DECODE.shape({"S": 1000, "P": 16})["MAXP"] == 63  # ceil(1000 / 16)
    with pytest.raises(Exception, match="MAXP = ceil"):
        DECODE.shape({"MAXP": 7})
    with pytest.raises(Exception, match="G in 1..8"):
        DECODE.shape({"H": 80, "HKV": 8})
    drawn = [s for seed in range(40) for s in DECODE.draw_shapes(DECODE.default_shape, random.Random(seed), 5)[1:]]
    assert {s["P"] for s in drawn} == {1, 16, 64} and {s["D"] for s in drawn} == {64, 128, 256}
    assert {s["H"] // s["HKV"] for s in drawn} == set(range(1, 9))
    assert min(s["S"] for s in drawn) < 64 and max(s["S"] for s in drawn) > 8192
    for s in DECODE.draw_shapes(DECODE.shape({"P": 1, "HKV": 4}), random.Random(5), 5, fixed={"P", "HKV"})[1:]:
        assert s["P"] == 1 and s["HKV"] == 4 and s["H"] == 32 and DECODE.check_shape(s) is None


def test_decode_lengths_are_the_shapes_and_ragged():
    lengths = sequence_lengths(64, 4096)
    assert lengths == sequence_lengths(64, 4096) and len(lengths) == 64
    assert 1 in lengths and 4096 in lengths and any(n % 64 == 0 and n < 4096 for n in lengths)
    assert sum(n % 16 != 0 for n in lengths) > 40 and max(lengths) <= 4096
    assert sequence_lengths(1, 7) == [7] and sequence_lengths(2, 7) == [7, 1]


@pytest.mark.parametrize("shape", DECODE_SHAPES, ids=lambda s: f"P{s['P']}")
def test_drawn_page_tables_are_valid_shuffled_and_surrounded_by_garbage(shape):
    B, P, MAXP, NP, HKV, D = (shape[k] for k in ("B", "P", "MAXP", "NP", "HKV", "D"))
    orders = set()
    for seed in (1, 2, 3):
        x = DECODE.make_inputs(shape, seed, "cpu")
        lens, table = x["seq_lens"].tolist(), x["block_table"].tolist()
        assert sorted(lens) == sorted(sequence_lengths(B, shape["S"]))
        orders.add(tuple(lens))
        own = [row[: -(-n // P)] for row, n in zip(table, lens)]
        flat = [p for row in own for p in row]
        assert len(flat) == len(set(flat)) and all(0 <= p < NP for p in flat)  # no page owned twice
        padding = {p for row, o in zip(table, own) for p in row[len(o):]}
        assert padding and not padding & set(flat) and all(0 <= p < NP for p in padding)
        many = [row for row in own if len(row) >= 3]
        if many:  # not contiguous, not increasing
            assert any(any(b != a + 1 for a, b in zip(row, row[1:])) for row in many)
            assert any(row != sorted(row) for row in many)
        for name in ("k_cache", "v_cache"):
            slots = x[name].float().reshape(NP * P, HKV, D)
            owned = torch.zeros(NP * P, dtype=torch.bool)
            for row, n in zip(own, lens):
                for t in range(n):
                    owned[row[t // P] * P + t % P] = True
            assert torch.isfinite(slots[owned]).all() and slots[owned].abs().max() < 100
            rest = slots[~owned]
            assert bool((rest.isnan() | (rest.abs() == GARBAGE)).all())
            assert rest.isnan().any() and (rest.abs() == GARBAGE).any()
    assert len(orders) > 1  # the seed shuffles which sequence has which length


# ---- attn_decode_paged: what the judge passes and fails -------------------------------------------------

def _decode(x, shape, pages_of, tokens_of, mask_scores_from=None):
    """A decode 'kernel' in torch, fp32, bf16 out: sequence b reads the pages pages_of(b, n) and the first
    tokens_of(n) tokens of them; with mask_scores_from, scores of tokens >= n are masked but their values still
    multiplied (by 0)."""
    H, HKV, D, P = (shape[k] for k in ("H", "HKV", "D", "P"))
    out = torch.empty(shape["B"], H, D)
    for b, n in enumerate(x["seq_lens"].tolist()):
        pages = pages_of(b, n)
        m = tokens_of(n)
        k = x["k_cache"][pages].reshape(-1, HKV, D)[:m].float()
        v = x["v_cache"][pages].reshape(-1, HKV, D)[:m].float()
        s = (x["q"][b].float().reshape(HKV, H // HKV, D) @ k.permute(1, 2, 0)) / math.sqrt(D)
        if mask_scores_from is not None:
            s[..., n:] = float("-inf")
        out[b] = (torch.softmax(s, -1) @ v.permute(1, 0, 2)).reshape(H, D)
    return {"out": out.to(torch.bfloat16)}


@pytest.mark.parametrize("shape", DECODE_SHAPES, ids=lambda s: f"P{s['P']}")
def test_decode_judge_passes_the_table_and_fails_its_shortcuts(shape):
    P, NP = shape["P"], shape["NP"]
    for seed in (1, 2):
        for kind in DECODE.input_kinds:
            x = DECODE.make_inputs(shape, seed, "cpu", kind)
            table = x["block_table"].long()

            def own(b, n):
                return table[b, : -(-n // P)]

            assert not _fails(DECODE, _decode(x, shape, own, lambda n: n), x, shape, kind)
        x = DECODE.make_inputs(shape, seed, "cpu")
        table = x["block_table"].long()

        def contiguous(b, n):  # pages assumed to follow the first one
            return (table[b, 0] + torch.arange(-(-n // P))) % NP

        assert _fails(DECODE, _decode(x, shape, contiguous, lambda n: n), x, shape)

        def whole_table(b, n):
            return table[b]

        # every entry of the table followed (the padding too), the extra tokens' scores masked: 0 * NaN is NaN
        assert _fails(DECODE, _decode(x, shape, whole_table, lambda n: shape["MAXP"] * P, mask_scores_from=True),
                      x, shape)
        if P > 1:
            def own(b, n):
                return table[b, : -(-n // P)]

            def whole_page(n):
                return -(-n // P) * P

            # the whole last page read: unmasked, or its scores masked and its values still multiplied by 0
            assert _fails(DECODE, _decode(x, shape, own, whole_page), x, shape)
            assert _fails(DECODE, _decode(x, shape, own, whole_page, mask_scores_from=True), x, shape)


def test_inputs_holding_nan_are_compared_as_the_judge_copied_them():
    x = DECODE.make_inputs(DECODE_SHAPES[0], 1, "cpu")
    assert x["k_cache"].isnan().any()
    after = {k: v.clone() for k, v in x.items()}
    assert compare_inputs(x, after) is None  # NaN where it was is no change
    after["block_table"][0, 0] += 1
    changed = compare_inputs(x, after)
    assert changed and changed["input"] == "block_table" and changed["changed"] == 1
    after = {k: v.clone() for k, v in x.items()}
    flat = after["v_cache"].view(-1)
    flat[int(flat.isnan().nonzero()[0])] = 0.0  # a garbage slot overwritten is a modified input too
    assert compare_inputs(x, after)["input"] == "v_cache"


def test_decode_sdpa_baseline_computes_the_task_from_the_contracts_sizes():
    """The vendor baseline is torch SDPA over the pages it gathers (torch has no paged decode for pages under 256
    tokens), named as the fallback it is: on the CPU too. It gets only the contract's sizes, as the runner passes
    them (xlang.profiler.runner._baseline_entry)."""
    for shape in DECODE_SHAPES:
        x = DECODE.make_inputs(shape, 4, "cpu")
        got = DECODE.baseline(x, {k: shape[k] for k in DECODE.contract.sizes})()
        assert not _fails(DECODE, {"out": got.reshape(shape["B"], shape["H"], shape["D"])}, x, shape)
    assert "pages it gathers per call" in DECODE.baseline_name and "256" in DECODE.baseline_name


def test_flashinfer_is_decodes_peer_and_its_csr_table_is_the_sequences_pages():
    """FlashInfer's paged decode is a peer (timed beside the vendor when installed; hidden from candidates), and
    the CSR table it is planned with holds each sequence's own pages in token order and its last page's tokens."""
    (peer,) = DECODE.peers
    assert (peer.name, peer.modules, peer.distributions) == ("flashinfer", ("flashinfer",), ("flashinfer-python",))
    for shape in DECODE_SHAPES:
        x = DECODE.make_inputs(shape, 5, "cpu")
        indptr, indices, last = csr_pages(x["block_table"], x["seq_lens"], shape["P"])
        assert indptr.dtype == indices.dtype == last.dtype == torch.int32
        for b, n in enumerate(x["seq_lens"].tolist()):
            pages = -(-n // shape["P"])
            assert indptr[b + 1] - indptr[b] == pages
            assert indices[indptr[b]: indptr[b + 1]].tolist() == x["block_table"][b, :pages].tolist()
            assert 1 <= last[b] <= shape["P"] and (pages - 1) * shape["P"] + last[b] == n


def test_decode_figures_count_only_the_sequences_tokens():
    s = DECODE.default_shape
    tokens = sum(sequence_lengths(s["B"], s["S"]))
    assert DECODE.flops(s) == 4 * s["H"] * s["D"] * tokens
    kv = 4 * s["HKV"] * s["D"] * tokens
    assert kv < DECODE.min_bytes(s) < 1.01 * kv  # the KV read dominates; no garbage page is counted
    assert DECODE.min_bytes({**s, "P": 1}) > DECODE.min_bytes(s)  # more table entries to read at P = 1


# ---- attn_prefill_ragged ----------------------------------------------------------------------------------

def test_prefill_lengths_and_offsets_are_ragged_and_shuffled():
    lengths = prefill_lengths(8, 16384)
    assert sum(lengths) == 16384 and 1 in lengths and any(n % 2 for n in lengths) and max(lengths) > 128
    assert prefill_lengths(1, 9) == [9] and prefill_lengths(3, 3) == [1, 1, 1]
    shape = PREFILL.shape({"B": 5, "T": 400, "H": 2, "HKV": 1})
    seen = set()
    for seed in range(4):
        cu = PREFILL.make_inputs(shape, seed, "cpu")["cu_seqlens"].tolist()
        assert cu[0] == 0 and cu[-1] == 400 and all(b > a for a, b in zip(cu, cu[1:]))
        assert sorted(b - a for a, b in zip(cu, cu[1:])) == sorted(prefill_lengths(5, 400))
        seen.add(tuple(cu))
    assert len(seen) > 1
    drawn = [s for seed in range(30) for s in PREFILL.draw_shapes(PREFILL.default_shape, random.Random(seed), 5)[1:]]
    assert {s["D"] for s in drawn} == {128, 256} and max(s["T"] for s in drawn) > 8192
    assert PREFILL.flops({"B": 2, "T": 5, "H": 1, "HKV": 1, "D": 128}) == 2 * 128 * (1 + 16)  # lengths 1 and 4


def test_prefill_baseline_is_fa2_varlen_where_torch_allows_it_else_per_sequence():
    """FA2's varlen forward takes every shape the task draws on sm90 (D 128/256, any GQA group); on a GPU its
    torch build refuses (sm100 here), the baseline says why and falls back per sequence."""
    drawn = [s for seed in range(10) for s in PREFILL.draw_shapes(PREFILL.default_shape, random.Random(seed), 5)]
    assert all(baseline_plan(s, (9, 0)) is None and baseline_plan(s, (8, 0)) is None for s in drawn)
    assert "sm100" in baseline_plan(PREFILL.default_shape, (10, 0))
    assert baseline_plan(PREFILL.default_shape, (9, 1)) is not None  # sm90 means 9.0 in torch's check
    assert "head dims" in baseline_plan({**PREFILL.default_shape, "D": 512}, (9, 0))
    assert FA2_NAME in PREFILL.baseline_name and FALLBACK_NAME in PREFILL.baseline_name
    assert "key length 1" in FALLBACK_NAME


def _prefill(x, shape, bounds, causal=True):
    """A prefill 'kernel' in torch over the given (start, end) row ranges, fp32, bf16 out."""
    H, HKV, D = shape["H"], shape["HKV"], shape["D"]
    out = torch.empty(shape["T"], H, D)
    for s, e in bounds:
        q = x["q"][s:e].float().transpose(0, 1)
        k = x["k"][s:e].float().transpose(0, 1).repeat_interleave(H // HKV, 0)
        v = x["v"][s:e].float().transpose(0, 1).repeat_interleave(H // HKV, 0)
        sc = q @ k.transpose(1, 2) / math.sqrt(D)
        if causal:
            sc.masked_fill_(torch.ones(e - s, e - s, dtype=torch.bool).triu(1), float("-inf"))
        out[s:e] = (torch.softmax(sc, -1) @ v).transpose(0, 1)
    return {"out": out.to(torch.bfloat16)}


@pytest.mark.parametrize("kind", PREFILL.input_kinds)
def test_prefill_judge_passes_each_sequence_and_fails_one_sequence_for_all(kind):
    shape = PREFILL.shape({"B": 4, "T": 300, "H": 4, "HKV": 2})
    x = PREFILL.make_inputs(shape, 3, "cpu", kind)
    cu = x["cu_seqlens"].tolist()
    assert not _fails(PREFILL, _prefill(x, shape, list(zip(cu, cu[1:]))), x, shape, kind)
    assert _fails(PREFILL, _prefill(x, shape, [(0, shape["T"])]), x, shape, kind)  # the batch as one sequence
    if kind != "peaked":  # one dominant key per row, always a visible one: the future keys hardly weigh
        assert _fails(PREFILL, _prefill(x, shape, list(zip(cu, cu[1:])), causal=False), x, shape, kind)


# ---- through the judge/runner split: int32 tensors and NaN inputs in shared buffers ---------------------------

def _judge_on_cpu(tmp_path, task, candidate: str, shapes, env: dict) -> dict:
    """The check stage of the judge (its own process) with the candidate in its jailed runner, buffers shared as
    memfd (tests/test_judge_isolation.py does the same for gemm): every shape with every input kind."""
    from tests.test_judge_isolation import SLOTS

    from xlang.profiler.judge.plan import Plan
    from xlang.profiler.stages.launch import run_stage

    build = tmp_path / f"build-{len(list(tmp_path.iterdir()))}"
    build.mkdir()
    (build / "candidate.py").write_text((Path(__file__).parent / "kernels" / "isolation" / candidate).read_text())
    spec = {"lang": "triton", "task": task.name, "arch": "h100", "device": "cpu", "gpu_index": SLOTS,
            "hello": {"op": "hello", "device": "cpu", "lang": "triton", "load": str(build / "candidate.py")},
            "readable": [str(build)], "trials": [(s, kind, 10 + i) for i, s in enumerate(shapes)
                                                 for kind in task.input_kinds],
            "timing": {"enabled": False}, "call_timeout_s": 60, "env": env}
    work = build / "eval"
    work.mkdir(mode=0o700)
    return run_stage(Plan.from_dict({**spec, "mode": "check"}), work, "check", 180).result


def test_int32_page_tables_and_nan_caches_go_through_the_judge_and_runner(tmp_path):
    shapes = DECODE_SHAPES[:2]
    honest = _judge_on_cpu(tmp_path, DECODE, "cpu_decode_paged.py", shapes, {"XLANG_TEST_DECODE": "table"})
    assert honest.status == "ok", honest
    assert honest.correctness["passed"] and honest.correctness["trials"] == 6
    cheat = _judge_on_cpu(tmp_path, DECODE, "cpu_decode_paged.py", shapes, {"XLANG_TEST_DECODE": "contiguous"})
    assert cheat.status == "incorrect" and "out:" in cheat.detail, cheat


def test_cu_seqlens_of_b_plus_1_go_through_the_judge_and_runner(tmp_path):
    shapes = [PREFILL.shape({"B": 3, "T": 150, "H": 2, "HKV": 1}), PREFILL.shape({"B": 1, "T": 1, "H": 2, "HKV": 2})]
    honest = _judge_on_cpu(tmp_path, PREFILL, "cpu_prefill_ragged.py", shapes, {})
    assert honest.status == "ok", honest
    assert honest.correctness["trials"] == 2 * len(PREFILL.input_kinds)
    cheat = _judge_on_cpu(tmp_path, PREFILL, "cpu_prefill_ragged.py", shapes[:1], {"XLANG_TEST_PREFILL": "one"})
    assert cheat.status == "incorrect" and "out:" in cheat.detail, cheat


# ---- prompts ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("lang", lang_names())
def test_the_serving_contracts_render_in_every_languages_prompt(lang):
    from xlang.agent.prompt import first_prompt
    from xlang.archs import get_arch

    backend = get_backend(lang)
    for arch_name in ("h100", "b200"):
        arch = get_arch(arch_name)
        for task, words in ((DECODE, ("block_table[b, t // P]", "k_cache[block_table[b, t // P], t % P, kvh, :]",
                                      "0 * NaN is NaN", "int32[B, MAXP]", "bf16[NP, P, HKV, D]")),
                            (PREFILL, ("cu_seqlens[b] .. cu_seqlens[b+1] - 1", "int32[B+1]", "bf16[T, HKV, D]"))):
            text = first_prompt(task, arch, backend, task.shape(), task.required_for(arch), "none")
            assert all(w in text for w in words), (lang, task.name)
            assert "def decode_reference" in text or "def prefill_reference" in text
            if lang == "cuda_ptx":
                assert "const int* block_table" in text or "const int* cu_seqlens" in text
            assert task.baseline_name in text
