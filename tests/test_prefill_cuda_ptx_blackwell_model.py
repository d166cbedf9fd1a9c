"""The CPU model of the cuda_ptx Blackwell ragged-prefill expert
(tasks/attn_prefill_ragged/verify/prefill_cuda_ptx_blackwell_emulate.py: a torch re-enactment of
tasks/attn_prefill_ragged/solutions/cuda_ptx_blackwell.cu's tile walk, TMA boxes, tcgen05 descriptors decoded by the
PTX ISA's rules, TMEM accumulation order, masks and stores) against the task's fp32 reference on the task's own drawn
ragged batches, at D 128 (BN 128) and D 256 (BN 64, 2 stages). The same model treating the batch as one sequence
must fail, and so must attn_fwd's last-block-only mask at D 256. The barrier protocol is attn_fwd's: its model runs
at this kernel's stage counts. The kernel has never run on a GPU: this checks its arithmetic as transliterated, not
the hardware."""

import importlib.util
import math
import random
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[1]
MODEL = ROOT / "tasks/attn_prefill_ragged/verify/prefill_cuda_ptx_blackwell_emulate.py"
KERNEL = ROOT / "tasks/attn_prefill_ragged/solutions/cuda_ptx_blackwell.cu"
FWD = ROOT / "tasks/attn_fwd/solutions/cuda_ptx_blackwell.cu"
FWD_MODEL = ROOT / "tasks/attn_fwd/verify/attn_fwd_cuda_ptx_blackwell_emulate.py"


def _load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _model():
    return _load(MODEL, "prefill_cuda_ptx_blackwell_emulate")


CASES = [
    ({"B": 3, "T": 300, "H": 4, "HKV": 2, "D": 128}, "normal"),
    ({"B": 2, "T": 300, "H": 2, "HKV": 1, "D": 256}, "normal"),  # a sequence of 299: 3 tiles, 5 key blocks of 64
    ({"B": 4, "T": 260, "H": 2, "HKV": 2, "D": 256}, "large"),
    ({"B": 3, "T": 400, "H": 2, "HKV": 1, "D": 256}, "peaked"),
    ({"B": 3, "T": 400, "H": 2, "HKV": 1, "D": 128}, "peaked"),
    ({"B": 3, "T": 200, "H": 2, "HKV": 1, "D": 128}, "large_v"),
    ({"B": 1, "T": 1, "H": 1, "HKV": 1, "D": 256}, "normal"),
]


def _excess(got, ref, atol, rtol):
    return ((got - ref).abs() - (atol + rtol * ref.abs())).nan_to_num(math.inf).max().item()


@pytest.mark.parametrize("sizes,kind", CASES, ids=[f"{'-'.join(f'{k}{v}' for k, v in c[0].items())}-{c[1]}"
                                                   for c in CASES])
