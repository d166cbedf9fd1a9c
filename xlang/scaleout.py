"""Scale-out on Ray: `xlang compare --ray [ADDRESS]` and `xlang run --ray [ADDRESS]` (the optional extra
`xlang[ray]`; nothing here imports Ray until one of them runs).

Without an address the driver starts a local Ray on this machine, declaring its GPUs (NVML) and, for each, a
custom resource naming the architecture's SM (`{"sm_90a": 2}` on a two-H100/H200 machine). With an address it
joins an existing cluster, whose nodes declare the same when they start:

    ray start --head --num-gpus 8 --resources '{"sm_90a": 8}'             # or: python -m xlang.scaleout resources
    ray start --address HEAD:6379 --num-gpus 8 --resources '{"sm_100a": 8}'

Work placement:
  build    a Ray CPU task (num_cpus=1): build_candidate(), the same static build and census as locally. On
           another node than the driver it builds in a fresh folder and returns the folder packed; the driver
           unpacks it where the agent loop asked for it (so feedback and the store see the same files).
  verdict  a Ray task with num_gpus=1 and {arch.sm: 1}: an h100 verdict only lands on a node that declared
           sm_90a; one task per GPU slot at a time (and evaluate()'s own per-GPU lock on the node). It runs
           xlang.profiler.evaluate.evaluate() on the build, exactly as `--profiler local` does (same stages,
           same isolation), on the GPU Ray assigned (XLANG_GPUS). Off the driver's node the build travels packed.
  LLM      calls stay on the driver (the agent loop's threads); keys never leave it.
  store    only the driver writes the SQLite store, one turn per transaction, after its verdict came back:
           a task that dies leaves nothing in the store; resume after kill -9 is the agent loop's, as without Ray.

A task whose worker process or node dies is retried by Ray (max_retries=RETRIES, system failures only: a
candidate's own failure is a verdict, never a retry). A verdict that still cannot be had becomes a turn whose
runtime says why ("not run (the ray profiler failed: ...)"), as with any profiler failure.

XLANG_RAY_EVALUATOR="module:function" replaces evaluate() in the verdict task (tests and benchmarks:
f(source, lang, task, arch, shape, options) -> Verdict | dict).
"""

from __future__ import annotations

import importlib
import io
import json
import logging
import os
import shutil
import socket
import sys
import tarfile
import tempfile
import threading
import uuid
from collections import Counter
from pathlib import Path

from xlang.archs import archs, get_arch
from xlang.backend import CHILD_FOLDER, BuildResult, build_candidate
from xlang.errors import XlangError
from xlang.profiler import gpu as gpu_mod
from xlang.profiler.pipeline import Job
from xlang.runtimes import Runtime
from xlang.task import get_task
from xlang.untrusted import remove_untrusted_tree
from xlang.verdict import Verdict

RAY_PIN = "2.60.0"  # pyproject's xlang[ray]
RETRIES = 3  # per task, on worker or node death
EVALUATOR_ENV = "XLANG_RAY_EVALUATOR"
GPUS_ENV = "XLANG_GPUS"  # xlang.profiler.gpu: the GPU indices this process may use
LOCAL = "local"

_lock = threading.Lock()
_state: dict = {}


# --------------------------------------------------------------------------------------------- connecting


def require_ray():
    try:
        import ray  # lazy: absent on the GPU image and in a plain install (xlang[ray])
    except ImportError:
        raise XlangError(f"--ray needs Ray: python3 -m pip install 'xlang[ray]' (ray=={RAY_PIN})") from None
    return ray


def normalise_argv(argv: list[str]) -> list[str]:
    """`--ray` alone (last, or before another option) means a local Ray: `--ray=local`; `--ray ADDRESS` stays."""
    out = list(argv)
    for i, arg in enumerate(out):
        if arg == "--ray" and (i + 1 == len(out) or out[i + 1].startswith("-")):
            out[i] = f"--ray={LOCAL}"
    return out


