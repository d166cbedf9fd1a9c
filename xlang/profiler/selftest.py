"""Children that misbehave on purpose, for the tests of crash and hang containment (no GPU needed).

`python -m xlang.profiler.selftest MODE [PIDFILE]`:
  hang            sleep forever
  hang_with_child start a grandchild that sleeps forever (its pid written to PIDFILE), then sleep forever
  segfault        dereference a null pointer
  abort           abort()
  exit N          exit with status N, writing nothing
  gate GATE WAITING BEFORE AFTER   sleep BEFORE s, wait at the profiler's timing gate, print what it said,
                  sleep AFTER s (the check worker's wait, without a GPU)
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import time


def main(argv: list[str]) -> int:
    mode = argv[0]
    if mode == "hang":
        while True:
            time.sleep(3600)
    if mode == "hang_with_child":
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
        with open(argv[1], "w") as f:
            f.write(str(child.pid))
        while True:
            time.sleep(3600)
    if mode == "segfault":
        ctypes.string_at(0)
    if mode == "abort":
        os.abort()
    if mode == "exit":
        return int(argv[1])
    if mode == "gate":
        from xlang.profiler.judge.plan import TimingPlan
        from xlang.profiler.judge.timing import wait_at_gate

        time.sleep(float(argv[3]))
        go = wait_at_gate(TimingPlan(gate=argv[1], gate_waiting=argv[2]), lambda text: None)
        print("go" if go else "skip", flush=True)
        time.sleep(float(argv[4]))
        return 0
    raise SystemExit(f"unknown mode {mode}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