def test_model_matches_reference_and_one_sequence_fails(sizes, kind):
    from xlang.task import get_task

    model, task = _model(), get_task("attn_prefill_ragged")
    shape = task.shape(sizes)
    inputs = task.make_inputs(shape, 5, "cpu", kind)
    ref = task.reference(inputs, shape)["out"]
    atol, rtol = task.tolerance_for("out", kind)
    corrections = model.STATS["corrections"]
    got, visited = model.xlang_entry_model(inputs, shape)  # asserts every element stored once, none past the end
    if kind == "peaked":  # a dominant key late in a row moves its max by more than 8: the O correction runs
        assert model.STATS["corrections"] > corrections, "the TMEM read-modify-write of O was not exercised"
    cu = inputs["cu_seqlens"].tolist()
    want = sorted((b, mt) for b in range(shape["B"]) for mt in range(-(-(cu[b + 1] - cu[b]) // model.BM)))
    assert sorted(visited) == want, "every query tile of every sequence, each once"
    assert _excess(got, ref, atol, rtol) <= 0
    # Not with "peaked": one dominant key per row outweighs every key of another sequence, so the check's other
    # kinds (and this test's) are what catch attention across sequences.
    if shape["B"] > 1 and kind != "peaked":
        wrong, _ = model.xlang_entry_model(inputs, shape, one_sequence=True)
        assert _excess(wrong, ref, atol, rtol) > 0, "attention across sequences passed: the inputs would not catch it"


def test_last_block_mask_fails_at_d256():
    """BN = 64 < BM at D 256: the diagonal spans two key blocks, so attn_fwd's rule (mask the last block only) lets
    rows see keys past themselves; the drawn inputs catch it. At D 128 (BN == BM) the two rules agree."""
    from xlang.task import get_task

    model, task = _model(), get_task("attn_prefill_ragged")
    for D, should_fail in ((256, True), (128, False)):
        shape = task.shape({"B": 2, "T": 300, "H": 2, "HKV": 1, "D": D})
        inputs = task.make_inputs(shape, 3, "cpu", "normal")
        ref = task.reference(inputs, shape)["out"]
        got, _ = model.xlang_entry_model(inputs, shape, mask="last_block")
        assert (_excess(got, ref, *task.tolerance_for("out", "normal")) > 0) == should_fail, D


def test_model_expressions_are_the_kernels():
    """The model's tile sizes, stage counts, walk, mask rule, descriptors and stores are the .cu file's."""
    text, model = KERNEL.read_text(), _model()
    assert "static constexpr int BN = DP == 256 ? 64 : 128;" in text
    assert "static constexpr int STAGES = DP == 256 ? 2 : 3;" in text
    assert [(model.Cfg(d).BN, model.Cfg(d).STAGES) for d in (128, 256)] == [(128, 3), (64, 2)]
    assert "mt = tiles - 1 - x;" in text
    assert "const int nkb = (min(n, (mt + 1) * BM) + BN - 1) / BN;" in text
    assert "if (j * BN + BN - 1 > mt * BM || j * BN + BN > n) {" in text  # the model's needs_mask
    assert "const int lim = min(n, row + 1) - j * BN;" in text
    assert "desc_mnmajor(v_addr0 + vs * C::KV_BYTES, C::CHUNK_KV)" in text  # the model's issue_pv
    assert "mma_ts(tmem + TMEM_O, tmem + pb * BN + kk * 8, dv + static_cast<uint64_t>((kk * 2048) >> 4)" in text
    assert "mma_ss(tmem + sb * BN, dq + offq, dk + offk, IDESC_S, kk > 0 ? 1u : 0u);" in text
    assert "tmem_st32(t_lane + sb * BN + 32 * part, p);" in text
    assert "const bool row_ok = row < n;" in text
    assert "(1ull << 46) | (2ull << 61)" in text and "static_cast<uint64_t>(chunk_bytes >> 4) << 16" in text
    assert model.idesc_bf16(128, 64, 0) == 0x08100490 and model.idesc_bf16(128, 256, 1) == 0x08410490
    assert "0x08100490u" in text and "0x08410490u" in text


# The barrier waits of the producer, the MMA thread and the softmax warps: attn_fwd's, word for word.
_PROTOCOL_LINES = (
    "mbar_wait(&k_empty[s], ph ^ 1);",
    "mbar_wait(&v_empty[s], ph ^ 1);",
    "mbar_wait(&p_full[pb], (i >> 1) & 1);",
    "mbar_wait(&v_full[vs], (i / ST) & 1);",
    "if (j >= 2) mbar_wait(pv_done, (j - 2) & 1);",
    "mbar_wait(&k_full[ks], (j / ST) & 1);",
    "mma_commit(&k_empty[ks]);",
    "mma_commit(&s_full[sb]);",
    "mma_commit(&v_empty[vs]);",
    "mma_commit(pv_done);",
    "mbar_wait(&s_full[sb], (j >> 1) & 1);",
    "mbar_wait(pv_done, (j - 1) & 1);",
    "mbar_arrive(&p_full[sb]);",
    "mbar_wait(pv_done, (nkb - 1) & 1);",
    "mbar_init(&p_full[0], 128);",
)


def test_barrier_protocol_is_attn_fwds_at_this_kernels_stage_counts():
    """The kernel's barriers are attn_fwd's (same lines); attn_fwd's protocol model (random interleavings, async
    TMA / MMA completion: no deadlock, lap, race or stale read) runs at 2 stages (D 256, new) and 3 (D 128)."""
    ours, theirs = KERNEL.read_text(), FWD.read_text()
    for line in _PROTOCOL_LINES:
        assert ours.count(line) == theirs.count(line) == 1, line
    fwd_model = _load(FWD_MODEL, "attn_fwd_cuda_ptx_blackwell_emulate")
    rng = random.Random(11)
    for trial in range(40):
        fwd_model.Protocol(rng.choice([1, 2, 3, 5, 7]), 2 if trial % 2 else 3, rng).run()
