"""Run untrusted work (a model's candidate: its import, its host code, its kernels) in a child process:
its own process group, a hard wall-clock limit, and an environment without our secrets."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from xlang import resources

_SECRET = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH|COOKIE", re.I)


def scrubbed_env(extra: dict | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if not _SECRET.search(k)}
    # The child imports xlang from the same place we did (a checkout, an editable or a wheel install).
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(resources.PACKAGE_DIR.parent), env.get("PYTHONPATH")]))
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    return env


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
            return signal.Signals(-self.returncode).name
        return None


def run_child(cmd: list[str], timeout: float, cwd: Path | None = None, env: dict | None = None,
              cancel: threading.Event | None = None, deadline: Callable[[], float] | None = None) -> ChildResult:
    """Run cmd; on timeout kill its whole process group (a hung kernel's host thread included).

    cancel: kill the child as soon as this event is set (its result is no longer wanted).
    deadline: returns the current kill time on the time.monotonic() clock, polled while the child runs, so a
    caller can extend it (the profiler's check worker while it waits for the GPU); it replaces timeout.
    """
    start = time.monotonic()
    proc = subprocess.Popen(
        cmd, cwd=cwd, env=scrubbed_env(env), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True, stdin=subprocess.DEVNULL,
    )
    kill_at = deadline or (lambda: start + timeout)
    poll = 0.05 if (cancel is not None or deadline is not None) else None
    while True:
        wait = max(0.0, kill_at() - time.monotonic())
        try:
            out, err = proc.communicate(timeout=min(wait, poll) if poll else wait)
            return ChildResult(proc.returncode, out, err, False, time.monotonic() - start)
        except subprocess.TimeoutExpired:
            cancelled = cancel is not None and cancel.is_set()
            if not cancelled and time.monotonic() < kill_at():
                continue
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        out, err = proc.communicate()
        return ChildResult(None, out, err, not cancelled, time.monotonic() - start, cancelled=cancelled)


def python_child(module: str, args: list[str], timeout: float, cwd: Path | None = None,
                 env: dict | None = None) -> ChildResult:
    """Run `main(args)` of a module under xlang (e.g. 'backends.triton.static_build') in a child python."""
    return run_child([sys.executable, "-m", "xlang.child", module, *args], timeout, cwd, env)
