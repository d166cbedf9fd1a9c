"""The candidate's side of an evaluation: `python -m xlang.profiler.runner FD DEVICE`, started by the judge in a
jail (with DEVICE cuda it imports torch at once, touching no GPU until the hello).

It loads the candidate (or, for the vendor baseline and the task's peers, their calls: the same protocol, so all
are observed and timed the same way), maps the buffers the judge shares, and calls the entry point when told.
Nothing here is trusted: the judge decides every verdict from what it reads itself (outputs, its own
clocks, the CUPTI observer's records, the tools' reports); this process only says "done" or why not, and
that text is used as feedback, never as evidence.

Protocol: one JSON message per SOCK_SEQPACKET datagram (file descriptors ride along with `map`):
  judge -> runner  {"op": "hello", "device": "cuda"|"cpu", "lang": L, "load": PATH} | {"op": "vendor", "task": T}
                   | {"op": "peer", "task": T, "peer": NAME}
                   {"op": "map", "set": ID, "buffers": [BufferMeta...]} + one fd per buffer
                   {"op": "call", "set": ID, "sizes": [...], "nvtx": NAME?, "primer": BOOL?}
                   {"op": "unmap", "set": ID}    {"op": "exit"}
  runner -> judge  {"op": "ready"} | {"op": "mapped"} | {"op": "done"} | {"op": "error", "detail": TEXT}
"""

from __future__ import annotations

import json
import os
import socket
import sys

from xlang import resources

resources.forget_editable_checkout()  # before anything of the candidate's side is imported

MAX_MESSAGE = 1 << 20
MAX_FDS = 64


def send(sock: socket.socket, message: dict, fds: list[int] | None = None) -> None:
    data = json.dumps(message, default=str).encode()
    if len(data) > MAX_MESSAGE:
        data = json.dumps({"op": message.get("op", "error"), "detail": "message too long"}).encode()
    if fds:
        socket.send_fds(sock, [data], fds)
    else:
        sock.send(data)


def receive(sock: socket.socket) -> tuple[dict, list[int]]:
    data, fds, _flags, _addr = socket.recv_fds(sock, MAX_MESSAGE, MAX_FDS)
    if not data:
        raise EOFError("the other side closed the connection")
    return json.loads(data), list(fds)


def _sync(device: str) -> None:
    if device == "cuda":
        import torch

        torch.cuda.synchronize()


def _primer(tensor):
    """Before a timed call: one tiny kernel, finished before the call starts, that the judge leaves out of the
    call's span (judge/timing.py without_primer). Under the CUPTI observer the first launch after a flush of its records
    is followed by ~0.8 ms in which the host launches nothing (where, in CUPTI or in our callbacks, was not
    found): on the H200 (2026-12-01) backward calls of 3 kernels idled 0.6-0.9 ms after their first, whether
    launched through cudaLaunchKernel (cuda_ptx, CuTe DSL) or the driver API (Triton); cuDNN's did not. That
    launch is now this one. FA4's calls still idle ~0.8 ms after their first kernel (not explained)."""
    import torch

    if tensor is None:
        tensor = torch.empty(1, device="cuda")
    tensor.fill_(0.0)
    torch.cuda.synchronize()
    return tensor


def _load_candidate(hello: dict):
    from xlang.backend import BuildResult, get_backend

    build = BuildResult(True, hello["lang"], "", "", {}, os.path.dirname(hello["load"]), load_path=hello["load"])
    return get_backend(hello["lang"]).load_entry(build), {hello["load"], os.path.realpath(hello["load"])}


def _baseline_entry(task, make_call):
    """A baseline (the vendor's, or a peer's) as an entry point over the judge's buffers (inputs first, outputs
    after): make_call(inputs, shape) -> a call, made once per buffer set (its setup is not timed)."""
    names = [t.name for t in task.contract.tensors]
    n_in = len(task.contract.inputs)
    cache: dict = {}

    def entry(*args):
        tensors = dict(zip(names, args[: len(names)]))
        shape = dict(zip(task.contract.sizes, args[len(names):]))
        key = tuple(t.data_ptr() for t in args[: len(names)])
        if key not in cache:
            cache.clear()
            cache[key] = make_call({k: tensors[k] for k in names[:n_in]}, shape)
        cache[key]()

    return entry


