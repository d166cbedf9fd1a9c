# Hostile (CPU stand-in for a candidate with a helper process): during its call it starts a second process (a
# clean environment, its own session), which on a GPU would take a CUDA context of its own and do part of the
# work through CUDA IPC. Here it only sleeps; the CPU tests tell the judge's NVML stand-in that it holds a
# context (its command line carries MARKER). With $XLANG_TEST_HELPER_WAIT set, the call waits for the helper
# (as one that hands work to it would), so only the judge can end the stage early.
import os
import subprocess
import sys
import time

MARKER = "xlang-gpu-helper-5c1e"


def xlang_entry(A, B, C, M, N, K):
    helper = subprocess.Popen([sys.executable, "-c", f"import time; time.sleep(120)  # {MARKER}"], env={},
                              start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.6)  # several of the judge's polls
    if os.environ.get("XLANG_TEST_HELPER_WAIT"):
        helper.wait()
    C.copy_((A.float() @ B.float().t()).to(C.dtype))
