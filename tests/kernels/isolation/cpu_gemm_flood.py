# Hostile: floods stdout/stderr and leaves a child holding both pipes open, then computes the right answer.
import os
import subprocess
import sys


def xlang_entry(A, B, C, M, N, K):
    subprocess.Popen([sys.executable, "-c", "import time, sys; sys.stdout.write('x' * 100); time.sleep(600)"],
                     start_new_session=True)  # inherits our stdout and stderr
    chunk = "y" * (1 << 20)
    for _ in range(40):  # 40 MB on each stream
        sys.stdout.write(chunk)
        sys.stderr.write(chunk)
    sys.stdout.flush()
    C.copy_((A.float() @ B.float().t()).to(C.dtype))
