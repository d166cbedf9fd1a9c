"""The CPU model of the cuda_ptx paged-decode expert (tasks/attn_decode_paged/verify/decode_cuda_ptx_emulate.py, a
torch re-enactment of tasks/attn_decode_paged/solutions/cuda_ptx.cu: splits, page gathers, ldmatrix / mma.sync
fragments by the PTX ISA's rules, online softmax, combine) against the task's fp32 reference on the task's own drawn
inputs: shuffled page tables with garbage around them, lengths not a multiple of the page, every page size and head
dim, GQA groups 1..8, one split and several. The same model with the page lookup made contiguous must fail them. The
kernel itself has never run on a GPU: this checks its arithmetic as transliterated, not the hardware."""

import importlib.util
import math
import re
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[1]
MODEL = ROOT / "tasks/attn_decode_paged/verify/decode_cuda_ptx_emulate.py"
KERNEL = ROOT / "tasks/attn_decode_paged/solutions/cuda_ptx.cu"


def _model():
    spec = importlib.util.spec_from_file_location("decode_cuda_ptx_emulate", MODEL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# (sizes, input kind, (sms, per_sm) standing for the device, several splits expected, the contiguous variant too)
CASES = [
    ({"B": 3, "H": 8, "HKV": 2, "D": 128, "P": 16, "S": 700}, "normal", (4, 1), True, True),
    ({"B": 2, "H": 3, "HKV": 3, "D": 64, "P": 1, "S": 300}, "normal", (4, 1), True, True),
    ({"B": 4, "H": 8, "HKV": 1, "D": 64, "P": 64, "S": 450}, "large_v", (4, 1), True, True),
    ({"B": 2, "H": 10, "HKV": 2, "D": 256, "P": 16, "S": 200}, "normal", (4, 1), True, True),
    ({"B": 2, "H": 2, "HKV": 2, "D": 256, "P": 1, "S": 90}, "large", (4, 1), False, False),
    ({"B": 3, "H": 7, "HKV": 1, "D": 128, "P": 64, "S": 250}, "large", (132, 3), False, True),  # one split
    ({"B": 1, "H": 1, "HKV": 1, "D": 64, "P": 16, "S": 1}, "normal", (4, 1), False, False),
]


def _excess(task, got, ref, kind):
    atol, rtol = task.tolerance_for("out", kind)
    return ((got.float() - ref).abs() - (atol + rtol * ref.abs())).nan_to_num(math.inf).max().item()


@pytest.mark.parametrize("sizes,kind,device,several_splits,contiguous_too", CASES,
                         ids=[f"{'-'.join(f'{k}{v}' for k, v in c[0].items())}-{c[1]}" for c in CASES])
def test_model_matches_reference_and_contiguous_pages_fail(sizes, kind, device, several_splits, contiguous_too):
    from xlang.task import get_task

    model, task = _model(), get_task("attn_decode_paged")
    shape = task.shape(sizes)
    inputs = task.make_inputs(shape, 7, "cpu", kind)
    lengths = inputs["seq_lens"].tolist()
    if shape["P"] > 1 and shape["S"] > shape["P"]:
        assert any(n % shape["P"] for n in lengths), "the draw should hold a length that is not a multiple of P"
    ref = task.reference(inputs, shape)["out"]
    got, nsplit = model.xlang_entry_model(inputs, shape, *device)
    assert (nsplit > 1) == several_splits, f"nsplit = {nsplit}: the case meant to test the other path"
    assert torch.isfinite(got.float()).all(), "unwritten or garbage-reached elements"
    assert _excess(task, got, ref, kind) <= 0
    if contiguous_too:
        wrong, _ = model.xlang_entry_model(inputs, shape, *device, contiguous=True)
        assert _excess(task, wrong, ref, kind) > 0, "contiguous page indexing passed: the inputs would not catch it"


def test_model_constants_are_the_kernels():
    """The model's tile and split constants are the ones the .cu file defines."""
    text, model = KERNEL.read_text(), _model()
    assert re.search(r"constexpr int MAX_SPLITS = (\d+);", text).group(1) == str(model.MAX_SPLITS)
    assert "static constexpr int BN = D <= 128 ? 64 : 32;" in text
    assert [model.Cfg(d).BN for d in (64, 128, 256)] == [64, 64, 32]
    assert "static constexpr int WARPS = BN / 16;" in text
    assert "row * D * 2 + ((chunk ^ (row & 7)) << 4)" in text  # pdec::swz, the model's swz
