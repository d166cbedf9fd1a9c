"""The block-scaled GEMM tasks at their default depth (K = 7168), judged by the task's own rule (the judge's
compare_output with atol, rtol and the task's error bound, Task.error_bound): honest kernels, including the audit's
model of Hopper's fp8 wgmma (each block's running partial truncated to 14 significant bits per 32-wide k-step) and a
harsher one (every term of a k-step aligned to the largest and truncated to 13 bits, which puts the 1d2d task where
the H200 put cuBLASLt: several times the old atol / rtol), pass at 0.5 of it or less, where the old rule (atol and
rtol alone) failed them; and the accumulation bugs stay over it. CPU only: the models are
benchmarks/block_scaled_models.py; the H200's own figures come from benchmarks/block_scaled_tolerance_h200.py."""

import importlib
import importlib.util
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from xlang.task import get_task  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("block_scaled_models", ROOT / "benchmarks" / "block_scaled_models.py")
models = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(models)

SHAPE = {"M": 64, "N": 512, "K": 7168}  # the default K; M and N small enough for a CPU test
TASKS = ("gemm_fp8_blockscale", "gemm_mxfp8", "gemm_nvfp4")


@pytest.fixture(scope="module")
def inputs():
    return {(name, kind): get_task(name).make_inputs(SHAPE, 0, "cpu", kind)
            for name in TASKS for kind in get_task(name).input_kinds}


@pytest.mark.parametrize("name", TASKS)
@pytest.mark.parametrize("kind", ["normal", "structured"])
@pytest.mark.parametrize("model,bits", [("fp32", 0), ("trunc", 14), ("trunc", 13), ("align", 14), ("align", 13)])
def test_honest_accumulation_passes_at_the_default_depth_with_margin(inputs, name, kind, model, bits):
    if (model, bits) == ("align", 13) and kind == "structured" and name == "gemm_fp8_blockscale":
        pytest.skip("harsher than the H200 on 'structured' (0.49 here with the old rule's 0.51; cuBLASLt 0.43)")
    x = inputs[(name, kind)]
    got = models.honest(name, x, SHAPE, model, bits)
    assert models.ratio(name, got, x, SHAPE, kind) <= 0.5, (name, kind, model, bits)


def test_the_old_rule_failed_hopper_like_accumulation_of_the_fp8_tasks(inputs):
    # The reason for the bound: atol / rtol alone failed an honest fp8 tensor core near cancellation (the H200:
    # cuBLASLt at 3.8-4.3x on 'normal' inputs for 1d2d), and still fails these models; the new rule passes them.
    for name, model, bits in (("gemm_fp8_blockscale", "align", 13), ("gemm_fp8_blockscale", "trunc", 13),
                              ("gemm_mxfp8", "align", 13)):
        x = inputs[(name, "normal")]
        got = models.honest(name, x, SHAPE, model, bits)
        old = models.ratio(name, got, x, SHAPE, "normal", bound=False)
        assert old > 1.0, (name, model, bits, old)
        assert models.ratio(name, got, x, SHAPE, "normal") <= 0.5


def test_the_bound_is_the_derived_one_and_the_judge_computes_it_from_the_inputs(inputs):
    # u * (|A_deq| @ |B_deq|^T), u from the task's accumulation_unit, on the inputs' device
    for name in TASKS:
        task = get_task(name)
        x = inputs[(name, "normal")]
        ops = models.operands(name, x, SHAPE)
        blk = ops["block"]
        a = (ops["a"] * ops["sa"].repeat_interleave(blk, 1)).double().abs()
        b = (ops["b"] * ops["sb"].repeat_interleave(blk, 1)).double().abs()
        want = importlib.import_module(f"tasks.{name}").accumulation_unit(SHAPE["K"]) * (a @ b.t())
        got = task.bound_for("C", x, SHAPE)
        assert got.dtype == torch.float32 and got.shape == (SHAPE["M"], SHAPE["N"])
        assert torch.allclose(got.double(), want, rtol=1e-5)
        assert task.error_bound_rule.startswith("bound[m, n] = u * sum_k")
    assert importlib.import_module("tasks.gemm_fp8_blockscale").accumulation_unit(7168) == 4 * 2.0 ** -13 + 56 * 2.0 ** -24


@pytest.mark.parametrize("name", TASKS)
def test_accumulation_bugs_fail_at_the_default_depth(inputs, name):
    # bf16 accumulators fail; dequantising to bf16 is a bug only for 1d2d, whose fp32 scales make the dequantised
    # values fp32 (MXFP8's and NVFP4's fit bf16 exactly: their baselines do just that).
    for bug, f in models.ACCUMULATION_BUGS.items():
        if bug == "dequantise_to_bf16_then_gemm" and name == "gemm_fp8_blockscale":
            # At this depth its error (each operand rounded to 8 bits: random-sign, growing as sqrt(K)) sits inside
            # the bound that Hopper's own fp8 accumulation needs (0.77 of the rule, 64x512x7168): as accurate as the
            # vendor, though not the contract's computation. Values cannot reject it here; the required families
            # do (wgmma_fp8 / tcgen05_f8f6f4, 80% of the executed MMA work: a bf16 GEMM is HGMMA / kind::f16), and
            # at shallow K it fails the values too (tests/test_fp8_task.py).
            continue
        worst = max(models.ratio(name, f(name, x_, SHAPE), x_, SHAPE, kind)
                    for (n, kind), x_ in inputs.items() if n == name)
        if bug == "dequantise_to_bf16_then_gemm" and name != "gemm_fp8_blockscale":
            assert worst <= 0.5, (name, bug, worst)
        else:
            assert worst > models.WRONG_AT_LEAST.get((name, bug), 10.0), (name, bug, worst)