def profiler_spec(address: str | None) -> str:
    """The agent loop's --profiler value for --ray [ADDRESS]: 'ray' (local) or 'ray:ADDRESS'."""
    return "ray" if not address or address == LOCAL else f"ray:{address}"


def address_of(spec: str) -> str:
    return spec[4:] if spec.startswith("ray:") else LOCAL


def local_resources(gpus=None) -> dict:
    """What this machine declares to Ray: its GPUs and, per architecture SM, how many of them run its code."""
    found = list(gpu_mod.gpus() if gpus is None else gpus)
    res: Counter = Counter()
    for g in found:
        for sm in sorted({a.sm for a in archs().values() if a.compute_capability == g["compute_capability"]}):
            res[sm] += 1
    return {"num_gpus": len(found), "resources": dict(res)}


# Joining a cluster is bounded (Ray's own defaults retry a dead address for minutes): these of Ray's settings
# are read when Ray is imported, so they are set, unless the user set them, before the first import.
JOIN_LIMITS = {"RAY_py_gcs_connect_timeout_s": "5", "RAY_gcs_rpc_server_connect_timeout_s": "2",
               "RAY_gcs_server_port_wait_time_s": "1",  # attempts of the driver's GCS connect (about 1 s each)
               "RAY_CLIENT_INITIAL_CONNECTION_TIMEOUT_S": "3", "RAY_CLIENT_MAX_CONNECTION_TIMEOUT_S": "3"}
PROBE_TIMEOUT_S = 3.0


def probe(address: str) -> None:
    """HOST:PORT or ray://HOST:PORT accepts a TCP connection, else one line at once (nothing listening, a host that
    does not resolve). A port that answers but is not Ray's is left to the bounded join."""
    hostport = address.removeprefix("ray://").split("/", 1)[0]
    host, sep, port = hostport.rpartition(":")
    if not sep or not port.isdigit():
        raise XlangError(f"--ray {address}: expected HOST:PORT, ray://HOST:PORT or auto")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=PROBE_TIMEOUT_S).close()
    except OSError as e:
        why = "does not resolve" if isinstance(e, socket.gaierror) else (e.strerror or type(e).__name__).lower()
        raise XlangError(f"--ray {address}: no Ray cluster answers there ({why})") from None


class _quiet_stderr:
    """Ray's C++ core prints its connection retries to file descriptor 2: keep them out of the one-line error
    (they are written out again when the join succeeds)."""

    def __enter__(self):
        sys.stderr.flush()
        self.saved, self.file = os.dup(2), tempfile.TemporaryFile()
        os.dup2(self.file.fileno(), 2)
        return self

    def __exit__(self, kind, *_):
        sys.stderr.flush()
        os.dup2(self.saved, 2)
        os.close(self.saved)
        self.file.seek(0)
        text = self.file.read()
        self.file.close()
        if kind is None and text:
            sys.stderr.write(text.decode(errors="replace"))
            sys.stderr.flush()
        return False


def connect(address: str | None = LOCAL) -> str:
    """Start (no address / 'local') or join (an address) Ray, once per process; returns a line describing it.
    Joining takes seconds, never minutes: an address that does not answer Ray is one line (XlangError)."""
    address = address or LOCAL
    if address != LOCAL and "ray" not in sys.modules:
        for key, value in JOIN_LIMITS.items():
            os.environ.setdefault(key, value)
    ray = require_ray()
    with _lock:
        if not ray.is_initialized():
            kwargs = dict(include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING)
            try:
                if address == LOCAL:
                    res = local_resources()
                    ray.init(num_gpus=res["num_gpus"], resources=res["resources"], **kwargs)
                else:
                    if address != "auto":
                        probe(address)
                    with _quiet_stderr():
                        ray.init(address=address, **kwargs)
            except XlangError:
                raise
            except Exception as e:  # noqa: BLE001 - Ray's own ConnectionError / RuntimeError / ValueError
                raise XlangError(f"--ray {address}: cannot {'start' if address == LOCAL else 'join'} Ray: "
                                 f"{str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__}") \
                    from None
            _state.update(address=address, driver_node=ray.get_runtime_context().get_node_id())
        elif "driver_node" not in _state:  # initialised by the caller (tests, a notebook)
            _state.update(address="existing", driver_node=ray.get_runtime_context().get_node_id())
        return describe()


