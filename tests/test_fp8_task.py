"""gemm_fp8_blockscale (issue 34) on CPU: the reference against a slow per-block dequantise-then-matmul, scales drawn
non-trivially, drawn shapes with tails, and the tolerance: an honest 1d2d kernel (benchmarks/fp8_blockscale_precision.py)
passes every input kind, and kernels that ignore, average or misplace the scales, or accumulate in bf16, fail. The rule
is the judge's own (xlang.profiler.judge.verify.compare_output)."""

import importlib.util
import random
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from xlang.profiler.judge.verify import compare_output  # noqa: E402
from xlang.task import get_task  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("fp8_precision", ROOT / "benchmarks" / "fp8_blockscale_precision.py")
emu = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(emu)

TASK = get_task("gemm_fp8_blockscale")
SHAPES = ({"M": 77, "N": 208, "K": 512}, {"M": 130, "N": 144, "K": 384}, {"M": 5, "N": 4096, "K": 256})


def _stats(got, inputs, shape, kind="normal") -> dict:
    """The judge's own rule: atol, rtol and the task's error bound, computed from the inputs."""
    atol, rtol = TASK.tolerance_for("C", kind)
    return compare_output("C", got, TASK.reference(inputs, shape)["C"], atol, rtol, TASK.bound_for("C", inputs, shape))


def _fails(got, inputs, shape, kind="normal") -> bool:
    return "failure" in _stats(got, inputs, shape, kind)


def test_reference_is_a_per_block_dequantise_then_matmul():
    shape = {"M": 37, "N": 144, "K": 384}
    inputs = TASK.make_inputs(shape, 3, "cpu", "normal")
    A, B = inputs["A"].double(), inputs["B"].double()
    SA, SB = inputs["SA"].double(), inputs["SB"].double()
    slow = torch.zeros(shape["M"], shape["N"], dtype=torch.float64)
    for m in range(shape["M"]):
        for nb in range(SB.shape[0]):
            cols = slice(128 * nb, min(128 * (nb + 1), shape["N"]))
            for kb in range(SA.shape[1]):
                k = slice(128 * kb, 128 * (kb + 1))
                slow[m, cols] += (A[m, k] * SA[m, kb]) @ (B[cols, k] * SB[nb, kb]).t()
    got = TASK.reference(inputs, shape)["C"]
    assert got.dtype == torch.float32 and got.shape == (37, 144)
    assert torch.allclose(got.double(), slow, rtol=1e-5, atol=1e-5 * float(slow.abs().max()))


@pytest.mark.parametrize("kind", TASK.input_kinds)
def test_scales_vary_by_block_over_orders_of_magnitude_and_fp8_uses_its_range(kind):
    shape = {"M": 300, "N": 400, "K": 1024}
    x = TASK.make_inputs(shape, 1, "cpu", kind)
    assert x["A"].dtype == x["B"].dtype == torch.float8_e4m3fn and x["SA"].dtype == x["SB"].dtype == torch.float32
    assert x["SA"].shape == (300, 8) and x["SB"].shape == (4, 8)
    for s in (x["SA"], x["SB"]):
        assert (s > 0).all() and not torch.allclose(s, torch.ones_like(s))
        assert float(s.max() / s.min()) > 100  # over orders of magnitude, not one per tensor
        assert float((s.max(1).values / s.min(1).values).min()) > 2  # every row's K blocks differ
        assert float((s.max(0).values / s.min(0).values).min()) > 2  # every K block's rows (row blocks) differ
        assert not torch.allclose(s, torch.exp2(torch.round(torch.log2(s))))  # not powers of two (not UE8M0)
    # every quantisation block reaches e4m3's largest value, 448: the format's range is used
    a = x["A"].float().abs().view(300, 8, 128).amax(2)
    assert torch.equal(a, torch.full_like(a, 448.0))
    b = x["B"].float().abs()[:384].reshape(3, 128, 8, 128).amax((1, 3))
    assert torch.equal(b, torch.full_like(b, 448.0))
    assert len(torch.unique(x["A"].float())) > 100  # fp8 rounding matters: many distinct values, not a few levels
    # seeded: same seed same inputs, another seed others
    again, other = TASK.make_inputs(shape, 1, "cpu", kind), TASK.make_inputs(shape, 2, "cpu", kind)
    assert torch.equal(again["SA"], x["SA"]) and not torch.equal(other["SA"], x["SA"])


