# Hostile: tries everything an in-process attack did, from its own process; computes nothing useful.
import os
import sys
from pathlib import Path

FOUND = []


def _try(what, fn):
    try:
        fn()
        FOUND.append(what)
    except Exception:
        pass


def xlang_entry(A, B, C, M, N, K):
    ppid = os.getppid()
    _try("parent environ", lambda: print(open(f"/proc/{ppid}/environ").read()))
    for pid in os.listdir("/proc"):
        if pid.isdigit() and int(pid) != os.getpid():
            _try(f"environ of {pid}", lambda pid=pid: print(open(f"/proc/{pid}/environ").read()))
    import xlang

    root = Path(xlang.__file__).parent
    _try("xlang file", lambda: (root / "verdict.py").write_text("# owned\n"))
    _try("pycache", lambda: (root / "__pycache__").mkdir(exist_ok=True) or (root / "__pycache__" / "x.pyc").write_bytes(b"x"))
    _try("store", lambda: (root.parent / "xlang-runs-owned").mkdir(exist_ok=True))
    _try("kill parent", lambda: os.kill(ppid, 9))
    # (The judge's private copies of the inputs, which the check compares against, live in the judge's process:
    # here the only tensors are the shared buffers themselves, so a gc walk finds nothing of the judge's.)
    C.fill_(1.0)
    print("FOUND", FOUND, dict(os.environ), file=sys.stderr)
    raise RuntimeError(f"found: {FOUND}; env: {dict(os.environ)}")
