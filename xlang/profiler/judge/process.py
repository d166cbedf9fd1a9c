"""The candidate's process and the GPU's tenancy, in the judge (xlang.profiler.judge): the Runner (a jailed process,
spoken to over a socket; under a tool for memcheck and ncu, in the strongest jail the tool works in), the uids of a
stage's processes, who holds the GPU (before the candidate starts, after it was timed, before the vendor), and the
stage's GPU watch (xlang.profiler.gpuwatch)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from xlang.profiler.gpuwatch import GPU_NOT_ALONE, process_started, compute_processes  # one copy, shared with the GPU watch
from xlang.profiler.judge.plan import Plan


class CandidateError(Exception):
    """The candidate's own code failed (import, host code, or a CUDA error its kernels caused)."""


OUTPUT_TAIL_CHARS = 6 << 10  # of the candidate process's stdout and of its stderr, kept in every stage's result


class Outcome(Exception):
    """A stage's verdict, raised where it is found: status and what a person or a model can act on."""

    def __init__(self, status: str, detail: str):
        super().__init__(detail)
        self.status, self.detail = status, detail


def last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return (lines[-1] if lines else "no detail")[:300]


class RunnerGone(Exception):
    """The candidate's process died, closed the connection, or did not answer in time."""

    def __init__(self, detail: str, timed_out: bool = False, fault: str | None = None):
        super().__init__(detail)
        self.timed_out, self.fault = timed_out, fault


def stage_uids(plan: Plan) -> list[int]:
    """The uids a stage's processes run as, the candidate's first (4 slots per GPU: check, memcheck, ncu and
    the check stage's vendor baseline, whose slot the peers then take one after another), so that no two
    stages that can run at the same time share one. The parent kills them all after the stage, whatever became
    of the judge."""
    from xlang.sandbox import uid_for_slot

    base = 4 * int(plan.gpu_index or 0)
    mode = plan.mode
    if mode == "check":
        return [uid_for_slot(base), uid_for_slot(base + 3)]
    return [uid_for_slot(base + {"memcheck": 1, "ncu": 2}.get(mode, 3))]


