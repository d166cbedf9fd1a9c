"""Running a child process: its own process group, a hard wall-clock limit, the tail of its output kept, killed
with what it left in its group; candidate code goes through a Jail (xlang/sandbox.py) with the allow-listed
environment (sandbox.child_env)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from xlang.sandbox import Jail, child_env, kill_uid

CAPTURE_LIMIT = 256 << 10  # bytes of a child's stdout / stderr kept (the tail); the rest is drained and dropped

@dataclass
class ChildResult:
    returncode: int | None  # None when killed for time
    stdout: str
    stderr: str
    timed_out: bool
    seconds: float
    cancelled: bool = False  # killed because the caller no longer needed it

    @property
    def crashed_by_signal(self) -> str | None:
        if self.returncode is not None and self.returncode < 0:
            try:
                return signal.Signals(-self.returncode).name
            except ValueError:
                return f"signal {-self.returncode}"
        return None


class OutputTail:
    """Drain a pipe to its end, keeping only the last `limit` bytes (a child can print without bound)."""

    def __init__(self, stream, limit: int = CAPTURE_LIMIT):
        self.stream, self.limit, self.data = stream, limit, bytearray()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        try:
            while chunk := self.stream.read1(65536) if hasattr(self.stream, "read1") else self.stream.read(65536):
                self.data += chunk
                if len(self.data) > 2 * self.limit:
                    del self.data[: len(self.data) - self.limit]
        except (OSError, ValueError):
            pass

    def text(self, wait: float = 2.0) -> str:
        self.thread.join(wait)  # a grandchild holding the pipe open must not hang us
        return bytes(self.data[-self.limit:]).decode("utf-8", "replace")


def die_with_parent(parent_pid: int | None) -> None:
    """Make this process die (SIGKILL) when its parent does; exit now if the parent is already gone. A judge
    runs in a session of its own (so that its group can be killed whole), which also means that a killed
    `xlang eval`, compare or test run would leave it holding the GPU with no one to report to; the next
    evaluation on that GPU would then share it. Linux only (prctl PR_SET_PDEATHSIG); elsewhere nothing."""
    if parent_pid is None or not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent_pid:  # the parent died before the prctl: no signal will come
        os._exit(1)


def kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def run_child(cmd: list[str], timeout: float, cwd: Path | None = None, env: dict | None = None,
              cancel: threading.Event | None = None, deadline: Callable[[], float] | None = None,
              pass_fds: tuple = (), raw_env: dict | None = None) -> ChildResult:
    """Run cmd; on timeout kill its whole process group (a hung kernel's host thread included).

    env: extra variables on top of the allow-list (child_env); raw_env: the exact environment instead.
    cancel: kill the child as soon as this event is set (its result is no longer wanted).
    deadline: returns the current kill time on the time.monotonic() clock, polled while the child runs, so a
    caller can extend it (the profiler's check while it waits for the GPU); it replaces timeout.
    """
    start = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=cwd, env=raw_env if raw_env is not None else child_env(env),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                            stdin=subprocess.DEVNULL, pass_fds=pass_fds)
    out, err = OutputTail(proc.stdout), OutputTail(proc.stderr)
    kill_at = deadline or (lambda: start + timeout)
    timed_out = cancelled = False
    while proc.poll() is None:
        if cancel is not None and cancel.is_set():
            cancelled = True
        elif time.monotonic() >= kill_at():
            timed_out = True
        if timed_out or cancelled:
            kill_group(proc)
            proc.wait()
            break
        time.sleep(0.02)
    kill_group(proc)  # whatever it left behind in its group goes with it
    return ChildResult(None if (timed_out or cancelled) else proc.returncode, out.text(), err.text(), timed_out,
                       time.monotonic() - start, cancelled=cancelled)


def python_child(module: str, args: list[str], timeout: float, cwd: Path | None = None,
                 env: dict | None = None, jail: Jail | None = None) -> ChildResult:
    """Run `main(args)` of a module under xlang (e.g. 'backends.<lang>.static_build') in a child python,
    in `jail` when given (candidate code), with `env` on top of the allow-list."""
    cmd = [sys.executable, "-m", "xlang.child", module, *args]
    if jail is not None:
        jail.prepare()
        cmd = jail.command(cmd)
        try:
            return run_child(cmd, timeout, cwd, raw_env=child_env(env, jail=jail))
        finally:
            kill_uid(jail.uid)  # what its uid left (a jail without a PID namespace of its own)
    return run_child(cmd, timeout, cwd, env)
