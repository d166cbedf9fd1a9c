"""The remote GPU worker: `xlang worker` serves the profiler over HTTP on a GPU machine, and RemoteProfiler
is its client (used by `xlang compare --profiler URL` and the agent loop's `--profiler URL`).

Only the standard library is used (http.server, urllib, json, subprocess): the GPU machine's python has no
extra packages. Each job (one candidate evaluation) runs in its own process (`python -m xlang.remote
JOBDIR`), which calls the profiler's evaluate(); the jobs wait in one queue and each GPU takes one job at a
time. The server binds to loopback by default; bound anywhere else it requires a bearer token.

API (JSON bodies; `Authorization: Bearer TOKEN` when the worker has a token):
  GET  /v1/health            -> {api, gpus: [{index, name, compute_capability, ...}], archs: [...], queued, running}
  POST /v1/jobs              {source, lang, task, arch, shape?, options?} -> 202 {id, position}
  GET  /v1/jobs/ID?wait=S    -> {id, state: queued|running|done, verdict?}  (waits up to S s for 'done')
"""

from __future__ import annotations

import errno
import hmac
import ipaddress
import json
import os
import secrets
import shutil
import socket
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from xlang.errors import XlangError
from xlang.profiler.gpu import gpus as local_gpus
from xlang.profiler.gpu import gpus_for
from xlang.sandbox import run_child
from xlang.verdict import RUNTIME_ERROR, TIMEOUT, Verdict

API = "xlang-worker/1"
DEFAULT_PORT = 8765
TOKEN_ENV = "XLANG_WORKER_TOKEN"
# "module:function" called in the job process as f(source, lang, task, arch, shape, options) -> Verdict | dict.
EVALUATOR_ENV = "XLANG_WORKER_EVALUATOR"
DEFAULT_EVALUATOR = "xlang.profiler.evaluate:evaluate"
MAX_BODY = 8 << 20
JOB_TIMEOUT_S = 900.0  # a job process's hard limit unless options.timeout_s says otherwise (+60 s slack)
KEEP_DONE = 2000  # finished jobs remembered for their clients


# ----------------------------------------------------------------------------------------------- GPUs


def not_run_note(arch) -> str:
    return f"not run (no {arch.sm} device)"


# --------------------------------------------------------------------------------------------- server