class Runner:
    """The candidate's process (or the vendor baseline's), in its jail, spoken to over a socket."""

    def __init__(self, plan: Plan, role: str, hello: dict | None, tool: list[str] | None = None, observer=None,
                 home_env=None):
        """Start the process. With a hello, wait until it has loaded the candidate (or the vendor); with None,
        only start it (it imports torch meanwhile, touching no GPU) and send the hello later with start()."""
        from xlang.backend import jit_env
        from xlang.children import OutputTail
        from xlang.sandbox import Jail, child_env
        from xlang.untrusted import copy_untrusted_tree

        self.role, self.observer, self.killed = role, observer, False
        self.watch = None  # the stage's GpuWatch (the candidate's runner only), armed by start()
        stage_dir = Path(plan.stage_dir)
        # A fresh home for every process (never one a candidate had before, with its links), in the judge's
        # folder; the judge writes into it only before the process starts (the seed cache), never after.
        home = Path(tempfile.mkdtemp(prefix=f"{role}-home-", dir=stage_dir))
        readable = [Path(p) for p in plan.readable if Path(p).exists()]
        if observer is not None:
            readable.append(observer.library.parent)
        seed_cache = plan.seed_cache  # the build's JIT cache: this same candidate's, the judge's copy
        if seed_cache and plan.jit_cache and Path(seed_cache).is_dir() and role == "candidate":
            copy_untrusted_tree(Path(seed_cache), home / plan.jit_cache)
        self.home = home
        # home_env(home) -> environment: what the judge puts in the fresh home before the process starts (a peer's
        # kept cache, judge/peer_cache.py) and the variables that name it
        own_env = home_env(home) if home_env is not None else {}
        self.uid = stage_uids(plan)[0 if role == "candidate" or tool else -1]
        variant, self.ladder = ("all", None) if not tool else tool_jail_variant(plan, list(tool))
        jail = Jail(home=home, readable=readable, gpu=plan.device == "cuda", namespaces=variant, uid=self.uid,
                    gpu_node=plan.gpu_minor, tools=tool_folders(tool),
                    hidden=[Path(p) for p in plan.hidden] if role == "candidate" else [])
        jail.prepare()
        self.jail, self.isolation = jail, jail.isolation()
        self.sock, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        runner_cmd = [sys.executable, "-m", "xlang.profiler.runner", str(child.fileno()), plan.device]
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
        env = child_env(jail=jail, extra={**jit_env(home), **dict(plan.env or {}), **own_env,
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
        self.out, self.err = OutputTail(self.proc.stdout, 64 << 10), OutputTail(self.proc.stderr, 64 << 10)
        self.started = time.monotonic()
        self.load_timeout_s = float(plan.load_timeout_s)
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


def tool_jail_variant(plan: Plan, tool: list[str]) -> tuple[str, list[dict]]:
    """The strongest jail (sandbox.VARIANTS, in order) in which this tool works with a target of ours: every
    variant is tried with a trusted probe (the runner's `probe`: one CUDA kernel inside the NVTX range Nsight
    Compute's filter names, no candidate code) under the same tool command until the tool ends well and wrote
    its log or report without its injection failure's signature. Decided by our probe, never by the
    candidate's run, so a candidate cannot make its own stage fail to get a weaker jail. Kept per machine (the
    tool's command, bubblewrap, the kernel) in XLANG_CACHE/jail-ladder. -> (variant, what each probe gave)."""
    from xlang.sandbox import VARIANTS, bwrap_path, level
    from xlang.untrusted import replace_file

    if level() == "process":
        return "uid", [{"variant": "uid", "ok": None, "why": "no bubblewrap here"}]
    key = hashlib.sha256(json.dumps([tool, plan.device, plan.nvtx_last, level(), bwrap_path(),
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
        ok, why = _probe_tool(plan, tool, variant)
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


def _probe_tool(plan: Plan, tool: list[str], variant: str, timeout_s: float = 40.0) -> tuple[bool, str]:
    # 40 s: a tool that hangs at one variant must leave the stage (300 s) time for the next ones and its run
    from xlang.backend import jit_env
    from xlang.children import run_child
    from xlang.sandbox import Jail, child_env, kill_uid
    from xlang.untrusted import read_untrusted, read_untrusted_bytes

    home = Path(tempfile.mkdtemp(prefix=f"probe-{variant}-home-", dir=plan.stage_dir))
    uid = stage_uids(plan)[0]
    jail = Jail(home=home, readable=[Path(p) for p in plan.readable if Path(p).exists()],
                gpu=plan.device == "cuda", namespaces=variant, uid=uid, gpu_node=plan.gpu_minor,
                tools=tool_folders(tool))
    jail.prepare()
    log, report = home / "tool.log", home / "report"
    cmd = [a.replace("{LOG}", str(log)).replace("{REPORT}", str(report)) for a in tool]
    cmd += [sys.executable, "-m", "xlang.profiler.runner", "probe", plan.device, plan.nvtx_last or ""]
    env = child_env(jail=jail, extra={**jit_env(home), **dict(plan.env or {}),
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
        return False, (f"'{failed}'" if failed else f"exit {run.returncode}") + ": " + last_line(said)
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


def process_names(pids) -> str:
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
    return None if pids is None else {p: process_started(p) for p in pids}


def foreign_gpu_work(before: dict | None, after: dict | None, me: int) -> tuple[list[int], list[int]]:
    """(the environment's, the candidate's side's) processes on the GPU after the candidate was timed, besides
    the judge. The environment's were there, the same processes, before the candidate's runner started: the
    candidate cannot have made them, so they make the timing untrustworthy but are not its doing."""
    after = {p: t for p, t in (after or {}).items() if p != me}
    before = before or {}
    env = sorted(p for p, t in after.items() if p in before and before[p] == t)
    return env, sorted(p for p in after if p not in env)


def wait_alone(progress, index: int = 0, limit_s: float = 10.0) -> dict:
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


def stage_gpu_watch(plan: Plan, uid: int):
    """The stage's poller of the GPU's processes (xlang.profiler.gpuwatch): every other uid of this GPU's slots
    is another stage of this evaluation (or its vendor), which watches its own."""
    from xlang.profiler.gpuwatch import GpuWatch
    from xlang.sandbox import uid_for_slot

    base = 4 * int(plan.gpu_index or 0)
    siblings = {uid_for_slot(base + i) for i in range(4)} - {uid}
    return GpuWatch(int(plan.gpu_index or 0), uid, parent_pid=plan.parent_pid, sibling_uids=siblings)


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
    if found[0] == "harness_error":
        result["harness"] = GPU_NOT_ALONE  # a stranger's doing: the parent retries once (stages/launch.py)
    if isinstance(result.get("correctness"), dict):
        result["correctness"] = {**result["correctness"], "passed": False, "discarded": found[1]}
