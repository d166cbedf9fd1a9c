# Hostile, for tests/test_containment.py: leaves a marker in /dev/shm and /tmp at import (where torch keeps its
# CUDA-IPC bookkeeping, and where tools keep their sockets), then computes the right answer on the CPU.
import os

for folder in ("/dev/shm", "/tmp"):
    try:
        with open(os.path.join(folder, "__MARKER__"), "w") as f:
            f.write("left by a candidate")
    except OSError:
        pass


def xlang_entry(A, B, C, M, N, K):
    C.copy_((A.float() @ B.float().t()).to(C.dtype))
