"""gemm_nvfp4 (issue 34) on CPU: NVFP4 (e2m1 packed two per byte, one e4m3 scale per 16 elements) against a slow
per-block dequantise-then-matmul that decodes the codes bit by bit, scales drawn per block over many powers of two,
an honest block-scaled kernel passing the tolerance and wrong ones (scales ignored, averaged, misplaced, read as UE8M0,
A's nibbles swapped) failing it (the judge's compare_output); the Blackwell Triton expert's census (kind::mxf4nvf4,
SASS UTCOMMA.4X, from a build and from a fixture of one) and its CPU model (the expert's own kernel under Triton's
interpreter, with mutations of its scale indexing that must fail). Nothing of this task has run on a GPU."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from test_fp8_experts import INTERPRETER_SHIM

torch = pytest.importorskip("torch")

from xlang import census  # noqa: E402
from xlang.archs import get_arch  # noqa: E402
from xlang.backend import build_candidate  # noqa: E402
from xlang.profiler.judge.verify import compare_output  # noqa: E402
from xlang.task import get_task  # noqa: E402
from tasks.gemm_nvfp4 import unpack_e2m1  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "census" / "gemm_nvfp4_triton.sm_100a.sass"
MODEL = ROOT / "tasks" / "gemm_nvfp4" / "verify" / "triton_blackwell_emulate.py"
TASK = get_task("gemm_nvfp4")
sys.path.insert(0, str(MODEL.parent))
import tolerance  # noqa: E402  (tasks/gemm_nvfp4/verify/tolerance.py: the honest and the wrong kernels)

sys.path.remove(str(MODEL.parent))
honest, WRONG, _ratio, _swap_nibbles = tolerance.honest, tolerance.WRONG, tolerance.ratio, tolerance.swap_nibbles
SHAPES = ({"M": 77, "N": 208, "K": 512}, {"M": 130, "N": 144, "K": 384}, {"M": 5, "N": 1040, "K": 256})


def _decode(byte_tensor):
    """Bit by bit, independent of the task's table: sign bit 3, exponent bits 2-1, mantissa bit 0; exponent 0 is
    subnormal (m * 0.5), else 2**(e - 1) * (1 + m / 2). Element 2j from byte j's low nibble."""
    out = []
    for code in torch.stack((byte_tensor & 15, byte_tensor >> 4), -1).flatten(-2).flatten().tolist():
        s, e, m = code >> 3, (code >> 1) & 3, code & 1
        v = m * 0.5 if e == 0 else 2.0 ** (e - 1) * (1 + m / 2)
        out.append(-v if s else v)
    return torch.tensor(out, dtype=torch.float64).view(byte_tensor.shape[0], -1)


