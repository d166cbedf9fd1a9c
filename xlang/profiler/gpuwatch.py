"""Who holds the GPU while the candidate runs: a poller in the judge, in every GPU stage (check with its timing,
memcheck, ncu), from the moment the candidate's code is loaded until its process tree is gone.

Every POLL_S it asks NVML which processes hold a context on the stage's GPU (compute_processes) and reads the
candidate uid's process tree (/proc, sandbox.uid_processes). The rule, per process NVML lists:

  allowed    the judge itself; the candidate's runner (what ran below the jail or tool the judge started, or as
             the candidate's uid, once the runner's Python was up and before the candidate's code was loaded:
             the runner, and under a tool the tool); under compute-sanitizer / Nsight
             Compute, a program from the tool's own folders (not a Python) and, because Nsight Compute's
             application replay starts the target again, ONE other process of the candidate's uid that is a
             child of the tool, when no second one holds a context at the same time; the other stages of this
             evaluation (their judges, children of the same parent, and their uids: each stage watches its own);
             the environment's tenants, there (same PID and start time) before the candidate's code loaded
  forbidden  any other process of the candidate's uid (or below the jail / tool) holding a context: a second
             GPU process of its own (a helper doing part of the work through CUDA IPC, with no observer in it)
             -> forbidden_call, and the stage's correctness is discarded
  stranger   a process of another uid, not ours and not from before: nothing the candidate could start itself
             (it has no privileges), yet the GPU was not ours alone -> the candidate is not judged (harness_error)

Every poll also drains NVML's Xid events for the GPU: an MMU fault (Xid 31) while the candidate's code runs is
memory_error even when its process swallowed the CUDA error (a context reset after the fault hides it from the
observer's synchronisation); other Xids are recorded. Xid events are the device's, not a process's: they decide
only where NVML's PIDs are ours and nothing but this evaluation held the GPU.

A process of the candidate's uid with no GPU context (a compiler the JIT runs, a helper on the CPU) is allowed:
it can do no GPU work. It is recorded (`helpers`) and killed with the stage. Where NVML's PIDs are not this PID
namespace's (the judge is not in its own list: a container), nothing can be attributed and nothing is decided.
A helper that takes a context and lets it go between two polls is missed.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

POLL_S = 0.075
# A judge's result of status harness_error with result["harness"] = GPU_NOT_ALONE: a process that is not the
# candidate's held the GPU (a stranger here, or a tenant from before the candidate until after its timing): the
# verdict harness_error, retried once when the GPU is quiet (evaluate). Any other harness_error is the judge's own
# failure (stages/launch.py stage_failure raises it).
GPU_NOT_ALONE = "gpu_not_alone"

_nvml: dict = {}
_nvml_lock = threading.Lock()


def compute_processes(index: int) -> list[int] | None:
    """PIDs holding a compute context on the GPU of NVML index `index`; None without NVML. NVML stays initialised
    for the life of the judge (one init per process, not per poll)."""
    try:
        import pynvml

        with _nvml_lock:
            if index not in _nvml:
                pynvml.nvmlInit()
                _nvml[index] = pynvml.nvmlDeviceGetHandleByIndex(index)
        return sorted({p.pid for p in pynvml.nvmlDeviceGetComputeRunningProcesses(_nvml[index])})
    except Exception:  # noqa: BLE001 - no NVML here: recorded as not checked
        return None


_xid_sets: dict = {}
MEMORY_XIDS = {31: "an MMU fault: an access to an unmapped address"}  # Xid 13 (several kinds of fault) is recorded


def xid_events(index: int) -> list[int] | None:
    """The Xid errors NVML reported for the GPU since the previous call (device-wide: the driver's own word, which no
    code in the candidate's process can swallow), None where NVML cannot deliver them here."""
    try:
        import pynvml

        with _nvml_lock:
            if index not in _xid_sets:
                _xid_sets[index] = None  # a failure is not retried every poll
                if index not in _nvml:
                    pynvml.nvmlInit()
                    _nvml[index] = pynvml.nvmlDeviceGetHandleByIndex(index)
                events = pynvml.nvmlEventSetCreate()
                pynvml.nvmlDeviceRegisterEvents(_nvml[index], pynvml.nvmlEventTypeXidCriticalError, events)
                _xid_sets[index] = events
        if _xid_sets[index] is None:
            return None
        found: list[int] = []
        while len(found) < 100:
            try:
                data = pynvml.nvmlEventSetWait_v2(_xid_sets[index], 0)
            except pynvml.NVMLError as e:
                if getattr(e, "value", None) == pynvml.NVML_ERROR_TIMEOUT:
                    break  # none pending
                raise
            if data.eventType & pynvml.nvmlEventTypeXidCriticalError:
                found.append(int(data.eventData))
        return found
    except Exception:  # noqa: BLE001 - no NVML events here: recorded as not checked
        return None


def _status(pid: int) -> dict:
    try:
        fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                      if ":" in line)
        return {"uid": int(fields["Uid"].split()[0]), "ppid": int(fields["PPid"].split()[0]),
                "name": fields.get("Name", "").strip()[:32]}
    except (OSError, KeyError, ValueError, IndexError):
        return {}


