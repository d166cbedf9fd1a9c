"""The judge: one trusted process per stage, `python -m xlang.profiler.judge SPEC.json`.

It never imports the candidate. It allocates the task's inputs and outputs (xlang.profiler.buffers), starts
the candidate's process in its jail (xlang.sandbox.Jail; xlang.profiler.runner), shares exactly those buffers
with it, tells it when to call its entry point, and decides from what it reads itself:

  check     correctness on the shapes the parent drew for this evaluation, every trial with fresh inputs
            of a value kind the task declares (not only N(0,1)), outputs poisoned with NaN, the slack around
            every buffer poisoned and checked, inputs compared with the judge's private copy, the fp32
            reference computed here; then timing (after the gate: memcheck and Nsight Compute have left the
            GPU): every timed call gets fresh inputs (a fixed seed sequence, never repeating), the L2 is
            flushed before it, its GPU time is the span of the candidate process's kernels as the CUPTI
            observer recorded them (every stream and thread; the candidate's Python cannot switch it off),
            and a secret random subset of timed calls, the last one included, is verified afterwards. Then the
            candidate's process tree is killed and the vendor baseline is timed the same way, in a process of
            its own, with no candidate process alive (NVML lists the GPU's processes to prove it), and after it
            each of the task's peers that is installed (time_peers), the same way, one process each.
  memcheck  the runner under compute-sanitizer memcheck (its log goes to the judge's folder), one trial on
            each memcheck shape.
  ncu       the runner under Nsight Compute, one call on the timed shape; every kernel of that process.

In every stage the buffers lie between unmapped guard ranges with canaries in their slack (xlang.profiler.buffers:
an access outside faults, memory_error), a poller watches the GPU's processes while the candidate's code runs
(xlang.profiler.gpuwatch: a second GPU process of the candidate's is forbidden_call), and the tail of the
candidate process's stdout and stderr is kept (candidate_output).

The result (spec["out"], JSON in the judge's own folder, which the candidate cannot reach) carries a status:
ok | incorrect | runtime_error | memory_error | forbidden_call | timeout | harness_error.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import random
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

from xlang.profiler.gpuwatch import _started, compute_processes  # one copy, shared with the GPU watch
from xlang.task import format_shape

class CandidateError(Exception):
    """The candidate's own code failed (import, host code, or a CUDA error its kernels caused)."""


class _Progress:
    def __init__(self, path: str | None):
        from xlang.sandbox import write_new

        self.path = path
        if path:
            write_new(path, "")  # in the judge's own (fresh) folder: a name already there is not ours

    def __call__(self, text: str) -> None:
        from xlang.sandbox import append_judge_file

        if self.path:
            append_judge_file(self.path, f"{time.monotonic():.3f} {text}\n")


def seed_for(base: int, shape_index: int, trial: int) -> int:
    return base + 1000 * shape_index + trial


# ---- correctness ------------------------------------------------------------------------------------

def compare_output(name: str, got, expected, atol: float, rtol: float) -> dict:
    """Stats of one output against its fp32 reference; 'failure' set when it fails (NaN, Inf, mismatch)."""
    import torch

    g = got.float()
    e = expected.float()
    nan = torch.isnan(g)
    inf = torch.isinf(g)
    diff = (g - e).abs()
    ok_elem = diff <= atol + rtol * e.abs()  # NaN compares False
    bad = ~ok_elem
    n_bad, n_nan, n_inf = int(bad.sum()), int(nan.sum()), int(inf.sum())
    finite = ~(nan | inf)
    fdiff = torch.where(finite, diff, torch.zeros_like(diff))
    rel = fdiff / e.abs().clamp_min(max(atol, 1e-30))
    stats = {
        "output": name, "elements": g.numel(),
        "max_abs_err": float(fdiff.max()) if g.numel() else 0.0,
        "max_rel_err": float(rel.max()) if g.numel() else 0.0,
        "mismatches": n_bad, "nan": n_nan, "inf": n_inf,
    }
    if n_bad or n_nan or n_inf:
        where = nan if n_nan else inf if n_inf else bad
        flat = int(where.flatten().nonzero()[0])
        index = list(_unravel(flat, tuple(g.shape)))
        kind = "nan" if n_nan else "inf" if n_inf else "mismatch"
        stats["failure"] = {
            "kind": kind, "index": index,
            "got": float(g.flatten()[flat]), "expected": float(e.flatten()[flat]),
        }
    return stats


def _unravel(flat: int, shape: tuple[int, ...]):
    out = []
    for size in reversed(shape):
        out.append(flat % size)
        flat //= size
    return tuple(reversed(out))


def compare_inputs(before: dict, after: dict) -> dict | None:
    import torch

    for name, old in before.items():
        new = after[name]
        if not torch.equal(old, new):
            changed = (old != new) & ~(torch.isnan(old) & torch.isnan(new))
            n = int(changed.sum())
            flat = int(changed.flatten().nonzero()[0]) if n else 0
            return {"input": name, "changed": n, "elements": old.numel(),
                    "index": list(_unravel(flat, tuple(old.shape))),
                    "was": float(old.flatten()[flat].float()), "now": float(new.flatten()[flat].float())}
    return None


def describe_failure(stats: dict, shape: dict, trial: int, seed: int, atol: float, rtol: float) -> str:
    f = stats["failure"]
    where = f"{stats['output']}[{', '.join(map(str, f['index']))}]"
    ctx = f"(shape {format_shape(shape)}, trial {trial}, seed {seed})"
    if f["kind"] == "nan":
        return (f"{stats['output']}: {stats['nan']} of {stats['elements']} elements are NaN (left unwritten, or "
                f"computed as NaN); first at {where}, expected {f['expected']:.6g} {ctx}")
    if f["kind"] == "inf":
        return f"{stats['output']}: {stats['inf']} elements are Inf; first at {where}, expected {f['expected']:.6g} {ctx}"
    return (f"{stats['output']}: {stats['mismatches']} of {stats['elements']} elements outside atol={atol} "
            f"rtol={rtol}; first at {where}: got {f['got']:.6g}, expected {f['expected']:.6g}; "
            f"max abs err {stats['max_abs_err']:.4g}, max rel err {stats['max_rel_err']:.4g} {ctx}")



# ---- timing statistics

def _stats(ms: list[float]) -> dict:
    xs = sorted(ms)
    n = len(xs)

    def q(p):
        if n == 1:
            return xs[0]
        pos = p * (n - 1)
        lo = int(pos)
        hi = min(lo + 1, n - 1)
        return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)

    med = q(0.5)
    return {"median_ms": med, "q20_ms": q(0.2), "q80_ms": q(0.8), "min_ms": xs[0], "max_ms": xs[-1],
            "mean_ms": sum(xs) / n, "reps": n, "spread_pct": (q(0.8) - q(0.2)) / med * 100 if med > 0 else 0.0}


def wait_at_gate(spec_timing: dict, progress) -> bool:
    """Time only when the GPU is ours alone: the parent runs memcheck and Nsight Compute beside the
    correctness trials and opens this gate (a file holding 'go' or 'skip') once they are done.
    Without a gate (nothing runs beside us) timing starts at once."""
    gate = spec_timing.get("gate")
    if not gate:
        return True
    progress("timing: waiting for memcheck and Nsight Compute to leave the GPU")
    from xlang.sandbox import write_new

    try:
        write_new(spec_timing["gate_waiting"], "")  # the parent stops our clock while we wait
    except FileExistsError:
        pass
    give_up = time.monotonic() + float(spec_timing.get("gate_max_wait_s", 3600))  # the parent died
    while not Path(gate).is_file():
        if time.monotonic() > give_up:
            return False
        time.sleep(0.005)
    return Path(gate).read_text().strip() == "go"


def gpu_clocks(nvml_index) -> dict:
    """The GPU as NVML sees it (clocks, temperature) right after the timed repetitions: read before them, an
    idle GPU reports its idle clock."""
    from xlang.profiler.gpu import _from_nvml

    return next((g for g in _from_nvml() or () if g.get("index") == nvml_index), {})


# ---- fingerprint --------------------------------------------------------------------------------------

def fingerprint(torch) -> dict:
    from importlib import metadata

    from xlang.backend import toolchain_packages

    fp = {"python": platform.python_version(), "torch": torch.__version__, "cuda_runtime": torch.version.cuda}
    try:
        fp["cudnn"] = torch.backends.cudnn.version()
    except Exception:  # noqa: BLE001
        pass
    languages = [(dist, name.replace("-", "_")) for dist, name in toolchain_packages().items()]
    for dist, key in (*languages, ("cuda-python", "cuda_python"), ("cuda-bindings", "cuda_bindings")):
        try:
            fp[key] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    props = torch.cuda.get_device_properties(0)
    fp.update({"device_name": props.name, "device_cc": f"{props.major}.{props.minor}",
               "sms": props.multi_processor_count, "l2_bytes": getattr(props, "L2_cache_size", None),
               "device_memory_mib": props.total_memory >> 20})
    return fp




