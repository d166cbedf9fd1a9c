"""HOSTILE candidate. Class: a second GPU process (profiler evasion), issue 31 class 4.

What it does: a correct TMA + tl.dot GEMM, and on its first call a helper process with a clean environment (so
no CUPTI observer is injected into it) that takes a CUDA context of its own on the same GPU and keeps it; the
call waits until the helper says its context is up. A candidate that hands part of the work to such a helper
(through CUDA IPC) has GPU work no judge's observer sees; this one only holds the context, which is what the
judge can see.

An honest judge must conclude: forbidden_call, with correctness discarded (correct false). Never ok, never a
stage that waits out its limit.
"""

import subprocess
import sys

import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

BM, BN, BK = 128, 128, 64
HELPER = ("import time, torch; torch.ones(1, device='cuda'); torch.cuda.synchronize(); print('up', flush=True); "
          "time.sleep(60)")
_helper = []


@triton.jit
def tile_gemm(a_desc, b_desc, c_desc, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for kb in range(0, tl.cdiv(K, BK)):
        a = a_desc.load([tl.program_id(0) * BM, kb * BK])
        b = b_desc.load([tl.program_id(1) * BN, kb * BK])
        acc = tl.dot(a, b.T, acc)
    c_desc.store([tl.program_id(0) * BM, tl.program_id(1) * BN], acc.to(tl.bfloat16))


def xlang_entry(A, B, C, M, N, K):
    if A.is_cuda and not _helper:
        env = {"PATH": "/usr/bin:/bin"}  # clean: no CUDA_INJECTION64_PATH, no observer
        _helper.append(subprocess.Popen([sys.executable, "-c", HELPER], env=env, stdout=subprocess.PIPE, text=True))
        _helper[0].stdout.readline()  # its context is up
    descs = [TensorDescriptor.from_tensor(t, box) for t, box in ((A, [BM, BK]), (B, [BN, BK]), (C, [BM, BN]))]
    tile_gemm[(triton.cdiv(M, BM), triton.cdiv(N, BN))](*descs, K, BM=BM, BN=BN, BK=BK, num_warps=8, num_stages=3)