def _vendor_entry(task_name: str):
    from xlang.task import get_task

    task = get_task(task_name)
    return _baseline_entry(task, task.baseline)


def _peer_entry(task_name: str, peer_name: str):
    """A peer of the task; its package is imported now, so a missing or broken install is a load error."""
    from xlang.task import get_task

    task = get_task(task_name)
    peer = task.peer(peer_name)
    peer.load()
    return _baseline_entry(task, peer.call)


def _load(hello: dict):
    """(entry, the candidate's files for tracebacks) for any hello: the candidate, the vendor or a peer."""
    if hello["op"] == "vendor":
        return _vendor_entry(hello["task"]), set()
    if hello["op"] == "peer":
        return _peer_entry(hello["task"], hello["peer"]), set()
    return _load_candidate(hello)


def serve(sock: socket.socket) -> None:
    from xlang.candidate import candidate_trace

    from xlang.profiler.buffers import Mapped

    hello, _ = receive(sock)
    device = hello.get("device", "cuda")
    if device == "cuda":
        import torch

        torch.cuda.init()
        torch.empty(1, device="cuda")  # the primary context, current on this thread, before any mapping
    files: set = set()
    try:
        entry, files = _load(hello)
    except BaseException as e:  # noqa: BLE001 - the candidate's (or a peer's) import failed: tell the judge why
        what = {"vendor": "the vendor baseline", "peer": f"the peer {hello.get('peer')}"}.get(hello["op"], "the candidate")
        send(sock, {"op": "error", "detail": f"loading {what} failed:\n" + candidate_trace(e, files)})
        return
    send(sock, {"op": "ready"})
    sets: dict = {}
    primer = None
    while True:
        msg, fds = receive(sock)
        op = msg.get("op")
        if op == "map":
            sets[msg["set"]] = [Mapped(meta, fd) for meta, fd in zip(msg["buffers"], fds)]
            send(sock, {"op": "mapped"})
        elif op == "unmap":
            for m in sets.pop(msg["set"], []):
                m.close()
            send(sock, {"op": "unmapped"})
        elif op == "call":
            args = [m.tensor for m in sets[msg["set"]]] + list(msg["sizes"])
            nvtx = msg.get("nvtx") if device == "cuda" else None  # the call Nsight Compute is to profile
            try:
                if msg.get("primer") and device == "cuda":
                    primer = _primer(primer)
                if nvtx:
                    import torch

                    torch.cuda.nvtx.range_push(nvtx)
                try:
                    entry(*args)
                    _sync(device)
                finally:
                    if nvtx:
                        torch.cuda.nvtx.range_pop()
            except BaseException as e:  # noqa: BLE001 - the candidate's own failure, as feedback
                send(sock, {"op": "error", "detail": candidate_trace(e, files)})
                continue
            send(sock, {"op": "done"})
        elif op == "exit":
            return


def probe(device: str, nvtx: str) -> int:
    """What the judge runs under a tool to find the jail the tool works in (judge/process.py tool_jail_variant): one
    kernel, inside the NVTX range Nsight Compute's filter names. No candidate code."""
    if device == "cuda":
        import torch

        if nvtx:
            torch.cuda.nvtx.range_push(nvtx)
        torch.ones(256, device="cuda").add_(1.0)
        torch.cuda.synchronize()
        if nvtx:
            torch.cuda.nvtx.range_pop()
    print("xlang probe: ok")
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["probe"]:
        code = probe(argv[1], argv[2] if len(argv) > 2 else "")
        sys.stdout.flush()
        os._exit(code)
    sock = socket.socket(fileno=int(argv[0]))
    if argv[1:2] == ["cuda"]:
        import torch  # noqa: F401 - while the judge prepares (no CUDA call: no GPU context before the hello)
    try:
        serve(sock)
    except (EOFError, ConnectionError, BrokenPipeError):
        pass
    sys.stdout.flush()
    os._exit(0)  # no interpreter teardown: a candidate's broken CUDA state can hang at exit


if __name__ == "__main__":
    main(sys.argv[1:])
