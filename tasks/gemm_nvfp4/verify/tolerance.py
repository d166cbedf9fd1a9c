"""The figures behind gemm_nvfp4's tolerance, on CPU: what an honest block-scaled MMA computes against the task's fp32
reference, the reference against an fp64 dequantise-matmul, and how far wrong kernels land, each as the worst
|err| / (atol + rtol |ref|) over drawn inputs (1.0 = at the tolerance). tests/test_nvfp4_task.py uses the same
kernels.

    python3 tasks/gemm_nvfp4/verify/tolerance.py     # prints the figures the task's tolerance comment quotes
"""

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from tasks.gemm_nvfp4 import unpack_e2m1  # noqa: E402
from xlang.task import get_task  # noqa: E402

TASK = get_task("gemm_nvfp4")
SHAPES = ({"M": 77, "N": 208, "K": 512}, {"M": 130, "N": 144, "K": 384}, {"M": 5, "N": 1040, "K": 256},
          {"M": 64, "N": 64, "K": 4096})
SEEDS = (11, 12)


def partials(x):
    """Per 16-block fp32 partial sums [K/16, M, N] of the e2m1 products."""
    A, B = unpack_e2m1(x["A"]), unpack_e2m1(x["B"])
    M, K = A.shape
    return A.view(M, K // 16, 16).transpose(0, 1) @ B.view(B.shape[0], K // 16, 16).transpose(0, 1).transpose(1, 2)


def honest(x):
    """What the block-scaled MMA computes: each 16-block's products times sa * sb, fp32 sums, bf16 out."""
    scale = x["SA"].float().t()[:, :, None] * x["SB"].float().t()[:, None, :]
    return (partials(x) * scale).sum(0).to(torch.bfloat16)


def swap_nibbles(packed):
    return (packed >> 4) | ((packed & 15) << 4)


def as_ue8m0(scales):
    return (scales.view(torch.uint8).float() - 127).exp2()


WRONG = {
    "ignores_scales": lambda x: partials(x).sum(0).to(torch.bfloat16),
    "one_mean_scale_per_row": lambda x: (partials(x).sum(0) * x["SA"].float().mean(1, keepdim=True)
                                         * x["SB"].float().mean(1, keepdim=True).t()).to(torch.bfloat16),
    "scales_shifted_by_one_block": lambda x: honest({**x, "SA": x["SA"].view(torch.uint8).roll(1, 1)
                                                     .view(torch.float8_e4m3fn)}),
    "scale_bytes_read_as_ue8m0": lambda x: honest({**x, "SA": as_ue8m0(x["SA"]), "SB": as_ue8m0(x["SB"])}),
    "a_nibbles_swapped": lambda x: honest({**x, "A": swap_nibbles(x["A"])}),
}


def ratio(got, want, bound=None) -> float:
    """Worst |got - want| / (atol + rtol |want| + bound): bound is the task's error bound (TASK.bound_for) where the
    judge's rule is meant, None for atol / rtol alone."""
    tol = TASK.tolerance
    allowed = tol["atol"] + tol["rtol"] * want.double().abs() + (0 if bound is None else bound.double())
    return float(((got.double() - want.double()).abs() / allowed).max())


def exact(x):
    """fp64 dequantise-then-matmul."""
    a = unpack_e2m1(x["A"]).double() * x["SA"].double().repeat_interleave(16, 1)
    b = unpack_e2m1(x["B"]).double() * x["SB"].double().repeat_interleave(16, 1)
    return a @ b.t()


def figures() -> dict[str, float]:
    out = {"honest": 0.0, "reference_vs_fp64": 0.0, **{name: float("inf") for name in WRONG}}
    for kind in TASK.input_kinds:
        for shape in SHAPES:
            for seed in SEEDS:
                x = TASK.make_inputs(shape, seed, "cpu", kind)
                want = TASK.reference(x, shape)["C"]
                bound = TASK.bound_for("C", x, shape)
                out["honest"] = max(out["honest"], ratio(honest(x), want, bound))
                out["reference_vs_fp64"] = max(out["reference_vs_fp64"], ratio(want, exact(x), bound))
                for name, wrong in WRONG.items():
                    out[name] = min(out[name], ratio(wrong(x), want, bound))
    return out


if __name__ == "__main__":
    print(f"{len(SHAPES)} shapes x {len(SEEDS)} seeds x {len(TASK.input_kinds)} kinds; worst honest / reference, "
          "least wrong (1.0 = the tolerance):")
    for name, value in figures().items():
        print(f"  {name:30s} {value:.3g}")
