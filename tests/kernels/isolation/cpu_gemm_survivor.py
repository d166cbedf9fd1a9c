# Hostile: leaves a process behind (its own session, double fork) that would outlive the evaluation, then
# computes the right answer.
import os
import subprocess
import sys

MARKER = "xlang-survivor-marker-7f3a"


def xlang_entry(A, B, C, M, N, K):
    if not os.environ.get("SURVIVOR_STARTED"):
        os.environ["SURVIVOR_STARTED"] = "1"
        subprocess.Popen([sys.executable, "-c", f"import time; time.sleep(600)  # {MARKER}"],
                         start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    C.copy_((A.float() @ B.float().t()).to(C.dtype))