def describe() -> str:
    ray = require_ray()
    res = ray.cluster_resources()
    sms = ", ".join(f"{k} ×{int(v)}" for k, v in sorted(res.items()) if k.startswith("sm_"))
    nodes = sum(1 for n in ray.nodes() if n.get("Alive"))
    return (f"Ray {_state.get('address', '?')} ({nodes} node{'s' if nodes != 1 else ''}, {int(res.get('CPU', 0))} CPUs, "
            f"{int(res.get('GPU', 0))} GPUs{': ' + sms if sms else ''})")


def gpu_slots() -> list[tuple[str, str]]:
    """(slot label, SM names) of every GPU the cluster declares, node by node: ('10.0.0.2 gpu 0', 'sm_90a')."""
    ray = require_ray()
    out = []
    for n in sorted((n for n in ray.nodes() if n.get("Alive")), key=lambda n: n.get("NodeManagerAddress", "")):
        res = n.get("Resources", {})
        sms = ",".join(sorted(k for k in res if k.startswith("sm_")))
        for i in range(int(res.get("GPU", 0))):
            out.append((f"{n.get('NodeManagerAddress', '?')} gpu {i}", sms or "no sm_* resource"))
    return out


def cluster_has(sm: str) -> bool:
    res = require_ray().cluster_resources()
    return res.get(sm, 0) >= 1 and res.get("GPU", 0) >= 1


# ------------------------------------------------------------------------------------------ build folders


