"""CPU model of tasks/gemm_nvfp4/solutions/triton_blackwell.py (issue 34, the Triton NVFP4 expert). No Blackwell GPU
exists here, and Triton 3.6's interpreter has no tl.dot_scaled (its builder lacks create_dot_scaled): this runs the
expert's OWN kernel under Triton's interpreter (TRITON_INTERPRET=1: its grouped tile order, the TMA descriptor loads
with their zero fill and clipped stores, the scale pointers, masks and `other` values, the K loop), with
tl.dot_scaled supplied here as Triton documents it for these operands:

  * lhs [BM, BK/2] and rhs [BK/2, BN] u8 "e2m1", packed along K, "first element in lower bits" (core.dot_scaled's
    docstring): element 2j of a row of A is byte j's low nibble;
  * e4m3 scales (fp8e4nv) mean one scale per 16 elements of K (semantic.verify_scaled_shape: [M, K // 16], the rhs
    scale [N, K // 16], not transposed); uint8 scales are UE8M0 bytes, one per 32 (MX; tests/kernels/hostile/
    nvfp4_scales_as_mx.py uses them);
  * acc + (a * sa) @ (b * sb) in fp32 (products of an e2m1 value and an e4m3 scale are exact in fp32; the sum here
    is numpy's fp32 matmul, the hardware's order inside one MMA is not modelled).

What the model does NOT cover: Triton's lowering itself (the tensor-memory layout of the scale factors that
tcgen05.mma kind::mxf4nvf4.block_scale.scale_vec::4X reads, the shared-memory swizzles, the pipelining): those are
Triton's, checked only by building (the census) and by running on a B200, which has never happened here.

Mutations (`MUTATIONS`): copies of the expert with its scale indexing deliberately off; each must fail the task's
comparison in every input kind (`as_expected`), so the model can tell. Outputs start as NaN: every element must be
written.

    python3 tasks/gemm_nvfp4/verify/triton_blackwell_emulate.py [MUTATION]   # exit status 0: every case as expected

Importing this module turns Triton's interpreter on for the whole process: run it as a script or in a child.
"""

import os
import sys
import tempfile
from pathlib import Path

os.environ["TRITON_INTERPRET"] = "1"  # read as triton is imported and when triton.jit decorates: before both

import numpy as np  # noqa: E402
import torch  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.runtime import interpreter  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

from xlang.candidate import load_module  # noqa: E402
from xlang.profiler.judge.verify import compare_output  # noqa: E402
from xlang.task import get_task  # noqa: E402

EXPERT = ROOT / "tasks" / "gemm_nvfp4" / "solutions" / "triton_blackwell.py"
SHAPES = ({"M": 130, "N": 144, "K": 256}, {"M": 7, "N": 272, "K": 384}, {"M": 200, "N": 16, "K": 128})
# name -> (text in the expert, its replacement): the scale indexing deliberately off
MUTATIONS = {
    "scale_step_per_32": ("(k // 16 + s_idx)", "(k // 32 + s_idx)"),  # MX's block of 32, not NVFP4's 16
    "scale_row_stride_per_32": ("k_scales = K // 16", "k_scales = K // 32"),
    "first_step_scales_only": ("(k // 16 + s_idx)", "(s_idx)"),
    "b_scales_by_rows_of_a": ("sb = tl.load(SB + cols.to(tl.int64)", "sb = tl.load(SB + rows.to(tl.int64)"),
}

_E2M1 = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0], np.float32)
_E4M3 = torch.arange(256, dtype=torch.uint8).view(torch.float8_e4m3fn).float().numpy()  # bit pattern -> value


def _scale_values(handle):
    """(values, elements per scale): e4m3 scales (fp8e4nv) one per 16, UE8M0 bytes (uint8, 2**(byte - 127)) one per
    32, as semantic.verify_scaled_shape reads them. The interpreter keeps fp8 data as its bit patterns."""
    data = np.asarray(handle.data)
    if handle.dtype == tl.uint8:
        return np.exp2(data.astype(np.float32) - 127), 32
    assert handle.dtype == tl.float8e4nv, handle.dtype
    return (_E4M3[data.view(np.uint8)] if data.dtype.itemsize == 1 else data.astype(np.float32)), 16