@dataclass
class Job:
    id: str
    request: dict
    arch_cc: int
    state: str = "queued"
    verdict: dict | None = None
    submitted: float = field(default_factory=time.time)
    started: float | None = None
    finished: float | None = None
    gpu: int | None = None
    done: threading.Event = field(default_factory=threading.Event)


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class Worker:
    """The queue, one dispatcher thread per GPU, and a process per job."""

    def __init__(self, gpus: list[dict] | None = None, evaluator: str | None = None,
                 workdir: Path | None = None, python: str | None = None, slack_s: float = 60.0):
        self.slack_s = slack_s  # a job process gets options.timeout_s (the profiler's own limit) plus this
        self.gpus = list(local_gpus()) if gpus is None else gpus
        self.evaluator = evaluator or os.environ.get(EVALUATOR_ENV) or DEFAULT_EVALUATOR
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="xlang-worker-"))
        self.python = python or sys.executable
        self.jobs: dict[str, Job] = {}
        self.lock = threading.Lock()
        self.cond = threading.Condition(self.lock)
        self.pending: list[Job] = []  # FIFO; a GPU takes the first job whose arch it runs
        self.stopping = False
        self.threads = [threading.Thread(target=self._dispatch, args=(g,), daemon=True, name=f"gpu{g['index']}")
                        for g in self.gpus]
        for t in self.threads:
            t.start()

    # public -------------------------------------------------------------------------------------
    def archs(self) -> list[str]:
        from xlang.archs import archs

        return [a.name for a in archs().values() if gpus_for(a, self.gpus)]

    def health(self) -> dict:
        with self.lock:
            running = sum(1 for j in self.jobs.values() if j.state == "running")
            return {"api": API, "gpus": self.gpus, "archs": self.archs(), "queued": len(self.pending),
                    "running": running, "evaluator": self.evaluator}

    def submit(self, request: dict) -> Job:
        from xlang.archs import get_arch
        from xlang.backend import LANGS
        from xlang.task import task_names

        for key in ("source", "lang", "task", "arch"):
            if not isinstance(request.get(key), str) or not request[key]:
                raise ValueError(f"'{key}' (a string) is required")
        if request["lang"] not in LANGS:
            raise ValueError(f"unknown language '{request['lang']}'")
        if request["task"] not in task_names():
            raise ValueError(f"unknown task '{request['task']}'")
        try:
            arch = get_arch(request["arch"])
        except XlangError as e:
            raise ValueError(str(e)) from None
        if not gpus_for(arch, self.gpus):
            raise LookupError(f"{not_run_note(arch)} on this worker")
        for key in ("shape", "options"):
            if request.get(key) is not None and not isinstance(request[key], dict):
                raise ValueError(f"'{key}' must be an object")
        job = Job(uuid.uuid4().hex, request, arch.compute_capability)
        with self.cond:
            self.jobs[job.id] = job
            self.pending.append(job)
            self._forget_old()
            self.cond.notify_all()
        return job

    def get(self, job_id: str) -> Job | None:
        with self.lock:
            return self.jobs.get(job_id)

    def position(self, job: Job) -> int:
        with self.lock:
            return self.pending.index(job) if job in self.pending else -1

    def stop(self) -> None:
        with self.cond:
            self.stopping = True
            self.cond.notify_all()

    # inside -------------------------------------------------------------------------------------
    def _forget_old(self) -> None:
        done = [j for j in self.jobs.values() if j.state == "done"]
        for j in sorted(done, key=lambda j: j.finished or 0)[: max(0, len(done) - KEEP_DONE)]:
            del self.jobs[j.id]

    def _dispatch(self, gpu: dict) -> None:
        while True:
            with self.cond:
                job = None
                while job is None:
                    if self.stopping:
                        return
                    job = next((j for j in self.pending if j.arch_cc == gpu["compute_capability"]), None)
                    if job is None:
                        self.cond.wait(1.0)
                self.pending.remove(job)
                job.state, job.started, job.gpu = "running", time.time(), gpu["index"]
            verdict = self._run_job(job, gpu)
            with self.cond:
                job.verdict, job.state, job.finished = verdict, "done", time.time()
                job.done.set()
                self.cond.notify_all()

    def _run_job(self, job: Job, gpu: dict) -> dict:
        jobdir = self.workdir / job.id
        jobdir.mkdir(parents=True, exist_ok=True)
        (jobdir / "job.json").write_text(json.dumps({**job.request, "evaluator": self.evaluator}))
        limit = float((job.request.get("options") or {}).get("timeout_s", JOB_TIMEOUT_S)) + self.slack_s
        # Its own process group, killed whole at the limit, without our secrets (the token included).
        child = run_child([self.python, "-m", "xlang.remote", str(jobdir)], timeout=limit,
                          env={"CUDA_VISIBLE_DEVICES": str(gpu["index"])})
        timed_out, out = child.timed_out, child.stdout + child.stderr
        result = jobdir / "verdict.json"
        base = {"lang": job.request["lang"], "task": job.request["task"], "arch": job.request["arch"],
                "shape": job.request.get("shape") or {}}
        try:
            if result.is_file() and not timed_out:
                return json.loads(result.read_text())
            if timed_out:
                return Verdict(TIMEOUT, f"the worker's job process passed its {limit:.0f} s limit", **base).to_dict()
            tail = "\n".join((out or "").strip().splitlines()[-30:])
            return Verdict(RUNTIME_ERROR, f"the worker's job process ended with code {child.returncode} "
                           f"after {child.seconds:.1f} s without a verdict:\n{tail}", **base).to_dict()
        finally:
            shutil.rmtree(jobdir, ignore_errors=True)


