# A stand-in tool for a CPU test: it starts its target (the runner), then stops it (SIGSTOP, as a target left
# hanging by a tool that died) and exits itself, as a candidate that killed compute-sanitizer leaves things.
# argv: PIDFILE STOP_AFTER_S TARGET...
import os
import signal
import subprocess
import sys
import time

target = subprocess.Popen(sys.argv[3:], close_fds=False)
with open(sys.argv[1], "w") as f:
    f.write(str(target.pid))
time.sleep(float(sys.argv[2]))
os.kill(target.pid, signal.SIGSTOP)
