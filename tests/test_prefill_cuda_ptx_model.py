"""The CPU model of the cuda_ptx ragged-prefill expert (tasks/attn_prefill_ragged/verify/prefill_cuda_ptx_emulate.py,
a torch re-enactment of tasks/attn_prefill_ragged/solutions/cuda_ptx_hopper.cu's consumers: the cu_seqlens walk, TMA
boxes over the packed tensors, wgmma descriptor reads and fragment maps by the PTX ISA's rules, causal masks per
sequence, stores of the rows < n) against the task's fp32 reference on the task's own drawn ragged batches, at D 128
and D 256 (its own path: BN 64, two P V halves). The same model treating the batch as one sequence must fail. The
kernel has never run on a GPU: this checks its arithmetic as transliterated, not the hardware."""

import importlib.util
import math
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

MODEL = Path(__file__).resolve().parents[1] / "tasks/attn_prefill_ragged/verify/prefill_cuda_ptx_emulate.py"


def _model():
    spec = importlib.util.spec_from_file_location("prefill_cuda_ptx_emulate", MODEL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


CASES = [
    ({"B": 3, "T": 300, "H": 4, "HKV": 2, "D": 128}, "normal"),
    ({"B": 2, "T": 300, "H": 2, "HKV": 1, "D": 256}, "normal"),  # a sequence of 299: 3 query tiles, 5 key blocks
    ({"B": 4, "T": 260, "H": 2, "HKV": 2, "D": 256}, "large"),
    ({"B": 3, "T": 200, "H": 2, "HKV": 1, "D": 128}, "large_v"),
    ({"B": 1, "T": 1, "H": 1, "HKV": 1, "D": 256}, "normal"),
]


@pytest.mark.parametrize("sizes,kind", CASES, ids=[f"{'-'.join(f'{k}{v}' for k, v in c[0].items())}-{c[1]}"
                                                   for c in CASES])
def test_model_matches_reference_and_one_sequence_fails(sizes, kind):
    from xlang.task import get_task

    model, task = _model(), get_task("attn_prefill_ragged")
    shape = task.shape(sizes)
    inputs = task.make_inputs(shape, 5, "cpu", kind)
    ref = task.reference(inputs, shape)["out"]
    atol, rtol = task.tolerance_for("out", kind)
    got, visited = model.xlang_entry_model(inputs, shape)
    cu = inputs["cu_seqlens"].tolist()
    want = sorted((b, mt) for b in range(shape["B"]) for mt in range(-(-(cu[b + 1] - cu[b]) // model.BM)))
    assert sorted(visited) == want, "every query tile of every sequence, each once"
    assert torch.isfinite(got).all(), "unwritten elements"
    assert ((got - ref).abs() - (atol + rtol * ref.abs())).max().item() <= 0
    if shape["B"] > 1:
        wrong, _ = model.xlang_entry_model(inputs, shape, one_sequence=True)
        excess = ((wrong - ref).abs() - (atol + rtol * ref.abs())).nan_to_num(math.inf).max().item()
        assert excess > 0, "attention across sequences passed: the inputs would not catch it"


def test_model_expressions_are_the_kernels():
    """The model's tile sizes, mask rule and V half offset are the .cu file's."""
    text = (MODEL.parents[1] / "solutions/cuda_ptx_hopper.cu").read_text()
    model = _model()
    assert "static constexpr int BN = DP == 256 ? 64 : 128;" in text
    assert [model.Cfg(d).BN for d in (128, 256)] == [128, 64]
    assert "return j * BN + BN - 1 > mt * BM || j * BN + BN > n;" in text  # the model's needs_mask
    assert "desc_mnmajor(v_addr + half * 2 * C::CHUNK_KV, C::CHUNK_KV)" in text  # the model's issue_pv
    assert "mt = tiles - 1 - x;" in text and "if (key >= n || key > row)" in text