def _handler(worker: Worker, token: str | None):
    class Handler(BaseHTTPRequestHandler):
        server_version = "xlang-worker"
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt, *args):  # one line per request on stderr, no bodies
            sys.stderr.write(f"[{time.strftime('%H:%M:%S')}] {self.address_string()} {fmt % args}\n")

        def _send(self, code: int, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _authorised(self) -> bool:
            if not token:
                return True
            given = self.headers.get("Authorization", "")
            if given.startswith("Bearer ") and hmac.compare_digest(given[7:].encode(), token.encode()):
                return True
            self._send(401, {"error": "a valid 'Authorization: Bearer TOKEN' header is required"})
            return False

        def do_GET(self):
            if not self._authorised():
                return
            url = urllib.parse.urlparse(self.path)
            parts = [p for p in url.path.split("/") if p]
            if parts == ["v1", "health"]:
                return self._send(200, worker.health())
            if len(parts) == 3 and parts[:2] == ["v1", "jobs"]:
                job = worker.get(parts[2])
                if job is None:
                    return self._send(404, {"error": f"no job {parts[2]}"})
                query = urllib.parse.parse_qs(url.query)
                try:
                    wait = min(float(query.get("wait", ["0"])[0]), 120.0)
                except ValueError:
                    wait = 0.0
                if wait > 0:
                    job.done.wait(wait)
                body = {"id": job.id, "state": job.state, "gpu": job.gpu}
                if job.state == "queued":
                    body["position"] = worker.position(job)
                if job.state == "done":
                    body["verdict"] = job.verdict
                    body["seconds"] = round((job.finished or 0) - (job.started or 0), 3)
                return self._send(200, body)
            self._send(404, {"error": f"no such path {url.path}"})

        def do_POST(self):
            if not self._authorised():
                return
            if urllib.parse.urlparse(self.path).path.rstrip("/") != "/v1/jobs":
                return self._send(404, {"error": f"no such path {self.path}"})
            try:
                length = int(self.headers.get("Content-Length", "0"))
            except ValueError:
                length = -1
            if length < 0 or length > MAX_BODY:
                return self._send(413, {"error": f"body must be at most {MAX_BODY} bytes"})
            try:
                request = json.loads(self.rfile.read(length) or b"{}")
                if not isinstance(request, dict):
                    raise ValueError("the body must be a JSON object")
                job = worker.submit(request)
            except LookupError as e:
                return self._send(422, {"error": str(e)})
            except ValueError as e:
                return self._send(400, {"error": str(e)})
            self._send(202, {"id": job.id, "position": worker.position(job)})

    return Handler


def make_server(host: str = "127.0.0.1", port: int = DEFAULT_PORT, token: str | None = None,
                worker: Worker | None = None) -> tuple[ThreadingHTTPServer, Worker]:
    """The HTTP server (not yet serving) and its worker. Bound beyond loopback, a token is required."""
    if not _is_loopback(host) and not token:
        raise XlangError(f"binding to {host} (not loopback) needs a token: pass --token or set {TOKEN_ENV}")
    if not 0 <= port <= 65535:
        raise XlangError(f"port {port} is not a port number (0-65535; 0: any free port)")
    try:  # the address first: a worker (its GPU threads) is started only once the port is ours
        server = ThreadingHTTPServer((host, port), _handler(None, token), bind_and_activate=False)
        server.server_bind()
        server.server_activate()
    except socket.gaierror as e:
        server.server_close()
        raise XlangError(f"cannot bind to {host}: the name does not resolve ({e.strerror or e})") from None
    except OSError as e:
        server.server_close()
        why = "already in use" if e.errno == errno.EADDRINUSE else (e.strerror or str(e))
        raise XlangError(f"cannot bind to {host}:{port}: {why}") from None
    worker = worker or Worker()
    server.RequestHandlerClass = _handler(worker, token)
    server.daemon_threads = True
    return server, worker


def serve(host: str = "127.0.0.1", port: int = DEFAULT_PORT, token: str | None = None, log=print) -> None:
    if not local_gpus():
        raise XlangError("no NVIDIA GPU here (nvidia-smi / NVML found none): a worker serves GPU evaluations; "
                         "start it on the GPU machine")
    server, worker = make_server(host, port, token)
    addr = f"http://{host}:{server.server_address[1]}"
    gpus = ", ".join(f"{g['index']}: {g['name']} (sm_{g['compute_capability']})" for g in worker.gpus) or "none"
    log(f"xlang worker on {addr}  GPUs: {gpus}  archs: {', '.join(worker.archs()) or 'none'}"
        f"  token: {'required' if token else 'none (loopback only)'}")
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        worker.stop()
        server.server_close()


# ------------------------------------------------------------------------------------- job process


def _load(spec: str):
    import importlib

    module, _, name = spec.partition(":")
    return getattr(importlib.import_module(module), name)


def main(args: list[str]) -> int:
    """In the job's own process: evaluate the candidate and write verdict.json beside job.json."""
    from xlang.archs import get_arch
    from xlang.task import get_task

    jobdir = Path(args[0])
    job = json.loads((jobdir / "job.json").read_text())
    task, arch = get_task(job["task"]), get_arch(job["arch"])
    shape = task.shape(job.get("shape") or None)
    evaluate = _load(job["evaluator"])
    # The options travel as JSON; the profiler takes a dict (xlang.profiler.evaluate.coerce_options).
    verdict = evaluate(job["source"], job["lang"], task, arch, shape, job.get("options") or {})
    data = verdict.to_dict() if isinstance(verdict, Verdict) else dict(verdict)
    tmp = jobdir / "verdict.json.tmp"
    tmp.write_text(json.dumps(data))
    os.replace(tmp, jobdir / "verdict.json")
    return 0


# -------------------------------------------------------------------------------------------- client


class RemoteProfiler:
    """Client of an `xlang worker`: evaluate() sends a candidate's source and waits for its Verdict."""

    def __init__(self, url: str, token: str | None = None, timeout_s: float = 3600.0):
        parsed = urllib.parse.urlparse(url if "://" in url else f"http://{url}")
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise XlangError(f"bad worker URL '{url}' (expected http://HOST:PORT)")
        self.url = f"{parsed.scheme}://{parsed.netloc}".rstrip("/")
        self.token = token if token is not None else os.environ.get(TOKEN_ENV)
        self.timeout_s = timeout_s
        self._health: dict | None = None

    def _call(self, method: str, path: str, body: dict | None = None, timeout: float = 60.0) -> dict:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method)
        req.add_header("Content-Type", "application/json")
        if self.token:
            req.add_header("Authorization", f"Bearer {self.token}")
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                return json.loads(resp.read())
        except urllib.error.HTTPError as e:
            try:
                msg = json.loads(e.read()).get("error", "")
            except Exception:  # noqa: BLE001 - any unreadable body
                msg = ""
            raise XlangError(f"worker {self.url}{path}: HTTP {e.code} {msg}".rstrip()) from None
        except (urllib.error.URLError, OSError) as e:
            raise XlangError(f"worker {self.url} unreachable: {getattr(e, 'reason', e)}") from None

    def health(self, refresh: bool = False) -> dict:
        if self._health is None or refresh:
            self._health = self._call("GET", "/v1/health", timeout=20)
        return self._health

    def supports(self, arch) -> bool:
        return arch.name in self.health().get("archs", [])

    def describe(self) -> str:
        gpus = self.health().get("gpus", [])
        return f"{self.url} ({', '.join(g['name'] for g in gpus) or 'no GPU'})"

    def submit(self, source: str, lang: str, task, arch, shape: dict | None = None,
               options: dict | None = None) -> str:
        body = {"source": source, "lang": lang, "task": getattr(task, "name", task),
                "arch": getattr(arch, "name", arch), "shape": shape or None, "options": options or {}}
        return self._call("POST", "/v1/jobs", body)["id"]

    def wait(self, job_id: str, poll_s: float = 30.0) -> Verdict:
        deadline = time.monotonic() + self.timeout_s
        while True:
            body = self._call("GET", f"/v1/jobs/{job_id}?wait={poll_s:g}", timeout=poll_s + 30)
            if body["state"] == "done":
                return Verdict.from_dict(body["verdict"])
            if time.monotonic() > deadline:
                raise XlangError(f"worker {self.url}: job {job_id} not done after {self.timeout_s:.0f} s")

    def evaluate(self, source, lang: str, task, arch, shape: dict | None = None,
                 options: dict | None = None) -> Verdict:
        if isinstance(source, Path):
            source = source.read_text()
        return self.wait(self.submit(source, lang, task, arch, shape, options))

    __call__ = evaluate


def new_token() -> str:
    return secrets.token_urlsafe(24)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