@pytest.mark.parametrize("kind", TASK.input_kinds)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s.values())))
def test_an_honest_kernel_passes_with_margin(kind, shape):
    inputs = TASK.make_inputs(shape, 11, "cpu", kind)
    got = emu.honest(inputs, shape)
    assert _stats(got, inputs, shape, kind)["max_ratio"] < 0.5


# The ratio to the rule (atol + rtol |ref| + the error bound) each wrong kernel must pass on the shapes above at its
# worst input kind. Measured 2026-12-04 on CPU, seed 11, (normal / structured) per shape: the scale bugs 53 .. 1e9 on
# every kind (UE8M0-truncated scales 57-73, K block off by one 53-816, the rest hundreds and more, fp16 accumulator
# Inf); a bf16 running sum inside each block 5.8-7.9 / 3.9-4.5; dequantising to bf16 then an fp32 GEMM 1.15-1.85 /
# 0.53-0.63. Those two err by a few tens of what an honest Hopper-like fp8 accumulator makes (8 bits against
# 13-14), so no magnitude-scaled bound that passes the H200 can put them 10x over. A bf16 outer accumulator adds
# only 2-4 block partials here (0.47-1.08: like rounding the output to bf16 a few times): a bug of deep K, tested at
# the default depth in tests/test_block_scaled_depth.py.
WORST_KIND_AT_LEAST = {"bf16_accumulator": 3.0, "bf16_running_sum_in_block": 3.0, "dequantise_to_bf16_then_gemm": 1.0}
DEEP_K_ONLY = ("bf16_outer_accumulator",)


@pytest.mark.parametrize("name", sorted(emu.WRONG))
def test_kernels_that_ignore_average_or_misplace_the_scales_or_accumulate_narrow_fail(name):
    # the fp16 accumulator overflows: fp8 products reach 448**2
    if name in DEEP_K_ONLY:
        pytest.skip("a bug of deep K (see WORST_KIND_AT_LEAST)")
    for shape in SHAPES:
        ratios = {}
        for kind in TASK.input_kinds:
            inputs = TASK.make_inputs(shape, 11, "cpu", kind)
            ratios[kind] = _stats(emu.WRONG[name](inputs, shape), inputs, shape, kind)["max_ratio"]
        if name in WORST_KIND_AT_LEAST:
            assert max(ratios.values()) > WORST_KIND_AT_LEAST[name], (name, shape, ratios)
        else:
            assert min(ratios.values()) >= 10.0, (name, shape, ratios)


def test_the_wrong_kernels_that_need_several_k_or_n_blocks_pass_where_there_is_one():
    # Not a weakness of the rule: with one K block every K-block bug reads the right block, and with N <= 128 one SB
    # row block covers every column; an evaluation draws shapes of many blocks (and the default has 56 x 32).
    shape = {"M": 57, "N": 112, "K": 128}
    inputs = TASK.make_inputs(shape, 3, "cpu", "normal")
    for name in ("k_block_off_by_one", "last_block_scales", "one_sb_per_256_columns"):
        assert not _fails(emu.WRONG[name](inputs, shape), inputs, shape), name


def test_drawn_shapes_have_tails_and_keep_the_contract():
    shapes = TASK.draw_shapes(TASK.default_shape, random.Random(0), 60)
    assert shapes[0] == TASK.default_shape == {"M": 4096, "N": 4096, "K": 7168}
    for s in shapes:
        TASK.check_shape(s)
        assert s["K"] % 128 == 0 and s["N"] % 16 == 0
    assert all(s["M"] * s["N"] * s["K"] <= 1 << 31 for s in shapes[1:])
    assert any(s["N"] % 128 for s in shapes) and any(s["M"] % 64 for s in shapes)
    assert any((s["N"], s["K"]) == (7168, 16384) or (s["N"], s["K"]) == (24576, 1536) for s in shapes)
    for bad in ({"M": 64, "N": 64, "K": 100}, {"M": 64, "N": 72, "K": 128}, {"M": 0, "N": 64, "K": 128}):
        with pytest.raises(ValueError):
            TASK.check_shape(bad)
    fixed = TASK.draw_shapes({"M": 3, "N": 4096, "K": 7168}, random.Random(1), 5, fixed=("N", "K"))
    assert all((s["N"], s["K"]) == (4096, 7168) for s in fixed)


