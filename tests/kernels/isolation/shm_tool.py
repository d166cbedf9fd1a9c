"""A stand-in for compute-sanitizer / Nsight Compute in tests/test_containment.py: like them it starts its
target as a child and reaches it through a file of its own in /dev/shm (the target must see it: both in one
jail), and writes a log. `--host-pidns NS`: like an injection that does not survive a PID namespace, it fails
with compute-sanitizer's signature unless its PID namespace is NS.

    shm_tool.py LOG [--host-pidns NS] TARGET..."""
import os
import subprocess
import sys

log, args = sys.argv[1], sys.argv[2:]
if args[:1] == ["--host-pidns"]:
    wanted, args = args[1], args[2:]
    if os.readlink("/proc/self/ns/pid") != wanted:
        print("========= Error: Target application terminated before first instrumented API call", file=sys.stderr)
        sys.exit(1)
channel = f"/dev/shm/xlang-fake-tool-{os.getpid()}"
with open(channel, "w") as f:
    f.write("tool")
probe = "import os, sys; os.stat(sys.argv[1]); os.execvp(sys.argv[2], sys.argv[2:])"
code = subprocess.call([sys.executable, "-c", probe, channel, *args], close_fds=False)  # the runner's socket
os.unlink(channel)
with open(log, "w") as f:
    f.write("========= ERROR SUMMARY: 0 errors\n" if code == 0 else f"========= target exit {code}\n")
sys.exit(code)