def pack(build) -> bytes:
    """The build's folder as a tar.gz (what another node needs to load and judge it): the judge's files only,
    never the static-build child's own folder (whatever the candidate left there, links included)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        tar.add(build.workdir, arcname="build",
                filter=lambda info: None if info.name.split("/")[1:2] == [CHILD_FOLDER] else info)
    return buf.getvalue()


def unpack(data: bytes, build, dest: Path):
    """The packed build as folder dest (made here), with every path the result names moved there."""
    dest = Path(dest).resolve()
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".unpack-", dir=dest.parent))
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
            tar.extractall(tmp, filter="data")  # no links out, no absolute names, no devices
        if dest.exists():
            shutil.rmtree(dest)
        os.replace(tmp / "build", dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    text = json.dumps(build.to_dict()).replace(json.dumps(str(build.workdir))[1:-1], json.dumps(str(dest))[1:-1])
    moved = BuildResult.from_dict(json.loads(text))
    moved.workdir = str(dest)
    return moved


def _node() -> str:
    return require_ray().get_runtime_context().get_node_id()


def _load(spec: str):
    module, _, name = spec.partition(":")
    return getattr(importlib.import_module(module), name)


# ------------------------------------------------------------------------------------- what the tasks run


def build_job(code, lang, task, arch, shape, workdir, driver_node):
    """In a Ray CPU task: the static build. Returns (BuildResult, packed folder or None when on the driver's node)."""
    if _node() == driver_node:
        return build_candidate(code, lang, get_task(task), get_arch(arch), shape, workdir=Path(workdir)), None
    tmp = Path(tempfile.mkdtemp(prefix="xlang-ray-build-"))
    try:
        result = build_candidate(code, lang, get_task(task), get_arch(arch), shape, workdir=tmp / "build")
        return result, pack(result)
    finally:
        _remove(tmp)


def _remove(folder: Path) -> None:
    """A task's temporary folder, with the build child's and the runners' homes in it: whatever a candidate planted
    there (a folder chain thousands deep, links) removed without recursion or following a link."""
    try:
        remove_untrusted_tree(folder)
    except OSError:  # left behind rather than a failed task
        pass


def verdict_job(job_id, source, build, packed, job_spec, evaluator, driver_node, tracker):
    """In a Ray GPU task (num_gpus=1, {sm: 1}): the verdict on the GPU Ray assigned for the Job of job_spec
    (xlang.profiler.pipeline.Job.to_spec). Returns (verdict dict, slot)."""
    import ray  # a Ray task: Ray is there

    job = Job.from_spec(job_spec)
    lang, task, arch, shape = job.lang, job.task, job.arch, job.shape_dict

    ids = [str(int(i)) for i in ray.get_gpu_ids()]
    ip = ray.util.get_node_ip_address()
    slot = f"{ip} gpu {','.join(ids) or '?'}"
    if tracker is not None:
        tracker.start.remote(job_id, slot)
    before = os.environ.get(GPUS_ENV)
    os.environ[GPUS_ENV] = ",".join(ids)
    tmp = None
    options = job.options_dict
    try:
        task_obj, arch_obj = get_task(task), get_arch(arch)
        if evaluator:
            verdict = _load(evaluator)(source, lang, task_obj, arch_obj, shape, options)
        else:  # lazy: the judge's modules, needed only in a GPU task that judges here
            from xlang.profiler.evaluate import evaluate

            if _node() != driver_node or not Path(build.workdir).is_dir():
                tmp = Path(tempfile.mkdtemp(prefix="xlang-ray-eval-"))
                build = unpack(packed, build, tmp / "build") if packed else None
                options["workdir"] = str(tmp / "eval")
            else:  # as the local runtime: the evaluation's files beside the turn's build
                options.setdefault("workdir", str(Path(build.workdir) / "eval"))
            verdict = evaluate(build if build is not None else source, lang, task_obj, arch_obj, shape, options)
        return (verdict.to_dict() if isinstance(verdict, Verdict) else dict(verdict)), slot
    finally:
        if before is None:
            os.environ.pop(GPUS_ENV, None)
        else:
            os.environ[GPUS_ENV] = before
        if tmp is not None:
            _remove(tmp)


class _TrackerImpl:
    """A tiny actor: GPU tasks say when they start, the driver's progress display asks."""

    def __init__(self):
        self.started: dict = {}

    def start(self, job, slot):
        self.started[job] = slot

    def take(self) -> dict:
        out, self.started = self.started, {}
        return out


def _remotes() -> dict:
    with _lock:
        if "remotes" not in _state:
            ray = require_ray()
            _state["remotes"] = {
                "build": ray.remote(num_cpus=1, max_retries=RETRIES)(build_job),
                # max_calls=0: the worker process is reused (Ray's default for GPU tasks is a fresh process per
                # task, seconds each); the task never touches the GPU itself, evaluate()'s stages do.
                "verdict": ray.remote(num_cpus=0, num_gpus=1, max_calls=0, max_retries=RETRIES,
                                      retry_exceptions=False)(verdict_job),
                "tracker": ray.remote(num_cpus=0)(_TrackerImpl),
            }
        return _state["remotes"]


# --------------------------------------------------------------------------------------- driver side


class Monitor:
    """Queued / building / evaluating / done, per GPU slot, as the driver sees them (the progress display)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.building = 0
        self.queued: dict[str, str] = {}  # job -> label
        self.evaluating: dict[str, tuple[str, str]] = {}  # job -> (slot, label)
        self.done: Counter = Counter()  # slot -> verdicts
        self._tracker = None

    def tracker(self):
        with self.lock:  # one actor, whichever sample thread asks first
            if self._tracker is None:
                self._tracker = _remotes()["tracker"].remote()
            return self._tracker

    def poll(self) -> None:
        """Move the jobs whose GPU task has started from queued to evaluating."""
        if self._tracker is None:
            return
        try:
            started = require_ray().get(self._tracker.take.remote(), timeout=10)
        except Exception:  # noqa: BLE001 - the display never stops the work
            return
        with self.lock:
            for job, slot in started.items():
                if job in self.queued:
                    self.evaluating[job] = (slot, self.queued.pop(job))

    def snapshot(self) -> dict:
        with self.lock:
            return {"building": self.building, "queued": len(self.queued),
                    "evaluating": {slot: label for slot, label in self.evaluating.values()},
                    "done": dict(self.done)}


MONITOR = Monitor()


def ray_runtime(spec: str, arch):
    """The agent loop's Runtime for --ray: builds as CPU tasks; verdicts as GPU tasks when the cluster has a GPU
    declaring arch.sm, else not run (and why)."""
    where = connect(address_of(spec))
    ray = require_ray()
    remotes = _remotes()
    driver_node = _state["driver_node"]
    evaluator = os.environ.get(EVALUATOR_ENV) or None
    tracker = MONITOR.tracker()

    def build(code, lang, task, arch_, shape, workdir=None):
        workdir = Path(workdir or tempfile.mkdtemp(prefix=f"xlang-{lang}-{arch_.name}-")).resolve()
        with MONITOR.lock:
            MONITOR.building += 1
        try:
            result, packed = ray.get(remotes["build"].remote(code, lang, task.name, arch_.name, dict(shape),
                                                             str(workdir), driver_node))
        finally:
            with MONITOR.lock:
                MONITOR.building -= 1
        if packed is not None:  # built on another node: its folder comes here, where the loop asked for it
            result = unpack(packed, result, workdir)
        return result

    if not cluster_has(arch.sm):
        return Runtime("ray", False, f"not run (no {arch.sm} GPU in the Ray cluster)", build=build,
                       info={"ray": where})

    def evaluate(source, build_result, lang, task, arch_, shape, options):
        job = uuid.uuid4().hex
        label = f"{task.name} · {lang} · {arch_.name}"
        multi = sum(1 for n in ray.nodes() if n.get("Alive")) > 1
        packed = pack(build_result) if (multi and build_result is not None and evaluator is None) else None
        with MONITOR.lock:
            MONITOR.queued[job] = label
        try:
            spec = Job.of(task, lang, arch_, shape, (options or {}).get("require"), options).to_spec()
            ref = remotes["verdict"].options(resources={arch_.sm: 1}).remote(
                job, source, build_result, packed, spec, evaluator, driver_node, tracker)
            verdict, slot = ray.get(ref)
        finally:
            with MONITOR.lock:
                MONITOR.queued.pop(job, None)
                MONITOR.evaluating.pop(job, None)
        with MONITOR.lock:
            MONITOR.done[slot] += 1
        return verdict

    return Runtime("ray", True, evaluate=evaluate, build=build, info={"ray": where})


# -------------------------------------------------------------------------------------- progress display


def progress_lines(snapshot: dict, slots: list[tuple[str, str]]) -> list[str]:
    """One line per GPU slot (evaluating what, how many done) and one for the queue."""
    lines = [f"queued {snapshot['queued']} · building {snapshot['building']} · "
             f"evaluating {len(snapshot['evaluating'])} · done {sum(snapshot['done'].values())}"]
    for slot, sms in slots:
        what = snapshot["evaluating"].get(slot)
        lines.append(f"{slot} ({sms}): {'evaluating ' + what if what else 'idle'} · done {snapshot['done'].get(slot, 0)}")
    return lines


def main(args: list[str]) -> int:
    """`python -m xlang.scaleout resources`: the `ray start` options this node should declare."""
    if args[:1] != ["resources"]:
        print("usage: python -m xlang.scaleout resources", file=sys.stderr)
        return 2
    res = local_resources()
    print(f"--num-gpus {res['num_gpus']} --resources '{json.dumps(res['resources'])}'")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