def _below(pid: int, root: int | None) -> bool:
    """Whether pid descends from root (through /proc's parent links; a double fork leaves the tree)."""
    hops = 0
    while root and pid > 1 and hops < 64:
        pid = _status(pid).get("ppid", 0)
        if pid == root:
            return True
        hops += 1
    return False


def _descendants(root: int | None) -> list[int]:
    """Every process below root now (one pass over /proc)."""
    if not root:
        return []
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            children.setdefault(_status(int(entry)).get("ppid", 0), []).append(int(entry))
    found, todo = [], [root]
    while todo and len(found) < 10_000:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def process_started(pid: int) -> str | None:
    """The process's start time (/proc/PID/stat field 22): with the PID it names one process, not a later one."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


def _runs_the_runner(pid: int) -> bool:
    """Whether a Python's command line is `-m xlang.profiler.runner` itself (judge/process.py's runner_cmd), not a
    tool's whose own arguments name it (read before the hello: nothing of the candidate's has run)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[1:3] == [b"-m", b"xlang.profiler.runner"]
    except OSError:
        return False


def _exe(pid: int) -> str:
    try:
        return os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return ""


class GpuWatch:
    """One stage's poller (see the module's doc). arm() when the candidate's code is about to load, stop() once its
    tree is gone; `forbidden` / `stranger` hold the first sighting of each kind (pid, name, uid, when)."""

    def __init__(self, index: int, uid: int, *, before: dict | None = None, parent_pid: int | None = None,
                 sibling_uids=(), tool_pid: int | None = None, tool_dirs=(), poll_s: float = POLL_S):
        self.index, self.uid, self.me = index, uid, os.getpid()
        self.before = before  # {pid: start time} holding the GPU before the candidate's code (None: taken at arm)
        self.parent_pid, self.sibling_uids = parent_pid, set(sibling_uids)
        self.tool_pid, self.tool_dirs = tool_pid, tuple(tool_dirs)
        self.root_pid: int | None = None  # the process the judge started for the candidate (its jail, or the tool)
        self.poll_s = poll_s
        self.runner: set[int] = set()
        self.forbidden: dict | None = None
        self.stranger: dict | None = None
        self.helpers: dict[int, dict] = {}
        self.xids: list[dict] = []  # Xid errors NVML reported while the candidate's code ran
        self.fault: dict | None = None  # the first of them that is a memory fault (MEMORY_XIDS)
        self.xid_watch: bool | None = None
        self.polls, self.nvml, self.pids_ours = 0, None, None
        self._t0 = time.monotonic()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # ---- life
    def arm(self, root_pid: int | None = None, wait_s: float = 60.0) -> None:
        """The candidate's uid's processes now (before its code runs), and what runs below root_pid now, are the
        runner's; the GPU's holders now the environment's (and the other stages'); start polling."""
        from xlang.sandbox import uid_processes

        self.root_pid = root_pid
        give_up, python_since = time.monotonic() + wait_s, None
        while True:  # the runner's Python may still be starting (bubblewrap, setpriv, a tool's start-up)
            self.runner = {pid for pid, _ in uid_processes(self.uid)} | set(_descendants(root_pid))
            # The runner itself, by its command line (no candidate code has run yet, so it is ours): not any
            # Python, since a tool may be one, and the runner then missed would be killed at close as a stranger.
            # (A Python seen for 5 s that never shows the runner's command line: taken, as before.)
            now = time.monotonic()
            pythons = [p for p in self.runner if os.path.basename(_exe(p)).startswith("python")]
            python_since = python_since or (now if pythons else None)
            if any(_runs_the_runner(p) for p in pythons) or now > give_up or (root_pid and not _alive(root_pid)) \
                    or (python_since is not None and now - python_since > 5.0):
                break
            time.sleep(0.05)
        if self.before is None:
            self.before = {p: process_started(p) for p in compute_processes(self.index) or []}
        self.xid_watch = xid_events(self.index) is not None  # and what was pending before the candidate ran is dropped
        self._t0 = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="xlang-gpuwatch", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._thread is not None and not self._stop.is_set():
            self._stop.set()
            self._thread.join(5.0)
            self.poll()  # one last look: a helper still holding the GPU at the end

    def _run(self) -> None:
        while not self._stop.wait(self.poll_s):
            self.poll()

    # ---- one look
    def poll(self) -> None:
        from xlang.sandbox import uid_processes

        self.polls += 1
        when = round(time.monotonic() - self._t0, 3)
        tree = dict(uid_processes(self.uid))
        for pid in tree:
            if pid not in self.runner and pid not in self.helpers:
                self.helpers[pid] = {"pid": pid, "name": _status(pid).get("name", "?"), "first_seen_s": when}
        holders = compute_processes(self.index)
        self.nvml = holders is not None
        if holders is None:
            return
        self.pids_ours = self.me in holders
        if not self.pids_ours:
            return
        for xid in xid_events(self.index) or []:
            self.xids.append({"xid": xid, "at_s": when})
            if xid in MEMORY_XIDS and self.fault is None:
                self.fault = self.xids[-1]
        own = []  # the candidate uid's holders that are neither the runner nor the tool's programs
        for pid in holders:
            if pid == self.me or pid in self.runner or (pid in (self.before or {})
                                                         and self.before[pid] == process_started(pid)):
                continue
            st = _status(pid)
            seen = {"pid": pid, "name": st.get("name", "not visible here"), "uid": st.get("uid"), "at_s": when,
                    "utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
            # The candidate's side: its uid, or below the process we started for it (where the uid could not be
            # dropped, e.g. a tool stage at isolation 'process')
            if st.get("uid") == self.uid or _below(pid, self.root_pid):
                if not self._tools_own(pid):
                    own.append((seen, st))
            elif st.get("uid") in self.sibling_uids or (self.parent_pid and st.get("ppid") == self.parent_pid):
                continue  # another stage of this evaluation (its judge, its candidate): it watches its own
            elif self.stranger is None:
                self.stranger = seen
        if self.tool_pid is not None and len(own) == 1 and own[0][1].get("ppid") == self.tool_pid \
                and not any(p in holders for p in self.runner if p != self.tool_pid):
            own = []  # Nsight Compute's application replay: the tool started the target again, alone on the GPU
        if own and self.forbidden is None:
            self.forbidden = own[0][0]

    def _tools_own(self, pid: int) -> bool:
        """A program from the tool's own folders (never a Python: the runner and anything the candidate starts)."""
        exe = _exe(pid)
        return (pid == self.tool_pid or bool(exe) and not os.path.basename(exe).startswith("python")
                and any(exe.startswith(d + "/") for d in self.tool_dirs))

    # ---- what it found
    def finding(self):
        """(status, detail) of what the poller saw that decides the stage, or None."""
        if self.forbidden is not None:
            f = self.forbidden
            return ("forbidden_call", f"a second process of the candidate's (pid {f['pid']}, {f['name']}) held a "
                                      f"context on the GPU {f['at_s']:.2f} s after its code was loaded: GPU work in "
                                      "a process the judge does not observe (one process, the runner, may use the "
                                      "GPU); this stage's correctness is discarded")
        if self.stranger is not None:
            f = self.stranger
            return ("harness_error", f"the GPU was not the judge's alone: process {f['pid']} ({f['name']}, uid "
                                     f"{f['uid']}), not the candidate's and not there before it, took a context on "
                                     f"it {f['at_s']:.2f} s into the stage; this candidate was not judged")
        if self.fault is not None:
            f = self.fault
            return ("memory_error", f"the GPU's driver reported Xid {f['xid']} ({MEMORY_XIDS[f['xid']]}) "
                                    f"{f['at_s']:.2f} s after the candidate's code was loaded, while only its "
                                    "processes and the judges used the GPU: an access outside the buffers the "
                                    "harness passed (they lie between unmapped guard ranges), whatever its "
                                    "process reported")
        return None

    def record(self) -> dict:
        return {"checked": bool(self.nvml and self.pids_ours), "nvml": self.nvml, "nvml_pids_ours": self.pids_ours,
                "polls": self.polls, "poll_s": self.poll_s, "runner": sorted(self.runner),
                "helpers": list(self.helpers.values())[:20], "forbidden": self.forbidden, "stranger": self.stranger,
                "xid_watch": self.xid_watch, "xids": self.xids[:20]}


def wait_quiet(index: int, quiet_s: float = 3.0, limit_s: float = 120.0, poll_s: float = 0.25) -> dict:
    """Before a retry (harness_error): wait until no process holds a context on the GPU for quiet_s in a row, at
    most limit_s. The parent calls it with no judge of its own alive, so any holder is someone else's. Returns
    {"checked", "quiet", "waited_s", "holders"} (checked False without NVML: nothing to wait for)."""
    t0 = time.monotonic()
    calm_since = None
    holders: list[int] = []
    while True:
        pids = compute_processes(index)
        now = time.monotonic()
        if pids is None:
            return {"checked": False, "quiet": None, "waited_s": round(now - t0, 2), "holders": []}
        holders = [p for p in pids if p != os.getpid()]
        calm_since = (calm_since or now) if not holders else None
        if calm_since is not None and now - calm_since >= quiet_s:
            return {"checked": True, "quiet": True, "waited_s": round(now - t0, 2), "holders": []}
        if now - t0 >= limit_s:
            return {"checked": True, "quiet": False, "waited_s": round(now - t0, 2), "holders": holders}
        time.sleep(poll_s)