def _create_dot_scaled(self, lhs, lhs_scale, lhs_format, rhs, rhs_scale, rhs_format, fast_math, lhs_k_pack,
                       rhs_k_pack, acc):
    names = (str(lhs_format).rsplit(".", 1)[-1].lower(), str(rhs_format).rsplit(".", 1)[-1].lower())
    assert names == ("e2m1", "e2m1") and lhs_k_pack and rhs_k_pack, (names, lhs_k_pack, rhs_k_pack)
    a_bytes, b_bytes = np.asarray(lhs.data), np.asarray(rhs.data)  # [BM, BK/2], [BK/2, BN]
    a = _E2M1[np.stack((a_bytes & 15, a_bytes >> 4), axis=-1).reshape(a_bytes.shape[0], -1)]  # [BM, BK]
    b = _E2M1[np.stack((b_bytes & 15, b_bytes >> 4), axis=1).reshape(-1, b_bytes.shape[1])]  # [BK, BN]
    (sa, group_a), (sb, group_b) = _scale_values(lhs_scale), _scale_values(rhs_scale)  # [BM, BK/16], [BN, BK/16]
    assert sa.shape == (a.shape[0], a.shape[1] // group_a) and sb.shape == (b.shape[1], b.shape[0] // group_b)
    a = a * np.repeat(sa, group_a, axis=1)
    b = b * np.repeat(sb, group_b, axis=1).T
    return interpreter.TensorHandle(np.asarray(acc.data) + np.matmul(a, b, dtype=np.float32), tl.float32)


_dot_scaled = tl.core.dot_scaled


@tl.core.builtin
def _dot_scaled_constexpr_formats(lhs, lhs_scale, lhs_format, rhs, rhs_scale, rhs_format, acc=None, fast_math=False,
                                  lhs_k_pack=True, rhs_k_pack=True, out_dtype=tl.float32, _semantic=None):
    # Compiled code hands the format strings over as constexprs; the interpreter hands over plain strings.
    return _dot_scaled(lhs, lhs_scale, tl.constexpr(lhs_format), rhs, rhs_scale, tl.constexpr(rhs_format), acc,
                       fast_math, lhs_k_pack, rhs_k_pack, out_dtype, _semantic=_semantic)


def install():
    interpreter.InterpreterBuilder.create_dot_scaled = _create_dot_scaled
    tl.dot_scaled = tl.core.dot_scaled = _dot_scaled_constexpr_formats
    patch = interpreter._patch_lang_tensor

    def patch_index(tensor, scope):  # sizes as ints where Python wants them (tests/test_fp8_experts.INTERPRETER_SHIM)
        patch(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(np.asarray(self.handle.data).reshape(-1)[0]))

    interpreter._patch_lang_tensor = patch_index


def run(source: str, seed: int = 5) -> list[tuple[str, dict, bool, float]]:
    """The expert (or a mutation's) source on every shape and input kind: (kind, shape, passed, max_rel_err)."""
    task = get_task("gemm_nvfp4")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "candidate.py"
        path.write_text(source)
        module = load_module(path)
        out = []
        for kind in task.input_kinds:
            for shape in SHAPES:
                x = task.make_inputs(shape, seed, "cpu", kind)
                C = torch.full((shape["M"], shape["N"]), float("nan"), dtype=torch.bfloat16)
                module.xlang_entry(x["A"], x["SA"], x["B"], x["SB"], C, shape["M"], shape["N"], shape["K"])
                stats = compare_output("C", C, task.reference(x, shape)["C"], **task.tolerance,
                           bound=task.bound_for("C", x, shape))
                out.append((kind, shape, "failure" not in stats, float(stats.get("max_rel_err", float("nan")))))
        return out


def mutated(name: str) -> str:
    old, new = MUTATIONS[name]
    text = EXPERT.read_text()
    assert text.count(old) >= 1, f"the expert no longer contains {old!r}: update MUTATIONS"
    return text.replace(old, new)


def main(argv) -> int:
    install()
    name = argv[1] if len(argv) > 1 else None
    cases = run(mutated(name) if name else EXPERT.read_text())
    for kind, shape, passed, err in cases:
        print(f"{'PASS' if passed else 'FAIL'} {name or 'expert'} {kind} {shape} max_rel_err={err:.3g}")
    return 0 if as_expected(name, cases) else 1


def as_expected(name, cases) -> bool:
    """The expert passes every case; a mutation fails in every input kind (a shape of one K step, K = 128, cannot
    tell a per-step scale column from another: k // 16 == k // 32 == 0 there)."""
    if name is None:
        return all(passed for _, _, passed, _ in cases)
    return all(any(not passed for k, _, passed, _ in cases if k == kind) for kind in {c[0] for c in cases})


if __name__ == "__main__":
    sys.exit(main(sys.argv))
