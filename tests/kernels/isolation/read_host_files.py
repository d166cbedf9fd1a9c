# Hostile, for tests/test_containment.py: tries to open every path of PATHS (what a candidate must not see:
# the expert of its task, a results store, another candidate's build folder, a file in a user's home, the
# repository's reports) and fails its build (or its call, on a GPU) with what it read; CONTROL must be readable
# (the jail shows the system folders), which shows the attempts themselves work.
import os

PATHS = []  # the test puts its paths here
CONTROL = "/etc/os-release" if os.path.exists("/etc/os-release") else "/usr/lib/os-release"
open(CONTROL).read(16)
SEEN = []
for path in PATHS:
    try:
        with open(path, "rb") as f:
            SEEN.append(f"{path}: {f.read(40)!r}")
    except OSError:
        pass
    try:
        SEEN += [f"{path}: lists {os.listdir(path)[:3]}"] if os.path.isdir(path) else []
    except OSError:
        pass
FAIL_AT_IMPORT = True  # the GPU test sets False: what it saw then turns into a wrong answer
if SEEN and FAIL_AT_IMPORT:
    raise RuntimeError("the jail showed: " + "; ".join(SEEN))

import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.tools.tensor_descriptor import TensorDescriptor  # noqa: E402

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
    if SEEN:  # in a runtime stage: what it saw turns into a wrong answer, which every stage checks
        C.fill_(7.0)
        return
    a_desc = TensorDescriptor.from_tensor(A, [BM, BK])
    b_desc = TensorDescriptor.from_tensor(B, [BN, BK])
    c_desc = TensorDescriptor.from_tensor(C, [BM, BN])
    gemm_tc[(triton.cdiv(M, BM), triton.cdiv(N, BN))](a_desc, b_desc, c_desc, K, BM=BM, BN=BN, BK=BK,
                                                      num_warps=8, num_stages=3)
