"""Trusted side of the GPU observer: build the CUPTI injection library, hand it to the runner, read its records.

The runner (the untrusted process that loads and launches the candidate) gets, through its environment,
``CUDA_INJECTION64_PATH`` = the library built from ``observer/xlang_observer.c``; the CUDA driver loads it at
``cuInit`` and from then on it records every kernel, memcpy and memset of every stream, thread and context of the
runner, with the SHA-256 of the module each kernel's code came from. The candidate's Python cannot patch it.

Protocol (see the C file's header for the authoritative description):

* two pipes: records (runner -> judge, fd ``XLANG_OBSERVER_FD`` in the runner) and commands (judge -> runner,
  fd ``XLANG_OBSERVER_CTL_FD``), both passed with ``pass_fds``;
* the judge first sends ``b"K" + key`` (16 random bytes); every record line is ``"<seq> <body> <mac>"`` where
  ``mac`` is the first 16 hex digits of HMAC-SHA256(key, "<seq> <body>") and ``seq`` counts lines from 0, so a
  line written into the pipe by anything but the library (the candidate can reach the fd) is detected;
* ``b"F"``: the library synchronises every CUDA context it saw, force-flushes CUPTI, writes every record, then
  ``E <flush_no> ...``; ``b"Q"``: the same, then its control thread exits.

Bodies::

    K start end dev ctx stream corr gx gy gz bx by bz dyn_smem graph_id dev_launched module name
    C start end dev ctx stream corr bytes copy_kind
    S start end dev ctx stream corr bytes
    M module size ctx module_id
    W what code          (an optional feature failed; informational)
    X what code          (error: the stage must not be trusted)
    E flush_no cupti_now_ns monotonic_now_ns launches kernels

``module`` is a lowercase SHA-256 hex digest of the module's cubin as loaded, or ``-`` when unknown (graph kernels,
launches through a cudart the library cannot query, modules loaded where the library could not bind their handle).
Timestamps are CUPTI nanoseconds. Stdlib only.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from xlang import toolchain
from xlang.profiler.observer_records import (MAX_LINE_BYTES, EndRecord, ModuleRecord, ObserverError, Record, RecordError,
                                             errors, parse_line, unframe)

SOURCE = Path(__file__).with_name("observer") / "xlang_observer.c"
KEY_BYTES = 16
MAX_RECORDS = 2_000_000  # per Observer; more is an error, not a silent truncation

ENV_INJECTION = "CUDA_INJECTION64_PATH"
ENV_RECORD_FD = "XLANG_OBSERVER_FD"
ENV_CONTROL_FD = "XLANG_OBSERVER_CTL_FD"


# ---------------------------------------------------------------------------------------------------------------
# Building the library
# ---------------------------------------------------------------------------------------------------------------
def _cuda_roots() -> list[Path]:
    roots: list[Path] = []
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            roots.append(Path(os.environ[var]))
    try:
        inc = toolchain.cuda_include_dir()
        if inc is not None:
            roots.append(inc.parent)
    except Exception:  # noqa: BLE001 - a broken toolchain lookup only removes one candidate
        pass
    roots += [Path("/usr/local/cuda"), Path("/usr/local/cuda-13.0")]
    out: list[Path] = []
    for r in roots:
        if r not in out:
            out.append(r)
    return out


def _find_lib(dirs: list[Path]) -> Path | None:
    for d in dirs:
        for name in ("libcupti.so", "libcupti.so.13", "libcupti.so.12"):
            if (d / name).is_file():
                return d / name
    return None


def find_cupti() -> tuple[Path, Path]:
    """(include dir holding cupti.h and cuda.h, libcupti shared library); ObserverError naming where it looked."""
    looked: list[str] = []
    for root in _cuda_roots():
        incs = [root / "include", root / "extras" / "CUPTI" / "include", root / "targets" / "x86_64-linux" / "include"]
        inc = next((d for d in incs if (d / "cupti.h").is_file()), None)
        cuda_h = next((d for d in incs if (d / "cuda.h").is_file()), None)
        lib = _find_lib([root / "extras" / "CUPTI" / "lib64", root / "lib64", root / "lib",
                         root / "targets" / "x86_64-linux" / "lib"])
        looked.append(str(root))
        if inc and cuda_h and lib:  # cuda.h may sit beside it (build_library adds <root>/include then)
            return inc, lib
    # A Python package that carries CUPTI (a JIT compiler's wheel: <base>/include with cupti.h and cuda.h,
    # <base>/lib/cupti/libcupti.so).
    for header in toolchain.packaged_files("include/cupti.h"):
        inc, base = header.parent, header.parent.parent
        looked.append(str(base))
        lib = _find_lib([base / "lib" / "cupti"])
        if (inc / "cuda.h").is_file() and lib:
            return inc, lib
    raise ObserverError("CUPTI headers and library not found (need cupti.h, cuda.h and libcupti.so); looked under "
                        + ", ".join(looked) + "; set CUDA_HOME to a CUDA 13 toolkit")


def build_library(cache_dir: Path) -> Path:
    """Compile observer/xlang_observer.c into cache_dir (cached by source, flags and CUPTI location)."""
    inc, lib = find_cupti()
    includes = [inc]
    toolkit_inc = inc.parent.parent.parent / "include"  # <root>/extras/CUPTI/include -> <root>/include
    if not (inc / "cuda.h").is_file() and (toolkit_inc / "cuda.h").is_file():
        includes.append(toolkit_inc)
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not cc:
        raise ObserverError("no C compiler (cc/gcc) to build the observer library")
    flags = ["-O2", "-fPIC", "-shared", "-pthread", "-fvisibility=hidden", "-Wall", "-Wextra"]
    source = SOURCE.read_bytes()
    key = hashlib.sha256(b"\0".join([source, " ".join(flags).encode(), str(includes).encode(),
                                     str(lib.resolve()).encode(), cc.encode()])).hexdigest()[:16]
    cache_dir = Path(cache_dir)
    cache_dir.mkdir(parents=True, exist_ok=True)
    out = cache_dir / f"libxlang_observer-{key}.so"
    if out.is_file():
        return out
    fd, tmp = tempfile.mkstemp(prefix=".observer-", suffix=".so", dir=cache_dir)
    os.close(fd)
    cmd = [cc, *flags, *[f"-I{d}" for d in includes], str(SOURCE), str(lib),
           f"-Wl,-rpath,{lib.resolve().parent}", "-ldl", "-o", tmp]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        if proc.returncode != 0:
            raise ObserverError(f"building the observer library failed ({' '.join(cmd)}):\n{proc.stderr[-4000:]}")
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return out


# ---------------------------------------------------------------------------------------------------------------
# The judge's end of the pipes
# ---------------------------------------------------------------------------------------------------------------
class Observer:
    """Pipes to one runner process. Use::

        obs = Observer(lib)
        env, fds = obs.child_args()
        proc = subprocess.Popen(cmd, env={**base_env, **env}, pass_fds=fds)
        obs.start()                 # closes the child's ends here, sends the key, starts draining
        ...                         # the runner launches the candidate
        records = obs.flush(10.0)   # everything the runner did on the GPU since the previous flush
        obs.close()
    """

    def __init__(self, library: Path, *, max_records: int = MAX_RECORDS, max_line: int = MAX_LINE_BYTES):
        self.library = Path(library)
        self.max_records = max_records
        self.max_line = max_line
        self._key = os.urandom(KEY_BYTES)
        self._rec_r, self._rec_w = os.pipe()
        self._ctl_r, self._ctl_w = os.pipe()
        self._cond = threading.Condition()
        self._pending: list[Record] = []
        self._batches: dict[int, list[Record]] = {}
        self._ends: dict[int, EndRecord] = {}
        self._problem: str | None = None
        self._eof = False
        self._seq = 0
        self._count = 0
        self._next_flush = 0
        self._thread: threading.Thread | None = None
        self._started = False
        self.modules: dict[str, ModuleRecord] = {}
        self.last_end: EndRecord | None = None

    def child_args(self) -> tuple[dict[str, str], tuple[int, int]]:
        """(environment additions, pass_fds) for the runner."""
        env = {ENV_INJECTION: str(self.library), ENV_RECORD_FD: str(self._rec_w), ENV_CONTROL_FD: str(self._ctl_r)}
        return env, (self._rec_w, self._ctl_r)

    def start(self) -> None:
        """Call once the runner is spawned: close its pipe ends here, send the key, start reading."""
        if self._started:
            return
        self._started = True
        for fd in (self._rec_w, self._ctl_r):
            os.close(fd)
        self._send(b"K" + self._key)
        self._thread = threading.Thread(target=self._drain, name="xlang-observer-drain", daemon=True)
        self._thread.start()

    def _send(self, data: bytes) -> None:
        try:
            os.write(self._ctl_w, data)
        except OSError as exc:
            raise ObserverError(f"observer command pipe closed ({exc})") from exc

    def _fail(self, why: str) -> None:
        with self._cond:
            if self._problem is None:
                self._problem = why
            self._cond.notify_all()

    def _handle(self, line: bytes) -> None:
        body = unframe(self._key, line, self._seq)
        self._seq += 1
        rec = parse_line(body)
        self._count += 1
        if self._count > self.max_records:
            raise RecordError(f"more than {self.max_records} records")
        with self._cond:
            if isinstance(rec, EndRecord):
                if rec.flush_no in self._ends or rec.flush_no >= self._next_flush:
                    raise RecordError(f"unexpected end marker {rec.flush_no}")
                self._batches[rec.flush_no] = self._pending
                self._ends[rec.flush_no] = rec
                self._pending = []
                self._cond.notify_all()
            else:
                if isinstance(rec, ModuleRecord):
                    self.modules.setdefault(rec.module, rec)
                self._pending.append(rec)

    def _drain(self) -> None:
        buf = b""
        broken = False
        try:
            while True:
                chunk = os.read(self._rec_r, 1 << 16)
                if not chunk:
                    break
                if broken:
                    continue  # keep the runner from blocking on a full pipe; nothing more is believed
                buf += chunk
                while True:
                    nl = buf.find(b"\n")
                    if nl < 0:
                        if len(buf) > self.max_line:
                            raise RecordError(f"line longer than {self.max_line} bytes")
                        break
                    line, buf = buf[:nl], buf[nl + 1:]
                    self._handle(line)
        except RecordError as exc:
            broken = True
            self._fail(f"observer record stream rejected: {exc}")
            try:  # drain to EOF without parsing
                while os.read(self._rec_r, 1 << 16):
                    pass
            except OSError:
                pass
        except OSError as exc:
            self._fail(f"observer record pipe: {exc}")
        finally:
            with self._cond:
                self._eof = True
                self._cond.notify_all()

    def flush(self, timeout_s: float) -> list[Record]:
        """Everything recorded since the previous flush (module loads included), after the runner's GPU work is
        finished; ObserverError on a timeout, an X record, or a stream that cannot be trusted."""
        if not self._started:
            raise ObserverError("observer not started")
        with self._cond:
            target = self._next_flush
            self._next_flush += 1
        self._send(b"F")
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while target not in self._ends:
                if self._problem:
                    raise ObserverError(self._problem)
                if self._eof:
                    raise ObserverError("observer record pipe closed before the flush finished (runner gone, or "
                                        "CUDA never initialised in it)")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise ObserverError(f"observer flush {target} timed out after {timeout_s:.1f} s")
                self._cond.wait(left)
            if self._problem:
                raise ObserverError(self._problem)
            batch = self._batches.pop(target)
            self.last_end = self._ends[target]
        bad = errors(batch)
        if bad:
            raise ObserverError("observer reported errors: " + ", ".join(f"{e.what} ({e.code})" for e in bad[:10]),
                                records=batch)
        return batch

    def close(self, timeout_s: float = 2.0) -> None:
        """Ask the library's thread to stop (best effort) and release the pipes."""
        if self._started:
            with self._cond:
                self._next_flush += 1  # 'Q' ends with one more end marker
            try:
                os.write(self._ctl_w, b"Q")
            except OSError:
                pass
        for fd in (self._ctl_w,) if self._started else (self._ctl_w, self._rec_w, self._ctl_r):
            try:
                os.close(fd)
            except OSError:
                pass
        if self._thread is not None:
            self._thread.join(timeout_s)
            if self._thread.is_alive():  # a runner child still holds the write end: stop reading anyway
                return
        try:
            os.close(self._rec_r)
        except OSError:
            pass

    def __enter__(self) -> Observer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
