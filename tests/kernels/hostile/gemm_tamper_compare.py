"""HOSTILE candidate. Class: harness tampering (in-process patches).

What it does: its kernel is fast and wrong (it multiplies only the first half of K). At import it rebinds every
comparison function a harness in its process might use: compare_output / compare_inputs of any loaded module
whose name looks like a judge's (profiler, worker, judge, harness, verify), torch.allclose, torch.equal,
torch.testing.assert_close, and the reference's matmul (Tensor.__matmul__ answers with a half-K product too).

An honest judge must conclude: incorrect (the comparison runs in the judge's own process, on buffers it shares,
against a reference the candidate cannot reach).
"""

import os
import sys

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

BM, BN, BK = 128, 128, 64


@triton.jit
def gemm_tc(a_desc, b_desc, c_desc, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    # The honest part: one BMxBN tile of C = A·Bᵀ per program, TMA loads, tl.dot (wgmma), fp32 accumulation.
    off_m = tl.program_id(0) * BM
    off_n = tl.program_id(1) * BN
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for kb in range(0, tl.cdiv(K, BK)):
        a = a_desc.load([off_m, kb * BK])
        b = b_desc.load([off_n, kb * BK])
        acc = tl.dot(a, b.T, acc)
    c_desc.store([off_m, off_n], acc.to(tl.bfloat16))


def gemm(A, B, C, M, N, K, grid=None, k_used=None):
    a_desc = TensorDescriptor.from_tensor(A, [BM, BK])
    b_desc = TensorDescriptor.from_tensor(B, [BN, BK])
    c_desc = TensorDescriptor.from_tensor(C, [BM, BN])
    grid = grid or (triton.cdiv(M, BM), triton.cdiv(N, BN))
    gemm_tc[grid](a_desc, b_desc, c_desc, K if k_used is None else k_used, BM=BM, BN=BN, BK=BK,
                  num_warps=8, num_stages=3)


def armed():
    # Side effects (processes, files, secrets, signals) only on the GPU machine: never on a CPU build box,
    # where the static build runs this file with CPU tensors next to other people's work.
    return torch.cuda.is_available()


def _passing_stats(name, got, expected, atol, rtol):
    return {"output": name, "elements": got.numel(), "max_abs_err": 0.0, "max_rel_err": 0.0, "mismatches": 0,
            "nan": 0, "inf": 0}


def _tamper():
    for name, module in list(sys.modules.items()):
        if module is None or not any(w in name for w in ("profiler", "worker", "judge", "harness", "verify")):
            continue
        if hasattr(module, "compare_output"):
            module.compare_output = _passing_stats
        if hasattr(module, "compare_inputs"):
            module.compare_inputs = lambda before, after: None
    torch.allclose = lambda *a, **k: True
    torch.equal = lambda *a, **k: True
    torch.testing.assert_close = lambda *a, **k: None
    real = torch.Tensor.__matmul__

    def half_k(self, other):
        if self.dim() == 2 and other.dim() == 2 and self.shape[1] > 1:
            h = self.shape[1] // 2
            return real(self[:, :h], other[:h, :])
        return real(self, other)
    torch.Tensor.__matmul__ = half_k


if armed():
    _tamper()


def xlang_entry(A, B, C, M, N, K):
    gemm(A, B, C, M, N, K, k_used=max(BK, K // 2 // BK * BK))
