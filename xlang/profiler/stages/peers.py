"""Peers: public kernels of the task (Task.peers) timed beside the vendor when their packages are installed. In the
parent, what the judge is told of them (peer_specs) and what they add to the check stage's limit (check_limit); in
the judge, each timed in a process of its own after the vendor (time_peers). A peer never changes the verdict."""

from __future__ import annotations

import time

from xlang.profiler.options import EvalOptions
from xlang.profiler.stages.check import _observer
from xlang.profiler.stages.process import CandidateError, Outcome, Runner, RunnerGone, _last_line, _wait_alone
from xlang.profiler.stages.timing import _tflops, time_calls


def time_peers(ctx, shape: dict, candidate_ms: float, progress) -> dict:
    """Each peer of spec["peers"] (peer_specs: name, display, and why it is skipped, if it is) timed as the
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


def peer_not_run(peer: dict, reason: str) -> dict:
    return {"name": peer["name"], "display": peer.get("display", peer["name"]), "ran": False, "reason": reason}


def peer_record(task, shape: dict, peer: dict, timed: dict, candidate_ms: float, alone: dict | None = None) -> dict:
    """A peer that ran: its median, TFLOP/s, and the candidate's speedup against it (peer ms / candidate ms)."""
    ms = timed["stats"]["median_ms"]
    flops = task.flops(shape)
    return {"name": peer["name"], "display": peer.get("display", peer["name"]), "ran": True, "ms": ms,
            "tflops": _tflops(flops, ms),
            "gbps": task.min_bytes(shape) / (ms * 1e-3) / 1e9 if task.min_bytes is not None and ms > 0 else None,
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


def peer_specs(task, options: EvalOptions) -> list[dict]:
    """What the judge is told of the task's peers: name, display, and `skip` (why no process is to be started for
    it) where its package is not installed in this Python (found without importing it: well under a second) or
    peers are off. The judge's own runner still decides for the others (its load fails if the import does)."""
    out = []
    for peer in task.peers:
        skip = "skipped (--no-peers)" if not options.peers else peer.missing()
        out.append({"name": peer.name, "display": peer.display, **({"skip": skip} if skip else {})})
    return out


PEER_CLOSE_S = 30.0  # a peer's process is given this long to leave after its budget (Runner.close)


def check_limit(options: EvalOptions, peers: list[dict]) -> float:
    """The check stage's limit: its own, plus each peer's budget for the peers it is to start."""
    running = sum(1 for p in peers if not p.get("skip"))
    return options.check_timeout_s + running * (options.peer_timeout_s + PEER_CLOSE_S)