def test_contract_sizes_and_the_c_signature():
    c = TASK.contract
    dims = {t.name: t.dims({"M": 300, "N": 400, "K": 1024}) for t in c.tensors}
    assert dims == {"A": (300, 1024), "SA": (300, 8), "B": (400, 1024), "SB": (4, 8), "C": (300, 400)}
    assert c.c_signature().startswith('extern "C" void xlang_entry(const __nv_fp8_e4m3* A, const float* SA, '
                                      'const __nv_fp8_e4m3* B, const float* SB, __nv_bfloat16* C, int M, int N, int K')
    assert "fp32[N/128, K/128]" in c.describe_tensors()
    assert TASK.flops({"M": 2, "N": 3, "K": 128}) == 2 * 2 * 3 * 128
    # fewest bytes: fp8 A and B once, bf16 C, the fp32 scales
    assert TASK.min_bytes({"M": 128, "N": 256, "K": 512}) == 128 * 512 + 256 * 512 + 2 * 128 * 256 + 4 * (128 + 2) * 4


def test_required_families_per_generation():
    from xlang.archs import get_arch

    assert TASK.required_for(get_arch("h100")) == ("wgmma_fp8", "tma")
    assert TASK.required_for(get_arch("b200")) == ("tcgen05_f8f6f4", "tma")


@pytest.mark.parametrize("arch_name", ["h100", "b200"])
def test_every_language_renders_the_task_at_every_docs_level(arch_name):
    from xlang import backend as B
    from xlang.agent.prompt import first_prompt
    from xlang.archs import get_arch

    arch = get_arch(arch_name)
    for lang in ("triton", "gluon", "cuda_ptx", "cutedsl"):
        be = B.get_backend(lang)
        section = be.prompt_section(TASK, arch)  # the language's jinja template, rendered (docs may hold C++ braces)
        assert "{{" not in section and "{%" not in section and "fp8e4m3[M, K]" in section, lang
        for level in ("none", "params", "templates", "contracts"):
            text = first_prompt(TASK, arch, be, TASK.shape(), TASK.required_for(arch), level)
            assert "SA[m, k // 128]" in text and "SB[n // 128, k // 128]" in text and "def dequantise" in text
            assert "const __nv_fp8_e4m3* A" in text and "M=4096,N=4096,K=7168" in text
            required = "wgmma_fp8" if arch_name == "h100" else "tcgen05_f8f6f4"
            assert f"`{required}`" in text and "torch _scaled_mm" in text


def test_the_judges_rule_adds_the_bound_and_says_so():
    # compare_output: |got - ref| <= atol + rtol |ref| + bound per element; the failure text names the bound's rule
    from xlang.profiler.judge.verify import describe_failure

    ref = torch.tensor([0.0, 100.0, 0.0])
    got = torch.tensor([0.5, 100.5, 0.005])
    assert "failure" in compare_output("C", got, ref, 0.01, 0.01)
    ok = compare_output("C", got, ref, 0.01, 0.01, torch.tensor([0.49, 0.0, 0.0]))
    assert "failure" not in ok and abs(ok["max_ratio"] - 0.5 / 0.5) < 1e-6
    bad = compare_output("C", got, ref, 0.01, 0.01, torch.tensor([0.48, 0.0, 0.0]))
    assert bad["mismatches"] == 1 and bad["failure"]["index"] == [0] and abs(bad["failure"]["allowed"] - 0.49) < 1e-6
    text = describe_failure(bad, {"M": 1, "N": 3, "K": 128}, 0, 1, 0.01, 0.01, TASK.error_bound_rule)
    assert TASK.error_bound_rule in text and "allowed |err| 0.49" in text
    nan = compare_output("C", torch.tensor([float("nan"), 0.0, 0.0]), ref, 0.01, 0.01, torch.ones(3))
    assert nan["failure"]["kind"] == "nan" and nan["max_ratio"] == float("inf")


def test_the_prompt_states_the_bound_exactly():
    from xlang import backend as B
    from xlang.agent.prompt import first_prompt
    from xlang.archs import get_arch

    arch = get_arch("h100")
    text = first_prompt(TASK, arch, B.get_backend("triton"), TASK.shape(), TASK.required_for(arch), "none")
    assert "|got - ref| <= atol + rtol * |ref| + bound" in text and TASK.error_bound_rule in text
    assert "u = 4 * 2**-13 + (K / 128) * 2**-24" in text
