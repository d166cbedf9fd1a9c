"""The CPU model of the CuTe DSL paged-decode expert (tasks/attn_decode_paged/verify/decode_cutedsl_emulate.py: the
expert's own split plan and index rules driving a torch re-enactment of its page gathers, per-warp token walk, warp
merge and combine) against the task's fp32 reference on the task's own drawn inputs: shuffled page tables with garbage
around them, lengths not a multiple of the page, page sizes 1 / 16 / 64, D 64 / 128 / 256, GQA groups, one split and
several. Wrong page indexing (contiguous pages, a whole last page, the table's padding, unfilled rows) and tampered
rules of the expert must fail. The kernels have never run on a GPU: this checks their indexing, not the hardware."""

import importlib.util
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("cutlass.cute", reason="nvidia-cutlass-dsl not installed (the model reads the expert's rules)")

MODEL = Path(__file__).resolve().parents[1] / "tasks/attn_decode_paged/verify/decode_cutedsl_emulate.py"


def _model():
    spec = importlib.util.spec_from_file_location("decode_cutedsl_emulate", MODEL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def parts():
    from xlang.task import get_task

    model = _model()
    return model, model.load_expert(), get_task("attn_decode_paged")


def _run(parts, sizes, kind, sms, bugs=()):
    model, expert, task = parts
    shape = task.shape(sizes)
    inputs = task.make_inputs(shape, 7, "cpu", kind)
    ref = task.reference(inputs, shape)["out"]
    got, nsplit = model.model(expert, inputs, shape, sms, bugs)
    return model.excess(task, got, ref, kind), nsplit, inputs


@pytest.mark.parametrize("sizes,kind,sms", _model().CASES,
                         ids=[f"{'-'.join(f'{k}{v}' for k, v in c[0].items())}-{c[1]}-sms{c[2]}" for c in _model().CASES])
def test_model_matches_reference(parts, sizes, kind, sms):
    worst, nsplit, inputs = _run(parts, sizes, kind, sms)
    assert worst <= 0, f"outside the tolerance by {worst:.3g} ({nsplit} splits)"


def test_the_cases_reach_one_split_and_several(parts):
    model = parts[0]
    splits = {_run(parts, sizes, kind, sms)[1] > 1 for sizes, kind, sms in model.CASES}
    assert splits == {True, False}


BUG_CASES = [
    ("contiguous_pages", {"B": 3, "H": 8, "HKV": 2, "D": 128, "P": 16, "S": 700}),
    ("contiguous_pages", {"B": 2, "H": 3, "HKV": 3, "D": 64, "P": 1, "S": 300}),
    ("whole_last_page", {"B": 4, "H": 8, "HKV": 1, "D": 64, "P": 64, "S": 450}),
    ("follow_padding", {"B": 2, "H": 2, "HKV": 2, "D": 256, "P": 1, "S": 90}),
    ("read_unfilled", {"B": 2, "H": 10, "HKV": 2, "D": 256, "P": 16, "S": 200}),
]


@pytest.mark.parametrize("bug,sizes", BUG_CASES, ids=[f"{c[0]}-P{c[1]['P']}" for c in BUG_CASES])
def test_wrong_page_indexing_fails(parts, bug, sizes):
    assert _run(parts, sizes, "normal", 4)[0] <= 0
    assert _run(parts, sizes, "normal", 4, (bug,))[0] > 0, f"{bug} passed: the drawn inputs would not catch it"


TAMPERED = [  # a rule of the expert replaced by a wrong one: the model, which calls the expert's, must fail
    ("_page_slot", lambda t, p: (t % p, t // p)),
    ("_split_range", lambda split, chunk, n: (split * chunk, split * chunk + chunk)),
    ("_first_head", lambda kvh, g: kvh),
    ("_token_row", lambda r, warp: r),
]


@pytest.mark.parametrize("name,wrong", TAMPERED, ids=[c[0] for c in TAMPERED])
def test_the_model_reads_the_experts_own_rules(parts, monkeypatch, name, wrong):
    monkeypatch.setattr(parts[1], name, wrong)
    assert _run(parts, {"B": 3, "H": 8, "HKV": 2, "D": 128, "P": 16, "S": 700}, "normal", 4)[0] > 0


def test_the_kernels_call_the_rules_the_model_reads():
    text = (MODEL.parents[1] / "solutions/cutedsl_hopper.py").read_text()
    for call in ("start, end = _split_range(split, chunk, n)", "n_tiles = _tiles(start, end, bn)",
                 "head0 = _first_head(kvh, g)", "entry, slot = _page_slot(t, p)",
                 "page = cutlass.Int64(mTable[(b, entry)])", "src_k = cute.local_tile(mK[(page, slot, kvh, None)]",
                 "if _token_live(t, end):", "row = _token_row(r, warp)", "if _token_live(t0 + row, end):",
                 "chunk, nsplit = split_plan(B, HKV, D, P, MAXP, sms, G)", "cpasync.CopyG2SOp("):
        assert call in text, call