# ---- the candidate's process ----------------------------------------------------------------------------

OUTPUT_TAIL_CHARS = 6 << 10  # of the candidate process's stdout and of its stderr, kept in every stage's result


class RunnerGone(Exception):
    """The candidate's process died, closed the connection, or did not answer in time."""

    def __init__(self, detail: str, timed_out: bool = False, fault: str | None = None):
        super().__init__(detail)
        self.timed_out, self.fault = timed_out, fault


def stage_uids(spec: dict) -> list[int]:
    """The uids a stage's processes run as, the candidate's first (4 slots per GPU: check, memcheck, ncu and
    the check stage's vendor baseline, whose slot the peers then take one after another), so that no two
    stages that can run at the same time share one. The parent kills them all after the stage, whatever became
    of the judge."""
    from xlang.sandbox import uid_for_slot

    base = 4 * int(spec.get("gpu_index") or 0)
    mode = spec.get("mode", "check")
    if mode == "check":
        return [uid_for_slot(base), uid_for_slot(base + 3)]
    return [uid_for_slot(base + {"memcheck": 1, "ncu": 2}.get(mode, 3))]


class Runner:
    """The candidate's process (or the vendor baseline's), in its jail, spoken to over a socket."""

    def __init__(self, spec: dict, role: str, hello: dict | None, tool: list[str] | None = None, observer=None):
        """Start the process. With a hello, wait until it has loaded the candidate (or the vendor); with None,
        only start it (it imports torch meanwhile, touching no GPU) and send the hello later with start()."""
        from xlang.backend import jit_env
        from xlang.sandbox import Jail, _Tail, child_env, copy_untrusted_tree

        self.role, self.observer, self.killed = role, observer, False
        self.watch = None  # the stage's GpuWatch (the candidate's runner only), armed by start()
        stage_dir = Path(spec["stage_dir"])
        # A fresh home for every process (never one a candidate had before, with its links), in the judge's
        # folder; the judge writes into it only before the process starts (the seed cache), never after.
        home = Path(tempfile.mkdtemp(prefix=f"{role}-home-", dir=stage_dir))
        readable = [Path(p) for p in spec.get("readable", []) if Path(p).exists()]
        if observer is not None:
            readable.append(observer.library.parent)
        seed_cache = spec.get("seed_cache")  # the build's JIT cache: this same candidate's, the judge's copy
        if seed_cache and spec.get("jit_cache") and Path(seed_cache).is_dir() and role == "candidate":
            copy_untrusted_tree(Path(seed_cache), home / spec["jit_cache"])
        self.home = home
        self.uid = stage_uids(spec)[0 if role == "candidate" or tool else -1]
        variant, self.ladder = ("all", None) if not tool else tool_jail_variant(spec, list(tool))
        jail = Jail(home=home, readable=readable, gpu=spec["device"] == "cuda", namespaces=variant, uid=self.uid,
                    gpu_node=spec.get("gpu_minor"), tools=tool_folders(tool),
                    hidden=[Path(p) for p in spec.get("hidden", [])] if role == "candidate" else [])
        jail.prepare()
        self.jail, self.isolation = jail, jail.isolation()
        self.sock, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        runner_cmd = [sys.executable, "-m", "xlang.profiler.runner", str(child.fileno()), spec["device"]]
        fds = [child.fileno()]
        self.tool_log = self.tool_report = None
        if tool:
            # The tool and the candidate both run inside the jail, under the candidate's uid (measured on the
            # H200: with the tool as root and only the target dropped, compute-sanitizer finds no target). It
            # writes its log and report in the candidate's home; we copy them out afterwards, never through a
            # link. (An inherited pipe as --log-file stayed empty: the tool closes other descriptors.)
            self.tool_log, self.tool_report = home / "tool.log", home / "report"
            tool = [a.replace("{LOG}", str(self.tool_log)).replace("{REPORT}", str(self.tool_report)) for a in tool]
            cmd = jail.command(tool + runner_cmd)
            self.tool_cmd = tool
        else:
            cmd = jail.command(runner_cmd)
        env = child_env(jail=jail, extra={**jit_env(home), **dict(spec.get("env") or {}),
                                          **jail.env(os.environ.get("CUDA_VISIBLE_DEVICES"))})
        if observer is not None:
            obs_env, obs_fds = observer.child_args()
            env.update(obs_env)
            fds += list(obs_fds)
        # Same process group as the judge: whoever kills the judge's group kills the tool and the jail with
        # it (bwrap --die-with-parent takes the jailed tree down when bwrap goes).
        self.proc = subprocess.Popen(cmd, env=env, pass_fds=fds, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        child.close()
        if observer is not None:
            observer.start()
        self.out, self.err = _Tail(self.proc.stdout, 64 << 10), _Tail(self.proc.stderr, 64 << 10)
        self.started = time.monotonic()
        self.load_timeout_s = float(spec.get("load_timeout_s", 180))
        if hello is not None:
            self.start(hello)

    def start(self, hello: dict) -> None:
        if self.watch is not None:  # before the candidate's code can run: what exists now is the runner (and tool)
            if self.tool_log is not None:
                self.watch.tool_pid = self.proc.pid
                self.watch.tool_dirs = tuple(_tool_dirs([self.tool_cmd[0], f"/proc/{self.proc.pid}/exe"]))
            self.watch.arm(self.proc.pid)
        reply = self.request(hello, timeout=self.load_timeout_s)
        if reply.get("op") != "ready":
            raise CandidateError(str(reply.get("detail", "the candidate did not load"))[:4000])

    def request(self, message: dict, fds: list[int] | None = None, timeout: float = 60.0) -> dict:
        from xlang.profiler.runner import receive, send

        give_up = time.monotonic() + timeout
        try:
            self.sock.settimeout(timeout)
            send(self.sock, message, fds)
            step = 1.0 if self.watch is None else 0.2
            while True:  # a step at a time: the process we started (the jail, or the tool) may be gone
                self.sock.settimeout(max(0.01, min(step, give_up - time.monotonic())))
                try:
                    reply, extra = receive(self.sock)
                    break
                except socket.timeout:
                    self.check_watch()  # a second GPU process ends the stage now, not at the call's limit
                    if time.monotonic() >= give_up:
                        raise RunnerGone(f"no answer within {timeout:.0f} s", timed_out=True) from None
                    if self.proc.poll() is not None:  # e.g. the candidate killed the tool it runs under
                        raise RunnerGone(self._death(None, "it stopped answering, and the process we started for "
                                                           "it (its jail, or the tool it runs under) is gone"),
                                         fault=self._fault())
        except (OSError, EOFError, ValueError) as e:
            raise RunnerGone(self._death(e), fault=self._fault()) from None
        for fd in extra:  # nothing the candidate sends us is kept
            os.close(fd)
        self.check_watch()
        if not isinstance(reply, dict):
            raise RunnerGone("an answer that is not a message")
        return reply

    def _death(self, e, why: str | None = None) -> str:
        code = self.proc.poll()
        if code is None:
            try:
                code = self.proc.wait(2)
            except subprocess.TimeoutExpired:
                code = None
        tail = "\n".join((self.err.text(0.5) or self.out.text(0.5)).strip().splitlines()[-12:])[-2500:]
        how = "still running" if code is None else (f"killed by signal {-code}" if code < 0 else f"exit code {code}")
        return f"the candidate's process ended ({how}): {why or type(e).__name__}" + (f"\n{tail}" if tail else "")

    def output_tail(self, limit: int = OUTPUT_TAIL_CHARS) -> dict:
        """The last `limit` characters of what the process we started printed (the candidate's process, with its
        tool's messages in a tool stage): its own pipes, never the judge's output. After kill(): all there is."""
        return {"stdout": self.out.text(0.5)[-limit:], "stderr": self.err.text(0.5)[-limit:]}

    def check_watch(self) -> None:
        """Raise the stage's outcome when the GPU watch saw a second GPU process (or a stranger on the GPU)."""
        found = self.watch.finding() if self.watch is not None else None
        if found:
            raise Outcome(*found)

    def _fault(self) -> str | None:
        """SIGSEGV / SIGBUS when the process we started died of one: directly (-11), or as bubblewrap reports its
        command's death (128 + 11). Read after _death, which waited for the process."""
        code = self.proc.poll()
        for sig in (11, 7):
            if code in (-sig, 128 + sig):
                return "SIGSEGV" if sig == 11 else "SIGBUS"
        return None

    def close(self, wait_s: float = 30.0, orphan_grace_s: float = 15.0) -> None:
        """Ask it to leave; then kill what is left (the jail's whole PID namespace goes with bwrap).

        Under a tool (no PID namespace) the tool waits for every process it injected, so a child the candidate
        left behind (reparented to the tool, a subreaper) would hold it, and its report, until the stage's
        limit: once the tool has had orphan_grace_s to end by itself, every process of the uid but the tool's
        own is killed, and the tool ends with what it has."""
        try:
            self.sock.settimeout(2.0)
            from xlang.profiler.runner import send

            send(self.sock, {"op": "exit"})
        except OSError:
            pass
        give_up = time.monotonic() + wait_s
        if self.tool_log is not None:
            if self.watch is not None and self.watch.runner:
                # Whatever the candidate started is killed now (the runner leaves by itself, the tool's own
                # programs are spared): the tool waits for every process it injected, so a helper would hold it.
                _kill_all_but_the_tool(self.uid, self.proc.pid, self.tool_cmd, spare=self.watch.runner)
            try:
                self.proc.wait(min(orphan_grace_s, wait_s))
            except subprocess.TimeoutExpired:
                _kill_all_but_the_tool(self.uid, self.proc.pid, self.tool_cmd)
        try:
            self.proc.wait(max(0.0, give_up - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
        self.kill()

    def kill(self) -> None:
        from xlang.sandbox import kill_uid

        if self.killed:
            return
        self.killed = True
        if self.watch is not None:
            self.watch.stop()  # its last look while the candidate's tree is still there
        if self.proc.poll() is None:
            self.proc.kill()
        kill_uid(self.uid)  # anything of the candidate's uid still alive (a survivor of a relaxed jail)
        if self.jail.relaxed:  # no private /tmp and /dev/shm: what it left in the host's goes
            from xlang.sandbox import remove_uid_files

            remove_uid_files(self.uid)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            pass
        self.sock.close()
        if self.observer is not None:
            self.observer.close()


def _tool_dirs(paths: list[str]) -> list[str]:
    """Where the tool's own programs live: the folder above the real path of each of `paths` (the command we
    ran, and what the tool's process executes now: a wrapper script execs the binary), e.g.
    /opt/nvidia/nsight-compute/2025.3.1."""
    dirs = set()
    for path in paths:
        try:
            real = os.path.realpath(shutil.which(path) or path)
        except OSError:
            continue
        if real and not os.path.basename(real).startswith("python"):
            dirs.add(os.path.dirname(os.path.dirname(real)))
    return sorted(d for d in dirs if d not in ("/", "/usr", "/usr/local", "/bin", "/usr/bin"))


def tool_folders(tool: list[str] | None) -> list[Path]:
    """What a tool needs bound into the jail it runs in with its target: its own install folder (the folder
    above its real path's, e.g. /opt/nvidia/nsight-compute) and /opt/nvidia, where NVIDIA's tools install
    and the CUDA toolkit's launchers of them point."""
    if not tool:
        return []
    found = [Path(d) for d in _tool_dirs([tool[0]])]
    return found + ([Path("/opt/nvidia")] if Path("/opt/nvidia").is_dir() else [])


# Failure signatures of a tool whose injection did not reach its target (compute-sanitizer's is the first).
INJECTION_FAILED = ("terminated before the first instrumented API call", "before first instrumented API call",
                    "Failed to connect", "failed to initialize the injection")
LADDER_VERSION = 1


def tool_jail_variant(spec: dict, tool: list[str]) -> tuple[str, list[dict]]:
    """The strongest jail (sandbox.VARIANTS, in order) in which this tool works with a target of ours: every
    variant is tried with a trusted probe (the runner's `probe`: one CUDA kernel inside the NVTX range Nsight
    Compute's filter names, no candidate code) under the same tool command until the tool ends well and wrote
    its log or report without its injection failure's signature. Decided by our probe, never by the
    candidate's run, so a candidate cannot make its own stage fail to get a weaker jail. Kept per machine (the
    tool's command, bubblewrap, the kernel) in XLANG_CACHE/jail-ladder. -> (variant, what each probe gave)."""
    from xlang.sandbox import VARIANTS, bwrap_path, level, replace_file

    if level() == "process":
        return "uid", [{"variant": "uid", "ok": None, "why": "no bubblewrap here"}]
    key = hashlib.sha256(json.dumps([tool, spec["device"], spec.get("nvtx_last"), level(), bwrap_path(),
                                     os.uname().release, LADDER_VERSION]).encode()).hexdigest()[:24]
    cache = Path(os.environ.get("XLANG_CACHE", Path.home() / ".cache" / "xlang")) / "jail-ladder" / f"{key}.json"
    try:
        known = json.loads(cache.read_text())
        if known.get("variant") in VARIANTS:
            return known["variant"], known["tried"]
    except (OSError, ValueError, AttributeError):
        pass
    tried = []
    for variant in VARIANTS:
        ok, why = _probe_tool(spec, tool, variant)
        tried.append({"variant": variant, "ok": ok, "why": why})
        if ok:
            break
    chosen = next((t["variant"] for t in tried if t["ok"]), VARIANTS[-1])
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        replace_file(cache, json.dumps({"variant": chosen, "tried": tried}))
    except OSError:
        pass
    return chosen, tried


def _probe_tool(spec: dict, tool: list[str], variant: str, timeout_s: float = 40.0) -> tuple[bool, str]:
    # 40 s: a tool that hangs at one variant must leave the stage (300 s) time for the next ones and its run
    from xlang.backend import jit_env
    from xlang.sandbox import Jail, child_env, kill_uid, read_untrusted, read_untrusted_bytes, run_child

    home = Path(tempfile.mkdtemp(prefix=f"probe-{variant}-home-", dir=spec["stage_dir"]))
    uid = stage_uids(spec)[0]
    jail = Jail(home=home, readable=[Path(p) for p in spec.get("readable", []) if Path(p).exists()],
                gpu=spec["device"] == "cuda", namespaces=variant, uid=uid, gpu_node=spec.get("gpu_minor"),
                tools=tool_folders(tool))
    jail.prepare()
    log, report = home / "tool.log", home / "report"
    cmd = [a.replace("{LOG}", str(log)).replace("{REPORT}", str(report)) for a in tool]
    cmd += [sys.executable, "-m", "xlang.profiler.runner", "probe", spec["device"], spec.get("nvtx_last") or ""]
    env = child_env(jail=jail, extra={**jit_env(home), **dict(spec.get("env") or {}),
                                      **jail.env(os.environ.get("CUDA_VISIBLE_DEVICES"))})
    try:
        run = run_child(jail.command(cmd), timeout_s, raw_env=env)
    finally:
        kill_uid(uid)
    said = (run.stdout + "\n" + run.stderr + "\n" + (read_untrusted(log) or ""))
    if run.timed_out:
        return False, f"no end within {timeout_s:.0f} s"
    failed = next((sig for sig in INJECTION_FAILED if sig in said), None)
    if failed or run.returncode != 0:
        return False, (f"'{failed}'" if failed else f"exit {run.returncode}") + ": " + _last_line(said)
    if any("{LOG}" in a for a in tool) and "ERROR SUMMARY" not in (read_untrusted(log) or ""):
        return False, "no ERROR SUMMARY in its log"
    if any("{REPORT}" in a for a in tool) and not read_untrusted_bytes(Path(str(report) + ".ncu-rep"), 1 << 20):
        return False, "no report"
    return True, "ok"


def _kill_all_but_the_tool(uid: int, tool_pid: int, tool_cmd: list[str], spare=()) -> int:
    """Kill the processes of `uid` that are not the tool's: every Python (the runner, which had its time to
    leave, and any survivor the candidate started: the tools reap orphans, so one may sit below the tool) and
    anything outside the tool's tree, except programs from the tool's own folders. What is spared and is the
    candidate's (a survivor that execs another program below the tool) keeps the stage to its limit: timeout."""
    from xlang.sandbox import kill_uid

    dirs = _tool_dirs([tool_cmd[0], f"/proc/{tool_pid}/exe"])

    def tools_own(pid: int, procs: dict) -> bool:
        if pid == tool_pid or pid in spare:
            return True
        try:
            exe = os.readlink(f"/proc/{pid}/exe")
        except OSError:
            exe = ""
        if os.path.basename(exe).startswith("python"):  # the runner, or a survivor: never the tool's own
            return False
        if exe and any(exe.startswith(d + "/") for d in dirs):
            return True
        p, hops = pid, 0
        while p in procs and p != tool_pid and hops < 64:
            p, hops = procs[p], hops + 1
        return p == tool_pid

    return kill_uid(uid, keep=tools_own, wait_s=5.0)


# ---- one call on the judge's buffers ---------------------------------------------------------------------

# How CUDA says a kernel touched memory it may not (CUDA_ERROR_ILLEGAL_ADDRESS 700, _MISALIGNED_ADDRESS 716,
# _INVALID_ADDRESS_SPACE 717), as torch, Triton's launcher, the runtime API and cuda-python spell it.
_MEMORY_FAULT = re.compile(r"illegal memory access|an illegal address|ILLEGAL_ADDRESS|IllegalAddress|"
                           r"misaligned address|MISALIGNED_ADDRESS|MisalignedAddress|invalid address space|"
                           r"INVALID_ADDRESS_SPACE|InvalidAddressSpace")
_MEMORY_FAULT_CODES = (700, 716, 717)
GUARD_HINT = ("an illegal memory access in the candidate's call (no sanitizer in this run): every buffer the "
              "harness passes ends flush against an unmapped guard range and starts after one, so an access past "
              "its end or before its start faults; check the bounds of loads and stores (tails where a size is "
              "not a multiple of the tile, the last tile, TMA descriptor extents)")


def memory_fault(text: str) -> bool:
    """Whether an error text (the candidate's process's report, or the observer's) is a memory fault."""
    return bool(_MEMORY_FAULT.search(text or ""))


class Outcome(Exception):
    """A stage's verdict, raised where it is found: status and what a person or a model can act on."""

    def __init__(self, status: str, detail: str):
        super().__init__(detail)
        self.status, self.detail = status, detail


def _dtype(t):
    from xlang.candidate import torch_dtype

    return torch_dtype(t.dtype)


class Call:
    """One set of shared buffers for one shape: inputs written by the judge, outputs poisoned."""

    _ids = 0

    def __init__(self, ctx, shape: dict):
        from xlang.profiler.buffers import allocate

        Call._ids += 1
        self.id, self.ctx, self.shape = Call._ids, ctx, shape
        task = ctx["task"]
        self.shared = {t.name: allocate(t.name, t.dims(shape), _dtype(t), ctx["kind"], 0) for t in task.contract.tensors}
        self.inputs = [t.name for t in task.contract.inputs]
        self.outputs = [t.name for t in task.contract.outputs]
        self.sizes = [shape[s] for s in task.contract.sizes]
        self.mapped: set = set()

    def fill(self, inputs: dict) -> None:
        for name in self.inputs:
            self.shared[name].tensor.copy_(inputs[name])
        for name in self.outputs:
            self.shared[name].tensor.fill_(float("nan"))
        for s in self.shared.values():
            s.poison_slack()

    def run(self, runner: Runner, timeout: float, nvtx: str | None = None, primer: bool = False,
            where: str = "") -> None:
        if runner not in self.mapped:
            bufs = list(self.shared.values())
            reply = runner.request({"op": "map", "set": self.id, "buffers": [b.meta.to_dict() for b in bufs]},
                                   fds=[b.fd for b in bufs], timeout=60)
            if reply.get("op") != "mapped":
                raise Outcome("runtime_error", f"the candidate's process could not map the buffers: {reply}")
            self.mapped.add(runner)
        _sync(self.ctx)
        try:
            reply = runner.request({"op": "call", "set": self.id, "sizes": self.sizes, "nvtx": nvtx, "primer": primer},
                                   timeout=timeout)
        except RunnerGone as e:
            if e.fault:  # its process died of SIGSEGV / SIGBUS: a CPU-side access outside what it may touch
                raise Outcome("memory_error", f"the candidate's process was killed by {e.fault} during its call "
                                              f"({where or format_shape(self.shape)}): an invalid memory access "
                                              f"in its host code, or one past the end or before the start of a "
                                              f"buffer the harness passed (each lies between unmapped guard "
                                              f"pages).\n{e}") from None
            raise Outcome("timeout" if e.timed_out else "runtime_error", f"the candidate's call: {e}") from None
        if reply.get("op") == "error":
            detail = str(reply.get("detail", ""))[:4000]
            if memory_fault(detail):
                raise Outcome("memory_error", f"{GUARD_HINT} ({where or format_shape(self.shape)}). What the "
                                              f"candidate's process reported:\n{detail}")
            raise Outcome("runtime_error", detail or "the candidate's call failed")
        if reply.get("op") != "done":
            raise Outcome("runtime_error", f"unexpected answer from the candidate's process: {str(reply)[:200]}")

    def check_slack(self, where: str = "") -> None:
        """The canary bytes in the slack around every buffer (buffers.py): after every call, in every stage; one
        host sync when they are intact."""
        import torch

        if not bool(torch.cat([s.slack_changed() for s in self.shared.values()]).any()):
            return
        for name, s in self.shared.items():
            damage = s.slack_damage()
            if damage:
                raise Outcome("memory_error", f"the candidate wrote outside {name}: {damage} "
                                              f"({where or 'shape ' + format_shape(self.shape)}); check the "
                                              "bounds of its stores (tails, the last tile)")

    def input_bytes(self) -> int:
        return sum(self.shared[n].tensor.numel() * self.shared[n].tensor.element_size() for n in self.inputs)

    def output_tensors(self) -> dict:
        return {n: self.shared[n].tensor for n in self.outputs}

    def input_tensors(self) -> dict:
        return {n: self.shared[n].tensor for n in self.inputs}

    def close(self, runners=()) -> None:
        for r in runners:
            if r in self.mapped:
                try:
                    r.request({"op": "unmap", "set": self.id}, timeout=30)
                except RunnerGone:
                    pass
        for s in self.shared.values():
            s.close()


def _sync(ctx) -> None:
    if ctx["kind"] == "cuda":
        import torch

        torch.cuda.synchronize()


def _make_inputs(task, shape, seed, device, kind):
    import inspect

    if kind and "kind" in inspect.signature(task.make_inputs).parameters:
        return task.make_inputs(shape, seed, device, kind=kind)
    return task.make_inputs(shape, seed, device)


def verify(ctx, call: Call, inputs: dict, where: str, kind: str = "normal") -> dict:
    """Check one finished call against the judge's own copy of its inputs (of value kind `kind`): slack, inputs,
    outputs (each with its tolerance, Task.tolerance_for)."""
    task = ctx["task"]
    call.check_slack(where)
    changed = compare_inputs(inputs, call.input_tensors())
    if changed:
        raise Outcome("incorrect", f"input {changed['input']} was modified by the candidate: {changed['changed']} of "
                                   f"{changed['elements']} elements changed, first at {changed['input']}"
                                   f"[{', '.join(map(str, changed['index']))}] ({where})")
    reference = task.reference(inputs, call.shape)
    stats = []
    for name, got in call.output_tensors().items():
        atol, rtol = task.tolerance_for(name, kind)
        s = compare_output(name, got, reference[name], atol, rtol)
        stats.append(s)
        if "failure" in s:
            text = describe_failure(s, call.shape, -1, -1, atol, rtol)
            raise Outcome("incorrect", text[: text.rfind(" (shape ")] + f" ({where})")
    return {"outputs": stats}


# ---- kernels seen by the observer -------------------------------------------------------------------------

class Provenance:
    """Whose kernels ran: a kernel is the candidate's only when the module it came from is one its own
    toolchain produced in this evaluation (the cubins nvcc built from its source; the cubins its JIT wrote
    into its private cache). Any other kernel that looks like math is forbidden_call, whatever its name."""

    def __init__(self, spec: dict, home: Path | None):
        self.own: set = set()
        self.kernels_on_disk = spec.get("kernels_on_disk", True)  # Backend.kernels_on_disk
        self.jit_prefix = spec.get("jit_kernel_prefix") or ""  # Backend.jit_kernel_prefix
        self.jit_cache = spec.get("jit_cache")  # Backend.jit_cache: where in home its JIT's cubins are its own
        # "<prefix><function>_" of each built kernel made from one of the candidate's own kernel functions
        # (KernelImage.meta["stem"]), longest first
        self.stems = sorted(spec.get("build_kernel_stems") or [], key=len, reverse=True)
        self.home = home
        self.scanned: set = set()
        # Kernels whose module the observer could not name ('-': launched through a statically linked cudart,
        # as nvcc's shared objects are): the candidate's only under a name its own build compiled.
        self.built = {n.strip() for n in spec.get("build_kernels", [])}
        for cubin in spec.get("own_cubins", []):
            self._add(Path(cubin))

    def _add(self, path: Path) -> None:
        from xlang.sandbox import read_untrusted_bytes

        data = read_untrusted_bytes(path, 64 << 20)
        if data:
            self.own.add(hashlib.sha256(data).hexdigest())  # as the observer hashes a loaded module

    def rescan(self) -> None:
        """Hash the cubins the language's JIT wrote into its cache in the candidate's home: only there, so a
        cubin of another toolchain (nvcc or Triton run by a CuTe DSL or cuda_ptx candidate) is not its own."""
        from xlang.sandbox import untrusted_files

        if self.home is None or not self.jit_cache:
            return
        for _rel, data in untrusted_files(self.home / self.jit_cache, ".cubin"):  # no link followed, by fds
            self.own.add(hashlib.sha256(data).hexdigest())

    def is_own(self, k) -> bool:
        """Whether the candidate's toolchain made this kernel: its module is one of the candidate's, or an
        unnamed module (static cudart) under a name its build compiled, or (a JIT with no files) any
        non-utility name. judge() has already rejected what is forbidden."""
        from xlang.profiler.observer import MODULE_UNKNOWN

        if k.module in self.own or (k.module == MODULE_UNKNOWN and k.name in self.built):
            return True
        return not self.kernels_on_disk and not _UTILITY_KERNEL.search(k.name)

    def _chosen_part(self, name: str) -> str:
        """The part of a run-time kernel name that the vendor screen reads, for a language whose JIT keeps
        kernels in memory (its names carry the JIT's prefix, the candidate's function and the static arguments
        of each specialisation): after the stem of one of the candidate's own kernel functions, else after the
        JIT's own prefix. Any other name is screened whole."""
        if self.kernels_on_disk:
            return name
        for stem in self.stems:
            if name.startswith(stem):
                return name[len(stem):]
        if self.jit_prefix and name.startswith(self.jit_prefix):
            return name[len(self.jit_prefix):]
        return name

    def judge(self, kernels) -> None:
        from xlang.profiler.ncu import forbidden_reason
        from xlang.profiler.observer import MODULE_UNKNOWN

        foreign = [k for k in kernels if k.module not in self.own]
        if foreign:
            self.rescan()
            foreign = [k for k in foreign if k.module not in self.own]
        for k in foreign:
            # A name the build compiled is trusted when its module is on disk (hashed); a JIT that keeps kernels
            # in memory compiled at build time whatever the candidate's code compiled, a library's kernels too,
            # so its names are screened all the same (after the stem of the candidate's own kernel function).
            screened = k.name not in self.built or not self.kernels_on_disk
            why = forbidden_reason(self._chosen_part(k.name)) if screened else None
            if why:
                raise Outcome("forbidden_call", f"at run time the candidate's process ran {k.name[:160]} ({why})")
            if k.module == MODULE_UNKNOWN and k.name in self.built:
                continue
            if (not self.kernels_on_disk and self.jit_prefix and k.name not in self.built
                    and not k.name.startswith(self.jit_prefix) and not _UTILITY_KERNEL.search(k.name)):
                raise Outcome("forbidden_call", f"at run time the candidate's process ran {k.name[:160]}, a kernel "
                                                f"its language's JIT did not make (every kernel it makes is named "
                                                f"{self.jit_prefix}...): another toolchain's code")
            if _UTILITY_KERNEL.search(k.name):
                continue  # torch's own elementwise / fill / copy kernels (a scratch tensor, a zero_())
            if not self.kernels_on_disk:
                continue  # a JIT that keeps its output in memory: no file to match, the name alone decides
            raise Outcome("forbidden_call", f"at run time the candidate's process ran {k.name[:160]}, a kernel from "
                                            "a module that matches nothing the candidate's build or its own JIT "
                                            "cache holds (not built from its source, or that evidence was changed)")


_UTILITY_KERNEL = re.compile(r"at::native::|elementwise|vectorized_|fill|copy|memset|cast|index_|distribution_|"
                             r"reduce_kernel|arange|zero", re.I)


# ---- the stages -----------------------------------------------------------------------------------------------

def _observer(spec):
    if spec["device"] != "cuda" or not spec.get("observer_library"):
        return None
    from xlang.profiler.observer import Observer

    return Observer(Path(spec["observer_library"]))


def _flush(observer, prov, timeout=60.0):
    """All the candidate's work so far is finished (the observer synchronised its contexts) and recorded."""
    if observer is None:
        return []
    from xlang.profiler.observer import ObserverError, errors, kernels

    try:
        records = observer.flush(timeout)
    except ObserverError as e:
        # The observer synchronises the candidate's contexts itself: a fault the candidate's own code swallowed
        # (its sync in a try) still shows as that sync's error code.
        codes = {x.code for x in errors(e.records or []) if x.what == "ctx_synchronize"}
        if codes & set(_MEMORY_FAULT_CODES):
            raise Outcome("memory_error", f"{GUARD_HINT}. The observer's synchronisation of the candidate's "
                                          f"contexts failed: {e}") from None
        raise Outcome("runtime_error", f"the kernel observer failed: {e}") from None
    if prov is not None:
        prov.judge(kernels(records))
    return records


def correctness(ctx, runner: Runner, observer, prov, progress, nvtx_last: str | None = None) -> dict:
    """Every trial of spec["trials"]; nvtx_last: the name of an NVTX range around the last call (the one
    Nsight Compute profiles: the calls before it take the JIT compilation and autotuning)."""
    spec, task = ctx["spec"], ctx["task"]
    trials, calls, called = [], [], []
    for i, (shape, kind, seed) in enumerate(spec["trials"]):
        last = i == len(spec["trials"]) - 1
        where = f"shape {format_shape(shape)}, inputs '{kind}', seed {seed}"
        progress(f"trial {i}: {where}")
        call = Call(ctx, shape)
        try:
            inputs = _make_inputs(task, shape, seed, ctx["kind"], kind)
            call.fill(inputs)
            # Host CPU time only on a shape's later calls: its first one compiles (Triton's JIT, autotuning).
            warm = shape in called
            called.append(shape)
            cpu0 = process_cpu_ms(runner.uid) if warm else None
            call.run(runner, ctx["call_timeout_s"], nvtx=nvtx_last if last else None, where=where)
            records = _flush(observer, prov)
            calls.append(call_evidence(records, process_cpu_ms(runner.uid) if warm else None, cpu0,
                                       call.input_bytes(), observer is not None))
            rec = verify(ctx, call, inputs, where, kind)
        finally:
            call.close([runner])
        trials.append({"shape": shape, "kind": kind, "seed": seed, **rec})
        del inputs
    worst: dict = {}
    for t in trials:
        for s in t["outputs"]:
            w = worst.setdefault(s["output"], {"max_abs_err": 0.0, "max_rel_err": 0.0})
            w["max_abs_err"] = max(w["max_abs_err"], s["max_abs_err"])
            w["max_rel_err"] = max(w["max_rel_err"], s["max_rel_err"])
    shapes = []
    for t in trials:
        if t["shape"] not in shapes:
            shapes.append(t["shape"])
    return {"passed": True, "trials": len(trials), "shapes": shapes, "kinds": sorted({t["kind"] for t in trials}),
            "worst": worst, "host": host_evidence(calls)}


def _call_timeout(ctx, deadline: float | None) -> float:
    """The limit of the next call: the stage's per-call limit, or less where a deadline (a peer's budget) is near."""
    if deadline is None:
        return ctx["call_timeout_s"]
    left = deadline - time.monotonic()
    if left <= 0:
        raise RunnerGone("its time budget was spent", timed_out=True)
    return min(ctx["call_timeout_s"], left)


def time_calls(ctx, runner: Runner, observer, prov, shape: dict, progress, who: str, verify_n: int | None = None,
               deadline: float | None = None) -> dict:
    """Fresh inputs every call, L2 flushed before it, GPU time from the observer; a secret subset verified
    (verify_n = 0 for the vendor and the peers: their calls write into outputs of their own, and they are not
    the candidate). deadline (time.monotonic()): no call may end after it (a peer's budget)."""
    import torch

    task, timing = ctx["task"], ctx["spec"]["timing"]
    flush = torch.empty(int(max(timing.get("flush_min_bytes", 256 << 20),
                                2 * torch.cuda.get_device_properties(0).L2_cache_size)), dtype=torch.int8,
                        device="cuda")
    seed0 = int(timing.get("seed", 20_261_129))
    rest_s = max(0.0, float(timing.get("rest_ms") or 0.0)) / 1e3  # EvalOptions.timing_rest_ms: every side alike
    call = Call(ctx, shape)
    wall, spans, profiles, host_calls = [], [], [], []

    def one(k: int, check: bool):
        inputs = _make_inputs(task, shape, seed0 + k, "cuda", "normal")
        call.fill(inputs)
        flush.zero_()
        torch.cuda.synchronize()
        if rest_s:
            time.sleep(rest_s)
        # Host CPU time only around the verified calls (a /proc scan each) and outside the wall clock, which
        # checks the observer's span; the copies are in the records of every call.
        cpu0 = process_cpu_ms(runner.uid) if check else None
        t0 = time.perf_counter()
        where = f"timed call {k} of the {who}"
        call.run(runner, _call_timeout(ctx, deadline), primer=True, where=where)
        records = without_primer(_flush(observer, prov))
        wall_ms = (time.perf_counter() - t0) * 1e3
        host_calls.append(call_evidence(records, process_cpu_ms(runner.uid) if check else None, cpu0,
                                        call.input_bytes(), observer is not None))
        if check:
            verify(ctx, call, inputs, where)
        else:
            call.check_slack(where)  # the canaries after every call, verified or not
        from xlang.profiler.observer import span

        return (span(records) / 1e6 if observer is not None else None), wall_ms, records

    try:
        progress(f"timing {who}: first calls")
        first_call = None
        for k in range(2):  # JIT compilation, autotuning, module loads
            records = one(k, check=k == 1 and verify_n != 0)[2]
            if k == 0:  # a fresh set of buffers, as the call Nsight Compute profiles has
                first_call = _own_names(records, prov)
        est = max(1e-3, one(2, check=False)[0 if observer is not None else 1] or 1e-3)
        records = []
        warm = int(min(200, max(3, timing.get("sustain_s", 0.3) * 1e3 / est)))
        reps = int(min(timing.get("max_reps", 200), max(timing.get("min_reps", 20), timing.get("budget_s", 0.6) * 1e3 / est)))
        rng = random.Random(ctx["secret"] + hash(who) % 1000)
        n_verify = int(timing.get("verify", 3)) if verify_n is None else verify_n
        verified = (set(rng.sample(range(reps), min(reps, n_verify))) | {reps - 1}) if n_verify else set()
        progress(f"timing {who}: {warm} warm-up calls, {reps} timed, {len(verified)} of them verified")
        # Warm-up only brings the clocks to their sustained state: the last inputs again, back to back, one
        # observer flush at the end (its kernels are still judged for provenance). Untimed, so a candidate
        # that tells these calls apart only spoils its own warm-up.
        for _ in range(warm):
            call.run(runner, _call_timeout(ctx, deadline), primer=True, where=f"a warm-up call of the {who}")
        _flush(observer, prov)
        call.check_slack(f"the warm-up calls of the {who}")  # not re-poisoned between them: damage stays
        from xlang.profiler.gpu import PowerSampler
        from xlang.profiler.observer import activities

        # The card's clock and power while these calls are timed: under a power cap they decide a kernel's speed
        # as much as its code does, and each side is timed at its own time.
        with PowerSampler(ctx["spec"].get("gpu_index") or 0) as power:
            for k in range(reps):
                span, w, records = one(3 + k, check=k in verified)
                spans.append(span)
                wall.append(w)
                if observer is not None:
                    profiles.append(activities(records))
        last_call = _own_names(records, prov)
    finally:
        call.close([runner])
    samples = spans if observer is not None else wall
    return {"stats": _stats(samples), "method": "cupti_kernel_span" if observer is not None else "wall_clock_ipc",
            "reps": len(samples), "verified_calls": sorted(verified), "wall_stats": _stats(wall),
            "power": power.summary(),
            "profile": call_profile(profiles) if profiles else None,
            "host": host_evidence(host_calls[3:]),  # the timed calls (the first three compile and estimate)
            "call_kernels": last_call if observer is not None else None,
            "first_call_kernels": first_call if observer is not None else None}


PRIMER_MAX_NS = 20_000


def without_primer(records: list) -> list:
    """A timed call's records less the runner's primer (runner._primer: a one-block fill that ends before the
    call's first activity starts). The runner lives in the candidate's process, so the primer is recognised by
    what the judge can check, never by what the runner says: the call's first activity, a one-block utility
    kernel of at most 20 us that ends before anything else starts. A candidate that makes its own first kernel
    look like that hides at most 20 us of GPU work; one that drops the primer is timed as before it existed."""
    from xlang.profiler.observer import KernelRecord, gpu_work

    timed = gpu_work(records)
    if not timed:
        return records
    first = timed[0]
    if (isinstance(first, KernelRecord) and first.grid == (1, 1, 1) and 0 < first.end - first.start <= PRIMER_MAX_NS
            and _UTILITY_KERNEL.search(first.name) and all(r.start >= first.end for r in timed[1:])):
        return [r for r in records if r is not first]
    return records


def process_cpu_ms(uid: int | None) -> float | None:
    """CPU time (user + system, reaped children included) of every live process of a jail uid, in ms, from
    /proc/PID/stat (fields 14-17, clock ticks). None where the uid is not a jail's own (not root: the candidate
    then shares the judge's uid, whose time would count the judge too)."""
    from xlang.sandbox import CANDIDATE_UID_BASE, uid_processes

    if uid is None or os.geteuid() != 0 or not CANDIDATE_UID_BASE <= uid < CANDIDATE_UID_BASE + 1000:
        return None
    ticks = 0
    for pid, _ in uid_processes(uid):
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            ticks += sum(int(f) for f in fields[11:15])  # utime stime cutime cstime (after pid, comm, state)
        except (OSError, ValueError, IndexError):
            continue  # it ended between the scan and the read
    return ticks * 1e3 / os.sysconf("SC_CLK_TCK")


def call_evidence(records: list, cpu_after_ms: float | None, cpu_before_ms: float | None, input_bytes: int,
                  observed: bool) -> dict:
    """What one call showed of a host round trip (issue 40): bytes it copied to the host (CUPTI's copy kinds),
    the candidate's host CPU time and the GPU's busy time (the span less its idle gaps: host work between a
    copy to the host and the copy back is idle GPU time inside the span). Evidence only: Nsight Compute's FLOPs
    decide."""
    from xlang.profiler.observer import TO_HOST, ObserverError, activities, copied_bytes, span

    copies = copied_bytes(records) if observed else {}
    cpu = None if cpu_after_ms is None or cpu_before_ms is None else max(0.0, cpu_after_ms - cpu_before_ms)
    try:
        gpu_ms = (span(records) - sum(a[1] for a in activities(records))) / 1e6 if observed else None
    except ObserverError:  # an untimed record: the timing's own span() says so where it counts
        gpu_ms = None
    return {"dtoh_bytes": sum(copies.get(k, 0) for k in TO_HOST) if observed else None,
            "htod_bytes": copies.get("HtoD", 0) if observed else None, "input_bytes": input_bytes,
            "cpu_ms": cpu, "gpu_ms": gpu_ms}


# A call's host CPU time this many times its GPU time (and at least HOST_CPU_MIN_MS) is called far above it: a
# GPU kernel's call costs the host a launch or a few (tens of us), not the kernel's own time. /proc counts CPU
# time in clock ticks (10 ms at the usual 100 Hz), so one call reads 0 or 10 ms whatever it did: on the H200
# (2026-12-01) an honest 0.76 ms GEMM read one tick in 2 of 200 timed calls. The floor is five ticks, so rounding
# alone never makes a call "far above"; a host GEMM of the task's shapes takes seconds.
HOST_CPU_FACTOR = 10.0
HOST_CPU_MIN_MS = max(5.0, 5 * 1e3 / os.sysconf("SC_CLK_TCK"))


def host_evidence(calls: list[dict]) -> dict | None:
    """Over several calls (call_evidence): the most bytes one call copied to the host and its inputs' size, how
    many calls copied at least half their inputs' bytes to the host, the median host CPU and GPU times, and how
    many calls spent host CPU time far above their GPU time. None without calls."""
    if not calls:
        return None

    def median(xs):
        xs = sorted(x for x in xs if x is not None)
        return xs[len(xs) // 2] if xs else None

    most = max(calls, key=lambda c: c.get("dtoh_bytes") or 0)
    far = [c for c in calls if c.get("cpu_ms") is not None and c.get("gpu_ms") is not None
           and c["cpu_ms"] >= max(HOST_CPU_MIN_MS, HOST_CPU_FACTOR * c["gpu_ms"])]
    return {"calls": len(calls), "dtoh_bytes": most.get("dtoh_bytes"), "input_bytes": most.get("input_bytes"),
            "input_sized_dtoh_calls": sum(1 for c in calls if (c.get("dtoh_bytes") or 0) >= 0.5 * c["input_bytes"] > 0),
            "cpu_ms": median(c.get("cpu_ms") for c in calls), "gpu_ms": median(c.get("gpu_ms") for c in calls),
            "cpu_far_above_gpu_calls": len(far)}


def call_profile(profiles: list) -> dict:
    """Medians over the timed calls (each observer.activities: [(label, idle ns before it, ns)]) whose activities
    are the last call's, in the same order: each activity's time and the idle time before it; and the median of
    a call's total idle time."""
    labels = [a[0] for a in profiles[-1]]
    same = [acts for acts in profiles if [a[0] for a in acts] == labels]

    def median_ms(ns: list) -> float:
        return round(_stats([x / 1e6 for x in ns])["median_ms"], 4)

    return {"activities": [{"name": label[:120], "idle_before_ms": median_ms([acts[i][1] for acts in same]),
                            "median_ms": median_ms([acts[i][2] for acts in same])} for i, label in enumerate(labels)],
            "idle_ms": median_ms([sum(a[1] for a in acts) for acts in profiles]), "calls": len(same)}


def _kernels(records):
    from xlang.profiler.observer import kernels

    return kernels(records)


def _own_names(records, prov) -> list[str]:
    """The names of one call's kernels that the candidate's toolchain made (all of them for the vendor)."""
    return sorted(k.name for k in _kernels(records) if prov is None or prov.is_own(k))


def _process_names(pids) -> str:
    """'pid name' for each (the command name from /proc, when this namespace shows it): which processes they were."""
    out = []
    for pid in pids[:6]:
        try:
            name = Path(f"/proc/{pid}/comm").read_text().strip()[:32]
        except OSError:
            name = "not visible here"
        out.append(f"{pid} {name}")
    return ", ".join(out)


def gpu_tenants(index: int = 0) -> dict[int, str | None] | None:
    """{pid: start time} of the processes holding the GPU now (None without NVML)."""
    pids = compute_processes(index)
    return None if pids is None else {p: _started(p) for p in pids}


def foreign_gpu_work(before: dict | None, after: dict | None, me: int) -> tuple[list[int], list[int]]:
    """(the environment's, the candidate's side's) processes on the GPU after the candidate was timed, besides
    the judge. The environment's were there, the same processes, before the candidate's runner started: the
    candidate cannot have made them, so they make the timing untrustworthy but are not its doing."""
    after = {p: t for p, t in (after or {}).items() if p != me}
    before = before or {}
    env = sorted(p for p, t in after.items() if p in before and before[p] == t)
    return env, sorted(p for p in after if p not in env)


def run_check(ctx, progress) -> dict:
    spec, task = ctx["spec"], ctx["task"]
    observer = ctx.get("observer")
    runner = ctx.get("runner")
    vendor_runner = vendor_observer = None
    result: dict = {}
    try:
        before = gpu_tenants(spec.get("gpu_index") or 0)  # before any process of the candidate exists
        runner.start(spec["hello"])
        timing = spec.get("timing") or {}
        if timing.get("enabled") and ctx["kind"] == "cuda":
            # The vendor's process starts now and imports torch while the candidate is checked; it touches the
            # GPU only when its hello comes, after the candidate's tree is dead. Another uid and PID namespace:
            # the candidate can neither see nor signal it.
            vendor_observer = _observer(spec)
            vendor_runner = Runner(spec, "vendor", None, observer=vendor_observer)
        prov = Provenance(spec, runner.home) if observer is not None else None
        result["correctness"] = correctness(ctx, runner, observer, prov, progress)
        if vendor_runner is None or not wait_at_gate(timing, progress):
            return result
        shape = spec["timed_shape"]
        cand = time_calls(ctx, runner, observer, prov, shape, progress, "candidate")
        tenants = gpu_tenants(spec.get("gpu_index") or 0)
        others = None if tenants is None else sorted(tenants)
        env, extra = foreign_gpu_work(before, tenants, os.getpid())
        # Only where NVML's PIDs are ours (it lists the judge itself): in a container they may be the host's.
        pids_ours = tenants is not None and os.getpid() in tenants
        if pids_ours and env:
            raise Outcome("harness_error", f"the GPU was not the judge's alone: {len(env)} processes held it from "
                                           f"before the candidate started until after it was timed "
                                           f"({_process_names(env)}); its timing would not be a fair one, so "
                                           "this candidate was not judged")
        if pids_ours and len(extra) > 1:  # the runner is one process; another one on the GPU works for the candidate unseen
            raise Outcome("forbidden_call", f"{len(extra)} processes besides the judge held the GPU while the "
                                            "candidate was timed: GPU work in a process the judge cannot observe "
                                            f"({_process_names(extra)})")
        if observer is not None and cand["stats"]["median_ms"] > cand["wall_stats"]["median_ms"] * 1.05 + 0.05:
            raise Outcome("runtime_error", "the observer's GPU time exceeds the judge's own wall clock around the "
                                           "same calls: the observer's records cannot be trusted")
        runner.close()
        runner = None
        # The vendor runs with no candidate process alive: wait until the GPU lists only us.
        alone = _wait_alone(progress, spec.get("gpu_index") or 0)
        vendor_runner.start({"op": "vendor", "task": task.name, "device": "cuda"})
        try:
            base = time_calls(ctx, vendor_runner, vendor_observer, None, shape, progress, "vendor", verify_n=0)
        finally:
            vendor_runner.close()
            vendor_runner = None
        result["timing"] = _timing_record(ctx, shape, cand, base, others, alone)
        result["timed_call_kernels"] = cand.get("call_kernels")
        result["timed_first_call_kernels"] = cand.get("first_call_kernels")
        result["timing"]["clocks"] = gpu_clocks(spec.get("gpu_index"))
        # The peers last: what they do (or fail to do) cannot touch the candidate's or the vendor's figures.
        result["timing"].update(time_peers(ctx, shape, cand["stats"]["median_ms"], progress))
        return result
    finally:
        for r in (runner, vendor_runner):
            if r is not None:
                r.kill()


def _wait_alone(progress, index: int = 0, limit_s: float = 10.0) -> dict:
    me = os.getpid()
    t0 = time.monotonic()
    while True:
        pids = compute_processes(index)
        if pids is None:
            return {"checked": False}
        others = [p for p in pids if p != me]
        if not others or time.monotonic() - t0 > limit_s:
            return {"checked": True, "others": others, "waited_s": round(time.monotonic() - t0, 2)}
        progress(f"waiting for {others} to leave the GPU")
        time.sleep(0.2)


def _tflops(flops: float, ms: float) -> float | None:
    return flops / (ms * 1e-3) / 1e12 if ms > 0 else None


def _timing_record(ctx, shape, cand, base, others, alone) -> dict:
    from xlang.archs import get_arch

    task = ctx["task"]
    flops = task.flops(shape)
    c_ms, b_ms = cand["stats"]["median_ms"], base["stats"]["median_ms"]
    arch = get_arch(ctx["spec"]["arch"])
    peak = arch.figures.get("peak_dense_bf16_tflops")
    bw = arch.figures.get("mem_bandwidth_tbs")
    floors = [flops / (peak * 1e12) * 1e3] if peak else []
    if bw and task.min_bytes is not None:
        floors.append(task.min_bytes(shape) / (bw * 1e12) * 1e3)
    floor = max(floors) if floors else None
    me = os.getpid()
    extra = [p for p in (others or []) if p != me]
    return {
        "method": cand["method"], "shape": shape, "seed": ctx["spec"]["timing"].get("seed"),
        "candidate_ms": c_ms, "baseline_ms": b_ms, "candidate": cand["stats"], "baseline": base["stats"],
        "candidate_wall": cand["wall_stats"], "baseline_wall": base["wall_stats"],
        "candidate_power": cand.get("power"), "baseline_power": base.get("power"),
        "candidate_profile": cand.get("profile"), "baseline_profile": base.get("profile"),
        "candidate_host": cand.get("host"), "baseline_host": base.get("host"),
        "rest_ms": ctx["spec"]["timing"].get("rest_ms", 0.0),
        "verified_calls": {"candidate": cand["verified_calls"], "baseline": base["verified_calls"]},
        "baseline_name": task.baseline_name,
        "speedup": b_ms / c_ms if c_ms > 0 else None,
        "tflops": _tflops(flops, c_ms), "baseline_tflops": _tflops(flops, b_ms),
        "flops": flops, "roofline_floor_ms": floor, "beyond_roofline": bool(floor is not None and c_ms < floor),
        "gpu_processes_during_candidate": len(extra) if others is not None else None,
        "vendor_alone": alone,
    }


# ---- peers: public kernels timed beside the vendor ------------------------------------------------------------

def time_peers(ctx, shape: dict, candidate_ms: float, progress) -> dict:
    """Each peer of spec["peers"] (evaluate.peer_specs: name, display, and why it is skipped, if it is) timed as the
    vendor was: its own process, no candidate process alive, the same shape and method. A peer that cannot run
    is recorded with the reason; it never changes the candidate's verdict. -> {"peers": [...], "best_peer": ...}"""
    records = []
    for peer in ctx["spec"].get("peers") or []:
        if peer.get("skip"):  # not installed here, or peers turned off: no process is started
            records.append(peer_not_run(peer, peer["skip"]))
        else:
            records.append(_time_peer(ctx, peer, shape, candidate_ms, progress))
    return {"peers": records, "best_peer": best_peer(records)}


def _time_peer(ctx, peer: dict, shape: dict, candidate_ms: float, progress) -> dict:
    spec, task = ctx["spec"], ctx["task"]
    deadline = time.monotonic() + float(spec["timing"].get("peer_budget_s", 180))
    observer = _observer(spec)
    runner = None
    try:
        runner = Runner(spec, f"peer-{peer['name']}", None, observer=observer)
        runner.load_timeout_s = max(1.0, min(runner.load_timeout_s, deadline - time.monotonic()))
        alone = _wait_alone(progress, spec.get("gpu_index") or 0)
        progress(f"peer {peer['name']}: load")
        runner.start({"op": "peer", "task": task.name, "peer": peer["name"], "device": "cuda"})
        timed = time_calls(ctx, runner, observer, None, shape, progress, f"peer {peer['name']}", verify_n=0,
                           deadline=deadline)
    except CandidateError as e:  # the runner's load reply: its package is missing or broken there
        return peer_not_run(peer, "could not load: " + _last_line(str(e)))
    except (Outcome, RunnerGone) as e:
        return peer_not_run(peer, "failed: " + _last_line(str(e)))
    except Exception as e:  # noqa: BLE001 - a peer's trouble (or ours starting it) is recorded, never the verdict
        return peer_not_run(peer, f"failed: {type(e).__name__}: {_last_line(str(e))}")
    finally:
        if runner is not None:
            runner.close()  # its observer with it
        elif observer is not None:
            observer.close()
    return peer_record(task, shape, peer, timed, candidate_ms, alone)


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return (lines[-1] if lines else "no detail")[:300]


def peer_not_run(peer: dict, reason: str) -> dict:
    return {"name": peer["name"], "display": peer.get("display", peer["name"]), "ran": False, "reason": reason}


def peer_record(task, shape: dict, peer: dict, timed: dict, candidate_ms: float, alone: dict | None = None) -> dict:
    """A peer that ran: its median, TFLOP/s, and the candidate's speedup against it (peer ms / candidate ms)."""
    ms = timed["stats"]["median_ms"]
    flops = task.flops(shape)
    return {"name": peer["name"], "display": peer.get("display", peer["name"]), "ran": True, "ms": ms,
            "tflops": _tflops(flops, ms),
            "speedup_vs_peer": ms / candidate_ms if candidate_ms > 0 else None,
            "method": timed["method"], "stats": timed["stats"], "wall_stats": timed.get("wall_stats"),
            "power": timed.get("power"), "profile": timed.get("profile"), "alone": alone}


def best_peer(records: list[dict]) -> dict | None:
    """The fastest peer that ran (name, display, ms, and the candidate's speedup against it), or None."""
    ran = [r for r in records if r.get("ran") and r.get("ms")]
    if not ran:
        return None
    best = min(ran, key=lambda r: r["ms"])
    return {"name": best["name"], "display": best["display"], "ms": best["ms"], "speedup": best["speedup_vs_peer"]}


def run_tool_stage(ctx, progress) -> dict:
    """memcheck / ncu: the runner under the tool (spec["tool"], started by run()), a trial per shape; the
    tool's log and report are copied into the judge's folder and read by the parent."""
    spec = ctx["spec"]
    runner = ctx["runner"]
    try:
        runner.start(spec["hello"])
        out = {"correctness": correctness(ctx, runner, None, None, progress, nvtx_last=spec.get("nvtx_last"))}
    finally:
        runner.close(wait_s=float(spec.get("tool_exit_s", 240)))
        _collect_tool_output(runner, spec)
        if spec["mode"] == "ncu":  # also when a trial failed: the profile is still read, and judged by its code
            ctx["jit_modules"] = collect_jit_modules(runner.home, spec.get("jit_cache"), Path(spec["stage_dir"]))
    out["runner_exit"] = runner.proc.returncode
    out["runner_stdout"] = runner.out.text(1.0)[-20000:]
    out["runner_stderr"] = runner.err.text(1.0)[-20000:]
    return out


def _collect_tool_output(runner: "Runner", spec: dict) -> None:
    """The tool's log and report are copied out of the candidate's home into the judge's folder."""
    from xlang.sandbox import read_untrusted_bytes, write_new

    for source, name in ((runner.tool_log, "tool.log"), (Path(str(runner.tool_report) + ".ncu-rep"), "report.ncu-rep")):
        data = read_untrusted_bytes(source, 1 << 30) if source is not None else None
        if data:
            write_new(Path(spec["stage_dir"]) / name, data)


JIT_MODULES_MAX = 2000  # as Provenance.rescan
JIT_MODULES_MAX_BYTES = 1 << 30


def collect_jit_modules(home: Path | None, jit_cache: str | None, stage_dir: Path) -> list[str]:
    """Copies of the cubins the candidate's JIT wrote into its private cache during this stage (Backend.jit_cache
    in its home), in a folder of the judge's own made after the candidate's processes are gone: the modules a
    kernel Nsight Compute profiled may be, instruction for instruction (xlang.profiler.ncu.sass_identity). Walked
    and read by descriptors, never through a link (sandbox.untrusted_files), at most 64 MiB each; a candidate can
    put any cubin there, so a vendor cubin it copies in counts as its own (README, residual risks)."""
    import tempfile

    from xlang.sandbox import untrusted_files, write_new

    if home is None or not jit_cache:
        return []
    root = Path(home) / jit_cache
    if not root.is_dir() or root.is_symlink():  # a link would make any cubin on the machine "its own"
        return []
    found = sorted(untrusted_files(root, ".cubin", limit=64 << 20, max_files=JIT_MODULES_MAX))
    found = [data for _rel, data in found if data]
    if not found:
        return []
    folder = Path(tempfile.mkdtemp(prefix="jit-modules-", dir=stage_dir))  # new, 0700: nothing of the candidate's
    out, total = [], 0
    for i, data in enumerate(found):
        if total + len(data) > JIT_MODULES_MAX_BYTES:
            continue
        total += len(data)
        out.append(str(write_new(folder / f"{i:04d}.cubin", data, 0o600)))
    return out


def run(spec: dict, progress) -> dict:
    ctx: dict = {}
    runner = None
    if spec["mode"] in ("check", "memcheck", "ncu"):
        # The candidate's process first: it starts Python and imports torch while we do the same here.
        progress("start the candidate's process")
        if spec["mode"] == "check":
            ctx["observer"] = _observer(spec)
            runner = ctx["runner"] = Runner(spec, "candidate", None, observer=ctx["observer"])
        else:
            runner = ctx["runner"] = Runner(spec, spec["mode"], None, tool=list(spec["tool"]))
        runner.watch = _gpu_watch(spec, runner.uid)
    try:
        result = _run(spec, progress, ctx)
    finally:
        if runner is not None:
            runner.kill()
    if runner is not None:
        apply_watch(result, runner.watch)
        result["candidate_output"] = runner.output_tail()
    return result


def _gpu_watch(spec: dict, uid: int):
    """The stage's poller of the GPU's processes (xlang.profiler.gpuwatch): every other uid of this GPU's slots
    is another stage of this evaluation (or its vendor), which watches its own."""
    from xlang.profiler.gpuwatch import GpuWatch
    from xlang.sandbox import uid_for_slot

    base = 4 * int(spec.get("gpu_index") or 0)
    siblings = {uid_for_slot(base + i) for i in range(4)} - {uid}
    return GpuWatch(int(spec.get("gpu_index") or 0), uid, parent_pid=spec.get("parent_pid"), sibling_uids=siblings)


def apply_watch(result: dict, watch) -> None:
    """Record what the stage's GPU watch saw; a second GPU process of the candidate's decides the stage
    (forbidden_call, whatever else it concluded, and its correctness is discarded), a stranger on the GPU makes
    it not judged at all, a memory fault the driver reported makes an ok stage memory_error."""
    if watch is None:
        return
    result["gpu_watch"] = watch.record()
    found = watch.finding()
    if not found or result.get("status") == "harness_error":
        return
    if found[0] == "memory_error":  # the driver's fault report: the stage's verdict unless it has found worse
        if result.get("status") == "ok":
            result.update(status=found[0], detail=found[1])
        return
    result.update(status=found[0], detail=found[1])
    if isinstance(result.get("correctness"), dict):
        result["correctness"] = {**result["correctness"], "passed": False, "discarded": found[1]}


def _run(spec: dict, progress, ctx: dict) -> dict:
    from xlang.task import get_task

    kind = spec["device"]
    if kind == "cuda":
        progress("import torch")
        import torch

        if not torch.cuda.is_available():
            return {"status": "harness_error", "detail": "torch sees no CUDA device in the judge"}
        torch.cuda.init()
        torch.empty(1, device="cuda")
        fp = fingerprint(torch)
    else:
        fp = {"python": platform.python_version(), "device": "cpu"}
    task = get_task(spec["task"])
    ctx.update({"spec": spec, "task": task, "kind": kind, "atol": task.tolerance["atol"],
                "rtol": task.tolerance["rtol"], "call_timeout_s": float(spec.get("call_timeout_s", 120)),
                "secret": random.SystemRandom().randrange(1 << 30)})
    from xlang.sandbox import level

    # The jail the candidate's process got in this stage (a tool stage: the strongest its tool works in).
    runner = ctx.get("runner")
    isolation = runner.isolation if runner is not None else level()
    result: dict = {"status": "ok", "fingerprint": fp, "mode": spec["mode"], "isolation": isolation}
    if runner is not None and runner.ladder is not None:
        result["jail_ladder"] = runner.ladder
    try:
        if spec["mode"] == "check":
            result.update(run_check(ctx, progress))
        elif spec["mode"] in ("memcheck", "ncu"):
            result.update(run_tool_stage(ctx, progress))
        else:
            return {"status": "harness_error", "detail": f"unknown judge mode {spec['mode']}"}
    except Outcome as o:
        result.update(status=o.status, detail=o.detail)
    except CandidateError as e:
        result.update(status="runtime_error", detail=str(e))
    except RunnerGone as e:
        result.update(status="timeout" if e.timed_out else "runtime_error", detail=str(e))
    if ctx.get("jit_modules"):
        result["jit_modules"] = ctx["jit_modules"]
    progress("done")
    return result


def main(argv: list[str]) -> int:
    spec = json.loads(Path(argv[0]).read_text())
    from xlang.sandbox import die_with_parent

    die_with_parent(spec.get("parent_pid"))  # a judge whose caller was killed must not keep the GPU
    progress = _Progress(spec.get("progress"))
    try:
        result = run(spec, progress)
    except Exception as e:  # noqa: BLE001 - our own failure
        result = {"status": "harness_error", "detail": "judge failed: " + "".join(
            traceback.format_exception_only(type(e), e)).strip()[:3000], "traceback": traceback.format_exc()[-6000:]}
    result["pid"] = os.getpid()
    from xlang.sandbox import replace_file

    replace_file(spec["out"], json.dumps(result, default=str))
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1:])
