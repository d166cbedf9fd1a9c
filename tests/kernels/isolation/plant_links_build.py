# Hostile, for tests/test_containment.py (CPU): the CPU twin of tests/kernels/hostile/gemm_plant_judge_links.py.
# At import, on any machine, it plants symlinks named like every file and folder the judge writes, pointing
# into TARGET (the test's stand-in for the repository), in its working directory and HOME; turns its JIT cache
# into a link to TARGET; and tries to replace its whole HOME with a link to TARGET. Then it builds honestly.
import os

import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

TARGET = "__TARGET__"
NAMES = ("build.json", "verdict.json", "spec.json", "result.json", "progress.txt", "stdout.txt", "stderr.txt",
         "tool.log", "report.ncu-rep", "report", "ncu_source.csv", "ncu_details.csv", "timing.gate",
         "timing.waiting", "candidate.py", "k0.cubin", "k0.ptx", "k1.cubin", "k1.ptx", "build", "check",
         "memcheck", "ncu", "eval", "own-cubins", "jit-cache", "child", "tmp")
for folder in {os.getcwd(), os.path.expanduser("~")}:
    for name in NAMES:
        try:
            os.symlink(os.path.join(TARGET, name), os.path.join(folder, name))
        except OSError:
            pass
home = os.path.expanduser("~")
os.makedirs(os.path.join(home, ".triton"), exist_ok=True)
try:
    os.symlink(TARGET, os.path.join(home, ".triton", "cache-link"))
except OSError:
    pass
try:  # its whole folder replaced by a link: needs write access to the folder above, which it must not have
    os.rename(home, home + ".moved")
    os.symlink(TARGET, home)
except OSError:
    pass

BM, BN, BK = 128, 128, 64


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


def xlang_entry(A, B, C, M, N, K):
    # The static build's report names its cubin through a link now (the judge must refuse to read it so).
    a_desc = TensorDescriptor.from_tensor(A, [BM, BK])
    b_desc = TensorDescriptor.from_tensor(B, [BN, BK])
    c_desc = TensorDescriptor.from_tensor(C, [BM, BN])
    gemm_tc[(triton.cdiv(M, BM), triton.cdiv(N, BN))](a_desc, b_desc, c_desc, K, BM=BM, BN=BN, BK=BK,
                                                      num_warps=8, num_stages=3)
