"""HOSTILE candidate. Class: timing (work hidden from the harness's stream).

What it does: the entry point hands the launch to a background thread that enqueues the honest kernel on a
private stream (after waiting for the harness stream, so the inputs are ready) and returns as soon as the launch
is queued. The harness stream never waits for that stream: CUDA events recorded around the call on the harness
stream measure almost nothing, while a device-wide synchronise still makes every checked output right.

An honest judge must conclude: ok with an honest speed (its observer times every kernel of the process on every
stream and thread), or incorrect (a later call's fresh inputs raced the hidden kernel). Never an inflated speedup.
"""
import threading

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

_stream = {}


def xlang_entry(A, B, C, M, N, K):
    if not A.is_cuda:
        gemm(A, B, C, M, N, K)
        return
    harness = torch.cuda.current_stream()
    side = _stream.setdefault(A.device, torch.cuda.Stream(device=A.device))
    queued = threading.Event()

    def work():
        side.wait_stream(harness)
        with torch.cuda.stream(side):
            gemm(A, B, C, M, N, K)
        queued.set()

    threading.Thread(target=work, daemon=True).start()
    queued.wait()