def test_reference_is_a_per_block_dequantise_then_matmul():
    shape = {"M": 19, "N": 48, "K": 256}
    x = TASK.make_inputs(shape, 3, "cpu")
    A, B = _decode(x["A"]), _decode(x["B"])
    slow = torch.zeros(19, 48, dtype=torch.float64)
    for kb in range(256 // 16):
        k = slice(16 * kb, 16 * (kb + 1))
        slow += (A[:, k] * x["SA"][:, kb].double()[:, None]) @ (B[:, k] * x["SB"][:, kb].double()[:, None]).t()
    got = TASK.reference(x, shape)["C"]
    assert got.dtype == torch.float32
    assert torch.allclose(got.double(), slow, rtol=1e-5, atol=1e-5 * float(slow.abs().max()))


@pytest.mark.parametrize("kind", TASK.input_kinds)
def test_scales_vary_per_block_and_values_use_the_whole_range(kind):
    x = TASK.make_inputs({"M": 64, "N": 96, "K": 512}, 1, "cpu", kind)
    assert x["A"].dtype == x["B"].dtype == torch.uint8 and x["A"].shape == (64, 256) and x["B"].shape == (96, 256)
    assert x["SA"].dtype == x["SB"].dtype == torch.float8_e4m3fn and x["SA"].shape == (64, 32)
    for s in (x["SA"].float(), x["SB"].float()):
        # positive, over the draw's 2**8 per operand (LOW_EXP..HIGH_EXP: 2**16 for a product) and more
        assert float(s.min()) > 0 and float(s.max() / s.min()) >= 2 ** 8
        assert (s.max(1).values > s.min(1).values).all()  # every row's blocks differ
        assert (s.log2() != s.log2().round()).float().mean() > 0.5  # mostly not powers of two: mantissas matter
    for packed in (x["A"], x["B"]):
        codes = torch.stack((packed & 15, packed >> 4), -1)
        assert set(codes.flatten().tolist()) == set(range(16))  # every e2m1 code, both signs
        top = unpack_e2m1(packed).abs().view(packed.shape[0], -1, 16).amax(2)
        assert float(top.min()) >= 4.0 and float((top == 6).float().mean()) > 0.5  # blocks reach the top codes


def test_inputs_are_seeded():
    shape = {"M": 9, "N": 32, "K": 128}
    one, again, other = (TASK.make_inputs(shape, s, "cpu") for s in (4, 4, 5))
    assert all(torch.equal(one[k].view(torch.uint8), again[k].view(torch.uint8)) for k in one)
    assert not torch.equal(one["A"], other["A"])


@pytest.mark.parametrize("kind", TASK.input_kinds)
def test_honest_passes_and_wrong_kernels_fail(kind):
    for shape in SHAPES:
        x = TASK.make_inputs(shape, 11, "cpu", kind)
        want = TASK.reference(x, shape)["C"]
        tol, bound = TASK.tolerance, TASK.bound_for("C", x, shape)  # the judge's rule: atol, rtol, the error bound
        assert "failure" not in compare_output("C", honest(x), want, tol["atol"], tol["rtol"], bound)
        assert _ratio(honest(x), want, bound) < 0.5  # 0.389 at most (tasks/gemm_nvfp4/verify/tolerance.py)
        for name, wrong in WRONG.items():
            assert _ratio(wrong(x), want, bound) >= 10, (name, kind, shape)


def test_nibbles_swapped_in_both_operands_is_the_same_product():
    # A kernel that reads both operands' nibbles the other way round pairs a(2j+1) with b(2j+1) as before: inside one
    # scale block the sum does not change, so the check neither can nor needs to tell; one operand alone fails above.
    x = TASK.make_inputs({"M": 33, "N": 48, "K": 256}, 2, "cpu")
    both = honest({**x, "A": _swap_nibbles(x["A"]), "B": _swap_nibbles(x["B"])})
    shape = {"M": 33, "N": 48, "K": 256}
    assert _ratio(both, TASK.reference(x, shape)["C"], TASK.bound_for("C", x, shape)) < 0.5


def test_dequantised_values_are_exact_in_bf16_and_fp16():
    # Every e2m1 magnitude times every finite positive e4m3 scale is a bf16 value (the fallback baseline loses
    # nothing) and an fp16 one (the Hopper expert's operands).
    values = torch.tensor([0, 0.5, 1, 1.5, 2, 3, 4, 6.0])
    scales = torch.arange(256, dtype=torch.uint8).view(torch.float8_e4m3fn).float()
    products = (values[:, None] * scales[torch.isfinite(scales) & (scales > 0)][None, :]).flatten()
    for dtype in (torch.bfloat16, torch.float16):
        assert torch.equal(products.to(dtype).float(), products), dtype


def test_contract_and_required_families():
    c = TASK.contract
    assert {t.name: t.dims({"M": 3, "N": 16, "K": 256}) for t in c.tensors} == {
        "A": (3, 128), "SA": (3, 16), "B": (16, 128), "SB": (16, 16), "C": (3, 16)}
    assert "const uint8_t* A" in c.c_signature() and "const __nv_fp8_e4m3* SA" in c.c_signature()
    assert TASK.required_for(get_arch("b200")) == ("tcgen05_block_scale", "tma")
    assert TASK.required_for(get_arch("h100")) == ("wgmma", "tma")  # no fp4 MMA: dequantise, 16-bit wgmma
    assert "fallback" in TASK.baseline_name and "not a vendor" in TASK.baseline_name
    assert "low nibble" in c.rules and "16 consecutive elements" in c.rules


def test_the_fixture_of_the_experts_sass_is_block_scaled_and_nothing_else():
    # tests/fixtures/census/gemm_nvfp4_triton.sm_100a.sass: the header and the UTC* / UTMA* / LDTM / STTM lines of
    # `cuobjdump -sass` (triton's cuobjdump, CUDA 12.8) of the expert's build for b200 with Triton 3.6, 2026-12-02.
    text = FIXTURE.read_text()
    names = get_arch("b200").families
    operands = census.parse_operands(text, names)
    (counts,) = [census.classify(ops, names, operands.get(fn)) for fn, ops in census.parse_sass(text).items()]
    assert counts["tcgen05_block_scale"] == 4 and counts["tcgen05_f8f6f4"] == counts["tcgen05_mma"] == 0
    assert counts["tma"] > 0 and counts["tcgen05_cp"] == 0  # Triton moves the scales with tcgen05.st (STTM)
    mmas = [ln.split()[1] for ln in text.splitlines() if "MMA" in ln]
    assert mmas == ["UTCOMMA.4X"] * 4


@pytest.mark.slow
@pytest.mark.parametrize("mutation", [None, "scale_step_per_32", "scale_row_stride_per_32", "first_step_scales_only",
                                      "b_scales_by_rows_of_a"])
def test_the_cpu_model_passes_the_expert_and_fails_its_mutations(mutation):
    # In a child: the model turns Triton's interpreter on for its process. A mutation that no longer applies to the
    # expert's text stops the child (triton_blackwell_emulate.mutated), so the model cannot test nothing.
    pytest.importorskip("triton")
    args = [sys.executable, str(MODEL)] + ([mutation] if mutation else [])
    proc = subprocess.run(args, capture_output=True, text=True, timeout=600, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 3 * len(TASK.input_kinds), lines  # 3 shapes x the kinds
    if mutation is None:
        assert all(ln.startswith("PASS") for ln in lines), lines
    else:
        assert sum(ln.startswith("FAIL") for ln in lines) >= 4, lines  # every kind, the shapes of several K steps


_HOPPER_CHILD = INTERPRETER_SHIM + r'''
import json
from xlang.candidate import load_module
from xlang.profiler.judge.verify import compare_output
from xlang.task import get_task

task = get_task("gemm_nvfp4")
expert = load_module(sys.argv[1])
out = []
for kind in task.input_kinds:
    for shape in ({"M": 130, "N": 144, "K": 256}, {"M": 7, "N": 272, "K": 384}, {"M": 200, "N": 16, "K": 128}):
        x = task.make_inputs(shape, 5, "cpu", kind)
        C = torch.full((shape["M"], shape["N"]), float("nan"), dtype=torch.bfloat16)
        expert.xlang_entry(x["A"], x["SA"], x["B"], x["SB"], C, shape["M"], shape["N"], shape["K"])
        stats = compare_output("C", C, task.reference(x, shape)["C"], **task.tolerance,
                           bound=task.bound_for("C", x, shape))
        out.append("failure" not in stats)
print(json.dumps(out))
'''


@pytest.mark.slow
def test_the_hopper_triton_expert_computes_the_task_under_the_interpreter(tmp_path):
    # Its own kernel (no tl.dot_scaled: the decode, the scales, the fp16 dot) under Triton's interpreter, in a child.
    pytest.importorskip("triton")
    script = tmp_path / "child.py"
    script.write_text(_HOPPER_CHILD)
    expert = TASK.solution("triton", "hopper", ".py").path
    assert expert.name == "triton_hopper.py"
    proc = subprocess.run([sys.executable, str(script), str(expert)], capture_output=True, text=True, timeout=600,
                          cwd=ROOT, env={**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == [True] * 6, proc.stdout


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs the CUDA toolkit (ptxas, cuobjdump)")
def test_the_blackwell_triton_expert_builds_to_mxf4nvf4(tmp_path):
    arch = get_arch("b200")
    solution = TASK.solution("triton", arch.generation, ".py")
    assert solution.path.name == "triton_blackwell.py"
    result = build_candidate(solution.text, "triton", TASK, arch, TASK.shape(), workdir=tmp_path)
    assert result.ok and result.census.ok, result.error
    fam = result.census.families
    assert fam["tcgen05_block_scale"] > 0 and fam["tcgen05_f8f6f4"] == 0 and fam["tcgen05_mma"] == 0
    assert result.census.ptx["tcgen05_block_scale"] > 0
    ptx = "".join(p.read_text() for p in Path(result.workdir).glob("*.ptx"))
    assert "kind::mxf4nvf4.block_scale.scale_vec::4X" in ptx
    # The instruction descriptors Triton hands the MMA, decoded by the PTX ISA's table for .kind::mxf4 and
    # .kind::mxf4nvf4 (#tcgen05-instruction-descriptor): A and B E2M1 (1 at bits 7-9 and 10-11), the scale type
    # UE4M3 (0 at bit 23; UE8M0 would be 1), N >> 3 at bits 17-22, M >> 7 at bits 27-28.
    registers = set(re.findall(r"kind::mxf4nvf4\S* \[[^\]]*\], %rd\d+, %rd\d+, (%r\d+)", ptx))
    descriptors = {int(v) for r in registers for v in re.findall(rf"mov\.b32\s+{re.escape(r)}, (\d+);", ptx)}
    assert registers and descriptors, "no instruction descriptor found"
    for d in descriptors:
        fields = ((d >> 7) & 7, (d >> 10) & 3, (d >> 23) & 1, ((d >> 17) & 63) << 3, ((d >> 27) & 3) << 7)
        assert fields == (1, 1, 0, 128, 128), hex(d)


def test_xlang_tasks_lists_it_and_xlang_build_builds_the_expert(xlang):
    code, out, _ = xlang("tasks")
    assert code == 0 and "gemm_nvfp4" in out
    if shutil.which("nvcc") is None:
        pytest.skip("needs the CUDA toolkit for the build")
    expert = ROOT / "tasks" / "gemm_nvfp4" / "solutions" / "triton_blackwell.py"
    code, out, err = xlang("build", expert, "--lang", "triton", "--task", "gemm_nvfp4", "--arch", "b200")
    assert code == 0, out + err
    assert "tcgen05_block_scale" in out and "required families (*) present" in out
