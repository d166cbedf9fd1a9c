"""Shared by the three block-scaled GEMM tasks (gemm_fp8_blockscale, gemm_mxfp8, gemm_nvfp4): the per-element error
bound their check adds to atol + rtol |ref| (Task.error_bound), u * sum_k |a_k||b_k| over the dequantised operands.
Each task's own comment derives its u (how many ~14-bit truncations a block's partial sum takes, how many promoted
partials are summed in fp32); the arithmetic is this module's."""

from __future__ import annotations

TRUNC_BITS = 14  # significant bits an fp8 tensor core keeps of a partial sum (DeepSeek-V3 report, section 3.3.2)


def accumulation_unit(K: int, block: int, truncations_per_block: int = 1) -> float:
    """u: each truncation to TRUNC_BITS errs by under 2**(1 - TRUNC_BITS) of the partial, and the K / block promoted
    partials are summed in fp32 (2**-24 each)."""
    return truncations_per_block * 2.0 ** (1 - TRUNC_BITS) + (K // block) * 2.0 ** -24


def abs_product_bound(A, B, u: float) -> dict:
    """{"C": u * (|A| @ |B|^T)} on the operands' device, fp32 with TF32 off (as the references): A [M, K] and B [N, K]
    are the judge's own dequantised inputs."""
    import torch  # the tasks' torch: imported where a bound is computed, as their references do

    torch.backends.cuda.matmul.allow_tf32 = False
    return {"C": u * (A.abs() @ B.abs().t())}
