# Hostile, for tests/test_robustness.py (CPU, issue 46): a Triton gemm that builds honestly and, by MODE, makes the
# judge's work after the build as costly or as dangerous as it can from inside its jail:
#   modules  its import writes 1500 files and a static-build report naming each as a kernel's cubin, then ends the
#            build child before the static build writes its own report
#   deep     its import makes a folder chain DEPTH deep in its Triton cache (the judge copies that cache)
#   fifo     at exit its Triton cache becomes a FIFO
#   link     at exit its Triton cache becomes a link to TARGET (a FIFO of the host's, outside the jail)
#   inside   at exit a FIFO named like a cubin sits in its Triton cache
import atexit
import json
import os

import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

MODE = "__MODE__"
TARGET = "__TARGET__"
DEPTH = 1500
CACHE = os.environ.get("TRITON_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".triton")

if MODE == "modules":
    out, kernels = os.getcwd(), []
    for i in range(1500):
        path = os.path.join(out, f"m{i}.cubin")
        with open(path, "wb") as f:
            f.write(os.urandom(4096))
        kernels.append({"name": f"gemm_{i}", "cubin": path, "ptx": None, "meta": {}})
    with open(os.path.join(out, "static_build.json"), "w") as f:
        json.dump({"ok": True, "error": None, "kernels": kernels, "versions": {}}, f)
    os._exit(0)

if MODE == "deep":
    os.makedirs(CACHE, exist_ok=True)
    fd = os.open(CACHE, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(DEPTH):  # by descriptors: the whole path is far longer than PATH_MAX
        os.mkdir("d", dir_fd=fd)
        below = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = below
    with open(os.open("k.cubin", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd), "wb") as f:
        f.write(b"deep")
    os.close(fd)


def _at_exit():
    if MODE in ("fifo", "link"):
        os.rename(CACHE, CACHE + ".old")
        if MODE == "fifo":
            os.mkfifo(CACHE)
        else:
            os.symlink(TARGET, CACHE)
    elif MODE == "inside":
        os.makedirs(os.path.join(CACHE, "ab"), exist_ok=True)
        os.mkfifo(os.path.join(CACHE, "ab", "k.cubin"))


atexit.register(_at_exit)

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
    a_desc = TensorDescriptor.from_tensor(A, [BM, BK])
    b_desc = TensorDescriptor.from_tensor(B, [BN, BK])
    c_desc = TensorDescriptor.from_tensor(C, [BM, BN])
    gemm_tc[(triton.cdiv(M, BM), triton.cdiv(N, BN))](a_desc, b_desc, c_desc, K, BM=BM, BN=BN, BK=BK,
                                                      num_warps=8, num_stages=3)
