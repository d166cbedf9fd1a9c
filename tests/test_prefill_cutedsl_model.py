"""The CPU model of the CuTe DSL ragged-prefill expert (tasks/attn_prefill_ragged/verify/prefill_cutedsl_emulate.py:
the expert's own index rules driving a torch re-enactment of its cu_seqlens walk, TMA boxes over the packed tensors,
key blocks, masks and predicated stores; its wgmma register layouts checked at trace time) against the task's fp32
reference on the task's own drawn ragged batches, at D 128 and D 256. Wrong sequence, head or store indexing, and a
tampered rule of the expert, must fail. The kernel has never run on a GPU: this checks its tiling and indexing as
the rules say, not the hardware."""

import importlib.util
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("cutlass.cute", reason="nvidia-cutlass-dsl not installed (the model reads the expert's rules)")

MODEL = Path(__file__).resolve().parents[1] / "tasks/attn_prefill_ragged/verify/prefill_cutedsl_emulate.py"
# every warp, and in it lanes of every quad position and of the first and last quads
THREADS = [w * 32 + lane for w in range(8) for lane in (0, 1, 2, 3, 13, 30, 31)]


def _model():
    spec = importlib.util.spec_from_file_location("prefill_cutedsl_emulate", MODEL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def parts():
    from xlang.task import get_task

    model = _model()
    return model, model.load_expert(), get_task("attn_prefill_ragged")


@pytest.mark.slow
@pytest.mark.parametrize("sizes,kind", _model().CASES, ids=[f"{'-'.join(f'{k}{v}' for k, v in c[0].items())}-{c[1]}"
                                                            for c in _model().CASES])
def test_model_matches_reference(parts, sizes, kind):
    model, expert, task = parts
    assert model.judge(expert, task, task.shape(sizes), 5, kind) == []


BUG_CASES = [  # (bug, sizes that can show it: B > 1 for the sequence walk, H / HKV > 1 and HKV > 1 for the kv head)
    ("one_sequence", {"B": 3, "T": 300, "H": 2, "HKV": 1, "D": 128}),
    ("no_sequence_offset", {"B": 3, "T": 300, "H": 2, "HKV": 1, "D": 256}),
    ("store_all_rows", {"B": 3, "T": 300, "H": 2, "HKV": 1, "D": 128}),
    ("kv_head_modulo", {"B": 2, "T": 200, "H": 4, "HKV": 2, "D": 128}),
]


@pytest.mark.slow
@pytest.mark.parametrize("bug,sizes", BUG_CASES, ids=[c[0] for c in BUG_CASES])
def test_wrong_indexing_fails(parts, bug, sizes):
    model, expert, task = parts
    shape = task.shape(sizes)
    assert model.judge(expert, task, shape, 5, "normal") == []
    wrong = model.judge(expert, task, shape, 5, "normal", bugs=(bug,))
    assert wrong, f"{bug} passed: the drawn inputs would not catch it"
    if bug != "store_all_rows":  # that one writes right values over the next sequence's: caught by the write count
        assert any(w.startswith("outside the tolerance") for w in wrong), wrong


TAMPERED = [  # a rule of the expert replaced by a wrong one: the model, which calls the expert's, must fail
    ("_needs_mask", lambda j, tile, n, bn: j * bn + bn > n, 256),            # attn_fwd's last-block-only mask
    ("_key_blocks", lambda n, tile, bn: (min(n, tile * 128 + 64) + bn - 1) // bn, 256),  # half the diagonal
    ("_tile_in_sequence", lambda x, tiles: 0, 128),                         # every CTA of a sequence on tile 0
    ("_row_stored", lambda row, n: row < n - 1, 128),                       # the last row never stored
]


@pytest.mark.slow
@pytest.mark.parametrize("name,wrong,D", TAMPERED, ids=[c[0] for c in TAMPERED])
def test_the_model_reads_the_experts_own_rules(parts, monkeypatch, name, wrong, D):
    model, expert, task = parts
    monkeypatch.setattr(expert, name, wrong)
    assert model.judge(expert, task, task.shape({"B": 2, "T": 300, "H": 2, "HKV": 1, "D": D}), 5, "normal")


@pytest.mark.slow
@pytest.mark.parametrize("D", [128, 256])
def test_the_layouts_the_kernel_assumes_hold_at_trace_time(parts, D):
    model, expert, _ = parts
    assert model.check_layouts(expert, D, THREADS) == []


def test_the_layout_check_can_fail(parts, monkeypatch):
    model, expert, _ = parts
    monkeypatch.setattr(model, "fragment_rule", lambda t, i: (t % 64, i))
    assert model.check_layouts(expert, 128, [0, 37])


def test_the_kernel_calls_the_rules_the_model_reads():
    text = (MODEL.parents[1] / "solutions/cutedsl_hopper.py").read_text()
    for call in ("tiles = _tiles(hi - lo)", "tile = _tile_in_sequence(x, tiles)", "_kv_head(h, heads, kv_heads)",
                 "n_blocks = _key_blocks(n, tile, bn)", "if _needs_mask(j, tile, n, bn):",
                 "if _key_dead(key0 + coord_s[i][1], q_row0 + coord_s[i][0], n):", "if _row_stored(row, n):",
                 "mma_qk, mma_pv = _make_mmas(dp, bn)",
                 "cute.domain_offset((seq_start, 0), tQ[(None, None, h)])",
                 "mO[(seq_start + row, h, coord_o[i][1])] = o_bf16[i]"):
        assert call in text, call
